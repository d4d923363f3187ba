"""Differential testing of the capture frontend against plain eager execution.

Every case is a small function plus a factory of its arguments. `check` runs the function eagerly and
compiled on identical, independent copies of fresh arguments, several times, and asserts that

  * the outputs are equal (exactly, unless a tolerance is given),
  * the arguments are equal afterwards (mutated tensors, lists, dicts, object attributes),
  * an output that *is* an argument in eager (`return x` after `x.add_(1)`) is that argument compiled too,
  * the backend was handed `graphs` graphs in all: fresh arguments of the same shapes must pass the guards
    of the first compile, so a second graph means a needless recompile (or a graph break).

When `graphs == 1` the function is compiled with `fullgraph=True` (unless compile_kwargs says otherwise):
such a case claims the whole function is capturable, and if it isn't, the Unsupported error that names the
reason is a better failure than a wrong graph count.

    check(lambda x, y: (x + y).relu(), lambda: (torch.randn(3), torch.randn(3)))

The compiler under test is graphjit, reached through `gj` (a lazy proxy: a broken graphjit fails the tests
that use it, not the collection of every file). `use_compiler(namespace)` points `gj` at another
implementation with the same API, e.g. a shim over torch.compile, to validate the suite's expectations.
"""
import contextlib
import copy
import dataclasses
import math
import os
import sys

import torch

from graphjit.testing import CompileCounter

_override = None


def use_compiler(namespace):
    """Route `gj.<name>` to `namespace.<name>` (None: back to graphjit). For validating the suite only."""
    global _override
    _override = namespace


class _Compiler:
    """`gj.compile`, `gj.reset`, ... : graphjit's API, imported on first use."""

    def __getattr__(self, name):
        if _override is not None:
            return getattr(_override, name)
        import graphjit
        return getattr(graphjit, name)


gj = _Compiler()


# ----------------------------------------------------------------------------------------------- copies

def clone_tree(value, memo=None):
    """An independent copy of `value`: tensors cloned (requires_grad and strides kept), containers rebuilt,
    anything else deep-copied. Objects reached twice stay shared in the copy (aliasing is kept)."""
    memo = {} if memo is None else memo
    key = id(value)
    if key in memo:
        return memo[key]
    copied = _clone(value, memo)
    memo[key] = copied
    return copied


def _clone(value, memo):
    if isinstance(value, torch.Tensor):
        if isinstance(value, torch.nn.Parameter):
            return copy.deepcopy(value, memo)
        copied = value.detach().clone()
        return copied.requires_grad_(value.requires_grad) if value.is_leaf else copied
    if isinstance(value, (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device,
                          torch.Size, type)) or callable(value) and not isinstance(value, torch.nn.Module):
        return value
    if _is_namedtuple(value):
        return type(value)(*(clone_tree(v, memo) for v in value))
    if type(value) is tuple:
        return tuple(clone_tree(v, memo) for v in value)
    if type(value) is list:
        copied = []
        memo[id(value)] = copied  # a list may contain itself
        copied.extend(clone_tree(v, memo) for v in value)
        return copied
    if type(value) is dict:
        copied = {}
        memo[id(value)] = copied
        copied.update((k, clone_tree(v, memo)) for k, v in value.items())
        return copied
    return copy.deepcopy(value, memo)


def _is_namedtuple(value):
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


# ----------------------------------------------------------------------------------------------- compare

class Mismatch(AssertionError):
    pass


def assert_same(actual, expected, *, where="output", atol=0.0, rtol=0.0):
    """Recursive equality of two results; the error names the path that differs (`output[1]['h'].x`)."""
    _same(actual, expected, where, atol, rtol)


def _fail(where, text):
    raise Mismatch(f"{where}: {text}")


def _same(actual, expected, where, atol, rtol):
    if isinstance(expected, torch.Tensor):
        return _same_tensor(actual, expected, where, atol, rtol)
    if type(actual) is not type(expected):
        _fail(where, f"type {type(actual).__qualname__} != expected {type(expected).__qualname__}"
                     f" (value {_short(actual)} vs {_short(expected)})")
    if isinstance(expected, float):
        if math.isnan(expected) and math.isnan(actual):
            return
        if not math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) and actual != expected:
            _fail(where, f"{actual!r} != expected {expected!r} (abs diff {abs(actual - expected):.3g})")
        return
    if _is_namedtuple(expected):
        for name in expected._fields:
            _same(getattr(actual, name), getattr(expected, name), f"{where}.{name}", atol, rtol)
        return
    if isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            _fail(where, f"length {len(actual)} != expected {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{where}[{i}]", atol, rtol)
        return
    if isinstance(expected, dict):
        if list(actual.keys()) != list(expected.keys()):
            _fail(where, f"keys {list(actual.keys())} != expected {list(expected.keys())}")
        for k in expected:
            _same(actual[k], expected[k], f"{where}[{k!r}]", atol, rtol)
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for field in dataclasses.fields(expected):
            _same(getattr(actual, field.name), getattr(expected, field.name), f"{where}.{field.name}",
                  atol, rtol)
        return
    if isinstance(expected, torch.nn.Module):
        _same(actual.state_dict(), expected.state_dict(), f"{where}.state_dict()", atol, rtol)
        return
    if isinstance(expected, (set, frozenset, int, str, bytes, complex, bool, type(None), torch.dtype,
                             torch.device, range, slice, type)):
        if actual != expected:
            _fail(where, f"{_short(actual)} != expected {_short(expected)}")
        return
    slots = [s for cls in type(expected).__mro__ for s in getattr(cls, "__slots__", ())]
    if slots and not hasattr(expected, "__dict__"):
        for name in slots:
            _same(getattr(actual, name, None), getattr(expected, name, None), f"{where}.{name}", atol, rtol)
        return
    if hasattr(expected, "__dict__") and not callable(expected):
        # A user object: compare its attributes.
        actual_attrs, expected_attrs = vars(actual), vars(expected)
        if sorted(actual_attrs) != sorted(expected_attrs):
            _fail(where, f"attributes {sorted(actual_attrs)} != expected {sorted(expected_attrs)}")
        for name in expected_attrs:
            _same(actual_attrs[name], expected_attrs[name], f"{where}.{name}", atol, rtol)
        return
    if actual != expected:
        _fail(where, f"{_short(actual)} != expected {_short(expected)}")


def _same_tensor(actual, expected, where, atol, rtol):
    if not isinstance(actual, torch.Tensor):
        _fail(where, f"expected a tensor, got {type(actual).__qualname__}: {_short(actual)}")
    if type(actual) is not type(expected):
        _fail(where, f"type {type(actual).__qualname__} != expected {type(expected).__qualname__}")
    for prop in ("dtype", "shape", "device", "requires_grad", "layout"):
        if getattr(actual, prop) != getattr(expected, prop):
            _fail(where, f"{prop} {getattr(actual, prop)} != expected {getattr(expected, prop)}")
    try:
        torch.testing.assert_close(actual.detach(), expected.detach(), atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError:
        _fail(where, f"values differ{_diff_summary(actual.detach(), expected.detach())}"
                     f" (atol={atol}, rtol={rtol})")


def _diff_summary(actual, expected):
    if expected.numel() == 0:
        return ""
    if expected.dtype == torch.bool:
        a, e = actual.to(torch.int8), expected.to(torch.int8)
    else:
        a, e = actual, expected
    if a.is_complex() or e.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    diff = (a.double() - e.double()).abs()
    diff = torch.where(torch.isnan(a.double()) & torch.isnan(e.double()), torch.zeros_like(diff), diff)
    n_bad = int((diff > 0).sum())
    worst = int(diff.flatten().nan_to_num(float("inf")).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), diff.shape)) if diff.dim() else ()
    return (f": max abs diff {float(diff.flatten()[worst]):.6g} at index {index}"
            f" (got {a.flatten()[worst].item()!r}, expected {e.flatten()[worst].item()!r});"
            f" {n_bad} of {diff.numel()} elements differ")


def _short(value, limit=120):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _tensor_leaves(tree, path="", out=None):
    """(path, tensor) of every tensor in tuples/lists/dicts/namedtuples, for identity checks."""
    out = [] if out is None else out
    if isinstance(tree, torch.Tensor):
        out.append((path, tree))
    elif isinstance(tree, (tuple, list)):
        for i, v in enumerate(tree):
            _tensor_leaves(v, f"{path}[{i}]", out)
    elif isinstance(tree, dict):
        for k, v in tree.items():
            _tensor_leaves(v, f"{path}[{k!r}]", out)
    return out


def _assert_same_identities(actual_out, expected_out, actual_in, expected_in):
    """Identity relations must match eager's: an output tensor that *is* an argument (`x.add_(1); return x`)
    is the matching argument compiled, a fresh output is fresh, and outputs shared (`return y, y`) stay so."""
    expected_ids = {id(t): path for path, t in _tensor_leaves(expected_in, "args")}
    actual_ids = {id(t): path for path, t in _tensor_leaves(actual_in, "args")}
    expected_leaves = _tensor_leaves(expected_out, "output")
    actual_leaves = _tensor_leaves(actual_out, "output")
    for (path, e), (_, a) in zip(expected_leaves, actual_leaves):
        want, got = expected_ids.get(id(e)), actual_ids.get(id(a))
        if want != got:
            _fail(path, f"eager returns {'the argument ' + want if want else 'a new tensor'}; compiled returns "
                        f"{'the argument ' + got if got else 'a new tensor'}")
    for i, (path, e) in enumerate(expected_leaves):
        for j in range(i + 1, len(expected_leaves)):
            if (e is expected_leaves[j][1]) != (actual_leaves[i][1] is actual_leaves[j][1]):
                _fail(path, f"eager: this output {'is' if e is expected_leaves[j][1] else 'is not'} the same "
                            f"tensor object as {expected_leaves[j][0]}; compiled differs")


# ----------------------------------------------------------------------------------------------- runs

def _where():
    """The pytest node id of the running test, as a one-command reproduction hint."""
    node = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    return f"\n  reproduce: PYTHONPATH=. {sys.executable} -m pytest '{node}' -q" if node else ""


def _compile_kwargs(compile_kwargs, graphs):
    kwargs = dict(compile_kwargs or {})
    if graphs == 1:
        kwargs.setdefault("fullgraph", True)
    return kwargs


def _context(factory):
    return factory() if factory is not None else contextlib.nullcontext()


def _run_both(eager_fn, compiled_fn, args, kwargs, label, atol, rtol, context=None):
    """Run eager and compiled on independent copies of (args, kwargs); compare outputs and arguments."""
    eager_args, eager_kwargs = clone_tree((args, kwargs))
    comp_args, comp_kwargs = clone_tree((args, kwargs))
    with _context(context):
        expected = eager_fn(*eager_args, **eager_kwargs)
    with _context(context):
        actual = compiled_fn(*comp_args, **comp_kwargs)
    try:
        assert_same(actual, expected, where="output", atol=atol, rtol=rtol)
        assert_same((comp_args, comp_kwargs), (eager_args, eager_kwargs), where="(args, kwargs) after the call",
                    atol=atol, rtol=rtol)
        _assert_same_identities(actual, expected, (comp_args, comp_kwargs), (eager_args, eager_kwargs))
    except Mismatch as e:
        raise Mismatch(f"{label}: {e}{_where()}") from None
    return expected, actual


def _assert_graphs(counter, graphs, what):
    if graphs is not None and counter.frame_count != graphs:
        ops = [sum(1 for n in g.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
               for g in counter.graphs]
        raise AssertionError(f"{what}: the backend was handed {counter.frame_count} graph(s) "
                             f"(ops per graph {ops}), expected {graphs}{_where()}")


def check(fn, make_args, *, calls=4, graphs=1, compile_kwargs=None, atol=0, rtol=0, kwargs_factory=None,
          context=None):
    """Differential test of `fn`: see the module docstring. Returns the CompileCounter.

    make_args:      () -> tuple of positional arguments; called once per call, under torch.manual_seed(call).
    kwargs_factory: () -> dict of keyword arguments, likewise.
    graphs:         graphs the backend must have been handed after all calls; None: don't count.
    context:        () -> context manager that both the eager and the compiled call run under.
    """
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(fn, backend=counter, **_compile_kwargs(compile_kwargs, graphs))
    for call in range(calls):
        torch.manual_seed(call)
        args = tuple(make_args())
        kwargs = dict(kwargs_factory()) if kwargs_factory is not None else {}
        _run_both(fn, compiled, args, kwargs, f"call {call} of {calls}", atol, rtol, context)
    _assert_graphs(counter, graphs, f"after {calls} calls with fresh same-shaped arguments")
    return counter


@dataclasses.dataclass
class Step:
    """One call of a `check_steps` sequence.

    make_args: () -> tuple of arguments;  kwargs: () -> dict;  context: () -> context manager for the call;
    before: () -> None, run before the call (e.g. change a global or a module attribute);
    graphs: the backend's graph count expected right after this call (None: not checked).
    """
    make_args: object
    kwargs: object = None
    context: object = None
    before: object = None
    graphs: object = None


def check_steps(fn, steps, *, graphs=None, compile_kwargs=None, atol=0, rtol=0):
    """Compile `fn` once, then run each Step eager vs compiled. For guard and recompile tests, where the
    arguments (or the world) change from call to call on purpose."""
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(fn, backend=counter, **dict(compile_kwargs or {}))
    for i, step in enumerate(steps):
        step = step if isinstance(step, Step) else Step(step)
        if step.before is not None:
            step.before()
        torch.manual_seed(i)
        args = tuple(step.make_args())
        kwargs = dict(step.kwargs()) if step.kwargs is not None else {}
        _run_both(fn, compiled, args, kwargs, f"step {i}", atol, rtol, step.context)
        _assert_graphs(counter, step.graphs, f"after step {i}")
    _assert_graphs(counter, graphs, f"after {len(steps)} steps")
    return counter


def check_module(module_factory, make_args, *, calls=4, graphs=1, compile_kwargs=None, atol=0, rtol=0,
                 kwargs_factory=None, context=None, call=None):
    """Differential test of an nn.Module: two identical copies (one deep-copied from the other), the second
    compiled whole with graphjit.compile(module). After every call the outputs and arguments must match, and
    so must the state_dicts (parameters and buffers, e.g. BatchNorm's running stats in train mode).

    call: (module) -> callable to compile instead of the module itself, e.g. `lambda m: m.forward`.
    Returns (counter, compiled, eager_module, compiled_module).
    """
    gj.reset()
    torch.manual_seed(1234)
    eager_module = module_factory()
    compiled_module = copy.deepcopy(eager_module)
    counter = CompileCounter()
    target = call(compiled_module) if call is not None else compiled_module
    eager_target = call(eager_module) if call is not None else eager_module
    compiled = gj.compile(target, backend=counter, **_compile_kwargs(compile_kwargs, graphs))
    for i in range(calls):
        torch.manual_seed(i)
        args = tuple(make_args())
        kwargs = dict(kwargs_factory()) if kwargs_factory is not None else {}
        label = f"call {i} of {calls}"
        _run_both(eager_target, compiled, args, kwargs, label, atol, rtol, context)
        try:
            assert_same(compiled_module.state_dict(), eager_module.state_dict(), where="module.state_dict()",
                        atol=atol, rtol=rtol)
        except Mismatch as e:
            raise Mismatch(f"{label}: {e}{_where()}") from None
    _assert_graphs(counter, graphs, f"after {calls} calls with fresh same-shaped arguments")
    return counter, compiled, eager_module, compiled_module


def check_raises(fn, make_args, *, calls=2, graphs=None, compile_kwargs=None, kwargs_factory=None):
    """Eager raises; compiled must raise the same exception type with the same message, every call."""
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(fn, backend=counter, **dict(compile_kwargs or {}))
    for call in range(calls):
        torch.manual_seed(call)
        args = tuple(make_args())
        kwargs = dict(kwargs_factory()) if kwargs_factory is not None else {}
        expected = _raised(fn, clone_tree((args, kwargs)))
        assert expected is not None, f"the case is wrong: eager {fn.__qualname__} did not raise"
        actual = _raised(compiled, clone_tree((args, kwargs)))
        label = f"call {call} of {calls}"
        if actual is None:
            raise AssertionError(f"{label}: eager raised {type(expected).__name__}({expected}); compiled "
                                 f"returned normally{_where()}")
        if type(actual) is not type(expected) or str(actual) != str(expected):
            raise AssertionError(f"{label}: eager raised {type(expected).__name__}({expected!s}); compiled "
                                 f"raised {type(actual).__name__}({actual!s}){_where()}") from actual
    _assert_graphs(counter, graphs, f"after {calls} calls")
    return counter


def _raised(fn, args_kwargs):
    args, kwargs = args_kwargs
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any exception is the thing compared
        return e
    return None


# ----------------------------------------------------------------------------------------------- cases

@dataclasses.dataclass
class Case:
    """One differential case: `check(fn, make_args, **options)` under a readable test id."""
    name: str
    fn: object
    make_args: object
    options: dict

    def run(self):
        return check(self.fn, self.make_args, **self.options)


class Cases:
    """A list of cases, filled by decorating module-level functions:

        cases = Cases()

        @cases.add(lambda: (torch.randn(3), torch.randn(3)))
        def add(x, y):
            return x + y

        @pytest.mark.parametrize("case", cases.params())
        def test_ops(case):
            case.run()

    The decorator returns the function unchanged. `add(make_args, name=..., **check_options)`;
    `add_fn(fn, make_args, ...)` registers a function made elsewhere (a closure from a factory).
    """

    def __init__(self):
        self.cases = []

    def add(self, make_args, *, name=None, **options):
        def register(fn):
            self.add_fn(fn, make_args, name=name, **options)
            return fn
        return register

    def add_fn(self, fn, make_args, *, name=None, **options):
        name = name or fn.__name__
        if any(c.name == name for c in self.cases):
            raise ValueError(f"duplicate case name {name!r}")
        self.cases.append(Case(name, fn, make_args, options))
        return fn

    def params(self):
        import pytest
        return [pytest.param(c, id=c.name) for c in self.cases]

    def __len__(self):
        return len(self.cases)


def case_id(value):
    """pytest ids for parametrize over functions/cases: the function's name."""
    return getattr(value, "__name__", None) or getattr(value, "name", None) or repr(value)
