"""Knobs of graphjit's compiler (the `graphjit` backend), each with a comment; GRAPHJIT_* env vars at import.

Kept next to the compiler while it is young; graphjit/config.py holds the frontend's knobs.
"""
import os


def _env_int(name, default):
    value = os.environ.get("GRAPHJIT_" + name)
    return int(value) if value else default


def _env_str(name, default):
    return os.environ.get("GRAPHJIT_" + name, default)


# Where compiled kernels (.so files) are cached, keyed by a hash of source + compiler + flags + CPU.
cache_dir = _env_str("CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "graphjit", "kernels"))

# The C++ compiler and its flags. No -ffast-math: results must match eager up to rounding order.
# -fno-math-errno and -fno-trapping-math let gcc vectorize sqrt, floor, ceil, round and selects (errno and FP
# exception flags are never read). -fno-trapping-math also lets gcc fold (float)(int)x into trunc(x), which
# keeps x's -0.0, NaN and out-of-range values: CppOps.to_dtype converts through gj_to_int and makes an
# integer's float +0.0 again.
cxx = _env_str("CXX", "g++")
# -fwrapv: signed integer overflow wraps, as eager's int32/int64 arithmetic does (without it gcc assumes
# overflow never happens and folds `x + 1 > x` to true).
cxx_flags = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math",
             "-fwrapv")

# A kernel runs its outer loop in parallel (OpenMP) only if it touches at least this many elements:
# below it, forking threads costs more than it saves.
parallel_threshold = _env_int("PARALLEL_THRESHOLD", 32768)

# Realization: a pointwise value read by several ops is computed once into a buffer (instead of being
# recomputed inside each reader) if its body loads more than this many values ...
realize_reads_threshold = _env_int("REALIZE_READS_THRESHOLD", 2)
# ... or calls a transcendental op (exp, tanh, erf, pow ...), see lowering.EXPENSIVE_OPS.
# Any value whose body has more than this many ops is computed into a buffer, to bound kernel size.
realize_opcount_threshold = _env_int("REALIZE_OPCOUNT_THRESHOLD", 96)

# Most nodes fused into one kernel.
max_fusion_size = _env_int("MAX_FUSION_SIZE", 64)

# The compiled wrapper checks each input's shape and strides per call (a few hundred ns per tensor) and
# runs the graph eagerly on a mismatch. -1: only when the graph does not come from graphjit's frontend,
# whose guards already check them (torch.compile's do too, but a custom caller might not); 1: always; 0: never.
check_inputs = _env_int("CHECK_INPUTS", -1)

# Call glibc's vector math library (libmvec) for exp, log, tanh, erf ... so loops using them vectorize
# (x86-64, glibc >= 2.22). Its results differ from scalar libm by a few ulp, as eager's vectorized ones do.
vector_math = _env_int("VECTOR_MATH", 1)

# 16-bit matrix products on CUDA whose output width N is not a multiple of 8 (GPT-2's 50257 logits) and that
# are large (M * N * K >= 2**30): cuBLAS has no fast Hopper kernel for rows of such a width (eager's
# [4096, 768] x [768, 50257] takes 3.4 ms on an H200, padded 0.45 ms). The output's rows are padded to a
# multiple of 8 and the result is a view of its first N columns: its strides differ from eager's, as
# torch.compile's do for the same product (benchmarks/lm_head_probe.py). 0 turns it off.
pad_mm = _env_int("TRITON_PAD_MM", 1)
# Triton kernels compiled in this many worker processes before the graph's own (GIL-bound) compile pass,
# which then finds them in Triton's cache (runtime/triton_workers.py). 0: off. On an H200 host 16 workers
# shortened the Triton step but slowed the rest of the compile as much (benchmarks/RESULTS.md, session 5).
triton_compile_workers = _env_int("TRITON_COMPILE_WORKERS", 0)

# A graph the compiler fails on (an unsupported op pattern, a compiler bug) runs eagerly with one warning.
# 1 raises the error instead (the compiler's own tests do).
raise_errors = _env_int("COMPILER_RAISE", 0)


def wrapper_checks_inputs():
    """check_inputs resolved for the graph being compiled now."""
    if check_inputs != -1:
        return bool(check_inputs)
    from .. import modes
    return not modes.inputs_guarded()
