"""Guards that must tell apart values Python's == takes for one another, and state the tensor guards do not
cover: functions sharing a code object with other globals; dict keys, set members, ranges of equal
elements; 1 / 1.0 / True and 0.0 / -0.0; a tensor's is_leaf, _version, output_nr and other autograd or
storage state. Each case runs eager and compiled on the same sequence of calls and compares.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import types

import pytest
import torch

import graphjit
from graphjit.testing import Step, assert_same, check_steps


def _function_with_globals(source, name, namespace):
    exec(source, namespace)
    return namespace[name]


def _compiled_pair(source, name, first, second):
    """Two functions of one code object over two globals dicts, each compiled."""
    f1 = _function_with_globals(source, name, dict(first))
    f2 = types.FunctionType(f1.__code__, dict(second), name)
    return f1, f2


@pytest.mark.parametrize("source", [
    "def f(x):\n    return x * G\n",
    "def f(x):\n    y = x * G\n    print(end='')\n    return y + G\n",       # a graph break: resume function
])
def test_functions_sharing_code_read_their_own_globals(source):
    f1, f2 = _compiled_pair(source, "f", {"G": 2}, {"G": 7})
    c1, c2 = graphjit.compile(f1), graphjit.compile(f2)
    x = torch.arange(4.)
    for _ in range(2):
        assert_same(c1(x), f1(x))
        assert_same(c2(x), f2(x))


def test_functions_sharing_code_write_their_own_globals():
    source = "def w(x):\n    global N\n    N = N + 1\n    return x * N\n"
    f1, f2 = _compiled_pair(source, "w", {"N": 0}, {"N": 0})
    c1, c2 = graphjit.compile(f1), graphjit.compile(f2)
    x = torch.arange(4.)
    assert_same(c1(x), x * 1)
    f1.__globals__["N"] = 0
    assert_same(c2(x), x * 1)
    assert (f1.__globals__["N"], f2.__globals__["N"]) == (0, 1)


def _keys_as_values(x, d):
    return [torch.full((2,), k[0] if isinstance(k, tuple) else k) / x for k in d]


@pytest.mark.parametrize("values", [
    [{0.0: "a"}, {-0.0: "a"}],
    [{1: "a"}, {1.0: "a"}, {True: "a"}],
    [{(1, 2): "a"}, {(1.0, 2): "a"}],
    [frozenset({1}), frozenset({True}), frozenset({1.0})],
    [{1, 2}, {1.0, 2}],
])
def test_equal_keys_of_other_types_or_signs_recompile(values):
    check_steps(_keys_as_values, [Step(lambda v=v: (torch.ones(2), v)) for v in values],
                graphs=len(values))


def _range_bounds(x, r):
    return x * r.stop + r.start + r.step


def test_ranges_of_equal_elements_with_other_bounds_recompile():
    ranges = [range(0, 3, 2), range(0, 4, 2), range(0), range(5, 5)]
    check_steps(_range_bounds, [Step(lambda r=r: (torch.ones(2), r)) for r in ranges], graphs=len(ranges))


def test_the_same_range_again_does_not_recompile():
    check_steps(_range_bounds, [Step(lambda: (torch.ones(2), range(1, 9, 3)))] * 3, graphs=1)


def _nonleaf():
    return torch.ones(3, requires_grad=True) * 1


def _bumped():
    t = torch.ones(3)
    t.add_(0)
    t.add_(0)
    return t


def _retained():
    t = torch.ones(3, requires_grad=True) * 1
    t.retain_grad()
    return t


@pytest.mark.parametrize("fn, first, second", [
    (lambda x: x * 2 if x.is_leaf else x * 3, _nonleaf, lambda: torch.ones(3, requires_grad=True)),
    (lambda x: x * x._version, lambda: torch.ones(3), _bumped),
    (lambda x: x * 2 if x.retains_grad else x * 3, _nonleaf, _retained),
    (lambda x: x * 2 if x._is_view() else x * 3, lambda: torch.ones(3), lambda: torch.ones(6)[3:]),
    (lambda x: x * (x.output_nr + 1), lambda: _nonleaf().repeat(2).split(3)[0],
     lambda: _nonleaf().repeat(2).split(3)[1]),
], ids=["is_leaf", "_version", "retains_grad", "_is_view", "output_nr"])
def test_tensor_state_the_tensor_guards_do_not_cover(fn, first, second):
    compiled = graphjit.compile(fn)
    for make in (first, second, first):
        assert_same(compiled(make()).detach(), fn(make()).detach())


def test_is_set_to_is_read_from_the_tensors():
    """Fake tensors answer is_set_to with False; whether two inputs share storage is not guarded."""
    def fn(x, y):
        return x + 1 if x.is_set_to(y) else x - 1
    compiled = graphjit.compile(fn)
    t = torch.zeros(3)
    for x, y in ((t, t), (t, torch.zeros(3)), (t, t)):
        assert_same(compiled(x, y), fn(x, y))


def reads_some_arguments(x, unused_tensor, unused_int, unused_list):
    return x + 1


def reads_after_a_break(x, n, t, items):
    y = x * 2
    if y.sum() > 0:          # a break: the rest reads n, t and items, this part does not
        y = y + n + t
        items.append(n)
    return y, unused_after(items)


def unused_after(items):
    return len(items)


def test_arguments_the_frame_never_reads_are_not_guarded():
    """An argument, or a local a resume function is handed, that the traced code does not read guards
    nothing: a new shape, value or type there runs the same entry."""
    from graphjit.testing import CompileCounter
    graphjit.reset()
    counter = CompileCounter()
    compiled = graphjit.compile(reads_some_arguments, backend=counter)
    for i, unused in enumerate((torch.ones(2, 3), torch.ones(5), 3.5, "text", None)):
        assert torch.equal(compiled(torch.ones(3), unused, i, [i] * i), torch.full((3,), 2.0))
    assert counter.frame_count == 1


def test_a_local_read_only_after_a_break_is_guarded_where_it_is_read():
    from graphjit.testing import CompileCounter
    graphjit.reset()
    counter = CompileCounter()
    compiled = graphjit.compile(reads_after_a_break, backend=counter)
    for x, n, t in ((torch.ones(3), 1, torch.ones(3)), (torch.ones(3), 2, torch.ones(3) * 5),
                    (-torch.ones(3), 3, torch.ones(3)), (torch.ones(3), 2.5, torch.ones(1)),
                    (torch.ones(3), 4, torch.ones(3, dtype=torch.float64))):
        eager_items, compiled_items = [0], [0]
        want = reads_after_a_break(x, n, t, eager_items)
        got = compiled(x, n, t, compiled_items)
        assert_same(got, want)
        assert compiled_items == eager_items
    # the part before the break: one entry for every call (it reads x alone)
    graphs = [g.meta.get("graphjit", {}).get("name") for g in counter.graphs]
    assert graphs.count("reads_after_a_break") == 1, graphs


def kwargs_and_args_in_cells(x, *args, **kwargs):
    def g():
        return kwargs["a"] * len(args)
    return x * g()


def test_star_arguments_closed_over_are_captured():
    """*args and **kwargs a nested function closes over: the cell holds them wrapped once (**kwargs is
    wrapped at the frame's start; wrapping it again raised inside capture and the frame ran eagerly)."""
    graphjit.reset()
    compiled = graphjit.compile(kwargs_and_args_in_cells, fullgraph=True)
    for a in (2.0, 3.0):
        x = torch.ones(2)
        assert_same(compiled(x, 1, 2, a=a), kwargs_and_args_in_cells(x, 1, 2, a=a))
