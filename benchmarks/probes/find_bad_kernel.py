"""Which generated kernel faults? Compiles one benchmarks/gpu.py workload through graphjit in a mode, with
every launch synchronized (CUDA_LAUNCH_BLOCKING=1, set here) and each autotuning launch named on stdout
before it runs, then calls the compiled model and compares it with eager. The kernel modules, the
autotuning choices and the wrapper are kept in DIR/cache (GRAPHJIT_CACHE_DIR) for reading afterwards.

    python benchmarks/probes/find_bad_kernel.py --only resnet50 --mode max-autotune-no-cudagraphs --out DIR
"""
import argparse
import os
import sys
import traceback

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--only", default="resnet50")
parser.add_argument("--mode", default="max-autotune-no-cudagraphs")
parser.add_argument("--out", default=os.environ.get("OUT", "."))
args = parser.parse_args()
os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
os.environ["GRAPHJIT_CACHE_DIR"] = os.path.join(args.out, "cache")
os.environ["GRAPHJIT_LOGS"] = "autotune"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/

import torch  # noqa: E402

import gpu  # noqa: E402
import graphjit  # noqa: E402
from graphjit.compiler import autotune  # noqa: E402

real_time_launch = autotune.time_launch


def time_launch(compiled_kernel, launch, tensors, device):
    print(f"[timing] {launch.name} {launch.constexprs} warps={launch.num_warps} grid={launch.grid} "
          f"args={[tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in tensors]}", flush=True)
    try:
        ms = real_time_launch(compiled_kernel, launch, tensors, device)
        torch.cuda.synchronize()
        return ms
    except Exception:
        print(f"[fault] while timing {launch.name}:\n{traceback.format_exc()}", flush=True)
        raise


autotune.time_launch = time_launch

for key in args.only.split(","):
    title, make_model, make_inputs, output = gpu.WORKLOADS[key]
    model, inputs = make_model(), make_inputs()
    kept = []

    def backend(gm, example_inputs):
        from graphjit.backends.registry import lookup_backend
        fn = lookup_backend("graphjit")(gm, example_inputs)
        kept.append(fn)
        return fn
    with torch.inference_mode():
        expected = output(model(*inputs))
        torch.cuda.synchronize()
        compiled = graphjit.compile(model, backend=backend, mode=args.mode)
        try:
            for _ in range(2):
                got = output(compiled(*inputs))
                torch.cuda.synchronize()
            print(f"[ok] {key} {args.mode}: rel err {gpu.rel_error(got, expected):.3g}", flush=True)
        except Exception:
            print(f"[fault] calling the compiled {key}:\n{traceback.format_exc()}", flush=True)
        for i, fn in enumerate(kept):
            source = getattr(fn, "wrapper_source", None)
            if source:
                with open(os.path.join(args.out, f"{key}_wrapper_{i}.py"), "w") as f:
                    f.write(source)
