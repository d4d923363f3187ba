"""A fuzz run by hand: random programs, compiled vs eager, failures shrunk and saved as reproducers.

    python -m tests.fuzz --seed 0 --minutes 30                       # tensor programs, C++ path
    python -m tests.fuzz --seed 1 --minutes 10 --triton              # Triton path (Triton's interpreter)
    python -m tests.fuzz --seed 2 --minutes 10 --mode python         # capture only (backend="eager")
    python -m tests.fuzz --seed 0 --count 1 --show                   # print one program and its result
    python -m tests.fuzz --seed 10 --jobs 4 --minutes 60             # 4 processes, seeds 10..13
    python -m tests.fuzz --seed 3 --minutes 10 --dynamic             # compile(dynamic=True)
    python -m tests.fuzz --seed 4 --minutes 10 --grad                # gradients too (training graphs)
    python -m tests.fuzz --seed 5 --minutes 10 --float-args          # a float argument, a new value per call

Program i of a run has seed `seed * 100000 + i`, so `--seed S --start I --count 1` reruns one of them.
"""
import argparse
import collections
import functools
import os
import subprocess
import sys
import time

from . import known, shrink
from .runner import FAILURES, describe
from .worker import Maker, Worker


def backend_of(mode):
    return "eager" if mode == "python" else "graphjit"


def fuzz(args):
    out = args.out
    counts, findings, graphs = collections.Counter(), [], collections.Counter()
    deadline = time.monotonic() + args.minutes * 60
    with Worker(triton=args.triton) as worker, Maker() as make:
        run = functools.partial(worker.run, backend=backend_of(args.mode), timeout=args.timeout)
        i = args.start
        while time.monotonic() < deadline and (args.count is None or i < args.start + args.count):
            seed = args.seed * 100000 + i
            i += 1
            prog = make(args.mode, seed, args.triton, args.dynamic, args.grad, args.float_args)
            if prog is None:        # torch died under the generator's own eager probe: no program to test
                counts["invalid"] += 1
                print(f"program {seed}: the generator's process died (a crash of torch's, not a test)",
                      flush=True)
                continue
            res = run(prog.source())
            counts[res["status"]] += 1
            graphs.update(programs=1, captured=res.get("graphs", 0) > 0, ops=res.get("ops", 0))
            if args.show:
                print(prog.source(), "\n", describe(res))
            if res["status"] in FAILURES or res["status"] == "harness_error":
                findings.append(report(prog, res, run, out, args))
            elif res["status"] == "noise":
                log_noise(prog, res, out)
    summary(counts, findings, graphs)
    return 1 if findings else 0


def fuzz_jobs(args):
    """--jobs N: N fuzz processes with seeds seed .. seed+N-1, each logging to out/log_<seed>.txt; prints
    each one's summary once all are done."""
    os.makedirs(args.out, exist_ok=True)
    shared = ["--minutes", str(args.minutes), "--mode", args.mode, "--out", args.out, "--timeout",
              str(args.timeout), "--shrink-runs", str(args.shrink_runs)]
    shared += ["--start", str(args.start)] + ["--count", str(args.count)] * (args.count is not None)
    shared += ["--triton"] * args.triton + ["--no-shrink"] * args.no_shrink + ["--dynamic"] * args.dynamic
    shared += ["--grad"] * args.grad + ["--float-args"] * args.float_args
    procs = []
    for seed in range(args.seed, args.seed + args.jobs):
        log = os.path.join(args.out, f"log_{seed}.txt")
        with open(log, "w") as f:
            cmd = [sys.executable, "-m", "tests.fuzz", "--seed", str(seed), *shared]
            procs.append((seed, log, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)))
    failed = 0
    for seed, log, proc in procs:
        failed |= proc.wait() != 0
        lines = open(log).read().splitlines()
        start = max((i for i, line in enumerate(lines) if " programs: " in line), default=0)
        print(f"--- seed {seed} ({log})", *lines[start:], sep="\n", flush=True)
    return 1 if failed else 0


def report(prog, res, run, out, args):
    """Shrinks and saves one failure; returns its summary line."""
    small = prog
    if not args.no_shrink and res["status"] not in ("hang", "harness_error"):
        small, res = shrink.shrink(prog, res, run, budget=args.shrink_runs)
    name = f"{prog.mode[0]}{'_triton' if prog.triton else ''}_{prog.seed}_{res['status']}.py"
    path = shrink.save(small, res, os.path.join(out, name), original=prog)
    hint = known.hint("\n".join(small.body()), res)
    line = f"{res['status']:15s} {path}" + (f"   (known? {hint})" if hint else "")
    print(line, "\n   ", describe(res).splitlines()[-1][:200], flush=True)
    return line


def log_noise(prog, res, out):
    """Mismatches judged rounding noise, kept for a look: out/noise.log."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "noise.log"), "a") as f:
        f.write(f"--- seed {prog.seed}\n" + "\n".join(prog.body()) + "\n" + describe(res) + "\n")


def summary(counts, findings, graphs):
    total = sum(counts.values())
    print(f"\n{total} programs: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"{int(graphs['captured'])} programs made at least one graph; {graphs['ops']} graph ops in all")
    for line in findings:
        print("  " + line)


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--mode", choices=("tensor", "python"), default="tensor")
    p.add_argument("--triton", action="store_true", help="GRAPHJIT_TRITON_CPU=1: Triton kernels, interpreted")
    p.add_argument("--out", default="/tmp/fuzz_out", help="folder for reproducers (default /tmp/fuzz_out)")
    p.add_argument("--start", type=int, default=0, help="index of the first program")
    p.add_argument("--count", type=int, default=None, help="stop after this many programs")
    p.add_argument("--dynamic", action="store_true", help="compile with dynamic=True: one symbolic graph from "
                   "the first call, run on every variant's sizes")
    p.add_argument("--grad", action="store_true", help="floating arguments require grad; gradients compared "
                   "too (graphs go through compiler/training.py)")
    p.add_argument("--float-args", action="store_true", help="tensor programs also take a Python float, "
                   "another value each call (a symbolic float input once it has changed)")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--shrink-runs", type=int, default=60, help="runs one shrink may spend (default 60)")
    p.add_argument("--timeout", type=int, default=None,
                   help="seconds before a program counts as a hang (default 180; 600 with --triton, whose "
                        "interpreter runs each Triton program in Python: a kernel of 200 programs takes a minute)")
    p.add_argument("--show", action="store_true", help="print every program and its result")
    p.add_argument("--jobs", type=int, default=1, help="run this many fuzz processes, seeds seed, seed+1, ...")
    args = p.parse_args(argv)
    if args.timeout is None:
        args.timeout = 600 if args.triton else 180
    return args


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    sys.exit(fuzz_jobs(args) if args.jobs > 1 else fuzz(args))
