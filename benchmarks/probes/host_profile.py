"""Where the host's time goes in a steady graphjit training step: for each workload of benchmarks/train.py,
the step's wall ms and the host's CPU ms per step (process time, the GPU's time excluded) for eager and
graphjit, then cProfile's top functions of graphjit's steps by own time and by cumulative time. A step
whose CPU ms is close to its wall ms is bound by the host.

    python benchmarks/probes/host_profile.py [--only bert] [--steps 10] [--top 40] [--inference]

--inference profiles the forward alone under no_grad (the bf16 inference workload of the same model).
"""
import argparse
import cProfile
import copy
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import train  # noqa: E402  (benchmarks/train.py)
import graphjit  # noqa: E402


def make_step(fn, model, loss_of, inference, device):
    opt = None if inference else torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(inputs):
        if inference:
            with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                fn(**inputs)
            return
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = loss_of(fn(**inputs))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def timed(step, inputs, steps, device):
    walls, cpus = [], []
    for _ in range(steps):
        torch.cuda.synchronize() if device == "cuda" else None
        w, c = time.perf_counter(), time.process_time()
        step(inputs)
        c = time.process_time() - c         # before the synchronize: the host's own work
        torch.cuda.synchronize() if device == "cuda" else None
        walls.append(time.perf_counter() - w)
        cpus.append(c)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="bert")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--inference", action="store_true")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    big = device == "cuda"
    for key in args.only.split(","):
        _, _, factory, batch_factory = train.WORKLOADS[key]
        torch.manual_seed(0)
        base = factory(big)
        inputs, loss_of = batch_factory(big, torch.Generator().manual_seed(1), device)
        print(f"== {key} ({'inference' if args.inference else 'training'}, {device})", flush=True)
        for name in ("eager", "graphjit"):
            model = copy.deepcopy(base).to(device)
            model.eval() if args.inference else model.train()
            fn = model if name == "eager" else graphjit.compile(model, backend="graphjit")
            step = make_step(fn, model, loss_of, args.inference, device)
            for _ in range(3):
                step(inputs)
            wall, cpu = timed(step, inputs, args.steps, device)
            print(f"  {name}: {wall:.2f} ms/step wall, {cpu:.2f} ms/step host CPU", flush=True)
            if name == "graphjit":
                prof = cProfile.Profile()
                prof.enable()
                timed(step, inputs, args.steps, device)
                prof.disable()
                for order in ("tottime", "cumulative"):
                    out = io.StringIO()
                    pstats.Stats(prof, stream=out).sort_stats(order).print_stats(args.top)
                    text = out.getvalue()
                    print(f"  -- graphjit, {args.steps} steps, by {order}:")
                    print(text[text.find("ncalls"):], flush=True)
            del fn, model, step
            torch.cuda.empty_cache() if device == "cuda" else None


if __name__ == "__main__":
    main()
