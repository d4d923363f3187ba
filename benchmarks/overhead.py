"""Per-call cost of a cache hit on a tiny function: plain eager vs torch.compile(backend="eager") vs
graphjit.compile(backend="eager"), in one process. The difference to eager is the frontend's overhead:
guard checks, reading graph inputs, calling the graph, rebuilding the result.

    python benchmarks/overhead.py [--calls N] [--repeats R]
"""
import argparse
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
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y = torch.randn(4), torch.randn(4)
    module = tiny_module().eval()
    inp = torch.randn(2, 8)
    cases = [("tiny function x + y", tiny, (x, y)), ("Linear+ReLU module", module, (inp,))]
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{args.calls} calls x {args.repeats} repeats, median us/call")
    print(f"| workload | eager | torch.compile(eager) | graphjit(eager) | graphjit overhead | torch.compile overhead |")
    print(f"|---|---|---|---|---|---|")
    for name, fn, fargs in cases:
        with torch.no_grad():
            eager = per_call_us(fn, fargs, args.calls, args.repeats)
            tc = torch.compile(fn, backend="eager")
            tc_us = per_call_us(tc, fargs, args.calls, args.repeats)
            gj = graphjit.compile(fn, backend="eager")
            gj_us = per_call_us(gj, fargs, args.calls, args.repeats)
        print(f"| {name} | {eager:.2f} | {tc_us:.2f} | {gj_us:.2f} | {gj_us - eager:+.2f} | {tc_us - eager:+.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
