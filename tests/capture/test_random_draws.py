"""Values drawn from Python's `random` inside a compiled function (capture/variables/randomvars.py): the
entry draws them on random's own generator, in the frame's order, before its graph runs, and the graph
takes them as symbolic inputs. Every case runs eager and compiled from the same random state per call and
compares outputs and the state each leaves; a use that needs the drawn number itself (a branch, an index,
a format) is a graph break there, never a guard that could only be checked after drawing.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import io
import math
import random

import pytest
import torch

import graphjit
from graphjit import testing
from graphjit.testing import CompileCounter, check

from .harness import r
from .test_diff_stdlib_classes import SeededRandom, check_bounded


def r3():
    return (r(3),)


def seeded_check(fn, make_args=r3, calls=5, graphs=None, **kwargs):
    """check(fn) with eager and compiled starting each call from the same random state; the states they
    leave must match too."""
    seeded = SeededRandom()
    counter = check(fn, make_args, calls=calls, graphs=graphs, context=seeded, **kwargs)
    seeded.assert_states_match()
    return counter


def not_eager(counter):
    assert counter.frame_count >= 1, "the frame ran eagerly"


# ------------------------------------------------------------------------ one graph, values as inputs

def helper_draw(x, low):
    return x + random.uniform(low, low + 1)


def draws_in_loops_and_helpers(x):
    total = 0.0
    for _ in range(3):
        total = total + random.random()
    y = helper_draw(x, 2.0) * random.gauss(0.0, 1.0) + random.gauss(1.0, 0.5)   # gauss keeps a spare
    return y + total + random.randrange(0, 20, 5) + random.getrandbits(8), random.expovariate(2.0)


def test_draws_in_loops_and_inlined_functions_are_one_graph():
    seeded_check(draws_in_loops_and_helpers, graphs=1)


def test_draws_compile_through_graphjits_compiler():
    """Drawn floats and ints reach the generated kernels as scalar arguments."""
    seeded = SeededRandom()
    check(lambda x: (x * random.random() + random.randint(1, 5)).sin(), r3, calls=4, graphs=1,
          backend="graphjit", context=seeded)
    seeded.assert_states_match()


def draws_of_a_symbolic_size(x):
    return x * random.random() + random.randint(0, 3)


def test_draws_beside_dynamic_sizes():
    seeded = SeededRandom()
    counter = check(draws_of_a_symbolic_size, lambda call: (r(3 + call),), calls=5, graphs=None,
                    context=seeded, compile_kwargs={"dynamic": True})
    seeded.assert_states_match()
    assert counter.frame_count == 1


def draw_as_size(x):
    n = random.randint(2, 5)
    return x.sum() + torch.zeros(n).sum(), n


def test_a_drawn_size_matches_eager():
    """A drawn int used as a size: whether kept symbolic or broken at, values and state are eager's."""
    not_eager(seeded_check(draw_as_size, calls=6))


# ------------------------------------------------------------------- uses that need the number itself

def branch_on_a_draw(x):
    if random.random() < 0.5:
        return x + 1
    return x - 1


def index_by_a_draw(x):
    scales = [1.0, 2.0, 3.0]
    return x * scales[random.randint(0, 2)]


def format_a_draw(x):
    p = random.random()
    return x * p, f"{p:.3f}"


def draw_then_math(x):
    p = random.random()
    return x * math.floor(p * 10), math.sqrt(p)


@pytest.mark.parametrize("fn", [branch_on_a_draw, index_by_a_draw, format_a_draw, draw_then_math],
                         ids=lambda f: f.__name__)
def test_a_draw_that_decides_something_matches_eager(fn):
    """Branches, indexes and formats of drawn values run in CPython (a graph break at the use, or at the
    draw): eager's values and state, and the graph count settles."""
    counter = check_bounded(fn, context=SeededRandom())
    not_eager(counter)


def test_a_branch_on_a_draw_breaks_at_the_branch():
    """The draw stays in the first graph's entry; only the branch runs in CPython."""
    counter = seeded_check(branch_on_a_draw, calls=6)
    assert counter.frame_count <= 3     # the graph before the branch, and one per side taken


# --------------------------------------------------------------- state changes around the draws

def reseeds_between_draws(x):
    a = random.random()
    random.seed(7)
    b = random.random()
    return x * a + b


def draws_around_a_break(x):
    a = random.random()
    print("between", file=io.StringIO())
    return x * a + random.random()


def draws_then_raises(x):
    random.random()
    raise ValueError("after a draw")


@pytest.mark.parametrize("fn", [reseeds_between_draws, draws_around_a_break], ids=lambda f: f.__name__)
def test_draws_keep_their_order_with_what_runs_in_cpython(fn):
    not_eager(seeded_check(fn))


def test_a_draw_before_a_raise_still_advances_the_state():
    seeded = SeededRandom()
    compiled = testing.compiler().compile(draws_then_raises, backend=CompileCounter())
    for fn in (draws_then_raises, compiled, draws_then_raises, compiled):
        with seeded():
            with pytest.raises(ValueError, match="after a draw"):
                fn(r(3))
    seeded.assert_states_match()


# ------------------------------------------------------------------------------- what is not a draw

def choice_of_strings(x):
    return x * len(random.choice(["a", "bb", "ccc"]))


def non_constant_bounds(x):
    n = int(x.sum().item() > 0) + 2
    return x * random.randint(0, n)


def own_generator(x):
    return x * random.Random(3).random()


@pytest.mark.parametrize("fn", [choice_of_strings, non_constant_bounds, own_generator], ids=lambda f: f.__name__)
def test_other_random_calls_match_eager(fn):
    seeded_check(fn)


def test_a_replaced_random_function_is_called():
    """`random.random` patched between calls: the entry's identity guard fails and the patch is used."""
    compiled = testing.compiler().compile(lambda x: x * random.random(), backend=CompileCounter())
    original = random.random
    try:
        assert compiled(torch.ones(2)).le(1).all()
        random.random = lambda: 5.0
        assert compiled(torch.ones(2)).tolist() == [5.0, 5.0]
    finally:
        random.random = original


def test_explain_lists_the_draws_as_inputs():
    report = str(graphjit.explain(lambda x: x * random.random(), r(3)))
    assert "Graph break count: 0" in report and "__gj_draw0" in report


def test_a_draw_that_must_specialize_inside_torch_compiles_one_graph_per_trace():
    """A drawn size specialized inside torch (a guard on the draw, found when the trace ends) retraces the
    frame before any backend sees the first trace's graph."""
    counter = CompileCounter()
    compiled = testing.compiler().compile(draw_as_size, backend=counter)
    random.seed(0)
    compiled(r(3))
    assert all("draw" not in n.name for g in counter.graphs for n in g.graph.nodes if n.op == "placeholder")
    assert counter.frame_count == 1


def draw_and_rounded_float(x, s):
    return x * random.random(), round(s, 1)


def test_fullgraph_with_a_draw_and_a_float_it_must_specialize():
    """Specializing the float keeps the draw a graph input: fullgraph holds on every call."""
    seeded = SeededRandom()
    compiled = testing.compiler().compile(draw_and_rounded_float, backend=CompileCounter(), fullgraph=True)
    for s in (0.25, 0.5, 0.75):
        with seeded():
            expected = draw_and_rounded_float(torch.ones(2), s)
        with seeded():
            testing.assert_same(compiled(torch.ones(2), s), expected)
    seeded.assert_states_match()
