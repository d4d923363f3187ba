"""Where does mode="max-autotune" lose to "reduce-overhead" on GPT-2 one token? Same process, fresh
autotuning cache: median ms of graphjit reduce-overhead, max-autotune, and max-autotune without matmul
templates (GRAPHJIT_TRITON_MM_TEMPLATES=0), each with its GPU time per call from torch.profiler split into
templates / other Triton / cuBLAS+ATen.

    python benchmarks/probes/modes_probe.py
"""
import os
import sys
import tempfile

os.environ["GRAPHJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="graphjit-modes-probe-")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402

import graphjit  # noqa: E402
from graphjit.compiler.codegen import triton as triton_codegen  # noqa: E402
from graphjit import config as gj_config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/
from gpu import gpt2, ids, median_ms, profile  # noqa: E402


def gpu_split(fn, inputs, runs=20):
    """GPU ms per call: matmul templates, other Triton kernels, library and ATen kernels."""
    _, by_kernel = profile(fn, inputs, runs)
    split = {}
    for name, (ms, _) in by_kernel.items():
        kind = "templates" if "triton_mm" in name else "triton" if "triton" in name else "library/ATen"
        split[kind] = split.get(kind, 0) + ms
    return {k: round(v, 4) for k, v in split.items()}


def main():
    model = gpt2()
    inputs = (ids(1, 1, 50257),)
    with torch.inference_mode():
        for label, mode, templates in (("reduce-overhead", "reduce-overhead", 1),
                                       ("max-autotune", "max-autotune", 1),
                                       ("max-autotune, no mm templates", "max-autotune", 0),
                                       ("reduce-overhead again", "reduce-overhead", 1)):
            gj_config.triton_mm_templates = templates
            graphjit.reset()
            compiled = graphjit.compile(model, mode=mode)
            compiled(*inputs)
            ms = median_ms(compiled, inputs, 50)
            print(f"{label}: {ms:.3f} ms/call, GPU ms/call {gpu_split(compiled, inputs)}", flush=True)


if __name__ == "__main__":
    main()
