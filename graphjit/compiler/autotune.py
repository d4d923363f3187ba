"""mode="max-autotune": each Triton kernel's block sizes and warps picked by timing candidates on the GPU.

The heuristics of codegen/triton.py (pointwise_blocks, reduction_blocks) give one configuration per kernel.
Autotuning generates the kernel again for a handful of others (same loops and fusion, other XBLOCK /
RBLOCK / num_warps), compiles them all in one parallel batch, times each on buffers shaped like the real
ones, and keeps the fastest. The choice is cached on disk, keyed by the kernel's source (its name left
out, so the same kernel in another graph or process reuses it), the GPU, and the Triton version:

    <cache_dir>/autotune/<key>.json     {"config": {"XBLOCK": 64, "RBLOCK": 1024, "num_warps": 8}, "ms": ...}

A damaged cache file is ignored and rewritten. Timing: the launches are queued behind a short GPU sleep
so that the measured time is the kernels' own, not the CPU's launch rate.
"""
import hashlib
import json
import os
import time

from ..cache_files import write_whole
from .. import logs
from ..progress import Progress
from .. import config

# How many launches of each candidate are timed (after 2 warm-up launches).
TIMED_LAUNCHES = 10


def candidates(launch):
    """Configurations worth timing for a kernel of launch's kind and sizes (the heuristic's one excluded)."""
    xnumel, rnumel, transposed = launch.sizes
    current = {**launch.constexprs, "num_warps": launch.num_warps}
    found = []

    def add(**cfg):
        if cfg != current and cfg not in found:
            found.append(cfg)
    cap_x = _pow2_at_least(xnumel)
    if launch.kind == "pointwise":
        for xblock, warps in ((256, 2), (512, 4), (1024, 4), (1024, 8), (2048, 8), (4096, 8)):
            if xblock <= max(cap_x, 256):
                add(XBLOCK=xblock, num_warps=warps)
    elif launch.kind == "persistent reduction":
        rblock = launch.constexprs["RBLOCK"]
        for xblock in (1, 2, 4, 8, 16, 32, 64):
            if xblock > cap_x or xblock * rblock > 16384:
                continue
            base = max(1, min(8, xblock * rblock // 512))
            for warps in {base, min(16, base * 2)}:
                add(XBLOCK=xblock, RBLOCK=rblock, num_warps=warps)
    elif transposed:
        for xblock, rblock, warps in ((32, 32, 4), (64, 64, 8), (128, 32, 8), (64, 16, 4)):
            if xblock <= max(cap_x, 32):
                add(XBLOCK=xblock, RBLOCK=min(rblock, _pow2_at_least(rnumel)), num_warps=warps)
    else:
        for xblock, rblock, warps in ((1, 1024, 4), (1, 2048, 8), (1, 4096, 8), (2, 1024, 4), (4, 512, 4),
                                      (8, 512, 8)):
            if xblock <= cap_x and rblock <= max(_pow2_at_least(rnumel), 512):
                add(XBLOCK=xblock, RBLOCK=rblock, num_warps=warps)
    return [cfg for cfg in found if valid(cfg, launch)][:8]


def valid(cfg, launch):
    """Whether cfg (from the cache: possibly stale or damaged) is a configuration of launch's kernel that
    computes the same thing: same parameters, powers of two, a persistent reduction's block covering the row."""
    heuristic = {**launch.constexprs, "num_warps": launch.num_warps}
    if not isinstance(cfg, dict) or cfg.keys() != heuristic.keys():
        return False
    if not all(isinstance(v, int) and v > 0 and v & (v - 1) == 0 for v in cfg.values()):
        return False
    if cfg["num_warps"] > 32 or cfg["XBLOCK"] * cfg.get("RBLOCK", 1) > 65536:
        return False
    return launch.kind != "persistent reduction" or cfg["RBLOCK"] == launch.constexprs["RBLOCK"]


def _pow2_at_least(n):
    return 1 << max(0, int(n) - 1).bit_length()


# ---------------------------------------------------------------------------------------------------------
# The on-disk choices
# ---------------------------------------------------------------------------------------------------------


def cache_key(kernel_source, kernel_name, device):
    import torch
    import triton
    gpu = torch.cuda.get_device_name(device) if getattr(device, "type", None) == "cuda" else "interpreter"
    source = kernel_source.replace(kernel_name, "KERNEL") if kernel_name else kernel_source
    text = "\n".join([source, gpu, triton.__version__, config.codegen_key(), "v1"])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _path(key):
    return os.path.join(config.cache_dir, "autotune", f"{key}.json")


def load_choice(key):
    """The cached configuration for key, or None (missing, unreadable or malformed: tuned again)."""
    try:
        with open(_path(key), encoding="utf-8") as f:
            data = json.load(f)
        cfg = data["config"]
        if isinstance(cfg, dict):
            return cfg
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def store_choice(key, cfg, timings):
    directory = os.path.dirname(_path(key))
    os.makedirs(directory, exist_ok=True)
    write_whole(_path(key), json.dumps({"config": cfg, "ms": timings}).encode("utf-8"))


# ---------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------


def time_launch(compiled_kernel, launch, tensors, device):
    """Milliseconds per launch of one compiled kernel on `tensors` (its arguments, in order)."""
    import torch
    raw = torch.cuda.current_stream(device).cuda_stream
    run, function, metadata = compiled_kernel.run, compiled_kernel.function, compiled_kernel.packed_metadata
    constexprs = list(launch.constexprs.values())

    def go():
        run(launch.grid, 1, 1, raw, function, metadata, None, None, None, *tensors, *constexprs)
    return time_call(go, device)


def time_call(go, device):
    """Milliseconds of GPU time per call of go() (which only queues GPU work)."""
    import torch
    stream = torch.cuda.current_stream(device)
    go()
    go()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)           # ~1 ms: the launches below queue up before the GPU reaches them
    start.record(stream)
    for _ in range(TIMED_LAUNCHES):
        go()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / TIMED_LAUNCHES


def _timings(launches, compiled, arguments, device):
    """ms per launch of each launch's compiled kernel on arguments(launch); inf for one that fails."""
    timings = []
    for launch in launches:
        try:
            timings.append(time_launch(compiled[launch.name], launch, arguments(launch), device))
        except Exception as e:   # noqa: BLE001 -- a candidate that fails to launch is not a winner
            logs.log("autotune", f"{launch.name}: candidate failed ({type(e).__name__}: {e})")
            timings.append(float("inf"))
    return timings


def tune_matmuls(contests, compiled, arguments, device, epilogue_ms=lambda plan: 0.0):
    """contests: [(key, MatmulPlan, [TemplateLaunch ...])]. Each plan's ATen op (cuBLAS) races its
    template candidates on the same tensors; returns {extern item name: winning TemplateLaunch, or None
    where cuBLAS won} and stores each choice ({"extern": 1} for cuBLAS). A plan with an epilogue races
    cuBLAS plus the epilogue kernel's own time (epilogue_ms(plan))."""
    from .codegen import matmul
    chosen = {}
    progress = Progress("autotuning matmuls", len(contests))
    for done, (key, plan, candidates) in enumerate(contests):
        args = arguments(candidates[0])
        a, b, *bias = args[:len(matmul.views(plan))]
        op, op_args = plan.item.op, (*bias, a, b)       # addmm(bias, a, b), mm(a, b)
        extern_ms = time_call(lambda: op(*op_args), device) + epilogue_ms(plan)
        timings = _timings(candidates, compiled, lambda launch: args, device)
        best = min(range(len(candidates)), key=timings.__getitem__) if candidates else None
        if best is not None and timings[best] < 0.97 * extern_ms:    # a clear win only
            winner = candidates[best]
            cfg = dict(winner.cfg)          # tiled or one-row: what matmul.launch makes it from again
            chosen[plan.item.name] = winner
        else:
            cfg = {"extern": 1}
            chosen[plan.item.name] = None
        store_choice(key, cfg, [round(extern_ms, 5)] + [round(t, 5) for t in timings])
        logs.log("autotune", f"{plan.key_text()}: cuBLAS {extern_ms * 1e3:.1f} us, best template "
                             f"{min(timings, default=float('inf')) * 1e3:.1f} us -> {cfg}")
        progress.update(done + 1)
    progress.finish()
    return chosen


def tune(contests, compiled, arguments, device):
    """contests: [(key, [Launch, ...])], the first launch being the heuristic's. compiled: kernel name ->
    CompiledKernel. arguments(launch) -> its tensors. Returns {key: winning Launch} and stores the choices."""
    winners = {}
    progress = Progress("autotuning kernels", len(contests))
    for done, (key, launches) in enumerate(contests):
        timings = _timings(launches, compiled, arguments, device)
        best = min(range(len(launches)), key=timings.__getitem__)
        winner = launches[best]
        winners[key] = winner
        cfg = {**winner.constexprs, "num_warps": winner.num_warps}
        if timings[best] != float("inf"):
            store_choice(key, cfg, [round(t, 5) for t in timings])
        logs.log("autotune", f"{launches[0].name} ({launches[0].kind}, sizes {launches[0].sizes}): "
                             f"heuristic {timings[0] * 1e3:.1f} us, best {timings[best] * 1e3:.1f} us with {cfg}")
        progress.update(done + 1)
    progress.finish()
    return winners
