"""Frames that run eagerly still have their calls captured.

A break inside a loop or a `try` block (or the recompile limit) makes the frame itself run in CPython,
but the frame runs a copy of its code whose call sites go through graphjit's interception
(capture/intercept.py): the Python functions and modules it calls are compiled as their own frames, as
under a frame hook. Each case checks results, mutated state and graph counts; the count is what the
callees contribute (the eager frame's own ops are in no graph).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib
import io
import sys
import types
import warnings

import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import CompileCounter, assert_same
from .test_breaks_support import World, check_break, check_break_module

LOG = []
SINK = io.StringIO()


def _ops(counter):
    """Per graph, the sorted names of the ops it calls."""
    return [sorted({getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
                    if n.op in ("call_function", "call_method", "call_module")}) for gm in counter.graphs]


def _world():
    return World(LOG.clear, lambda: list(LOG))


def note(*items):
    """Log, and print (a graph break: where it runs in a loop or `try`, the frame runs eagerly)."""
    LOG.append(items)
    print(*items, file=SINK)


def helper(x, k=1):
    return x.sin() * k + 1


def helper_kw(x, *, scale):
    return x.cos() * scale


def helper_star(*xs):
    return sum(xs) * 2


def loop_with_print(x):
    for i in range(3):
        x = helper(x, k=i)
        note("step", i)                      # a break in a loop: the frame runs eagerly
    return helper_kw(x, scale=2.0) + helper_star(x, x)


def test_break_in_loop_callees_are_compiled():
    counter = check_break(loop_with_print, lambda: (torch.randn(4),), graphs=4, world=_world())
    # helper twice (k=0, then k symbolic after it changed), helper_kw, helper_star; the frame's own `+`
    # runs eagerly
    assert _ops(counter) == [["add", "mul", "sin"], ["add", "mul", "sin"], ["cos", "mul"], ["add", "mul"]]


def try_block(x):
    try:
        y = helper(x)
        note("inside try", y.shape)         # a break in a try block
        z = helper_kw(y, scale=3.0)
    except ValueError:
        z = x
    return z


def test_break_in_try_callees_are_compiled():
    counter = check_break(try_block, lambda: (torch.randn(3),), graphs=2, world=_world())
    assert _ops(counter) == [["add", "mul", "sin"], ["cos", "mul"]]


def raising_helper(x):
    if x.shape[0] > 2:
        raise ValueError("too long")
    return x + 1


def try_catches_callee_error(x):
    out = []
    for n in (2, 4):
        try:
            out.append(raising_helper(x[:n]))
        except ValueError as e:
            note("caught", str(e))
            out.append(x.sum().reshape(1))
    return out


def test_callee_exception_reaches_the_eager_frames_handler():
    counter = check_break(try_catches_callee_error, lambda: (torch.randn(5),), graphs=1, world=_world())
    assert _ops(counter) == [["add"]]       # raising_helper for the slice that doesn't raise


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class Stack(nn.Module):
    """A library-style model: a loop over blocks calling a logging helper that can't be captured."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(6, 2)
        self.seen = []

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            self.seen.append(type(block).__name__)
            note(block.lin.out_features)
        return self.head(x)


def test_module_loop_blocks_are_compiled():
    counter, *_ = check_break_module(Stack, lambda: (torch.randn(3, 6),), graphs=2, attrs=("seen",))
    # the blocks share one forward: a graph for the first (its input needs no grad) and one for the rest;
    # the head, torch's own nn.Linear (one op), runs eagerly as the frame does
    assert _ops(counter) == [["add", "linear", "relu"], ["add", "linear", "relu"]]


class StackWithASequentialHead(Stack):
    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(6, 4), nn.GELU(), nn.Linear(4, 2))


def test_a_torch_container_called_from_an_eager_frame_is_compiled():
    """torch's own modules with no submodules run eagerly from an eager frame; a container of them
    (nn.Sequential) is still a graph of its own."""
    counter, *_ = check_break_module(StackWithASequentialHead, lambda: (torch.randn(3, 6),), graphs=3,
                                     attrs=("seen",))
    assert _ops(counter)[-1] == ["gelu", "linear"], _ops(counter)        # (names of the ops, once each)


def make_adder(k):
    def f(x):
        for i in range(2):
            note(i)
        return x + k
    return f


def test_closures_of_one_def_keep_their_own_cells():
    """Entries are shared by every closure of one def; the eager frame must run with this call's cells."""
    f1, f2 = graphjit.compile(make_adder(1)), graphjit.compile(make_adder(2))
    x = torch.zeros(3)
    assert_same(f1(x), x + 1)
    assert_same(f2(x), x + 2)
    assert_same(f1(x), x + 1)


def identity_decorator(fn):
    note("decorating", fn.__name__, type(fn).__name__)
    return fn


def decorates_in_loop(x):
    for i in range(2):
        @identity_decorator
        def inner(y):
            return y * 2
        note("inner type", type(inner).__name__)
        x = inner(x)
    return x


def test_decorator_gets_the_function_itself():
    counter = check_break(decorates_in_loop, lambda: (torch.randn(3),), graphs=1, world=_world())
    assert _ops(counter) == [["mul"]]       # inner, called after its decorator returned it


def comprehension_calls(x):
    for i in range(2):
        note(i)
    ys = [helper(t) for t in x.unbind(0)]
    total = sum(helper(t) for t in ys)
    return torch.stack(ys), total


def test_comprehension_calls():
    counter = check_break(comprehension_calls, lambda: (torch.randn(3, 2),), graphs=1, world=_world())
    assert _ops(counter) == [["add", "mul", "sin"]]    # helper, from the list comprehension and the genexpr


class Base(nn.Module):
    def forward(self, x):
        return x.tanh()


class Derived(Base):
    def forward(self, x):
        for i in range(2):
            note(i)
            x = super().forward(x) + self.extra(x, scale=2.0) + Derived.extra(self, *(x,), scale=1.0)
        return x

    def extra(self, x, *, scale):
        return x.exp() * scale


def test_super_keyword_and_star_calls():
    counter, *_ = check_break_module(Derived, lambda: (torch.randn(4),), graphs=3)
    assert _ops(counter) == [["tanh"], ["exp", "mul"], ["exp", "mul"]]   # extra per value of `scale`


def branchy_callee(x, flag):
    for i in range(2):
        note(i)
    y = (helper if flag else raising_helper)(x)          # the callable comes through a branch
    assert y.shape == x.shape, "shape changed"
    with contextlib.nullcontext():
        z = helper(y, k=2)
    return z


@pytest.mark.parametrize("flag", [True, False])
def test_branchy_callee_assert_and_with(flag):
    # 3.11/3.12 push the call's NULL before the branch that picks the callee, so that call is not
    # intercepted; 3.13 pushes it after
    counter = check_break(branchy_callee, lambda: (torch.randn(2), flag), graphs=None, world=_world())
    helper_k2 = ["add", "mul", "sin"]
    if sys.version_info >= (3, 13):
        assert _ops(counter) == [helper_k2 if flag else ["add"], helper_k2]
    else:
        assert _ops(counter) == [helper_k2]


def generator_frame(x):
    for i in range(3):
        note(i)
        yield helper(x, k=i)


def test_generator_frame_results():
    compiled = graphjit.compile(generator_frame)
    x = torch.randn(3)
    for a, b in zip(compiled(x), generator_frame(x)):
        assert_same(a, b)


def small(x, n):
    return x * n


def many_ints(x, n):
    return small(x, n)


def test_recompile_limit_keeps_compiling_callees():
    counter = CompileCounter()
    compiled = graphjit.compile(many_ints, backend=counter, dynamic=False)
    x = torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(12):
            assert_same(compiled(x, n), x * n)
    # the frame inlines small(); past the limit many_ints runs eagerly and small() is compiled on its own
    assert counter.frame_count > graphjit.config.recompile_limit


def test_functions_made_in_an_eager_frame_are_plain_functions():
    def maker(x):
        for i in range(2):
            note(i)
        def inner(y):
            return y + 1
        return inner, inner.__code__
    compiled = graphjit.compile(maker)
    fn, code = compiled(torch.zeros(1))
    assert type(fn) is types.FunctionType and fn.__code__ is code
    assert fn.__code__.co_name == "inner"


def make_breaking(t, g, k):
    count = 0

    def f(x):
        nonlocal count
        y = x + t                      # a cell read before the break
        print("between", file=SINK)    # a break at the top level: graph, print, resume function
        count += k
        return g(y) * k, count         # cells read in the resume function
    return f


def test_closures_of_one_def_across_a_break():
    """The resume function is made once per break; each closure's call must run it with its own cells."""
    made = [(i, torch.full((2,), float(i)), (torch.sin, torch.cos)[i % 2], i + 1) for i in range(4)]
    compiled = [graphjit.compile(make_breaking(t, g, k)) for _, t, g, k in made]
    eager = [make_breaking(t, g, k) for _, t, g, k in made]
    x = torch.randn(2)
    for _ in range(2):
        for c, e in zip(compiled, eager):
            assert_same(c(x), e(x))


def defines_a_class(x, leaves=False):
    y = x.sin()
    class Scale:                       # built while tracing unless an instance leaves the frame
        factor = 3

        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v * self.factor
    s = Scale(2)
    if leaves:
        return y * s.get(), s
    return y * s.get(), type(s).__name__, Scale.__qualname__


def test_class_statement_breaks_and_resumes_where_the_class_leaves_the_frame():
    counter = CompileCounter()
    compiled = graphjit.compile(defines_a_class, backend=counter)
    x = torch.randn(3)
    for _ in range(2):
        assert_same(compiled(x)[:1], defines_a_class(x)[:1])
        assert_same(compiled(x, True)[0], defines_a_class(x, True)[0])
    # the class is a frame object, so a kept instance would be of one class for every call: the class
    # statement breaks where an instance leaves, and each call's new class recompiles the resume function
    # (torch.compile recompiles per call too)
    first, second = compiled(x, True)[1], compiled(x, True)[1]
    assert type(first) is not type(second) and type(first).__qualname__ == type(second).__qualname__
    assert ["sin"] in _ops(counter)          # the graph before the break at the class statement


def returns_inner_functions(x):
    def scale(y, k=2, *, shift=1.0):
        return y * k + shift
    return scale(x), scale, (lambda z: z - 1)


def test_functions_made_in_the_frame_are_returned():
    counter = CompileCounter()
    compiled = graphjit.compile(returns_inner_functions, backend=counter, fullgraph=True)
    x = torch.randn(3)
    out, fn, lam = compiled(x)
    expected, efn, elam = returns_inner_functions(x)
    assert_same(out, expected)
    assert fn.__qualname__ == efn.__qualname__ and fn.__defaults__ == (2,) and fn.__kwdefaults__ == {"shift": 1.0}
    assert_same(fn(x, 3), efn(x, 3))
    assert_same(lam(x), elam(x))
    assert compiled(x)[1] is not fn            # a new function object per call, as in CPython


def deep(x, n):
    for _ in range(1):
        note_quietly(n)                # a break in a loop: the frame runs eagerly
    return x if n == 0 else deep(x + 1, n - 1)


def note_quietly(n):
    print(n, file=SINK)


def test_deep_recursion_in_an_eager_frame():
    """The frame's calls of its own function run as they are: compiled levels would add graphjit's frames
    between the user's and reach the recursion limit where eager does not."""
    compiled = graphjit.compile(deep)
    x = torch.zeros(2)
    assert_same(compiled(x, 400), x + 400)


def logged_step(x, step, log):
    print(f"step {step}", file=log)        # a graph break with nothing before it
    y = (x * 2).sin()
    return y.cos() + y.exp()


def test_a_frame_with_an_empty_graph_before_its_break_stays_compiled():
    """The entry before the break has no op, but the frame is not Python alone: its resume function's
    graph runs on every call."""
    runs = []

    def backend(gm, example_inputs):
        def run(*args):
            runs.append(1)
            return gm.forward(*args)
        return run
    compiled = graphjit.compile(logged_step, backend=backend)
    for step in range(6):
        x = torch.randn(3)
        assert_same(compiled(x, step, io.StringIO()), logged_step(x, step, io.StringIO()))
    assert len(runs) == 6


def maybe_tensor(value):
    if isinstance(value, str):
        return value.upper()
    return value * 2


def test_a_frame_graphless_for_strings_still_compiles_for_tensors():
    counter = CompileCounter()
    compiled = graphjit.compile(maybe_tensor, backend=counter)
    for value in ("a", "bc", "def"):
        assert compiled(value) == maybe_tensor(value)
    x = torch.randn(3)
    assert_same(compiled(x), maybe_tensor(x))
    assert counter.frame_count == 1


def joined(a, b):
    return f"{a}{b}"


def test_a_function_with_a_signature_of_its_own_is_bound_by_its_code():
    """A decorator's __signature__ (here `(*args)`) does not name the code's parameters: the trace binds
    the arguments as the code does, so its entries' guards hold on the calls they were made for."""
    import inspect
    fn = types.FunctionType(joined.__code__, globals(), "joined")
    fn.__signature__ = inspect.signature(lambda *args: None)
    compiled = graphjit.compile(fn, backend=CompileCounter())
    for i in range(5):
        assert compiled(i, i + 1) == f"{i}{i + 1}"
    compiled_tensor = graphjit.compile(types.FunctionType(logged_step.__code__, globals(), "step"),
                                       backend=CompileCounter())
    x = torch.randn(3)
    assert_same(compiled_tensor(x, 0, io.StringIO()), logged_step(x, 0, io.StringIO()))


def keywords_only(**options):
    return sorted(options.items())


def test_the_argument_types_entry_takes_keywords_in_any_order():
    counter = CompileCounter()
    compiled = graphjit.compile(keywords_only, backend=counter)
    for a, b in ((1, 2), (3, 4), (5, 6)):
        assert compiled(a=a, b=b) == keywords_only(a=a, b=b)
        assert compiled(b=b, a=a) == keywords_only(b=b, a=a)
