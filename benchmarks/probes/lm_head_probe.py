"""GPT-2's lm_head on the H200: [4096, 768] x [768, 50257] in bf16, an output width that is not a multiple
of 8. Which way of running it is fast, and what does Inductor return? Median GPU ms of each variant (CUDA
events, 30 runs) and the library kernel it ran; the output strides Inductor gives for F.linear and for
GPT-2's logits.

    python benchmarks/probes/lm_head_probe.py
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/
from gpu import profile  # noqa: E402


def gpu_ms(fn, runs=30):
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernels(fn):
    """The three kernels taking most GPU time in one call of fn, with their ms."""
    _, by_kernel = profile(fn, (), runs=1)
    top = sorted(by_kernel.items(), key=lambda item: -item[1][0])[:3]
    return "; ".join(f"{name[:70]} {ms:.3f}" for name, (ms, _) in top)


def main():
    torch.manual_seed(0)
    n, k, m = 50257, 768, 4096
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    pad = -n % 8
    w_rows_padded = F.pad(w, (0, 0, 0, pad))                 # [50264, 768], cached once
    out_padded = torch.empty(m, n + pad, device="cuda", dtype=torch.bfloat16)
    ref = torch.mm(x.float(), w.t().float())
    variants = {
        "mm(x, w.t()) (eager's call)": lambda: torch.mm(x, w.t()),
        "pad w.t() per call, slice, contiguous (graphjit now)":
            lambda: torch.mm(x, F.pad(w.t(), (0, pad)))[:, :n].contiguous(),
        "mm into a row-padded out view": lambda: torch.mm(x, w.t(), out=out_padded[:, :n]),
        "cached row-padded weight, view of the result": lambda: torch.mm(x, w_rows_padded.t())[:, :n],
        "cached row-padded weight, contiguous": lambda: torch.mm(x, w_rows_padded.t())[:, :n].contiguous(),
        "transposed: (w @ x.t()).t()": lambda: torch.mm(w, x.t()).t(),
        "transposed, contiguous": lambda: torch.mm(w, x.t()).t().contiguous(),
        "mm(x, w.t()) in 2 column blocks": lambda: torch.cat(
            [torch.mm(x, w[:50176].t()), torch.mm(x, w[50176:].t())], 1),
    }
    for name, fn in variants.items():
        out = fn()
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        print(f"{name:60s} {gpu_ms(fn):7.3f} ms  stride {tuple(out.stride())}  err {err:.1e}  | {kernels(fn)}")

    x3 = x.view(8, 512, k)
    compiled = torch.compile(lambda t: F.linear(t, w))
    out = compiled(x3)
    print(f"{'Inductor F.linear':60s} {gpu_ms(lambda: compiled(x3)):7.3f} ms  stride {tuple(out.stride())}  | "
          f"{kernels(lambda: compiled(x3))}")

    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=1)).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, n, (8, 512), device="cuda")
    with torch.no_grad():
        logits = torch.compile(model)(ids).logits
    print("Inductor GPT-2 logits stride", tuple(logits.stride()), "eager", tuple(model(ids).logits.stride()))


if __name__ == "__main__":
    main()
