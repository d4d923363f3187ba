"""Graph breaks inside inlined callees. When a function the interpreter inlines can't be captured whole,
the caller breaks at the call: its graph so far is compiled, and the callee is called from CPython through
graphjit's interception, so it is captured as its own frame (with its own break and resume function). Then
the caller continues in its resume function.

    def outer(x):            graphs: outer up to the call [x.sin()]
        a = x.sin()                  helper before its print [y * 2]
        b = helper(a)                helper's resume          [z + 1]
        return b.cos()               outer's resume           [b.cos()]

Each case asserts results, mutated arguments and Python state, and the graph count; a few also check
which ops went to which graph.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib
import io

import pytest
import torch
import torch.nn as nn

import graphjit
from .harness import Cases, r
from .test_breaks_support import World, check_break, check_break_module, check_break_steps, Step


SINK = io.StringIO()


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


def _new_sink():
    global SINK
    SINK = io.StringIO()


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


def printed():
    return World(_new_sink, lambda: SINK.getvalue(), nonempty=True)


def graph_ops(counter):
    """Per graph, the names of its call targets: ['mul', 'add'] ..."""
    return [[getattr(n.target, "__name__", str(n.target)) for n in g.graph.nodes if n.op.startswith("call")]
            for g in counter.graphs]


# ------------------------------------------------------------------------------ one level

def helper_prints(y):
    z = y * 2
    print("helper", z.shape, file=SINK)
    return z + 1


def outer_calls_helper(x):
    a = x.sin()
    b = helper_prints(a)
    return b.cos()


def test_break_in_helper_caller_and_callee_graphs():
    counter = check_break(outer_calls_helper, lambda: (r(3),), graphs=4, world=printed())
    assert graph_ops(counter) == [["sin"], ["mul"], ["add"], ["cos"]], graph_ops(counter)


def outer_helper_first(x):
    b = helper_prints(x)
    return b.cos()


def outer_helper_last(x):
    a = x.sin()
    return helper_prints(a)


def outer_helper_twice(x):
    a = helper_prints(x)
    b = helper_prints(a)                  # same code, same shapes: the callee's entries are reused
    return a + b


def outer_helper_in_expression(x):
    return x.exp() * helper_prints(x) - 1


def outer_helper_result_discarded(x):
    y = x + 1
    helper_prints(y)
    return y * 2


@pytest.mark.parametrize("fn, graphs", [(outer_helper_first, 3), (outer_helper_last, 3), (outer_helper_twice, 3),
                                        (outer_helper_in_expression, 4), (outer_helper_result_discarded, 4)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_break_in_helper_positions(fn, graphs):
    check_break(fn, lambda: (r(3),), graphs=graphs, world=printed())


def helper_mutates(y, log):
    log.append("in")
    z = y.relu()
    print("mutates", file=SINK)
    log.append(len(log))
    return z


def outer_helper_mutates_list(x, log):
    log.append("out")
    a = x - 1
    b = helper_mutates(a, log)
    log.append("back")
    return b * a


def helper_returns_tuple(y):
    s = y.sum()
    print("tuple", file=SINK)
    return s, y * s


def outer_unpacks_helper_tuple(x):
    s, t = helper_returns_tuple(x * 2)
    return t - s


def helper_kwargs(y, *, scale=1.0, shift=0.0):
    z = y * scale
    print("kw", scale, shift, file=SINK)
    return z + shift


def outer_helper_keywords(x):
    a = x.abs()
    return helper_kwargs(a, scale=3.0) + helper_kwargs(a, shift=2.0)


def helper_branches(y):
    if y.sum() > 0:
        return y * 2
    return y * 3


def outer_helper_branches(x):
    a = x + 1
    b = helper_branches(a)
    return b - 1


callee_cases = Cases()
callee_cases.add_fn(outer_helper_mutates_list, lambda: (r(3), []), graphs=3)   # helper's resume: no ops
callee_cases.add_fn(outer_unpacks_helper_tuple, lambda: (r(3),), graphs=4)
callee_cases.add_fn(outer_helper_keywords, lambda: (r(3),), graphs=None)


@pytest.mark.parametrize("case", callee_cases.params())
def test_break_in_helper_cases(case):
    check_break(case.fn, case.make_args, world=printed(), **case.options)


def test_helper_keywords_graphs():
    # outer [abs]; helper_kwargs twice, with different constant keywords: its frame is compiled for each
    # (scale=3.0, shift=0.0) and (scale=1.0, shift=2.0): 2 x [mul] + 2 x [add]; outer's resumes: the
    # second call's prefix has no ops, the last resume [add]. Counting is value-dependent: bound it.
    counter = check_break(outer_helper_keywords, lambda: (r(3),), graphs=None, world=printed())
    assert 4 <= counter.frame_count <= 7, graph_ops(counter)


def test_data_dependent_branch_in_helper():
    # outer [x + 1]; helper [sum > 0] then [*2] or [*3]; outer's resume [b - 1]
    up = lambda: (torch.ones(3),)         # noqa: E731
    down = lambda: (-torch.ones(3) * 5,)  # noqa: E731
    check_break_steps(outer_helper_branches, [Step(up, graphs=4), Step(down, graphs=5), Step(up, graphs=5),
                                              Step(down, graphs=5)])


# ------------------------------------------------------------------------------ nested levels

def level2(v):
    w = v.tanh()
    print("level2", file=SINK)
    return w * 4


def level1(u):
    p = u + 3
    q = level2(p)
    return q - p


def level0(x):
    a = x * 0.5
    b = level1(a)
    return b.exp()


def test_break_two_levels_down():
    # level0 [mul]; level1 [add]; level2 [tanh], [mul]; level1's resume [sub]; level0's resume [exp]
    counter = check_break(level0, lambda: (r(3),), graphs=6, world=printed())
    assert graph_ops(counter) == [["mul"], ["add"], ["tanh"], ["mul"], ["sub"], ["exp"]], graph_ops(counter)


@graphjit.disable
def _disabled_leaf(v, log):
    log.append(v.shape[0])
    return v + 10


def leaf_caller(v, log):
    return _disabled_leaf(v * 2, log) * 3


def mid_caller(u, log):
    return leaf_caller(u - 1, log).sum()


def top_caller(x, log):
    return mid_caller(x.abs(), log) + x


def test_disabled_function_two_levels_down():
    # top [abs]; mid [sub]; leaf [mul], then _disabled_leaf in CPython, leaf's resume [mul];
    # mid's resume [sum]; top's resume [add]
    counter = check_break(top_caller, lambda: (r(3), []), graphs=6)
    assert graph_ops(counter) == [["abs"], ["sub"], ["mul"], ["mul"], ["sum"], ["add"]], graph_ops(counter)


# ------------------------------------------------------------------------------ methods and modules

@graphjit.disable
def log_stats(t, log):
    log.append(round(float(t.detach().abs().mean()), 4))


class Stats(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(4, 4)
        self.lin2 = nn.Linear(4, 2)
        self.log = []

    def observe(self, h):
        s = h.relu()
        log_stats(s, self.log)               # disabled: observe breaks, so forward breaks at its call
        return s * 2

    def forward(self, x):
        h = self.lin1(x)
        h = self.observe(h)
        return self.lin2(h)


def test_module_method_calling_disabled_function():
    # forward [lin1]; observe [relu], then log_stats in CPython, [mul]; forward's resume [lin2].
    # self.log grows by one each call, and only passes through the trace: no guard on its length, and
    # no recompile
    check_break_module(Stats, lambda: (r(2, 4),), graphs=4, attrs=("log",), atol=1e-6)


class PrintingBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        print("block", tuple(y.shape), file=SINK)
        return y.relu()


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = PrintingBlock()
        self.b = PrintingBlock()

    def forward(self, x):
        return self.b(self.a(x) * 2) + 1


def test_submodule_forward_with_print_no_grad():
    """Under no_grad both blocks see the same guards: b reuses a's compiled entries (parameters are graph
    inputs, not constants). a: [lin], [relu]; TwoBlocks: [mul], [add]: 4 graphs."""
    world = printed()
    check_break_module(TwoBlocks, lambda: (r(2, 3),), graphs=4, context=lambda: _both(world(), torch.no_grad()),
                       atol=1e-6)
    world.assert_same()


def test_submodule_forward_with_print():
    # TwoBlocks breaks at self.a(x) (no ops before); a: [lin], [relu]; resume: [mul] then breaks at self.b:
    # b runs the same code as a, but its input requires grad (a's output does) while x doesn't: its first
    # region recompiles under that guard: [lin]; the resume at [relu] is handed x too but never reads it
    # (no guard on it), so b reuses a's entry; TwoBlocks's last resume [add]. 5 graphs.
    world = printed()
    check_break_module(TwoBlocks, lambda: (r(2, 3),), graphs=5, context=world, atol=1e-6)
    world.assert_same()


class Sequential3(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(3, 3), PrintingBlock(), nn.Linear(3, 2))

    def forward(self, x):
        return self.seq(x * 2) - 1


def test_print_inside_sequential():
    # nn.Sequential.forward loops over its children: a break in a child is a break inside a loop there.
    # graphs=None: results and printed text are what's asserted.
    world = printed()
    check_break_module(Sequential3, lambda: (r(2, 3),), graphs=None, context=world, atol=1e-6)
    world.assert_same()


class Greeter:
    def __init__(self, scale):
        self.scale = scale

    def greet(self, x):
        y = x * self.scale
        print("greet", self.scale, file=SINK)
        return y + self.scale

    def __call__(self, x):
        y = x - self.scale
        print("call", file=SINK)
        return y.abs()


def calls_user_method(x, g):
    return g.greet(x.sin()).cos()


def calls_user_callable_object(x, g):
    return g(x.sin()).cos()


def test_user_method_with_print():
    check_break(calls_user_method, lambda: (r(3), Greeter(2.0)), graphs=4, world=printed())


def test_user_callable_object_with_print_results():
    check_break(calls_user_callable_object, lambda: (r(3), Greeter(2.0)), graphs=None, world=printed())


def test_user_callable_object_with_print_is_captured():
    # caller [sin]; Greeter.__call__ [sub], [abs]; caller's resume [cos]
    check_break(calls_user_callable_object, lambda: (r(3), Greeter(2.0)), graphs=4, world=printed())


def make_closure_helper(k):
    def closure_helper(v):
        w = v * k
        print("closure helper", k, file=SINK)
        return w + k
    return closure_helper


_CLOSURE_HELPER = make_closure_helper(5)


def calls_closure_helper(x):
    return _CLOSURE_HELPER(x + 1) * 2


def calls_lambda_with_print(x):
    f = lambda v: print("lambda", file=SINK) or v * 2   # noqa: E731
    return f(x + 1) - 1


def test_closure_helper_with_print():
    check_break(calls_closure_helper, lambda: (r(3),), graphs=4, world=printed())


def test_lambda_with_print():
    # The lambda is made in the frame (not a cell): the break happens at its call, and the lambda, compiled
    # as its own frame, breaks at print with nothing before it.
    check_break(calls_lambda_with_print, lambda: (r(3),), graphs=None, world=printed())


# ------------------------------------------------------------------------------ what is intercepted

def _inner_captured(v):
    return v.sin() * 2


@graphjit.disable
def _glue(v):
    return _inner_captured(v)


def outer_via_glue(x):
    y = x + 1
    z = _glue(y)
    return z * 3


def test_function_called_from_disabled_code_runs_in_cpython():
    """_inner_captured is called by disabled code, in CPython: nothing intercepts it, so its sin and mul are
    in no graph. Only outer's two regions are compiled."""
    counter = check_break(outer_via_glue, lambda: (r(3),), graphs=2)
    assert graph_ops(counter) == [["add"], ["mul"]], graph_ops(counter)


def helper_plain_then_print(v):
    w = v.sin()
    print("plain then print", file=SINK)
    return w


def helper_without_break(v):
    return v.cos() + 1


def outer_mixes_helpers(x):
    a = helper_without_break(x)          # inlined into outer's graph
    b = helper_plain_then_print(a)       # breaks: called through interception
    c = helper_without_break(b)          # inlined into outer's resume graph
    return c


def test_helper_without_break_is_inlined_helper_with_break_is_its_own_frame():
    counter = check_break(outer_mixes_helpers, lambda: (r(3),), graphs=3, world=printed())
    assert graph_ops(counter) == [["cos", "add"], ["sin"], ["cos", "add"]], graph_ops(counter)


def recursive(x, n):
    if n == 0:
        print("bottom", file=SINK)
        return x
    return recursive(x * 2, n - 1) + 1


def test_recursive_helper_with_print_at_the_bottom():
    check_break(recursive, lambda: (r(3), 3), graphs=None, world=printed())


HOOKED = []


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = PrintingBlock()
        self.block.register_forward_pre_hook(lambda m, args: HOOKED.append("pre"))
        self.block.register_forward_hook(lambda m, args, out: HOOKED.append(tuple(out.shape)))

    def forward(self, x):
        return self.block(x + 1) - 1


def test_submodule_hooks_run_once_when_its_forward_breaks():
    """The submodule is called through nn.Module.__call__ from the break: its hooks run once per call."""
    def reset():
        HOOKED.clear()
        _new_sink()
    world = World(reset, lambda: (list(HOOKED), SINK.getvalue()), nonempty=True)
    check_break_module(Hooked, lambda: (r(2, 3),), graphs=None, context=world, atol=1e-6)
    world.assert_same()
