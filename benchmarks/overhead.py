"""Per-call cost of a cache hit on a tiny function: plain eager vs torch.compile(backend="eager") vs
graphjit.compile(backend="eager"), in one process. The difference to eager is the frontend's overhead:
guard checks, reading graph inputs, calling the graph, rebuilding the result. The last two columns are
what a user gets with no arguments: torch.compile's default (Inductor) and graphjit's (its own compiler:
the graph as a C++ kernel called from a generated wrapper).

--entry adds GPT-2 (transformers, 12 layers, 124M) and a ResNet of 4 x 3 BasicBlocks (tests/models/plain.py)
with a backend whose graph returns its first outputs again: what remains per call is the entry alone
(guards over the parameters, the config and the module tree, then rebuilding the output), for graphjit
and for torch.compile (Dynamo's guards run in C++).

    python benchmarks/overhead.py [--calls N] [--repeats R] [--entry]
"""
import argparse
import os
import platform
import statistics
import sys
import time

import torch

import graphjit


def tiny(x, y):
    return x + y


def tiny_module():
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())


def cached_graph(gm, example_inputs):
    """A backend whose compiled graph computes once and then returns those outputs: the graph costs ~0."""
    box = []

    def call(*args):
        if not box:
            box.append(gm(*args))
        return box[0]
    return call


def entry_overhead(calls, repeats):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 1))
    with torch.inference_mode():
        gj = per_call_us(graphjit.compile(model, backend=cached_graph), (ids,), calls, repeats)
        tc = per_call_us(torch.compile(model, backend=cached_graph), (ids,), calls, repeats)
    print(f"| GPT-2 124M entry (graph returns cached outputs) | - | {tc:.2f} | {gj:.2f} | - | - |")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
    from plain import ResNet      # BasicBlocks; 4 stages x 3 blocks: 25 convs, their stride/padding tuples
    model = ResNet(widths=(64, 128, 256, 512), blocks_per_stage=3).eval()
    images = torch.randn(1, 3, 32, 32)
    with torch.inference_mode():
        gj = per_call_us(graphjit.compile(model, backend=cached_graph), (images,), calls, repeats)
        tc = per_call_us(torch.compile(model, backend=cached_graph), (images,), calls, repeats)
    print(f"| ResNet, 4 x 3 BasicBlocks entry (graph returns cached outputs) | - | {tc:.2f} | {gj:.2f} | - | - |")


def per_call_us(fn, args, calls, repeats):
    for _ in range(100):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--entry", action="store_true", help="also GPT-2's entry cost (see the docstring)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y = torch.randn(4), torch.randn(4)
    module = tiny_module().eval()
    inp = torch.randn(2, 8)
    cases = [("tiny function x + y", tiny, (x, y)), ("Linear+ReLU module", module, (inp,))]
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{args.calls} calls x {args.repeats} repeats, median us/call")
    print(f"| workload | eager | torch.compile(eager) | graphjit(eager) | graphjit overhead | torch.compile overhead "
          f"| torch.compile() | graphjit.compile() |")
    print(f"|---|---|---|---|---|---|---|---|")
    for name, fn, fargs in cases:
        with torch.no_grad():
            eager = per_call_us(fn, fargs, args.calls, args.repeats)
            tc = torch.compile(fn, backend="eager")
            tc_us = per_call_us(tc, fargs, args.calls, args.repeats)
            gj = graphjit.compile(fn, backend="eager")
            gj_us = per_call_us(gj, fargs, args.calls, args.repeats)
            tc_default = per_call_us(torch.compile(fn), fargs, args.calls, args.repeats)
            gj_default = per_call_us(graphjit.compile(fn), fargs, args.calls, args.repeats)
        print(f"| {name} | {eager:.2f} | {tc_us:.2f} | {gj_us:.2f} | {gj_us - eager:+.2f} | {tc_us - eager:+.2f} "
              f"| {tc_default:.2f} | {gj_default:.2f} |")
    if args.entry:
        entry_overhead(max(1, args.calls // 40), args.repeats)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
