"""Which graphs of a workload the compiled-graph cache keeps, and why not the others: compiles the workload
twice in this process (graphjit.reset() between) and prints the log lines that mention the cache.

    python benchmarks/probes/graph_cache_probe.py gpt2_prefill [--device cuda]
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    args = parser.parse_args()
    import torch
    import graphjit
    import warm_start
    graphjit.config.cache_dir = tempfile.mkdtemp(prefix="graphjit-cache-probe-")
    graphjit.config.graph_cache = 1
    graphjit.config.logs = "fusion"

    def log(name, message):
        text = message() if callable(message) else message
        if "cache" in text:
            print(f"[{name}] {text[:400]}", file=sys.stderr, flush=True)
    graphjit.logs.log = log
    loads = warm_start.cuda_workloads() if args.device == "cuda" else warm_start.cpu_workloads(False)
    _, make_model, make_inputs = loads[args.workload]
    model = make_model()
    inputs, kwargs = make_inputs()
    for attempt in ("cold", "warm"):
        graphjit.reset()
        print(f"---- {attempt}", file=sys.stderr, flush=True)
        with torch.no_grad():
            graphjit.compile(model)(*inputs, **kwargs)
        if args.device == "cuda":
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
