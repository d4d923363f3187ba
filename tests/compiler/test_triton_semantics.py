"""Numeric semantics that Triton kernels got wrong, compiled vs eager through the frontend on the C++
codegen and the Triton interpreter (the `backend` fixture), and on CUDA where there is a GPU: remainder,
fmod and floor division exact at infinities, subnormals and large quotients (a GPU's Triton float % is
a - trunc(a / b) * b) and a Python number operand of remainder in the tensor's dtype; argmax/argmin of a
lazy 16-bit value comparing it as stored, as its extreme is; var and std accumulating where eager's kernel
does (float64 on the CPU: the std of float32 values near 3e38 is finite). Zeros are compared with their
signs.
"""
import pytest
import torch

from .harness import check_calls


def on_cuda(make_inputs):
    return lambda seed: [t.cuda() for t in make_inputs(seed)]


# ---- remainder, fmod, floor division ----------------------------------------------------------------------

SPECIALS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -3e37, 1e-38, 2e-41, -2e-41, 1e-310,
            -0.5, 0.5, 3.0, -3.0, 7.25, -1.0, 123456789.0, 0.1, 5e-3]


def division_inputs(dtype):
    """Every pair of SPECIALS, then quotients up to 1e16: (a, b). Pairs whose quotient overflows dtype are
    left out: eager's vectorized CPU fmod (Sleef) makes those nan, its scalar loop and CUDA do not."""
    def make(seed):
        values = torch.tensor(SPECIALS, dtype=torch.float64)
        a, b = (t.reshape(-1) for t in torch.meshgrid(values, values, indexing="ij"))
        g = torch.Generator().manual_seed(seed)
        a = torch.cat([a, torch.randn(256, generator=g, dtype=torch.float64) * 1e10])
        b = torch.cat([b, torch.randn(256, generator=g, dtype=torch.float64) * 1e-3])
        a, b = a.to(dtype), b.to(dtype)
        overflows = a.isfinite() & ((a.double() / b.double()).abs() > torch.finfo(dtype).max)
        return a, torch.where(overflows, torch.ones_like(b), b)
    return make


def divisions(a, b):
    return (torch.remainder(a, b), torch.fmod(a, b), a // b, torch.remainder(a, 0.1), torch.remainder(-2.5e-6, b),
            a % -3.0, torch.remainder(a.half(), -0.1), torch.remainder(a.half(), 0.3) // 0.01)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_remainder_and_floor_division_exact(dtype, backend):
    """Python's % from C's fmod, the sign fixed after, as eager: exact at infinities, signed zeros,
    subnormals and large quotients; a number operand is first converted to the tensor's dtype (-0.1 as
    float16 holds it)."""
    check_calls(divisions, division_inputs(dtype), backend)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_remainder_and_floor_division_exact_on_cuda(dtype):
    """On a GPU Triton's float % is a - trunc(a / b) * b (nan for an infinite divisor, off for large
    quotients) and libdevice's float32 fmod flushes subnormals; eager's CUDA kernel is exact."""
    check_calls(divisions, on_cuda(division_inputs(dtype)), "triton")


# ---- argmax / argmin --------------------------------------------------------------------------------------

def shifted_args(x):
    v = x.select(0, 0)
    v.sub_(1e20)
    near = x + 1000             # 16 bits hold 1000 + x for few x: ties that float32 does not have
    exact = x * 4 + 0.5
    return (v.argmax(), v.argmin(), near.argmax(), near.argmin(1), exact.argmax(0, keepdim=True),
            (x - 1e20).argmin(-1), torch.max(near, 1).indices, near.amax(1), exact.argmin())


def ties_inputs(dtype):
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        x = (torch.randint(-3, 4, (3, 5, 9), generator=g) * 0.25).to(dtype)
        x[1, 2, 4] = float("nan")
        x[2, 1, ::3] = float("nan")
        return (x,)
    return make


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_argmax_of_a_lazy_16_bit_value(dtype, backend):
    """argmax/argmin of a value computed in the same kernel: the extreme is stored (rounded to 16 bits), so
    the values it is compared with are rounded too (x - 1e20 in float32 matched no element: the index
    was the row's length); ties take the first index and the first NaN wins."""
    check_calls(shifted_args, ties_inputs(dtype), backend)


# ---- var and std ------------------------------------------------------------------------------------------

def spreads(x):
    return (x.std(-1, correction=0), x.var(-1), x.std(0), x.std(), x.var(), x[:1].std(1), x.view(-1, 1).std(0),
            x.double().std(1), torch.std(x, (0, 2), keepdim=True), x.std(-1).unsqueeze(0).cumprod(-2).log_softmax(1))


def huge_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, 5, generator=g)
    x[0, 1] = torch.tensor([3e38, -3e38, 1e-40, 2.0, -1e38])    # squared deviations overflow float32
    x[2, :, 1] = 1e19 * (seed + 1)
    return (x,)


def test_var_and_std_accumulate_as_eager(backend):
    """Eager's CPU var/std accumulate in float64 (a float32 reduction to one element takes its mean in
    float32 first: inf when the sum overflows); the square root is taken before the cast to float32."""
    check_calls(spreads, huge_inputs, backend, atol=None, rtol=None, zero_signs=True)   # the dtypes' tolerances


# ---- indices computed in narrow integer types ---------------------------------------------------------------

def _index_by_a_wrapped_int8_sum(x):
    i = torch.arange(100, dtype=torch.int8)
    return x[(i + i).long()] * 2        # int8 adds wrap: 128..198 -> -128..-58, negative indices count back


def _index_by_a_wrapped_uint8_difference(x):
    i = torch.arange(100, dtype=torch.uint8)
    return x[(i - 50).long() + 50] + 1  # uint8 subtracts wrap: an index of 256 is out of range


def test_an_index_computed_in_a_narrow_type_wraps_as_eagers(backend):
    """The bounds an index's arithmetic carries hold only within its dtype: an int8 sum of positions wraps,
    so the index is neither known in range nor non-negative (the kernel read before the tensor)."""
    check_calls(_index_by_a_wrapped_int8_sum, lambda seed: [torch.arange(300, dtype=torch.float32) + seed], backend)
    compiled = __import__("graphjit").compile(_index_by_a_wrapped_uint8_difference)
    with pytest.raises(IndexError):
        _index_by_a_wrapped_uint8_difference(torch.arange(100.0))
    with pytest.raises(IndexError):
        compiled(torch.arange(100.0))
