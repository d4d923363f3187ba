"""The math functions that eager's CPU kernels compute float32/float64 transcendentals with, for our C++
kernels: a helper library over the MKL (VML) and Sleef functions libtorch_cpu exports, built once per torch,
CPU capability and compiler flags (cpp_build's cache).

Eager computes exp, log, log2, sin, cos, tan, tanh and erf of a float tensor with MKL's vsExp ... (at::vml,
where torch has MKL) and exp2, expm1, log1p, atan2 and pow with Sleef's 1-ulp vector functions at its CPU
capability (Sleef_expm1f16_u10 for AVX512, Sleef_expm1f8_u10 for AVX2); glibc's libm and libmvec round
differently in the last bit. The helper exports, for each function, a scalar gj_eager_<fn>[f] and its
x86-64 vector-ABI variants (_ZGVdN8v_gj_eager_sinf ...), all computing each element with eager's function,
so that a kernel declaring the scalar `simd` gets eager's value in its vectorized body and its scalar tail
alike. (MKL's results do not depend on how many elements one call takes.)

    functions()       # {"sin", "exp", ...}, or empty where eager's kernels call libm
    scalar_name("sin", "float")   # gj_eager_sinf
    library_path()    # the helper library, for a kernel library to link
"""
import ctypes
import functools
import os
import platform

import shlex
import torch

# name -> (libm function, arity, where eager's kernel gets it where torch has MKL); "sleef_exp" is
# Sleef's exp, which eager's sigmoid calls
FUNCTIONS = {"exp": ("exp", 1, "mkl"), "log": ("log", 1, "mkl"), "log2": ("log2", 1, "mkl"),
             "sin": ("sin", 1, "mkl"), "cos": ("cos", 1, "mkl"), "tan": ("tan", 1, "mkl"),
             "tanh": ("tanh", 1, "mkl"), "erf": ("erf", 1, "mkl"), "exp2": ("exp2", 1, "sleef"),
             "expm1": ("expm1", 1, "sleef"), "log1p": ("log1p", 1, "sleef"), "atan2": ("atan2", 2, "sleef"),
             "pow": ("pow", 2, "sleef"), "sleef_exp": ("exp", 1, "sleef")}
# MKL's VML names
_MKL = {"exp": "Exp", "log": "Ln", "log2": "Log2", "sin": "Sin", "cos": "Cos", "tan": "Tan", "tanh": "Tanh",
        "erf": "Erf"}
# torch's CPU capability -> the width (bytes) of its Vectorized registers
CAPABILITY_WIDTH = {"AVX512": 64, "AVX2": 32}
# the vector-ABI variants gcc calls for a `simd` declaration: (ISA letter, width in bytes, macro it needs)
VARIANTS = (("b", 16, "__SSE2__"), ("c", 32, "__AVX__"), ("d", 32, "__AVX2__"), ("e", 64, "__AVX512F__"))
_VECTOR_TYPES = {("float", 16): "__m128", ("float", 32): "__m256", ("float", 64): "__m512",
                 ("double", 16): "__m128d", ("double", 32): "__m256d", ("double", 64): "__m512d"}
_MACROS = {16: "__SSE2__", 32: "__AVX__", 64: "__AVX512F__"}

_MAP = """
// F applied to each of L elements of a value of type V, NL at a time through Sleef's NL-lane function
template <typename V, typename T, int L, typename NV, int NL, NV (*F)(NV)>
static inline V gj_sleef1(V x) {
    constexpr int N = L > NL ? L : NL;
    alignas(64) T in[N] = {}; alignas(64) T out[N];
    __builtin_memcpy(in, &x, sizeof(V));
    for (int i = 0; i < L; i += NL) {
        NV v; __builtin_memcpy(&v, in + i, sizeof(NV));
        NV r = F(v); __builtin_memcpy(out + i, &r, sizeof(NV));
    }
    V r; __builtin_memcpy(&r, out, sizeof(V)); return r;
}
template <typename V, typename T, int L, typename NV, int NL, NV (*F)(NV, NV)>
static inline V gj_sleef2(V x, V y) {
    constexpr int N = L > NL ? L : NL;
    alignas(64) T a[N] = {}; alignas(64) T b[N] = {}; alignas(64) T out[N];
    __builtin_memcpy(a, &x, sizeof(V)); __builtin_memcpy(b, &y, sizeof(V));
    for (int i = 0; i < L; i += NL) {
        NV u, v; __builtin_memcpy(&u, a + i, sizeof(NV)); __builtin_memcpy(&v, b + i, sizeof(NV));
        NV r = F(u, v); __builtin_memcpy(out + i, &r, sizeof(NV));
    }
    V r; __builtin_memcpy(&r, out, sizeof(V)); return r;
}
// F (an MKL VML array function) applied to each of L elements of a value of type V
template <typename V, typename T, int L, void (*F)(long long, const T*, T*)>
static inline V gj_vml(V x) {
    alignas(64) T in[L]; alignas(64) T out[L];
    __builtin_memcpy(in, &x, sizeof(V));
    F(L, in, out);
    V r; __builtin_memcpy(&r, out, sizeof(V)); return r;
}
"""


def sleef_name(fn, ctype, width):
    """Eager's Sleef function for fn at its Vectorized width: Sleef_sinf16_u10, Sleef_sind4_u10 ..."""
    return f"Sleef_{fn}{'f' if ctype == 'float' else 'd'}{width // (4 if ctype == 'float' else 8)}_u10"


def mkl_name(fn, ctype):
    return f"v{'s' if ctype == 'float' else 'd'}{_MKL[fn]}"


def scalar_name(name, ctype):
    return f"gj_eager_{name}{'f' if ctype == 'float' else ''}"


def _providers(mkl):
    """name -> "mkl" or "sleef": MKL's where torch has it, Sleef's otherwise."""
    return {name: provider if mkl else "sleef" for name, (_, _, provider) in FUNCTIONS.items()}


def source(width, mkl):
    """The helper's C++ source for eager's Vectorized width (bytes), with MKL's functions or not."""
    lines = ["#include <immintrin.h>", _MAP, f"#ifdef {_MACROS[width]}", 'extern "C" {']
    for name, provider in sorted(_providers(mkl).items()):
        fn, arity, _ = FUNCTIONS[name]
        for ctype, size in (("float", 4), ("double", 8)):
            if provider == "mkl":
                native = mkl_name(fn, ctype)
                lines.append(f"void {native}(long long, const {ctype}*, {ctype}*);")
                mapped = f"gj_vml<{{v}}, {ctype}, {{lanes}}, {native}>"
            else:
                nv, native = _VECTOR_TYPES[ctype, width], sleef_name(fn, ctype, width)
                lines.append(f"{nv} {native}({', '.join([nv] * arity)});")
                mapped = f"gj_sleef{arity}<{{v}}, {ctype}, {{lanes}}, {nv}, {width // size}, {native}>"
            lines += _wrappers(name, arity, ctype, size, mapped)
    lines += ["}", "#endif"]
    return "\n".join(lines) + "\n"


def _wrappers(name, arity, ctype, size, mapped):
    """The scalar function and its vector-ABI variants, each through `mapped` (a template over the value
    type {v} and its number of elements {lanes})."""
    scalar = scalar_name(name, ctype)
    args = ["x", "y"][:arity]

    def define(v, symbol, lanes):
        params = ", ".join(f"{v} {a}" for a in args)
        return f"{v} {symbol}({params}) {{ return {mapped.format(v=v, lanes=lanes)}({', '.join(args)}); }}"
    out = [define(ctype, scalar, 1)]
    for isa, width, macro in VARIANTS:
        lanes = width // size
        out += [f"#ifdef {macro}", define(_VECTOR_TYPES[ctype, width], f"_ZGV{isa}N{lanes}{'v' * arity}_{scalar}",
                                          lanes), "#endif"]
    return out


def _capability_width():
    return CAPABILITY_WIDTH.get(torch.backends.cpu.get_cpu_capability()) if platform.machine() == "x86_64" else None


@functools.cache
def _setting():
    """(Vectorized width, whether eager's vml calls MKL) where eager's kernels compute with these functions
    here (x86-64 at an AVX2 or AVX512 capability, libtorch_cpu exporting them), else None."""
    width = _capability_width()
    if width is None:
        return None
    try:
        torch_cpu = ctypes.CDLL(_torch_cpu_path())
    except OSError:
        return None
    mkl = torch.backends.mkl.is_available() and all(
        hasattr(torch_cpu, mkl_name(FUNCTIONS[name][0], ctype)) for name in _MKL for ctype in ("float", "double"))
    needed = [sleef_name(FUNCTIONS[name][0], ctype, width) for name, provider in _providers(mkl).items()
              if provider == "sleef" for ctype in ("float", "double")]
    return (width, mkl) if all(hasattr(torch_cpu, n) for n in needed) else None


def functions():
    """The FUNCTIONS our kernels compute as eager does: all of them where _setting() says so, else none."""
    return frozenset(FUNCTIONS) if _setting() else frozenset()


def library_path():
    """The helper library's path (built, or found in cpp_build's cache, and loaded)."""
    from ..runtime import cpp_build
    torch_lib = os.path.dirname(_torch_cpu_path())
    text = (f"// link: {shlex.join([f'-L{torch_lib}', '-ltorch_cpu', f'-Wl,-rpath,{torch_lib}'])}\n"
            f"// eager's math in torch {torch.__version__}\n" + source(*_setting()))
    return cpp_build.built_path(text)


def _torch_cpu_path():
    return os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
