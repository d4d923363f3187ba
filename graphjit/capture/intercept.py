"""Frames that run eagerly keep intercepting their calls: a copy of the code whose call sites ask graphjit
what to call.

A frame graphjit cannot capture (a break inside a loop or `try` block, the recompile limit) runs in
CPython, but the functions and modules it calls are still captured as their own frames, as under a PEP 523
frame hook. The eager frame runs a rewritten copy of its code object in which every call site replaces
its callable by `interceptor[callable]` just before the call:

    LOAD_GLOBAL helper / <args> / CALL n
      ->  LOAD_GLOBAL helper / <args> / SWAP d / LOAD_CONST interceptor / SWAP 2 / BINARY_SUBSCR / SWAP d
          / CALL n

(`d`: the callable's depth below the arguments; the SWAPs are left out where it is already on top). The
interceptor's `__getitem__` returns a compiled version of a Python function or module and anything else
unchanged.

A call's callable slot holds the callable only when the slot beside it is a NULL; otherwise (a method
load's [method, self], a decorator's [decorator, function], a comprehension's [function, iterator]) the
first of the two is called with the second as its first argument. So a call site is rewritten only where
a walk back along straight-line code finds that slot pushed by PUSH_NULL or by a method load; on
3.11/3.12 the method load becomes an attribute load and a NULL, so the bound method is what is called and
intercepted. Comprehensions and generator expressions, nested code objects called in place, are rewritten
the same way. Nothing else changes: same locals, exception table, line numbers and closure layout. A call
whose slots can't be told this way (its callee comes through a branch) is not intercepted.
"""
import types

from . import bytecode
from .bytecode import Instruction, ExceptionEntry, NULL_BEFORE_CALLABLE

_CACHE = {}          # (code, interceptor) -> rewritten code

_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})


class Interceptor:
    """`interceptor[fn]` -> what a call to fn from an eagerly run frame of `code` runs (see
    `frame.intercepted`). A call of the frame's own function (recursion) runs it as it is: each compiled
    level would add frames of graphjit's between the user's, and a deep recursion that runs in eager
    would reach the recursion limit."""

    __slots__ = ("resolve", "code")

    def __init__(self, resolve, code):
        self.resolve = resolve
        self.code = code

    def __getitem__(self, fn):
        if getattr(fn, "__code__", None) is self.code:
            return fn
        return self.resolve(fn)


def intercepting_code(code, interceptor):
    """`code` with its call sites going through `interceptor` (cached per code and interceptor)."""
    key = (code, interceptor)
    rewritten = _CACHE.get(key)
    if rewritten is None:
        rewritten = _CACHE[key] = _rewrite(code, interceptor)
    return rewritten


def intercepting_function(fn, closure, interceptor):
    """A function running fn's code with calls intercepted, bound to `closure` (the cells of the call
    being served: one code object's cache serves every closure of its `def`)."""
    return rebound(fn, closure, intercepting_code(fn.__code__, interceptor))


def rebound(fn, closure, code=None):
    """fn with another closure's cells (and, if given, another code object): its globals, name,
    qualname and defaults otherwise."""
    if closure is fn.__closure__ and code is None:
        return fn
    out = types.FunctionType(code or fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    return out


def _as_attribute_and_null(ins):
    """3.11/3.12: a method load as [NULL, bound attribute], so the call's callable slot is the callable."""
    if ins.opname == "LOAD_METHOD":
        load = Instruction("LOAD_ATTR", ins.argval, ins.lineno)
    else:
        name, _, two_arg = ins.argval
        load = Instruction("LOAD_SUPER_ATTR", (name, False, two_arg), ins.lineno)
    return [load, Instruction("PUSH_NULL", None, ins.lineno), Instruction("SWAP", 2, ins.lineno)]


def _intercept(depth, interceptor, lineno):
    """Replace the stack item at `depth` (1 = top) by interceptor[item]."""
    swap = [Instruction("SWAP", depth, lineno)] if depth > 1 else []
    return swap + [Instruction("LOAD_CONST", interceptor, lineno), Instruction("SWAP", 2, lineno),
                   Instruction("BINARY_SUBSCR", None, lineno)] + swap


def _rewrite(code, interceptor):
    instrs = bytecode.read(code)
    entries = bytecode.exception_table(code)
    before = {}    # index -> instructions inserted before it
    replace = {}   # index -> instructions replacing it
    for i, ins in enumerate(instrs):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, types.CodeType) and \
                ins.argval.co_name in _COMPREHENSIONS:
            replace[i] = [Instruction("LOAD_CONST", intercepting_code(ins.argval, interceptor), ins.lineno)]
        site = _call_site(instrs, i)
        if site is None:
            continue
        at, callable_depth, pusher = site
        before.setdefault(at, []).extend(_intercept(callable_depth, interceptor, ins.lineno))
        if NULL_BEFORE_CALLABLE and instrs[pusher].opname in ("LOAD_METHOD", "LOAD_SUPER_ATTR"):
            replace[pusher] = _as_attribute_and_null(instrs[pusher])
    out, new_index = [], []
    for i, ins in enumerate(instrs):
        new_index.append(len(out))
        out.extend(before.get(i, ()))
        own = replace.get(i, [ins])
        first = len(out)
        out.extend(Instruction(x.opname, x.argval, x.lineno, ins.offset) for x in own)
        out[first].target = ins.target
        out[new_index[-1]].is_jump_target = ins.is_jump_target
    new_index.append(len(out))
    for ins in out:
        if ins.target is not None:
            ins.target = new_index[ins.target]
    moved = [ExceptionEntry(new_index[e.start], new_index[e.end], new_index[e.target], e.depth, e.lasti)
             for e in entries]
    return bytecode.assemble(out, template=code, exception_entries=moved)


def _call_site(instrs, i):
    """For a call at `i` whose callable slot is known to be the callable (not a method with self): (where
    to insert the interception, the callable's depth there, the index of the instruction that pushed the
    NULL or method slot). None where that can't be shown on a straight-line path (the slot comes through a
    branch, or was pushed by something else: a decorator's or comprehension's own call)."""
    op, argval = instrs[i].opname, instrs[i].argval
    if op in ("CALL", "CALL_KW"):
        depths = (argval + 1, argval + 2)        # (callable slot, NULL slot) on 3.11/3.12
        at = i - 1 if op == "CALL_KW" else i     # the names tuple stays right before CALL_KW
    elif op == "CALL_FUNCTION_EX":
        depths = (2 + argval, 3 + argval)
        at = i
    else:
        return None
    callable_depth, null_depth = depths if NULL_BEFORE_CALLABLE else depths[::-1]
    if op == "CALL_KW" and instrs[at].opname != "LOAD_CONST":
        return None
    pusher = _pusher(instrs, at, null_depth)
    if pusher is None:
        return None
    j, slot = pusher
    kind = instrs[j].opname
    is_method = kind == "LOAD_METHOD" or (kind == "LOAD_SUPER_ATTR" and instrs[j].argval[1])
    # LOAD_METHOD pushes [method or NULL, self or attribute] (3.11/3.12), [method or attribute, self or NULL]
    null_slot = 0 if NULL_BEFORE_CALLABLE else 1
    if kind == "PUSH_NULL" or (is_method and slot == null_slot):
        return at, callable_depth, j
    return None


def _pusher(instrs, at, depth):
    """(index, which of its pushes) of the instruction that pushed the stack item at `depth` (1 = top)
    just before instruction `at`, walking back along straight-line code; None if that can't be told."""
    j = at
    while j > 0:
        if instrs[j].is_jump_target:
            return None
        j -= 1
        effect = _stack_effect(instrs[j])
        if effect is None:
            return None
        pops, pushes = effect
        if depth <= pushes:
            return j, pushes - depth
        depth += pops - pushes
    return None


_PUSH_ONE = frozenset({"LOAD_FAST", "LOAD_CLOSURE", "LOAD_DEREF", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_NAME",
                       "PUSH_NULL", "LOAD_ASSERTION_ERROR", "LOAD_BUILD_CLASS", "LOAD_COMMON_CONSTANT",
                       "LOAD_LOCALS"})
_ONE_TO_ONE = frozenset({"LOAD_ATTR", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE",
                         "LIST_TO_TUPLE", "GET_ITER", "MAKE_FUNCTION", "CONVERT_VALUE", "GET_LEN"})
_TWO_TO_ONE = frozenset({"BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
                         "SET_FUNCTION_ATTRIBUTE"})
_N_TO_ONE = frozenset({"BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING", "BUILD_SLICE"})
_ADD_TO_CONTAINER = frozenset({"LIST_APPEND", "SET_ADD", "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE",
                               "DICT_MERGE"})


def _stack_effect(ins):
    """(pops, pushes) of a normalized instruction that only computes values from the items it pops,
    or None (jumps, stack shuffles, anything else: the walk stops there)."""
    op, arg = ins.opname, ins.argval
    if ins.target is not None:
        return None
    if op in _PUSH_ONE:
        return 0, 1
    if op in _ONE_TO_ONE:
        return 1, 1
    if op in _TWO_TO_ONE:
        return 2, 1
    if op in _N_TO_ONE:
        return arg, 1
    if op in _ADD_TO_CONTAINER:
        return 1, 0
    if op == "LOAD_METHOD":
        return 1, 2
    if op == "LOAD_SUPER_ATTR":
        return 3, 2 if arg[1] else 1
    if op == "BUILD_MAP":
        return 2 * arg, 1
    if op == "BUILD_CONST_KEY_MAP":
        return arg + 1, 1
    if op == "MAP_ADD":
        return 2, 0
    if op == "CALL":
        return arg + 2, 1
    if op == "CALL_KW":
        return arg + 3, 1
    if op == "CALL_FUNCTION_EX":
        return 3 + int(arg), 1
    if op == "FORMAT_VALUE":
        return 1 + int(arg[1]), 1
    if op == "UNPACK_SEQUENCE":
        return 1, arg
    return None


def clear():
    _CACHE.clear()
