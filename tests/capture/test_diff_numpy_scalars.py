"""NumPy scalars and NumPy's pure functions on constants in compiled code (variables/numpyvars.py):
constants with NumPy's own arithmetic, read by tensor ops as Python numbers (as torch reads them), guarded
when read from outside; arrays made from constants break (arrays over tensors: test_diff_numpy_arrays).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import math

import numpy as np
import pytest
import torch

import graphjit
from graphjit.testing import check

EPS = np.float32(1e-5)


def r3():
    return (torch.randn(3),)


def scalars_with_tensors(x):
    n = np.float32(2.5)
    k = np.sqrt(64) / np.float64(2) + np.pi          # NumPy's arithmetic, folded: an np.float64
    y = x.sin() * n + EPS
    return y * k - np.int64(3), x > np.float32(0.5), np.float16(0.1) * x, k


def scalar_arithmetic(x):
    n = np.float32(2.5)
    return (x * (-n), abs(n), float(n), int(n), math.sqrt(n), n.item(), n.dtype, bool(n > 1), n ** 2,
            np.maximum(2, 3), np.log(2.0) + 1, np.float32(1) / np.float32(3))


def scalar_arguments(x):
    return (torch.full((2,), np.float64(1.5)), x.clamp(min=np.float32(0)), x.pow(np.int64(2)),
            torch.nn.functional.dropout(x, p=np.float64(0.0)), torch.arange(np.int64(3)) + x[0])


@pytest.mark.parametrize("fn", [scalars_with_tensors, scalar_arithmetic, scalar_arguments])
def test_numpy_scalars_are_constants(fn):
    check(fn, r3, graphs=1)


@pytest.mark.parametrize("fn", [scalars_with_tensors, scalar_arguments])
def test_numpy_scalars_through_the_compiler(fn):
    check(fn, r3, graphs=1, backend="graphjit")


def test_results_keep_numpy_types():
    compiled = graphjit.compile(scalar_arithmetic, backend="eager")
    x = torch.randn(3)
    assert [type(v) for v in compiled(x)] == [type(v) for v in scalar_arithmetic(x)]


def test_a_numpy_global_is_guarded_by_value():
    global EPS
    compiled = graphjit.compile(scalars_with_tensors, backend="eager")
    x = torch.randn(3)
    try:
        assert torch.equal(compiled(x)[0], scalars_with_tensors(x)[0])
        EPS = np.float32(7.0)
        assert torch.equal(compiled(x)[0], scalars_with_tensors(x)[0])
        EPS = np.float64(7.0)                      # same value, another type
        assert type(compiled(x)[0]) is torch.Tensor and torch.equal(compiled(x)[0], scalars_with_tensors(x)[0])
    finally:
        EPS = np.float32(1e-5)


def test_a_numpy_scalar_argument():
    def fn(x, s):
        return x * s + 1
    compiled = graphjit.compile(fn, backend="eager")
    x = torch.randn(3)
    for s in (np.float32(2), np.float32(3), np.float64(3), np.int32(4)):
        assert torch.equal(compiled(x, s), fn(x, s))


def test_what_is_not_captured_breaks_with_eager_results():
    def as_array(x):
        return torch.tensor(np.float64(2.0)), x + 1   # torch.tensor reads it as a float64 0-d array

    def array_made(x):
        a = np.ones(3, dtype=np.float32)
        return x + torch.from_numpy(a)

    def new_array_from_ufunc(x):
        return x + np.sqrt(np.arange(3)).sum()

    for fn in (as_array, array_made, new_array_from_ufunc):
        check(fn, r3, graphs=None)
    assert graphjit.compile(as_array, backend="eager")(torch.zeros(3))[0].dtype == torch.float64


def test_scalars_torch_does_not_read_as_their_python_number():
    """torch reads np.bool_ as a float, drops a complex scalar's imaginary part, and leaves a uint64 past
    int64 to NumPy's reflected operator (an array): not `.item()`, so these run as eager runs them."""
    def fn(x):
        return ((x > 0) + np.bool_(True), torch.full((2,), np.bool_(True)), x * np.complex64(1j),
                x * np.uint64(2 ** 63))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(fn, lambda: (torch.ones(2),), graphs=None)
