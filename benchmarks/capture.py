"""Capture, side by side: for every model of the zoo (tests/models/zoo.py), the graphs and graph breaks of
graphjit next to torch.compile's, and each frontend's first-call time, as one markdown table.

  graphs:  graphs handed to a counting backend by the first call of compile(model) (graphjit: explain()).
  breaks:  graphjit: explain().graph_break_count; torch.compile: torch._dynamo.explain(), else graphs - 1.
  graphjit = eager: the first call's output against eager's (atol = rtol = 1e-5): a graph is only worth
           counting if its result is right.
  first call s: wall time of the first call of compile(model, backend=<counter>) on a fresh cache: capture,
           guards, a trivial backend, and one run of the model (the same for both: this is the frontends'
           cost); best of --repeat fresh starts. Both frontends are warmed up on a tiny function and the
           model runs once eagerly first, so imports and lazy initialisation don't count.

    python benchmarks/capture.py [--models gpt2,bert,...] [--wide] [--repeat 3] [--no-dynamo-explain]
    ./dev python 3.11 benchmarks/capture.py
"""
import argparse
import os
import platform
import sys
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import graphjit  # noqa: E402
from graphjit.testing import CompileCounter  # noqa: E402
from graphjit.testing import assert_same  # noqa: E402
from tests.models.zoo import WIDE, ZOO, build, missing  # noqa: E402


def first_call(compile_fn, model, inputs):
    """(seconds of the first call, graphs handed to the backend, error text or None, output)."""
    counter = CompileCounter()
    start = time.perf_counter()
    try:
        output = compile_fn(model, counter)(**inputs)
    except Exception as e:  # noqa: BLE001 - a failing model is a row of the table, not the end of the run
        return time.perf_counter() - start, counter.frame_count, f"{type(e).__name__}: {e}", None
    return time.perf_counter() - start, counter.frame_count, None, output


def same_as_eager(spec, output):
    """'yes', or where the first call's output differs from eager's (same seeds, atol=rtol=1e-5)."""
    model, inputs = build(spec)
    try:
        assert_same(output, model(**inputs), atol=1e-5, rtol=1e-5)
    except AssertionError as e:
        return "NO: " + str(e).splitlines()[0][:70]
    return "yes"


def measure(spec, use_dynamo_explain, repeat):
    """One row: first calls of both frontends (after one eager call, so lazy imports and first-run costs of
    the model itself count for neither; the best of `repeat` fresh starts), then graphjit.explain and
    torch._dynamo.explain."""
    model, inputs = build(spec)
    model(**inputs)
    gj_s, tc_s = float("inf"), float("inf")
    for _ in range(repeat):
        model, inputs = build(spec)
        graphjit.reset()
        seconds, _, gj_error, gj_output = first_call(lambda m, c: graphjit.compile(m, backend=c), model, inputs)
        gj_s = min(gj_s, seconds)
        model, inputs = build(spec)
        torch._dynamo.reset()
        seconds, tc_graphs, tc_error, _ = first_call(lambda m, c: torch.compile(m, backend=c), model, inputs)
        tc_s = min(tc_s, seconds)
    same = same_as_eager(spec, gj_output) if gj_error is None else "error"

    model, inputs = build(spec)
    graphjit.reset()
    try:
        explained = graphjit.explain(model)(**inputs)
        gj_graphs, gj_breaks = explained.graph_count, explained.graph_break_count
        note = _short_reason(explained.break_reasons[0]) if explained.break_reasons else ""
    except Exception as e:  # noqa: BLE001
        gj_graphs, gj_breaks, note = "error", "error", f"{type(e).__name__}: {e}".splitlines()[0][:120]
    if gj_error and not note:
        note = gj_error.splitlines()[0][:120]

    tc_breaks = None
    if tc_error is None and use_dynamo_explain:
        model, inputs = build(spec)
        torch._dynamo.reset()
        try:
            tc_breaks = torch._dynamo.explain(model)(**inputs).graph_break_count
        except Exception:  # noqa: BLE001 - explain is best effort; fall back to graphs - 1
            tc_breaks = None
    if tc_error is not None:
        tc_graphs = tc_breaks = "error"
        note = (note + "; " if note else "") + "torch.compile: " + tc_error.splitlines()[0][:80]
    elif tc_breaks is None:
        tc_breaks = f"{max(tc_graphs - 1, 0)}*"
    return gj_graphs, gj_breaks, same, tc_graphs, tc_breaks, gj_s, tc_s, note.replace("|", "\\|")


def _short_reason(e, limit=90):
    where = ""
    if e.filename:
        parts = e.filename.replace(os.sep, "/").split("/")
        if "site-packages" in parts:
            parts = parts[parts.index("site-packages") + 1:]
        where = f" ({'/'.join(parts[-2:])}:{e.lineno})"
    text = e.reason.splitlines()[0]
    text = text if len(text) <= limit else text[:limit] + "..."
    return text + where


def warm_up():
    f = lambda x: (x.sin() + 1).relu()  # noqa: E731
    x = torch.randn(4)
    graphjit.compile(f, backend=CompileCounter())(x)
    torch.compile(f, backend=CompileCounter())(x)
    graphjit.reset()
    torch._dynamo.reset()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--no-dynamo-explain", action="store_true",
                        help="count torch.compile's breaks as graphs - 1 instead of running torch._dynamo.explain")
    parser.add_argument("--repeat", type=int, default=3,
                        help="first calls per frontend and model, each on a fresh cache; the table shows the best")
    parser.add_argument("--wide", action="store_true", help="the models of zoo.WIDE too (every architecture "
                        "transformers builds from a small config: about 140 rows in all)")
    args = parser.parse_args()
    zoo = {**ZOO, **WIDE} if args.wide else ZOO
    names = [n for n in args.models.split(",") if n] or list(zoo)
    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    warm_up()
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {platform.machine()}, {torch.get_num_threads()} threads; "
          f"counting backends, first call on a fresh cache")
    print()
    print("| model | graphjit graphs | graphjit breaks | graphjit = eager | torch.compile graphs "
          "| torch.compile breaks | graphjit first call s | torch.compile first call s "
          "| graphjit: first break or error |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = [0.0, 0.0]
    eager_rows = 0
    for name in names:
        spec = zoo[name]
        reason = missing(spec)
        if reason is not None:
            print(f"| {name} | skipped: {reason} | | | | | | | |")
            continue
        row = measure(spec, not args.no_dynamo_explain, args.repeat)
        gj_graphs, gj_breaks, same, tc_graphs, tc_breaks, gj_s, tc_s, note = row
        totals[0] += gj_s
        totals[1] += tc_s
        eager_rows += gj_graphs == 0
        print(f"| {name} | {gj_graphs} | {gj_breaks} | {same} | {tc_graphs} | {tc_breaks} | {gj_s:.2f} "
              f"| {tc_s:.2f} | {note} |", flush=True)
    print(f"| **total** | | | | | | **{totals[0]:.1f}** | **{totals[1]:.1f}** | |")
    print()
    if eager_rows:
        print(f"graphjit 0 graphs: the break stopped capture of the whole forward, which ran eagerly "
              f"({eager_rows} rows).")
    print("breaks with *: graphs - 1 (torch._dynamo.explain not run or failed).")


if __name__ == "__main__":
    main()
