"""Why a regionally compiled model's step is slower than the whole-model compile: host time against GPU
time per step, for eager, graphjit whole and graphjit regions, in one process.

For each engine: median ms of synchronized steps; "host ms", the time until the call returns (before the
synchronize: what the host spends launching); and from torch.profiler over 3 steps, the kernels launched
per step and their summed CUDA time. A step whose host ms is close to its synchronized ms is bound by
the host; one whose kernel time is close to it, by the GPU. Then, for graphjit regions, where the host
time goes: one decoder layer's call, its entry's guard check and its compiled graph, timed alone.

    python benchmarks/probes/regions_probe.py [--layers 16 --hidden 2048 --batch 4 --seq 512]
"""
import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402


def main():
    from regions import make_model
    import graphjit
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    model, ids = make_model(args)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    engines = {"eager": model, "whole": graphjit.compile(model),
               "regions": graphjit.compile_regions(copy.deepcopy(model))}
    with torch.no_grad():
        for fn in engines.values():
            for _ in range(3):
                fn(ids, use_cache=False)
            sync()
        total = {n: [] for n in engines}
        host = {n: [] for n in engines}
        for _ in range(args.steps):
            for name, fn in engines.items():
                sync()
                start = time.perf_counter()
                fn(ids, use_cache=False)
                host[name].append(time.perf_counter() - start)
                sync()
                total[name].append(time.perf_counter() - start)
        print(f"Llama-style {args.layers} x {args.hidden}, batch {args.batch} x {args.seq}, {args.device}")
        print("| engine | ms | host ms | kernels/step | kernel ms/step |")
        print("|---|---|---|---|---|")
        for name, fn in engines.items():
            kernels, kernel_ms = profile(fn, ids, sync, args.device)
            print(f"| {name} | {statistics.median(total[name]) * 1e3:.2f} | "
                  f"{statistics.median(host[name]) * 1e3:.2f} | {kernels} | {kernel_ms:.2f} |")
        layer_costs(engines["regions"], ids, sync)


def profile(fn, ids, sync, device, steps=3):
    if device != "cuda":
        return 0, 0.0
    from torch.profiler import ProfilerActivity, profile as prof
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            fn(ids, use_cache=False)
        sync()
    events = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(events) // steps, sum(e.device_time_total for e in events) / 1e3 / steps


def layer_costs(regions, ids, sync):
    """One layer's call, its entry's guards and its graph, timed alone on the arguments a step gives it."""
    layer = regions.model.layers[0]
    captured = {}
    cls = type(layer)
    real = cls.__call__

    def spy(self, *a, **k):
        captured.setdefault("ak", (a, k))
        return real(self, *a, **k)
    cls.__call__ = spy
    regions(ids, use_cache=False)
    cls.__call__ = real
    a, k = captured["ak"]
    compiled = cls._graphjit_forward
    entry = compiled._cache.entries[0]
    graph = entry.__globals__["__gj_graph"]
    seen = {}

    def spy_graph(*xs):
        seen["xs"] = xs
        return graph(*xs)
    entry.__globals__["__gj_graph"] = spy_graph
    entry(compiled._closure, layer, *a, **k)
    entry.__globals__["__gj_graph"] = graph

    def host_us(f, n=200):
        sync()
        start = time.perf_counter()
        for _ in range(n):
            f()
        per = (time.perf_counter() - start) / n * 1e6
        sync()
        return per
    xs = seen["xs"]
    print(f"\none layer (regions), host us per call: layer(...) {host_us(lambda: layer(*a, **k)):.1f}, "
          f"entry {host_us(lambda: entry(compiled._closure, layer, *a, **k)):.1f}, "
          f"graph alone {host_us(lambda: graph(*xs)):.1f}")


if __name__ == "__main__":
    main()
