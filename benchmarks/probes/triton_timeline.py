"""Where a cold compile's Triton time goes: spans of Triton's work by thread, recorded by wrapping its
entry points in the running process (benchmarks/cold_compile.py --timeline installs it in the child).

    compile      triton.compiler.compile of one kernel (a pool thread, under AsyncCompileMode): the
                 front end (AST -> TTIR, Python, holds the GIL) is what its stages don't cover
    stage:NAME   one of its stages (ttir, ttgir, llir: MLIR/LLVM passes; ptx; cubin: ptxas)
    build        compile_module_from_src: a C module (a kernel launcher, or Triton's CUDA utilities) built
                 with the host compiler, or found in Triton's cache
    warmup       graphjit's submission of one kernel on the calling thread (binder, cache key, specialization)
    load         graphjit's per-kernel finish: the compile awaited, the binary loaded, the launcher built
    compile_all  graphjit's whole Triton step of one graph

report() prints, per kind, the count, the summed seconds and the seconds some thread spent in it (the
union of its spans), then every span (start relative to the first, duration, thread).
"""
import collections
import functools
import threading
import time

SPANS = []          # (kind, label, thread name, start, end)


def _wrap(kind, fn, label=lambda *a, **k: ""):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            try:
                text = label(*args, **kwargs)
            except Exception:   # noqa: BLE001 -- a label is only for reading
                text = "?"
            SPANS.append((kind, text, threading.current_thread().name, start, time.perf_counter()))
    return timed


def _kernel_name(src, *args, **kwargs):
    return getattr(getattr(src, "fn", None), "__name__", "") or str(getattr(src, "name", ""))[:40]


def install():
    import triton.compiler
    import triton.compiler.compiler as compiler
    from triton import knobs
    import triton.backends.nvidia.driver as nvidia_driver
    from graphjit.compiler.runtime import triton_build

    timed_compile = _wrap("compile", compiler.compile, _kernel_name)
    triton.compiler.compile = compiler.compile = timed_compile

    def hook(backend, stages, options, language, capability):
        for name in list(stages):
            stages[name] = _wrap(f"stage:{name}", stages[name])
    knobs.runtime.add_stages_inspection_hook = hook
    nvidia_driver.compile_module_from_src = _wrap("build", nvidia_driver.compile_module_from_src,
                                                  lambda *a, **k: k.get("name", ""))
    triton_build.compile_all = _wrap("compile_all", triton_build.compile_all,
                                     lambda module, launches, *a, **k: f"{len(launches)} launches")
    triton_build._finish = _wrap("load", triton_build._finish)
    _wrap_warmups(triton_build)


def _wrap_warmups(triton_build):
    """Each kernel's warmup() call inside compile_all, on the calling thread."""
    from triton.runtime.jit import JITFunction
    original = JITFunction.warmup

    def warmup(self, *args, **kwargs):
        return _wrap("warmup", original, lambda s, *a, **k: s.__name__)(self, *args, **kwargs)
    JITFunction.warmup = warmup


def _union(spans):
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def report(limit=400):
    if not SPANS:
        print("triton timeline: no spans (no Triton compile ran)")
        return
    t0 = min(s[3] for s in SPANS)
    kinds = collections.defaultdict(list)
    for kind, _, _, start, end in SPANS:
        kinds[kind].append((start, end))
    print("| kind | count | summed s | wall s (union) |")
    print("|---|---|---|---|")
    for kind, spans in sorted(kinds.items()):
        print(f"| {kind} | {len(spans)} | {sum(e - s for s, e in spans):.3f} | {_union(spans):.3f} |")
    print()
    threads = {}
    for kind, label, thread, start, end in sorted(SPANS, key=lambda s: s[3])[:limit]:
        t = threads.setdefault(thread, len(threads))
        print(f"{start - t0:8.3f} +{end - start:6.3f}  t{t:<2} {kind:12} {label}")
