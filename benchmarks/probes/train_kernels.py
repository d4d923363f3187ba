"""Per-kernel time of a CPU training step, graphjit's kernels against Inductor's: for one workload of
benchmarks/train.py, both engines' steps interleaved under torch.profiler (graphjit's kernels in named
ranges: config.profile_kernels; Inductor's: torch._inductor.config.cpp.enable_kernel_profile), then per
engine the sum of the kernels' medians a step, the other ops by total time a step (matmuls, attention,
the optimizer, the wrappers' own time), and the slowest kernels. Medians over steps keep a step slowed
by another process on the machine out of the kernel numbers.

    OMP_NUM_THREADS=1 ./dev python 3.11 benchmarks/probes/train_kernels.py bert [--steps 20] [--top 25]
"""
import argparse
import bisect
import collections
import copy
import os
import statistics
import sys
import tempfile

_CACHE = tempfile.mkdtemp(prefix="graphjit-train-kernels-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("GRAPHJIT_CACHE_DIR", os.path.join(_CACHE, "graphjit"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402

import train  # noqa: E402  (benchmarks/train.py)
from graphjit import config  # noqa: E402

ENGINES = ("torch.compile", "graphjit")


def is_kernel(name):
    return name.startswith("graphjit ") or name.startswith("graph_")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=sorted(train.WORKLOADS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(1)
    config.profile_kernels = 1
    inductor_config.cpp.enable_kernel_profile = True
    _, _, factory, batch_factory = train.WORKLOADS[args.workload]
    torch.manual_seed(0)
    base = factory(False)
    g = torch.Generator().manual_seed(1)
    batches = [batch_factory(False, g, "cpu") for _ in range(2)]
    engines = {}
    for name in ENGINES:
        model = copy.deepcopy(base).train()
        engines[name] = (train.engine(name, model), torch.optim.AdamW(model.parameters(), lr=1e-4))

    def step(name, i):
        fn, opt = engines[name]
        inputs, loss_of = batches[i % 2]
        loss_of(fn(**inputs)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for name in ENGINES:
        for i in range(3):
            step(name, i)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            for name in ENGINES:
                with torch.profiler.record_function("ENGINE " + name):
                    step(name, i)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    spans = [(e.time_range.start, e.name[len("ENGINE "):]) for e in events if e.name.startswith("ENGINE ")]
    starts = [s for s, _ in spans]
    times = {name: collections.defaultdict(list) for name in ENGINES}
    for e in events:
        k = bisect.bisect_right(starts, e.time_range.start) - 1
        if k >= 0 and not e.name.startswith("ENGINE "):
            times[spans[k][1]][e.name].append(e.self_cpu_time_total / 1e3)
    for name in ENGINES:
        kernels = {k: (statistics.median(v) * len(v) / args.steps, len(v) / args.steps)
                   for k, v in times[name].items() if is_kernel(k)}
        others = {k: sum(v) / args.steps for k, v in times[name].items() if not is_kernel(k)}
        print(f"===== {name}: kernels {sum(ms for ms, _ in kernels.values()):.3f} ms a step "
              f"({sum(n for _, n in kernels.values()):.0f} calls)")
        for k, ms in sorted(others.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {ms:8.3f} ms  {k[:70]}")
        for k, (ms, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"    {ms:8.3f} ms x{n:.0f}  {k[-100:]}")


if __name__ == "__main__":
    main()
