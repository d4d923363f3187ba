"""Numeric semantics of graphjit's compiler against eager where eager's CPU kernels compute in an order or
dtype of their own, on the C++ codegen and (where Triton is installed) the Triton interpreter, compared
bit for bit over several calls: eval batch norm off its contiguous path (each step rounded for 16-bit),
16-bit logit with eps (its bounds and each step in the 16-bit dtype), the sign of layer_norm's zeros;
and, C++ only, float32/float64 transcendentals under config.eager_math (eager's MKL and Sleef functions).
"""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler.codegen import eager_math

from .test_numeric_semantics_2 import check_calls, odd_values

# x's layouts that take eager's strided path
LAYOUTS = {
    "transposed": lambda t: t.transpose(0, 3).contiguous().transpose(0, 3),
    "sliced": lambda t: t[:, :, :, ::2],
}


def _batch_norm_inputs(dtype, param_dtype, layout, affine):
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        x = LAYOUTS[layout]((torch.randn(4, 6, 5, 14, generator=g) * 3).to(dtype))
        mean, var = torch.randn(6, generator=g).to(param_dtype), (torch.rand(6, generator=g) + 0.05).to(param_dtype)
        weight, bias = torch.randn(6, generator=g).to(param_dtype), torch.randn(6, generator=g).to(param_dtype)
        return [x, mean, var] + ([weight, bias] if affine else [])
    return make


def eval_batch_norm(x, mean, var, weight=None, bias=None):
    return F.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-5)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype,param_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                               (torch.bfloat16, torch.float32)], ids=["bf16", "fp16", "bf16-fp32"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_eval_batch_norm_16_bit_strided_as_eager_rounds(layout, dtype, param_dtype, affine, backend):
    """Off eager's contiguous path (x not dense in a memory format): ((x - mean) * invstd) * weight + bias,
    each step rounded to x's dtype where the statistics are of it too."""
    check_calls(eval_batch_norm, _batch_norm_inputs(dtype, param_dtype, layout, affine), backend)



@pytest.mark.parametrize("eps", [1e-3, 0.1, 1e-6, None, -0.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_logit_16_bit_bounds_and_steps_in_its_dtype(eps, dtype, backend):
    """hi = 1 - eps is 1.0 in bfloat16 for eps=1e-3: eager's logit of x >= 1 is then inf."""
    def make(seed):
        x = torch.rand(200, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 1.2 - 0.1
        return [torch.cat([x, odd_values((20,), torch.float64, seed)]).to(dtype)]
    check_calls(lambda x: torch.logit(x, eps) * 2, make, backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_without_bias_gives_positive_zeros(dtype, backend):
    """Rows of one value normalize to zeros: +0.0 in eager's CPU kernel (it adds a bias of 0) whatever the
    weight's sign; copysign and signbit read it. (Values k/4, whose mean is exact in any order.)"""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        rows = (torch.randint(-8, 8, (5, 1), generator=g) / 4).to(dtype).expand(5, 6).contiguous()
        return [rows, torch.randn(6, generator=g, dtype=dtype)]

    def fn(x, w):
        y = F.layer_norm(x, x.shape[-1:], w, None, eps=1e-5)
        return y, torch.signbit(y)
    check_calls(fn, make, backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_of_rows_of_one_value_is_its_bias(dtype, backend):
    """A row of one repeated value (a padding position, a constant channel) has eager's (Welford) mean
    exactly, so it normalizes to 0 and the output is the bias, whatever the value: a mean summed and
    divided rounds (sum / 300 of 300 values 0.1 is not 0.1 in float32), and rstd magnified that to 1e-4-1e-3."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(6, 1, generator=g, dtype=dtype) * 10).expand(6, 300).contiguous()
        return [x, torch.randn(300, generator=g, dtype=dtype), torch.randn(300, generator=g, dtype=dtype)]
    check_calls(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5), make, backend)


TRANSCENDENTALS = {
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": lambda x: torch.log(x.abs()),
    "log2": lambda x: torch.log2(x.abs()), "log1p": lambda x: torch.log1p(x.abs()), "sin": torch.sin,
    "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid,
    "atan2": lambda x: torch.atan2(x, x.flip(0) + 0.5), "pow": lambda x: torch.pow(x.abs(), x.flip(0)),
}


@pytest.mark.skipif(not eager_math.functions(), reason="eager's kernels call libm here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(TRANSCENDENTALS))
def test_eager_math_gives_eagers_bits(name, dtype):
    """4096 elements, all in eager's vectorized body: eager's bits; a value computed in a kernel's scalar
    tail equals the same value computed in its vectorized body."""
    fn = TRANSCENDENTALS[name]
    with graphjit.config.patch(eager_math=1):
        for seed in range(2):
            x = (torch.randn(4096, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3).to(dtype)
            graphjit.reset()
            got = graphjit.compile(lambda t: fn(t) * 1)(x)
            torch.testing.assert_close(got, fn(x), rtol=0, atol=0, equal_nan=True)
            tail = torch.cat([x, x[:13]])          # 4109 elements: the last 13 in the scalar tail
            graphjit.reset()
            got = graphjit.compile(lambda t: fn(t) * 1)(tail)
            if name not in ("atan2", "pow"):    # (their second operand differs in the tail)
                torch.testing.assert_close(got[-13:], got[:13], rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("exponent", [-0.5, -2.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_by_the_exponents_eager_special_cases(exponent, dtype, backend):
    """Eager computes pow(x, -0.5) as 1/sqrt(x) (-inf at -0.0, where pow() gives inf) and pow(x, -2) as
    1/(x*x) (0 where x*x overflows; pow() gives a subnormal): found through a gradient (pow(x, 0.5)'s
    backward is pow(x, -0.5)), fuzz seed 4100007. Exact on the special values; random ones within the
    dtype's tolerance."""
    special = torch.tensor([-0.0, 0.0, 1e20, -1e20, 3.0, -2.0, 1e-20, float("inf"), float("-inf"), float("nan")],
                           dtype=dtype)
    check_calls(lambda x: x.pow(exponent), lambda call: (special.clone(),), backend)
    check_calls(lambda x: x.pow(exponent), lambda call: (torch.randn(50, dtype=dtype) + 2,), backend,
                atol=None, rtol=None)


def test_a_fused_product_is_rounded_before_a_subtraction(backend):
    """softmax of a product computed in the same kernel: x - max(x) of the largest element is 0, as
    between eager's separate ops; a contracted fma(a, b, -max) gave the product's rounding error
    (about 1e22 here), exp of it inf, and the row NaN (fuzz 4800082; the C++ kernels build with
    -ffp-contract=off)."""
    def fn(x):
        return torch.einsum("...ij,...kj->...ik", x, x).softmax(-1)

    def inputs(seed):
        x = torch.randn(3, 3, 1, generator=torch.Generator().manual_seed(seed))
        x[0, 0, 0] = 1e30
        return [x]
    check_calls(fn, inputs, backend, atol=1e-6, rtol=1e-5)


def test_layer_norm_of_a_row_starting_far_from_the_rest(backend):
    """layer_norm of a row whose first element is -3e38: eager's mean is finite and its variance
    infinite, so every output is 0. The mean shifted by the first element summed x - first (3e38 per
    element) past float32's range: an infinite mean and NaN outputs (fuzz 4800733). The kernels sum it in
    float64."""

    def fn(x, w):
        return F.layer_norm(x, x.shape[-2:], w, None, eps=1e-5)

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, 5, generator=g)
        x[0, 0] = -3e38
        return [x, torch.randn(3, 5, generator=g)]
    check_calls(fn, inputs, backend, atol=1e-6, rtol=1e-5)


def _times_scalar(x, s):
    return x * s, x / s, torch.div(x, s, rounding_mode="trunc"), torch.div(x, s, rounding_mode="floor"), \
        s * x, s / x, x + s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_a_0d_tensor_of_another_dtype_as_the_second_operand(backend, dtype, scalar_dtype):
    """A 16-bit tensor times or divided by a 0-d tensor of another dtype: eager's CPU kernel reads the 0-d
    operand as a float32, unrounded, when it is the second one (x * s), and rounds it to the 16-bit dtype
    when it is the first (s * x) or added. Rounded the other way, a fifth of the products differed."""
    def make(call):
        g = torch.Generator().manual_seed(call)
        return [(torch.randn(3000, generator=g) * 30).to(dtype),
                torch.tensor(0.7312345678901234 + call / 7, dtype=scalar_dtype)]
    check_calls(_times_scalar, make, backend)
