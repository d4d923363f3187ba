"""One ViT-B/16 encoder layer's training step (batch 32, bf16 autocast) on the GPU: graphjit's and
Inductor's CUDA kernel times side by side (torch.profiler, 5 steps), and graphjit's generated code of its
slowest Triton kernels, to see why a kernel is slower than Inductor's.

    python benchmarks/probes/vit_layer_probe.py [--layers 1] [--out DIR]
"""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import graphjit  # noqa: E402


def model(layers):
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(num_labels=1000, num_hidden_layers=layers)
    return ViTForImageClassification(config).cuda()


def step(m, x, y, opt):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(m(pixel_values=x).logits.float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def kernel_times(m, x, y, opt, steps):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(2):
        step(m, x, y, opt)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(m, x, y, opt)
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0):
            t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            if t:
                times[e.key] = (t / steps, e.count // steps)
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    a = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    results = {}
    for engine in ("graphjit", "torch.compile"):
        m = model(a.layers)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        if engine == "graphjit":
            # the first step's generated code (GRAPHJIT_LOGS=output_code, printed to stderr) into a file
            with open(os.path.join(a.out, "vit_layer_code.txt"), "w") as code, \
                    contextlib.redirect_stderr(code), graphjit.config.patch(logs="output_code"):
                cm = graphjit.compile(m)
                step(cm, x, y, opt)
        else:
            cm = torch.compile(m)
        results[engine] = kernel_times(cm, x, y, opt, a.steps)
    for engine, times in results.items():
        total = sum(t for t, _ in times.values())
        print(f"== {engine}: {total / 1000:.3f} ms of CUDA kernels a step")
        for name, (t, n) in sorted(times.items(), key=lambda kv: -kv[1][0])[:25]:
            print(f"  {t:9.1f} us  x{n:<4d} {name[:110]}")


if __name__ == "__main__":
    main()
