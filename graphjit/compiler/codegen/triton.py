"""Triton kernels from the scheduler's Kernels: the GPU twin of codegen/cpp.py, from the same IR and fusion.

One Python module per graph; one @triton.jit function per scheduled kernel, named after what it computes:

    @triton.jit
    def triton_fused_amax_sub_exp_sum_0(arg0, buf3, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
        # persistent reduction: outer [64], rows of [1000] in one block
        xoffset = tl.program_id(0) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
        x0 = xindex
        rindex = tl.arange(0, RBLOCK)[None, :]
        rmask = rindex < 1000
        r0 = rindex
        tmp0 = tl.load(arg0 + (r0 + 1000*x0), rmask, other=0)
        ...

Kernel shapes:
  pointwise   all nodes pointwise, one loop nest: one flat index over every element, XBLOCK per program.
  reduction   a 2-d tile [XBLOCK, RBLOCK]: x runs over the kernel's outer loop (rows), r over each group's
              inner loop. Persistent when every group's row fits one block (RBLOCK >= its length, the row
              stays in registers and groups reuse each other's loads); looped otherwise (`for roffset in
              range(0, n, RBLOCK)`, accumulators [XBLOCK, RBLOCK] reduced after the loop).
Masks: `xmask`/`rmask` only where the length is not a multiple of the block; loads and stores are masked by
the dims their index uses; ops.masked adds its condition to the loads inside it. 16-bit floats are loaded
as float32, computed in float32 and rounded on store (as the C++ codegen does). Sizes are static: lengths
are constants in the source; block sizes come from `block_sizes` (no autotuning).

    module_source, launches = generate(graph, items)     # TritonDevice.codegen; pipeline.py drives it

GRAPHJIT_TRITON_CPU=1 sends CPU graphs here too and runs the kernels in Triton's interpreter, so tests
check the generated Triton code without a GPU.
"""
import collections
import dataclasses
import functools
import itertools
import math
import os
import re
import time

import sympy
import torch

from ... import config, logs
from ..ir import (POINTWISE_OPS, format_index, op_dtype, product, record, reduction_identity, simplify_with_ranges,
                  use_ops, value_range)
from ..scheduler import Kernel, inner_vars, is_empty_kernel, outer_vars
from .cpp import (ZERO_DIVISION, by_output_strides, group_index_exprs, index_status, kernel_error,
                  merge_dims)
from ..facts import GraphFacts
from ..ir import FloorDiv, StorageView, guard_bool, int_of, is_one, size_hint, wrap_int
from .cpp import used_size_symbols
from .wrapper import WrapperCode, pyexpr, run_source

# ---------------------------------------------------------------------------------------------------------
# Types, literals, op templates
# ---------------------------------------------------------------------------------------------------------

TL_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.bfloat16: "tl.bfloat16",
    torch.float16: "tl.float16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
# integer dtypes and the values they hold (bounds of index arithmetic survive casts that fit)
INT_LIMITS = {dtype: (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
              for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)}
COMPUTE_TYPES = {**TL_TYPES, torch.bfloat16: "tl.float32", torch.float16: "tl.float32"}
ROUND_16 = {torch.bfloat16: "gj_round_bf16", torch.float16: "gj_round_f16"}   # float32 -> as 16-bit holds it

# ops name -> Triton expression over the operands {0}, {1}; gj_* helpers are defined in PRELUDE. Where it
# is as exact as libdevice's, the math avoids what makes Triton link libdevice's bitcode into a kernel
# (~20 ms of its compile on our CPU machine, benchmarks/triton_compile.py): libdevice calls, and Triton ops lowered through __nvvm_reflect
# (tl.sqrt, tl.rsqrt, tl.log ...). float32 sqrt: tl.sqrt_rn, IEEE-rounded as libdevice's; float32 rsqrt on a GPU:
# the hardware's approximation, as libdevice's and CUDA's rsqrtf (PRELUDE_GPU).
EXPRESSIONS = {
    "neg": "(-{0})", "abs": "tl.abs({0})", "exp": "tl.exp({0})", "exp2": "tl.exp2({0})",
    "expm1": "libdevice.expm1({0})", "log": "tl.log({0})", "log2": "tl.log2({0})", "log1p": "libdevice.log1p({0})",
    "sqrt": "gj_sqrt({0})", "rsqrt": "gj_rsqrt({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "tan": "libdevice.tan({0})", "tanh": "libdevice.tanh({0})", "sigmoid": "gj_sigmoid({0})",
    "erf": "libdevice.erf({0})", "floor": "gj_floor({0})", "ceil": "gj_ceil({0})", "trunc": "gj_trunc({0})",
    "round": "gj_round({0})", "sign": "gj_sign({0})", "reciprocal": "(1.0 / {0})", "logical_not": "({0} == 0)",
    "bitwise_not": "(~{0})", "isnan": "({0} != {0})", "isinf": "gj_isinf({0})", "square": "({0} * {0})",
    "relu": "gj_relu({0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "floordiv": "gj_floordiv({0}, {1})", "truncdiv": "gj_truncdiv({0}, {1})",
    "remainder": "gj_remainder({0}, {1})", "pow": "gj_pow({0}, {1})", "maximum": "gj_maximum({0}, {1})",
    "minimum": "gj_minimum({0}, {1})", "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})",
    "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "logical_and": "(({0} != 0) & ({1} != 0))", "logical_or": "(({0} != 0) | ({1} != 0))",
    "logical_xor": "(({0} != 0) ^ ({1} != 0))", "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})", "atan2": "libdevice.atan2({0}, {1})",
}
assert set(EXPRESSIONS) == set(POINTWISE_OPS), set(POINTWISE_OPS) ^ set(EXPRESSIONS)
# (op, dtype) -> expression where Triton's op differs from torch's in that dtype: an i1 add wraps
# (True + True is False on a GPU; torch's is True), the interpreter has no i1 subtract (gj_sign's; the sign
# of a bool is itself), ~ of a uint8 (x ^ -1) overflows in the interpreter, and Triton 3.6 negates a float
# as 0 - x (-(0.0) is +0.0; torch's is -0.0; 3.8 negates) where x * -1.0 keeps a NaN's sign (gj_neg flips
# the sign bit)
TYPED_EXPRESSIONS = {
    ("add", torch.bool): "({0} | {1})",
    ("sign", torch.bool): "{0}",
    ("bitwise_not", torch.uint8): "({0} ^ 255).to(tl.uint8)",
    **{("neg", dtype): "gj_neg({0})" for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)},
}

# Helpers every module starts with. Branches on dtype are resolved when Triton compiles the kernel.
PRELUDE = '''\
# generated by graphjit (graphjit/compiler/codegen/triton.py)
import triton
import triton.language as tl
from triton.language.extra import libdevice


# Only builtins and these helpers: Triton's own @jit library (tl.sum, tl.sigmoid ...) runs in the interpreter
# only if TRITON_INTERPRET=1 was set before triton was imported.
@triton.jit
def gj_add(a, b):
    return a + b


@triton.jit
def gj_sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


# ops.rand (ir.py): Philox4x32-10 keyed by the seed, counter (offset, 0, 0); word 0's top 24 bits times 2**-24.
# The same numbers as codegen/cpp.py's gj_rand.
@triton.jit
def gj_rand(seed, offset):
    c0 = offset.to(tl.uint32)
    c1 = (offset >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c2
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    for _ in tl.static_range(10):
        a = c0
        b = c2
        c0 = tl.umulhi(b, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(a, 0xD2511F53) ^ c3 ^ k1
        c1 = b * 0xCD9E8D57
        c3 = a * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return (c0 >> 8).to(tl.float32) * 5.9604644775390625e-08


# x as a 16-bit float holds it, in float32. Through float32, as eager converts float64 and integers: rounded
# twice (float64 1 + 2**-8 + 2**-30 is 1.0 in bfloat16, not 1 + 2**-7)
@triton.jit
def gj_round_bf16(x):
    return x.to(tl.float32).to(tl.bfloat16).to(tl.float32)


@triton.jit
def gj_round_f16(x):
    return x.to(tl.float32).to(tl.float16).to(tl.float32)


@triton.jit
def gj_maximum(a, b):  # NaN-propagating, as torch.maximum
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def gj_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def gj_relu(x):  # as eager's CPU kernel: x < 0 ? 0 : x (NaN and -0.0 stay); PRELUDE_GPU: CUDA's
    return tl.where(0 > x, 0, x)


@triton.jit
def gj_floor(x):
    if x.dtype.is_floating():
        return tl.floor(x)
    else:
        return x


@triton.jit
def gj_ceil(x):
    if x.dtype.is_floating():
        return tl.ceil(x)
    else:
        return x


@triton.jit
def gj_sqrt(x):  # float32: IEEE-rounded, as libdevice's, without linking libdevice
    if x.dtype == tl.float64:
        return libdevice.sqrt(x)
    else:
        return tl.sqrt_rn(x)


@triton.jit
def gj_rsqrt(x):  # float32: the hardware's approximation, as libdevice's, without linking libdevice
    if x.dtype == tl.float64:
        return libdevice.rsqrt(x)
    else:
        return tl.rsqrt(x)


@triton.jit
def gj_trunc(x):
    if x.dtype.is_floating():
        return libdevice.trunc(x)
    else:
        return x


@triton.jit
def gj_round(x):  # half to even
    if x.dtype.is_floating():
        return libdevice.nearbyint(x)
    else:
        return x


@triton.jit
def gj_flip_sign(x):  # the sign bit flipped: -(0.0) is -0.0 and -(NaN) a NaN of the other sign
    if x.dtype == tl.float64:
        return (x.to(tl.int64, bitcast=True) ^ (-9223372036854775807 - 1)).to(tl.float64, bitcast=True)
    else:
        return (x.to(tl.int32, bitcast=True) ^ (-2147483647 - 1)).to(tl.float32, bitcast=True)


@triton.jit
def gj_neg(x):  # as eager's CPU neg
    return gj_flip_sign(x)


@triton.jit
def gj_sign(x):  # sign(NaN) is 0, as eager's
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


@triton.jit
def gj_isinf(x):
    if x.dtype.is_floating():
        return tl.abs(x) == float("inf")
    else:
        return x != x


@triton.jit
def gj_fmod(a, b):  # C's fmod, exact. Not Triton's float %: on a GPU that is a - trunc(a / b) * b (wrong
    # for large quotients, nan for an infinite b); float32 through float64, as libdevice's fmodf flushes
    # subnormals (the float32 result is exact in float64 and fits float32)
    if a.dtype == tl.float64:
        return libdevice.fmod(a, b)
    elif a.dtype.is_floating():
        return libdevice.fmod(a.to(tl.float64), b.to(tl.float64)).to(a.dtype)
    else:
        return a % b


@triton.jit
def gj_floordiv(a, b):  # Python's //: Triton's integer // truncates
    if a.dtype.is_floating():
        # eager's div_floor_floating: from fmod, not floor(a / b), which is off at infinities
        # (-0.5 // inf is -1, -inf // 3 is nan); a zero quotient has the sign of a / b. (a - m) / b is
        # IEEE-rounded: on a GPU Triton's float32 / is approximate (2 ulp), div_rn is not
        q = a / b
        m = gj_fmod(a, b)
        if a.dtype == tl.float32:
            d = tl.div_rn(a - m, b)
        else:
            d = (a - m) / b
        d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1, d)
        f = tl.floor(d)
        f = tl.where(d - f > 0.5, f + 1, f)
        return tl.where(b == 0, q, tl.where(d == 0, q * 0.0, f))
    else:
        q = a // b
        return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def gj_truncdiv(a, b):
    if a.dtype.is_floating():
        return libdevice.trunc(a / b)
    else:
        return a // b


@triton.jit
def gj_remainder(a, b):  # Python's %, sign of the divisor, from C's fmod (gj_fmod) as eager's
    m = gj_fmod(a, b)
    return tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)


@triton.jit
def gj_pow(a, b):
    if a.dtype.is_floating():
        return libdevice.pow(a, b)
    else:
        return gj_ipow(a, b)


@triton.jit
def gj_ipow(a, b):  # eager's powi: by squaring, wrapping as the dtype does; a ** -n is 1 / a ** n truncated
    a, b = tl.broadcast(a, b)
    one = tl.full(a.shape, 1, a.dtype)
    result = one
    base = a
    e = tl.maximum(b, 0)
    for _ in range(a.dtype.primitive_bitwidth):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    if a.dtype.is_int_signed():
        inverse = tl.where(a == 1, one, tl.where(a == -1, tl.where((b & 1) != 0, -one, one), 0))
        result = tl.where(b >= 0, result, inverse)
    return result
'''

# The GPU's prelude: float32 rsqrt as the one PTX instruction (tl.rsqrt reaches it through __nvvm_reflect,
# which links libdevice); Triton's interpreter runs no inline PTX, so the CPU prelude keeps tl.rsqrt. relu
# as eager's CUDA kernel: relu(-0.0) is +0.0 there (-0.0 on the CPU, which the interpreter's tensors are on),
# and so neg, whose NaNs come out otherwise there than on the CPU: a float32 (16-bit) NaN made +NaN, a
# float64 NaN kept.
_GJ_NEG_GPU = """def gj_neg(x):  # as eager's CUDA neg
    if x.dtype == tl.float64:
        return tl.where(x != x, x, gj_flip_sign(x))
    else:
        return tl.where(x != x, tl.abs(x), gj_flip_sign(x))
"""
PRELUDE_GPU = PRELUDE.replace('''    else:
        return tl.rsqrt(x)''', '''    else:
        return tl.inline_asm_elementwise("rsqrt.approx.f32 $0, $1;", "=f,f", [x.to(tl.float32)],
                                         dtype=tl.float32, is_pure=True, pack=1)''').replace(
    "return tl.where(0 > x, 0, x)", "return tl.where(x > 0, x, tl.where(x != x, x, 0))").replace(
    "def gj_neg(x):  # as eager's CPU neg\n    return gj_flip_sign(x)\n", _GJ_NEG_GPU)
assert PRELUDE_GPU.count("tl.where(x > 0, x, tl.where(x != x, x, 0))") == 1 and "rsqrt.approx" in PRELUDE_GPU
assert _GJ_NEG_GPU in PRELUDE_GPU



def literal(value, dtype):
    """A Python literal of value in dtype (Triton types it when it meets a tensor)."""
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        value = float(value)
        if value != value:
            return 'float("nan")'
        if value in (float("inf"), float("-inf")):
            return f'float("{"-" if value < 0 else ""}inf")'
        return repr(value)
    value = wrap_int(int_of(value, dtype), dtype)
    return "(-9223372036854775807 - 1)" if value == -(2 ** 63) else str(value)


def reduction_init(reduction_type, dtype):
    """The accumulator's start value (bool reductions run on int8)."""
    value = reduction_identity(reduction_type, dtype)
    return str(int(value)) if dtype == torch.bool else literal(value, dtype)


# ---------------------------------------------------------------------------------------------------------
# Index expressions
# ---------------------------------------------------------------------------------------------------------


def texpr(e):
    """A sympy index expression (non-negative integers) as Triton/Python source."""
    return format_index(e, '//')


def tparen(e):
    """texpr(e), parenthesized unless it is one symbol or number (an operand of // or %)."""
    return texpr(e) if e.is_Atom else f"({texpr(e)})"


def cdiv(numel, block):
    """Programs of `block` elements covering numel: an int, or an expression of size symbols."""
    if numel.is_Integer:
        return -(-int(numel) // block)
    return FloorDiv(numel + (block - 1), sympy.Integer(block))


def next_power_of_2(n):
    return 1 << max(0, int(n) - 1).bit_length()


# ---------------------------------------------------------------------------------------------------------
# Launch parameters
# ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Launch:
    """How to run one kernel: its pointer arguments (buffer names, in order), grid, block sizes, warps."""
    name: str
    args: tuple
    grid: int
    constexprs: dict
    num_warps: int
    num_stages: int = 1
    checks_indices: bool = False    # takes a status flag that the wrapper reads after the launch (an index
                                    # out of range, an integer division by 0: cpp.STATUS_ERRORS)
    kind: str = "pointwise"
    sizes: tuple = (1, 1, False)    # (outer elements, row length, rows strided along x): autotuning's input
    written: tuple = ()             # the args it stores to
    debug: bool = False             # compiled with Triton's debug option: its device_asserts are live
    size_args: tuple = ()           # size symbols it takes (int arguments after the pointers and status)


def pointwise_blocks(numel):
    """(XBLOCK, num_warps) of a flat pointwise kernel: 1024 elements per program (8 per thread at 4 warps,
    16-byte accesses for 16-bit data) unless the tensor is smaller."""
    xblock = min(1024, next_power_of_2(max(numel, 1)))
    return xblock, max(1, min(4, xblock // 256))


def reduction_blocks(xnumel, rnumel, persistent, transposed):
    """(XBLOCK, RBLOCK, num_warps) of a reduction kernel.

    persistent: RBLOCK covers the row; rows per program so a block holds ~4096 elements, fewer while that
    leaves under ~264 programs (two per H100/H200 SM). looped: one row per program, 2048-wide steps; when the
    rows are strided and the outer index is contiguous (`transposed`), 64 rows x 64 steps so loads
    coalesce along x."""
    rblock = next_power_of_2(max(rnumel, 1))
    if persistent:
        xblock = max(1, min(64 if transposed else 32, 4096 // rblock))
    elif transposed:
        xblock, rblock = 64, min(rblock, 64)
    else:
        xblock, rblock = 1, min(rblock, 2048)
    xblock = min(xblock, next_power_of_2(max(xnumel, 1)))
    while xblock > 1 and -(-xnumel // xblock) < 264 and not transposed:
        xblock //= 2
    warps = max(1, min(8, xblock * rblock // 256))
    return xblock, rblock, warps


# ---------------------------------------------------------------------------------------------------------
# The ops handler printing Triton
# ---------------------------------------------------------------------------------------------------------


class TritonOps:
    """Prints each op as `tmpN = ...` into the kernel's current block (with CSE), tracking which block
    dims (x, r) each value varies along, so loads and stores get masks and pointers of the right shape,
    and each value's dtype (TYPED_EXPRESSIONS)."""

    def __init__(self, kernel):
        self.k = kernel

    def load(self, name, index):
        k = self.k
        index = k.rewrite(index)
        cached = k.lookup_store(name, index)
        if cached is not None:
            return cached
        if name == k.epilogue_input:     # the template's product, as the rounded accumulator
            if index != k.epilogue_index:
                raise NotFusable(f"reads the product at {index}, not elementwise")
            return "acc_in"
        if name in k.kernel.local:
            raise AssertionError(f"{k.name}: local buffer {name} read outside where it is made")
        if name in k.registers:
            raise RegistersMissed(f"{k.name}: {name}, kept in registers, read at {index}, not where it is made")
        if name in k.written:
            k.needs_barrier = True        # written earlier in this kernel by another loop: make it visible
        k.use_arg(name)
        ptr, mask, dims = k.pointer(name, index, bounds=True)
        expr = f"tl.load({ptr}, {mask}, other=0)" if mask else f"tl.load({ptr})"
        dtype = k.buffers[name].dtype
        if dtype in (torch.bfloat16, torch.float16):
            expr += ".to(tl.float32)"
        return k.typed(k.cse(expr, dims), dtype)

    def store(self, name, index, value):
        self.k.store(name, self.k.rewrite(index), value)

    def constant(self, value, dtype):
        if isinstance(value, sympy.Expr) and not value.is_Number:      # a scalar computed from sizes
            return self.to_dtype(self.index_expr(value, torch.int64), dtype)
        return self.k.typed(self.k.constant(value, dtype), dtype)

    def index_expr(self, expr, dtype):
        k = self.k
        bounds = value_range(expr, k.ranges)
        expr = k.rewrite(expr)
        if not expr.free_symbols:
            return self.constant(int(expr), dtype)
        return k.typed(k.bounded(k.cse(f"({texpr(expr)}).to({COMPUTE_TYPES[dtype]})", k.expr_dims(expr)),
                                 bounds or value_range(expr, k.var_sizes)), dtype)

    def to_dtype(self, x, dtype):
        k = self.k
        if dtype == torch.bool:
            return k.typed(k.cse(f"({x} != 0)", k.dims_of(x)), dtype)
        if dtype in (torch.bfloat16, torch.float16):
            return k.typed(k.cse(f"{ROUND_16[dtype]}({x})", k.dims_of(x)), dtype)
        source = k.dtypes.get(x)
        if dtype == torch.uint8 and source is not None and source.is_floating_point:
            # through int64, as c10's conversion of a float to uint8 (a double 3e9 + 7 is 7, not 0)
            x = k.cse(f"{x}.to(tl.int64)", k.dims_of(x))
        bounds = k.bounds.get(x)
        fits = bounds is not None and dtype in INT_LIMITS and \
            INT_LIMITS[dtype][0] <= bounds[0] and bounds[1] <= INT_LIMITS[dtype][1]
        return k.typed(k.bounded(k.cse(f"{x}.to({COMPUTE_TYPES[dtype]})", k.dims_of(x)), bounds if fits else None),
                       dtype)

    def where(self, cond, a, b):
        k = self.k
        ranges = [k.bounds.get(a), k.bounds.get(b)]
        union = None if None in ranges else (min(r[0] for r in ranges), max(r[1] for r in ranges))
        return k.typed(k.bounded(k.cse(f"tl.where({cond}, {a}, {b})", k.dims_of(cond, a, b)), union),
                       self._dtype("where", a, b))

    def _dtype(self, name, *args):
        return op_dtype(name, [self.k.dtypes.get(a) for a in args])

    def _expression(self, name, *args):
        """The Triton text of ops.<name>(*args) and its dtype."""
        dtype = self._dtype(name, *args)
        operand = self.k.dtypes.get(args[0])
        return TYPED_EXPRESSIONS.get((name, operand), EXPRESSIONS[name]).format(*args), dtype

    def add(self, a, b):
        return self._interval("add", a, b, lambda x, y: (x[0] + y[0], x[1] + y[1]))

    def sub(self, a, b):
        return self._interval("sub", a, b, lambda x, y: (x[0] - y[1], x[1] - y[0]))

    def _interval(self, op, a, b, combine):
        """An integer add/sub, carrying the operands' known bounds (index math: a position plus an offset)."""
        ranges = [self.k.bounds.get(a), self.k.bounds.get(b)]
        bounds = None if None in ranges else combine(*ranges)
        expr, dtype = self._expression(op, a, b)
        # the result wraps past its own dtype's range (an int8 sum of 100 + 100), and index math past int32's
        low, high = INT_LIMITS.get(dtype, (-2 ** 31, 2 ** 31 - 1))
        if bounds is not None and not max(low, -2 ** 31) <= bounds[0] <= bounds[1] <= min(high, 2 ** 31 - 1):
            bounds = None
        return self.k.typed(self.k.bounded(self.k.cse(expr, self.k.dims_of(a, b)), bounds), dtype)

    def _division(self, name, a, b):
        expr, dtype = self._expression(name, a, b)
        self.k.check_divisor(b, dtype)
        return self.k.typed(self.k.cse(expr, self.k.dims_of(a, b)), dtype)

    floordiv = functools.partialmethod(_division, "floordiv")
    truncdiv = functools.partialmethod(_division, "truncdiv")
    remainder = functools.partialmethod(_division, "remainder")

    def masked(self, mask, body, other, dtype):
        """Every lane runs the body; its loads are masked by `mask` too, and the result is `other` off it.
        Values computed inside are scoped to it (masked-off lanes loaded zeros)."""
        k = self.k
        k.masks.append(mask)
        k.push_scope()
        try:
            result = body()
        finally:
            k.pop_scope()
            k.masks.pop()
        return k.typed(k.cse(f"tl.where({mask}, {result}, {k.constant(other, dtype)})", k.dims_of(mask, result)),
                       dtype)

    def indirect_indexing(self, value, size, check=True, wrap=True):
        return self.k.indirect(value, size, check, wrap)

    def rand(self, seed, offset):
        return self.k.typed(self.k.cse(f"gj_rand({seed}, {offset})", self.k.dims_of(seed, offset)), torch.float32)

    def __getattr__(self, name):
        if name not in EXPRESSIONS:
            raise AttributeError(f"no Triton for ops.{name}")

        def op(*args):
            expr, dtype = self._expression(name, *args)
            return self.k.typed(self.k.cse(expr, self.k.dims_of(*args)), dtype)
        return op


# ---------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------


class NotFusable(Exception):
    """A kernel that can't be a matmul template's epilogue (TritonKernel.epilogue)."""


class RegistersMissed(Exception):
    """A read of a buffer kept in registers found no value where it was made: print the kernel again,
    storing it."""


class TritonKernel:
    """Prints one scheduler.Kernel as a @triton.jit function and says how to launch it."""

    def __init__(self, kernel, buffers, name, check_indices, config=None, in_registers=True):
        self.kernel = kernel
        self.config = config                # {"XBLOCK", "RBLOCK", "num_warps"} overriding the heuristics (autotuning)
        self.buffers = buffers              # name -> Buffer
        self.name = name
        self.check_indices = check_indices
        self.lines = []
        self._cse = [{}]                    # scopes: expression -> variable
        self._stores = [{}]                 # scopes: (buffer, index) -> variable
        self._ids = itertools.count()
        self._indirect_ids = itertools.count()
        self.value_dims = {}                # variable -> frozenset of block dims ("x", "r") it varies along
        self.symbol_dims = {}               # loop/indirect variable name -> block dims
        self.ranges = {}
        self.var_sizes = {}                 # decoded loop variable -> its length (bounds of indices)
        self.bounds = {}                    # variable -> (lo, hi) of an integer value known to lie there
        self.dtypes = {}                    # variable -> its torch dtype (TYPED_EXPRESSIONS)
        self.subs = []
        self.masks = []                     # conditions of the ops.masked bodies being printed
        self.rank = 1
        self.xmask = self.rmask = None
        self.reads, self.written = [], set()    # buffer arguments it loads; buffers it stores
        self.needs_barrier = False
        self.uses_status = False
        self.uses_assert = False
        self.check_division = False         # integer divisors checked for 0 (check_divisor)
        self._group_scope_open = False
        self.epilogue_input = self.epilogue_index = None    # set by epilogue()
        self.in_registers = in_registers    # may keep scratch buffers in registers (_keep_in_registers)
        self.registers = set()              # the scratch buffers it keeps there: never stored nor allocated
        self.size_names = frozenset()       # the graph's size symbols (scalar arguments where used)

    # -- emission helpers --
    def emit(self, line):
        self.lines.append(line)

    def new_var(self, prefix="tmp"):
        return f"{prefix}{next(self._ids)}"

    def push_scope(self):
        self._cse.append({})
        self._stores.append({})

    def pop_scope(self):
        self._cse.pop()
        self._stores.pop()

    def cse(self, expr, dims, scope=-1):
        for cache in reversed(self._cse):
            if expr in cache:
                return cache[expr]
        name = self.new_var()
        self.emit(f"{name} = {expr}")
        self._cse[scope][expr] = name
        self.value_dims[name] = frozenset(dims)
        return name

    def constant(self, value, dtype):
        expr = f"tl.full({self.shape(())}, {literal(value, dtype)}, {COMPUTE_TYPES[dtype]})"
        if dtype.is_floating_point and value == 0 and math.copysign(1.0, value) < 0:
            # Triton makes any zero constant its type's null value: +0.0
            expr = f"(tl.full({self.shape(())}, 0.0, {COMPUTE_TYPES[dtype]}) * -1.0)"
        name = self.cse(expr, ())
        known = isinstance(value, int) and not isinstance(value, bool) and dtype in INT_LIMITS
        return self.bounded(name, (wrap_int(value, dtype),) * 2 if known else None)

    def bounded(self, name, bounds):
        """name, noting the integer bounds (lo, hi) its value is known to lie in (None: unknown)."""
        if bounds is not None:
            self.bounds[name] = bounds
        return name

    def typed(self, name, dtype):
        """name, noting its dtype (None: unknown)."""
        if dtype is not None:
            self.dtypes[name] = dtype
        return name

    def dims_of(self, *values):
        dims = set()
        for v in values:
            if isinstance(v, str):
                dims |= self.value_dims.get(v, frozenset())
            elif isinstance(v, sympy.Basic):
                dims |= self.expr_dims(v)
        return frozenset(dims)

    def expr_dims(self, expr):
        dims = set()
        for s in sympy.sympify(expr).free_symbols:
            if s.name not in self.size_names:       # size symbols are scalar arguments
                dims |= self.symbol_dims[s.name]
        return frozenset(dims)

    def shape(self, dims):
        if self.rank == 1:
            return "[XBLOCK]" if dims else "[1]"
        return f"[{'XBLOCK' if 'x' in dims else 1}, {'RBLOCK' if 'r' in dims else 1}]"

    def rewrite(self, index):
        index = simplify_with_ranges(index, self.ranges)
        for sub in self.subs:
            index = index.xreplace(sub)
        return sympy.expand(index)

    def use_arg(self, name):
        if name not in self.reads:
            self.reads.append(name)

    def mask_for(self, dims):
        """The masks (and their dims) a load/store varying along `dims` needs."""
        masks = []
        if "x" in dims and self.xmask:
            masks.append(self.xmask)
        if "r" in dims and self.rmask:
            masks.append(self.rmask)
        masks += self.masks
        return masks, self.dims_of(*self.masks)

    def pointer(self, name, index, extra_dims=frozenset(), bounds=False):
        """(pointer expression, mask or None, dims) for buffer[index]. The pointer is broadcast to every dim
        its mask or value varies along (tl.load/tl.store broadcast the mask to the pointer, not back).

        bounds: where the index can leave the buffer (lowerings of cat and pad compute every piece in every
        lane and select afterwards), the load is masked to the buffer, so no lane reads outside it."""
        dims = self.expr_dims(index) | extra_dims | self.dims_of(*self.masks)
        masks, _ = self.mask_for(dims)
        text = texpr(index)
        if bounds and not self._within(name, index):
            text = self.cse(text, self.expr_dims(index))
            masks.append(self.cse(f"({text} >= 0) & ({text} < {texpr(self.buffers[name].layout.storage_size())})",
                                  self.expr_dims(index)))
        if dims != self.expr_dims(index) or not dims:     # a constant index still loads a [1] block
            text = f"{text} + tl.full({self.shape(dims)}, 0, tl.int32)"
        return f"{name} + ({text})", " & ".join(masks) or None, dims

    def _within(self, name, index):
        """Whether index stays inside the buffer for every value of the loop variables (indirect indices
        are clamped where they are read, so they count as inside)."""
        index = sympy.sympify(index)
        if any(s.name.startswith("ind") for s in index.free_symbols):
            return True
        bounds = value_range(index, self.var_sizes)
        size = self.buffers[name].layout.storage_size()
        return bounds is not None and size.is_Integer and bounds[0] >= 0 and bounds[1] < int(size)

    def lookup_store(self, name, index):
        """The value stored at buffer[index] earlier in this kernel, as memory holds it (16-bit floats
        rounded), or None."""
        for scope in reversed(self._stores):
            if (name, index) in scope:
                value = scope[(name, index)]
                dtype = self.buffers[name].dtype
                if dtype in (torch.bfloat16, torch.float16):
                    value = self.typed(self.cse(f"{ROUND_16[dtype]}({value})", self.dims_of(value)), dtype)
                return value
        return None

    def store(self, name, index, value, scope=-1):
        dtype = self.buffers[name].dtype
        if name not in self.kernel.local and name not in self.registers:
            self.written.add(name)
            # the pointer spans the block even where the value is a constant or a row's result
            ptr, mask, _ = self.pointer(name, index, self.dims_of(value) | {"x"})
            stored = f"{value}.to({TL_TYPES[dtype]})"
            self.emit(f"tl.store({ptr}, {stored}, {mask})" if mask else f"tl.store({ptr}, {stored})")
        self._stores[scope][(name, index)] = value

    def indirect(self, value, size, check, wrap=True):
        """An index read from a tensor (embedding, gather): negative wraps where `wrap` (advanced indexing;
        embedding, gather and index_select raise for it); out of range reads element 0,
        and with index checks on sets the kernel's status flag (check_indices "status": the wrapper raises
        `check`'s error, cpp.index_status) or fails a device-side assert ("assert")."""
        name = f"ind{next(self._indirect_ids)}"
        dims = self.dims_of(value)
        self.symbol_dims[name] = dims
        self.emit(f"{name} = {value}.to(tl.int64)")
        known = self.bounds.get(value)
        if known is not None and sympy.sympify(size).is_Integer and 0 <= known[0] and known[1] < int(size):
            # computed from loop positions and constants (a mask's arange, a shifted position): in range
            return sympy.Symbol(name, integer=True)
        size = texpr(size)
        if wrap:
            self.emit(f"{name} = tl.where({name} < 0, {name} + {size}, {name})")
        bad = f"({name} < 0) | ({name} >= {size})"
        if check and self.check_indices:
            all_dims = dims | self.dims_of(*self.masks)
            masks, _ = self.mask_for(all_dims)
            if self.check_indices == "assert":
                self.uses_assert = True
                fine = " | ".join([f"~({bad})"] + [f"~({m})" for m in masks])
                self.emit(f"tl.device_assert({fine}, \"graphjit: index out of range in {self.name} (an "
                          f"embedding or gather index outside [0, {size}))\")")
            else:
                self.uses_status = True
                self.emit(f"tl.store(gj_status + tl.full({self.shape(all_dims)}, 0, tl.int32), "
                          f"{index_status(check)}, {' & '.join([f'({bad})'] + masks)})")
        self.emit(f"{name} = tl.where({bad}, 0, {name})")
        return sympy.Symbol(name, integer=True)

    def check_divisor(self, divisor, dtype):
        """An integer division by 0 raises in eager's CPU kernels: with check_division (CPU tensors, under
        Triton's interpreter) a divisor that may be 0 sets the kernel's status flag (the wrapper raises
        eager's error). Eager's CUDA kernels divide by 0 without a check."""
        known = self.bounds.get(divisor)
        if not self.check_division or dtype is None or dtype.is_floating_point or dtype == torch.bool or \
                known is not None and not known[0] <= 0 <= known[1]:
            return
        self.uses_status = True
        dims = self.dims_of(divisor) | self.dims_of(*self.masks)
        masks, _ = self.mask_for(dims)
        self.emit(f"tl.store(gj_status + tl.full({self.shape(dims)}, 0, tl.int32), {ZERO_DIVISION}, "
                  f"{' & '.join([f'({divisor} == 0)'] + masks)})")

    # -- index collection and loop merging (as codegen/cpp.py) --
    def _index_exprs(self, group, xs):
        return group_index_exprs(self.kernel, group, xs)

    def _decode(self, dims, flat, block_dim):
        """Emit loop variables of merged `dims` [(var, size)] from the flat index `flat`."""
        stride = sympy.Integer(1)
        lines = []
        for i, (var, size) in reversed(list(enumerate(dims))):
            expr = flat if stride == 1 else f"({flat} // {tparen(stride)})"
            if i > 0:
                expr = f"{expr} % {tparen(size)}"
            lines.append(f"{var.name} = {expr}")
            self.symbol_dims[var.name] = frozenset(block_dim)
            self.var_sizes[var] = size
            stride = stride * size
        for line in reversed(lines):
            self.emit(line)

    def _index_dtype_is_64(self):
        """Whether some index of this kernel can pass 2**31 - 1 (then index math runs in int64)."""
        limit = 2 ** 31 - 1
        touched = {node.name for node in self.kernel.nodes}
        touched |= {name for node in self.kernel.nodes for name, _ in node.accesses()[0]}
        sizes = [self.buffers[name].layout.storage_size() for name in touched]
        sizes += [product(self.kernel.outer) * product(g.inner) for g in self.kernel.groups]
        # with size symbols: as the example sizes say, guarded (int32 indices only while they fit)
        return any(guard_bool(sympy.Gt(s, limit)) for s in sizes)

    def _program_start(self, xblock_dims):
        offset = "tl.program_id(0).to(tl.int64)" if self._index_dtype_is_64() else "tl.program_id(0)"
        self.emit(f"xoffset = {offset} * XBLOCK")
        self.emit(f"xindex = xoffset + tl.arange(0, XBLOCK){xblock_dims}")

    # -- the kernel --
    def generate(self):
        kernel = self.kernel
        xs = outer_vars(len(kernel.outer))
        self.ranges = dict(zip(xs, kernel.outer))
        if all(not n.is_reduction for n in kernel.nodes) and len(kernel.groups) == 1:
            launch = self._pointwise(xs)
        else:
            launch = self._reduction(xs)
        return self._function(), launch

    def _pointwise(self, xs):
        """One flat index over every element: all loop dims (merged where contiguous) decode from xindex."""
        self.rank = 1
        group, rs, dims = self._flat_dims(xs)
        numel = product([s for _, s in dims])
        xblock, warps = pointwise_blocks(size_hint(numel))
        if self.config:
            xblock, warps = self.config["XBLOCK"], self.config["num_warps"]
        self._program_start("")
        if not numel.is_Integer or int(numel) % xblock:
            self.emit(f"xmask = xindex < {texpr(numel)}")
            self.xmask = "xmask"
        self._decode(dims, "xindex", "x")
        for node in group.nodes:
            node.buffer.store_body()(*node.body_args(xs, rs))
        return self._launch(cdiv(numel, xblock), {"XBLOCK": xblock}, warps, "pointwise",
                            (size_hint(numel), 1, False))

    def epilogue(self, product, rows, cols):
        """This pointwise kernel as the epilogue of a matmul template whose [rows, cols] row-major output
        `product` it reads elementwise: (body lines, pointer args, their parameter names, written args).
        The body runs on the template's tile: `xindex` (row * cols + col), `xmask`, and `acc_in` for the
        product. Raises NotFusable when the kernel is not such a loop."""
        kernel = self.kernel
        if any(n.is_reduction for n in kernel.nodes) or len(kernel.groups) != 1:
            raise NotFusable("not a pointwise kernel")
        xs = outer_vars(len(kernel.outer))
        self.ranges = dict(zip(xs, kernel.outer))
        group, rs, dims = self._flat_dims(xs)
        if len(dims) != 1 or not dims[0][1].is_Integer or int(dims[0][1]) != rows * cols or rows * cols >= 2 ** 31:
            raise NotFusable("its loops do not run once over the product's elements")
        self.rank = 2           # constants print as [1, 1]: they broadcast against the template's 2-d tile
        self.xmask = "xmask"
        self.value_dims["acc_in"] = frozenset("x")
        self.epilogue_input, self.epilogue_index = product, dims[0][0]
        self._decode(dims, "xindex", "x")
        for node in group.nodes:
            node.buffer.store_body()(*node.body_args(xs, rs))
        if self.uses_status or self.uses_assert or self.needs_barrier or product in self.written or any(
                word in line for line in self.lines for word in ("XBLOCK", "RBLOCK", "tl.arange", "gj_status")):
            raise NotFusable("its body needs its own block shape, index checks or a barrier")
        names, roles = self._parameters()
        names = [n for n in names if n != product]
        body = [self._renamed(line, names, roles) for line in self.lines]
        return body, tuple(names), tuple(roles[n] for n in names), tuple(n for n in names if n in self.written)

    def _flat_dims(self, xs):
        """(group, inner vars, loop dims merged where contiguous, in the first output's order) of a
        pointwise kernel; sets the index substitutions the merge needs."""
        (group,) = self.kernel.groups
        rs = inner_vars(len(group.inner))
        self.ranges.update(zip(rs, group.inner))
        exprs = self._index_exprs(group, xs)
        dims = list(zip(xs, self.kernel.outer)) + list(zip(rs, group.inner))
        dims, self.subs = merge_dims(by_output_strides(self.kernel, group, dims, xs, rs, self.ranges), exprs)
        return group, rs, dims

    def _reduction(self, xs):
        self.rank = 2
        kernel = self.kernel
        exprs = {i: self._index_exprs(g, xs) for i, g in enumerate(kernel.groups)}
        outer_dims, self.subs = merge_dims(list(zip(xs, kernel.outer)), [e for es in exprs.values() for e in es])
        xnumel = product(kernel.outer)
        group_dims, group_subs = [], []
        for i, group in enumerate(kernel.groups):
            rs = inner_vars(len(group.inner))
            ranges = {**self.ranges, **dict(zip(rs, group.inner))}
            saved, self.ranges = self.ranges, ranges
            dims, subs = merge_dims(list(zip(rs, group.inner)), [self.rewrite(e) for e in exprs[i]])
            self.ranges = saved
            group_dims.append(dims)
            group_subs.append(subs)
        rnumels = [product(g.inner) for g in kernel.groups]
        rnumel = max(size_hint(n) for n in rnumels)
        transposed = self._transposed(outer_dims, group_dims, exprs)
        # a persistent block covers the whole row: only for rows of a size known now
        persistent = all(n.is_Integer for n in rnumels) and rnumel <= config.triton_persistent_rnumel and \
            not (transposed and rnumel > 64)
        xblock, rblock, warps = reduction_blocks(size_hint(xnumel), rnumel, persistent, transposed)
        if self.config:
            xblock, rblock, warps = self.config["XBLOCK"], self.config["RBLOCK"], self.config["num_warps"]
        self.emit(f"# {'persistent' if persistent else 'looped'} reduction: outer [{xnumel}], rows of "
                  f"[{', '.join(str(n) for n in rnumels)}]" + (", x-contiguous" if transposed else ""))
        self._program_start("[:, None]")
        if not xnumel.is_Integer or int(xnumel) % xblock:
            self.emit(f"xmask = xindex < {texpr(xnumel)}")
            self.xmask = "xmask"
        self._decode(outer_dims, "xindex", "x")
        self.emit("rbase = tl.arange(0, RBLOCK)[None, :]")
        shares, previous = [], None
        for i in range(len(kernel.groups)):
            key = (tuple((v.name, s) for v, s in group_dims[i]), repr(group_subs[i]), rnumels[i])
            shares.append(persistent and key == previous and not is_one(rnumels[i]))
            previous = key
        if self.in_registers:
            self._keep_in_registers(shares)
        for i, group in enumerate(kernel.groups):
            self._group(group, xs, group_dims[i], group_subs[i], rnumels[i], rblock, persistent, shares[i])
        if self._group_scope_open:
            self.pop_scope()
            self._group_scope_open = False
        return self._launch(cdiv(xnumel, xblock), {"XBLOCK": xblock, "RBLOCK": rblock}, warps,
                            "persistent reduction" if persistent else "looped reduction",
                            (size_hint(xnumel), rnumel, transposed))

    def _keep_in_registers(self, shares):
        """Scratch buffers (pointwise values only this kernel reads, in later loops) whose readers all run in
        the scope of the loop that makes them (persistent loops over the same row, each sharing the one
        before): they are never stored, and the wrapper allocates no memory for them (a softmax's exp,
        read again by its division)."""
        kernel = self.kernel
        readers = collections.defaultdict(set)
        for i, group in enumerate(kernel.groups):
            for node in group.nodes:
                for name, _ in node.accesses()[0]:
                    readers[name].add(i)
        for name in kernel.scratch:
            home = kernel.group_of(name)
            users = readers.get(name, set())
            if home is not None and users and all(home <= i and all(shares[home + 1:i + 1]) for i in users):
                self.registers.add(name)

    def _transposed(self, outer_dims, group_dims, exprs):
        """Whether the kernel's loads are contiguous along x (its innermost outer dim) rather than r."""
        if not outer_dims:
            return False
        x_last = outer_dims[-1][0]
        votes = 0
        for i, dims in enumerate(group_dims):
            if not dims:
                continue
            r_last = dims[-1][0]
            for e in exprs[i]:
                e = self.rewrite(e)
                cx = sympy.expand(e).coeff(x_last)
                cr = sympy.expand(e).coeff(r_last)
                if cx == 1 and cr != 1 and cr != 0:
                    votes += 1
                elif cr == 1:
                    votes -= 1
        return votes > 0

    def _group(self, group, xs, dims, subs, rnumel, rblock, persistent, share):
        """One inner loop: its pointwise nodes store, its reductions accumulate then reduce.

        Looped, the group's body is a `for roffset` loop with its own scope. Persistent, the body is
        straight-line code; its scope stays open after it, so that the next group, if it decodes the same r
        variables (softmax's max, sum and output passes), reuses its loads and values instead of redoing them."""
        outer_subs, outer_ranges = self.subs, self.ranges
        rs = inner_vars(len(group.inner))
        self.subs = outer_subs + subs
        # rows of one element (a size the ShapeEnv knows is 1): r = 0. A row count that is not 1 takes the
        # masked loop, which also does nothing for rows of none (s // 2 - 1 for s = 3, where the count was
        # only guarded to be at most 1, and a store at r = 0 wrote into an empty buffer)
        has_inner = not is_one(rnumel)
        if rs and not has_inner:
            self.subs = self.subs + [{r: sympy.Integer(0) for r in rs}]
        self.ranges = {**outer_ranges, **dict(zip(rs, group.inner))}
        start = len(self.lines)
        self.needs_barrier = False
        looped = not persistent and has_inner
        if not share:
            if self._group_scope_open:
                self.pop_scope()
            self.push_scope()
            self._group_scope_open = True
        reductions = [n for n in group.nodes if n.is_reduction]
        accs = {}
        if looped:
            for node in reductions:
                data = node.buffer.data
                acc = self.new_var("acc")
                self.emit(f"{acc} = tl.full([XBLOCK, RBLOCK], {reduction_init(data.reduction_type, data.acc_dtype)}, "
                          f"{self._acc_type(data.acc_dtype)})")
                accs[node.name] = acc
            outer_lines, self.lines = self.lines, []
        self.rmask = "rmask" if has_inner and (not rnumel.is_Integer or int(rnumel) % rblock or not rnumel) \
            else None
        if has_inner and not share:
            self.emit("rindex = roffset + rbase" if looped else "rindex = rbase")
            if self.rmask:
                self.emit(f"rmask = rindex < {texpr(rnumel)}")
            self._decode(dims, "rindex", "r")
        for node in group.nodes:
            if node.is_reduction:
                accs[node.name] = self._accumulate(node, xs, rs, accs.get(node.name), has_inner)
            else:
                node.buffer.store_body()(*node.body_args(xs, rs))
        if looped:
            body, self.lines = self.lines, outer_lines
            self.emit(f"for roffset in range(0, {texpr(rnumel)}, RBLOCK):")
            self.lines += ["    " + line for line in body]
        if not persistent:
            self.pop_scope()
            self._group_scope_open = False
        if self.needs_barrier:
            self.lines.insert(start, "tl.debug_barrier()")
        self.subs, self.ranges = outer_subs, outer_ranges
        self.rmask = None
        for node in reductions:
            self._finish(node, xs, accs[node.name], has_inner)

    @staticmethod
    def _acc_type(acc_dtype):
        return "tl.int8" if acc_dtype == torch.bool else COMPUTE_TYPES[acc_dtype]

    def _accumulate(self, node, xs, rs, acc, has_inner):
        """Adds the node's value for this block of r to its accumulator (looped), or builds the block of all
        values (persistent). Lanes outside the row (rmask) hold the reduction's identity."""
        data = node.buffer.data
        value = data.inner_fn(*node.body_args(xs, rs))
        if not has_inner:
            return value
        if data.acc_dtype == torch.bool:
            value = self.cse(f"{value}.to(tl.int8)", self.dims_of(value))
        init = reduction_init(data.reduction_type, data.acc_dtype)
        if self.rmask:
            value = self.cse(f"tl.where(rmask, {value}, {init})", self.dims_of(value) | {"r"})
        if acc is None:     # persistent: the whole row is this block
            return self.cse(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])", {"x", "r"})
        update = {"sum": f"{acc} + {value}", "max": f"gj_maximum({acc}, {value})",
                  "min": f"gj_minimum({acc}, {value})"}[data.reduction_type]
        self.emit(f"{acc} = {update}")
        return acc

    def _finish(self, node, xs, acc, has_inner):
        data = node.buffer.data
        if has_inner:
            reduce = {"sum": "tl.reduce({0}, 1, gj_add, keep_dims=True)",
                      "max": "tl.reduce({0}, 1, gj_maximum, keep_dims=True)",
                      "min": "tl.reduce({0}, 1, gj_minimum, keep_dims=True)"}[data.reduction_type]
            acc = self.cse(reduce.format(acc), {"x"}, scope=0)
        if data.reduction_type == "sum" and data.acc_dtype.is_floating_point:
            # eager's sum starts from +0.0: a row of one element or of -0.0s only sums to +0.0, where a tree
            # of their own (or the element itself) keeps -0.0
            acc = self.cse(f"({acc} + 0.0)", self.dims_of(acc), scope=0)
        if data.dtype == torch.bool:
            result = self.cse(f"({acc} != 0)", self.dims_of(acc), scope=0)
        else:
            result = self.cse(f"{acc}.to({COMPUTE_TYPES[data.dtype]})", self.dims_of(acc), scope=0)
        result = self.typed(result, data.dtype)     # an op on it may take its dtype's form (TYPED_EXPRESSIONS)
        self.store(node.name, self.rewrite(node.write_index(xs, [])), result, scope=0)

    def _launch(self, grid, constexprs, warps, kind, sizes):
        self.launch = Launch(self.name, (), grid, constexprs, warps, 1, self.uses_status, kind, sizes)
        return self.launch

    def _parameters(self):
        """(buffer names of the pointer parameters in order, name -> parameter name). Parameters are named
        by role, not by buffer: the same fused loop over the same shapes (each layer of a transformer)
        prints the same text, and generate() compiles it once."""
        names = [n for n in self.reads]
        names += sorted((n for n in self.written if n not in names),
                        key=lambda n: [node.name for node in self.kernel.nodes].index(n))
        roles = {}
        for n in names:
            kind = "inout" if n in self.written and n in self.reads else "out" if n in self.written else "in"
            roles[n] = f"{kind}_ptr{sum(r.startswith(kind + '_') for r in roles.values())}"
        return names, roles

    @staticmethod
    def _renamed(line, names, roles):
        if not names:
            return line
        return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: roles[m.group(1)], line)

    def _function(self):
        names, roles = self._parameters()
        sizes = used_size_symbols("\n".join(self.lines), self.size_names)
        params = [roles[n] for n in names] + (["gj_status"] if self.uses_status else []) + list(sizes)
        params += [f"{c}: tl.constexpr" for c in self.launch.constexprs]
        self.launch.size_args = sizes
        self.launch.args = tuple(names)
        self.launch.written = tuple(n for n in names if n in self.written)
        self.launch.checks_indices = self.uses_status
        self.launch.debug = self.uses_assert
        body = ["    " + self._renamed(line, names, roles) for line in self.lines]
        # sizes as plain ints: never specialized on their value (1, multiples of 16), so one compiled
        # kernel runs for every size
        jit = f"@triton.jit(do_not_specialize={list(sizes)!r})" if sizes else "@triton.jit"
        return "\n".join([jit, f"def {self.name}({', '.join(params)}):"] + body)


def kernel_name(kernel, index):
    """triton_fused_<the first few ops it computes>_<index>: readable in profiles and logs."""
    skip = {"load", "constant", "to_dtype", "index_expr", "masked"}
    names = []
    xs = outer_vars(len(kernel.outer))
    for group in kernel.groups:
        for node in group.nodes:
            rec = record(node.buffer.data.inner_fn, *node.body_args(xs, inner_vars(len(group.inner))))
            found = [op for op in rec.op_counts if op not in skip]
            if node.is_reduction:
                found.append({"sum": "sum", "max": "amax", "min": "amin"}[node.buffer.data.reduction_type])
            names += [op for op in found if op not in names]
    return "_".join(["triton_fused"] + (names[:5] or ["copy"]) + [str(index)])


@dataclasses.dataclass
class KernelLaunches:
    """The Triton launches of one scheduler kernel (several where it was split); args: every buffer they
    touch (the wrapper frees buffers after their last use)."""
    launches: list
    args: tuple


def split(kernel):
    """The kernel as independent pieces (scheduler Kernels over runs of its groups) when its outer loop is
    shorter than config.triton_split_rows; a piece boundary never separates a local buffer from its readers."""
    if len(kernel.groups) < 2 or size_hint(product(kernel.outer)) >= config.triton_split_rows:
        return [kernel]
    xs = outer_vars(len(kernel.outer))
    reads, made_local = [], []
    for group in kernel.groups:
        names = set()
        for node in group.nodes:
            rec = record(node.buffer.data.inner_fn, *node.body_args(xs, inner_vars(len(group.inner))))
            names |= {n for n, _ in rec.reads}
        reads.append(names)
        made_local.append({n.name for n in group.nodes if n.name in kernel.local})
    pieces = [[kernel.groups[0]]]
    for i in range(1, len(kernel.groups)):
        crossing = set().union(*made_local[:i]) & set().union(*reads[i:])
        if crossing:
            pieces[-1].append(kernel.groups[i])
        else:
            pieces.append([kernel.groups[i]])
    if len(pieces) == 1:
        return [kernel]
    out = []
    for k, groups in enumerate(pieces):
        nodes = [n for g in groups for n in g.nodes]
        names = {n.name for n in nodes}
        out.append(Kernel(f"{kernel.name}_{k}", kernel.outer, nodes, list(groups), kernel.local & names))
    return out


def generate(graph, items, check=False, tuning=None, device=None, candidates=True, followers=None,
             example_inputs=None):
    """The Triton module source of a scheduled graph, and each scheduler kernel's KernelLaunches.

    tuning (a list, mode max-autotune): each kernel uses its cached autotuning choice if there is one;
    otherwise (if `candidates`: there is a GPU to time them on) the module also gets the candidate
    configurations of autotune.candidates, and the list gets (cache key, [heuristic Launch, candidate
    Launches ...], scheduler kernel name, piece index) to time.

    A kernel whose text (name aside) was printed already, another layer's copy of the same fused loop, is
    not printed again: its Launch names the first one's function, so Triton compiles it once. `followers`
    (a list) gets a Follower for each copy of a kernel being tuned; resolve_followers() gives it the
    winner's configuration where that configuration's text is the same for the copy's sizes. Kernels
    reading a graph input whose example was not 16-byte aligned (`example_inputs`) are never shared
    (Triton specializes on alignment)."""
    from .. import autotune
    buffers = {b.name: b for b in graph.buffers()}
    parts, launches = [PRELUDE_GPU if device is not None and device.type == "cuda" else PRELUDE], {}
    index = itertools.count()
    seen = {}      # (kernel text, name replaced; constexprs; warps; stages) -> (first Launch, contest key or None)

    def shareable(launch):
        return example_inputs is None or all(_starts_aligned(buffers[name], example_inputs) for name in launch.args)

    size_names = frozenset(s.name for s in graph.size_symbols())

    def emit(piece, name, cfg=None):
        for in_registers in (True, False):
            tk = TritonKernel(piece, buffers, name, check, cfg, in_registers)
            tk.size_names = size_names
            tk.check_division = check == "status" and (device is None or device.type == "cpu")
            try:
                with use_ops(TritonOps(tk)):
                    generated = tk.generate()
            except RegistersMissed as e:      # printed again, storing every scratch buffer
                logs.log("fusion", f"{name}: {e}")
                continue
            piece.local |= tk.registers       # never stored: the wrapper allocates nothing for them
            return generated
        raise AssertionError("unreachable: a kernel storing every scratch buffer misses no register")

    def emitter(piece, name):
        return lambda cfg: emit(piece, name, cfg)
    for item in items:
        if not isinstance(item, Kernel):
            continue
        if is_empty_kernel(item):       # buffers without elements: allocated, nothing to launch
            stored = [n.name for n in item.nodes if n.name not in item.local and n.name not in item.scratch]
            launches[item.name] = KernelLaunches([], tuple(stored))
            continue
        found, args = [], []
        for piece in split(item):
            name = kernel_name(piece, next(index))
            source, launch = emit(piece, name)
            if not launch.args:     # reads and stores no buffer (its only result kept in registers feeds an
                continue            # output without elements): nothing to compile or launch
            contest = None
            if tuning is not None and not launch.checks_indices:
                key = autotune.cache_key(source, name, device)
                cfg = autotune.load_choice(key)
                if cfg is not None and autotune.valid(cfg, launch):
                    if cfg != {**launch.constexprs, "num_warps": launch.num_warps}:
                        source, launch = emit(piece, name, cfg)
                elif candidates:
                    contest = key
            # same text and same compile-time parameters: one compiled kernel serves both launches
            text = (source.replace(launch.name, "KERNEL"), tuple(launch.constexprs.items()), launch.num_warps,
                    launch.num_stages)
            shared = shareable(launch)
            if text in seen and shared:
                first, first_contest, first_emit = seen[text]
                launch.name = first.name
                if first_contest is not None and followers is not None:
                    followers.append(Follower(first_contest, item.name, len(found), launch, first_emit,
                                              emitter(piece, name)))
            else:
                if shared:
                    seen[text] = (launch, contest, emitter(piece, name))
                parts.append(source)
                if contest is not None:
                    variants = [emit(piece, f"{name}_c{k}", c) for k, c in enumerate(autotune.candidates(launch))]
                    parts += [v[0] for v in variants]
                    tuning.append((contest, [launch] + [v[1] for v in variants], item.name, len(found)))
            found.append(launch)
            args += [a for a in launch.args if a not in args]
        launches[item.name] = KernelLaunches(found, tuple(args))
    return "\n\n\n".join(parts) + "\n", launches


@dataclasses.dataclass
class Follower:
    """A kernel printed with the same text as one being autotuned (another layer's copy), possibly over
    other sizes: the text of an unmasked loop doesn't name them. leader_emit / emit(cfg) -> (source,
    Launch) print the leader's and this copy's kernel in configuration cfg."""
    key: str
    item: str
    position: int
    own: Launch
    leader_emit: object
    emit: object


def resolve_followers(launches, followers, winners):
    """After autotuning: each copy of a tuned kernel launches the winner's compiled kernel, with its own
    grid and arguments, where the winner's configuration prints the same text for the copy's sizes (a
    block size that divides the leader's length but not the copy's needs masks the winner lacks); else
    the copy keeps its own launch of the heuristic kernel, already compiled."""
    leaders = {}                                      # contest key -> the leader's text in the winner's cfg
    for f in followers:
        winner = winners[f.key]
        cfg = {**winner.constexprs, "num_warps": winner.num_warps}
        if cfg == {**f.own.constexprs, "num_warps": f.own.num_warps}:
            continue                                  # the heuristic won: the copy's launch is right as is
        source, mine = f.emit(cfg)
        if f.key not in leaders:
            leader_source, leader = f.leader_emit(cfg)
            leaders[f.key] = leader_source.replace(leader.name, "KERNEL")
        if source.replace(mine.name, "KERNEL") == leaders[f.key]:
            mine.name = winner.name
            launches[f.item].launches[f.position] = mine


# ---------------------------------------------------------------------------------------------------------
# The wrapper: allocate, launch, call extern ops
# ---------------------------------------------------------------------------------------------------------


class TritonWrapperCode(WrapperCode):
    """The generated Python `call` of codegen/wrapper.py, launching Triton kernels.

        def call(arg0, arg1):
            stream = get_stream(0)
            buf0 = empty_strided((256, 1024), (1024, 1), dtype=_dtype0, device=_device0)
            triton_fused_sin_add_0_run(256, 1, 1, stream, ..., arg0, buf0, 1024)   # launcher of the cubin
    """

    def __init__(self, graph, items, launches, launchers, interpret, device, aligned_inputs, templates=None,
                 facts=None):
        super().__init__(graph, items, launches, facts or GraphFacts())
        self.templates = templates or {}    # extern item name -> matmul.TemplateLaunch run instead
        self.launches = launches
        self.launchers = launchers          # kernel name -> (run, function, packed metadata), fast launch
        self.interpret = interpret
        self.device = device
        self.aligned_inputs = aligned_inputs
        self.fast_cuda_empty = device.type == "cuda" and not interpret
        for launch in self.templates.values():      # kernels run as a template's epilogue
            epilogue = launch.plan.epilogue
            if epilogue is not None:
                self.fused_away.add(epilogue.item)
                self.fresh.update(n.name for n in epilogue.allocated)   # allocated before the template runs
                self.unbound.add(launch.plan.out.name)   # the product itself is never stored

    def generate(self, check_inputs, eager_if_grad):
        source = super().generate(check_inputs, eager_if_grad)
        head, _, rest = source.partition("\n")
        params = self.params
        if self.facts.boxed:        # the prologue goes after the arguments are unpacked from their list
            for _ in range(2 if params else 1):
                line, _, rest = rest.partition("\n")
                head += "\n" + line
        prologue = []
        if self.fast_cuda_empty:
            # allocations and launches go to the current device: make it the graph's
            index = self.device.index or 0
            self.globals["get_device"], self.globals["device_guard"] = torch._C._cuda_getDevice, torch.cuda.device
            again = f"[{params}]" if self.facts.boxed else params
            prologue += [f"if get_device() != {index}:",
                         f"    with device_guard({index}): return call({again})"]
        if self.aligned_inputs:
            # kernels were compiled assuming these inputs start 16-byte aligned (as their examples did)
            prologue += self._alignment_checks(params)
        if self.launchers:
            self.globals["get_stream"] = torch._C._cuda_getCurrentRawStream
            prologue.append(f"stream = get_stream({self.device.index or 0})")
        lines = [head] + ["    " + line for line in prologue] + ([rest] if rest else [])
        return "\n".join(lines)

    def _alignment_checks(self, params):
        """Lines returning eager's result when an input the kernels assume 16-byte aligned is not. Inputs
        come in two kinds: activations, whose addresses change every call (one data_ptr() each), and
        parameters and buffers (GraphFacts.static_inputs), which stay put: one C++ comparison of all their
        addresses against the last ones seen aligned, and the slow check only when one has moved."""
        position = {buf.name: buf.position for buf in self.graph.inputs if buf.position is not None}
        fixed = [n for n in self.aligned_inputs if self.facts.is_static(position[n])]
        moving = [n for n in self.aligned_inputs if n not in fixed]
        same = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
        if same is None or len(fixed) < 8:      # a handful of data_ptr() calls cost less than the list
            fixed, moving = [], list(self.aligned_inputs)
        lines = []
        if moving:
            lines.append(f"if ({' | '.join(f'{n}.data_ptr()' for n in moving)}) & 15: return eager({params})")
        if fixed:
            self.globals["static_aligned"] = StaticAlignment(len(fixed), same)
            lines.append(f"if not static_aligned([{', '.join(fixed)}]): return eager({params})")
        return lines

    def _extern_call(self, kernel):
        if kernel.name in self.templates:
            return self._template_call(self.templates[kernel.name])
        padded = self._padded_mm(kernel)
        return padded if padded is not None else super()._extern_call(kernel)

    def _template_call(self, launch):
        """A matmul template in place of the ATen op: allocate the output (or, with an epilogue, the
        epilogue kernel's outputs), launch."""
        from . import matmul
        plan, name = launch.plan, launch.name
        layout = plan.out.layout
        epilogue = plan.epilogue
        if epilogue is None:
            lines = [self.empty(plan.out.name, layout) + f"   # {plan.kind} as a Triton template"]
            outputs = [plan.out.name]
        else:
            lines = [f"# {plan.kind} as a Triton template, {epilogue.item} as its epilogue"]
            lines += [self.empty(node.name, node.buffer.layout) for node in epilogue.allocated]
            outputs = list(epilogue.args)
        args = [self.view(v) for v in matmul.views(plan)] + outputs + [str(s) for s in plan.strides()]
        lines.append(self._launch_line(launch, args))
        return lines

    def _padded_mm(self, kernel):
        """mm/addmm whose output the lowering laid out with padded rows (lowering.row_padded_layout): the
        right factor (and addmm's bias) padded with zero columns, the product's first N columns viewed.
        None for any other extern call."""
        aten = torch.ops.aten
        if kernel.op not in (aten.mm.default, aten.addmm.default) or len(kernel.outputs) != 1:
            return None
        (out,) = kernel.outputs
        if not all(s.is_Integer for s in (*out.layout.sizes, *out.layout.strides)):
            return None
        rows, cols = (int(s) for s in out.layout.sizes)
        if int(out.layout.strides[0]) == cols or rows == 0:
            return None
        extra = int(out.layout.strides[0]) - cols
        self.globals["_pad"] = torch.constant_pad_nd
        args = [self.arg(a) for a in kernel.args]
        right = kernel.args[-1]
        if isinstance(right, StorageView) and int(right.strides[0]) == 1:
            # a transposed weight (x @ w.t()): pad w's rows, so the factor stays transposed (cuBLAS's fast
            # TN kernel; padding the transposed view's columns makes an NN copy, 5% slower)
            args[-1] = f"_pad({args[-1]}.t(), (0, 0, 0, {extra})).t()"
        else:
            args[-1] = f"_pad({args[-1]}, (0, {extra}))"
        if kernel.op == aten.addmm.default:
            args[0] = f"_pad({args[0]}, (0, {extra}))" if int(kernel.args[0].sizes[-1]) == cols else args[0]
        args += [f"{k}={self.arg(v)}" for k, v in kernel.kwargs.items()]
        op = self.bind(getattr(kernel.op, "_op", kernel.op), "_op")
        self.op_names[op] = kernel.op
        return [f"{out.name} = {op}({', '.join(args)})[:, :{cols}]   # rows padded {cols} -> {cols + extra} "
                f"for cuBLAS"]

    @staticmethod
    def _allocated(kernel):
        """The nodes of a kernel the wrapper allocates: all but those kept in registers (no scratch here)."""
        return [n for n in kernel.nodes if n.name not in kernel.local]

    def _kernel_call(self, kernel):
        if kernel.name in self.fused_away:
            return []
        lines = [self.alloc(node) for node in self._allocated(kernel)]
        for launch in self.launches[kernel.name].launches:
            lines += self._launch(launch)
        return lines

    def _launch_line(self, launch, args):
        """One launch of a compiled kernel (a Launch or a TemplateLaunch) on argument expressions: through
        its launcher when there is one (the constexpr values trail the arguments), else the JIT call."""
        name = launch.name
        if name in self.launchers:
            run, function, metadata = self.launchers[name]
            self.globals[f"{name}_fn"], self.globals[f"{name}_meta"] = function, metadata
            constexprs = ", ".join(str(v) for v in launch.constexprs.values())
            direct = _direct_launch(run)
            if direct is not None:      # the C launch function itself, without the launcher's Python
                launch_fn, cooperative, pdl = direct
                self.globals[f"{name}_launch"] = launch_fn
                return (f"{name}_launch({pyexpr(launch.grid)}, 1, 1, stream, {name}_fn, {cooperative}, {pdl}, None, None, "
                        f"{name}_meta, None, None, None, {', '.join(args)}, {constexprs})")
            self.globals[f"{name}_run"] = run
            return (f"{name}_run({pyexpr(launch.grid)}, 1, 1, stream, {name}_fn, {name}_meta, None, None, None, "
                    f"{', '.join(args)}, {constexprs})")
        kwargs = ", ".join(f"{k}={v}" for k, v in launch.constexprs.items())
        debug = ", debug=True, sanitize_overflow=False" if getattr(launch, "debug", False) else ""
        if self.interpret:
            call = f"{name}[({pyexpr(launch.grid)},)]({', '.join(args)}, {kwargs}, num_warps={launch.num_warps}, " \
                   f"num_stages={launch.num_stages}{debug})"
            self.globals["interpreting"] = _interpreting
            return f"with interpreting(): {call}"
        return f"{name}[({pyexpr(launch.grid)},)]({', '.join(args)}, {kwargs}, num_warps={launch.num_warps}, " \
               f"num_stages={launch.num_stages}, enable_fp_fusion={bool(config.triton_fp_fusion)}{debug})"

    def _launch(self, launch):
        if launch.grid == 0:
            return []
        lines = []
        args = list(launch.args)
        if launch.checks_indices:
            self.globals["zeros"], self.globals["_int32"] = torch.zeros, torch.int32
            lines.append(f"gj_status = zeros((1,), dtype=_int32, device={self.bind(self.device, '_device')})")
            args.append("gj_status")
        args += list(launch.size_args)
        name = launch.name
        line = self._launch_line(launch, args)
        if isinstance(launch.grid, sympy.Expr) and not launch.grid.is_Integer:
            lines += [f"if {pyexpr(launch.grid)} > 0:", f"    {line}"]   # no programs for these sizes: no launch
        else:
            lines.append(line)
        if launch.checks_indices:
            self.globals["kernel_error"] = kernel_error
            lines.append(f"if status := gj_status.item(): kernel_error(status, {name!r})")
        return lines


class StaticAlignment:
    """Whether a graph's parameters and buffers all start 16-byte aligned: one C++ comparison of their
    addresses with the last ones found aligned (`same`: torch's _tensors_data_ptrs_at_indices_equal), and
    only when one has moved, a data_ptr() each (then remembered if aligned)."""

    def __init__(self, count, same):
        self.same = same
        self.seen = [-1] * count        # no address yet (-1 is none): the first call checks each
        self.indices = list(range(count))

    def __call__(self, tensors):
        if self.same(tensors, self.seen, self.indices):
            return True
        ptrs = [t.data_ptr() for t in tensors]
        if any(p & 15 for p in ptrs):
            return False
        self.seen = ptrs
        return True


def _direct_launch(run):
    """(launch function, cooperative, pdl) of a Triton CUDA launcher whose Python __call__ only allocates
    scratch memory (Triton 3.6's CudaLauncher) when the kernel needs none; else None (call the launcher)."""
    call = getattr(type(run), "__call__", None)
    code = getattr(call, "__code__", None)
    if type(run).__name__ != "CudaLauncher" or code is None or code.co_argcount != 6 or \
            not all(hasattr(run, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl")) or \
            getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1) or \
            code.co_varnames[:6] != ("self", "gridX", "gridY", "gridZ", "stream", "function"):
        return None
    return run.launch, bool(run.launch_cooperative_grid), bool(run.launch_pdl)


def _interpreting():
    from ..runtime.triton_build import interpreting
    return interpreting()


# ---------------------------------------------------------------------------------------------------------
# The pipeline for Triton: decompose -> lower -> schedule -> Triton module -> wrapper
# ---------------------------------------------------------------------------------------------------------


@functools.cache
def triton_available():
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        return False
    return True


class TritonDevice:
    """The Triton device of pipeline.py: kernels as Triton source (one module per graph), compiled for the
    graph's CUDA device (runtime/triton_build.py) or run in Triton's interpreter on CPU tensors
    (GRAPHJIT_TRITON_CPU=1); in the max-autotune modes, block sizes and matmul templates raced on the GPU
    (compiler/autotune.py). Its wrapper is TritonWrapperCode."""
    name = "Triton"

    @staticmethod
    def wants(example_inputs):
        """Whether graphjit's compiler should generate Triton (not C++) for a graph with these inputs:
        tensors on a CUDA device (Triton installed), or on the CPU under GRAPHJIT_TRITON_CPU=1."""
        devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
        if "cuda" in devices:
            return True
        return bool(config.triton_cpu) and devices <= {"cpu"} and triton_available()

    @staticmethod
    def unsupported_reason(gm, example_inputs):
        """Why this graph should run eagerly instead of as Triton kernels, or None."""
        from .. import graph_checks
        devices = set()
        for value in example_inputs:
            if isinstance(value, (torch.SymInt, torch.SymFloat)):   # a size symbol, a float that changes
                continue
            if not isinstance(value, torch.Tensor):
                return f"a graph input is a {type(value).__name__}, not a tensor (only tensor inputs for now)"
            devices.add(value.device)
        if len(devices) > 1:
            return f"inputs on several devices ({', '.join(sorted(map(str, devices)))})"
        if not triton_available():
            return "Triton is not installed (pip install triton)"
        if devices and next(iter(devices)).type not in ("cuda", "cpu"):
            return f"inputs on {next(iter(devices))}: Triton kernels run on CUDA devices"
        return graph_checks.graph_reason(gm, example_inputs)

    def __init__(self, job):
        self.job = job
        self.device = next((t.device for t in job.example_inputs if isinstance(t, torch.Tensor)),
                           torch.device("cpu"))
        self.symbolic = bool(job.concrete_inputs is not job.example_inputs and
                             any(isinstance(t, torch.SymInt) or isinstance(t, torch.Tensor) and
                                 not all(isinstance(s, int) for s in (*t.shape, *t.stride()))
                                 for t in job.example_inputs))
        self.interpret = self.device.type == "cpu"
        if not self.interpret:
            from ..runtime import triton_build
            triton_build.prewarm()      # Triton's one-time start-up, in a thread, while decompose runs

    def plan(self):
        """How kernels check indices, and in max-autotune the list that codegen fills with each kernel's
        candidate configurations."""
        checking = config.triton_check_indices
        self.check = "status" if checking == 1 or (checking == -1 and self.interpret) else \
            "assert" if checking in (-1, 2) else None
        # with size symbols: the heuristic blocks for the example sizes, no races (they would tune for
        # one size) and no matmul templates (they are planned for concrete shapes)
        self.tuning = [] if self.job.facts.autotune and not self.symbolic else None
        self.followers = []             # copies of a tuned kernel in other layers: (leader, follower)

    def codegen(self):
        """The kernels' source; then the matmul templates: in max-autotune, candidates to race against
        cuBLAS (or their cached choices); otherwise the one-row (GEMV) template where it applies."""
        job = self.job
        source, self.launches = generate(job.graph, job.items, self.check, self.tuning, self.device,
                                         candidates=not self.interpret, followers=self.followers,
                                         example_inputs=job.concrete_inputs)
        self.templates, self.mm_contests, self.mm_followers, extra = {}, [], [], []
        if self.symbolic:
            pass
        elif self.tuning is not None and config.triton_mm_templates:
            extra = _plan_matmul_templates(job.items, self.device, self.interpret, self.templates,
                                           self.mm_contests, self.mm_followers, job.example_inputs, job.graph,
                                           self.launches, self.check)
        elif config.triton_gemv and self.tuning is None:  # (max-autotune with its templates off: cuBLAS always)
            extra = _plan_gemv_templates(job.items, self.templates, job.example_inputs, job.graph, self.launches,
                                         self.check, self.interpret)
        if extra:
            source = "\n\n\n".join([source.rstrip("\n")] + extra) + "\n"
        return source

    def build(self):
        """The module loaded; on a GPU every kernel compiled (CompileError if Triton fails), then, in
        max-autotune, the candidates timed and the winners put in place."""
        from ..runtime import triton_build
        job = self.job
        self.module = triton_build.load(job.source, interpret=self.interpret)
        self.by_name = {launch.name: launch for kl in self.launches.values() for launch in kl.launches}
        self.by_name.update({launch.name: launch for _, variants, _, _ in self.tuning or () for launch in variants})
        self.launchers, self.aligned, self.examples, self.kernels = {}, [], {}, {}
        if self.interpret:
            return
        template_launches = {t.name: t for t in self.templates.values()}
        template_launches.update({t.name: t for _, _, candidates in self.mm_contests for t in candidates})
        self.aligned = _aligned_inputs(job.graph, self.launches, job.concrete_inputs, list(self.templates.values()) + [
            t for _, _, candidates in self.mm_contests for t in candidates] + [f for _, f in self.mm_followers])
        examples = _warmup_args(job.graph, self.by_name.values(), job.concrete_inputs)
        # one set of buffers to time candidates on (zero-filled, allocated when first asked for)
        tuning_args = _tuning_arguments(job.graph, job.concrete_inputs, self.device)
        template_args = _template_arguments(tuning_args.tensor, self.device)
        examples.update({name: template_args(t) for name, t in template_launches.items()})
        self.examples = examples        # what each kernel was compiled for (runtime/graph_cache.py keeps it)
        heuristic = {launch.name for kl in self.launches.values() for launch in kl.launches} | \
            {t.name for t in self.templates.values()}
        steps = {}
        try:
            compiled = triton_build.compile_all(self.module, list(self.by_name.values()) +
                                                list(template_launches.values()), self.device, examples,
                                                config.triton_compile_threads,
                                                optional=(set(self.by_name) | set(template_launches)) - heuristic,
                                                phases=steps)
        except Exception as e:     # a Triton compile error is a graphjit bug: the driver's caller says so
            from ..runtime import CompileError
            raise CompileError(f"Triton failed to compile a kernel of this graph: {e}\n"
                               f"The kernels are in {triton_build.module_path(job.source)}") from e
        job.timings.update({f"triton {step}": seconds for step, seconds in steps.items()})
        job.lap("triton compile")
        if self.tuning:
            self._autotune(compiled, tuning_args, template_args)
            job.lap("autotune")
        if config.triton_fast_launch:
            with torch.cuda.device(self.device):
                self.launchers = {name: (compiled[name].run, compiled[name].function, compiled[name].packed_metadata)
                                  for name in list(self.by_name) + [t.name for t in self.templates.values()]}
            self.kernels = {name: compiled[name] for name in self.launchers}   # their binaries: graph_cache.store

    def _autotune(self, compiled, tuning_args, template_args):
        from .. import autotune
        device, launches = self.device, self.launches
        with torch.cuda.device(device):
            winners = autotune.tune([(key, variants) for key, variants, _, _ in self.tuning], compiled,
                                    tuning_args, device)
        for key, _, item_name, position in self.tuning:
            launches[item_name].launches[position] = winners[key]
        resolve_followers(launches, self.followers, winners)    # copies of a tuned kernel: its winner
        self.by_name = {launch.name: launch for kl in launches.values() for launch in kl.launches}
        if not self.mm_contests:
            return

        def epilogue_ms(plan):      # the kernel a fused template saves, as it runs unfused
            if plan.epilogue is None:
                return 0.0
            launch = launches[plan.epilogue.item].launches[0]
            return autotune.time_launch(compiled[launch.name], launch, tuning_args(launch), device)
        with torch.cuda.device(device):
            chosen = autotune.tune_matmuls(self.mm_contests, compiled, template_args, device, epilogue_ms)
        self.templates.update({item_name: t for item_name, t in chosen.items() if t is not None})
        for leader, follower in self.mm_followers:      # the same product in another layer
            if chosen.get(leader) is not None:
                self.templates[follower.plan.item.name] = dataclasses.replace(chosen[leader], plan=follower.plan)

    def wrapper(self):
        from ..runtime import triton_build
        job = self.job
        eager_if_grad = any(getattr(t, "requires_grad", False) for t in job.example_inputs)
        code = TritonWrapperCode(job.graph, job.items, self.launches, self.launchers, self.interpret, self.device,
                                 self.aligned, self.templates, job.facts)
        for name in list(self.by_name) + [t.name for t in self.templates.values()]:
            code.globals[name] = getattr(self.module, name)
        wrapper_source = code.generate(job.facts.check_inputs(), eager_if_grad)
        code.globals["eager"] = job.gm.forward
        namespace = dict(code.globals)
        run_source(wrapper_source, "graphjit triton wrapper", namespace)
        call = namespace["call"]
        if logs.enabled("output_code"):
            logs.log("output_code", f"wrapper:\n{wrapper_source}\nkernels ({triton_build.module_path(job.source)}):"
                                    f"\n{job.source}")
        call.launches = self.by_name
        call.wrapper_source = wrapper_source
        call.wrapper_code = code            # its globals and ops: what runtime/graph_cache.py stores
        call._boxed_call = job.facts.boxed
        return call


def _plan_matmul_templates(items, device, interpret, templates, contests, followers, example_inputs, graph,
                           launches, check):
    """mode max-autotune: for each mm/addmm extern call, its cached choice (cuBLAS, or a template
    configuration, filling `templates`: item name -> TemplateLaunch), or, with a GPU to time them on, the
    template candidates to race against cuBLAS (appended to `contests`). A product with the same shapes,
    strides and operand alignment as an earlier one (each layer's copy) shares that one's kernel and
    choice: cached, it gets the same TemplateLaunch over its own operands; in a contest it is appended to
    `followers` as (leader's item name, TemplateLaunch placeholder over its operands). With config.triton_mm_epilogues,
    a product whose only reader is the pointwise kernel right after it gets that kernel as its epilogue
    (_epilogue_for; part of the cache key). Returns the kernel sources to add."""
    from .. import autotune
    from . import matmul
    sources = []
    buffers = {b.name: b for b in graph.buffers()}
    first = {}          # (cache key, operand alignment) -> (item name, a TemplateLaunch of its plan)
    for position, item in enumerate(items):
        plan = matmul.plan_for(item)
        if plan is None:
            continue
        if config.triton_mm_epilogues:
            plan.epilogue = _epilogue_for(plan, items, position, graph, launches, check)
        key = autotune.cache_key(plan.key_text(), "", device)
        identity = (key, _operand_alignment(plan, example_inputs, buffers))
        twin = first.get(identity)
        if twin is not None:
            leader, launch = twin
            if leader in templates:
                templates[item.name] = dataclasses.replace(templates[leader], plan=plan)
            elif launch is not None:
                followers.append((leader, dataclasses.replace(launch, plan=plan)))
            continue
        base = f"triton_mm_{len(templates) + len(contests)}"
        cfg = autotune.load_choice(key)
        launch = None
        if cfg is not None and matmul.valid(cfg, plan) and (config.triton_gemv or cfg.get("GEMV") != 1):
            launch = templates[item.name] = matmul.launch(base, plan, cfg)
            sources.append(matmul.source(base, plan, cfg, interpret))
        elif cfg is not None and cfg == {"extern": 1}:
            pass
        elif not interpret:         # a GPU to time the candidates on
            candidates = []
            configs = matmul.candidates(plan) + (
                matmul.gemv_candidates(plan) if config.triton_gemv and _gemv_plan(item) else [])
            for k, c in enumerate(configs):
                candidates.append(matmul.launch(f"{base}_c{k}", plan, c))
                sources.append(matmul.source(f"{base}_c{k}", plan, c))
            contests.append((key, plan, candidates))
            launch = candidates[0] if candidates else None
        first[identity] = (item.name, launch)
    return sources


def _gemv_plan(item):
    """item's MatmulPlan if the one-row template computes it: mm/addmm of one row in bf16 or fp16."""
    from . import matmul
    plan = matmul.plan_for(item)
    if plan is None or plan.M != 1 or plan.a.dtype not in (torch.bfloat16, torch.float16):
        return None
    return plan


def _plan_gemv_templates(items, templates, example_inputs, graph, launches, check, interpret):
    """Modes without autotuning: each one-row product (_gemv_plan) as the one-row template in its
    heuristic configuration (matmul.gemv_config), with the pointwise kernel after it as its epilogue where
    _epilogue_for allows. Products with the same kernel text and operand alignment (each layer's copy)
    share one kernel. Fills `templates` (item name -> TemplateLaunch); returns the kernel sources to add."""
    from . import matmul
    sources, first = [], {}
    buffers = {b.name: b for b in graph.buffers()}
    for position, item in enumerate(items):
        plan = _gemv_plan(item)
        if plan is None:
            continue
        if config.triton_mm_epilogues:
            plan.epilogue = _epilogue_for(plan, items, position, graph, launches, check)
        cfg = matmul.gemv_config(plan)
        identity = (plan.key_text(), repr(sorted(cfg.items())), _operand_alignment(plan, example_inputs, buffers))
        if identity in first:
            templates[item.name] = dataclasses.replace(first[identity], plan=plan)
            continue
        name = f"triton_gemv_{len(first)}"
        templates[item.name] = first[identity] = matmul.launch(name, plan, cfg)
        sources.append(matmul.source(name, plan, cfg, interpret))
    return sources


def _epilogue_for(plan, items, position, graph, launches, check):
    """The matmul.Epilogue of plan's product: the kernel right after it, if it is the product's only
    reader, runs once over its elements in order, and prints as an epilogue; else None."""
    from . import matmul
    out = plan.out
    if tuple(int(s) for s in out.layout.strides) != (plan.N, 1) or position + 1 >= len(items):
        return None
    if any(isinstance(v, StorageView) and v.buffer.name == out.name for v in graph.outputs):
        return None
    readers = [i for i, item in enumerate(items) if i != position and (
        out.name in launches[item.name].args if isinstance(item, Kernel) else
        any(v.buffer.name == out.name for v in item.inputs()))]
    nxt = items[position + 1]
    if readers != [position + 1] or not isinstance(nxt, Kernel) or len(launches[nxt.name].launches) != 1:
        return None
    tk = TritonKernel(nxt, {b.name: b for b in graph.buffers()}, "epilogue", check)
    try:
        with use_ops(TritonOps(tk)):
            lines, args, params, written = tk.epilogue(out.name, plan.M, plan.N)
    except NotFusable as e:
        logs.log("fusion", f"{nxt.name} is not an epilogue of {plan.item.name}'s template: {e}")
        return None
    return matmul.Epilogue(nxt.name, lines, args, params, written, tuple(TritonWrapperCode._allocated(nxt)),
                           launches[nxt.name].launches[0])


def _operand_alignment(plan, example_inputs, buffers):
    """Which of a product's operands (and its epilogue's buffers) start 16-byte aligned: Triton
    specializes kernels on it."""
    from . import matmul
    views = [(v.buffer, int(v.offset) * v.dtype.itemsize) for v in matmul.views(plan)]
    views += [(buffers[name], 0) for name in (plan.epilogue.args if plan.epilogue is not None else ())]
    return tuple(_starts_aligned(buffer, example_inputs, offset) for buffer, offset in views)


def _starts_aligned(buffer, example_inputs, offset_bytes=0):
    """Whether a buffer's data, `offset_bytes` in, is 16-byte aligned: a graph input's by its example, a
    constant's by its tensor; buffers graphjit allocates are aligned. A fake example (AOTAutograd's
    halves of a training graph) has no address: its storage is taken as aligned, as the allocator's are,
    so its offset in the storage decides (the wrapper checks real inputs per call)."""
    position = getattr(buffer, "position", None)
    value = example_inputs[position] if position is not None else getattr(buffer, "value", None)
    if not isinstance(value, torch.Tensor):
        base = 0
    elif isinstance(value, torch._subclasses.FakeTensor):
        base = value.storage_offset() * value.element_size()
    else:
        base = value.data_ptr()
    return (base + offset_bytes) % 16 == 0


def _template_arguments(tensor, device):
    """TemplateLaunch -> its arguments: the real inputs (as the views the op reads) or zero-filled
    buffers (`tensor`: _tuning_arguments' buffers), a fresh output, then the strides."""
    def arguments(launch):
        from . import matmul
        plan = launch.plan
        args = []
        for view in matmul.views(plan):
            base = tensor(view.buffer.name, False)
            args.append(torch.as_strided(base, tuple(int(s) for s in view.sizes),
                                         tuple(int(s) for s in view.strides),
                                         base.storage_offset() + int(view.offset)))
        if plan.epilogue is not None:
            args += [tensor(name, name in plan.epilogue.written) for name in plan.epilogue.args]
        else:
            layout = plan.out.layout
            args.append(torch.empty_strided(tuple(int(s) for s in layout.sizes),
                                            tuple(int(s) for s in layout.strides), dtype=layout.dtype,
                                            device=device))
        return args + plan.strides()
    return arguments


def _aligned_inputs(graph, launches, example_inputs, templates=()):
    """Graph inputs that Triton kernels read and whose example started 16-byte aligned: the kernels were
    compiled assuming so, and the wrapper checks it per call."""
    from . import matmul
    used = {name for kl in launches.values() for name in kl.args}
    used |= {view.buffer.name for t in templates for view in matmul.views(t.plan)}
    used |= {name for t in templates if t.plan.epilogue is not None for name in t.plan.epilogue.args}
    return [buf.name for buf in graph.inputs if buf.position is not None and buf.name in used
            and _starts_aligned(buf, example_inputs)]


def _tuning_arguments(graph, example_inputs, device):
    """launch -> the tensors to time it on: the real inputs (copies of those it writes), and zero-filled
    buffers for the ones graphjit allocates (zeros: an index read from one stays in range). Its `tensor`
    attribute gives one buffer's tensor: tensor(buffer name, written)."""
    by_name = {b.name: b for b in graph.buffers()}
    made = {}

    def tensor(name, written):
        buf = by_name[name]
        position = getattr(buf, "position", None)
        if position is not None:
            value = example_inputs[position]
            return value.clone() if written else value
        if getattr(buf, "value", None) is not None:
            return buf.value
        if name not in made:
            layout = buf.layout
            made[name] = torch.empty_strided(tuple(int(s) for s in layout.sizes),
                                             tuple(int(s) for s in layout.strides),
                                             dtype=layout.dtype, device=device).zero_()
        return made[name]

    def arguments(launch):
        args = [tensor(name, name in launch.written) for name in launch.args]
        if launch.checks_indices:
            args.append(torch.zeros((1,), dtype=torch.int32, device=device))
        return args
    arguments.tensor = tensor
    return arguments


def _addressable(example):
    """What Triton's warmup specializes on for an input: its example, or for a fake one (AOTAutograd's
    halves of a training graph) a one-element tensor of its dtype on its device whose address is as
    aligned as the fake's offset into its storage (see _starts_aligned): the two must agree, since the
    wrapper checks per call only the inputs _aligned_inputs names."""
    if not isinstance(example, torch._subclasses.FakeTensor):
        return example
    offset = example.storage_offset()
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        return torch.empty(offset + 1, dtype=example.dtype, device=example.device)[offset:]


def _warmup_args(graph, all_launches, example_inputs):
    """Per kernel, what warmup() specializes on: inputs' example tensors (their alignment), constants, and
    the dtype of every buffer graphjit allocates (allocations are aligned)."""
    by_name = {b.name: b for b in graph.buffers()}
    symbols = {s.name: s for s in graph.size_symbols()}
    examples = {}
    addressable = {}        # input position -> what warmup() specializes on (made once per input)
    for launch in all_launches:
        args = []
        for name in launch.args:
            buf = by_name[name]
            position = getattr(buf, "position", None)
            if position is not None:
                if position not in addressable:
                    addressable[position] = _addressable(example_inputs[position])
                args.append(addressable[position])
            elif getattr(buf, "value", None) is not None:
                args.append(buf.value)
            else:
                args.append(buf.dtype)
        if launch.checks_indices:
            args.append(torch.int32)
        args += [size_hint(symbols[name]) for name in launch.size_args]
        examples[launch.name] = args
    return examples
