"""graphjit's command line.

    python -m graphjit report [-o run.html] [--profile] script.py [script args]
    python -m graphjit explain [--guards N] script.py [script args]
    python -m graphjit bench NAME [benchmark args]      # NAME: cpu, gpu, train, dynamic, ... (benchmarks/)

`report` runs the script under a compile report (graphjit/reporting.py) and writes one HTML file plus its
JSON-lines events. `explain` runs the script and prints, for each code object graphjit translated, what
explain() would say: graphs, breaks with file:line and hint, dynamic inputs, guards. `bench` runs one of
the side-by-side benchmarks of the checkout's benchmarks/ folder with the arguments given.
"""
import argparse
import os
import runpy
import subprocess
import sys


def _run_script(script, script_args):
    """Run a script as `python script args` would, in this process; returns its exit status. An exception
    it raises propagates after the caller's cleanup (the report is still written)."""
    if not os.path.exists(script):
        raise SystemExit(f"python -m graphjit: no such script: {script}")
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved_argv
        if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(script)) and sys.path[0] != saved_path0:
            sys.path.pop(0)


def cmd_report(args):
    import graphjit
    output = args.output or os.path.splitext(os.path.basename(args.script))[0] + ".graphjit.html"
    graphjit.report.start(output, profile=args.profile)
    try:
        status = _run_script(args.script, args.args)
    finally:
        path = graphjit.report.stop()
        events = (path[:-5] if path.endswith(".html") else path) + ".jsonl"
        print(f"graphjit: report written to {path} (events: {events})", file=sys.stderr)
    return status


def cmd_explain(args):
    from graphjit.api import ExplainOutput
    from graphjit.capture.frame import Recorder
    with Recorder() as recorder:
        status = _run_script(args.script, args.args)
    per_code = {}
    for record in recorder.records:
        per_code.setdefault(record.code, []).append(record)
    out = sys.stdout
    if not per_code:
        print("graphjit explain: the script compiled nothing (no graphjit.compile'd function was called)", file=out)
    for code, records in per_code.items():
        print(f"\n== {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}): {len(records)} "
              f"translation(s)", file=out)
        print(ExplainOutput(records).format(max_guards=args.guards), file=out)
    return status


def _benchmarks_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "benchmarks")


def _benchmarks():
    folder = _benchmarks_dir()
    if not os.path.isdir(folder):
        return {}
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and not name.startswith("_"):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                head = f.read(600)
            doc = head.split('"""')[1].strip() if '"""' in head else ""
            first = doc.split(". ")[0].splitlines()[0].rstrip(":,") if doc else ""
            found[name[:-3]] = (path, first if len(first) <= 70 else first[:67].rstrip() + "...")
    return found


def cmd_bench(args):
    found = _benchmarks()
    if not found:
        raise SystemExit(f"python -m graphjit bench: no benchmarks folder at {_benchmarks_dir()} (the "
                         "benchmarks ship with the source checkout, not with an installed package)")
    if args.name not in found:
        raise SystemExit(f"python -m graphjit bench: unknown benchmark {args.name!r}; one of: "
                         f"{', '.join(found)}")
    env = dict(os.environ)
    root = os.path.dirname(_benchmarks_dir())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.call([sys.executable, found[args.name][0], *args.args], env=env)


def main(argv=None):
    bench_list = "\n".join(f"  {name:16} {first}" for name, (_, first) in _benchmarks().items())
    parser = argparse.ArgumentParser(prog="python -m graphjit", description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="run a script under a compile report (one HTML file)",
                            description="Run a script under a compile report: graphs, breaks, recompiles, "
                            "guards, dynamic dims, kernels and their source, compile time per stage, and with "
                            "--profile time per kernel; written as one self-contained HTML file and its "
                            "events as JSON lines.")
    report.add_argument("-o", "--output", help="the HTML file (default: <script name>.graphjit.html)")
    report.add_argument("--profile", action="store_true", help="also profile the run: time per kernel and op")
    report.add_argument("script")
    report.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    report.set_defaults(run=cmd_report)
    explain = sub.add_parser("explain", help="run a script and print what graphjit captured, per function",
                             description="Run a script and print, for each function graphjit translated, "
                             "its graphs, graph breaks (file:line, reason, hint), dynamic inputs and guards.")
    explain.add_argument("--guards", type=int, default=20, metavar="N",
                         help="guards listed per function (default 20)")
    explain.add_argument("script")
    explain.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    explain.set_defaults(run=cmd_explain)
    bench = sub.add_parser("bench", help="run a side-by-side benchmark of benchmarks/",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Run one of the checkout's benchmarks (eager, torch.compile and "
                           "graphjit side by side); arguments after NAME go to it (NAME --help lists them)."
                           + (f"\n\nbenchmarks:\n{bench_list}" if bench_list else ""))
    bench.add_argument("name", metavar="NAME")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's arguments")
    bench.set_defaults(run=cmd_bench)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
