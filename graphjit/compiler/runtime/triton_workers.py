"""Triton compiles in worker processes (off by default: GRAPHJIT_TRITON_COMPILE_WORKERS=N turns it on).

In one process, a graph's kernels compile in a thread pool, but Triton's per-kernel Python (binding, AST
to TTIR) holds the GIL: on an H200 host ResNet-50's 14 kernels took 1.26 s to submit and the pool's
threads barely overlapped. Processes have a GIL each. The work is split so that the workers need neither
torch nor a GPU:

    specs = specializations(module, launches, example_args)   # this process: Triton's JIT binds each
                                                               # launch's arguments, nothing compiles
    pool().compile(specs)                                      # workers: Triton's own preload() compiles
                                                               # each into Triton's on-disk cache
    ... compile_all() as before: each warmup() finds its binary in the cache

The parent learns what Triton would compile through its `jit_cache_hook` (called with the JIT's own
serialized specialization before any compile; returning True skips the compile). A worker is a
`python -c` process with a stand-in for Triton's driver that names the parent's GPU target, so
`JITFunction.preload` runs there without CUDA. Messages are length-prefixed pickles over the worker's
stdin and stdout. A job that fails in a worker is only a lost head start: the parent compiles it itself.
"""
import atexit
import inspect
import os
import pickle
import struct
import subprocess
import sys
import threading

from ... import logs

class StandInDriver:
    """Triton's driver as far as JITFunction's binding, preload() and compile() ask it: the GPU target
    (a worker has no CUDA; the tests have no GPU)."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_target(self):
        return self.target

    def get_current_stream(self, device=None):
        return 0


# The worker: no torch, no graphjit; Triton and the generated kernel modules only.
WORKER = r'''
import importlib.util, os, pickle, struct, sys, time, traceback
out = sys.stdout.buffer
sys.stdout = sys.stderr                     # prints from Triton must not corrupt the replies

def read():
    head = sys.stdin.buffer.read(4)
    if len(head) < 4:
        return None
    return pickle.loads(sys.stdin.buffer.read(struct.unpack("<I", head)[0]))

def reply(obj):
    data = pickle.dumps(obj)
    out.write(struct.pack("<I", len(data)) + data)
    out.flush()

{driver}
try:                                        # the one-time start, before the first job arrives
    from triton.runtime.cache import triton_key
    triton_key()
    import triton.backends.nvidia.compiler  # noqa: F401
except Exception:
    pass
modules, ready = {}, False
while True:
    job = read()
    if job is None:
        break
    path, module_name, name, spec, target = job
    start = time.perf_counter()
    try:
        if not ready:
            from triton.backends.compiler import GPUTarget
            from triton.runtime.driver import driver
            driver.set_active(StandInDriver(GPUTarget(**target)))
            ready = True
        if path not in modules:
            # the parent's module name: Triton's cache key and preload() both use the qualified name
            loaded = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loaded)
            sys.modules[module_name] = module       # the JIT reads kernel source through inspect
            loaded.loader.exec_module(module)
            modules[path] = module
        getattr(modules[path], name).preload(spec)
        reply(("ok", time.perf_counter() - start))
    except BaseException:
        reply(("error", traceback.format_exc()[-2000:]))
'''.replace("{driver}", inspect.getsource(StandInDriver))


class Worker:
    def __init__(self):
        self.start()

    def start(self):
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)
        self.process = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)

    def run(self, job):
        if self.process.poll() is not None:     # it died (killed, out of memory): a new one
            self.start()
        data = pickle.dumps(job)
        self.process.stdin.write(struct.pack("<I", len(data)) + data)
        self.process.stdin.flush()
        head = self.process.stdout.read(4)
        if len(head) < 4:
            raise RuntimeError("the compile worker exited")
        return pickle.loads(self.process.stdout.read(struct.unpack("<I", head)[0]))

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except Exception:   # noqa: BLE001 -- at exit, a worker that doesn't stop is killed
            self.process.kill()


class CompilePool:
    """Worker processes, started once (they stay for the process's later graphs)."""

    def __init__(self, size):
        self.workers = [Worker() for _ in range(size)]
        self.lock = threading.Lock()
        atexit.register(self.close)

    def compile(self, jobs):
        """Runs every job (module path, module name, kernel name, specialization data, target dict);
        returns {kernel name: error text} of those that failed."""
        pending, failures = list(jobs), {}

        def drain(worker):
            while True:
                with self.lock:
                    if not pending:
                        return
                    job = pending.pop()
                try:
                    status, detail = worker.run(job)
                except Exception as e:   # noqa: BLE001 -- the parent compiles it instead
                    status, detail = "error", f"{type(e).__name__}: {e}"
                if status != "ok":
                    failures[job[2]] = detail
        threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in self.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, detail in failures.items():
            logs.log("output_code", f"compile worker failed on {name} (compiled here instead): {detail}")
        return failures

    def close(self):
        for worker in self.workers:
            worker.close()


_pool = None
_pool_lock = threading.Lock()


def pool(size):
    """The process's CompilePool of `size` workers (started on the first call)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CompilePool(size)
        return _pool


def specializations(module, launches, example_args, options_of):
    """[(kernel name, Triton's serialized specialization)] of each launch, as Triton's JIT binds its
    example arguments, with nothing compiled. options_of(launch): the warmup's keyword options."""
    from triton import knobs
    found = {}

    def hook(**kwargs):
        found[kwargs["fn"].name] = kwargs["compile"]["specialization_data"]
        return True                     # skip the compile: a worker does it
    saved = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = hook
    try:
        for launch in launches:
            getattr(module, launch.name).warmup(*example_args[launch.name], grid=(1,), **options_of(launch))
    finally:
        knobs.runtime.jit_cache_hook = saved
    return found
