"""NumPy arrays over traced tensors (variables/numpyvars.py): `x.numpy()`, NumPy functions, ufuncs,
methods, operators and indexing on it, and `torch.from_numpy`, captured as graph nodes that run
torch._numpy; each call checked while tracing against NumPy's own result type, dtype and shape (a
difference is a graph break); memory shared as in eager. Values: torch's kernels, not NumPy's, so sums
may round otherwise (compared within float32's tolerance).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import warnings

import numpy as np
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, check

TOL = dict(atol=1e-5, rtol=1.3e-6)


def r34():
    return (torch.randn(3, 4),)


def ufuncs(x):
    a = x.numpy()
    return torch.from_numpy(np.sin(a) * 2 + np.exp(-np.abs(a))), np.maximum(a, 0.5)


def reductions_and_methods(x):
    a = x.numpy()
    b = (a + 1) / 2
    return (torch.from_numpy(np.sum(b, axis=0)), b.mean(), b.max(axis=1), b.shape, b.dtype, b.ndim,
            a[0], a[1:, ::2], np.concatenate([a, b]).T, b.reshape(4, 3).astype(np.float64), -a, a > 0)


def scalars(x):
    a = x.numpy()
    s = a.sum()                       # a NumPy scalar in eager: np.float32
    return s, s * 2, np.float32(3) * a.max(), torch.from_numpy(a) + 1


def as_tensor_and_tensor(x):
    a = (x * 2).numpy()
    return torch.as_tensor(a), torch.tensor(a), torch.asarray(a)


@pytest.mark.parametrize("fn", [ufuncs, reductions_and_methods, scalars, as_tensor_and_tensor])
def test_numpy_on_arrays_from_tensors_is_one_graph(fn):
    check(fn, r34, graphs=1, **TOL)


@pytest.mark.parametrize("fn", [ufuncs, reductions_and_methods, scalars])
def test_through_the_compiler(fn):
    check(fn, r34, graphs=1, backend="graphjit", **TOL)


def test_memory_is_shared_as_in_eager():
    def alias(x):
        return torch.from_numpy(x.numpy())

    def view(x):
        a = x.numpy()
        x.add_(1)
        return a

    for backend in ("eager", "graphjit"):
        for fn in (alias, view):
            x = torch.zeros(3)
            out = graphjit.compile(fn, backend=backend)(x)
            if isinstance(out, torch.Tensor):
                out.add_(5)
                assert x.tolist() == [5.0] * 3
            else:
                assert x.tolist() == [1.0] * 3
                out += 5
                assert x.tolist() == [6.0] * 3


def test_where_torch_numpy_differs_from_numpy_the_call_breaks():
    def int_divide(x):
        a = (x * 10).long().numpy()
        return a / 2                  # float64 in NumPy; torch._numpy gives float32

    counter = CompileCounter()
    compiled = graphjit.compile(int_divide, backend=counter)
    x = torch.randn(3, 4)
    got, expected = compiled(x), int_divide(x)
    assert got.dtype == expected.dtype == np.float64 and np.array_equal(got, expected)
    out = graphjit.explain(int_divide, x)
    assert out.graph_break_count == 1 and "float32" in out.break_reasons[0].reason


def test_what_numpy_refuses_or_writes_in_place_breaks():
    def needs_grad(x):
        return x.requires_grad_().numpy()         # eager raises: the frame runs eagerly and raises too

    def in_place(x):
        a = x.numpy()
        a += 1
        return torch.from_numpy(a)

    def branch(x):
        a = x.numpy()
        if a.sum() > 0:
            return x + 1
        return x - 1

    with pytest.raises(RuntimeError):
        graphjit.compile(needs_grad, backend="eager")(torch.randn(3))
    check(in_place, r34, graphs=None)
    check(branch, r34, graphs=None)


def test_arrays_from_outside_are_graph_inputs():
    def fn(a, b):
        return np.sin(a) + b, torch.from_numpy(a).sum(), len(a), a.shape

    counter = CompileCounter()
    compiled = graphjit.compile(fn, backend=counter)
    rng = np.random.default_rng(0)
    for _ in range(3):
        a, b = rng.random(3).astype(np.float32), rng.random(3)
        got, expected = compiled(a, b), fn(a, b)
        assert np.allclose(got[0], expected[0], rtol=1e-6) and got[0].dtype == expected[0].dtype
        assert torch.allclose(got[1], expected[1]) and got[2:] == expected[2:]
    assert counter.frame_count == 1
    # a read-only array is not a graph input (torch.from_numpy would warn on every call): still eager's results
    a = np.ones(3, dtype=np.float32)
    a.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, expected = graphjit.compile(fn, backend="eager")(a, np.ones(3)), fn(a, np.ones(3))
    assert np.array_equal(got[0], expected[0]) and got[2:] == expected[2:]


def where_values_differ(x, i):
    a = x.numpy()
    return np.cbrt(a), np.sign(a), np.heaviside(a, 0.5), np.round(i.numpy(), -2), np.argsort(a)


def test_where_torch_numpy_computes_other_values_the_call_breaks():
    """cbrt of a negative number, sign and heaviside of NaN, rounding ints to tens, argsort's order of
    ties: torch._numpy differs from NumPy; the probe check refuses those calls, so eager's values."""
    def make():
        return torch.tensor([-8.0, float("nan"), 2.0, 2.0, -0.0]), torch.arange(1234, 1239)
    check(where_values_differ, make, graphs=None)


def test_int_power_with_a_negative_exponent_raises_as_numpy():
    def fn(a, b):
        return a.numpy() ** b.numpy()
    with pytest.raises(ValueError):
        graphjit.compile(fn, backend="eager")(torch.tensor([2, 3]), torch.tensor([-1, 2]))


def test_scalar_types_and_identities_as_numpy():
    def scalar_types(x):
        return type(x.numpy().sum()), type(x.long().numpy().sum()), isinstance(x.numpy().max(), np.float32)

    def returns_its_argument(a):
        return a

    def reversed_view(x):
        b = x.numpy()[::-1]               # a view with negative strides in NumPy (a copy in torch._numpy)
        x.add_(1)
        return b

    compiled = graphjit.compile(scalar_types, backend="eager")
    assert compiled(torch.ones(3)) == scalar_types(torch.ones(3))
    a = np.ones(3)
    assert graphjit.compile(returns_its_argument, backend="eager")(a) is a
    x = torch.zeros(3)
    assert graphjit.compile(reversed_view, backend="eager")(x).tolist() == [1.0, 1.0, 1.0]


def test_second_review_cases_match_eager():
    def scalar_then_write(x):
        a = x.numpy()
        s = a[0]                            # a NumPy scalar is a copy: the write below doesn't reach it
        x.add_(1)
        return s

    def float16_sum(x):
        return np.sum(x.numpy(), axis=0)    # NumPy sums float16 in float16: 2048, not 3000

    def broadcast(x):
        return np.broadcast_to(x.numpy(), (2, 3))

    def twice(x):
        a = x.numpy() * 2
        return a, a

    def argsort_ties(x):
        return np.argsort(x.numpy())[:6]

    assert graphjit.compile(scalar_then_write, backend="eager")(torch.zeros(3)) == np.float32(0)
    got = graphjit.compile(float16_sum, backend="eager")(torch.ones(3000, 2, dtype=torch.float16))
    assert np.array_equal(got, float16_sum(torch.ones(3000, 2, dtype=torch.float16)))
    assert not graphjit.compile(broadcast, backend="eager")(torch.zeros(3)).flags.writeable
    pair = graphjit.compile(twice, backend="eager")(torch.ones(2))
    assert pair[0] is pair[1]
    x = torch.tensor([1.0, 0.0] * 20)
    assert np.array_equal(graphjit.compile(argsort_ties, backend="eager")(x), argsort_ties(x))


def test_integer_remainder_and_floor_division_run_as_numpy():
    """NumPy gives 0 (and a warning) for an integer divided by zero where torch raises: these calls break."""
    def fn(a, b):
        x, y = a.numpy(), b.numpy()
        return np.remainder(x, y), x % y, np.floor_divide(x, y), x // y

    compiled = graphjit.compile(fn, backend="eager")
    a, b = torch.tensor([7, -7, 3]), torch.tensor([2, 0, -2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for got, expected in zip(compiled(a, b), fn(a, b)):
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert "remainder() of integer arrays" in graphjit.explain(fn, a, b).break_reasons[0].reason


def divided_by_zeros(x):
    return x.numpy() / np.zeros(3, dtype=np.float32)


def caught_under_raise(x):
    old = np.seterr(all="raise")
    try:
        try:
            result = x.numpy() / np.zeros(3, dtype=np.float32)
        except FloatingPointError:
            result = None
    finally:
        np.seterr(**old)
    return result


def test_floating_point_error_settings_that_raise_are_eager_s():
    """torch._numpy neither warns nor raises: a NumPy call on an array over a tensor under np.seterr
    settings that raise is a graph break (NumPy raises as in eager), and an entry traced under other
    settings is guarded on np.geterr(), so np.seterr(all="raise") between calls traces again."""
    counter = CompileCounter()
    compiled = graphjit.compile(divided_by_zeros, backend=counter)
    old = np.seterr(all="ignore")
    try:
        got = compiled(torch.randn(3))
        assert np.isinf(got).all()
        np.seterr(all="raise")
        for fn in (divided_by_zeros, compiled):
            with pytest.raises(FloatingPointError):
                fn(torch.randn(3))
        np.seterr(all="ignore")
        assert np.isinf(compiled(torch.randn(3))).all()
        assert counter.frame_count == 1
        assert graphjit.compile(caught_under_raise)(torch.randn(3)) is None
        assert np.geterr()["divide"] == "ignore"
    finally:
        np.seterr(**old)
