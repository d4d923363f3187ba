"""Is a Triton GEMV worth building for one-row products (decode at batch 1)? Times, per GPT-2 decode
shape, cuBLAS (torch.addmm / mm, as graphjit calls it) against Triton GEMV kernels of several block sizes,
each launch inside a CUDA graph (as under reduce-overhead), cycling through enough copies of the weight
that it comes from HBM, not L2 (the model's 250 MB of weights don't fit in the 50 MB L2 either).

    python benchmarks/probes/gemv_probe.py [--out DIR]
"""
import argparse
import json
import os
import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, swk, swn, K: tl.constexpr, N: tl.constexpr, GELU: tl.constexpr,
                BIAS: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        kmask = rk < K
        x = tl.load(x_ptr + rk, mask=kmask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + rk[:, None] * swk + rn[None, :] * swn, mask=kmask[:, None] & nmask[None, :],
                    other=0.0).to(tl.float32)
        acc += x[:, None] * w
    out = tl.sum(acc, axis=0)
    if BIAS:
        out += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
    if GELU:
        inner = 0.7978845608028654 * (out + 0.044715 * out * out * out)
        out = 0.5 * out * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))
    tl.store(out_ptr + rn, out, mask=nmask)   # cast to the output dtype by the store


def graph_us(fn, copies, launches_per_copy=1):
    """µs per launch: `fn(i)` for every copy i, recorded in one CUDA graph, replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(copies):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / copies)
    return round(statistics.median(times), 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    dtype = torch.bfloat16
    shapes = [  # (name, K, N, weight layout, bias, gelu)
        ("c_attn 768->2304", 768, 2304, "kn", True, False),
        ("attn c_proj 768->768", 768, 768, "kn", True, False),
        ("c_fc 768->3072 (+gelu)", 768, 3072, "kn", True, True),
        ("mlp c_proj 3072->768", 3072, 768, "kn", True, False),
        ("lm_head 768->50257 (w.t())", 768, 50257, "nk", False, False),
        ("linear 4096->4096 (w.t())", 4096, 4096, "nk", True, False),
    ]
    report = []
    for name, K, N, layout, has_bias, gelu in shapes:
        nbytes = K * N * 2
        copies = max(2, min(64, (160 << 20) // nbytes))
        ws = [torch.randn(K, N, device="cuda", dtype=dtype) / K ** 0.5 if layout == "kn" else
              torch.randn(N, K, device="cuda", dtype=dtype).div_(K ** 0.5).t() for _ in range(copies)]
        x = torch.randn(1, K, device="cuda", dtype=dtype)
        bias = torch.randn(N, device="cuda", dtype=dtype)
        outs = [torch.empty(1, N, device="cuda", dtype=dtype) for _ in range(copies)]

        def cublas(i):
            y = torch.addmm(bias, x, ws[i]) if has_bias else torch.mm(x, ws[i])
            return torch.nn.functional.gelu(y, approximate="tanh") if gelu else y

        expected = cublas(0).float()
        row = dict(shape=name, K=K, N=N, MB=round(nbytes / 2 ** 20, 2), cublas_us=graph_us(cublas, copies))
        results = []
        for block_n in (8, 16, 32, 64, 128):
            for block_k in (32, 64, 128, 256, 512):
                if block_n * block_k > 16384 or block_n * block_k < 1024:
                    continue
                for warps in (2, 4, 8):
                    grid = (triton.cdiv(N, block_n),)

                    def run(i, bn=block_n, bk=block_k, w=warps):
                        gemv_kernel[grid](x, ws[i], bias, outs[i], ws[i].stride(0), ws[i].stride(1), K=K, N=N,
                                          GELU=gelu, BIAS=has_bias, BLOCK_N=bn, BLOCK_K=bk, num_warps=w)
                    try:
                        run(0)
                        err = ((outs[0].float() - expected).abs().max() / expected.abs().max()).item()
                        results.append((graph_us(run, copies), block_n, block_k, warps, round(err, 4)))
                    except Exception as e:   # noqa: BLE001
                        results.append((float("inf"), block_n, block_k, warps, f"{type(e).__name__}"))
        results.sort()
        row["best"] = results[:5]
        row["gbps_best"] = round(nbytes / (results[0][0] * 1e-6) / 1e9, 1)
        row["gbps_cublas"] = round(nbytes / (row["cublas_us"] * 1e-6) / 1e9, 1)
        report.append(row)
        print(json.dumps(row), flush=True)
        del ws, outs
    with open(os.path.join(args.out, "gemv_probe.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
