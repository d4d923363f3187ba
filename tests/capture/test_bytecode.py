"""graphjit.capture.bytecode: the normalized stream (goldens per version) and assemble(read(f)) == f.

Run on every supported Python: `python -m pytest tests/capture/test_bytecode.py -q`.
The package is loaded from its files, so this test imports neither graphjit/__init__ nor torch.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import pathlib
import sys
import types

import pytest


def _load_package(name: str = "_graphjit_bytecode_under_test"):
    path = pathlib.Path(__file__).resolve().parents[2] / "graphjit" / "capture" / "bytecode" / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[str(path.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


B = _load_package()
PY = sys.version_info[:2]


def ops(fn_or_code) -> list[tuple[str, object]]:
    code = getattr(fn_or_code, "__code__", fn_or_code)
    return [(i.opname, i.argval) for i in B.read(code)]


def names(fn) -> list[str]:
    return [op for op, _ in ops(fn)]


def contains_run(seq: list, run: list) -> bool:
    return any(seq[k : k + len(run)] == run for k in range(len(seq) - len(run) + 1))


def all_codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from all_codes(const)


# ---------------------------------------------------------------------------------------------
# The corpus: small functions covering the language; each with argument tuples to run it on.

G = 0


def f_loop(xs):
    t = 0
    for x in xs:
        if x > 5:
            break
        if x == 2:
            continue
        t += x
    else:
        t = -t
    return t


def f_while(n):
    i, acc = 0, []
    while i < n:
        i += 1
        if i % 3:
            acc.append(i)
    while True:
        n -= 1
        if n < 0:
            break
    return acc, n


def f_nested_loops(n):
    out = []
    for i in range(n):
        for j in range(i):
            if (i + j) % 4 == 0:
                continue
            out.append((i, j))
    return out


def _gen_range(n):
    for i in range(n):
        yield i


def f_for_over_generator(n):
    total = 0
    for x in _gen_range(n):  # FOR_ITER_GEN once specialized (3.12+): executes END_FOR
        total += x
    return total


def f_comprehensions(y):
    a = [x * 2 for x in y if x]
    b = {x: x % 3 for x in y}
    c = {x % 2 for x in y}
    d = list(x + 1 for x in y)
    e = [[i * j for j in y] for i in y]
    return a, b, c, d, e, sum(x for x in y)


def f_comprehension_captured(y):
    fns = [lambda: x for x in y]
    x = "outer"
    return [fn() for fn in fns], x


def f_closure(a):
    b = 1

    def inner(c):
        nonlocal b
        b += c
        return a + b

    inner(10)
    return inner(a), b


def f_calls(a, b):
    def callee(*args, k=0, **kw):
        return args, k, sorted(kw.items())

    o = types.SimpleNamespace(m=callee)
    return (callee(a, b, k=1), callee(*a, **b), callee(a, k=2, z=3), o.m(b=a), len(a), max(a, default=0))


def f_fstrings(x, w):
    return f"{x!r:>{w}}|{x}|{x!s}|{x!a}|{x:>{w}}|{w:03d}|{x=}"


def f_try(a):
    try:
        r = a[1:3]
    except (KeyError, TypeError) as e:
        r = repr(e)
    except Exception:
        r = "other"
    else:
        r = r * 2
    finally:
        a[1:3] = [9, 9]
    return r


def f_try_return(a):
    try:
        if a:
            return "try"
        raise ValueError(a)
    except ValueError:
        return "except"
    finally:
        a.append("finally")


class _Suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def f_with(fail):
    log = []
    with _Suppress() as s:
        log.append(type(s).__name__)
        if fail:
            raise ValueError
        log.append("body")
    return log


def f_make_function(a, b=1, *, c=2):
    def g(x: int = a, *, y=b) -> int:
        return x + y + c

    return g(), g(10, y=5), g.__annotations__ == {"x": int, "return": int}


def f_global():
    global G
    G = G + 1
    return G


def f_unpack(a):
    x, *y, z = a
    p, q = q, p = 1, 2
    (m, n), o = (a[0], a[1]), a[2]
    return x, y, z, p, q, m, n, o, not a, -a[0], +a[0], ~a[0]


def f_compare(a, b):
    return (a < b, a <= b, a == b, a != b, a > b, a >= b, a is b, a is not b, a in [b], a not in [b],
            a < b < 10, (a == b) if a else 0)


def f_boolops(a, b):
    x = a and b
    y = a or b
    if not a or b is None:
        return x, y
    while a:
        a -= 1
    return -x, y


def f_truthiness(a):
    t = []
    if a:
        t.append("if")
    if not a:
        t.append("if not")
    while a:
        t.append("while")
        break
    return t, not a, not not a, bool(a) and "and", a or "or"


class _WeirdEq:
    def __init__(self, result):
        self.result = result

    def __eq__(self, other):
        return self.result  # not a bool: truth tests must call bool() on it, values must keep it


def f_compare_values(a, b):
    t = []
    if a == b:
        t.append("eq")
    if not a == b:
        t.append("not eq")
    return t, a == b, not not (a == b), not (a == b)


_FAR_JUMP = "def f_far_jump(a):\n    t = 0\n    if a:\n" + "        t += 1\n" * 300 + "    return t, not not a\n"
exec(_FAR_JUMP)  # the jump over 300 statements needs EXTENDED_ARG (between 3.13's TO_BOOL and the jump)


def f_binops(a, b):
    r = [a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, a << 1, a >> 1, a & b, a | b, a ^ b]
    c = a
    c += b; c -= 1; c *= 2; c //= 3; c %= 100; c **= 2; c <<= 1; c >>= 1; c &= 255; c |= 1; c ^= 3
    c /= 2
    return r, c


def f_star(a, b):
    return (*a, *b), [*a], {**b}, {*a}, (*a,)


def f_dels(a):
    del a[0]
    b = 1
    del b
    ns = types.SimpleNamespace(x=1)
    del ns.x
    return a, vars(ns)


def f_unbound(c):
    if c:
        x = 1
    return x  # noqa: F821 - UnboundLocalError when c is falsy


def f_deleted_arg(a):
    del a
    return a  # noqa: F821


def f_match(v):
    match v:
        case [1, *rest]:
            return ("list", rest)
        case {"k": k}:
            return ("dict", k)
        case types.SimpleNamespace(x=x):
            return ("ns", x)
        case int(n) if n > 3:
            return ("int", n)
        case _:
            return "other"


def f_assert_import(x):
    import math

    assert x >= 0, "negative"
    return math.sqrt(x)


def f_class_def(v):
    class Local:
        attr = v

        def get(self):
            return __class__.__name__, self.attr

    return Local().get()


def f_class_namespace_first(v):
    class Local:
        locals()["v"] = "class namespace"  # a class body reads free variables from its namespace first
        got = v

    return Local.got


class _Base:
    def f(self, x):
        return ("base", x)

    attr = "base-attr"


class _Child(_Base):
    def f(self, x):
        return ("child", super().f(x), super().attr, super(_Child, self).f(x + 1))


def f_super(x):
    return _Child().f(x)


def f_lambda_defaults(a):
    g = lambda x, y=a, *args, z=3, **kw: (x, y, args, z, kw)  # noqa: E731
    return g(1), g(1, 2, 3, z=4, w=5)


def f_except_star(n):
    caught = []
    try:
        raise ExceptionGroup("g", [ValueError(n), TypeError(n)])
    except* ValueError as e:
        caught.append(("v", len(e.exceptions)))
    except* TypeError:
        caught.append("t")
    return caught


def g_yield(n):
    x = yield 1
    yield from range(n)
    try:
        yield x
    finally:
        yield "finally"
    return "done"


def g_delegate(n):
    r = yield from g_yield(n)
    yield r


def g_catcher(log):
    try:
        while True:
            try:
                yield "ready"
            except KeyError:
                yield "caught"
    finally:
        log.append("inner closed")


def g_outer(log):
    yield from g_catcher(log)


async def _answer():
    return 42


async def c_await(x):
    return (await _answer()) + x


CASES = [
    (f_loop, [([1, 2, 3],), ([1, 7, 2],), ([],)]),
    (f_while, [(7,), (0,)]),
    (f_nested_loops, [(6,)]),
    (f_for_over_generator, [(300,)] * 50),
    (f_comprehensions, [([0, 1, 2, 3],)]),
    (f_comprehension_captured, [([1, 2],)]),
    (f_closure, [(3,)]),
    (f_calls, [([1, 2], {"q": 3})]),
    (f_fstrings, [("ab", 6), (3.5, 8)]),
    (f_try, [([0, 1, 2, 3],), ({},), (None,), (5,)]),
    (f_try_return, [([],), ([0],)]),
    (f_with, [(False,), (True,)]),
    (f_make_function, [(1,), (5, 6)]),
    (f_global, [()]),
    (f_unpack, [([1, 2, 3, 4],), ((5, 6, 7),)]),
    (f_compare, [(1, 2), (2, 2), (3, 1), (0, 0)]),
    (f_boolops, [(0, 2), (3, None), (3, 4)]),
    (f_truthiness, [([],), ([0],), (0,), (2,), ("",), ("s",), (None,), (0.0,), (types.SimpleNamespace(),)]),
    (f_compare_values, [(_WeirdEq([]), 1), (_WeirdEq([0]), 1), (_WeirdEq(0), 1), (1, 1), (1, 2)]),
    (f_far_jump, [(0,), (1,)]),  # noqa: F821 - made by exec above
    (f_binops, [(7, 3), (100, 7)]),
    (f_star, [((1, 2), {"a": 1})]),
    (f_dels, [([1, 2, 3],)]),
    (f_unbound, [(True,), (False,)]),
    (f_deleted_arg, [(1,)]),
    (f_match, [([1, 2, 3],), ({"k": 5},), (types.SimpleNamespace(x=9),), (7,), (2,), ("s",)]),
    (f_assert_import, [(4.0,), (-1,)]),
    (f_class_def, [(3,)]),
    (f_class_namespace_first, [("closure",)]),
    (f_super, [(1,)]),
    (f_lambda_defaults, [(9,)]),
    (f_except_star, [(1,)]),
]
GENERATOR_CASES = [(g_yield, (3,)), (g_delegate, (2,))]
ALL_FUNCTIONS = [fn for fn, _ in CASES] + [fn for fn, _ in GENERATOR_CASES] + [g_outer, c_await]


def roundtrip_code(code: types.CodeType) -> types.CodeType:
    """assemble(read(code)), nested code objects (lambdas, classes, 3.11 comprehensions) included."""
    instrs = B.read(code)
    for ins in instrs:
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, types.CodeType):
            ins.argval = roundtrip_code(ins.argval)
    return B.assemble(instrs, template=code, exception_entries=B.exception_table(code))


def roundtrip(fn):
    clone = types.FunctionType(roundtrip_code(fn.__code__), fn.__globals__, fn.__name__, fn.__defaults__,
                               fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


def outcome(thunk):
    try:
        return "ok", thunk()
    except Exception as e:  # the same exception, with the same message, is part of the behaviour
        return "raised", type(e), str(e)


# ---------------------------------------------------------------------------------------------
# Structure of the normalized stream, on every corpus function and nested code object.

_NEVER = {"RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PRECALL", "TO_BOOL", "COPY_FREE_VARS", "KW_NAMES",
          "RETURN_CONST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
          "STORE_FAST_STORE_FAST", "BINARY_SLICE", "STORE_SLICE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC",
          "LOAD_CLASSDEREF", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE",
          "JUMP_NO_INTERRUPT", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "END_FOR",
          "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"}


@pytest.mark.parametrize("fn", ALL_FUNCTIONS, ids=lambda fn: fn.__name__)
def test_stream_is_well_formed(fn):
    for code in all_codes(fn.__code__):
        instrs = B.read(code)
        assert not {i.opname for i in instrs} & _NEVER
        offsets = [i.offset for i in instrs]
        assert offsets == sorted(offsets)
        targets = set()
        for i in instrs:
            if i.target is not None:
                assert 0 <= i.target < len(instrs), B.format_instructions(instrs)
                targets.add(i.target)
        for e in B.exception_table(code):
            assert 0 <= e.start < e.end <= len(instrs) and 0 <= e.target < len(instrs)
            targets.add(e.target)
        assert {k for k, i in enumerate(instrs) if i.is_jump_target} == targets
        for k, i in enumerate(instrs):
            if i.opname == "CALL_KW":
                assert instrs[k - 1].opname == "LOAD_CONST" and isinstance(instrs[k - 1].argval, tuple)
            if i.opname == "BINARY_OP":
                assert isinstance(i.argval, str)
            if i.opname == "FOR_ITER":  # lands past the cleanup: never on a bare POP_TOP of the iterator
                assert instrs[i.target].opname not in ("END_FOR", "POP_TOP") or PY < (3, 12)


def test_method_call_with_keywords_is_identical_on_all_versions():
    def f(a, b):
        return a.foo(b, k=1)

    assert ops(f) == [("LOAD_FAST", "a"), ("LOAD_METHOD", "foo"), ("LOAD_FAST", "b"), ("LOAD_CONST", 1),
                      ("LOAD_CONST", ("k",)), ("CALL_KW", 2), ("RETURN_VALUE", None)]


def test_global_call_null_position():
    def f(x):
        return len(x)

    null_then_global = [("PUSH_NULL", None), ("LOAD_GLOBAL", "len")]
    expected = null_then_global if B.NULL_BEFORE_CALLABLE else null_then_global[::-1]
    assert ops(f) == expected + [("LOAD_FAST", "x"), ("CALL", 1), ("RETURN_VALUE", None)]
    assert B.NULL_BEFORE_CALLABLE == (PY < (3, 13))
    assert B.PY_VERSION_TAG == f"{PY[0]}.{PY[1]}"


def test_for_loop_is_identical_on_all_versions():
    def f(xs):
        t = 0
        for x in xs:
            t += x
        return t

    instrs = B.read(f.__code__)
    assert [(i.opname, i.argval, i.target) for i in instrs] == [
        ("LOAD_CONST", 0, None), ("STORE_FAST", "t", None), ("LOAD_FAST", "xs", None), ("GET_ITER", None, None),
        ("FOR_ITER", None, 11), ("STORE_FAST", "x", None), ("LOAD_FAST", "t", None), ("LOAD_FAST", "x", None),
        ("BINARY_OP", "+=", None), ("STORE_FAST", "t", None), ("JUMP", None, 4),
        ("LOAD_FAST", "t", None), ("RETURN_VALUE", None, None)]
    assert instrs[4].is_jump_target and instrs[11].is_jump_target and not instrs[5].is_jump_target
    listing = B.format_instructions(instrs)
    assert "FOR_ITER" in listing and "-> 11" in listing and ">>" in listing
    assert repr(instrs[2]).split() == [str(instrs[2].lineno), "LOAD_FAST", "xs"]


def test_inlined_comprehension():
    def f(y):
        return [x * 2 for x in y]

    instrs = B.read(f.__code__)
    names_ = [i.opname for i in instrs]
    if PY >= (3, 12):  # PEP 709: inlined, with the iteration variable saved and restored
        assert ("LOAD_FAST_AND_CLEAR", "x") in ops(f)
        for_iter = instrs[names_.index("FOR_ITER")]
        assert instrs[for_iter.target].opname == "SWAP"  # END_FOR (and 3.13's POP_TOP) skipped
        (entry,) = B.exception_table(f.__code__)
        assert instrs[entry.target].opname == "SWAP" and entry.depth == 2
    else:
        assert names_[:3] == ["LOAD_CONST", "MAKE_FUNCTION", "LOAD_FAST"]
        assert names(B.read(f.__code__)[0].argval)[:3] == ["BUILD_LIST", "LOAD_FAST", "FOR_ITER"]


def test_captured_comprehension_variable_keeps_its_mid_function_make_cell():
    instrs = ops(f_comprehension_captured)
    if PY >= (3, 12):
        assert contains_run(instrs, [("LOAD_FAST_AND_CLEAR", "x"), ("MAKE_CELL", "x")])
        assert ("LOAD_CLOSURE", "x") in instrs


def test_closure_and_function_attributes():
    def f(a):
        b = 1

        def inner(c: int = a, *, d=b):
            return a + b

        return inner

    instrs = ops(f)
    assert "MAKE_CELL" not in [op for op, _ in instrs] and instrs[:2] == [("LOAD_CONST", 1), ("STORE_DEREF", "b")]
    assert contains_run(instrs, [("LOAD_CLOSURE", "a"), ("LOAD_CLOSURE", "b"), ("BUILD_TUPLE", 2)])
    k = instrs.index(("MAKE_FUNCTION", None))
    assert instrs[k + 1 : k + 5] == [("SET_FUNCTION_ATTRIBUTE", f) for f in (8, 4, 2, 1)]
    inner = next(c for c in f.__code__.co_consts if isinstance(c, types.CodeType))
    assert ("LOAD_DEREF", "a") in ops(inner) and "COPY_FREE_VARS" not in names(inner)


def test_fstring_conversions():
    def f(x, w):
        return f"{x!r:>{w}}{x}"

    instrs = ops(f)
    if PY >= (3, 13):
        assert ("CONVERT_VALUE", "repr") in instrs and ("FORMAT_VALUE", (None, True)) in instrs
    else:
        assert ("FORMAT_VALUE", ("repr", True)) in instrs
    assert ("FORMAT_VALUE", (None, False)) in instrs


def test_operators_and_slices():
    instrs = ops(f_binops)
    assert {a for op, a in instrs if op == "BINARY_OP"} == {
        "+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^",
        "+=", "-=", "*=", "//=", "%=", "**=", "<<=", ">>=", "&=", "|=", "^=", "/="}
    assert [a for op, a in ops(f_compare) if op == "COMPARE_OP"][:6] == ["<", "<=", "==", "!=", ">", ">="]
    assert [a for op, a in ops(f_compare) if op in ("IS_OP", "CONTAINS_OP")] == [False, True, False, True]

    def sl(a, v):
        a[1:2] = v
        return a[1:2]

    assert contains_run(names(sl), ["BUILD_SLICE", "STORE_SUBSCR"])
    assert contains_run(names(sl), ["BUILD_SLICE", "BINARY_SUBSCR"])
    unpack = ops(f_unpack)
    assert ("UNPACK_EX", (1, 1)) in unpack
    assert contains_run(unpack, [("UNPACK_SEQUENCE", 2), ("STORE_FAST", "p"), ("STORE_FAST", "q")])
    assert {"UNARY_NOT", "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT"} <= set(names(f_unpack))
    assert "LIST_TO_TUPLE" in names(f_star)
    assert ("CALL_FUNCTION_EX", True) in ops(f_calls)


def test_super_attribute():
    instrs = ops(_Child.f)
    if PY >= (3, 12):
        assert ("LOAD_SUPER_ATTR", ("f", True, False)) in instrs
        assert ("LOAD_SUPER_ATTR", ("attr", False, False)) in instrs
        assert ("LOAD_SUPER_ATTR", ("f", True, True)) in instrs
    else:
        assert ("LOAD_METHOD", "f") in instrs and ("LOAD_ATTR", "attr") in instrs


def test_truth_value_without_a_test_is_not_not_on_all_versions():
    def f(a, b):
        return not not a, not not (a == b)

    assert ops(f) == [("LOAD_FAST", "a"), ("UNARY_NOT", None), ("UNARY_NOT", None), ("LOAD_FAST", "a"),
                      ("LOAD_FAST", "b"), ("COMPARE_OP", "=="), ("UNARY_NOT", None), ("UNARY_NOT", None),
                      ("BUILD_TUPLE", 2), ("RETURN_VALUE", None)]
    far = ops(f_far_jump)  # noqa: F821
    assert far[2:4] == [("LOAD_FAST", "a"), ("POP_JUMP_IF_FALSE", None)]


def test_conditional_jumps_have_no_to_bool():
    instrs = ops(f_boolops)
    assert "POP_JUMP_IF_NOT_NONE" in names(f_boolops) and "POP_JUMP_IF_FALSE" in names(f_boolops)
    if PY < (3, 12):
        assert "JUMP_IF_FALSE_OR_POP" in [op for op, _ in instrs]


def test_exception_table_of_try():
    instrs = B.read(f_try.__code__)
    entries = B.exception_table(f_try.__code__)
    assert entries and all(isinstance(e, B.ExceptionEntry) for e in entries)
    first = min(entries, key=lambda e: e.start)
    assert instrs[first.target].opname == "PUSH_EXC_INFO" and first.depth == 0 and not first.lasti
    assert any(e.lasti for e in entries)
    assert "except [" in B.format_instructions(instrs, entries)


# ---------------------------------------------------------------------------------------------
# Round trip: assemble(read(f)) behaves like f, and reads back to the same stream.


@pytest.mark.parametrize("fn,arg_tuples", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_roundtrip_behaviour(fn, arg_tuples):
    global G
    clone = roundtrip(fn)
    for args in arg_tuples:  # fresh copies: some cases mutate their arguments
        G = 0
        expected = outcome(lambda: fn(*copy.deepcopy(args)))
        G = 0
        assert outcome(lambda: clone(*copy.deepcopy(args))) == expected


def _shape(code: types.CodeType) -> list[tuple]:
    def arg(value):
        return ("code", value.co_name) if isinstance(value, types.CodeType) else repr(value)

    return [(i.opname, arg(i.argval), i.target, i.lineno) for i in B.read(code)]


@pytest.mark.parametrize("fn", ALL_FUNCTIONS, ids=lambda fn: fn.__name__)
def test_roundtrip_is_a_fixed_point(fn):
    for code in all_codes(fn.__code__):
        new = roundtrip_code(code)
        assert _shape(new) == _shape(code)
        assert B.exception_table(new) == B.exception_table(code)
        assert new.co_varnames[: code.co_argcount] == code.co_varnames[: code.co_argcount]


@pytest.mark.parametrize("fn,args", GENERATOR_CASES, ids=[fn.__name__ for fn, _ in GENERATOR_CASES])
def test_roundtrip_generators(fn, args):
    clone = roundtrip(fn)
    assert list(clone(*args)) == list(fn(*args))

    def drive(f):  # send, throw into a (delegated) yield from, close with a pending finally
        g = f(*args)
        log = [next(g), g.send("sent"), next(g)]
        try:
            log.append(g.throw(KeyError("k")))
        except KeyError as e:
            log.append(("raised", repr(e)))
        h = f(*args)
        next(h)
        h.send(None)
        log.append(outcome(h.close))
        return log

    assert drive(clone) == drive(fn)


def test_roundtrip_yield_from_delegates_throw_and_close():
    def drive(outer):
        log = []
        g = outer(log)
        seen = [next(g), g.throw(KeyError), next(g), type(g.gi_yieldfrom).__name__]
        g.close()
        return seen, log

    assert drive(roundtrip(g_outer)) == drive(g_outer) == (["ready", "caught", "ready", "generator"],
                                                           ["inner closed"])


def test_roundtrip_coroutine():
    clone = roundtrip(c_await)
    with pytest.raises(StopIteration) as stop:
        clone(1).send(None)
    assert stop.value.value == 43


def test_roundtrip_stdlib_modules():
    import collections
    import dataclasses
    import json.decoder
    import textwrap as tw

    for module in (collections, dataclasses, json.decoder, tw):
        source = inspect.getsource(module)
        for code in all_codes(compile(source, module.__file__, "exec")):
            new = B.assemble(B.read(code), template=code, exception_entries=B.exception_table(code))
            assert [(i.opname, i.target) for i in B.read(new)] == [(i.opname, i.target) for i in B.read(code)]
            assert B.exception_table(new) == B.exception_table(code)


# ---------------------------------------------------------------------------------------------
# Assembling hand-written streams, as codegen and resume functions will.


def _template(a):
    pass


def build(instrs: list, **kw) -> types.FunctionType:
    """A function from (opname, argval[, target]) tuples, with _template's attributes by default."""
    stream = [B.Instruction(t[0], t[1], lineno=7, target=t[2] if len(t) > 2 else None) for t in instrs]
    code = B.assemble(stream, template=_template.__code__, exception_entries=kw.pop("entries", []), **kw)
    return types.FunctionType(code, globals())


def _call_global(name: str) -> list:
    load = [("LOAD_GLOBAL", name), ("PUSH_NULL", None)]
    return load[::-1] if B.NULL_BEFORE_CALLABLE else load


def test_assemble_simple_and_renamed():
    f = build([("LOAD_FAST", "a"), ("LOAD_FAST", "b"), ("BINARY_OP", "+"), ("RETURN_VALUE", None)],
              name="adder", qualname="adder", argcount=2, varnames=["a", "b"])
    assert f(2, 3) == 5 and f.__code__.co_name == "adder" and f.__code__.co_varnames == ("a", "b")


def test_assemble_backward_conditional_jump():
    # t = 0; do { t = t + 1 } while (t < a); return t  -- a backward POP_JUMP_IF_TRUE
    f = build([("LOAD_CONST", 0), ("STORE_FAST", "t"),
               ("LOAD_FAST", "t"), ("LOAD_CONST", 1), ("BINARY_OP", "+"), ("STORE_FAST", "t"),
               ("LOAD_FAST", "t"), ("LOAD_FAST", "a"), ("COMPARE_OP", "<"), ("POP_JUMP_IF_TRUE", None, 2),
               ("LOAD_FAST", "t"), ("RETURN_VALUE", None)])
    assert f(5) == 5 and f(-1) == 1


def test_assemble_jump_if_or_pop_on_every_version():
    # return a or b
    f = build([("LOAD_FAST", "a"), ("JUMP_IF_TRUE_OR_POP", None, 3), ("LOAD_FAST", "b"), ("RETURN_VALUE", None)],
              argcount=2, varnames=["a", "b"])
    assert f(0, "b") == "b" and f("a", "b") == "a" and f([], 0) == 0


def test_assemble_keyword_call_and_function_attributes():
    kw_call = _call_global("dict") + [("LOAD_FAST", "a"), ("LOAD_CONST", ("x",)), ("CALL_KW", 1),
                                      ("RETURN_VALUE", None)]
    assert build(kw_call)(3) == {"x": 3}
    # def inner(p=a): return p ; return inner()
    inner = (lambda p=None: p).__code__
    make = [("LOAD_FAST", "a"), ("BUILD_TUPLE", 1), ("LOAD_CONST", inner), ("MAKE_FUNCTION", None),
            ("SET_FUNCTION_ATTRIBUTE", 1), ("STORE_FAST", "g"), ("LOAD_FAST", "g"), ("PUSH_NULL", None),
            ("CALL", 0), ("RETURN_VALUE", None)]
    if B.NULL_BEFORE_CALLABLE:
        make[5:8] = [("STORE_FAST", "g"), ("PUSH_NULL", None), ("LOAD_FAST", "g")]
    assert build(make)(4) == 4


def test_assemble_format_value_forms_on_every_version():
    spec = build([("LOAD_FAST", "a"), ("LOAD_CONST", ">8"), ("FORMAT_VALUE", ("repr", True)), ("RETURN_VALUE", None)])
    assert spec("ab") == format(repr("ab"), ">8")
    conv = build([("LOAD_FAST", "a"), ("CONVERT_VALUE", "ascii"), ("FORMAT_VALUE", (None, False)),
                  ("RETURN_VALUE", None)])
    assert conv("é") == ascii("é")


def test_assemble_try_except():
    # try: return 1 / a  except: return "caught"   (normalized 3.11+ layout)
    stream = [("LOAD_CONST", 1), ("LOAD_FAST", "a"), ("BINARY_OP", "/"), ("RETURN_VALUE", None),
              ("PUSH_EXC_INFO", None), ("POP_TOP", None), ("POP_EXCEPT", None), ("LOAD_CONST", "caught"),
              ("RETURN_VALUE", None), ("COPY", 3), ("POP_EXCEPT", None), ("RERAISE", 1)]
    entries = [B.ExceptionEntry(0, 4, 4, 0, False), B.ExceptionEntry(4, 6, 9, 1, True)]
    f = build(stream, entries=entries)
    assert f(2) == 0.5 and f(0) == "caught"


def test_assemble_refuses_unexpressible_streams():
    with pytest.raises(B.AssemblyError, match="overlap"):
        build([("LOAD_CONST", None), ("RETURN_VALUE", None)],
              entries=[B.ExceptionEntry(0, 2, 0, 0, False), B.ExceptionEntry(1, 2, 0, 0, False)])
    if PY < (3, 13):
        with pytest.raises(B.AssemblyError, match="CALL_KW"):
            build(_call_global("dict") + [("LOAD_CONST", ("x",)), ("LOAD_FAST", "a"), ("CALL_KW", 1),
                                          ("RETURN_VALUE", None)])


def test_module_is_stdlib_only_besides_bytecode():
    for name in ("reader", "assembler"):
        source = (pathlib.Path(B.__file__).parent / f"{name}.py").read_text()
        imports = {line.split()[1].split(".")[0] for line in source.splitlines()
                   if line.startswith(("import ", "from ")) and not line.startswith("from .")}
        assert imports <= {"__future__", "bisect", "dataclasses", "dis", "inspect", "sys", "types", "typing",
                           "bytecode"}, imports
