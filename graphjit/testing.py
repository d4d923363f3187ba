"""Helpers for testing graphjit: differential checks of compiled against eager, and a counting backend.

`check` runs a function eagerly and compiled on identical, independent copies of fresh arguments, several
times, and asserts that

  * the outputs are the same: type, dtype, shape, device, requires_grad and values (see `assert_same`),
  * the arguments are the same afterwards (tensors written in place, lists, dicts, object attributes),
  * an output that *is* an argument in eager (`return x` after `x.add_(1)`) is that argument compiled too,
    and outputs that are one tensor in eager (`return y, y`) are one tensor compiled,
  * the backend was handed `graphs` graphs in all: fresh arguments of the same shapes must pass the guards
    of the first compile, so another graph means a needless recompile (or a graph break),
  * with a compiling backend, every graph compiled: none ran as captured because the compiler refused it
    or failed on it (unless `fallback=True`).

    check(lambda x, y: (x + y).relu(), lambda: (torch.randn(3), torch.randn(3)))            # capture only
    check(fn, lambda call: (odd_values(call),), backend="graphjit", graphs=None)           # and compiler

Without a backend the graphs run as captured, so they compute what eager computes: results must be
exact. Through a compiler they may round otherwise, by at most TOLERANCES for their dtype (an explicit
atol/rtol replaces the dtype's). An exact comparison also tells -0.0 from 0.0; NaN equals NaN always.
`check_steps` (arguments that change on purpose between calls), `check_module` (an nn.Module compiled
whole; its state_dict compared too) and `check_raises` (the same exception) work alike.

`CompileCounter` is a backend that counts the graphs it is handed (and hands them on to another backend,
or runs them as captured):

    >>> counter = CompileCounter()
    >>> f = graphjit.compile(lambda x: x.sin() + 1, backend=counter)
    >>> _ = f(torch.ones(3)); (counter.frame_count, counter.op_count)
    (1, 2)

Imports torch and graphjit's public API only; the counter also works as a torch.compile backend (handy
to check a test's expectations against a mature frontend), and `use_compiler` points the checks at
another implementation of graphjit's API to validate a test suite's expectations.
"""
import contextlib
import copy
import dataclasses
import inspect
import math
import os
import sys

import torch

# Largest differences allowed between a compiled and an eager result of these dtypes (assert_close's
# meaning: |actual - expected| <= atol + rtol * |expected|). Other dtypes compare exactly. float32's are
# assert_close's defaults; 16-bit results need an atol of their own (one ulp of a value near 0.01 is more
# than assert_close's 1e-5).
TOLERANCES = {
    torch.float32: dict(rtol=1.3e-6, atol=1e-5),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
}

# fx node kinds that do work; placeholders, get_attr and output don't count as ops.
OP_KINDS = ("call_function", "call_method", "call_module")


class CompileCounter:
    """A backend (`backend(gm, example_inputs) -> callable`) that records each graph and hands it on to
    `backend` (a callable backend or a registered name), or runs it as captured.

    frame_count: how many graphs it was handed (one per compiled graph, so one per (re)compile of a frame
                 without graph breaks).
    op_count:    call_function/call_method/call_module nodes summed over all those graphs.
    graphs:      the GraphModules, in the order received.
    compiled:    per graph, what `backend` returned for it (the graph's own forward when it runs as captured).
    """

    def __init__(self, backend=None):
        if isinstance(backend, str):
            from .backends.registry import lookup_backend
            backend = lookup_backend(backend)
        self.backend = backend
        self.clear()

    def clear(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs = []
        self.example_inputs = []
        self.compiled = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.frame_count += 1
        self.op_count += _op_count(gm)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        compiled = self.backend(gm, example_inputs) if self.backend is not None else gm.forward
        self.compiled.append(compiled)
        return compiled

    def compiled_functions(self):
        """What the backend compiled, one per graph and set of sizes: for a graph with size symbols that
        the backend compiles per set of sizes (backends/dynamic.PerSize), one per set it has seen."""
        out = []
        for fn in self.compiled:
            per_size = getattr(fn, "compiled", None)
            for one in list(per_size.values()) if isinstance(per_size, dict) else [fn]:
                halves = getattr(one, "graphjit_halves", None)
                out += [h.compiled for h in halves] if halves is not None else [one]
        return out

    def ran_as_captured(self):
        """Indices of the graphs that run as captured: the backend handed back the graph's own forward, or,
        for a graph that needs gradients (compiler/training.py), a compiled half runs its graph as is."""
        def captured(gm, fn):
            per_size = getattr(fn, "compiled", None)
            fns = list(per_size.values()) if isinstance(per_size, dict) else [fn]
            return fn == gm.forward or any(h.ran_as_captured for f in fns
                                           for h in getattr(f, "graphjit_halves", ()))
        return [i for i, (gm, fn) in enumerate(zip(self.graphs, self.compiled)) if captured(gm, fn)]

    def __repr__(self):
        return f"CompileCounter(frame_count={self.frame_count}, op_count={self.op_count})"


def _op_count(gm):
    return sum(1 for node in gm.graph.nodes if node.op in OP_KINDS)


# ----------------------------------------------------------------------------------------------- compiler

_override = None


def use_compiler(namespace):
    """Route the checks' `compile` and `reset` to `namespace` (None: back to graphjit). For validating a
    test suite's expectations against another implementation (e.g. a shim over torch.compile) only."""
    global _override
    _override = namespace


def compiler():
    """The namespace the checks compile with: graphjit, unless use_compiler chose another."""
    if _override is not None:
        return _override
    import graphjit
    return graphjit


def _backend(backend):
    """A named backend (graphjit.list_backends()) as its callable; a callable as it is."""
    if backend is None or callable(backend):
        return backend
    from graphjit.backends.registry import lookup_backend
    return lookup_backend(backend)


# ----------------------------------------------------------------------------------------------- copies

def clone_tree(value, memo=None):
    """An independent copy of `value`: tensors copied into memory of their own with the same sizes and
    strides (requires_grad kept), containers rebuilt, anything else deep-copied. Objects reached twice
    stay shared in the copy (aliasing is kept)."""
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
        copied = _copy_tensor(value.detach())
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


def _copy_tensor(t):
    """t with the same sizes and strides (a broadcast stays a broadcast), in memory of its own."""
    if t.layout != torch.strided or type(t) is not torch.Tensor:
        return t.clone()
    copied = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    try:
        return copied.copy_(t)
    except RuntimeError:
        # elements that share memory (an expand, overlapping windows): copy the storage they are read from
        storage = t.untyped_storage()
        flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(
            storage, 0, (storage.nbytes() // t.element_size(),), (1,))
        return flat.clone().as_strided(t.shape, t.stride(), t.storage_offset())


def _is_namedtuple(value):
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


# ----------------------------------------------------------------------------------------------- compare

class Mismatch(AssertionError):
    pass


@dataclasses.dataclass(frozen=True)
class _Tolerance:
    atol: object      # a number, or None: the dtype's (TOLERANCES)
    rtol: object
    strides: bool = False
    signs: object = None     # tell -0.0 from 0.0; None: in exact comparisons only

    def zero_signs(self, atol, rtol):
        return atol == rtol == 0 if self.signs is None else self.signs

    def of(self, dtype):
        table = TOLERANCES.get(dtype, {})
        atol = table.get("atol", 0.0) if self.atol is None else self.atol
        rtol = table.get("rtol", 0.0) if self.rtol is None else self.rtol
        return atol, rtol


def assert_same(actual, expected, *, where="output", atol=0.0, rtol=0.0, strides=False, zero_signs=None):
    """Recursive equality of two results; the error (a Mismatch) names the path that differs
    (`output[1]['h'].x`) and the command that reruns the test.

    Tensors: the same type, dtype, shape, device, requires_grad and layout (and strides, with `strides`),
    values within atol + rtol * |expected|, NaN equal to NaN. atol or rtol None: the tensor dtype's in
    TOLERANCES (exact for dtypes not there). zero_signs: a zero must have eager's sign (-0.0 is not 0.0);
    None: in an exact comparison (atol = rtol = 0) only.
    Floats compare within the same tolerance; containers, dataclasses, modules (state_dict) and objects
    (attributes) element by element; anything else with ==.
    """
    try:
        _same(actual, expected, where, _Tolerance(atol, rtol, strides, zero_signs))
    except Mismatch as e:
        raise Mismatch(f"{e}{_rerun_hint()}") from None


def _fail(where, text):
    raise Mismatch(f"{where}: {text}")


def _same(actual, expected, where, tol):
    if isinstance(expected, torch.Tensor):
        return _same_tensor(actual, expected, where, tol)
    if type(actual) is not type(expected):
        _fail(where, f"type {type(actual).__qualname__} != expected {type(expected).__qualname__}"
                     f" (value {_short(actual)} vs {_short(expected)})")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(expected, (np.ndarray, np.generic)):
        # NumPy arrays and scalars: dtype, shape and values as tensors'
        a, e = np.asarray(actual), np.asarray(expected)
        if a.dtype != e.dtype or a.shape != e.shape:
            _fail(where, f"NumPy {a.dtype}{a.shape} != expected {e.dtype}{e.shape}")
        return _same_tensor(torch.from_numpy(a.copy()), torch.from_numpy(e.copy()), where, tol)
    if isinstance(expected, float):
        return _same_float(actual, expected, where, tol)
    if _is_namedtuple(expected):
        for name in expected._fields:
            _same(getattr(actual, name), getattr(expected, name), f"{where}.{name}", tol)
        return
    if isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            _fail(where, f"length {len(actual)} != expected {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{where}[{i}]", tol)
        return
    if isinstance(expected, dict):
        if list(actual.keys()) != list(expected.keys()):
            _fail(where, f"keys {list(actual.keys())} != expected {list(expected.keys())}")
        for k in expected:
            _same(actual[k], expected[k], f"{where}[{k!r}]", tol)
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for field in dataclasses.fields(expected):
            _same(getattr(actual, field.name), getattr(expected, field.name), f"{where}.{field.name}", tol)
        return
    if isinstance(expected, torch.nn.Module):
        _same(actual.state_dict(), expected.state_dict(), f"{where}.state_dict()", tol)
        return
    if isinstance(expected, (set, frozenset, int, str, bytes, complex, bool, type(None), torch.dtype,
                             torch.device, range, slice, type)):
        if actual != expected:
            _fail(where, f"{_short(actual)} != expected {_short(expected)}")
        return
    slots = [s for cls in type(expected).__mro__ for s in getattr(cls, "__slots__", ())]
    if slots and not hasattr(expected, "__dict__"):
        for name in slots:
            _same(getattr(actual, name, None), getattr(expected, name, None), f"{where}.{name}", tol)
        return
    if hasattr(expected, "__dict__") and not callable(expected):
        # A user object: compare its attributes.
        actual_attrs, expected_attrs = vars(actual), vars(expected)
        if sorted(actual_attrs) != sorted(expected_attrs):
            _fail(where, f"attributes {sorted(actual_attrs)} != expected {sorted(expected_attrs)}")
        for name in expected_attrs:
            _same(actual_attrs[name], expected_attrs[name], f"{where}.{name}", tol)
        return
    if actual != expected:
        _fail(where, f"{_short(actual)} != expected {_short(expected)}")


def _same_float(actual, expected, where, tol):
    atol, rtol = tol.of(torch.float64)
    if math.isnan(expected) and math.isnan(actual):
        return
    if not math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) and actual != expected:
        _fail(where, f"{actual!r} != expected {expected!r} (abs diff {abs(actual - expected):.3g})")


def _same_tensor(actual, expected, where, tol):
    if not isinstance(actual, torch.Tensor):
        _fail(where, f"expected a tensor, got {type(actual).__qualname__}: {_short(actual)}")
    if type(actual) is not type(expected):
        _fail(where, f"type {type(actual).__qualname__} != expected {type(expected).__qualname__}")
    props = ("dtype", "shape", "device", "requires_grad", "layout") + (("stride",) if tol.strides else ())
    for prop in props:
        got, want = _prop(actual, prop), _prop(expected, prop)
        if got != want:
            _fail(where, f"{prop} {got} != expected {want}")
    atol, rtol = tol.of(expected.dtype)
    a, e = actual.detach(), expected.detach()
    try:
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError:
        _fail(where, f"values differ{_diff_summary(a, e)} (atol={atol}, rtol={rtol})")
    if tol.zero_signs(atol, rtol) and e.is_floating_point() and e.layout == torch.strided:
        zeros = (e == 0) & (a == 0)
        if not torch.equal(a[zeros].signbit(), e[zeros].signbit()):
            _fail(where, f"signs of zeros differ: {int((a[zeros].signbit() != e[zeros].signbit()).sum())} of "
                         f"{int(zeros.sum())} zeros")


def _prop(t, name):
    return t.stride() if name == "stride" else getattr(t, name)


def _diff_summary(actual, expected):
    if expected.numel() == 0 or expected.layout != torch.strided:
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


def _rerun_hint():
    """The command that reruns the running pytest test on this Python (from the project root)."""
    node = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"\n  rerun: GRAPHJIT_TEST_PYTHONS={py} ./dev test '{node}'" if node else ""


# ----------------------------------------------------------------------------------------------- runs

@dataclasses.dataclass(frozen=True)
class _Options:
    """How a check runs and compares: see `check`."""
    backend: object = None
    graphs: object = 1
    compile_kwargs: dict = None
    atol: object = None
    rtol: object = None
    strides: bool = False
    fallback: bool = False
    identities: bool = True
    zero_signs: object = None

    def tolerance(self):
        """Exact for graphs run as captured; a compiler's results within TOLERANCES unless atol/rtol say."""
        default = None if self.backend is not None else 0.0
        return dict(atol=default if self.atol is None else self.atol,
                    rtol=default if self.rtol is None else self.rtol, strides=self.strides, signs=self.zero_signs)

    def compile(self, fn, counter, fullgraph_default):
        kwargs = dict(self.compile_kwargs or {})
        if fullgraph_default and self.graphs == 1:
            kwargs.setdefault("fullgraph", True)
        return compiler().compile(fn, backend=counter, **kwargs)


def _context(factory):
    return factory() if factory is not None else contextlib.nullcontext()


def _arguments(make_args, kwargs_factory, call):
    """(args, kwargs) of one call, made under torch.manual_seed(call); make_args gets the call's index when
    it takes a parameter."""
    torch.manual_seed(call)
    args = tuple(make_args(call) if _takes_argument(make_args) else make_args())
    return args, (dict(kwargs_factory()) if kwargs_factory is not None else {})


def _takes_argument(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def _run_both(eager_fn, compiled_fn, args, kwargs, label, options, context=None):
    """Run eager and compiled on independent copies of (args, kwargs); compare outputs and arguments."""
    eager_args, eager_kwargs = clone_tree((args, kwargs))
    comp_args, comp_kwargs = clone_tree((args, kwargs))
    with _context(context):
        expected = eager_fn(*eager_args, **eager_kwargs)
    with _context(context):
        actual = compiled_fn(*comp_args, **comp_kwargs)
    tol = _Tolerance(**options.tolerance())
    try:
        _same(actual, expected, "output", tol)
        _same((comp_args, comp_kwargs), (eager_args, eager_kwargs), "(args, kwargs) after the call", tol)
        if options.identities:
            _assert_same_identities(actual, expected, (comp_args, comp_kwargs), (eager_args, eager_kwargs))
    except Mismatch as e:
        raise Mismatch(f"{label}: {e}{_rerun_hint()}") from None
    return expected, actual


def _assert_graphs(counter, graphs, what):
    if graphs is not None and counter.frame_count != graphs:
        ops = [_op_count(g) for g in counter.graphs]
        raise AssertionError(f"{what}: the backend was handed {counter.frame_count} graph(s) "
                             f"(ops per graph {ops}), expected {graphs}{_rerun_hint()}")


def _assert_compiled(counter, options):
    if options.backend is None or options.fallback:
        return
    eager = counter.ran_as_captured()
    if eager:
        raise AssertionError(f"graph(s) {eager} of {counter.frame_count} ran as captured: the compiler refused "
                             f"or failed to compile them{_rerun_hint()}")


def _calls(fn, compiled, make_args, kwargs_factory, calls, counter, options, context):
    """The calls of check and check_module; graphs="first" wants no graph after the first call's."""
    first_call_graphs = None
    for call in range(calls):
        args, kwargs = _arguments(make_args, kwargs_factory, call)
        yield call, _run_both(fn, compiled, args, kwargs, f"call {call} of {calls}", options, context)
        first_call_graphs = counter.frame_count if first_call_graphs is None else first_call_graphs
    graphs = first_call_graphs if options.graphs == "first" else options.graphs
    _assert_graphs(counter, graphs, f"after {calls} calls with fresh same-shaped arguments")
    _assert_compiled(counter, options)


def check(fn, make_args, *, calls=4, graphs=1, backend=None, compile_kwargs=None, atol=None, rtol=None,
          strides=False, zero_signs=None, fallback=False, identities=True, kwargs_factory=None, context=None):
    """Differential test of `fn`: see the module docstring. Returns the CompileCounter.

    make_args:      () -> tuple of positional arguments, called once per call under torch.manual_seed(call);
                    or (call) -> tuple, given the call's index (0, 1, ...) to seed its own generator.
    kwargs_factory: () -> dict of keyword arguments, likewise.
    graphs:         graphs the backend must have been handed after all calls; None: not counted; "first":
                    as many as after the first call (no recompile). graphs=1 compiles with fullgraph=True
                    (unless compile_kwargs says otherwise): such a case claims the whole function is
                    capturable, and the error naming why it isn't is a better failure than a graph count.
    backend:        None: graphs run as captured (capture alone under test); a backend name or callable:
                    graphs go through it, and each must compile (not run as captured) unless `fallback`.
    atol, rtol:     None: exact without a backend, the dtype's TOLERANCES with one.
    strides:        compare output and argument tensors' strides too.
    zero_signs:     a zero must have eager's sign; None: in exact comparisons only (see assert_same).
    identities:     False: leave out the identity relations (which outputs are arguments, or one another).
    context:        () -> context manager that both the eager and the compiled call run under.
    """
    options = _Options(_backend(backend), graphs, compile_kwargs, atol, rtol, strides, fallback, identities,
                       zero_signs)
    compiler().reset()
    counter = CompileCounter(options.backend)
    compiled = options.compile(fn, counter, fullgraph_default=True)
    for _ in _calls(fn, compiled, make_args, kwargs_factory, calls, counter, options, context):
        pass
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


def check_steps(fn, steps, *, graphs=None, backend=None, compile_kwargs=None, atol=None, rtol=None,
                fallback=False):
    """Compile `fn` once, then run each Step eager vs compiled. For guard and recompile tests, where the
    arguments (or the world) change from call to call on purpose."""
    options = _Options(_backend(backend), graphs, compile_kwargs, atol, rtol, False, fallback)
    compiler().reset()
    counter = CompileCounter(options.backend)
    compiled = options.compile(fn, counter, fullgraph_default=False)
    for i, step in enumerate(steps):
        step = step if isinstance(step, Step) else Step(step)
        if step.before is not None:
            step.before()
        args, kwargs = _arguments(step.make_args, step.kwargs, i)
        _run_both(fn, compiled, args, kwargs, f"step {i}", options, step.context)
        _assert_graphs(counter, step.graphs, f"after step {i}")
    _assert_graphs(counter, graphs, f"after {len(steps)} steps")
    _assert_compiled(counter, options)
    return counter


def check_module(module_factory, make_args, *, calls=4, graphs=1, backend=None, compile_kwargs=None,
                 atol=None, rtol=None, fallback=False, kwargs_factory=None, context=None, call=None):
    """Differential test of an nn.Module: two identical copies (one deep-copied from the other), the second
    compiled whole with compile(module). After every call the outputs and arguments must match, and so must
    the state_dicts (parameters and buffers, e.g. BatchNorm's running stats in train mode). Options as
    `check`'s.

    call: (module) -> callable to compile instead of the module itself, e.g. `lambda m: m.forward`.
    Returns (counter, compiled, eager_module, compiled_module).
    """
    options = _Options(_backend(backend), graphs, compile_kwargs, atol, rtol, False, fallback)
    compiler().reset()
    torch.manual_seed(1234)
    eager_module = module_factory()
    compiled_module = copy.deepcopy(eager_module)
    counter = CompileCounter(options.backend)
    target = call(compiled_module) if call is not None else compiled_module
    eager_target = call(eager_module) if call is not None else eager_module
    compiled = options.compile(target, counter, fullgraph_default=True)
    tol = _Tolerance(**options.tolerance())
    for i, _ in _calls(eager_target, compiled, make_args, kwargs_factory, calls, counter, options, context):
        try:
            _same(compiled_module.state_dict(), eager_module.state_dict(), "module.state_dict()", tol)
        except Mismatch as e:
            raise Mismatch(f"call {i} of {calls}: {e}{_rerun_hint()}") from None
    return counter, compiled, eager_module, compiled_module


def check_training(module_factory, make_args, *, steps=3, graphs=1, backend=None, compile_kwargs=None,
                   atol=None, rtol=None, fallback=False, kwargs_factory=None, context=None, loss=None,
                   optimizer=None):
    """Differential test of training steps: two identical modules in train mode (the second a deep copy,
    compiled whole), each step on fresh arguments runs forward, a loss, backward and an optimizer step.
    After each step the outputs, the loss, every parameter's gradient, the gradients of arguments that
    require grad, the arguments, and the state_dict after the optimizer's step must match (within the
    dtype's TOLERANCES through a compiler, exact without one). With a compiling backend, both halves of
    every graph (forward and backward) must have compiled.

    loss:      (output) -> scalar tensor; default: each floating output that requires grad times a fixed
               random tensor of its shape, summed (a gradient of all ones would hide wrong backward maths).
    optimizer: (parameters) -> torch.optim.Optimizer; default SGD(lr=0.1). Other options as `check`'s.
    Returns (counter, compiled, eager_module, compiled_module)."""
    options = _Options(_backend(backend), graphs, compile_kwargs, atol, rtol, False, fallback)
    compiler().reset()
    torch.manual_seed(1234)
    eager_module = module_factory().train()
    compiled_module = copy.deepcopy(eager_module)
    counter = CompileCounter(options.backend)
    compiled = options.compile(compiled_module, counter, fullgraph_default=True)
    make_optimizer = optimizer or (lambda params: torch.optim.SGD(params, lr=0.1))
    optimizers = make_optimizer(eager_module.parameters()), make_optimizer(compiled_module.parameters())
    loss = loss or _projected_sum
    tol = _Tolerance(**options.tolerance())
    for step in range(steps):
        args, kwargs = _arguments(make_args, kwargs_factory, step)
        runs = []
        for module, fn in ((eager_module, eager_module), (compiled_module, compiled)):
            call_args, call_kwargs = clone_tree((args, kwargs))
            with _context(context):
                out = fn(*call_args, **call_kwargs)
                value = loss(out)
            value.backward()
            runs.append(dict(output=out, loss=value, args=(call_args, call_kwargs),
                             grads={n: p.grad for n, p in module.named_parameters()},
                             arg_grads=[t.grad for t in _tensor_leaves_of((call_args, call_kwargs))]))
        expected, actual = runs
        try:
            for key in ("output", "loss", "args", "grads", "arg_grads"):
                _same(actual[key], expected[key], f"step {step}: {key}", tol)
            for opt in optimizers:
                opt.step()
                opt.zero_grad()
            _same(compiled_module.state_dict(), eager_module.state_dict(),
                  f"step {step}: state_dict() after the optimizer's step", tol)
        except Mismatch as e:
            raise Mismatch(f"{e}{_rerun_hint()}") from None
    _assert_graphs(counter, graphs, f"after {steps} training steps")
    _assert_compiled(counter, options)
    return counter, compiled, eager_module, compiled_module


def _tensor_leaves_of(tree):
    return [t for _, t in _tensor_leaves(tree)]


def _projected_sum(output):
    """Each floating tensor of output that requires grad, times a fixed random tensor of its shape
    (seeded by its position), summed."""
    total = None
    for i, t in enumerate(_tensor_leaves_of(output)):
        if not (t.is_floating_point() and t.requires_grad):
            continue
        weight = torch.randn(t.shape, generator=torch.Generator().manual_seed(i)).to(t.device, t.dtype)
        term = (t * weight).sum()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("the output has no floating tensor that requires grad: pass loss=")
    return total


def check_raises(fn, make_args, *, calls=2, graphs=None, backend=None, compile_kwargs=None,
                 kwargs_factory=None):
    """Eager raises; compiled must raise the same exception type with the same message, every call."""
    compiler().reset()
    counter = CompileCounter(_backend(backend))
    compiled = compiler().compile(fn, backend=counter, **dict(compile_kwargs or {}))
    for call in range(calls):
        args, kwargs = _arguments(make_args, kwargs_factory, call)
        expected = _raised(fn, clone_tree((args, kwargs)))
        assert expected is not None, f"the case is wrong: eager {fn.__qualname__} did not raise"
        actual = _raised(compiled, clone_tree((args, kwargs)))
        label = f"call {call} of {calls}"
        if actual is None:
            raise AssertionError(f"{label}: eager raised {type(expected).__name__}({expected}); compiled "
                                 f"returned normally{_rerun_hint()}")
        if type(actual) is not type(expected) or str(actual) != str(expected):
            raise AssertionError(f"{label}: eager raised {type(expected).__name__}({expected!s}); compiled "
                                 f"raised {type(actual).__name__}({actual!s}){_rerun_hint()}") from actual
    _assert_graphs(counter, graphs, f"after {calls} calls")
    return counter


def _raised(fn, args_kwargs):
    args, kwargs = args_kwargs
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any exception is the thing compared
        return e
    return None
