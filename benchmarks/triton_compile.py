"""Triton compile time without a GPU: the Triton kernels graphjit generates for a model of the zoo
(tests/models/zoo.py), compiled for an sm_90 target through the stand-in driver the compile workers use
(ptxas ships with Triton), by `triton_build.compile_all` with N threads (loading onto the GPU stubbed
out). Each measurement runs in a fresh process with an empty Triton cache (Triton's own one-time start,
its cache key, is taken before the clock starts).

    ./dev python 3.12 benchmarks/triton_compile.py [--model resnet] [--threads 1,2,4] [--prelude gpu,cpu]

--prelude cpu compiles the interpreter's prelude instead of the GPU's (float32 rsqrt as tl.rsqrt, which
makes Triton link libdevice into the kernel): the difference is what PRELUDE_GPU saves.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def kernels_of(model_name, prelude):
    """(module source, [Launch]) of the first graph graphjit captures from the zoo model."""
    import torch
    import graphjit
    from graphjit.compiler import decompose, lowering, scheduler
    from graphjit.compiler.codegen import triton as triton_codegen
    sys.path.insert(0, ROOT)
    from tests.models.zoo import ZOO, build
    spec = ZOO[model_name]
    model, _ = build(spec)
    model.eval()
    found = []

    def backend(gm, example_inputs):
        if not found:
            graph = lowering.lower(decompose.decompose(gm, example_inputs), example_inputs)
            items = scheduler.schedule(graph)
            device = torch.device("cuda") if prelude == "gpu" else torch.device("cpu")
            found.append(triton_codegen.generate(graph, items, device=device))
        return gm.forward
    with torch.no_grad():
        graphjit.compile(model, backend=backend)(**spec.inputs())
    source, launches = found[0]
    return source, [launch for kl in launches.values() for launch in kl.launches]


def child(model_name, prelude, threads):
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime.cache import triton_key
    from triton.runtime.driver import driver
    from graphjit.compiler.runtime import triton_build, triton_workers
    source, launches = kernels_of(model_name, prelude)
    distinct = list({launch.name: launch for launch in launches}.values())
    driver.set_active(triton_workers.StandInDriver(GPUTarget("cuda", 90, 32)))
    triton_key()
    path = os.path.join(tempfile.mkdtemp(), "gj_compile_bench.py")
    with open(path, "w") as f:
        f.write(source)
    import importlib.util
    spec = importlib.util.spec_from_file_location("gj_compile_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gj_compile_bench"] = module
    spec.loader.exec_module(module)
    triton_build._load = lambda device, kernel: None          # no GPU to load onto
    torch.cuda.device = lambda device: contextlib.nullcontext()
    # every argument as a dtype: warmup() makes an aligned stand-in tensor of it
    examples = {launch.name: [torch.float32] * len(launch.args) + ([torch.int32] if launch.checks_indices else [])
                for launch in distinct}
    phases = {}
    start = time.perf_counter()
    triton_build.compile_all(module, distinct, torch.device("cuda", 0), examples, threads, phases=phases)
    print("RESULT " + json.dumps(dict(model=model_name, prelude=prelude, threads=threads, kernels=len(distinct),
                                      seconds=time.perf_counter() - start, phases=phases)), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet")
    parser.add_argument("--threads", default="1,2,4")
    parser.add_argument("--prelude", default="gpu,cpu")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))
    print("| model | prelude | threads | distinct kernels | compile s |")
    print("|---|---|---|---|---|")
    for prelude in args.prelude.split(","):
        for threads in args.threads.split(","):
            env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="gj-triton-compile-"),
                       PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", args.model, prelude, threads],
                                  env=env, capture_output=True, text=True)
            rows = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not rows:
                print(f"| {args.model} | {prelude} | {threads} | failed: {done.stderr[-300:]!r} | |")
                continue
            r = rows[0]
            print(f"| {r['model']} | {prelude} | {threads} | {r['kernels']} | {r['seconds']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
