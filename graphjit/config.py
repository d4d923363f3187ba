"""Every setting of graphjit in one place: each knob with a comment, its type, its default and its
environment variable (GRAPHJIT_ and the name in capitals, unless `env=` says otherwise).

The environment is read once, when graphjit is imported; a value that does not parse is an error naming
the variable. At run time assign the attribute (`graphjit.config.recompile_limit = 16`) or, for a block,
use `patch`:

    with graphjit.config.patch(triton_mm_templates=0, vector_math=0):
        ...

Knobs marked `codegen` change the code the compiler generates or the choices it caches. Their values are
part of every on-disk cache key (`codegen_key()`): a kernel or a tuned choice made under one value is never
reused under another.
"""
import contextlib
import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Knob:
    name: str
    type: type
    default: object
    env: str
    codegen: bool


KNOBS = {}      # name -> Knob, in the order they are declared below


_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _parse(kind, raw):
    if kind is tuple:
        return tuple(raw.split())
    if kind is bool:        # bool("0") is True
        value = _BOOLS.get(raw.strip().lower())
        if value is None:
            raise ValueError(raw)
        return value
    return kind(raw)


def _knob(name, kind, default, codegen=False, env=None):
    knob = Knob(name, kind, default, "GRAPHJIT_" + (env or name.upper()), codegen)
    KNOBS[name] = knob
    raw = os.environ.get(knob.env)
    if raw is None or raw == "":
        return default
    try:
        return _parse(kind, raw)
    except ValueError:
        allowed = " (one of 0, 1, false, true, no, yes, off, on)" if kind is bool else ""
        raise ValueError(f"{knob.env}={raw!r} is not a valid {kind.__name__}{allowed} (default: {default!r})") from None


# ---- capture ------------------------------------------------------------------------------------------

# How many cache entries one code object may collect before graphjit stops translating it and runs it
# eagerly (with one warning naming the guard that kept failing). torch.compile uses 8 as well.
recompile_limit = _knob("recompile_limit", int, 8)

# A fresh entry whose own guards fail on the call it was made for (the state it checks changed while it
# compiled: the compile imported a module that `name in sys.modules` reads) runs that call eagerly, and the
# next call translates again. True raises instead: the test suite sets it, so that a guard the trace got
# wrong fails loudly.
strict_fresh_guards = _knob("strict_fresh_guards", bool, False)

# A backend that compiles for concrete sizes only (graphjit's compiler today, aot_eager) gets a graph with
# dynamic sizes once per distinct set of sizes; past this many it runs the captured graph as it is (with
# one warning). Backends that take symbolic sizes (eager, inductor, a callable backend) get it once.
dynamic_sizes_limit = _knob("dynamic_sizes_limit", int, 16)

# In a CUDA-graph mode (reduce-overhead, max-autotune), a graph compiled for all sizes records a CUDA graph
# per distinct set of sizes (each holds its own input and output buffers); past this many, other sizes run
# the compiled graph as plain launches (with one warning).
cudagraph_sizes_limit = _knob("cudagraph_sizes_limit", int, 16)

# A CUDA graph reads the inputs it writes (a KV cache) in place. When they move (a new cache, a new
# generate() call), those totalling at most this many bytes are copied in and back out at every replay from
# then on (two launches); larger ones stay in place and the graph is recorded again.
cudagraph_copy_bytes = _knob("cudagraph_copy_bytes", int, 64 << 20)

# The backend used when compile() is given none: graphjit's own compiler (fused C++/OpenMP kernels on the
# CPU, Triton kernels on NVIDIA GPUs; a graph that needs gradients compiles its forward and backward through
# AOTAutograd; a graph the compiler refuses runs as captured).
# GRAPHJIT_BACKEND=eager runs every captured graph as it is (capture only).
default_backend = _knob("default_backend", str, "graphjit", env="BACKEND")

# How deep the interpreter inlines user function calls before giving up on the frame (guards against
# unbounded recursion during tracing).
max_inline_depth = _knob("max_inline_depth", int, 64)

# Upper bound on instructions interpreted for one frame, including inlined calls and unrolled loops.
# A frame above it runs eagerly: unrolling a loop of a million iterations is not capture.
max_instructions = _knob("max_instructions", int, 2_000_000)

# torch.tensor(a) of a NumPy array made while tracing (variables/numpyvars.py) is a constant tensor whose
# values are written into the graph (a.tolist()); an array of more elements than this is a graph break
# instead (CPython makes the tensor), so a large table neither bloats the graph nor slows the trace.
numpy_constant_limit = _knob("numpy_constant_limit", int, 1 << 16)

# Comma-separated artifacts to print on stderr (logs.py): graph_breaks, recompiles, guards, graph,
# bytecode, output_code, fusion, cudagraphs, autotune, or all.
logs = _knob("logs", str, "")

# A one-line progress report on stderr for compiles and autotuning longer than 2 s (progress.py); 0: off.
progress = _knob("progress", int, 1)

# A path: the run writes a compile report there (HTML) and its events beside it (.jsonl) when the process
# exits (reporting.py; `graphjit.report(path)` opens one for a block). REPORT_PROFILE=1 adds time per kernel.
report = _knob("report", str, "")
report_profile = _knob("report_profile", int, 0)

# 1: each kernel call of a generated wrapper runs inside torch.profiler.record_function("graphjit
# <graph>:<kernel>"), so profilers show time per kernel (a report with profile=True sets it).
profile_kernels = _knob("profile_kernels", int, 0, codegen=True)

# ---- the compiler: both devices -----------------------------------------------------------------------

# A graph the compiler fails on (an unsupported op pattern, a compiler bug) runs eagerly with one warning.
# 1 raises the error instead (the compiler's own tests do).
raise_errors = _knob("raise_errors", int, 0, env="COMPILER_RAISE")

# 1: compiled graphs (C++ and Triton) are kept on disk (cache_dir/graphs, runtime/graph_cache.py), so a
# later process that captures the same graph loads its kernels and wrapper instead of compiling it; 0: off.
graph_cache = _knob("graph_cache", int, 1)

# Where built kernels and autotuning choices are cached, keyed by a hash of source, compiler, flags,
# device and codegen_key().
cache_dir = _knob("cache_dir", str, os.path.join(os.path.expanduser("~"), ".cache", "graphjit", "kernels"))

# decompose traces each distinct call of a captured graph once and copies it for every call with the same
# function, constants and tensor layouts (op_templates.py), where the graph repeats enough for that to pay;
# 2: for every graph (tests and fuzzing); 0: the whole graph is traced call by call. All give one graph.
decompose_by_templates = _knob("decompose_by_templates", int, 1)

# The compiled wrapper checks each input's shape and strides per call (a few hundred ns per tensor) and
# runs the graph eagerly on a mismatch. -1: only when the graph does not come from graphjit's frontend,
# whose guards already check them (torch.compile's do too, but a custom caller might not); 1: always;
# 0: never.
check_inputs = _knob("check_inputs", int, -1, codegen=True)

# Realization: a pointwise value read by several ops is computed once into a buffer (instead of being
# recomputed inside each reader) if its body loads more than this many distinct values along its last dim
# (reads constant along it, such as per-row statistics, labels and scalars, do not count) ...
realize_reads_threshold = _knob("realize_reads_threshold", int, 2, codegen=True)
# ... or calls a transcendental op (exp, tanh, erf, pow ...), see scheduler.EXPENSIVE_OPS.
# Any value whose body has more than this many ops is computed into a buffer, to bound kernel size ...
realize_opcount_threshold = _knob("realize_opcount_threshold", int, 96, codegen=True)
# ... and any whose body (everything inlined into it, transitively) loads more than this many values:
# a chain of cheap steps stops growing there.
realize_loads_threshold = _knob("realize_loads_threshold", int, 32, codegen=True)

# A lazy value whose body reads through an index of more operations than this is realized: views that no
# strided layout expresses (`x.view(7, 3)` of a [3, 7] value) compose their index arithmetic, which
# no simplification collapses, and recording a body nested that way takes time exponential in the views.
realize_index_ops_threshold = _knob("realize_index_ops_threshold", int, 24, codegen=True)

# Most nodes fused into one kernel.
max_fusion_size = _knob("max_fusion_size", int, 64, codegen=True)

# A node of at least fusion_parallel_elements elements does not join a kernel whose outer loop (the one run
# in parallel: Triton programs, OpenMP threads) has fewer than fusion_parallel_rows iterations and fewer
# than the node's own would have: under a scalar loss's outer loop of one iteration, the activations a
# training forward saves were computed by one Triton program.
fusion_parallel_rows = _knob("fusion_parallel_rows", int, 1024, codegen=True)
fusion_parallel_elements = _knob("fusion_parallel_elements", int, 65536, codegen=True)

# A pointwise buffer read only by later inner loops of its kernel is kept per outer iteration in a stack
# array (a kernel's scratch) if an iteration makes at most this many of its elements.
scratch_max_elements = _knob("scratch_max_elements", int, 4096, codegen=True)

# Triton: an inference graph whose 2-D convolutions take NCHW inputs computes them, and what follows them,
# in channels-last (NHWC) memory, where cuDNN's kernels need no conversion (it converts each NCHW operand
# otherwise); outputs keep eager's strides. 0: eager's layouts throughout.
conv_channels_last = _knob("conv_channels_last", int, 1, codegen=True)

# ---- the compiler: C++/OpenMP (CPU) -------------------------------------------------------------------

# The C++ compiler and its flags. No -ffast-math: results must match eager up to rounding order.
# -fno-math-errno and -fno-trapping-math let gcc vectorize sqrt, floor, ceil, round and selects (errno and
# FP exception flags are never read). -fno-trapping-math also lets gcc fold (float)(int)x into trunc(x),
# which keeps x's -0.0, NaN and out-of-range values: CppOps.to_dtype converts through gj_to_int and makes
# an integer's float +0.0 again. -fwrapv: signed integer overflow wraps, as
# eager's int32/int64 arithmetic does (without it gcc assumes overflow never happens and folds
# `x + 1 > x` to true). -ffp-contract=off: a product stays rounded before what adds to it, as between
# eager's separate ops (gcc's default contracts a * b - c into one fma: softmax's x - max(x) of a fused
# product was then the product's rounding error, not 0, and a row came out NaN, fuzz 4800082).
# -fno-tree-slp-vectorize: gcc 12's straight-line (SLP) vectorizer, packing the scalar tail of an
# `omp simd` loop into vectors, loaded an accumulator lane before the earlier row's store to it, so a
# column sum over two rows of ten columns dropped a row from its last column (fuzz grad 11000913). Our
# hot loops are `omp simd` loops, vectorized by the loop vectorizer, which stays on.
# GRAPHJIT_CXX_FLAGS takes them space-separated.
cxx = _knob("cxx", str, "g++", codegen=True)
cxx_flags = _knob("cxx_flags", tuple, ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno",
                                       "-fno-trapping-math", "-fwrapv", "-ffp-contract=off",
                                       "-fno-tree-slp-vectorize"), codegen=True)

# A kernel runs its outer loop in parallel (OpenMP) only if it touches at least this many elements:
# below it, forking threads costs more than it saves.
parallel_threshold = _knob("parallel_threshold", int, 32768, codegen=True)

# Call glibc's vector math library (libmvec) for exp, log, tanh ... so loops using them vectorize (x86-64,
# glibc >= 2.22); float erf is then our own inline polynomial, vectorized with the loop (1.55 ulp at most).
# Their results differ from scalar libm by a few ulp, as eager's vectorized ones do.
vector_math = _knob("vector_math", int, 1, codegen=True)

# 1: float32/float64 exp, log, sin, tanh, erf, atan2, pow ... through the functions eager's CPU kernels call
# (MKL's vsExp ..., Sleef's 1-ulp functions, from libtorch_cpu; compiler/codegen/eager_math.py), in vectorized
# loops and their scalar tails alike: eager's bits where eager vectorizes, but 2-15x slower than libmvec
# (a library call per vector). 0: libmvec (vector_math).
eager_math = _knob("eager_math", int, 0, codegen=True)

# 1: random ops (dropout, rand, rand_like) run as eager's ATen kernels, with eager's bits, and are not fused.
# 0: they are drawn inside the fused kernels by Philox, seeded from torch's generator for the device at each
# call (torch.manual_seed makes runs reproducible; the numbers differ from eager's). Per compile:
# graphjit.compile(model, options={"fallback_random": True}), as with torch.compile.
fallback_random = _knob("fallback_random", int, 0, codegen=True)

# ---- the compiler: Triton (NVIDIA GPUs) ---------------------------------------------------------------

# 1: graphs on CPU tensors are compiled to Triton too and run in Triton's interpreter (slow; for CI).
triton_cpu = _knob("triton_cpu", int, 0, codegen=True)

# A reduction keeps whole rows in registers (one block, no loop) when rows have at most this many elements.
triton_persistent_rnumel = _knob("triton_persistent_rnumel", int, 1024, codegen=True)

# A kernel whose outer loop has fewer rows than this is launched as several kernels where its loops are
# independent (no buffer kept in registers crosses between them): the scheduler fuses loops of different
# shapes under a short outer loop, which on a GPU would leave all but a few programs idle.
triton_split_rows = _knob("triton_split_rows", int, 1024, codegen=True)

# 1: let Triton contract a * b + c into one fma on the GPU (its default). 0: each product is rounded before
# what adds to it, as between eager's separate kernels (the C++ kernels' -ffp-contract=off, same reason).
triton_fp_fusion = _knob("triton_fp_fusion", int, 0, codegen=True)

# Threads compiling a graph's kernels at once (LLVM and ptxas release the GIL).
triton_compile_threads = _knob("triton_compile_threads", int, min(16, os.cpu_count() or 1))

# Triton kernels compiled in this many worker processes before the graph's own (GIL-bound) compile pass,
# which then finds them in Triton's cache (runtime/triton_workers.py). 0: off. On an H200 host 16 workers
# shortened the Triton step but slowed the rest of the compile as much (benchmarks/RESULTS.md,
# 2026-11-30 07:40 UTC).
triton_compile_workers = _knob("triton_compile_workers", int, 0)

# Seconds a compile waits for the start-up thread computing Triton's cache key and building its CUDA
# utilities (runtime/triton_build.py, prewarm); past it the compile does that itself (a hung ptxas must
# not hang the compile).
triton_prewarm_wait_s = _knob("triton_prewarm_wait_s", float, 60.0)

# 1: a process's first translation starts Triton's start-up thread (triton_build.prewarm_if_cold) before
# capture, where its inputs are on a GPU and the compiled-graph cache holds no graph; 0: the first graph
# the cache does not hold starts it, at the compile's start.
triton_prewarm_at_capture = _knob("triton_prewarm_at_capture", int, 0)

# Embedding/gather indices out of range. -1: in the interpreter they raise IndexError (a status flag read
# after the kernel), on a GPU they fail a device-side assert, as eager's CUDA kernels do (no sync: the
# CUDA context is lost, and the error shows at the next sync); 0: never checked (they read row 0);
# 1: IndexError everywhere (a device sync after each kernel that checks); 2: device-side asserts
# everywhere (in the interpreter too: what tests use to run the GPU's form of the checks on the CPU).
triton_check_indices = _knob("triton_check_indices", int, -1, codegen=True)

# Launch compiled kernels straight through Triton's launcher (skips the JIT's per-call argument binding).
triton_fast_launch = _knob("triton_fast_launch", int, 1, codegen=True)

# mode="max-autotune": race Triton matmul templates against cuBLAS for each mm/addmm (0: cuBLAS always).
triton_mm_templates = _knob("triton_mm_templates", int, 1, codegen=True)

# max-autotune: a pointwise kernel that alone reads a template's product runs as the template's epilogue.
triton_mm_epilogues = _knob("triton_mm_epilogues", int, 1, codegen=True)

# Every mode: a 16-bit mm/addmm of one row (decode at batch 1) runs as the one-row Triton template, with
# the pointwise kernel after it as its epilogue (a GELU, a scale) instead of cuBLAS (0: cuBLAS always).
# On the H200 it beat cuBLAS by 10-30% on GPT-2's decode shapes and tied on one
# (benchmarks/probes/gemv_probe.py).
triton_gemv = _knob("triton_gemv", int, 1, codegen=True)

# 16-bit matrix products on CUDA whose output width N is not a multiple of 8 (GPT-2's 50257 logits) and
# that are large (M * N * K >= 2**30): cuBLAS has no fast Hopper kernel for rows of such a width (eager's
# [4096, 768] x [768, 50257] takes 3.4 ms on an H200, padded 0.45 ms). The output's rows are padded to a
# multiple of 8 and the result is a view of its first N columns: its strides differ from eager's, as
# torch.compile's do for the same product (benchmarks/probes/lm_head_probe.py). 0 turns it off.
triton_pad_mm = _knob("triton_pad_mm", int, 1, codegen=True)


# ---------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def patch(**changes):
    """Knobs set to the given values while the block runs, then restored (also on an exception)."""
    unknown = sorted(set(changes) - set(KNOBS))
    if unknown:
        raise AttributeError(f"graphjit.config has no knob {', '.join(unknown)}; known: {', '.join(KNOBS)}")
    module = globals()
    saved = {name: module[name] for name in changes}
    module.update(changes)
    try:
        yield
    finally:
        module.update(saved)


def codegen_key():
    """The current values of the knobs that change generated code or cached choices, as one string."""
    module = globals()
    return ";".join(f"{name}={module[name]!r}" for name, knob in KNOBS.items() if knob.codegen)
