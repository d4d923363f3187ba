"""Where a training step's peak GPU memory goes: torch.compile (Inductor) vs graphjit, one workload of
benchmarks/train.py at a time. After warm-up steps (compiles), one step runs under torch's memory
history recorder; replaying its allocations finds the step's peak, and the tensors alive there are
grouped by where they were allocated (the innermost frame in generated code, model code or the
optimizer; graphjit's wrappers and Inductor's modules are in linecache, so their lines are shown).

    python3 benchmarks/probes/train_memory.py --only vit,gpt2 [--engines torch.compile,graphjit]

GPU only (torch.cuda.memory._record_memory_history).
"""
import argparse
import collections
import linecache
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import train  # noqa: E402  (benchmarks/train.py: workloads and the Engine step)

_SKIP = ("/torch/", "/contextlib.py", "/functools.py", "/graphjit/compiler/training.py", "/graphjit/capture/",
         "/graphjit/api.py", "train_memory.py", "/benchmarks/train.py")


def where(frames):
    """The innermost frame worth naming: generated code first, else the first frame outside torch and
    graphjit's plumbing."""
    for frame in frames:
        name = frame["filename"]
        if name.startswith("<graphjit") or name.startswith(train._CACHE):
            line = linecache.getline(name, frame["line"]).strip()
            return f"{name}:{frame['line']} {line[:110]}"
    for frame in frames:
        name = frame["filename"]
        if not any(part in name for part in _SKIP) and not name.startswith("<"):
            return f"{name.rsplit('/', 2)[-1]}:{frame['line']} {frame['name']} " \
                   f"{linecache.getline(name, frame['line']).strip()[:90]}"
    return "? " + " < ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']}" for f in frames[:4])


def peak_of(trace, baseline):
    """Replays one device's trace: (peak bytes, live allocations at the peak {addr: (size, frames)}, the
    frames of the allocation that reached the peak, its place among the trace's events as a fraction)."""
    live, total, peak, at_peak, peak_frames, peak_at = {}, baseline, baseline, {}, [], 0.0
    for i, event in enumerate(trace):
        action = event["action"]
        if action == "alloc":
            live[event["addr"]] = (event["size"], event.get("frames", []))
            total += event["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
                peak_frames, peak_at = event.get("frames", []), i / max(1, len(trace))
        elif action == "free_completed":
            entry = live.pop(event["addr"], None)
            total -= entry[0] if entry is not None else event["size"]
    return peak, at_peak, peak_frames, peak_at


def region(frames):
    """Which code allocated: a generated wrapper or Inductor module (its file name), else where()."""
    for frame in frames:
        name = frame["filename"]
        if name.startswith("<graphjit") or name.startswith(train._CACHE):
            return name.rsplit("/", 1)[-1]
    return where(frames)


def measure(key, name, steps):
    _, _, factory, batch_factory = train.WORKLOADS[key]
    torch.manual_seed(0)
    base = factory(True)
    g = torch.Generator().manual_seed(1)
    batch = batch_factory(True, g, "cuda")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    engine = train.Engine(name, base, "cuda")
    for _ in range(steps):
        engine.step(*batch, autocast=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    engine.step(*batch, autocast=True)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated()
    replayed, live, peak_frames, peak_at = peak_of(snapshot["device_traces"][0], start)
    groups = collections.defaultdict(lambda: [0, 0])
    for size, frames in live.values():
        g = groups[where(frames)]
        g[0] += size
        g[1] += 1
    print(f"\n== {key} {name}: before the step {(start - engine.allocated_before) / 2**30:.2f} GiB (weights, "
          f"optimizer state), step peak {(peak - engine.allocated_before) / 2**30:.2f} GiB (replayed "
          f"{(replayed - engine.allocated_before) / 2**30:.2f}); alive at the peak, allocated in the step: "
          f"{sum(s for s, _ in live.values()) / 2**30:.2f} GiB in {len(live)} blocks", flush=True)
    print(f"  the peak is reached {100 * peak_at:.0f}% into the step's allocation events, by {where(peak_frames)}")
    regions = collections.defaultdict(lambda: collections.Counter())
    for size, frames in live.values():
        regions[region(frames)][size] += 1
    for label, sizes in sorted(regions.items(), key=lambda kv: -sum(s * n for s, n in kv[1].items())):
        total = sum(s * n for s, n in sizes.items())
        blocks = ", ".join(f"{n}x {s / 2**20:.1f}" for s, n in sorted(sizes.items(), key=lambda kv: -kv[0] * kv[1])[:8])
        print(f"  {total / 2**20:9.1f} MiB in {label}: {blocks} MiB")
    for label, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {size / 2**20:9.1f} MiB {count:4d}x  {label}")
    del engine
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="vit,gpt2")
    parser.add_argument("--engines", default="torch.compile,graphjit")
    parser.add_argument("--steps", type=int, default=2, help="warm-up steps before the recorded one")
    args = parser.parse_args()
    for key in args.only.split(","):
        for name in args.engines.split(","):
            measure(key, name, args.steps)


if __name__ == "__main__":
    main()
