"""Errors eager raises that a compiled graph would not raise where the code expects them.

- Ops whose eager kernels require their operands to share a dtype (matmul, linear, conv, cdist, index_put
  ...) and whose fake kernels do not check it: a mixed call runs in CPython, so eager's error is raised even
  where the result is dead (the compiler would drop the node).
- An op that raises on its tensors' values (an index out of range) where an except handler, or a with
  block whose __exit__ may suppress, would see its error is not put in a graph: the graph runs after the
  trace, and its error would escape the handler. Outside such blocks (in grad-mode blocks, under a finally
  block, which re-raises) the op stays in the graph.
- A graph break inside a with block that can raise after the break gets its resume function.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.testing import CompileCounter, assert_same, check


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:          # the class and message: compiled must raise eager's own error
        return (type(e), str(e).split("\n")[0])


def _compare(fn, *args, graphs=None, backend=None):
    graphjit.reset()
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter)
    for _ in range(2):
        expected, got = _outcome(fn, *args), _outcome(compiled, *args)
        if isinstance(expected, tuple):
            assert got == expected
        else:
            assert_same(got, expected)
    if graphs is not None:
        assert counter.frame_count == graphs
    return counter


A, B = torch.randn(3, 3), torch.randn(3, 3).double()
MIXED = {
    "mm": lambda: torch.mm(A, B),
    "matmul": lambda: A @ B,
    "linear": lambda: F.linear(A, A, B[0]),
    "addmm": lambda: torch.addmm(B, A, A),
    "mv": lambda: torch.mv(A, B[0]),
    "bmm": lambda: torch.bmm(A[None], B[None]),
    "cross": lambda: torch.linalg.cross(A, B),
    "cdist": lambda: torch.cdist(A, B),
    "conv1d": lambda: F.conv1d(A[None], B[:, :, None]),
    "index_put": lambda: A.index_put((torch.tensor([0]),), B[0, :1]),
    "index_copy": lambda: A.index_copy(0, torch.tensor([0]), B[:1]),
    "index_select_int16": lambda: torch.index_select(A, 0, torch.zeros(2, dtype=torch.int16)),
    "group_norm": lambda: F.group_norm(A[None], 1, B[0]),
    "grid_sample": lambda: F.grid_sample(A[None, None], B[None, None, :, :2], align_corners=False),
}


@pytest.mark.parametrize("op", list(MIXED))
@pytest.mark.parametrize("use", ["used", "dead"])
def test_mixed_dtype_operands_raise_as_in_eager(op, use):
    make = MIXED[op]

    def used(x):
        return make(), x + 1

    def dead(x):
        make()
        return x + 1

    # through graphjit's compiler, which drops a dead node
    _compare(used if use == "used" else dead, torch.randn(2), backend="graphjit")


def test_mixed_dtypes_under_autocast_stay_compiled():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (x @ w).float().sum(), F.linear(x, w.double().float()).sum()
    check(f, lambda: (torch.randn(4, 4), torch.randn(4, 4)), graphs=1)


def index_in_try(x, idx):
    try:
        return x[idx]
    except IndexError:
        return x - 1


def index_in_suppress(x, idx):
    y = x - 1
    with contextlib.suppress(IndexError, RuntimeError):
        y = torch.embedding(x[:, None], idx)[:, 0]
    return y


def _helper(x, idx):
    try:
        return x.index_select(0, idx)
    except IndexError:
        return x * 0


def index_in_called_try(x, idx):
    return _helper(x * 2, idx) + 1


@pytest.mark.parametrize("fn", [index_in_try, index_in_suppress, index_in_called_try],
                         ids=lambda f: f.__name__)
def test_an_index_error_reaches_the_handler(fn):
    x = torch.randn(4)
    _compare(fn, x, torch.tensor([0, 9]))           # out of range: eager's handler runs
    _compare(fn, x, torch.tensor([0, 3]))


def test_index_ops_outside_handlers_stay_in_the_graph():
    def f(x, idx):
        with torch.no_grad():
            y = x[idx] * 2
        return y + x.gather(0, idx), F.embedding(idx, x[:, None])
    check(f, lambda: (torch.randn(4), torch.tensor([0, 3])), graphs=1)


def test_a_break_in_a_with_block_that_can_raise_after_it_resumes():
    def f(x):
        with torch.no_grad():
            y = x * 2
            print("", end="")           # a graph break
            if x.shape[0] == 4:
                raise KeyError("k")
        return y + 1
    counter = _compare(f, torch.randn(3, requires_grad=True), graphs=2)
    assert counter.frame_count == 2


def gather_with_finally_only(x, idx, log):
    try:
        y = x.gather(0, idx) * 2
    finally:
        if log:                 # branches inside the finally block (transformers' config restore)
            log.append(1)
        else:
            log.append(2)
    return y


def test_a_finally_block_alone_keeps_the_op_in_the_graph():
    """A finally block re-raises: the op stays in the graph (transformers' output capturing wraps every
    forward in try/finally), and an index out of range raises eager's error class through it (the finally
    block's own effects are then unapplied, as README says of a graph that raises at run time); only an
    except handler, or a with block that may suppress, refuses the op."""
    check(gather_with_finally_only, lambda: (torch.randn(4), torch.tensor([0, 3]), []), graphs=1)
    compiled = graphjit.compile(gather_with_finally_only)
    bad = torch.tensor([0, 9])
    assert type(_outcome(compiled, torch.randn(4), bad, [])) is tuple
    assert _outcome(compiled, torch.randn(4), bad, [])[0] is _outcome(gather_with_finally_only, torch.randn(4), bad, [])[0]


def copy_with_a_fallback(cache, pos, new):
    # transformers' StaticLayer.update: a fallback for devices without index_copy_
    try:
        cache.index_copy_(0, pos, new)
    except NotImplementedError:
        cache[pos] = new
    return cache.sum()


def gather_or_zero(x, idx):
    try:
        return x.gather(0, idx)
    except (KeyError, LookupError):
        return x * 0


def test_an_except_clause_that_cannot_match_keeps_the_op_in_the_graph():
    """A graph's run-time checks raise IndexError or RuntimeError: `except NotImplementedError` (a subclass
    of RuntimeError, not a base) never sees them, so the op stays in the graph."""
    check(copy_with_a_fallback, lambda: (torch.zeros(4, 2), torch.tensor([1, 3]), torch.randn(2, 2)), graphs=1)


def test_an_except_clause_naming_a_base_of_index_error_refuses_the_op():
    _compare(gather_or_zero, torch.randn(4), torch.tensor([0, 9]))
    _compare(gather_or_zero, torch.randn(4), torch.tensor([0, 3]))


class Timer:
    """A user context manager whose __exit__ returns None: it cannot suppress an error."""

    def __init__(self):
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc_info):
        self.entered -= 1


def gather_in_non_suppressing_blocks(x, idx, timer):
    with contextlib.nullcontext():
        with timer:
            return x.gather(0, idx) + timer.entered


def test_with_blocks_that_cannot_suppress_keep_the_op_in_the_graph():
    check(gather_in_non_suppressing_blocks, lambda: (torch.randn(4), torch.tensor([0, 3]), Timer()), graphs=1)


def bare_clause_after_a_typed_one(x, i):
    try:
        y = x[i] + 1
    except KeyError:
        y = x
    except:  # noqa: E722 -- the case under test
        y = x * 0
    return y


def typed_clause_after_a_nested_try(x, i):
    try:
        y = x[i] + 1
    except ValueError:
        try:
            y = x.neg()
        except KeyError:
            y = x
    except IndexError:
        y = x * 0
    return y


def return_in_finally(x, i):
    try:
        y = x[i] + 1
    finally:
        return x * 0  # noqa: B012 -- swallows the error, the case under test
    return y


@pytest.mark.parametrize("fn", [bare_clause_after_a_typed_one, typed_clause_after_a_nested_try, return_in_finally],
                         ids=lambda f: f.__name__)
def test_handlers_of_other_shapes_see_the_error(fn):
    """Clauses are followed test to test (a later bare clause, a clause after one whose body holds a try),
    and a finally block that can end without re-raising catches too."""
    _compare(fn, torch.randn(4), torch.tensor([7]))
    _compare(fn, torch.randn(4), torch.tensor([2]))


def test_autocast_does_not_excuse_ops_it_does_not_cast():
    def f(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mv(a, b)
    _compare(f, torch.randn(3, 3).bfloat16(), torch.randn(3))


def test_ops_that_promote_mixed_dtypes_stay_compiled():
    def f(a, b):
        return torch.outer(a, b), torch.addr(a[:, None] * b, a, b)
    check(f, lambda: (torch.randn(3), torch.randn(3).double()), graphs=1)


def index_under_autocast(x, i):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return (x @ x)[i]


def index_under_no_grad(x, i):
    with torch.no_grad():
        return (x * 2)[i]


@pytest.mark.parametrize("fn", [index_under_autocast, index_under_no_grad], ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", [None, "graphjit"], ids=["as_captured", "graphjit"])
def test_a_graph_that_raises_inside_a_mode_block_restores_the_modes(fn, backend):
    """The with block's exit does not run when the graph raises in it: the entry puts grad mode and autocast
    back (a graph run as captured left autocast on, or grad mode off, for everything after)."""
    compiled = graphjit.compile(fn, backend=CompileCounter(backend))
    x = torch.randn(3, 3, requires_grad=True)
    for _ in range(2):
        assert type(_outcome(compiled, x, torch.tensor([7]))) is tuple
        assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
        # no autocast block left counted open: torch clears its cache of weight casts at the last exit
        assert torch.autocast_increment_nesting() == 1
        torch.autocast_decrement_nesting()
