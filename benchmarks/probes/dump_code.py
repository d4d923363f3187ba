"""Compile one zoo workload with graphjit and print its wrapper, kernels and fusion log (GRAPHJIT_LOGS
output_code and fusion, the graph cache off), then each generated kernel's GPU time over 5 calls.

    python3 benchmarks/probes/dump_code.py convnext_t [--dtype bf16]
"""
import argparse
import os
import sys

os.environ["GRAPHJIT_LOGS"] = "output_code,fusion"
os.environ["GRAPHJIT_GRAPH_CACHE"] = "0"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import graphjit  # noqa: E402
import zoo  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    title, make_model, make_inputs, _ = zoo.workloads("cuda", dtype)[args.workload]
    model, inputs = make_model(), make_inputs()
    compiled = graphjit.compile(model)
    with torch.no_grad():
        for _ in range(3):
            compiled(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                compiled(*inputs)
            torch.cuda.synchronize()
    print(title, file=sys.stderr)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=60, max_name_column_width=90),
          file=sys.stderr)


if __name__ == "__main__":
    main()
