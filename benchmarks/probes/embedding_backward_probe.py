"""Embedding's weight gradient on the CPU, one thread: a compiled training step of an embedding (graphjit,
whose decomposition adds the gradient rows by index_add) against the same step with torch's decomposition
(index_put with accumulate=True, config knob-free: the ATen ops timed directly), and eager's own
embedding_dense_backward; microseconds per call, best of 5 rounds of 200 calls, interleaved in one process.

    OMP_NUM_THREADS=1 ./dev python 3.11 benchmarks/probes/embedding_backward_probe.py
"""
import time

import torch

import graphjit

SHAPES = [(1000, 512, 128), (512, 128, 128), (2, 512, 128), (30522, 2048, 64)]   # (rows, indices, width)


def best_us(fn, rounds=5, calls=200):
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main():
    torch.set_num_threads(1)
    print("| weight rows | indices | width | index_put (accumulate) us | index_add us | eager embedding_dense_backward us "
          "| graphjit step us | eager step us |")
    print("|---|---|---|---|---|---|---|---|")
    for rows, count, width in SHAPES:
        g = torch.Generator().manual_seed(0)
        grad = torch.randn(count, width, generator=g)
        idx = torch.randint(0, rows, (count,), generator=g)
        weight = torch.randn(rows, width, requires_grad=True)
        up = torch.randn(count, width, generator=g)

        def step(w, i, u):
            return (torch.nn.functional.embedding(i, w) * u).sum()

        compiled = graphjit.compile(step)

        def run(fn):
            def call():
                weight.grad = None
                fn(weight, idx, up).backward()
            return call
        put = best_us(lambda: torch.zeros(rows, width).index_put_((idx,), grad, accumulate=True))
        add = best_us(lambda: torch.zeros(rows, width).index_add_(0, idx, grad))
        dense = best_us(lambda: torch.ops.aten.embedding_dense_backward(grad, idx, rows, -1, False))
        ours, eager = best_us(run(compiled), calls=50), best_us(run(step), calls=50)
        print(f"| {rows} | {count} | {width} | {put:.1f} | {add:.1f} | {dense:.1f} | {ours:.1f} | {eager:.1f} |")


if __name__ == "__main__":
    main()
