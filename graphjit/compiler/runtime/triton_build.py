"""Triton modules: write the generated source to the kernel cache, import it, compile its kernels.

A graph's kernels are one Python module (codegen/triton.py prints it). The module is stored in the
cache directory as `triton_<hash of source>.py`, written under a temporary name and renamed into place
so no reader sees half a file; a cached file whose text does not hash to its name is rewritten, never
trusted. Triton compiles each @triton.jit kernel to a cubin and keeps that in its own on-disk cache
(~/.triton/cache, keyed by the kernel source, the options and the GPU), so a warm start skips LLVM/ptxas.

    module = load(source, interpret=False)
    compiled = compile_all(module, launches, device, example_args, threads)   # name -> CompiledKernel

Under GRAPHJIT_TRITON_CPU=1 the same source runs on CPU tensors in Triton's interpreter
(TRITON_INTERPRET=1, set only while graphjit imports or launches its kernels). Interpreter gaps are
bridged: it has no libdevice (`_interpreter_libdevice()` stands in with numpy functions of the same
names), and its bfloat16 <-> float32 casts differ from the GPU's (it truncates float32 -> bfloat16 and
mangles bfloat16 subnormals: `_cast_bf16_as_gpu`, patched in while graphjit's kernels run). Its
`tl.device_assert`s are made live (`_live_asserts`), as a GPU kernel compiled with Triton's debug option.
"""
import concurrent.futures
import contextlib
import functools
import hashlib
import itertools
import importlib.util
import math
import os
import sys
import threading
import time

from ... import logs
from ...cache_files import write_whole
from ...progress import Progress
from ... import config


_modules = {}                    # (source hash, interpret) -> module (this process)
_env_lock = threading.RLock()
_prewarm_thread = None
_prewarm_ready = threading.Event()   # set by the prewarm thread once compile_all need not wait for it
prewarm_times = {}               # perf_counter marks: started, key (triton_key done), utils, done; waited: seconds


def prewarm():
    """Starts, once per process and in a background thread, the one-time work of Triton's first compile
    or first load from its cache: its cache key (a hash of its own sources and its 100 MB library, 0.4 s
    on the H200 host), ptxas's version, its CUDA utilities module (a C compile on a cold cache, 0.3 s on
    an H100 host) and a first kernel's compile (_compile_first_kernel). The first CUDA graph that the
    compiled-graph cache does not hold starts it, so it runs while that graph decomposes, lowers and prints
    kernels (a graph loaded from the cache loads its binaries without Triton's start-up: load_binary); a
    process without a GPU skips it. compile_all waits for it up to the utilities module (wait_prewarm, `_prewarm_ready`):
    Triton's functools.lru_cache does not make a second caller wait for a result in progress, it computes
    the hash again, and a driver made meanwhile builds the module again; the first kernel's compile goes
    on beside the graph's own."""
    global _prewarm_thread
    if _prewarm_thread is not None:
        return

    def work():
        prewarm_times["started"] = time.perf_counter()
        try:
            import importlib.util
            import torch
            if importlib.util.find_spec("triton") is None or not torch.cuda.is_available():
                return
            if config.triton_compile_workers > 0:      # processes start now; each warms itself up
                from . import triton_workers
                triton_workers.pool(config.triton_compile_workers)
            from triton.runtime.cache import triton_key
            triton_key()
            prewarm_times["key"] = time.perf_counter()
            from triton.backends.nvidia.compiler import get_ptxas_version
            get_ptxas_version()
            from triton.runtime.driver import driver
            driver.active.utils         # Triton's CUDA utilities: a C module, built on a cold cache
            prewarm_times["utils"] = time.perf_counter()
            _prewarm_ready.set()
            _compile_first_kernel(driver.active.get_current_target())
        except Exception:   # noqa: BLE001 -- only a head start: the compile does this itself if it must
            pass
        finally:
            _prewarm_ready.set()
            prewarm_times["done"] = time.perf_counter()
    _prewarm_thread = threading.Thread(target=work, name="graphjit-triton-prewarm", daemon=True)
    _prewarm_thread.start()


def prewarm_if_cold(values):
    """prewarm() now, before capture, where config.triton_prewarm_at_capture is on, a CUDA tensor is among
    `values` (tensors, or modules: their first parameter or buffer) and the compiled-graph cache holds no
    graph at all: a first compile that will build every kernel, whose Triton start-up then runs beside the
    capture instead of being waited for. Where the cache holds graphs the call may be a warm start, which
    loads its kernels' binaries without Triton's start-up: the first cache miss starts it as before."""
    if not config.triton_prewarm_at_capture or _prewarm_thread is not None:
        return
    import torch
    on_cuda = False
    for v in values:
        if isinstance(v, torch.nn.Module):
            v = next(itertools.chain(v.parameters(), v.buffers()), None)
        if isinstance(v, torch.Tensor) and v.is_cuda:
            on_cuda = True
            break
    if not on_cuda:
        return
    folder = os.path.join(config.cache_dir, "graphs")
    try:
        cold = not any(name.endswith(".json") for name in os.listdir(folder))
    except OSError:
        cold = True
    if cold:
        prewarm()


def _compile_first_kernel(target):
    """Compiles a kernel of one store: a process's first compile also sets up MLIR, LLVM's NVPTX target
    and ptxas (0.2 s more than the same kernel compiled second, GPT-2's first kernel on an H100 host),
    which this pays in the prewarm thread. Cached by Triton like any kernel (a warm start loads it)."""
    import triton
    from triton.compiler import ASTSource
    from .triton_first_kernel import first_kernel
    triton.compile(ASTSource(fn=first_kernel, signature={"out": "*fp32"}, constexprs={}), target=target)


def wait_prewarm(timeout=None):
    """Waits for prewarm's thread, if one was started and is still running, to have Triton's cache key and
    CUDA utilities (at most `timeout` seconds, config.triton_prewarm_wait_s by default: past it the
    compile does the work itself)."""
    thread = _prewarm_thread
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        start = time.perf_counter()
        _prewarm_ready.wait(config.triton_prewarm_wait_s if timeout is None else timeout)
        prewarm_times["waited"] = prewarm_times.get("waited", 0.0) + time.perf_counter() - start


def source_hash(source):
    return hashlib.sha256(source.encode()).hexdigest()[:32]


@contextlib.contextmanager
def interpreting(enabled=True):
    """TRITON_INTERPRET=1 while the block runs (Triton reads it when a kernel is defined and launched)."""
    if not enabled:
        yield
        return
    import numpy as np
    from triton.runtime import interpreter
    from triton.runtime.interpreter import InterpreterBuilder
    # lanes outside masks compute too (log of a masked load's 0 ...), silently on a GPU: numpy says nothing
    with _env_lock, np.errstate(all="ignore"):
        old = os.environ.get("TRITON_INTERPRET")
        old_cast = InterpreterBuilder.cast_impl
        old_patch = getattr(interpreter, "_patch_lang_tensor", None)
        undo_asserts = _live_asserts(interpreter)
        os.environ["TRITON_INTERPRET"] = "1"
        InterpreterBuilder.cast_impl = _cast_bf16_as_gpu(old_cast)
        if old_patch is not None:
            interpreter._patch_lang_tensor = _scalar_index(old_patch)
        try:
            yield
        finally:
            undo_asserts()
            InterpreterBuilder.cast_impl = old_cast
            if old_patch is not None:
                interpreter._patch_lang_tensor = old_patch
            if old is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = old


class DeviceAssertFailed(AssertionError):
    """A kernel's tl.device_assert failed in Triton's interpreter (on a GPU: a device-side assert)."""


def _live_asserts(interpreter):
    """Makes tl.device_assert check its condition in the interpreter, as a kernel compiled with Triton's
    debug option does on a GPU (the form index checks take there: config.triton_check_indices). Triton's
    interpreter drops device_asserts (its options say debug=False) and its own check tests the truth of a
    handle object, which always passes; its debug option also checks integer arithmetic for overflow,
    which is left off (uint8 and int32 arithmetic wraps in torch). Returns a function that undoes it."""
    import dataclasses
    builder_cls, builder = interpreter.InterpreterBuilder, getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not dataclasses.is_dataclass(options) or not hasattr(builder_cls, "create_assert"):
        return lambda: None
    old_assert = builder_cls.create_assert

    def create_assert(self, condition, message):
        import numpy as np
        if not np.all(condition.data):
            raise DeviceAssertFailed(message)
    builder_cls.create_assert = create_assert
    # debug without Triton's integer overflow checks, as the GPU launches (torch's integers wrap)
    overflow = {"sanitize_overflow": False} if hasattr(options, "sanitize_overflow") else {}
    builder.options = dataclasses.replace(options, debug=True, **overflow)

    def undo():
        builder_cls.create_assert = old_assert
        builder.options = options
    return undo


def _scalar_index(patch_lang_tensor):
    """Triton 3.6's interpreter holds an int argument as a one-element array whose __index__ numpy 2
    refuses (`range(0, n, RBLOCK)` over a size argument fails); 3.8 squeezes it first, as this does."""
    def patch(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    return patch


def _cast_bf16_as_gpu(cast_impl):
    """bfloat16 <-> float32 casts as the GPU does them: Triton 3.6's interpreter truncates float32 ->
    bfloat16 (the GPU rounds to nearest even) and loses bits of bfloat16 subnormals it widens (the
    smallest becomes 0; the GPU's widening is exact)."""
    def cast(self, src, dst_type):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        if src.dtype.scalar == tl.bfloat16 and dst_type.scalar == tl.float32:
            widened = np.ascontiguousarray(src.data).view(np.uint16).astype(np.uint32) << 16
            return TensorHandle(widened.view(np.float32), dst_type.scalar)
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return cast_impl(self, src, dst_type)
        u = np.ascontiguousarray(src.data).view(np.uint32)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        rounded = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
        return TensorHandle(rounded, dst_type.scalar)
    return cast


def module_path(source):
    return os.path.join(config.cache_dir, f"triton_{source_hash(source)}.py")


def load(source, interpret=False):
    """The imported module of `source` (written to the cache if it is not there or not intact)."""
    key = (source_hash(source), interpret)
    if key in _modules:
        return _modules[key]
    path = _write_checked(source)
    name = f"graphjit_triton_{key[0]}{'_interp' if interpret else ''}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module           # inspect.getsource (the JIT reads kernel source) looks modules up
    with interpreting(interpret):
        spec.loader.exec_module(module)
    if interpret:
        module.libdevice = _interpreter_libdevice()
    _modules[key] = module
    return module


def _write_checked(source):
    """Path of the cached copy of source; a missing or damaged copy is (re)written atomically."""
    os.makedirs(config.cache_dir, exist_ok=True)
    path = module_path(source)
    try:
        with open(path, encoding="utf-8") as f:
            if source_hash(f.read()) == source_hash(source):
                return path
        logs.log("output_code", f"cached Triton module {path} does not match its hash; rewriting it")
    except (OSError, UnicodeDecodeError):
        pass
    write_whole(path, source.encode("utf-8"))
    return path


# ---------------------------------------------------------------------------------------------------------
# Compiling ahead of the first call, in parallel
# ---------------------------------------------------------------------------------------------------------


def compile_all(module, launches, device, example_args, threads, optional=(), phases=None):
    """Compiles every kernel of the module for its launch (Triton's AsyncCompileMode: the compiles run in a
    thread pool; LLVM and ptxas release the GIL), and loads each onto the GPU as soon as its compile is done.
    example_args: kernel name -> arguments for warmup (tensors or torch dtypes standing for aligned
    buffers). Returns kernel name -> CompiledKernel; a kernel named in `optional` (an autotuning candidate)
    that fails to compile or load is left out instead of failing the rest. phases: a dict that receives
    the seconds of each step (submit: Triton's per-kernel Python up to the pool; wait: compiles and loads
    still running after the last submission)."""
    import torch
    from triton.runtime._async_compile import AsyncCompileMode
    start = time.perf_counter()
    wait_prewarm()
    if config.triton_compile_workers > 0:
        _compile_in_workers(module, launches, device, example_args)
    ahead = time.perf_counter()
    finishing = {}
    # Loading a binary and building its launcher (a C compile when Triton's cache lacks one) happen lazily
    # at the first launch, one after another. Here a second pool does them as each compile finishes, while
    # later kernels are still being submitted and compiled: the launcher's C compile is a subprocess.
    with torch.cuda.device(device), concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool, \
            concurrent.futures.ThreadPoolExecutor(max(1, threads)) as loaders, \
            concurrent.futures.ThreadPoolExecutor(max(1, threads)) as builders:
        # ignore_errors: a failed compile is reported below, by the kernel's own _finish
        with AsyncCompileMode(pool, ignore_errors=True), _launchers_ahead(builders):
            for launch in launches:
                fn = getattr(module, launch.name)
                # torch dtypes stand for buffers graphjit allocates: warmup() makes them aligned MockTensors
                handle = fn.warmup(*example_args[launch.name], grid=(1,), **_warmup_options(launch))
                finishing[launch.name] = loaders.submit(_finish, device, handle)
            submitted = time.perf_counter()
        compiled = {}
        progress = Progress("compiling Triton kernels", len(finishing), start=start)
        try:
            for done, (name, future) in enumerate(finishing.items(), 1):
                kernel, step, error = future.result()
                if error is None:
                    compiled[name] = kernel
                elif name in optional:
                    # an autotuning candidate that doesn't compile or load (too much shared memory ...)
                    # just doesn't take part; any other kernel's failure fails the graph
                    logs.log("autotune", f"{name}: candidate failed to {step} ({type(error).__name__}: {error})")
                else:
                    loaders.shutdown(cancel_futures=True)      # the graph runs eagerly: skip the other loads
                    raise error
                progress.update(done)
        finally:
            progress.finish()
    end = time.perf_counter()
    steps = dict(workers=ahead - start, submit=submitted - ahead, wait=end - submitted)
    if phases is not None:
        phases.update(steps)
    logs.log("output_code", f"compiled {len(launches)} Triton kernels in {end - start:.2f} s ({threads} threads: "
                            + ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()) + ")")
    return compiled


@contextlib.contextmanager
def _launchers_ahead(builders):
    """While compile_all submits its kernels: each kernel's launcher, a C module Triton builds with the host
    compiler for a signature its cache lacks (0.2-0.36 s on an H100 host, after the kernel's compile), is
    built in `builders` as soon as the kernel is submitted, alongside its compile, from the specialization
    Triton's JIT hands its jit_cache_hook; the load then finds it in Triton's cache. The source is the one
    Triton's CudaLauncher makes for a kernel without tensor descriptors; any failure, or another source
    (another driver, descriptors), only loses the head start."""
    if not _launchers_per_signature():
        yield
        return
    from triton import knobs

    def hook(*, fn, compile, **_):
        builders.submit(_build_launcher, fn.jit_function, compile["signature"], compile["constants"])
        return False        # compile it as usual
    knobs.runtime.jit_cache_hook = hook
    try:
        yield
    finally:
        knobs.runtime.jit_cache_hook = None


def _launchers_per_signature():
    """Whether Triton's active driver is CUDA's and builds a launcher module per kernel signature (3.6; 3.8
    has one for every signature), with the JIT's cache hook free for _launchers_ahead."""
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        from triton.backends.nvidia import driver as nvidia
        return type(driver.active).__name__ == "CudaDriver" and hasattr(nvidia, "make_launcher") and \
            hasattr(nvidia, "compile_module_from_src") and knobs.runtime.jit_cache_hook is None
    except Exception:   # noqa: BLE001 -- no head start, no harm
        return False


def _build_launcher(jit_function, signature, constants):
    try:
        from triton.compiler import ASTSource
        from triton.backends.nvidia import driver as nvidia
        src = ASTSource(jit_function, signature, constants)
        code = nvidia.make_launcher(src.constants, dict(src.signature), None)
        nvidia.compile_module_from_src(src=code, name="__triton_launcher", library_dirs=nvidia.library_dirs(),
                                       include_dirs=nvidia.include_dirs, libraries=nvidia.libraries)
    except Exception as e:  # noqa: BLE001 -- the load builds it itself
        logs.log("output_code", f"launcher built ahead failed ({type(e).__name__}: {e})")


def _finish(device, handle):
    """(kernel, step, error) for one warmup's result: its compile awaited (under AsyncCompileMode a
    FutureKernel: this waits on its raw future; Triton's own finalizing, which records the kernel in the
    JIT's cache and calls its post-compile hook, stays with AsyncCompileMode's exit on the caller's thread),
    then the binary loaded onto the GPU and its launcher built. step names what failed."""
    future = getattr(handle, "future", None)
    try:
        kernel = future.result() if future is not None else handle
    except Exception as e:      # noqa: BLE001 -- handed back to compile_all, which knows if it may fail
        return None, "compile", e
    error = _load(device, kernel)
    return kernel, "load", error


def _warmup_options(launch):
    """The keyword options of a launch's warmup(): its constexprs, warps and stages, fma contraction
    (config.triton_fp_fusion); a kernel with device_asserts needs Triton's debug option (without its
    integer overflow checks)."""
    from ... import config
    debug = dict(debug=True, sanitize_overflow=False) if getattr(launch, "debug", False) else {}
    return dict(**launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages,
                enable_fp_fusion=bool(config.triton_fp_fusion), **debug)


def _compile_in_workers(module, launches, device, example_args):
    """Compiles the launches into Triton's on-disk cache in worker processes (triton_workers), so that
    compile_all's warmups find them there. Any failure only loses the head start."""
    import torch
    from triton.runtime.driver import driver
    from . import triton_workers
    try:
        with torch.cuda.device(device):
            specs = triton_workers.specializations(module, launches, example_args, _warmup_options)
            target = dict(driver.active.get_current_target().__dict__)
        path = module.__file__
        jobs = [(path, module.__name__, name, spec, target) for name, spec in specs.items()]
        if jobs:
            triton_workers.pool(config.triton_compile_workers).compile(jobs)
    except Exception as e:  # noqa: BLE001
        logs.log("output_code", f"compile workers skipped ({type(e).__name__}: {e})")


def _load(device, kernel):
    """Loads a compiled kernel onto the GPU and builds its launcher; the exception if that fails (too much
    shared memory for this GPU ...), else None."""
    import torch
    init = getattr(kernel, "_init_handles", None)
    if init is None:
        return None
    try:
        with torch.cuda.device(device):
            init()
    except Exception as e:      # noqa: BLE001 -- handed back to the caller, who knows if it may fail
        return e
    return None


# ---------------------------------------------------------------------------------------------------------
# Binaries kept with a graph: a warm start loads them without Triton's JIT or compiler
# ---------------------------------------------------------------------------------------------------------

BINARY_FORMAT = 2


@functools.cache
def _triton_fingerprint():
    """Triton's version and the size and modification time of its library and of the Python files that
    make a kernel's launcher and metadata: two builds with one version string (a source build, a nightly)
    differ here. A few stat calls, not Triton's own cache key (a hash of all its sources and library)."""
    import sysconfig
    import triton
    root = os.path.dirname(triton.__file__)
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    parts = [triton.__version__]
    for rel in (f"_C/libtriton.{ext}", "compiler/compiler.py", "backends/nvidia/driver.py",
                "backends/nvidia/driver.c", "backends/nvidia/compiler.py"):
        try:
            st = os.stat(os.path.join(root, rel))
            parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{rel}:-")
    return "|".join(parts)


def _compile_environment():
    """What else Triton's own cache key holds that changes a binary: the environment variables it names
    as invalidating its cache (TRITON_DEFAULT_FP_FUSION ...)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    return {str(k): str(v) for k, v in sorted(get_cache_invalidating_env_vars().items())}


def binary_record(kernel):
    """What load_binary needs to load a compiled kernel (a CompiledKernel of compile_all's) in another
    process without Triton's JIT, compiler or cache key: the binary, its metadata as Triton wrote it, the
    signature (argument names and types, in order) and constants its launcher is built for, and what the
    binary was made under (Triton's build, its cache-invalidating environment). None where one of them is
    not plain JSON, or the kernel's Triton keeps them elsewhere (the entry then compiles through Triton's
    cache, as before)."""
    import base64
    import json
    try:
        from triton.compiler.compiler import make_backend
        ext = make_backend(kernel.metadata.target).binary_ext
        metadata_path = next(p for c, p in kernel.metadata_group.items() if c.endswith(".json"))
        with open(metadata_path, encoding="utf-8") as f:
            metadata = f.read()
        json.loads(metadata)
        src = kernel.src
        if not all(type(name) is str and type(kind) is str for name, kind in src.signature.items()):
            return None     # a tuple argument's nested types: not kept
        constants = [[list(path) if isinstance(path, tuple) else path, value] for path, value in src.constants.items()]
        for path, value in constants:
            if type(value) not in (int, float, bool, str, type(None)) or \
                    (type(value) is float and not math.isfinite(value)) or \
                    not (isinstance(path, str) or all(type(i) is int for i in path)):
                return None
        binary = kernel.asm[ext]
        if not isinstance(binary, bytes) or binary != kernel.kernel:
            return None
        return {"format": BINARY_FORMAT, "triton": _triton_fingerprint(), "environment": _compile_environment(),
                "ext": ext, "binary": base64.b64encode(binary).decode(), "metadata": metadata,
                "signature": [[name, kind] for name, kind in src.signature.items()], "constants": constants,
                "hash": str(kernel.hash)}
    except Exception as e:  # noqa: BLE001 -- another Triton: the entry compiles through Triton's cache
        logs.log("output_code", f"kernel binary not kept ({type(e).__name__}: {e})")
        return None


_driver_lock = threading.Lock()


def _driver_ready():
    """Triton's active driver and its CUDA utilities module, made once: Triton makes them on first use
    without a lock, and threads loading binaries side by side would each make (or build) them."""
    with _driver_lock:
        from triton.runtime.driver import driver
        driver.active.utils         # noqa: B018 -- made on first access
        return driver


def load_binaries(module, records, device):
    """name -> kernel for each (name, record) of `records`, loaded by load_binary from `module`'s
    JITFunctions, side by side in threads (with Triton 3.6 a launcher missing from Triton's cache, a C
    module per signature, is built by the host compiler); raises the first failure."""
    _driver_ready()
    names = list(records)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(names), config.triton_compile_threads))) as pool:
        kernels = list(pool.map(lambda name: load_binary(getattr(module, name), records[name], device), names))
    return dict(zip(names, kernels))


def load_binary(fn, record, device):
    """The kernel of binary_record's `record` loaded onto `device` with its launcher, for the JITFunction
    `fn` it was compiled from; raises where the record does not fit (another format, Triton build,
    cache-invalidating environment, debug or instrumentation setting, GPU; a signature other than fn's
    arguments; a binary not of fn) or the load fails. Builds the CompiledKernel Triton would build from its
    cache folder's files (Triton 3.6 to 3.8 keep the same state), from the record instead of those files."""
    import base64
    import json
    from collections import namedtuple
    from types import SimpleNamespace
    import torch
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import CompiledKernel, make_backend
    if record.get("format") != BINARY_FORMAT or record.get("triton") != _triton_fingerprint():
        raise ValueError(f"a kernel binary of format {record.get('format')} from Triton {record.get('triton')}")
    if record.get("environment") != _compile_environment():
        raise ValueError("a kernel binary made under other cache-invalidating environment variables")
    signature = record["signature"]
    if [name for name, _ in signature] != list(fn.arg_names):
        raise ValueError(f"a kernel binary for arguments {[n for n, _ in signature]}, not {fn.arg_names}")
    metadata = json.loads(record["metadata"])
    if metadata.get("name") != fn.__name__ or metadata.get("hash") != record["hash"]:
        raise ValueError(f"the kernel binary of {metadata.get('name')}, not of {fn.__name__}")
    if (knobs.runtime.debug and not metadata.get("debug")) or \
            metadata.get("instrumentation_mode", "") != (knobs.compilation.instrumentation_mode or ""):
        raise ValueError("a kernel binary made without Triton's debug or instrumentation setting of this process")
    binary = base64.b64decode(record["binary"], validate=True)
    target = metadata["target"]
    metadata["target"] = GPUTarget(target["backend"], target["arch"], target["warp_size"])
    backend = make_backend(metadata["target"])
    if backend.binary_ext != record["ext"]:
        raise ValueError(f"a kernel binary of type {record['ext']}, where Triton makes {backend.binary_ext}")
    driver = _driver_ready()
    with torch.cuda.device(device):
        here = driver.active.get_current_target()
        if (here.backend, here.arch, here.warp_size) != (target["backend"], target["arch"], target["warp_size"]):
            raise ValueError(f"a kernel binary for {target}, not for this GPU ({here})")
        kernel = CompiledKernel.__new__(CompiledKernel)
        kernel.module = kernel.function = kernel._run = None     # what Triton 3.8's __del__ reads
        kernel.metadata = namedtuple("KernelMetadata", sorted(metadata))(**metadata)
        kernel.packed_metadata = backend.pack_metadata(kernel.metadata)
        kernel.src = SimpleNamespace(fn=fn, signature=dict(signature),
                                     constants={tuple(p) if isinstance(p, list) else p: v
                                                for p, v in record["constants"]})
        kernel.hash = record["hash"]
        kernel.name = kernel.metadata.name
        kernel.kernel = binary
        kernel.asm = {record["ext"]: binary}
        kernel.metadata_group = {}
        kernel._init_handles()
    if kernel.function is None or kernel._run is None:
        raise ValueError("the kernel binary did not load")
    return kernel


# ---------------------------------------------------------------------------------------------------------
# libdevice for the interpreter
# ---------------------------------------------------------------------------------------------------------


def _np_function(np_fn, bool_result=False):
    def apply(*args):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        handles = [a.handle if isinstance(a, tl.core.tensor) else a for a in args]
        first = next(a for a in args if isinstance(a, tl.core.tensor))
        datas = [h.data if isinstance(h, TensorHandle) else h for h in handles]
        with np.errstate(all="ignore"):
            data = np_fn(*datas)
        scalar = tl.int1 if bool_result else first.dtype
        data = np.asarray(data, dtype=bool if bool_result else datas[0].dtype)
        ty = tl.block_type(scalar, list(data.shape)) if data.ndim else scalar
        return tl.core.tensor(TensorHandle(data, scalar), ty)
    return apply


def _interpreter_libdevice():
    """numpy stand-ins for the libdevice functions generated kernels call (the interpreter has none)."""
    import types
    import numpy as np
    erf = np.vectorize(math.erf, otypes=[np.float64])
    table = {
        "tanh": np.tanh, "expm1": np.expm1, "log1p": np.log1p, "tan": np.tan, "sqrt": np.sqrt,
        "rsqrt": lambda x: 1 / np.sqrt(x), "trunc": np.trunc, "nearbyint": np.rint, "pow": np.power,
        "atan2": np.arctan2, "fmod": np.fmod, "erf": lambda x: erf(x).astype(x.dtype),
    }
    module = types.SimpleNamespace(**{name: _np_function(fn) for name, fn in table.items()})
    module.isinf = _np_function(np.isinf, bool_result=True)
    return module
