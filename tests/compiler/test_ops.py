"""Every lowering against eager: odd sizes, 0-d, transposed, sliced and broadcast inputs, fp32 and bf16.

Each test compiles one graph holding all of an op's cases (one C++ compile). A failure names the case
and prints the command that reruns it.
"""
import dataclasses
import math
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from .conftest import _triton_available
from .harness import binary_inputs, make, run_cases, unary_inputs

F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64
FLOATS = (F32, BF16)


@dataclasses.dataclass
class Op:
    name: str
    fn: Callable
    inputs: Callable                 # dtype -> list of input tuples
    dtypes: tuple = FLOATS
    tol: dict = dataclasses.field(default_factory=dict)


def unary(name, fn, low=-3.0, high=3.0, dtypes=FLOATS, **tol):
    return Op(name, fn, lambda d: unary_inputs(d, low, high), dtypes, tol)


def binary(name, fn, low=-3.0, high=3.0, dtypes=FLOATS, other_low=None, other_high=None, **tol):
    return Op(name, fn, lambda d: binary_inputs(d, low, high, other_low=other_low, other_high=other_high),
              dtypes, tol)


def rows(*shapes, low=-3.0, high=3.0, seed=2):
    """Inputs for reductions/normalizations: given shapes plus a transposed and a sliced one."""
    def inputs(dtype):
        g = torch.Generator().manual_seed(seed)
        out = [(make(s, dtype, low, high, g),) for s in shapes]
        out.append((make((40, 7), dtype, low, high, g).t(),))
        out.append((make((9, 70), dtype, low, high, g)[1::2, 3:],))
        return out
    return inputs


POINTWISE = [
    unary("abs", torch.abs, dtypes=FLOATS + (I64,)),
    unary("neg", torch.neg, dtypes=FLOATS + (I64,)),
    unary("exp", torch.exp),
    unary("exp2", torch.exp2),
    unary("expm1", torch.expm1),
    unary("log", torch.log, 0.1, 5.0),
    unary("log2", torch.log2, 0.1, 5.0),
    unary("log1p", torch.log1p, 0.0, 5.0),
    unary("sqrt", torch.sqrt, 0.0, 5.0),
    unary("rsqrt", torch.rsqrt, 0.1, 5.0),
    unary("sin", torch.sin),
    unary("cos", torch.cos),
    unary("tan", torch.tan, -1.2, 1.2, rtol=1e-4),
    unary("tanh", torch.tanh),
    unary("sigmoid", torch.sigmoid),
    unary("erf", torch.erf),
    unary("floor", torch.floor, dtypes=FLOATS),
    unary("ceil", torch.ceil),
    unary("trunc", torch.trunc),
    unary("round", torch.round, -5.0, 5.0),
    unary("sign", torch.sign, dtypes=FLOATS + (I64,)),
    unary("reciprocal", torch.reciprocal, 0.5, 4.0),
    unary("relu", torch.relu, dtypes=FLOATS + (I64,)),
    unary("gelu", F.gelu),
    unary("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    unary("silu", F.silu),
    unary("leaky_relu", lambda x: F.leaky_relu(x, 0.2)),
    unary("hardtanh", lambda x: F.hardtanh(x, -1.5, 0.5)),
    unary("clamp", lambda x: torch.clamp(x, -1.0, 2.0), dtypes=FLOATS + (I64,)),
    unary("clamp_min", lambda x: x.clamp(min=0.5)),
    unary("square_pow", lambda x: x ** 2),
    unary("cube_pow", lambda x: torch.pow(x, 3)),
    unary("sqrt_pow", lambda x: x ** 0.5, 0.0, 4.0),
    unary("float_pow", lambda x: x ** 1.7, 0.0, 3.0),
    unary("rpow", lambda x: 2.0 ** x),
    unary("logical_not", torch.logical_not, dtypes=FLOATS + (torch.bool,)),
    unary("bitwise_not", torch.bitwise_not, dtypes=(I64, torch.bool)),
    unary("isnan", lambda x: torch.isnan(torch.log(x)), -1.0, 2.0, dtypes=(F32,)),
    unary("scalar_chain", lambda x: (x * 2.5 - 1) / 3 + x.sigmoid() * x),
    unary("int_to_float", lambda x: x.float() / 3, dtypes=(I64,)),
    unary("to_bf16", lambda x: x.to(torch.bfloat16) * 2, dtypes=(F32,)),
    unary("to_f32", lambda x: x.float() + 1, dtypes=(BF16,)),
    unary("to_int", lambda x: (x * 10).to(torch.int64), dtypes=(F32,)),
    unary("to_bool", lambda x: x.round().bool(), dtypes=FLOATS),
    unary("bool_to_float", lambda x: (x > 0).float() * x, dtypes=FLOATS),
    binary("add", torch.add, dtypes=FLOATS + (I64,)),
    binary("add_alpha", lambda a, b: torch.add(a, b, alpha=0.5)),
    binary("sub", torch.sub, dtypes=FLOATS + (I64,)),
    binary("rsub", lambda a, b: 1.5 - a + b),
    binary("mul", torch.mul, dtypes=FLOATS + (I64,)),
    binary("div", torch.div, other_low=0.5, other_high=3.0),
    binary("div_int", torch.div, 1, 20, other_low=1, other_high=7, dtypes=(I64,)),
    binary("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), -20, 20, other_low=1,
           other_high=7, dtypes=(F32, I64)),
    binary("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), -20, 20, other_low=1,
           other_high=7, dtypes=(F32, I64)),
    binary("remainder", torch.remainder, -20, 20, other_low=1, other_high=7, dtypes=(F32, I64)),
    binary("pow", torch.pow, 0.1, 3.0, other_low=-2.0, other_high=2.0),
    binary("maximum", torch.maximum, dtypes=FLOATS + (I64,)),
    binary("minimum", torch.minimum, dtypes=FLOATS + (I64,)),
    binary("atan2", torch.atan2, dtypes=(F32,)),
    binary("eq", lambda a, b: a.round() == b.round()),
    binary("ne", lambda a, b: a.round() != b.round(), dtypes=(F32, I64)),
    binary("lt", torch.lt, dtypes=FLOATS + (I64,)),
    binary("le", torch.le),
    binary("gt", torch.gt),
    binary("ge", torch.ge, dtypes=(F32, I64)),
    binary("logical_and", lambda a, b: torch.logical_and(a > 0, b > 0)),
    binary("logical_or", lambda a, b: torch.logical_or(a > 0, b)),
    binary("logical_xor", lambda a, b: torch.logical_xor(a > 0, b > 1)),
    binary("bitwise_and", torch.bitwise_and, dtypes=(I64, torch.bool)),
    binary("bitwise_or", torch.bitwise_or, dtypes=(I64, torch.bool)),
    binary("where", lambda a, b: torch.where(a > 0, a, b)),
    binary("where_scalar", lambda a, b: torch.where(a > b, 0.5, a)),
    binary("masked_fill", lambda a, b: a.masked_fill(b > 0, -1e4)),
    binary("mixed_dtypes", lambda a, b: a + b, dtypes=(BF16,)),
    Op("mixed_f32_bf16", lambda a, b: a * b + 1, lambda d: binary_inputs(F32, other_dtype=BF16), (F32,)),
    Op("int_plus_float", lambda a, b: a + b, lambda d: binary_inputs(I64, other_dtype=F32), (F32,)),
    binary("clamp_tensor", lambda a, b: torch.clamp(a, min=b)),
]


def _logsumexp(x):
    return torch.logsumexp(x, -1)


REDUCTIONS = [
    Op("sum_last", lambda x: x.sum(-1), rows((7, 33), (1000,), (4, 1, 33), (3, 1000))),
    Op("sum_first", lambda x: x.sum(0), rows((7, 33), (1000,), (33, 1))),
    Op("sum_all", lambda x: x.sum(), rows((7, 33), (1000,), ())),
    Op("sum_keepdim", lambda x: x.sum(-1, keepdim=True) + x, rows((7, 33), (5, 1000))),
    Op("sum_dims", lambda x: x.sum((0, 2)), lambda d: [(make((3, 5, 7), d),), (make((6, 7, 8), d),)]),
    Op("sum_int", lambda x: x.sum(-1), lambda d: [(make((7, 33), d, -5, 5),), (make((3, 1000), d, -5, 5),)],
       (I64, torch.bool)),
    Op("sum_big", lambda x: x.sum(), lambda d: [(make((100000,), d, 0.0, 1.0),)], (F32,), dict(rtol=1e-4)),
    Op("mean", lambda x: x.mean(-1), rows((7, 33), (1000,), (2, 3, 70))),
    Op("mean_all", lambda x: x.mean(), rows((7, 33), (1,))),
    Op("amax", lambda x: x.amax(-1), rows((7, 33), (1000,), (3, 1))),
    Op("amax_first", lambda x: x.amax(0), rows((7, 33),)),
    Op("amax_int", lambda x: x.amax(-1), lambda d: [(make((7, 33), d, -9, 9),)], (I64,)),
    Op("amin", lambda x: x.amin(1, keepdim=True), rows((7, 33), (3, 1000))),
    Op("max_nan", lambda x: torch.log(x).amax(-1), rows((7, 33), low=-0.2, high=3.0), (F32,)),
    Op("max_all_neg_inf", lambda x: (x * 0 - math.inf).amax(-1), rows((3, 5)), (F32,)),
    Op("var", lambda x: x.var(-1), rows((7, 33), (1000,)), tol=dict(rtol=1e-4, atol=1e-5)),
    Op("var_unbiased_false", lambda x: x.var(0, unbiased=False), rows((7, 33),)),
    Op("std", lambda x: x.std(-1, keepdim=True), rows((7, 33), (5, 1000))),
    Op("softmax", lambda x: torch.softmax(x, -1), rows((7, 33), (1000,), (2, 3, 129), (1, 1))),
    Op("softmax_dim0", lambda x: torch.softmax(x, 0), rows((7, 33), (1000,))),
    Op("softmax_masked", lambda x: torch.softmax(x.masked_fill(x > 2.5, -math.inf), -1), rows((7, 33),)),
    Op("log_softmax", lambda x: F.log_softmax(x, -1), rows((7, 33), (1000,))),
    Op("logsumexp", _logsumexp, rows((7, 33), (1000,))),
    Op("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), rows((7, 33), (1000,), (2, 3, 64))),
    Op("layer_norm_affine", lambda x, w, b: F.layer_norm(x, w.shape, w, b, 1e-6),
       lambda d: [(make((7, 33), d), make((33,), d), make((33,), d)),
                  (make((2, 5, 64), d), make((64,), d), make((64,), d)),
                  (make((40, 3), d).t(), make((40,), d), make((40,), d))]),
    Op("layer_norm_2d", lambda x, w: F.layer_norm(x, w.shape, w), lambda d: [(make((3, 5, 7), d), make((5, 7), d))]),
    Op("group_norm", lambda x: F.group_norm(x, 4), lambda d: [
        (make((2, 8, 5, 3), d, -3.0, 5.0),), (make((3, 12, 7), d),), (make((1, 4, 33), d),),
        (make((2, 3, 8, 6), d).contiguous(memory_format=torch.channels_last).transpose(1, 2),)]),
    Op("group_norm_affine", lambda x, w, b: F.group_norm(x, 2, w, b, 1e-6), lambda d: [
        (make((2, 8, 5, 3), d), make((8,), d), make((8,), d)),
        (make((2, 6, 4, 5), d).contiguous(memory_format=torch.channels_last), make((6,), d), make((6,), d)),
        (make((4, 9, 2, 6), d)[:, 1:5], make((4,), d), make((4,), d))]),
]

def _parts(parts):
    return parts[0] * 1, parts[1].transpose(0, 1) * 2, parts[2] + 3


VIEWS = [
    unary("reshape", lambda x: (x + 1).reshape(-1)),
    Op("permute_of_lazy", lambda x: (x * 2).permute(1, 0, 2).contiguous(),
       lambda d: [(make((3, 5, 7), d),), (make((7, 5, 3), d).transpose(0, 2),)]),
    Op("view_split_heads", lambda x: (x * 2).view(2, 16, 4, 8).transpose(1, 2).contiguous(),
       lambda d: [(make((2, 16, 32), d),), (make((32, 2, 16), d).permute(1, 2, 0),)]),
    Op("view_merge_heads", lambda x: x.transpose(1, 2).reshape(2, 16, 32) + 1,
       lambda d: [(make((2, 4, 16, 8), d),)]),
    Op("expand", lambda x: x.expand(5, 7, 33) * 2, lambda d: [(make((7, 33), d),), (make((1, 33), d),)]),
    Op("slice", lambda x: x[1:-1, ::3] + x[:-2, 1::3], lambda d: [(make((9, 42), d),), (make((42, 9), d).t(),)]),
    Op("select", lambda x: x[2] * x[:, 1].unsqueeze(1)[:7], lambda d: [(make((9, 7), d),)]),
    Op("unsqueeze_squeeze", lambda x: x.unsqueeze(0).unsqueeze(-1).squeeze(0) * 3, lambda d: [(make((7, 33), d),)]),
    Op("split", lambda x: _parts(x.split(4, dim=-1)), lambda d: [(make((7, 11), d),)]),
    Op("chunk_qkv", lambda x, w: _parts(torch.chunk(x @ w, 3, -1)),
       lambda d: [(make((5, 8), d), make((8, 24), d))], tol=dict(rtol=1e-4, atol=1e-4)),
    Op("flatten", lambda x: x.flatten(1) * 2, lambda d: [(make((3, 4, 5), d),), (make((5, 4, 3), d).transpose(0, 2),)]),
    Op("narrow", lambda x: x.narrow(1, 2, 5).exp(), lambda d: [(make((3, 10), d),)]),
    Op("contiguous_transposed", lambda x: x.t().contiguous(), lambda d: [(make((33, 7), d),), (make((1, 5), d),)]),
    Op("reshape_lazy_transposed", lambda x: (x.t() + 1).reshape(-1), lambda d: [(make((6, 4), d),)]),
    Op("output_is_view", lambda x: (x + 1).t(), lambda d: [(make((6, 4), d),)]),
    Op("input_view_output", lambda x: x[1:], lambda d: [(make((6, 4), d),)]),
]

CREATION = [
    Op("full", lambda x: x + torch.full((7, 33), 2.5, dtype=x.dtype), lambda d: [(make((7, 33), d),)]),
    Op("zeros_ones", lambda x: torch.zeros_like(x) + torch.ones(x.shape[-1], dtype=x.dtype) + x,
       lambda d: [(make((7, 33), d),)]),
    Op("arange", lambda x: x * torch.arange(33, dtype=x.dtype) + torch.arange(2, 35, 1),
       lambda d: [(make((7, 33), d),)], (F32,)),
    Op("arange_float", lambda x: x + torch.arange(0.5, 4.0, 0.25), lambda d: [(make((14,), d),)], (F32,)),
    Op("causal_mask", lambda x: x.masked_fill(torch.ones(9, 9, dtype=torch.bool).tril().logical_not(), 0.0),
       lambda d: [(make((2, 9, 9), d),)]),
]


def _pad(x):
    return F.pad(x, (1, 2, 3, 0), value=-1.5)


INDEXING = [
    Op("embedding", lambda w, i: F.embedding(i, w) * 2,
       lambda d: [(make((50, 16), d), torch.randint(0, 50, (3, 7))), (make((10, 33), d), torch.tensor([9, 0, 3])),
                  (make((20, 8), d).t().contiguous().t(), torch.randint(0, 20, (4,)))]),
    Op("cat", lambda a, b: torch.cat([a, b * 2, a], dim=-1),
       lambda d: [(make((7, 3), d), make((7, 5), d)), (make((2, 1), d), make((2, 1), d)),
                  (make((5, 4), d).t(), make((4, 2), d))]),
    Op("cat_dim0", lambda a, b: torch.cat([a, b]).exp(), lambda d: [(make((3, 7), d), make((2, 7), d))]),
    Op("pad", _pad, lambda d: [(make((4, 5), d),), (make((2, 3, 6), d),)]),
    Op("pad_negative", lambda x: F.pad(x, (-1, 2)), lambda d: [(make((4, 5), d),)]),
    Op("clone", lambda x: x.clone(), lambda d: [(make((7, 33), d),), (make((33, 7), d).t(),)]),
]

LOOSE = dict(rtol=1e-4, atol=1e-4)     # matmul results: summation order differs from eager's

EXTERN = [
    Op("mm", lambda a, b: (a @ b).relu(),
       lambda d: [(make((7, 33), d), make((33, 5), d)), (make((33, 7), d).t(), make((33, 5), d))], tol=LOOSE),
    Op("linear", lambda x, w, b: F.gelu(F.linear(x, w, b)),
       lambda d: [(make((2, 7, 16), d), make((8, 16), d), make((8,), d))], tol=LOOSE),
    Op("bmm", lambda a, b: torch.softmax(a @ b, -1) @ b.transpose(1, 2),
       lambda d: [(make((3, 7, 16), d), make((3, 16, 9), d))], tol=LOOSE),
    Op("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5),
       lambda d: [(make((3, 7, 9), d), make((3, 7, 16), d), make((3, 16, 9), d))], tol=LOOSE),
    Op("conv2d", lambda x, w: F.conv2d(x, w, padding=1).relu(),
       lambda d: [(make((2, 3, 9, 9), d), make((4, 3, 3, 3), d))], tol=LOOSE),
    Op("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2,
       lambda d: [(make((2, 4, 9, 8), d), make((2, 4, 9, 8), d), make((2, 4, 9, 8), d))], tol=LOOSE),
    Op("cumsum_of_exp", lambda x: torch.cumsum(x.exp(), -1) + 1, rows((7, 33),), (F32,)),
    Op("argmax_rows", lambda x: x.argmax(-1), rows((7, 33),), (F32,)),
    Op("fallback_cumprod", lambda x: torch.cumprod(x.exp(), -1) + 1, rows((7, 33),), (F32,)),
]

ALL = POINTWISE + REDUCTIONS + VIEWS + CREATION + INDEXING + EXTERN
PARAMS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
          for op in ALL for dtype in op.dtypes]


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op(op, dtype):
    run_cases(op.fn, op.inputs(dtype), **op.tol)


@pytest.mark.skipif(not _triton_available(), reason="Triton is not installed")
def test_group_norm_is_lowered_whole(triton_interpreter):
    """GroupNorm (diffusers' UNets hold dozens) is two reductions and a pointwise kernel of ours in Triton,
    not an ATen call between kernels (in C++ it stays eager's kernel: see lowering.native_group_norm)."""
    x = make((2, 8, 5, 3), F32).contiguous(memory_format=torch.channels_last)
    compiled = run_cases(lambda x, w, b: F.silu(F.group_norm(x, 4, w, b)), [(x, make((8,), F32), make((8,), F32))])
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks


def test_every_lowering_is_exercised():
    """Each registered lowering's op packet appears in some test above (checked via the ops names)."""
    from graphjit.compiler.lowering import LOWERINGS
    assert len(LOWERINGS) > 80
