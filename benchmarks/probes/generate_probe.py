"""GPT-2 generate() (DynamicCache, batch 1, greedy): where a token's time goes, torch.compile against graphjit
(model.forward compiled in the default mode) and eager, in one process.

For each engine, after warm-up (compiles done):
    ms/token   steady generate() of --tokens new tokens, the median of --runs calls
    kernels    CUDA kernels per token and their GPU time per token (torch.profiler over one generate()),
               and the kernels that take the most GPU time
    cProfile   one generate()'s Python functions by own time (ms per token) and the compiled forward's
               cumulative time per token

    python benchmarks/probes/generate_probe.py [--tokens 32] [--runs 5] [--engines eager,torch,graphjit]
"""
import argparse
import cProfile
import functools
import os
import pstats
import statistics
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torch  # noqa: E402

import dynamic  # noqa: E402


def kernels(model, ids, tokens):
    """(kernels per token, GPU µs per token, [(µs per token, launches per token, name)] top 12, CUDA API
    calls {name: (calls per token, CPU µs per token)})."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        dynamic.generate_with(model, ids, tokens)
    table = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start:
            n, total = table.get(e.name, (0, 0.0))
            table[e.name] = (n + 1, total + e.time_range.end - e.time_range.start)
    api = {}
    for e in prof.key_averages():
        if e.key.startswith("cu"):
            api[e.key] = (round(e.count / tokens, 2), round(e.cpu_time_total / tokens, 1))
    launches = sum(n for n, _ in table.values())
    busy = sum(t for _, t in table.values())
    top = sorted(((round(t / tokens, 1), round(n / tokens, 2), name[:100]) for name, (n, t) in table.items()),
                 reverse=True)[:12]
    return round(launches / tokens, 1), round(busy / tokens, 1), top, api


def forward_share(model, ids, tokens):
    """ms per token spent inside model.forward (the compiled function; not waiting for the GPU after it)
    and in the whole generate()."""
    import time
    forward, spent = model.forward, [0.0]

    @functools.wraps(forward)       # generate() passes the arguments forward's signature names
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    model.forward = timed
    try:
        _, seconds = dynamic.generate_with(model, ids, tokens)
    finally:
        model.forward = forward
    return round(spent[0] / tokens * 1e3, 3), round(seconds / tokens * 1e3, 3)


def python_profile(model, ids, tokens, rows=25):
    prof = cProfile.Profile()
    prof.enable()
    dynamic.generate_with(model, ids, tokens)
    prof.disable()
    stats = pstats.Stats(prof).stats
    own = sorted(((tt, nc, f"{func[2]} ({os.path.basename(func[0])}:{func[1]})")
                  for func, (cc, nc, tt, ct, _) in stats.items()), reverse=True)[:rows]
    total = sum(tt for (cc, nc, tt, ct, _) in stats.values())
    return round(total / tokens * 1e3, 3), [(round(tt / tokens * 1e3, 3), round(nc / tokens, 2), name)
                                             for tt, nc, name in own]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--engines", default="eager,torch,graphjit")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    for name in args.engines.split(","):
        model, counter = dynamic.engine(name, dynamic.build("gpt2", device, False))
        ids = dynamic.prompt(8, model.config.vocab_size, device)
        for _ in range(2):
            dynamic.generate_with(model, ids, args.tokens)
        times = [dynamic.generate_with(model, ids, args.tokens)[1] for _ in range(args.runs)]
        ms = statistics.median(times) / args.tokens * 1e3
        print(f"\n=== {name}: {ms:.3f} ms/token (runs {[round(t / args.tokens * 1e3, 3) for t in times]}), "
              f"graphs {counter.graphs if counter else '-'}", flush=True)
        inside, whole = forward_share(model, ids, args.tokens)
        print(f"inside forward {inside} ms/token of {whole}")
        if device.type == "cuda":
            launches, busy, top, api = kernels(model, ids, args.tokens)
            print(f"kernels per token {launches}, GPU us per token {busy}")
            for row in top:
                print("   ", row)
            print("CUDA API (calls per token, CPU us per token):",
                  dict(sorted(api.items(), key=lambda kv: -kv[1][1])))
        total, own = python_profile(model, ids, args.tokens)
        print(f"cProfile: {total} ms per token of own time (profiled); top functions (ms/token, calls/token):")
        for row in own:
            print("   ", row)
        del model
        torch.cuda.empty_cache() if device.type == "cuda" else None


if __name__ == "__main__":
    main()
