"""C++/OpenMP kernels: one translation unit per graph, one `extern "C"` function per scheduled kernel.

    extern "C" int kernel0(const float* __restrict__ arg0, float* __restrict__ buf2) {
        int gj_status = 0;
        #pragma omp parallel for
        for (int64_t x0 = 0; x0 < 256; ++x0) {
            float acc0 = -__builtin_inff(); bool nan0 = false;
            #pragma omp simd reduction(max:acc0) reduction(|:nan0)
            for (int64_t r0 = 0; r0 < 1024; ++r0) { ... }
            ...
        }
        return gj_status;
    }

Outer loops run in parallel; inner loops are contiguous and marked `omp simd` (reductions vectorize through
the simd reduction clause; no -ffast-math). 16-bit floats are computed in float and rounded on store.
The kernel returns 1 if an indirect index (embedding) was out of range. No standard headers: compiler
builtins keep a compile under 0.2 s.
"""
import contextlib
import ctypes.util
import dataclasses
import functools
import itertools
import math
import os
import platform
import re

import shlex
import sympy
import torch

from ..ir import StaticOnly, int_of, is_static, size_hint
from ..ir import (BOOL_RESULT_OPS, POINTWISE_OPS, format_index, op_dtype, product, record, reduction_identity,
                  simplify_with_ranges, use_ops, value_range)
from ... import config, logs
from . import eager_math
from ..scheduler import Kernel, inner_vars, outer_vars

STORAGE_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.bfloat16: "uint16_t", torch.float16: "_Float16",
    torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "bool",
}
COMPUTE_TYPES = {**STORAGE_TYPES, torch.bfloat16: "float", torch.float16: "float"}
# A kernel's nonzero return value: what went wrong, as the error eager raises (the wrapper raises it)
INDEX_OUT_OF_RANGE, ZERO_DIVISION, INDEX_OUT_OF_RANGE_RUNTIME = 1, 2, 3
STATUS_ERRORS = {
    INDEX_OUT_OF_RANGE: (IndexError, "graphjit: index out of range in {} (an embedding or gather index outside "
                                     "the table)"),
    ZERO_DIVISION: (RuntimeError, "ZeroDivisionError"),
    INDEX_OUT_OF_RANGE_RUNTIME: (RuntimeError, "graphjit: index out of range in {} (a gather index outside "
                                               "the tensor)"),
}


def index_status(check):
    """The status an index out of range sets: `check` is True (IndexError, as most of eager's indexing
    kernels raise) or the exception class eager's kernel of the op raises (gather: RuntimeError)."""
    return INDEX_OUT_OF_RANGE_RUNTIME if check is RuntimeError else INDEX_OUT_OF_RANGE


def kernel_error(status, kernel):
    """Raises the error kernel's status stands for."""
    error, message = STATUS_ERRORS[status]
    raise error(message.format(kernel))


# C++ computes arithmetic on these in int (integer promotion): an op's result is cast back, so that it wraps
# as torch's does (uint8 0 - 1 is 255) and a bool stays 0 or 1 (true + true is true)
PROMOTED = {torch.bool, torch.int8, torch.uint8, torch.int16}

# ops name -> C++ expression over the operands {0}, {1}; the helpers gj_* are defined in prelude().
EXPRESSIONS = {
    "neg": "(-{0})", "abs": "gj_abs({0})", "exp": "gj_exp({0})", "exp2": "gj_exp2({0})",
    "expm1": "gj_expm1({0})", "log": "gj_log({0})", "log2": "gj_log2({0})", "log1p": "gj_log1p({0})",
    "sqrt": "gj_sqrt({0})", "rsqrt": "gj_rsqrt({0})", "sin": "gj_sin({0})", "cos": "gj_cos({0})",
    "tan": "gj_tan({0})", "tanh": "gj_tanh({0})", "sigmoid": "gj_sigmoid({0})", "erf": "gj_erf({0})",
    "floor": "gj_floor({0})", "ceil": "gj_ceil({0})", "trunc": "gj_trunc({0})", "round": "gj_round({0})",
    "sign": "gj_sign({0})", "reciprocal": "gj_reciprocal({0})", "logical_not": "(!{0})",
    "bitwise_not": "gj_bitwise_not({0})", "isnan": "({0} != {0})", "isinf": "gj_isinf({0})",
    "square": "({0} * {0})", "relu": "gj_relu({0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "floordiv": "gj_floordiv({0}, {1})", "truncdiv": "gj_truncdiv({0}, {1})",
    "remainder": "gj_remainder({0}, {1})", "pow": "gj_pow({0}, {1})", "maximum": "gj_maximum({0}, {1})",
    "minimum": "gj_minimum({0}, {1})", "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})",
    "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})", "logical_and": "({0} && {1})",
    "logical_or": "({0} || {1})", "logical_xor": "(static_cast<bool>({0}) != static_cast<bool>({1}))",
    "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})",
    "atan2": "gj_atan2({0}, {1})",
}
assert set(EXPRESSIONS) == set(POINTWISE_OPS), set(POINTWISE_OPS) ^ set(EXPRESSIONS)

# Float/double math: name -> libm function for float (double drops the trailing f).
_MATH_FUNCTIONS = {
    "gj_exp": "expf", "gj_exp2": "exp2f", "gj_expm1": "expm1f", "gj_log": "logf", "gj_log2": "log2f",
    "gj_log1p": "log1pf", "gj_sqrt": "sqrtf", "gj_sin": "sinf", "gj_cos": "cosf", "gj_tan": "tanf",
    "gj_tanh": "tanhf", "gj_erf": "erff", "gj_floor": "floorf", "gj_ceil": "ceilf", "gj_trunc": "truncf",
    "gj_round": "nearbyintf", "gj_abs": "fabsf",
}

# libm functions that glibc's libmvec (x86-64) has vector variants of, by the glibc version adding them.
# Declared `simd`, gcc vectorizes loops calling them into calls of those variants (no -ffast-math needed);
# the others are vectorized through instructions (sqrt, floor ...) or stay scalar calls. Where eager's
# functions are at hand (eager_math.functions()), kernels call our helper's gj_eager_<fn> instead,
# declared `simd` the same way: eager's value in a vectorized body and in a scalar tail alike.
_LIBMVEC = {(2, 22): ("exp", "log", "sin", "cos", "pow"),
            (2, 35): ("exp2", "expm1", "log2", "log1p", "tan", "tanh", "erf", "atan2")}


# float erf where kernels use vector math: our own, inline and branch-free, so that gcc vectorizes it with the
# loop (libmvec's erff, a call per vector, made gelu's fused kernels slower than eager's). |x| < 0.9:
# x + x * q(x*x); beyond: sign(x) * (1 - 2**p(|x|)), p a fit of log2(erfc) on [0.9, 4] (|x| capped at 4,
# where erf is 1.0f; a NaN fails |x| >= 0.9 and stays NaN through the first branch). 2**p = 2**n * (1 + f *
# r(f)): n is p rounded by the 1.5 * 2**23 shifter, whose low bits are also 2**n's exponent, f = p - n, and
# 1 - 2**p is computed as (1 - 2**n) - (2**n * f) * r, whose first two terms are exact. The coefficients
# are minimax fits (weighted least squares against mpmath) rounded to float, their degrees the lowest that
# keep the error near 1 ulp: the kernels computing erf are bound by fma throughput. Max error over [-5, 5]:
# 1.55 ulp (libmvec's erff: 4; MKL's vsErf, which eager's torch.erf calls: 0.76). In gelu, the error is below
# eager's, which computes ATen's Vectorized erf (Abramowitz-Stegun 7.1.26, 1.5e-7 absolute).
_ERF_SMALL = ("0x1.06eba6p-3", "-0x1.8126fap-2", "0x1.ce1dd2p-4", "-0x1.b6bedep-6", "0x1.4876a6p-8",
              "-0x1.3f4edap-11")
_ERF_LOG2_ERFC = ("-0x1.5894d4p-9", "-0x1.9dcbe6p+0", "-0x1.e076cap-1", "-0x1.0dd37cp-3", "0x1.71fb6ap-6",
                  "-0x1.dd0c86p-10")
_EXP2_R = ("0x1.62e42ap-1", "0x1.ebf9bcp-3", "0x1.c6b752p-5", "0x1.3cea88p-7", "0x1.5bba14p-10")   # (2**f - 1) / f


def _horner(name, var, coefficients):
    """C++ declaring float `name`, the polynomial in `var` with these coefficients (C hex floats, lowest
    first), each step an fma."""
    *rest, last = coefficients
    steps = "".join(f" {name} = gj_fmaf({name}, {var}, {c}f);" for c in reversed(rest))
    return f"float {name} = {last}f;{steps}"


def _erf_lines():
    """gj_fmaf (an fma where the target has one, vectorized with the loop) and gj_erff_poly."""
    return [
        "#ifdef __FMA__",
        "GJ_INLINE float gj_fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }",
        "#else",
        "GJ_INLINE float gj_fmaf(float a, float b, float c) { return a * b + c; }",
        "#endif",
        "GJ_INLINE float gj_erff_poly(float x) { float t = __builtin_fabsf(x), s = x * x; "
        f"{_horner('q', 's', _ERF_SMALL)} float small = gj_fmaf(x, q, x); float u = t < 4.0f ? t : 4.0f; "
        f"{_horner('p', 'u', _ERF_LOG2_ERFC)} float k = p + 0x1.8p23f, n = k - 0x1.8p23f, f = p - n; "
        f"{_horner('r', 'f', _EXP2_R)} uint32_t bits; __builtin_memcpy(&bits, &k, 4); bits = (bits + 127u) << 23; "
        "float scale; __builtin_memcpy(&scale, &bits, 4); "
        "return t >= 0.9f ? __builtin_copysignf(gj_fmaf(-(scale * f), r, 1.0f - scale), x) : small; }",
    ]


@functools.cache
def vector_math():
    """The libm functions (double names) to call through libmvec here; empty where it is unavailable."""
    if not config.vector_math or platform.machine() != "x86_64" or not ctypes.util.find_library("mvec"):
        return frozenset()
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        glibc = tuple(int(v) for v in version.split(".")[:2])
    except (ValueError, OSError, AttributeError):
        return frozenset()
    return frozenset(f for since, names in _LIBMVEC.items() if glibc >= since for f in names)


def eager_functions():
    """The eager_math functions our kernels call (eager's own), where config.eager_math asks for them."""
    return eager_math.functions() if config.vector_math and config.eager_math else frozenset()


def _math_lines(eager):
    """gj_<fn> overloads for float and double, and the simd declarations of the `eager` functions
    (eager_math's) and the libmvec ones they call."""
    vectorized = vector_math() - eager
    lines = ["// link: -lmvec"] if vectorized else []
    # (libm name, type) -> our own function, where kernels use vector math and not eager's function
    own = {("erf", "float"): "gj_erff_poly"} if vectorized and "erf" not in eager else {}
    if own:
        lines += _erf_lines()
    attrs = '__attribute__((simd("notinbranch"), const, nothrow, leaf))'
    declared = [(fn, fn + "f", fn) for fn in sorted(vectorized)] + \
        [(name, eager_math.scalar_name(name, "float"), eager_math.scalar_name(name, "double")) for name in sorted(eager)]
    for fn, float_name, double_name in declared:
        arity = 2 if fn in ("pow", "atan2") else 1
        for ctype, name in (("float", float_name), ("double", double_name)):
            lines.append(f'extern "C" {ctype} {name}({", ".join([ctype] * arity)}) {attrs};')

    def call(fn, ctype, args, name=None):
        """fn (a libm double name) of ctype: eager_math's `name` (default fn), our own, libmvec's or a builtin."""
        if (name or fn) in eager:
            return f"{eager_math.scalar_name(name or fn, ctype)}({args})"
        if (fn, ctype) in own:
            return f"{own[fn, ctype]}({args})"
        prefix = "" if fn in vectorized else "__builtin_"
        return f"{prefix}{fn}{'f' if ctype == 'float' else ''}({args})"
    for name, fn in _MATH_FUNCTIONS.items():
        lines.append(f"GJ_INLINE float {name}(float x) {{ return {call(fn[:-1], 'float', 'x')}; }} "
                     f"GJ_INLINE double {name}(double x) {{ return {call(fn[:-1], 'double', 'x')}; }}")
    lines += [
        # eager's sigmoid: 1 / (1 + exp(-x)) with Sleef's exp
        f"GJ_INLINE float gj_sigmoid(float x) {{ return 1.0f / (1.0f + {call('exp', 'float', '-x', 'sleef_exp')}); }}",
        f"GJ_INLINE double gj_sigmoid(double x) {{ return 1.0 / (1.0 + {call('exp', 'double', '-x', 'sleef_exp')}); }}",
        f"GJ_INLINE float gj_atan2(float a, float b) {{ return {call('atan2', 'float', 'a, b')}; }}",
        f"GJ_INLINE double gj_atan2(double a, double b) {{ return {call('atan2', 'double', 'a, b')}; }}",
        f"GJ_INLINE float gj_pow(float a, float b) {{ return {call('pow', 'float', 'a, b')}; }}",
        f"GJ_INLINE double gj_pow(double a, double b) {{ return {call('pow', 'double', 'a, b')}; }}",
    ]
    return lines


# Python's a // b on floats as eager computes it (c10's div_floor_floating): from fmod, not floor(a / b),
# which is off at infinities (-0.5 // inf is -1, -inf // 3 is nan) and in the last bit of large quotients
_FLOAT_FLOORDIV = (
    "GJ_INLINE {t} gj_floordiv({t} a, {t} b) {{ if (b == 0) return a / b; {t} m = __builtin_fmod{f}(a, b); "
    "{t} d = (a - m) / b; if (m != 0 && ((b < 0) != (m < 0))) d -= 1; "
    "if (d == 0) return __builtin_copysign{f}(0, a / b); {t} q = __builtin_floor{f}(d); "
    "return d - q > {t}(0.5) ? q + 1 : q; }}")


def prelude():
    """Includes, conversions and math helpers every translation unit starts with."""
    return _prelude(eager_functions())


@functools.cache
def _prelude(eager):
    """prelude(), its math through the `eager` functions of eager_math (a frozenset) and libmvec or libm."""
    lines = [
        "// generated by graphjit (graphjit/compiler/codegen/cpp.py)",
        "#include <stdint.h>",
        "#define GJ_INLINE static inline __attribute__((always_inline))",
        "GJ_INLINE float gj_bf16_to_f32(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; "
        "__builtin_memcpy(&f, &u, 4); return f; }",
        "GJ_INLINE uint16_t gj_f32_to_bf16(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); "
        "if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); "
        "u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }",
        "GJ_INLINE float gj_round_bf16(float f) { return gj_bf16_to_f32(gj_f32_to_bf16(f)); }",
        "GJ_INLINE float gj_round_f16(float f) { return (float)(_Float16)f; }",
        # float -> int32/int64 as x86's conversion, which eager's kernels use: the lowest value where x is
        # NaN or beyond the type's range (C++ leaves that undefined, and gcc folds (float)(int)x to trunc(x))
        "template <typename I, typename F> GJ_INLINE I gj_to_int(F x) { "
        "const F low = -(F)((uint64_t)1 << (8 * sizeof(I) - 1)); "
        "return x >= low && x < -low ? (I)x : (I)((uint64_t)1 << (8 * sizeof(I) - 1)); }",
        "template <typename T> GJ_INLINE T gj_abs(T x) { return x < 0 ? -x : x; }",
        "template <typename T> GJ_INLINE T gj_floor(T x) { return x; }",
        "template <typename T> GJ_INLINE T gj_ceil(T x) { return x; }",
        "template <typename T> GJ_INLINE T gj_trunc(T x) { return x; }",
        "template <typename T> GJ_INLINE T gj_round(T x) { return x; }",
    ]
    lines += _math_lines(eager)
    lines += [
        "GJ_INLINE float gj_rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }",
        "GJ_INLINE double gj_rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }",
        "template <typename T> GJ_INLINE T gj_pow(T a, T b) { T r = 1; if (b < 0) return a == 1 ? 1 : "
        "(a == -1 ? ((b & 1) ? -1 : 1) : 0); while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }",
        "GJ_INLINE bool gj_isinf(float x) { return __builtin_isinf(x); }",
        "GJ_INLINE bool gj_isinf(double x) { return __builtin_isinf(x); }",
        "template <typename T> GJ_INLINE bool gj_isinf(T) { return false; }",
        "template <typename T> GJ_INLINE T gj_reciprocal(T x) { return T(1) / x; }",
        "template <typename T> GJ_INLINE T gj_sign(T x) { return (T)((T(0) < x) - (x < T(0))); }",
        "template <typename T> GJ_INLINE T gj_bitwise_not(T x) { return ~x; }",
        "GJ_INLINE bool gj_bitwise_not(bool x) { return !x; }",
        "template <typename T> GJ_INLINE T gj_relu(T x) { return x < T(0) ? T(0) : x; }",
        "GJ_INLINE int64_t gj_max1(int64_t n) { return n > 1 ? n : 1; }",
        # a kernel's status: the first error set stays (the check of the op eager runs first, in one thread)
        "GJ_INLINE void gj_fail(int* status, int code) { int zero = 0; "
        "__atomic_compare_exchange_n(status, &zero, code, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); }",
        # ops.rand (ir.py): Philox4x32-10 keyed by the seed, counter (offset, 0, 0); word 0's top 24 bits
        "GJ_INLINE float gj_rand(int64_t seed, int64_t offset) { "
        "uint32_t c0 = (uint32_t)offset, c1 = (uint32_t)((uint64_t)offset >> 32), c2 = 0, c3 = 0; "
        "uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32); "
        "for (int r = 0; r < 10; ++r) { uint64_t a = (uint64_t)0xD2511F53u * c0, b = (uint64_t)0xCD9E8D57u * c2; "
        "c0 = (uint32_t)(b >> 32) ^ c1 ^ k0; c2 = (uint32_t)(a >> 32) ^ c3 ^ k1; c1 = (uint32_t)b; c3 = (uint32_t)a; "
        "k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; } "
        "return (float)(c0 >> 8) * 5.9604644775390625e-08f; }",
        "template <typename T> GJ_INLINE T gj_maximum(T a, T b) "
        "{ return a != a ? a : (b != b ? b : (a > b ? a : b)); }",
        "template <typename T> GJ_INLINE T gj_minimum(T a, T b) "
        "{ return a != a ? a : (b != b ? b : (a < b ? a : b)); }",
        *[_FLOAT_FLOORDIV.format(t=t, f=f) for t, f in (("float", "f"), ("double", ""))],
        # a signed integer divided by -1: -a wrapping (INT_MIN / -1 traps, SIGFPE), as eager's result
        "template <typename T> GJ_INLINE T gj_floordiv(T a, T b) { "
        "if ((T)-1 < (T)0 && b == (T)-1) return (T)(0ULL - (unsigned long long)a); T q = a / b; "
        "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
        "GJ_INLINE float gj_truncdiv(float a, float b) { return __builtin_truncf(a / b); }",
        "GJ_INLINE double gj_truncdiv(double a, double b) { return __builtin_trunc(a / b); }",
        "template <typename T> GJ_INLINE T gj_truncdiv(T a, T b) { return a / b; }",
        "GJ_INLINE float gj_remainder(float a, float b) { float m = __builtin_fmodf(a, b); "
        "return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m; }",
        "GJ_INLINE double gj_remainder(double a, double b) { double m = __builtin_fmod(a, b); "
        "return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m; }",
        "template <typename T> GJ_INLINE T gj_remainder(T a, T b) { "
        "if ((T)-1 < (T)0 && b == (T)-1) return 0; T m = a % b; "
        "return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m; }",
    ]
    return "\n".join(lines) + "\n"




# ---------------------------------------------------------------------------------------------------------
# Index expressions and literals
# ---------------------------------------------------------------------------------------------------------


def cexpr(e):
    """A sympy index expression (non-negative integers) as C."""
    return format_index(e, '/')


def literal(value, dtype):
    """A C++ literal of `value` in dtype's compute type (16-bit floats compute in float)."""
    ctype = COMPUTE_TYPES[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        value = float(value)
        suffix = "f" if ctype == "float" else ""
        if value != value:
            return f"__builtin_nan{suffix}(\"\")"
        if ctype == "float" and math.isfinite(value):     # rounded to float: beyond its range, an infinity
            value = torch.tensor(value, dtype=torch.float32, device="cpu").item()
        if value in (float("inf"), float("-inf")):
            return f"(-__builtin_inf{suffix}())" if value < 0 else f"__builtin_inf{suffix}()"
        text = value.hex() + suffix
        return f"({text})" if text.startswith("-") else text
    value = int_of(value, dtype)
    if value == -(2 ** 63):
        return f"{ctype}(-9223372036854775807LL - 1)"
    # the cast matters for int64 too: int64_t is `long` on Linux, `7LL` is `long long`, and the gj_*
    # templates (gj_minimum(a, b)) deduce one T from both arguments
    return f"{ctype}({value}LL)"


# Column reductions (CppKernel._column_tile): results per tile, and the tile's and lane's loop variables.
# 64 float results read 256 contiguous bytes of each reduced row, four whole cache lines the hardware
# prefetcher streams; 16 (one cache line a row, at the row stride) took 2-4x as long on one thread (sums
# over dim 0 of [512, 1000]: 0.14 ms against 0.046 ms; [32768, 64]: 0.61 against 0.15 ms). Fewer than
# COLUMN_MIN results are not tiled.
COLUMN_TILE, COLUMN_ROW_BLOCK, COLUMN_MIN = 64, 128, 8
COLUMN_TILE_VAR, COLUMN_LANE_VAR = sympy.Symbol("xt", integer=True, nonnegative=True), \
    sympy.Symbol("xl", integer=True, nonnegative=True)


# Accumulator start values and update statements of the reductions.
def _reduction_init(reduction_type, dtype):
    return literal(reduction_identity(reduction_type, dtype), dtype)


# ---------------------------------------------------------------------------------------------------------
# Loop simplification
# ---------------------------------------------------------------------------------------------------------


def _coeff(expr, var):
    """The integer c with expr == c*var + (terms without var), or None if expr is not affine in var."""
    total = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        if var not in term.free_symbols:
            continue
        coeff, rest = term.as_independent(var, as_Add=False)
        if rest != var or any(s.name[0] in "xr" and s.name[1:].isdigit() for s in coeff.free_symbols):
            return None
        total += coeff
    return total


def group_index_exprs(kernel, group, xs):
    """Every index expression a loop group of `kernel` reads or writes (decides which dims can merge)."""
    rs = inner_vars(len(group.inner))
    ranges = {**dict(zip(xs, kernel.outer)), **dict(zip(rs, group.inner))}
    exprs = []
    for node in group.nodes:
        rec = record(node.buffer.data.inner_fn, *node.body_args(xs, rs), ranges=ranges)
        exprs += [index for _, index in rec.reads] + list(rec.index_exprs)
        exprs.append(simplify_with_ranges(node.write_index(xs, rs), ranges))
    return exprs


def by_output_strides(kernel, group, dims, xs, rs, ranges):
    """A pointwise kernel's loops may run in any order: the one the first stored output is laid out in
    (largest stride outermost) makes the innermost loop, or neighbouring GPU lanes, write neighbouring
    addresses (a channels-last batch norm loops over channels innermost, not over pixels)."""
    stored = [n for n in group.nodes if n.name not in kernel.local]
    if not stored:
        return dims
    index = sympy.expand(simplify_with_ranges(stored[0].write_index(xs, rs), ranges))
    return sorted(dims, key=lambda d: -_stride_hint(index.coeff(d[0])))


def _stride_hint(coeff):
    """A loop variable's coefficient in an index, for ordering loops: its value for the example sizes
    where it is an expression of size symbols (0 where it involves other loop variables)."""
    if coeff.is_Integer:
        return int(coeff)
    if any(s.name[:1] in "xr" and s.name[1:].isdigit() for s in coeff.free_symbols):
        return 0
    return size_hint(coeff)


def merge_dims(dims, exprs):
    """Merges adjacent loops (outer a, inner b) into one when every index is affine in both with
    coeff(a) == coeff(b) * size(b): a contiguous [64, 128] loop becomes one loop of 8192.
    dims: [(symbol, size)] outermost first. Returns (dims, substitutions to apply to indices)."""
    dims, exprs, subs = list(dims), list(exprs), []
    i = len(dims) - 2
    while i >= 0:
        (va, sa), (vb, sb) = dims[i], dims[i + 1]
        ok = True
        for e in exprs:
            ca, cb = _coeff(e, va), _coeff(e, vb)
            if ca is None or cb is None or sympy.expand(ca - cb * sb) != 0:
                ok = False
                break
        if ok:
            sub = {va: sympy.Integer(0), vb: va}
            exprs = [e.xreplace(sub) for e in exprs]
            subs.append(sub)
            dims[i:i + 2] = [(va, sa * sb)]
        i -= 1
    return dims, subs


# ---------------------------------------------------------------------------------------------------------
# The ops handler printing C++
# ---------------------------------------------------------------------------------------------------------


class CppOps:
    """Prints each op as `auto tmpN = ...;` into the kernel's current block, with common-subexpression
    elimination and a store cache (a value stored earlier in the same iteration is reused, not reloaded).
    Each value's dtype is tracked (CppKernel.dtypes), so that C++'s integer promotion is undone where torch
    computes in a narrower type (PROMOTED)."""

    def __init__(self, kernel):
        self.k = kernel

    def load(self, name, index):
        index = self.k.rewrite(index)
        cached = self.k.lookup_store(name, index)
        if cached is not None:
            return cached
        if name in self.k.kernel.local:
            raise AssertionError(f"{self.k.kernel.name}: local buffer {name} read outside where it is made")
        dtype = self.k.buffers[name].dtype
        expr = f"{name}[{cexpr(index)}]"
        if dtype == torch.bfloat16:
            expr = f"gj_bf16_to_f32({expr})"
        elif dtype == torch.float16:
            expr = f"static_cast<float>({expr})"
        elif dtype == torch.bool:       # through bytes: gcc 12 vectorizes no loop that loads a bool
            expr = f"static_cast<bool>(reinterpret_cast<const uint8_t*>({name})[{cexpr(index)}])"
        hoisted = self.k.hoisted_load(name, expr, index, dtype)
        return hoisted if hoisted is not None else self.k.cse(expr, dtype)

    def store(self, name, index, value):
        index = self.k.rewrite(index)
        self.k.store(name, index, value)

    def constant(self, value, dtype):
        if isinstance(value, sympy.Expr) and not value.is_Number:      # a scalar computed from sizes
            return self.to_dtype(self.index_expr(value, torch.int64), dtype)
        return self.k.typed(literal(value, dtype), dtype)

    def index_expr(self, expr, dtype):
        return self.k.cse(f"static_cast<{COMPUTE_TYPES[dtype]}>({cexpr(self.k.rewrite(expr))})", dtype)

    def to_dtype(self, x, dtype):
        source = self.k.dtypes.get(x)
        if source is not None and source.is_floating_point and not dtype.is_floating_point and \
                dtype != torch.bool:
            # as eager's (x86) conversion, gj_to_int; int8 and int16 wrap from int32 as eager's do, uint8
            # from int64 (c10's conversion to uint8 goes through int64: 2**32 + 5 becomes 5)
            x = f"gj_to_int<{'int64_t' if dtype in (torch.int64, torch.uint8) else 'int32_t'}>({x})"
        converted = f"static_cast<{COMPUTE_TYPES[dtype]}>({x})"
        if dtype.is_floating_point and source is not None and not source.is_floating_point:
            # gcc folds (float)(int)f into trunc(f) (-fno-trapping-math), which keeps f's -0.0 where an
            # integer has none; the select makes it +0.0 (gcc drops a `+ 0.0`: it knows an int's float is
            # no -0.0) and changes no other value
            value = self.k.cse(converted, dtype)
            converted = f"({value} != 0 ? {value} : {literal(0, dtype)})"
        if dtype in (torch.bfloat16, torch.float16):
            return self.k.cse(f"gj_round_{'bf16' if dtype == torch.bfloat16 else 'f16'}({converted})", dtype)
        return self.k.cse(converted, dtype)

    def where(self, cond, a, b):
        return self._typed_op(f"({cond} ? {a} : {b})", self._dtype("where", a, b))

    def _dtype(self, name, *args):
        return op_dtype(name, [self.k.dtypes.get(a) for a in args])

    def _typed_op(self, expr, dtype):
        """expr, of dtype: cast back from int where C++ promoted it."""
        if dtype in PROMOTED:
            expr = f"static_cast<{COMPUTE_TYPES[dtype]}>({expr})"
        return self.k.cse(expr, dtype)

    def masked(self, mask, body, other, dtype):
        ctype = COMPUTE_TYPES[dtype]
        self.k.masked_depth += 1
        try:
            with self.k.block() as lines:
                result = body()
        finally:
            self.k.masked_depth -= 1
        inner = "\n".join("    " + line for line in lines)
        name = self.k.new_var()
        self.k.emit(f"auto {name} = [&]() -> {ctype} {{\n    if (!({mask})) return {literal(other, dtype)};\n"
                    f"{inner}\n    return {result};\n}}();")
        return self.k.typed(name, dtype)

    def indirect_indexing(self, value, size, check=True, wrap=True):
        size = cexpr(size)
        hoisted = self.k.hoisted_index(value, size, check, wrap)
        if hoisted is not None:
            return sympy.Symbol(hoisted, integer=True)
        name = f"ind{next(self.k.indirect_ids)}"
        for line in self.k.index_lines(name, value, size, check, wrap):
            self.k.emit(line)
        return sympy.Symbol(name, integer=True)

    def rand(self, seed, offset):
        return self.k.cse(f"gj_rand({seed}, {offset})", torch.float32)

    def _division(self, name, a, b):
        """An integer division by 0 traps in C++ (SIGFPE kills the process) where eager raises: it sets the
        kernel's status instead, and divides by 1."""
        dtype = self._dtype(name, a, b)
        if dtype is not None and not dtype.is_floating_point and dtype != torch.bool:
            self.k.uses_status = True
            self.k.emit(f"if ({b} == 0) gj_fail(&gj_status, {ZERO_DIVISION});")
            b = self.k.cse(f"({b} == 0 ? {literal(1, dtype)} : {b})", dtype)
        return self._typed_op(EXPRESSIONS[name].format(a, b), dtype)

    floordiv = functools.partialmethod(_division, "floordiv")
    truncdiv = functools.partialmethod(_division, "truncdiv")
    remainder = functools.partialmethod(_division, "remainder")

    def __getattr__(self, name):
        template = EXPRESSIONS.get(name)
        if template is None:
            raise AttributeError(f"no C++ for ops.{name}")
        if name in BOOL_RESULT_OPS:         # C++ comparisons and logical ops are bool already
            return lambda *args: self.k.cse(template.format(*args), torch.bool)
        return lambda *args: self._typed_op(template.format(*args), self._dtype(name, *args))


# ---------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------


class CppKernel:
    """Prints one scheduler.Kernel as a C++ function."""

    def __init__(self, kernel, buffers):
        self.kernel = kernel
        self.buffers = buffers                  # name -> Buffer
        self.lines = []
        self._cse = [{}]                        # scopes: expression -> variable
        self._stores = [{}]                     # scopes: (buffer, index) -> variable
        self._ids = itertools.count()
        self.indirect_ids = itertools.count()
        self.uses_status = False
        self.subs = []                          # merged loops: substitutions applied to every index
        self.ranges = {}                        # canonical loop variable -> size
        self.args = []                          # buffer names, in signature order
        self.written = set()
        self.dtypes = {}                        # value (variable or literal) -> its torch dtype
        self.hoist = None                       # inside a group's loop: (outer lines, outer CSE, loop vars,
                                                #   buffers the group writes, CSE scopes outside the loop)
        self.hoisted_indices = set()            # indirect indices computed before the loop that reads them
        self.masked_depth = 0                   # inside masked() bodies: their loads stay under the mask

    # -- emission helpers --
    def emit(self, line):
        self.lines.append(line)

    def new_var(self, prefix="tmp"):
        return f"{prefix}{next(self._ids)}"

    def cse(self, expr, dtype=None):
        """A variable holding expr (of dtype, where known): an earlier one in scope, or a new one."""
        for scope in reversed(self._cse):
            if expr in scope:
                return scope[expr]
        name = self.new_var()
        self.emit(f"auto {name} = {expr};")
        self._cse[-1][expr] = name
        return self.typed(name, dtype)

    def hoisted_load(self, name, expr, index, dtype):
        """A load in a group's loop whose index is the same in every iteration (a row's first element:
        layer_norm's shift) is emitted once before the loop: gcc leaves an inner loop with such a load
        unvectorized ("latch block not empty"), 10x slower with gelu's erf. Not for loads under a mask
        (they may be out of bounds where the mask is false), of indirect indices, or of a buffer the loop
        itself writes; None where not hoisted."""
        if self.hoist is None or self.masked_depth:
            return None
        lines, cse, loop_vars, written, _ = self.hoist
        if name in written or any(str(v) in loop_vars or (str(v).startswith("ind") and
                                                          str(v) not in self.hoisted_indices)
                                  for v in index.free_symbols):
            return None
        if expr not in cse:
            name = self.new_var()
            lines.append(f"auto {name} = {expr};")
            cse[expr] = name
        return self.typed(cse[expr], dtype)

    def hoisted_index(self, value, size, check, wrap):
        """The name of an indirect index made from a value defined before the group's loop (a row's token
        id, read once by hoisted_load), converted and bounds-checked once there: inside an `omp simd` loop
        the check's branch keeps gcc from vectorizing it (an embedding's rows added up and normalized by
        layer_norm in three loops ran scalar). Not under a mask (the index may be out of range where the
        mask is false); None where not hoisted."""
        if self.hoist is None or self.masked_depth:
            return None
        lines, cse, _, _, outside = self.hoist
        if not any(value in scope.values() for scope in outside):
            return None
        key = ("index", value, size, check, wrap)
        if key not in cse:
            name = f"ind{next(self.indirect_ids)}"
            lines += self.index_lines(name, value, size, check, wrap)
            cse[key] = name
            self.hoisted_indices.add(name)
        return cse[key]

    def index_lines(self, name, value, size, check, wrap):
        """The lines making index variable `name` of value: wrapped (a negative index counts from the end)
        and checked against size (out of range: the kernel's status, and index 0)."""
        lines = [f"int64_t {name} = static_cast<int64_t>({value});"]
        if wrap:
            lines.append(f"if ({name} < 0) {name} += {size};")
        if check:
            self.uses_status = True
            lines.append(f"if ({name} < 0 || {name} >= {size}) {{ gj_fail(&gj_status, {index_status(check)}); "
                         f"{name} = 0; }}")
        return lines

    def typed(self, value, dtype):
        """value, noting its dtype (None: unknown)."""
        if dtype is not None:
            self.dtypes[value] = dtype
        return value

    @contextlib.contextmanager
    def block(self):
        """Lines emitted inside go to a fresh list (yielded), with their own CSE and store-cache scope."""
        saved, self.lines = self.lines, []
        self._cse.append({})
        self._stores.append({})
        try:
            yield self.lines
        finally:
            self._cse.pop()
            self._stores.pop()
            self.lines = saved

    def rewrite(self, index):
        index = simplify_with_ranges(index, self.ranges)
        for sub in self.subs:
            index = index.xreplace(sub)
        return sympy.expand(index)

    def lookup_store(self, name, index):
        for scope in reversed(self._stores):
            if (name, index) in scope:
                return scope[(name, index)]
        return None

    def store(self, name, index, value, scope=-1):
        dtype = self.buffers[name].dtype
        if name not in self.kernel.local:
            self.written.add(name)
            stored = {torch.bfloat16: f"gj_f32_to_bf16({value})", torch.float16: f"static_cast<_Float16>({value})",
                      torch.bool: f"static_cast<uint8_t>(static_cast<bool>({value}))"}
            # a bool is stored as its byte: gcc 12 vectorizes no loop that stores a bool
            target = f"reinterpret_cast<uint8_t*>({name})" if dtype == torch.bool else name
            self.emit(f"{target}[{cexpr(index)}] = {stored.get(dtype, f'static_cast<{STORAGE_TYPES[dtype]}>({value})')};")
        if dtype in (torch.bfloat16, torch.float16):   # readers see the value as memory holds it
            value = self.cse(f"gj_round_{'bf16' if dtype == torch.bfloat16 else 'f16'}({value})", dtype)
        elif self.dtypes.get(value) != dtype:
            value = self.cse(f"static_cast<{COMPUTE_TYPES[dtype]}>({value})", dtype)
        self._stores[scope][(name, index)] = value

    # -- the kernel --
    def generate(self):
        kernel = self.kernel
        xs = outer_vars(len(kernel.outer))
        self.ranges = dict(zip(xs, kernel.outer))
        outer_dims, group_dims = self._simplified_loops(xs)
        work = product([s for _, s in outer_dims]) * sum(
            (sympy.Max(product([s for _, s in dims]), 1) for dims in group_dims), sympy.Integer(0))
        self.parallel_if = ""
        if work.is_Integer:
            parallel = work >= config.parallel_threshold
        else:       # sizes known when it runs: threads only where there is enough work for them
            parallel = True
            terms = [f"{cexpr(product([s for _, s in outer_dims]))}"]
            terms.append(" + ".join(f"gj_max1({cexpr(product([s for _, s in dims]))})" for dims in group_dims)
                         or "1")
            self.parallel_if = f" if(({terms[0]}) * ({terms[1]}) >= {config.parallel_threshold})"
        self.column = self._column_tile(outer_dims, group_dims)
        bounds = [cexpr(size) for _, size in outer_dims]
        if self.column is not None:
            var, size = outer_dims[-1]
            outer_dims = outer_dims[:-1] + [(COLUMN_TILE_VAR, size)]
            bounds[-1] = f"({cexpr(size)} + {COLUMN_TILE - 1}) / {COLUMN_TILE}"
            self.column_size, self.column_lanes = size, None
            self.subs = self.subs + [{var: COLUMN_TILE_VAR * COLUMN_TILE + COLUMN_LANE_VAR}]
        head = []
        if outer_dims and parallel:
            collapse = f" collapse({len(outer_dims)})" if len(outer_dims) > 1 else ""
            head.append(f"#pragma omp parallel for{collapse}{self.parallel_if}")
        for depth, ((var, _), bound) in enumerate(zip(outer_dims, bounds)):
            head.append("    " * depth + f"for (int64_t {var} = 0; {var} < {bound}; ++{var})")
        with self.block() as inner:
            self._declare_scratch(xs)
            if self.column is not None:
                self._column_groups(group_dims, xs)
            else:
                for group, dims in zip(kernel.groups, group_dims):
                    self._group(group, dims, xs, parallel_inner=parallel and not outer_dims)
        return self._function(head + ["{"] + ["    " + line for line in inner] + ["}"])

    def _column_groups(self, group_dims, xs):
        """A column tile: each reduction group's loops (accumulators per lane), then a loop over the lanes
        storing its results; after the last, the same loop computes the groups after it (pointwise
        epilogues). A later group reads an earlier one's results from memory, or, where they are local
        to the kernel, from an array of the tile's lanes."""
        groups = list(zip(self.kernel.groups, group_dims))
        reducing = [(g, d) for g, d in groups if d]
        lane = COLUMN_LANE_VAR
        for i, (group, dims) in enumerate(reducing):
            reductions, accs, lanes = self._group(group, dims, xs, parallel_inner=False)
            kept = {}                   # local results later groups read: index -> the lanes' array
            with self.block() as results:
                for node in reductions:
                    self._reduction_result(node, xs, *accs[node.name])
                    if i < len(reducing) - 1 and node.name in self.kernel.local:
                        index = self.rewrite(node.write_index(xs, []))
                        kept[node.name] = (index, self.lookup_store(node.name, index))
                        self.emit(f"{node.name}_lanes[{lane}] = {kept[node.name][1]};")
                if i == len(reducing) - 1:
                    for epilogue, epilogue_dims in groups[len(reducing):]:
                        self._group(epilogue, epilogue_dims, xs, parallel_inner=False)
            for name, (_, value) in kept.items():
                dtype = self.buffers[name].dtype
                self.emit(f"{COMPUTE_TYPES[dtype]} {name}_lanes[{COLUMN_TILE}];")
            self.emit(f"for (int64_t {lane} = 0; {lane} < {lanes}; ++{lane})")
            self.emit("{")
            self.lines += ["    " + line for line in results]
            self.emit("}")
            for name, (index, value) in kept.items():
                self._stores[-1][(name, index)] = self.typed(f"{name}_lanes[{lane}]", self.buffers[name].dtype)

    def _declare_scratch(self, xs):
        """kernel.scratch buffers: one outer iteration's elements in a stack array, through a pointer
        offset so that `name[index]` reads and writes with the buffer's own index expressions."""
        for node in self.kernel.nodes:
            if node.name not in self.kernel.scratch:
                continue
            rs = inner_vars(len(node.inner))
            index = simplify_with_ranges(node.write_index(xs, rs), node.ranges())
            base = index.xreplace({r: sympy.Integer(0) for r in rs})
            bounds = value_range(sympy.expand(index - base), dict(zip(rs, node.inner)))
            if bounds is None and not is_static(index):
                raise StaticOnly(f"{self.kernel.name}: a stack array for {node.name} of symbolic length")
            assert bounds is not None and bounds[0] >= 0, f"{self.kernel.name}: scratch {node.name} at {index}"
            ctype = STORAGE_TYPES[node.buffer.dtype]
            self.emit(f"alignas(64) {ctype} {node.name}_row[{bounds[1] + 1}];")
            self.emit(f"{ctype}* {node.name} = {node.name}_row - ({cexpr(self.rewrite(base))});")

    def _simplified_loops(self, xs):
        """Loop dims after merging, and the substitutions mapping canonical indices onto them."""
        kernel = self.kernel
        exprs = {i: self._index_exprs(group, xs) for i, group in enumerate(kernel.groups)}
        all_exprs = [e for es in exprs.values() for e in es]
        if all(not n.is_reduction for n in kernel.nodes) and len(kernel.groups) == 1:
            (group,) = kernel.groups
            rs = inner_vars(len(group.inner))
            dims = list(zip(xs, kernel.outer)) + list(zip(rs, group.inner))
            dims, subs = merge_dims(by_output_strides(kernel, group, dims, xs, rs, dict(dims)), all_exprs)
            self.subs = subs
            self._group_subs = [[]]
            return dims[:-1], [dims[-1:]]
        outer_dims, self.subs = merge_dims(list(zip(xs, kernel.outer)), all_exprs)
        group_dims, self._group_subs = [], []
        for i, group in enumerate(kernel.groups):
            rs = inner_vars(len(group.inner))
            group_exprs = [self.rewrite(e) for e in exprs[i]]
            dims, subs = merge_dims(list(zip(rs, group.inner)), group_exprs)
            group_dims.append(dims)
            self._group_subs.append(subs)
        return outer_dims, group_dims

    def _index_exprs(self, group, xs):
        return group_index_exprs(self.kernel, group, xs)

    def _column_tile(self, outer_dims, group_dims):
        """Whether this is a column reduction, run in tiles of COLUMN_TILE results: the innermost result
        dim is contiguous in what the kernel reads and the reduced dims are not (a bias gradient summed
        over the batch, per-channel statistics of a channels-last tensor). Looped as usual, each result
        would scan the whole input at a stride, reading every cache line once per result. In tiles, each
        reduced row's COLUMN_TILE neighbouring elements are read together, into one accumulator per lane
        (an `omp simd` loop over the lanes, innermost). The kernel's first loop groups hold its
        reductions (all but the last storing their results to memory), the others run once per result
        (epilogues)."""
        kernel = self.kernel
        reducing = [i for i, dims in enumerate(group_dims) if dims]
        if kernel.scratch or not outer_dims or not reducing or reducing != list(range(len(reducing))):
            return None
        for i, group in enumerate(kernel.groups):
            if any(n.is_reduction != (i in reducing) for n in group.nodes):
                return None
        var, size = outer_dims[-1]
        if size.is_Integer and size < COLUMN_MIN:
            return None
        along = []
        for i in reducing:
            group, inner_var = kernel.groups[i], group_dims[i][-1][0]
            rs = inner_vars(len(group.inner))
            reads = []
            for node in group.nodes:
                rec = record(node.buffer.data.inner_fn, *node.body_args(outer_vars(len(kernel.outer)), rs),
                             ranges={**self.ranges, **dict(zip(rs, group.inner))})
                reads += [index for _, index in rec.reads]
            saved, self.subs = self.subs, self.subs + self._group_subs[i]
            try:
                along += [(_coeff(e, var), _coeff(e, inner_var)) for e in map(self.rewrite, reads)]
            finally:
                self.subs = saved
        if any(c is None for pair in along for c in pair):
            return None
        # a read contiguous along the reduced dim that the results share (layer_norm's per-row mean and rstd
        # in its weight's gradient: stride 0 along the result dim) is one load per reduced row; any other
        # makes this a row reduction
        if any(c == 1 and x != 0 for x, c in along) or not any(c == 1 for c, _ in along):
            return None
        return COLUMN_TILE

    def _group(self, group, dims, xs, parallel_inner):
        group_index = self.kernel.groups.index(group)
        outer_subs, outer_ranges = self.subs, self.ranges
        self.subs = outer_subs + self._group_subs[group_index]
        rs = inner_vars(len(group.inner))
        self.ranges = {**outer_ranges, **dict(zip(rs, group.inner))}
        reductions = [n for n in group.nodes if n.is_reduction]
        accs = {}
        clauses = []
        lanes = self._column_lanes(xs) if self.column is not None and reductions else None
        results, partials = {}, []          # column tiles: what the results read; float sums' block accumulators
        for node in reductions:
            data = node.buffer.data
            acc = self.new_var("acc")
            ctype = COMPUTE_TYPES[data.acc_dtype]
            init = _reduction_init(data.reduction_type, data.acc_dtype)
            nan = None
            if lanes is not None:           # one accumulator per lane of the column tile
                names = [acc]
                if data.reduction_type == "sum" and data.acc_dtype.is_floating_point:
                    names.append(f"{acc}_part")     # the current block of rows' sums: folded (_fold_rows)
                    partials.append((acc, names[1]))
                for name in names:
                    self.emit(f"{ctype} {name}_lanes[{COLUMN_TILE}];")
                    self.emit(f"for (int64_t {COLUMN_LANE_VAR} = 0; {COLUMN_LANE_VAR} < {COLUMN_TILE}; "
                              f"++{COLUMN_LANE_VAR}) {name}_lanes[{COLUMN_LANE_VAR}] = {init};")
                if data.reduction_type in ("max", "min") and data.acc_dtype.is_floating_point:
                    nan = self.new_var("nan")
                    self.emit(f"int {nan}_lanes[{COLUMN_TILE}] = {{0}};")
                    nan = f"{nan}_lanes[{COLUMN_LANE_VAR}]"
                accs[node.name] = (f"{names[-1]}_lanes[{COLUMN_LANE_VAR}]", nan)
                results[node.name] = (f"{acc}_lanes[{COLUMN_LANE_VAR}]", nan)
                continue
            self.emit(f"{ctype} {acc} = {init};")
            if data.reduction_type in ("max", "min") and data.acc_dtype.is_floating_point:
                nan = self.new_var("nan")      # an int: a bool reduction variable stops gcc vectorizing
                self.emit(f"int {nan} = 0;")
                clauses.append(f"reduction(|:{nan})")
            op = {"sum": "+", "max": "max", "min": "min"}[data.reduction_type]
            if data.acc_dtype == torch.bool:
                op = {"sum": "+", "max": "||", "min": "&&"}[data.reduction_type]
            clauses.append(f"reduction({op}:{acc})")
            accs[node.name] = (acc, nan)
        # a loop that surely runs (static sizes above 0, or size symbols, which are 2 or more) may have its
        # invariant loads hoisted before it (hoisted_load)
        if dims and all(size.is_Symbol or (size.is_Integer and size > 0) for _, size in dims):
            self.hoist = (self.lines, self._cse[-1], {str(var) for var, _ in dims} | {str(r) for r in rs} |
                          {str(COLUMN_LANE_VAR)}, {node.name for node in group.nodes}, list(self._cse))
        try:
            with self.block() as loop_body:
                for node in group.nodes:
                    if node.is_reduction:
                        self._reduction_update(node, xs, rs, *accs[node.name])
                    else:
                        node.buffer.store_body()(*node.body_args(xs, rs))
        finally:
            self.hoist = None
        if lanes is not None:               # the reduced rows outside, the tile's lanes innermost
            if partials:
                rows = self.new_var("rows")
                self.emit(f"int64_t {rows} = 0;")
            for depth, (var, size) in enumerate(dims):
                self.emit("    " * depth + f"for (int64_t {var} = 0; {var} < {cexpr(size)}; ++{var})")
            self.emit("{")
            self.emit("    #pragma omp simd")
            self.emit(f"    for (int64_t {COLUMN_LANE_VAR} = 0; {COLUMN_LANE_VAR} < {lanes}; ++{COLUMN_LANE_VAR})")
            self.emit("    {")
            self.lines += ["        " + line for line in loop_body]
            self.emit("    }")
            if partials:
                self.emit(f"    if (++{rows} == {COLUMN_ROW_BLOCK})")
                self.emit("    {")
                self.emit(f"        {rows} = 0;")
                self._fold_rows(partials, "        ")
                self.emit("    }")
            self.emit("}")
            self._fold_rows(partials, "")
            self.subs, self.ranges = outer_subs, outer_ranges
            return reductions, results, lanes      # the results: _column_groups
        if dims:
            pragma = f"#pragma omp parallel for simd{self.parallel_if}" if parallel_inner else "#pragma omp simd"
            collapse = [f"collapse({len(dims)})"] if len(dims) > 1 else []
            self.emit(" ".join([pragma] + collapse + clauses))
            for depth, (var, size) in enumerate(dims):
                self.emit("    " * depth + f"for (int64_t {var} = 0; {var} < {cexpr(size)}; ++{var})")
        self.emit("{")
        self.lines += ["    " + line for line in loop_body]
        self.emit("}")
        self.subs, self.ranges = outer_subs, outer_ranges
        for node in reductions:
            self._reduction_result(node, xs, *accs[node.name])

    def _fold_rows(self, partials, indent):
        """Adds each float sum's block of rows into its total and restarts the block: a sum over many rows
        rounds as a sum of COLUMN_ROW_BLOCK-row sums (eager's CPU sums cascade too), not one long chain."""
        lane = COLUMN_LANE_VAR
        self.emit(f"{indent}for (int64_t {lane} = 0; {lane} < {COLUMN_TILE}; ++{lane})")
        self.emit(f"{indent}{{")
        for total, part in partials:
            self.emit(f"{indent}    {total}_lanes[{lane}] = {total}_lanes[{lane}] + {part}_lanes[{lane}];")
            self.emit(f"{indent}    {part}_lanes[{lane}] = 0;")
        self.emit(f"{indent}}}")

    def _column_lanes(self, xs):
        """The lanes of this column tile: COLUMN_TILE, or fewer in the last tile."""
        size = self.column_size
        if size.is_Integer and size % COLUMN_TILE == 0:
            return str(COLUMN_TILE)
        if self.column_lanes is not None:
            return self.column_lanes
        size = cexpr(size)
        lanes = self.column_lanes = self.new_var("lanes")
        self.emit(f"const int64_t {lanes} = {size} - {COLUMN_TILE_VAR} * {COLUMN_TILE} < {COLUMN_TILE} ? "
                  f"{size} - {COLUMN_TILE_VAR} * {COLUMN_TILE} : {COLUMN_TILE};")
        return lanes

    def _reduction_update(self, node, xs, rs, acc, nan):
        data = node.buffer.data
        value = data.inner_fn(*node.body_args(xs, rs))
        if data.reduction_type == "sum":
            self.emit(f"{acc} = {acc} + {value};")
        elif data.acc_dtype == torch.bool:
            self.emit(f"{acc} = {acc} {'||' if data.reduction_type == 'max' else '&&'} {value};")
        else:
            cmp = ">" if data.reduction_type == "max" else "<"
            self.emit(f"{acc} = {value} {cmp} {acc} ? {value} : {acc};")
            if nan:
                self.emit(f"{nan} = {nan} | ({value} != {value});")

    def _reduction_result(self, node, xs, acc, nan):
        data = node.buffer.data
        value = acc
        if nan:
            value = f"({nan} ? {literal(float('nan'), data.acc_dtype)} : {acc})"
        result = self.cse(f"static_cast<{COMPUTE_TYPES[data.dtype]}>({value})", data.dtype)
        self.store(node.name, self.rewrite(node.write_index(xs, [])), result)

    def _function(self, body):
        names = []
        for group in self.kernel.groups:
            for node in group.nodes:
                rec = record(node.buffer.data.inner_fn, *node.body_args(outer_vars(len(self.kernel.outer)),
                                                                           inner_vars(len(group.inner))))
                for name, _ in rec.reads:
                    if name not in names and name not in self.kernel.local and name not in self.kernel.scratch:
                        names.append(name)
        for name in sorted(self.written, key=lambda n: [node.name for node in self.kernel.nodes].index(n)):
            if name not in names and name not in self.kernel.scratch:
                names.append(name)
        self.args = names
        params = []
        for name in names:
            const = "" if name in self.written else "const "
            params.append(f"{const}{STORAGE_TYPES[self.buffers[name].dtype]}* __restrict__ {name}")
        self.sizes = used_size_symbols("\n".join(body), self.size_names)
        params += [f"int64_t {name}" for name in self.sizes]
        lines = [f'extern "C" int {self.kernel.name}({", ".join(params)})', "{"]
        if self.uses_status:
            lines.append("    int gj_status = 0;")
        lines += ["    " + line for line in body]
        lines.append("    return " + ("gj_status;" if self.uses_status else "0;"))
        lines.append("}")
        return "\n".join(lines)


def used_size_symbols(source, names):
    """The size symbols among `names` that kernel source text uses, in a fixed order."""
    if not names:
        return ()
    found = set(re.findall(r"\b[a-z]+\d+\b", source)) & names
    return tuple(sorted(found, key=lambda n: (n[0], int(n[1:]) if n[1:].isdigit() else 0, n)))


@dataclasses.dataclass(frozen=True)
class Signature:
    """How to call a kernel: its pointer arguments (buffer names, in order), then the size symbols it
    takes as int64 arguments; whether it returns a status (STATUS_ERRORS: an index out of range, an
    integer division by zero)."""
    args: tuple
    returns_status: bool
    sizes: tuple = ()


def generate(graph, items):
    """The C++ source of a scheduled graph, and each kernel's Signature."""
    buffers = {b.name: b for b in graph.buffers()}
    size_names = {s.name for s in graph.size_symbols()}
    parts, signatures = [prelude()], {}
    if eager_functions():
        parts.append(f"// link: {shlex.quote(eager_math.library_path())}")
    first = {}      # a kernel's text with its name and parameters made positional -> the first kernel's name
    for item in items:
        if isinstance(item, Kernel):
            cg = CppKernel(item, buffers)
            cg.size_names = size_names
            with use_ops(CppOps(cg)):
                text = cg.generate()
            key = _positional(text, item.name, cg.args)
            if key in first:
                parts.append(_forwarding(text, first[key], cg.args, cg.sizes))
            else:
                first[key] = item.name
                parts.append(text)
            signatures[item.name] = Signature(tuple(cg.args), cg.uses_status, cg.sizes)
    return "\n\n".join(parts) + "\n", signatures


def _positional(text, name, args):
    """A kernel's source with its name and its pointer parameters renamed by position: two kernels with the
    same such text compute the same function of their arguments (a model's repeated layers: one body per
    distinct kernel, which halves gcc's time on a 12-layer training graph)."""
    if not args:
        return text.replace(name, "gj_kernel", 1)
    renames = {a: f"gj_p{i}" for i, a in enumerate(args)}
    pattern = re.compile(r"\b(" + "|".join(re.escape(a) for a in args) + r")\b")
    return pattern.sub(lambda m: renames[m.group(0)], text.replace(name, "gj_kernel", 1))


def _forwarding(text, target, args, sizes):
    """A kernel whose positional text equals `target`'s: its own exported name and parameters (the
    wrapper calls it by name), its body a call of `target`."""
    header = text.split("\n", 1)[0]
    return f"{header}\n{{\n    return {target}({', '.join([*args, *sizes])});\n}}"



class CppDevice:
    """The C++/OpenMP device of pipeline.py: one translation unit per graph, built into a shared library
    (runtime/cpp_build.py, cached on disk), called through ctypes by codegen/wrapper.py's `call`."""
    name = "C++"

    @staticmethod
    def wants(example_inputs):
        return True

    @staticmethod
    def unsupported_reason(gm, example_inputs):
        from .. import graph_checks
        return graph_checks.unsupported_reason(gm, example_inputs)

    def __init__(self, job):
        self.job = job
        self.signatures = self.lib = None

    def plan(self):
        """Nothing to choose: kernels run as generated, extern calls as ATen."""

    def codegen(self):
        source, self.signatures = generate(self.job.graph, self.job.items)
        return source

    def build(self):
        from ..runtime import load
        self.lib = load(self.job.source) if self.signatures else None

    def wrapper(self):
        from . import wrapper
        job = self.job
        eager_if_grad = any(getattr(t, "requires_grad", False) for t in job.example_inputs)
        code, call = wrapper.build(job.graph, job.items, self.signatures, self.lib, job.gm.forward, job.facts,
                                   eager_if_grad)
        if logs.enabled("output_code"):
            logs.log("output_code", f"wrapper:\n{code}\nkernels:\n{job.source}")
        call.wrapper_source = code
        call._boxed_call = job.facts.boxed
        return call
