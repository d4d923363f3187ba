"""Which op of a graph copies a CPU tensor to the GPU (what keeps it from CUDA-graph capture)? Compiles a
zoo model for the GPU in mode="reduce-overhead" with graphjit's compiler, and prints, for each compiled
graph, the ATen nodes whose value or inputs live on the CPU, and the wrapper lines that mention the CPU.

    python benchmarks/probes/cpu_copy_probe.py [zoo name, default llama-eager-attention]
"""
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import torch  # noqa: E402

import graphjit  # noqa: E402
from graphjit import logs  # noqa: E402
from graphjit.compiler import decompose  # noqa: E402
from models import zoo  # noqa: E402


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "llama-eager-attention"
    texts = []
    original_log = logs.log

    def capture(artifact, text):
        if artifact == "output_code":
            texts.append(text() if callable(text) else text)
        original_log(artifact, text)
    logs.log = capture
    traced = []
    original_decompose = decompose.decompose

    def keep(gm, example_inputs):
        out = original_decompose(gm, example_inputs)
        traced.append(out)
        return out
    decompose.decompose = keep
    spec = zoo.ZOO[name]
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"     # cpu: checks this script
    model = spec.factory().to(device).eval()
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in spec.inputs().items()}
    compiled = graphjit.compile(model, mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(3):
            compiled(**inputs)
    for i, gm in enumerate(traced):
        print(f"--- ATen graph {i}: nodes with CPU values or CPU inputs")
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            on_cpu = isinstance(val, torch.Tensor) and val.device.type == "cpu"
            cpu_inputs = [a.name for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)
                          and a.meta["val"].device.type == "cpu"]
            if on_cpu or cpu_inputs:
                print(f"  {node.format_node()}   cpu value: {on_cpu}, cpu inputs: {cpu_inputs}")
    for text in texts:
        for line in text.splitlines():
            if "cpu" in line.lower() and not line.lstrip().startswith("#"):
                print("  wrapper:", line.strip()[:200])


if __name__ == "__main__":
    main()
