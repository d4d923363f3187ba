"""GPT-2 one token (batch 1, no past KV) in a CUDA-graph mode: where one call's time goes, graphjit against
Inductor in the same process.

For each contender (eager, Inductor and graphjit in `--mode`):
    wall     ms per call, synchronized, timed in interleaved rounds (median and middle half)
    issue    ms until the call returns, without waiting for the GPU (median)
    span     µs from the first kernel's start to the last one's end within one call (torch.profiler;
             calls are separated by a sleep so that each call's kernels form one cluster)
    busy     µs of kernel time per call, and the kernels themselves (name, launches per call, µs each)
and graphjit's cProfile (the Python functions of a call, by own time) and, in a CUDA-graph mode, the
timeline of one synchronized call (see graphjit_timeline).

    python benchmarks/probes/decode_probe.py [--mode reduce-overhead] [--runs 300] [--out DIR]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torch  # noqa: E402

import graphjit  # noqa: E402
from gpu import gpt2, ids, interleaved_ms, issue_ms, python_profile  # noqa: E402


def kernel_timeline(fn, inputs, calls=20):
    """(median span µs, median busy µs, {kernel: (launches per call, µs per launch)}) over `calls` calls."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn(*inputs)
            torch.cuda.synchronize()
            time.sleep(0.002)
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                      if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start),
                     key=lambda k: k[0])
    clusters, current = [], []
    for k in kernels:
        if current and k[0] - current[-1][1] > 1000:      # a gap of 1 ms: the next call
            clusters.append(current)
            current = []
        current.append(k)
    if current:
        clusters.append(current)
    spans = [c[-1][1] - c[0][0] for c in clusters]
    busy = [sum(e - s for s, e, _ in c) for c in clusters]
    table = {}
    for c in clusters:
        for s, e, name in c:
            n, total = table.get(name, (0, 0.0))
            table[name] = (n + 1, total + (e - s))
    per_call = {name: (round(n / len(clusters), 2), round(total / n, 2)) for name, (n, total) in table.items()}
    return (round(statistics.median(spans), 1), round(statistics.median(busy), 1), len(clusters),
            round(statistics.median(len(c) for c in clusters), 1), per_call)


def graphjit_timeline(fn, inputs, calls=200):
    """Median µs of the phases of one synchronized graphjit call: entry (frontend: guards, arguments) until
    the CUDA-graph runner starts, runner until replay, the replay call itself, replay's return until the call
    returns (outputs handed out, Python objects rebuilt), and the wait for the GPU after that; plus the
    replay alone (replay + synchronize, no Python around it) and its GPU time (CUDA events)."""
    from graphjit.backends import cudagraphs
    marks = {}
    runner_call, replay = cudagraphs.CUDAGraphRunner.__call__, torch.cuda.CUDAGraph.replay

    def timed_runner(self, *args):
        marks.setdefault("runner", time.perf_counter())
        return runner_call(self, *args)

    def timed_replay(self):
        marks.setdefault("replay", time.perf_counter())
        replay(self)
        marks.setdefault("replayed", time.perf_counter())
        marks.setdefault("graph", self)

    cudagraphs.CUDAGraphRunner.__call__, torch.cuda.CUDAGraph.replay = timed_runner, timed_replay
    rows = []
    try:
        for _ in range(calls):
            torch.cuda.synchronize()
            marks.clear()
            start = time.perf_counter()
            fn(*inputs)
            returned = time.perf_counter()
            torch.cuda.synchronize()
            done = time.perf_counter()
            if "replay" in marks:
                rows.append((marks["runner"] - start, marks["replay"] - marks["runner"],
                             marks["replayed"] - marks["replay"], returned - marks["replayed"], done - returned))
    finally:
        cudagraphs.CUDAGraphRunner.__call__, torch.cuda.CUDAGraph.replay = runner_call, replay
    out = {name: round(statistics.median(r[i] for r in rows) * 1e6, 1) for i, name in enumerate(
        ("entry_to_runner", "runner_to_replay", "replay_call", "after_replay", "gpu_wait"))}
    graph = marks.get("graph")
    if graph is not None:
        alone, events = [], []
        for _ in range(50):
            torch.cuda.synchronize()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start = time.perf_counter()
            begin.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            alone.append(time.perf_counter() - start)
            events.append(begin.elapsed_time(end))
        out["replay_alone"] = round(statistics.median(alone) * 1e6, 1)
        out["replay_gpu"] = round(statistics.median(events) * 1e3, 1)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="reduce-overhead")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    model = gpt2()
    inputs = (ids(1, 1, 50257),)
    report = {"mode": args.mode}
    with torch.inference_mode():
        contenders = {"eager": model,
                      "inductor": torch.compile(model, mode=args.mode),
                      "graphjit": graphjit.compile(model, mode=args.mode)}
        for name, fn in contenders.items():
            for _ in range(3):
                fn(*inputs)
        walls = interleaved_ms(contenders, inputs, args.runs, report, "")
        for name, fn in contenders.items():
            if name not in walls:
                continue
            span, busy, calls, launches, kernels = kernel_timeline(fn, inputs)
            report[name] = dict(wall_ms=round(walls[name][0], 4), middle_half=walls[name][1],
                                issue_ms=round(issue_ms(fn, inputs, 50), 4), span_us=span, busy_us=busy,
                                launches_per_call=launches, profiled_calls=calls,
                                kernels=dict(sorted(kernels.items(), key=lambda kv: -kv[1][0] * kv[1][1])))
            print(f"{name}: wall {report[name]['wall_ms']:.3f} ms {walls[name][1]}, issue "
                  f"{report[name]['issue_ms']:.3f} ms, GPU span {span} us, busy {busy} us, "
                  f"{launches} kernels per call", flush=True)
        report["graphjit_cprofile"] = python_profile(contenders["graphjit"], inputs, calls=50)
        if args.mode != "default":
            report["graphjit_timeline_us"] = graphjit_timeline(contenders["graphjit"], inputs)
            print("graphjit timeline (us, median):", report["graphjit_timeline_us"], flush=True)
    for name in ("inductor", "graphjit"):
        if name in report:
            print(f"\n{name} kernels (launches per call, us each):")
            for kernel, (n, us) in report[name]["kernels"].items():
                print(f"  {n:5} x {us:7.2f}  {kernel[:110]}")
    print("\ngraphjit cProfile (ms per call own time, calls per call, function):")
    for row in report["graphjit_cprofile"]:
        print("  ", row)
    with open(os.path.join(args.out, f"decode_probe_{args.mode}.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
