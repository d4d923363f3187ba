"""Views that no strided layout expresses compose their index arithmetic into the readers' bodies; a value
read through an index of more than config.realize_index_ops_threshold operations is realized, so a chain of
them compiles in time linear in its length (eight round trips of a [3, 7] value through [7, 3] took 86 s to
compile, each trip about three times the one before)."""
import time

import torch

import graphjit
from graphjit.testing import CompileCounter


def round_trips(x):
    y = x * 1
    for _ in range(8):
        y = (y.view(7, 3) + 1).view(3, 7) * 1.5
    return y


def in_place_through_views(x):
    y = x * 1
    for i in range(7):
        y.add_(i)
        y.view(7, 3)[0].zero_()
    return y


def test_chains_of_unaligned_views_compile_quickly_with_eagers_results():
    for fn in (round_trips, in_place_through_views):
        counter = CompileCounter("graphjit")
        compiled = graphjit.compile(fn, backend=counter)
        x = torch.randn(3, 7)
        start = time.perf_counter()
        got = compiled(x)
        elapsed = time.perf_counter() - start
        torch.testing.assert_close(got, fn(x))
        assert getattr(counter.compiled[0], "kernel_count", 0) > 0, "the graph ran as captured"
        assert elapsed < 40, f"{fn.__name__} took {elapsed:.1f} s to compile"
