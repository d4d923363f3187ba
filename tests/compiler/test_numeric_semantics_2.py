"""More numeric semantics of graphjit's compiler against eager, through the frontend, on the C++ codegen and
(where Triton is installed) the Triton interpreter, each function called on several fresh inputs that
hold odd values (NaN, infinities, -0.0, huge numbers): clamp to NaN bounds and to bounds out of
order, Python scalars meeting a 16-bit tensor (eager converts a fill, a where branch, a clamp bound, add's
scalar and alpha, pow's and remainder's number, a compared number to the tensor's dtype first), argmax and
argmin of 16-bit values computed in the same kernel (compared as stored, like the extreme they look for).
"""
import functools

import pytest
import torch
import torch.nn.functional as F

from . import harness

# Exact values, dtypes and shapes; zeros' signs and identities left out (test_numeric_semantics.py's
# test_signs_of_zeros_as_eager and test_aliasing.py's test_a_view_that_changes_nothing_is_a_new_tensor
# hold the differences these functions show).
check_calls = functools.partial(harness.check_calls, zero_signs=False, identities=False)

NAN, INF = float("nan"), float("inf")
ODD = [NAN, INF, -INF, -0.0, 0.0, 1e30, -3e38, 0.1, -0.1, 3.0, -3.0, 65504.0, 1e15, -2.5]


def odd_values(shape, dtype, seed):
    """Random values of dtype with every ODD value somewhere among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 4
    flat = x.view(-1)
    picks = torch.randperm(flat.numel(), generator=g)[:len(ODD)]
    flat[picks] = torch.tensor(ODD, dtype=torch.float64)[:len(picks)]
    return x.to(dtype)


def mask(shape, share, seed):
    """A random bool tensor, True with probability `share`."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < share


# ---- clamp: NaN number bounds, bounds out of order, tensor bounds --------------------------------------

NAN_BOUNDS = [
    lambda x: torch.clamp(x, -3, NAN), lambda x: torch.clamp(x, INF, NAN), lambda x: torch.clamp(x, NAN, 3),
    lambda x: torch.clamp(x, NAN, NAN), lambda x: torch.clamp(x, min=NAN), lambda x: torch.clamp(x, max=NAN),
    lambda x: torch.clamp_min(x, NAN), lambda x: torch.clamp_max(x, NAN), lambda x: F.hardtanh(x, NAN, 1.0),
    lambda x: torch.clamp(x, 3, -3), lambda x: torch.clamp(x, -INF, INF),
    lambda x: torch.clamp(x.long(), -2, NAN), lambda x: torch.clamp(x * 2, -3.0, NAN) + 1,
]


@pytest.mark.parametrize("fn", NAN_BOUNDS, ids=range(len(NAN_BOUNDS)))
def test_clamp_to_nan_and_out_of_order_number_bounds(fn, backend):
    check_calls(fn, lambda seed: [odd_values((3, 7), torch.float32, seed)], backend)


@pytest.mark.parametrize("fn", NAN_BOUNDS[4:8], ids=range(4, 8))
def test_clamp_ignoring_its_nan_bound_returns_a_new_tensor(fn, backend):
    """Where eager ignores a single NaN bound (torch 2.11 and 2.12), its result is a new tensor with x's
    values; compiled returned x itself (fuzz triton 10300938). Elsewhere every element is NaN."""
    import graphjit
    graphjit.reset()
    for x in (torch.tensor(1.5, dtype=torch.float16), odd_values((3, 7), torch.float32, 0)):
        expected = fn(x)
        actual = graphjit.compile(fn)(x)
        assert actual.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert torch.equal(actual.isnan(), expected.isnan())
        assert torch.equal(actual.nan_to_num(), expected.nan_to_num())


def clamp_to_tensor_bounds(x, lo, hi):
    return torch.clamp(x, lo, hi), torch.clamp(x, hi, lo), torch.clamp(x, min=lo), torch.clamp(x, max=hi)


def test_clamp_to_tensor_bounds_with_nan(backend):
    check_calls(clamp_to_tensor_bounds, lambda seed: [odd_values((4, 7), torch.float32, seed),
                                                       odd_values((7,), torch.float32, seed + 10),
                                                       odd_values((4, 1), torch.float32, seed + 20)], backend)


# ---- Python scalars with a 16-bit tensor: converted to its dtype where eager converts them -------------

def scalar_elements(x, c):
    """Scalars that become elements of a 16-bit result: each read afterwards as it is, not re-rounded."""
    big = 1e15 if x.dtype == torch.bfloat16 else 10001.3    # float16 refuses a bound beyond its range
    return (x.clamp(-0.1, 0.1).float(), x.nan_to_num(0.0).clamp(-big, big).long(),
            F.hardtanh(x, -0.1, 0.1).float(), torch.clamp_min(x, 0.1).float(), torch.where(c, 0.1, x).float(),
            torch.where(c, x, 1e20).float(), x.masked_fill(c, 0.1).float(), torch.full_like(x, 0.1).float(),
            x.nan_to_num(0.1, 1e15, -1e15).float(), F.pad(x, (1, 1), value=0.1).float())


def scalar_operands(x, y):
    """Scalars eager's kernels convert to a 16-bit tensor's dtype before computing with them, and
    softshrink's lambd, which eager reads in float32 (remainder of huge values: eager's vectorized and
    scalar loops differ)."""
    tenth = torch.tensor(0.1, dtype=x.dtype).item()
    return (x + 0.1, 0.1 - x, x - 0.1, torch.sub(x, y, alpha=1.0001), torch.add(x, 0.1, alpha=1.0001),
            x.abs() ** 1.3, 1.3 ** x, torch.where(x.abs() < 1e3, x, 0.5) % 0.1, x == tenth,
            torch.full_like(x, tenth) == 0.1, torch.full_like(x, tenth) > 0.1, F.hardshrink(x, 0.10008),
            F.softshrink(x, 0.10008), F.softshrink(x.float(), 0.10008), F.threshold(x, 0.10008, 7.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_scalars_that_become_16_bit_elements(dtype, backend):
    check_calls(scalar_elements, lambda seed: [odd_values((4, 9), dtype, seed), mask((4, 9), 0.5, seed)], backend)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_scalar_operands_of_16_bit_arithmetic(dtype, backend):
    def inputs(seed):
        x = odd_values((4, 9), dtype, seed)
        x[0, :2] = torch.tensor([0.10008, -0.10008])    # 0.10008 rounded to dtype: softshrink's lambd is not
        return [x, odd_values((4, 9), dtype, seed + 5)]
    check_calls(scalar_operands, inputs, backend)


# ---- argmax/argmin of a 16-bit value computed in the same kernel ---------------------------------------

def arg_extremes(x, c):
    return ((x * 1.001).argmax(1), (x * 1.001).argmin(), (x.exp() + 0.3).argmax(0), (x * 1.001).argmax(),
            torch.where(c, 1e20, (x // -1.5).cumprod(-1)).argmax(), (x - 0.1).argmin(1, keepdim=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_arg_extremes_of_computed_16_bit_values(dtype, backend):
    """The index of the first extreme (the first NaN where there is one), never the length of the dim."""
    check_calls(arg_extremes, lambda seed: [odd_values((4, 37), dtype, seed), mask((4, 37), 0.2, seed)], backend)
