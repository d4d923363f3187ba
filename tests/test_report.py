"""The compile report (graphjit/reporting.py), the command line (graphjit/__main__.py) and the compile
progress line: a run with a graph break, recompiles, dynamic dims and kernels shows each of them in the
HTML and in the JSON events; results stay eager's; the CLI runs in subprocesses."""
import html.parser
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import graphjit
from graphjit import reporting
from graphjit.compiler import pipeline
from graphjit.progress import Progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def events_of(path):
    with open(path[:-5] + ".jsonl") as f:
        return [json.loads(line) for line in f]


class _Page(html.parser.HTMLParser):
    """The page's visible text, and a check that the elements that must close do."""
    CLOSING = ("html", "body", "table", "tr", "td", "details", "summary", "pre", "svg", "div", "h2", "h3")

    def __init__(self):
        super().__init__()
        self.text, self.open = [], []

    def handle_starttag(self, tag, attrs):
        if tag in self.CLOSING:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in self.CLOSING:
            assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
            self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def page_text(path):
    page = _Page()
    with open(path) as f:
        page.feed(f.read())
    assert page.open == [], page.open
    return "".join(page.text)


def broken(x, n):
    y = x.sin() * 2
    print("a graph break")        # noqa: T201 -- the break under test
    return (y + n).relu().sum(-1)


BREAK_LINE = broken.__code__.co_firstlineno + 2


def test_report_shows_breaks_recompiles_dynamic_dims_and_kernels(tmp_path, capsys):
    path = str(tmp_path / "run.html")
    compiled = graphjit.compile(broken)
    calls = [(torch.randn(4, 8), 3), (torch.randn(5, 8), 3), (torch.randn(6, 8), 3), (torch.randn(6, 8), 4)]
    with graphjit.report(path):
        results = [compiled(x, n) for x, n in calls]
    assert not graphjit.report.active
    for (x, n), got in zip(calls, results):        # the report changes nothing the program computes
        torch.testing.assert_close(got, broken(x, n), rtol=1e-6, atol=1e-6)

    events = events_of(path)
    frames = [e for e in events if e["kind"] == "frame"]
    assert {f["function"] for f in frames} == {"broken", "broken.<resume at line %d>" % BREAK_LINE}
    first = frames[0]
    assert first["break"]["line"] == BREAK_LINE and first["break"]["file"] == __file__
    assert "print" in first["break"]["reason"] and first["break"]["hint"]
    assert "sin" in first["graph"] and any("x.shape == (4, 8)" in g for g in first["guards"])
    assert first["dynamic"] == []
    assert any(d.startswith("x: sizes (s") for f in frames for d in f["dynamic"])    # the size made dynamic
    assert any(d.startswith("n: int s") for f in frames for d in f["dynamic"])       # the int made dynamic

    # n is first read after the break: broken's entry guards x alone, the resume function's n
    recompiles = [e for e in events if e["kind"] == "recompile"]
    assert [(r["function"], r["guard"]) for r in recompiles] == [
        ("broken", "x.shape == (4, 8)"), ("broken.<resume at line %d>" % BREAK_LINE, "y.shape == (4, 8)"),
        ("broken.<resume at line %d>" % BREAK_LINE, "n == 3")]
    assert recompiles[0]["args"] == ["Tensor(5, 8) float32 cpu", "3"]
    assert "4" in recompiles[2]["args"] and "Tensor(6, 8) float32 cpu" in recompiles[2]["args"]

    compiles = {e["seq"]: e for e in events if e["kind"] == "compile"}
    assert all(len(f["compiles"]) == 1 and f["compiles"][0] in compiles for f in frames)
    one = compiles[first["compiles"][0]]
    assert one["device"] == "C++" and one["kernels"] and one["kernels"][0]["name"] == "kernel0"
    assert set(one["stages"]) == set(pipeline.STAGES) and all(v >= 0 for v in one["stages"].values())
    assert "extern \"C\"" in one["source"] and "def call(" in one["wrapper"]

    text = page_text(path)
    assert f"{__file__}:{BREAK_LINE}" in text and "print" in text
    assert "guard failed: x.shape == (4, 8)" in text and "guard failed: n == 3" in text
    assert "Tensor(5, 8) float32 cpu" in text
    assert "x: sizes (s" in text and "kernel0" in text and "Compile time per stage" in text
    for stage in ("capture", "decompose", "build"):
        assert stage in text
    assert "graph breaks" in text and "recompiles" in text


def test_guards_are_in_their_translation_not_twice(tmp_path):
    path = str(tmp_path / "g.html")
    with graphjit.report(path):
        graphjit.compile(lambda x: x.cos() + 1)(torch.randn(3))
    events = events_of(path)
    assert not any(e["kind"] == "log" and e["artifact"] == "guards" for e in events)
    assert [e for e in events if e["kind"] == "frame"][0]["guards"]


def test_profiled_report_times_each_kernel_outside_the_compile(tmp_path):
    path = str(tmp_path / "p.html")

    def f(x):
        return (x.exp() + 1).sum(0)
    compiled = graphjit.compile(f)
    with graphjit.report(path, profile=True):
        for _ in range(3):
            compiled(torch.randn(64, 32))
    assert graphjit.config.profile_kernels == 0          # restored
    rows = [e for e in events_of(path) if e["kind"] == "profile"][0]["rows"]
    ours = [r for r in rows if r["name"].startswith("graphjit ") and r["name"].endswith(":kernel0")]
    assert len(ours) == 1 and ours[0]["calls"] == 3, rows
    assert not any(r["name"] == reporting._COMPILE_RANGE for r in rows)
    assert not any(r["name"].startswith("prims::") for r in rows), rows   # tracing ran inside the compile
    assert "Run time per kernel and op" in page_text(path)


def test_training_backward_compiles_show_outside_a_translation(tmp_path):
    path = str(tmp_path / "t.html")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    compiled = graphjit.compile(model)
    x = torch.randn(4, 8)
    with graphjit.report(path):
        compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, want)
    events = events_of(path)
    attached = {s for e in events if e["kind"] == "frame" for s in e["compiles"]}
    loose = [e for e in events if e["kind"] == "compile" and e["seq"] not in attached]
    assert loose, "the backward graph, compiled at the first backward call, has an event of its own"
    assert "Graphs compiled outside a translation" in page_text(path)


def test_one_report_at_a_time_and_closed_after_an_error(tmp_path):
    path = str(tmp_path / "e.html")
    assert graphjit.report.stop() is None
    with pytest.raises(ZeroDivisionError):
        with graphjit.report(path):
            with pytest.raises(RuntimeError, match="already open"):
                graphjit.report.start(str(tmp_path / "other.html"))
            graphjit.compile(lambda x: x + 1)(torch.ones(2))
            1 / 0
    assert not graphjit.report.active and os.path.exists(path)
    assert any(e["kind"] == "frame" for e in events_of(path))


def test_fullgraph_error_leaves_no_open_translation(tmp_path):
    path = str(tmp_path / "f.html")

    def f(x):
        print("no")                 # noqa: T201
        return x + 1
    with graphjit.report(path) as opened:
        with pytest.raises(graphjit.Unsupported):
            graphjit.compile(f, fullgraph=True)(torch.ones(2))
        assert reporting._active.frames() == []
        assert graphjit.compile(lambda x: x * 3)(torch.ones(2)).tolist() == [3.0, 3.0]
    assert opened.path == path
    names = [e["function"] for e in events_of(path) if e["kind"] == "frame"]
    assert len(names) == 1 and names[0].endswith(".<lambda>")


def test_progress_shows_the_compile_stage(monkeypatch, capsys):
    monkeypatch.setattr(graphjit.config, "progress", 1)
    monkeypatch.setattr(pipeline, "Progress",
                        lambda label, total, after, start: Progress(label, total, after=0.0, start=start))
    graphjit.compile(lambda x: x.sin() * 2)(torch.randn(8))
    err = capsys.readouterr().err
    assert "graphjit: compiling test_progress_shows_the_compile_stage.<locals>.<lambda> (C++) [" in err
    assert "7/7" in err
    assert "next: lower" in err          # the first line says which stage comes next


def test_progress_detail_follows_the_count(capsys, monkeypatch):
    monkeypatch.setattr(graphjit.config, "progress", 1)
    p = Progress("work", 2, after=0.0)
    p.update(1, "next: b")
    p.finish()
    err = capsys.readouterr().err
    assert "1/2" in err and "next: b" in err and "2/2" in err


# ---- in subprocesses: GRAPHJIT_REPORT and the command line ----

SCRIPT = textwrap.dedent("""
    import sys, torch, graphjit
    @graphjit.compile
    def f(x):
        y = x.cos() + 1
        print("args", sys.argv[1:])
        return y * 2
    for n in (3, 4):
        assert torch.allclose(f(torch.ones(n)), (torch.ones(n).cos() + 1) * 2)
    if len(sys.argv) > 2:
        sys.exit(int(sys.argv[2]))
""")


def run(args, tmp_path, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return str(path)


def test_cli_report_runs_the_script_with_its_arguments(tmp_path, script):
    out = str(tmp_path / "cli.html")
    done = run(["-m", "graphjit", "report", "-o", out, script, "hello", "3"], tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]            # the script's exit status
    assert "args ['hello', '3']" in done.stdout
    assert f"report written to {out}" in done.stderr
    text = page_text(out)
    assert f"{script}:6" in text and "recompile" in text
    assert {e["kind"] for e in events_of(out)} >= {"frame", "compile", "recompile"}


def test_environment_variable_writes_the_report_at_exit(tmp_path, script):
    out = str(tmp_path / "env.html")
    done = run([script], tmp_path, {"GRAPHJIT_REPORT": out})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "graph break" in page_text(out)


def test_cli_explain_prints_each_function(tmp_path, script):
    done = run(["-m", "graphjit", "explain", "--guards", "3", script], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert f"== f ({script}:3)" in out and "Graph break count: 2" in out
    assert f"at {script}:6" in out and "hint:" in out and "more)" in out
    assert "Dynamic inputs (symbolic sizes):" in out


def test_cli_bench_lists_and_refuses(tmp_path):
    done = run(["-m", "graphjit", "bench", "--help"], tmp_path)
    assert done.returncode == 0 and "cpu " in done.stdout and "train " in done.stdout
    done = run(["-m", "graphjit", "bench", "nope"], tmp_path)
    assert done.returncode != 0 and "unknown benchmark 'nope'" in done.stderr
    done = run(["-m", "graphjit", "report", str(tmp_path / "missing.py")], tmp_path)
    assert done.returncode != 0 and "no such script" in done.stderr


@pytest.mark.every_python     # skipped where playwright is not installed
def test_report_renders_in_a_headless_browser(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    path = str(tmp_path / "b.html")
    with graphjit.report(path):
        graphjit.compile(broken)(torch.randn(4, 8), 3)
    with playwright.sync_playwright() as p:
        try:
            browser = p.chromium.launch()
        except Exception as e:   # noqa: BLE001 -- playwright without its browser download
            pytest.skip(f"no browser: {e}")
        page = browser.new_page()
        page.goto("file://" + path)
        assert "graph break" in page.inner_text("body")
        assert page.locator("svg").count() >= 1
        browser.close()
