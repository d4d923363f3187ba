"""Ints and floats that became symbolic (they changed between calls) keep eager's range checks.

- A symbolic int reaches kernels as an int64: a value outside int64 is a constant instead (eager raises
  OverflowError, or takes its uint64 path for clamp(max=2**63)), guarded so a later in-range value
  reuses the symbolic entry.
- Ops that convert a scalar argument to the tensor's dtype with eager's overflow check (full_like,
  masked_fill, new_full, fill_, clamp ...) check a symbolic scalar too: the range test is a guard, and a
  value out of range runs eager's op, which raises.
"""
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter


def outcome(fn, *args):
    try:
        return fn(*args)
    except (RuntimeError, OverflowError) as e:
        return type(e)


def same(a, b):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def run_values(fn, make_x, values, backend="graphjit", dynamic=None):
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter, dynamic=dynamic)
    for n in values:
        want, got = outcome(fn, make_x(), n), outcome(compiled, make_x(), n)
        assert same(got, want), (n, got, want)
    return counter


def clamp_max(x, n):
    return x.clamp(max=n)


def add(x, n):
    return x + n


def full(x, n):
    return torch.full((2,), n) + x[:2]


BIG = [3, 4, 2 ** 63, 5, 2 ** 64 + 1, -2 ** 65 + 3, 6, 2 ** 63 - 1, -2 ** 63]


@pytest.mark.parametrize("fn", [clamp_max, add, full], ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["graphjit", "eager"])
def test_ints_beyond_int64_are_not_symbolic(fn, backend):
    run_values(fn, lambda: torch.arange(5.0), BIG, backend)


def test_in_range_values_after_a_big_one_reuse_the_symbolic_graph():
    counter = run_values(add, lambda: torch.arange(5.0), [3, 4, 5, 2 ** 64, 6, 7, 8])
    # static 3, symbolic from 4 (5 reuses it), a constant for 2**64 (raises eagerly: no graph),
    # then 6, 7, 8 on the symbolic entry
    assert counter.frame_count == 2


def full_like(x, n):
    return torch.full_like(x, n)


def masked_fill(x, n):
    return x.masked_fill(x > 1, n)


def new_full(x, n):
    return x.new_full((3,), n)


def fill(x, n):
    return x.clone().fill_(n)


def clamp_min(x, n):
    return x.clamp(min=n)


@pytest.mark.parametrize("fn", [full_like, masked_fill, new_full, fill, clamp_min], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype,values", [
    (torch.uint8, [1, 2, 300, 3, -1, -300, 255, 256]),
    (torch.int8, [1, 2, 128, -128, -129, 5]),
    (torch.int32, [1, 2, 2 ** 31 + 5, -2 ** 31, 2 ** 31 - 1, 7]),
    (torch.float16, [1, 2, 70000, 65504, -70000, 3]),
], ids=["uint8", "int8", "int32", "float16"])
def test_symbolic_scalars_keep_eagers_overflow_checks(fn, dtype, values):
    run_values(fn, lambda: torch.arange(4).to(dtype), values)


@pytest.mark.parametrize("values", [[1.5, 2.5, 300.5, 3.5, -0.5], [1.0, 2.0, 255.9, 0.25, 7e4]])
def test_symbolic_floats_into_narrow_dtypes(values):
    run_values(masked_fill, lambda: torch.arange(4).to(torch.uint8), values)
    run_values(masked_fill, lambda: torch.arange(4).to(torch.float16), values)
