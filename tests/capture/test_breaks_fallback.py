"""Breaks graphjit can't (yet) resume from, and breaks in grad-mode blocks. Where a break is not possible
(inside a loop, a try block, a generator, after a closure over a cell the frame set was made, at an
instruction other than a call or a branch) the frame falls back: it runs eagerly under the guards collected so far. Results, mutated
arguments and printed text must still be eager's; graph counts are not asserted there (graphs=None), since
they change as breaks become possible in more places.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import io

import pytest
import torch

import graphjit
from .harness import Cases, gj, r
from .test_breaks_support import World, check_break

from graphjit.testing import CompileCounter


SINK = io.StringIO()


def _new_sink():
    global SINK
    SINK = io.StringIO()


def printed(nonempty=True):
    return World(_new_sink, lambda: SINK.getvalue(), nonempty=nonempty)


@graphjit.disable
def noted(v, log):
    log.append(tuple(v.shape))
    return v


fallback_cases = Cases()


# ---- loops (the frame falls back)

@fallback_cases.add(lambda: (r(3),), graphs=None)
def print_in_for_loop(x):
    y = x
    for i in range(3):
        y = y * 2
        print("iteration", i, file=SINK)
    return y + 1


@fallback_cases.add(lambda: (torch.rand(3) + 0.1,), graphs=None)
def item_condition_in_while_loop(x):
    steps = 0
    while x.sum().item() < 10:
        x = x * 2
        steps += 1
    print("steps", steps, file=SINK)
    return x, steps


@fallback_cases.add(lambda: (r(4, 2),), graphs=None)
def item_per_row_in_loop(x):
    total = 0.0
    for row in x:
        total += row.max().item()
    print("total", round(total, 4), file=SINK)
    return x * total


@fallback_cases.add(lambda: (r(3), []), graphs=None)
def disabled_call_in_loop(x, log):
    for k in range(2):
        x = noted(x + k, log)
    print("done", file=SINK)
    return x


@fallback_cases.add(lambda: ([r(2), r(2), r(2)],), graphs=None)
def print_in_list_comprehension(xs):
    ys = [print("v", file=SINK) or v * 2 for v in xs]
    return ys


@fallback_cases.add(lambda: (r(3),), graphs=None)
def branch_in_loop(x):
    for _ in range(2):
        if x.sum() > 0:
            x = x - 1
        else:
            x = x + 1
    print("branch in loop", file=SINK)
    return x


# ---- closure cells, generators, try blocks

@fallback_cases.add(lambda: (r(3),), graphs=None)
def break_after_closure_cell_set(x):
    scale = 2.0

    def inner(v):
        return v * scale
    print("cell", file=SINK)                  # a closure over the frame's cell `scale` exists: no break here
    return inner(x)


@fallback_cases.add(lambda: (r(3),), graphs=None)
def break_after_nonlocal_written(x):
    count = 0

    def bump():
        nonlocal count
        count += 1
    bump()
    y = x * count
    print("count", count, file=SINK)
    bump()
    return y + count


def _gen_with_print(x):
    y = x * 2
    print("gen", file=SINK)
    yield y
    yield y + 1


@fallback_cases.add(lambda: (r(3),), graphs=None)
def consumes_generator_with_print(x):
    return list(_gen_with_print(x.abs()))


@fallback_cases.add(lambda: (r(3), []), graphs=None)
def break_inside_try_block(x, log):
    y = x + 1
    try:
        print("in try", file=SINK)
        y = noted(y, log) * 2
    except RuntimeError:
        y = y * 0
    return y


@fallback_cases.add(lambda: (r(3), []), graphs=None)
def break_inside_finally(x, log):
    y = x + 1
    try:
        y = y * 2
    finally:
        print("in finally", file=SINK)
        log.append("finally")
    return y


# ---- instructions other than calls and branches

@fallback_cases.add(lambda: (r(3),), graphs=None)
def tensor_in_fstring(x):
    y = x * 2
    text = f"sum={y.sum():.3f}"               # formatting a tensor needs its value (FORMAT_VALUE)
    print(text, file=SINK)
    return y, text


@fallback_cases.add(lambda: (torch.tensor([0.5, 1.0, 2.0]),), graphs=None)
def number_in_tensor(x):
    y = x * 2
    found = 2.0 in y                          # CONTAINS_OP on a tensor: data-dependent
    print("found", found, file=SINK)
    return y, found


@fallback_cases.add(lambda: (r(3),), graphs=None)
def not_of_tensor(x):
    y = x * 2
    flag = not (y.sum() > 0)                  # UNARY_NOT on a tensor
    print("flag", flag, file=SINK)
    return y, flag


@fallback_cases.add(lambda: (r(3),), graphs=None)
def tensor_and_or(x):
    y = (x.sum() > 0) and x.mean()            # short-circuit on a tensor's truth
    print("and", file=SINK)
    return y


@fallback_cases.add(lambda: (r(6),), graphs=None)
def data_dependent_shape(x):
    pos = x[x > 0]
    print("kept", pos.numel(), file=SINK)
    return pos.sum(), torch.nonzero(x > 0)


@pytest.mark.parametrize("case", fallback_cases.params())
def test_falls_back_with_eager_results(case):
    check_break(case.fn, case.make_args, world=printed(), **case.options)


def cell_set_before_a_break(x):
    pad = x.shape[0] % 3                      # a cell: the closures below read it (as LED's encoder does)
    y = x.sin() + pad
    print("pad", pad, file=SINK)              # breaks: the cell is set, but no closure over it exists yet
    trim = [lambda t: t[:t.shape[0] - pad] for _ in range(2)]
    return trim[0](y * 2).cos(), (lambda: pad)()


def cell_set_and_rebound_after_a_break(x, scale):
    scale = scale * 2
    y = x * scale
    print("scale", file=SINK)
    scale = scale + 1                         # rebinds the resume function's own cell
    return (lambda: y * scale)()


@pytest.mark.parametrize("fn, make_args", [(cell_set_before_a_break, lambda: (r(7),)),
                                           (cell_set_and_rebound_after_a_break, lambda: (r(5), 1.5))])
def test_a_break_after_a_cell_was_set_resumes_with_its_value(fn, make_args):
    """A cell the frame set before a break, with no closure over it made yet, goes to the resume function
    by its value (its MAKE_CELL wraps it): both sides of the break are graphs, none runs eagerly."""
    counter = check_break(fn, make_args, graphs=None, world=printed())
    assert counter.frame_count == 2, counter.frame_count


def generator_with_print(x):
    y = x * 2
    print("generator", file=SINK)
    yield y
    yield y.sum()


def test_compiled_generator_function():
    """A generator function compiled directly: it can't break inside, and must yield eager's values."""
    gj.reset()
    compiled = gj.compile(generator_with_print, backend=CompileCounter())
    for seed in range(3):
        torch.manual_seed(seed)
        x = r(3)
        _new_sink()
        expected = list(generator_with_print(x.clone()))
        eager_text = SINK.getvalue()
        _new_sink()
        actual = list(compiled(x.clone()))
        assert SINK.getvalue() == eager_text
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)


# ------------------------------------------------------------------------------ grad-mode blocks

def print_inside_no_grad(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        print("no grad", torch.is_grad_enabled(), file=SINK)
        w = z * 3
    return y, w, torch.is_grad_enabled()


def print_inside_enable_grad(x):
    with torch.no_grad():
        y = x * 2
        with torch.enable_grad():
            z = x * 3
            print("enable grad inside no_grad", torch.is_grad_enabled(), file=SINK)
            z = z + 1
        w = y + z
    return w, z


def branch_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
    return y, x * 2


def disabled_inside_set_grad_enabled(x, log):
    with torch.set_grad_enabled(False):
        y = noted(x * 2, log)
        y = y + 1
    return y, x + 1


def _helper_prints_grad_mode(v):
    w = v * 2
    print("helper grad", torch.is_grad_enabled(), file=SINK)
    return w + 1


def helper_with_print_called_inside_no_grad(x):
    y = x.sin()
    with torch.no_grad():
        z = _helper_prints_grad_mode(y)
    return y * 2, z


grad_cases = Cases()
grad_cases.add_fn(helper_with_print_called_inside_no_grad, lambda: (r(3).requires_grad_(),), graphs=None)
grad_cases.add_fn(print_inside_no_grad, lambda: (r(3).requires_grad_(),), graphs=None)
grad_cases.add_fn(print_inside_enable_grad, lambda: (r(3).requires_grad_(),), graphs=None)
grad_cases.add_fn(branch_inside_no_grad, lambda: (r(3).requires_grad_(),), graphs=None)
grad_cases.add_fn(disabled_inside_set_grad_enabled, lambda: (r(3).requires_grad_(), []), graphs=None)


@pytest.mark.parametrize("case", grad_cases.params())
def test_break_inside_grad_mode_block(case):
    """requires_grad of each output is compared too: grad mode must be right on both sides of the break."""
    world = printed(nonempty=False)
    check_break(case.fn, case.make_args, world=world, **case.options)
    assert torch.is_grad_enabled()


def test_print_inside_no_grad_graph_count():
    # [x * 2, grad off, z = y + 1], the resume [w = z * 3, grad back on]: the grad-mode switches are graph
    # nodes, so one graph spans the block's entry
    counter = check_break(print_inside_no_grad, lambda: (r(3).requires_grad_(),), graphs=2, world=printed())
    assert [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"][1] is \
        torch._C._set_grad_enabled


def test_break_inside_no_grad_backward_matches():
    """Gradients through the graphs around a break inside no_grad match eager's."""
    def fn(x):
        y = x.sin()
        with torch.no_grad():
            scale = y.abs().max()
            print("scale", file=SINK)
        return (y * scale).sum()
    gj.reset()
    compiled = gj.compile(fn, backend=CompileCounter())
    for seed in range(3):
        torch.manual_seed(seed)
        a = r(4).requires_grad_()
        b = a.detach().clone().requires_grad_()
        fn(a).backward()
        compiled(b).backward()
        torch.testing.assert_close(b.grad, a.grad)


def test_break_gradient_flows_across_break():
    """A tensor computed in the first graph and used in the resume's graph keeps its autograd history."""
    def fn(x, w):
        h = x @ w
        print("h", file=SINK)
        return (h.relu() * 2).sum()
    gj.reset()
    compiled = gj.compile(fn, backend=CompileCounter())
    for seed in range(3):
        torch.manual_seed(seed)
        x, w = r(2, 3), r(3, 4).requires_grad_()
        w2 = w.detach().clone().requires_grad_()
        fn(x, w).backward()
        compiled(x, w2).backward()
        torch.testing.assert_close(w2.grad, w.grad)
