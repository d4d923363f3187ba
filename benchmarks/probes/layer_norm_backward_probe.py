"""LayerNorm forward and backward on square inputs (n x n, normalized over n), compiled by graphjit, one CPU
thread: microseconds per step, best of 5 rounds of 300 steps. A square input is where a column reduction
(the weight and bias gradients, sums down the columns) has the same loop sizes as the row statistics of
the input gradient (sums along the rows), so the scheduler's fusion rules decide whether they share a
kernel (scheduler.Kernel._column_refusal).

    OMP_NUM_THREADS=1 ./dev python 3.11 benchmarks/probes/layer_norm_backward_probe.py [--sizes 256,512]
"""
import argparse
import time

import torch

import graphjit


def step_us(n):
    norm = torch.nn.LayerNorm(n)
    compiled = graphjit.compile(norm, backend="graphjit")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=gen, requires_grad=True)
    grad = torch.randn(n, n, generator=gen)

    def step():
        compiled(x).backward(grad)
    for _ in range(20):
        step()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(300):
            step()
        best = min(best, (time.perf_counter() - start) / 300 * 1e6)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="256,512")
    args = p.parse_args()
    torch.set_num_threads(1)
    for n in map(int, args.sizes.split(",")):
        print(f"{n} x {n}: {step_us(n):.1f} us a step")


if __name__ == "__main__":
    main()
