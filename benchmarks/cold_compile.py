"""Cold and warm compile time as a user sees it: each measurement in a fresh Python process, so one
compiler's one-time costs (imports, Triton's start-up, CUDA and cuBLAS initialization) are not paid
by the other, as they are when both run in one process (benchmarks/gpu.py times Inductor first).

For each workload of benchmarks/gpu.py and each contender:

    cold   a new process with empty caches: seconds of the first compiled call (capture + compile +
           run, synchronized), after one eager call has initialized CUDA and the libraries
    warm   a new process reusing the cold run's cache folders: the same first call, as after a restart

Contenders: `inductor` (torch.compile, default mode), `graphjit` (graphjit.compile(backend="graphjit")),
and `graphjit-wN` (the same with N Triton compile worker processes, config.triton_compile_workers).
graphjit's rows also give its compile phases (decompose, lower, schedule, codegen, Triton submit /
build / load, wrapper), summed over the graphs.

    python benchmarks/cold_compile.py [--only resnet50,vit] [--contenders inductor,graphjit,graphjit-w16]
                                      [--warm graphjit] [--deadline 300] [--out DIR]
    GRAPHJIT_TRITON_CPU=1 ./dev python 3.12 benchmarks/cold_compile.py --smoke   # checks this script

--deadline stops starting new processes after that many seconds; the table has what finished.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(key, contender, smoke, timeline=False):
    """One measurement, in this (fresh) process; prints one JSON line (with timeline: then the spans of
    Triton's work, probes/triton_timeline.py)."""
    start = time.perf_counter()
    if smoke:
        sys.argv.append("--smoke")       # gpu.py reads it at import
    sys.path.insert(0, HERE)
    import torch
    import gpu                            # the workloads; the cache folders come from the environment
    import graphjit
    imported = time.perf_counter() - start
    if timeline:
        sys.path.insert(0, os.path.join(HERE, "probes"))
        import triton_timeline
        triton_timeline.install()
    title, make_model, make_inputs, output = gpu.WORKLOADS[key]
    model = make_model()
    inputs = make_inputs()
    row = dict(key=key, contender=contender, import_s=imported)
    with torch.inference_mode():
        _, row["eager_first_s"] = gpu.timed_call(model, inputs)
        expected = output(model(*inputs))
        if contender == "inductor":
            compiled = torch.compile(model)
        else:
            if "-w" in contender:
                from graphjit import config as compiler_config
                compiler_config.triton_compile_workers = int(contender.split("-w")[1])
            recording = gpu.Recording()
            marks = []

            def timed(gm, example_inputs):          # when the backend starts and ends: capture before it,
                marks.append(time.perf_counter())    # the entry's build and the first run after it
                fn = recording(gm, example_inputs)
                marks.append(time.perf_counter())
                return fn
            compiled = graphjit.compile(model, backend=timed)
        began = time.perf_counter()
        out, row["first_call_s"] = gpu.timed_call(compiled, inputs)
        if contender != "inductor" and marks:
            row["capture_s"], row["backend_s"] = marks[0] - began, marks[-1] - marks[0]
            row["after_backend_s"] = row["first_call_s"] - (marks[-1] - began)
        row["rel_err"] = gpu.rel_error(output(out), expected)
        _, second = gpu.timed_call(compiled, inputs)
        row["second_call_ms"] = second * 1e3
        if contender != "inductor":
            row["stats"] = recording.summary()
    row["process_s"] = time.perf_counter() - start
    print("RESULT " + json.dumps(row), flush=True)
    if timeline:
        triton_timeline.report()


def measure(key, contender, caches, smoke, timeout, timeline=False):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"),
               TRITON_CACHE_DIR=os.path.join(caches, "triton"), GRAPHJIT_CACHE_DIR=os.path.join(caches, "graphjit"))
    if smoke:
        env["GRAPHJIT_TRITON_CPU"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--child", key, contender] + (["--smoke"] if smoke else []) \
        + (["--timeline"] if timeline else [])
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(key=key, contender=contender, error=f"timed out after {timeout} s")
    lines = done.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("RESULT "):
            if timeline:
                print(f"Triton timeline, {key} {contender}:\n" + "\n".join(lines[i + 1:]), flush=True)
            return json.loads(line[len("RESULT "):])
    return dict(key=key, contender=contender, error=f"exit {done.returncode}: {done.stderr[-1500:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--contenders", default="inductor,graphjit")
    parser.add_argument("--warm", default=None, help="contenders that also get a warm run (default: all)")
    parser.add_argument("--deadline", type=float, default=float("inf"))
    parser.add_argument("--timeout", type=float, default=300, help="seconds one process may take")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU (GRAPHJIT_TRITON_CPU=1)")
    parser.add_argument("--timeline", action="store_true",
                        help="graphjit's cold runs also print the spans of Triton's work (probes/triton_timeline.py)")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CONTENDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.smoke, args.timeline)
    sys.path.insert(0, HERE)
    workloads = [w for w in args.only.split(",") if w] or ["gpt2_prefill", "gpt2_decode", "bert", "resnet50", "vit"]
    contenders = [c for c in args.contenders.split(",") if c]
    began = time.perf_counter()
    rows = []
    os.makedirs(args.out, exist_ok=True)
    for key in workloads:
        for contender in contenders:
            caches = tempfile.mkdtemp(prefix="graphjit-cold-")
            warm = args.warm is None or contender in args.warm.split(",")
            for kind in ("cold", "warm") if warm else ("cold",):
                if time.perf_counter() - began > args.deadline:
                    break
                row = measure(key, contender, caches, args.smoke, args.timeout,
                              args.timeline and kind == "cold" and contender != "inductor")
                row["kind"] = kind
                rows.append(row)
                print(json.dumps(row), flush=True)
                with open(os.path.join(args.out, "cold_compile.json"), "w") as f:
                    json.dump(rows, f, indent=1)
    print()
    print("| workload | contender | cold s | warm s | import s | graphjit: capture, backend, after (cold, s) "
          "| graphjit phases (cold, s) |")
    print("|---|---|---|---|---|---|---|")
    for key in workloads:
        for contender in contenders:
            got = {r["kind"]: r for r in rows if r["key"] == key and r["contender"] == contender}
            if not got:
                continue
            cold, warm = got.get("cold", {}), got.get("warm", {})

            def cell(r):
                return f"{r['first_call_s']:.2f}" if "first_call_s" in r else r.get("error", "-")[:80]
            phases = cold.get("stats", {}).get("compile_seconds", {})
            split = ", ".join(f"{cold[k]:.2f}" for k in ("capture_s", "backend_s", "after_backend_s") if k in cold)
            print(f"| {key} | {contender} | {cell(cold)} | {cell(warm)} | {cold.get('import_s', 0):.1f} | {split} | "
                  + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) + " |")


if __name__ == "__main__":
    main()
