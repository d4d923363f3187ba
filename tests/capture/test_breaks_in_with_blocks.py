"""Graph breaks inside `with torch.autocast(...)` and `with torch.profiler.record_function(...)` blocks:
one break each, the frame captured on both sides (as torch.compile does), the break's instruction and the
rest of the block under the block's mode, the mode left as it was after the call or an exception.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, check

SEEN = []


@graphjit.disable
def observe(t):
    """A graph break that records the autocast mode it ran under."""
    SEEN.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
    return t


@graphjit.disable
def fails(t):
    SEEN.append(torch.is_autocast_enabled("cpu"))
    raise ValueError("from the break")


def break_in_autocast(x, w):
    y = x.sin()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = y @ w
        z = observe(z)
        z = (z @ w).relu()
    return z.float() + 1, z.dtype


def nested_blocks(x, w):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = x @ w
            a = observe(a)
            with torch.autocast("cpu", enabled=False):
                b = a.float() @ w
            b = observe(b)
        c = b * 2
    return a @ w.bfloat16(), c


def autocast_off_inside(x, w):
    with torch.autocast("cpu", enabled=False):
        y = observe(x @ w)
    return y @ w


def break_in_record_function(x):
    y = x.sin()
    with torch.profiler.record_function("block"):
        y = observe(y) * 2
    return y + 1


def two_breaks_in_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = observe(x @ w)
        y = observe(y @ w)
    return y.float().sum()


def two_breaks_in_no_grad(x, w):
    with torch.no_grad():
        y = observe(x @ w)
        y = observe(y @ w)
    return y.sum(), torch.is_grad_enabled()


def break_after_a_block(x, w):
    with torch.no_grad():
        y = x @ w
    y = observe(y)                 # on 3.12+ the block's exit handler jumps back to here: not a loop
    return y + 1


def wb():
    return torch.randn(4, 8), torch.randn(8, 8)


@pytest.mark.parametrize("fn, graphs", [(break_in_autocast, 2), (nested_blocks, 3), (autocast_off_inside, 2),
                                        (two_breaks_in_autocast, 3), (two_breaks_in_no_grad, 3),
                                        (break_after_a_block, 2)])
def test_a_break_inside_autocast_resumes_in_the_mode(fn, graphs):
    SEEN.clear()
    check(fn, wb, graphs=graphs, calls=3)
    # the break ran in the mode (eager's calls and the compiled calls saw the same modes)
    half = len(SEEN) // 2
    assert SEEN[:half] == SEEN[half:] and len(SEEN) % 2 == 0
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("fn", [break_in_autocast, nested_blocks])
def test_through_the_compiler(fn):
    check(fn, wb, graphs=None, backend="graphjit", calls=3)
    assert not torch.is_autocast_enabled("cpu") and torch.is_grad_enabled()


def test_a_break_inside_record_function():
    SEEN.clear()
    check(break_in_record_function, lambda: (torch.randn(5),), graphs=2)


def test_the_mode_is_left_when_the_break_raises():
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = x @ w
            z = fails(z)
        return z

    compiled = graphjit.compile(fn, backend="eager")
    SEEN.clear()
    for _ in range(2):
        with pytest.raises(ValueError, match="from the break"):
            compiled(*wb())
        assert not torch.is_autocast_enabled("cpu")
    assert SEEN == [True, True]


def test_the_resume_function_run_eagerly_keeps_the_mode():
    def fn(x, w, n):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = observe(x @ w)
            for _ in range(n):              # a break inside a loop: the resume function runs eagerly
                z = observe(z @ w)
        return z

    counter = CompileCounter()
    compiled = graphjit.compile(fn, backend=counter)
    x, w = wb()
    SEEN.clear()
    expected = fn(x, w, 2)
    got = compiled(x, w, 2)
    assert got.dtype == expected.dtype == torch.bfloat16 and torch.equal(got, expected)
    assert SEEN[:3] == SEEN[3:] and not torch.is_autocast_enabled("cpu")


def test_nested_autocast_blocks_open_at_a_break_close_innermost_first():
    def fn(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.autocast("cpu", enabled=False):
                y = observe(x)
            z = y @ x
        return z, torch.is_autocast_enabled("cpu")

    check(fn, lambda: (torch.randn(3, 3),), graphs=2)
    assert not torch.is_autocast_enabled("cpu")


def test_a_loop_whose_back_edge_follows_a_with_block_in_an_except_handler():
    """The loop's only back-edge is reached from an except handler: still a loop (the frame runs eagerly),
    not a resume function per iteration."""
    def fn(x, n):
        i = 0
        while i < n:
            i += 1
            x = observe(x)
            try:
                raise ValueError
            except ValueError:
                with torch.no_grad():
                    x = x * 1
        return x

    SEEN.clear()
    assert torch.equal(graphjit.compile(fn, backend="eager")(torch.zeros(1), 1200), torch.zeros(1))
