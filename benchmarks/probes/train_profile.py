"""Where a graphjit training step spends GPU time: per workload of benchmarks/train.py, the first step's
seconds and where graphjit's compile spent them (its stages summed over the compiled halves; the rest is
capture, AOTAutograd's trace and partition, and running), the compiled halves (kernels, extern calls, ATen
fallbacks; whether any runs as captured or fell back to eager at call time), then torch.profiler's top
CUDA kernels over a few steps, graphjit's and Inductor's side by side.

    python benchmarks/probes/train_profile.py [--only resnet50,gpt2] [--steps 3] [--engines graphjit,torch.compile]
                                              [--dropout 0.1]
"""
import argparse
import collections
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import train  # noqa: E402  (benchmarks/train.py)
from graphjit.testing import CompileCounter  # noqa: E402
from graphjit.backends.registry import registered_backend  # noqa: E402
import graphjit  # noqa: E402


def step(fn, inputs, loss_of, opt):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_of(fn(**inputs))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def halves_summary(counter):
    for i, fn in enumerate(counter.compiled):
        for h in getattr(fn, "graphjit_halves", ()):
            c = h.compiled
            items = getattr(c, "items", None)
            if items is None:
                print(f"  graph {i} {h.which}: AS CAPTURED")
                continue
            from graphjit.compiler.scheduler import Kernel
            k = sum(isinstance(x, Kernel) for x in items)
            fallbacks = getattr(c.graph, "fallbacks", [])
            ops = collections.Counter(str(getattr(x, "op", "?")) for x in items if not isinstance(x, Kernel))
            print(f"  graph {i} {h.which}: {k} kernels, {len(items) - k} extern calls, {len(fallbacks)} fallbacks: "
                  f"{dict(ops.most_common(8))}")
            print(f"    fallbacks: {[str(f) for f in fallbacks][:10]}")


def compile_breakdown(counter, first):
    """graphjit's compile stages summed over every compiled half of the first step."""
    stages = collections.Counter()
    n = 0
    for fn in counter.compiled:
        for h in getattr(fn, "graphjit_halves", ()):
            n += 1
            for phase, seconds in (getattr(h.compiled, "timings", None) or {}).items():
                stages[phase] += seconds
    total = sum(stages.values())
    parts = ", ".join(f"{k} {v:.2f}" for k, v in stages.most_common())
    print(f"  compile stages over {n} halves: {total:.2f} s ({parts}); "
          f"capture, AOTAutograd and running: {first - total:.2f} s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="resnet50,gpt2")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--engines", default="graphjit,torch.compile")
    p.add_argument("--dropout", type=float, default=0.0, help="the transformers models' dropout (train.py's)")
    args = p.parse_args()
    train.DROPOUT = args.dropout
    for key in args.only.split(","):
        _, _, factory, batch_factory = train.WORKLOADS[key]
        torch.manual_seed(0)
        base = factory(True)
        inputs, loss_of = batch_factory(True, torch.Generator().manual_seed(1), "cuda")
        for engine in args.engines.split(","):
            model = copy.deepcopy(base).cuda().train()
            counter = None
            if engine == "graphjit":
                counter = CompileCounter(registered_backend("graphjit"))
                fn = graphjit.compile(model, backend=counter)
            else:
                fn = torch.compile(model)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            torch.cuda.synchronize()
            start = time.perf_counter()
            step(fn, inputs, loss_of, opt)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            for _ in range(2):
                step(fn, inputs, loss_of, opt)
            torch.cuda.synchronize()
            print(f"== {key} {engine}: first step {first:.2f} s")
            if counter is not None:
                compile_breakdown(counter, first)
                halves_summary(counter)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                    torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(args.steps):
                    step(fn, inputs, loss_of, opt)
                torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
            print(table)
            del fn, model, opt
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
