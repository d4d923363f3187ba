"""The compile report: one self-contained HTML file of a whole run, and the JSON-lines events behind it.

    with graphjit.report("run.html"):          # or graphjit.report.start(path) ... graphjit.report.stop()
        model(x)                                # or GRAPHJIT_REPORT=run.html python script.py
    python -m graphjit report script.py ...    # the same, from the command line (graphjit/__main__.py)

While a report is open, capture and the compiler send it events (`emit`):

    frame       one translation of a code object: its graph's code, guards, symbolic inputs, the graph
                break (reason, file:line, source line, hint) or eager fallback, and the seconds it took
    recompile   a cache miss of a code object that already had entries: the guard that failed and a
                summary of the arguments of the call that missed (shapes, dtypes, values)
    limit       a code object hit the recompile limit
    compile     the compiler's work on one graph: device, seconds per stage, each kernel (what it fuses),
                extern calls with the reason they are not fused, and the generated source
    refused     the compiler ran a graph as captured, and why
    log         every GRAPHJIT_LOGS artifact (fusion decisions, CUDA graphs, autotuning ...) as text
    profile     with profile=True: time per kernel and op over the report's calls (torch.profiler)

Each event is appended to `<path without .html>.jsonl` as it happens (a crash keeps what came before);
the HTML is written when the report closes (at exit for GRAPHJIT_REPORT). No network: CSS inline, the
charts are static SVG, nothing runs in the page.
"""
import atexit
import html
import json
import os
import sys
import threading
import time

_lock = threading.RLock()
_active = None          # the open Session, or None
_TEXT_LIMIT = 200_000   # characters kept of one text field (a graph's code, a kernel module's source)


def active():
    return _active is not None


def emit(kind, **fields):
    """Add an event to the open report (nothing without one). Field values must be JSON-able."""
    session = _active
    if session is not None:
        session.add(kind, fields)


def frame_begin():
    """Mark the start of a translation: compiles until frame_end() belong to it. Returns a token."""
    session = _active
    if session is None:
        return None
    with _lock:
        frames = session.frames()
        frames.append({"compiles": [], "record": None, "range": _compile_range(session)})
        return (session, len(frames))


def frame_record(record):
    """The CompileRecord of the innermost open translation."""
    session = _active
    if session is not None and session.frames():
        session.frames()[-1]["record"] = record


def frame_end(token):
    """Close the translation `token` (frame_begin's), emitting its event if it got a record (a translation
    that raised, under fullgraph=True, gets none: the error reaches the caller)."""
    if token is None:
        return
    session, depth = token
    with _lock:
        frames = session.frames()
        if len(frames) < depth:
            return
        opened = frames[depth - 1]
        closing = frames[depth - 1:]
        del frames[depth - 1:]
    for frame in reversed(closing):
        if frame["range"] is not None:
            frame["range"].__exit__(None, None, None)
    record = opened["record"]
    if record is None:
        return
    code = record.code
    e = record.break_reason
    brk = None
    if e is not None:
        brk = {"reason": str(getattr(e, "reason", e)), "file": getattr(e, "filename", None),
               "line": getattr(e, "lineno", None), "source": getattr(e, "source_line", None),
               "hint": getattr(e, "hint", None), "fallback": getattr(e, "fallback", None),
               "stack": [f"{f}:{n}" for f, n in getattr(e, "user_stack", [])[1:6]]}
    graph = None
    if record.graph is not None:
        try:
            graph = record.graph.code
        except Exception:   # noqa: BLE001 -- a graph whose code can't be printed still gets its event
            graph = "(graph code not available)"
    session.add("frame", {"function": code.co_qualname, "file": code.co_filename, "line": code.co_firstlineno,
                          "seconds": record.seconds, "ops": record.op_count, "graph": _clip(graph),
                          "guards": list(record.guards), "dynamic": [str(d) for d in record.dynamic],
                          "break": brk, "compiles": opened["compiles"]})


def compile_event(fields):
    """A compile event: kept with the translation that is open (if any), and emitted."""
    session = _active
    if session is None:
        return
    seq = session.add("compile", fields)
    with _lock:
        frames = session.frames()
        if frames:
            frames[-1]["compiles"].append(seq)


def describe_args(args, kwargs):
    """A short description of a call's arguments: what a recompile saw."""
    def one(v):
        import torch
        if isinstance(v, torch.Tensor):
            return f"Tensor{tuple(v.shape)} {str(v.dtype).replace('torch.', '')} {v.device.type}" + \
                   (" requires_grad" if v.requires_grad else "")
        if isinstance(v, (int, float, bool, str, type(None))):
            return _clip(repr(v), 80)
        if isinstance(v, (list, tuple)) and len(v) <= 4:
            return f"{type(v).__name__}[{', '.join(one(x) for x in v)}]"
        return type(v).__name__
    try:
        return [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    except Exception:   # noqa: BLE001 -- an argument whose description fails is not worth failing a call
        return ["(arguments not described)"]


def _clip(text, limit=_TEXT_LIMIT):
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


class Session:
    """One open report: events in memory and in the JSON-lines file."""

    def __init__(self, path, profile=False):
        path = os.fspath(path)
        self.path = path
        self.events_path = (path[:-5] if path.endswith(".html") else path) + ".jsonl"
        self.start = time.perf_counter()
        self.started_at = time.strftime("%Y-%m-%d %H:%M:%S")
        self.events = []
        self._threads = threading.local()    # each thread's open translations, innermost last
        self.profile = profile
        self.profiler = None
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.events_file = open(self.events_path, "w", encoding="utf-8")

    def frames(self):
        if not hasattr(self._threads, "frames"):
            self._threads.frames = []
        return self._threads.frames

    def add(self, kind, fields):
        with _lock:
            event = {"kind": kind, "seq": len(self.events), "t": round(time.perf_counter() - self.start, 6),
                     **fields}
            self.events.append(event)
            if self.events_file is not None:
                self.events_file.write(json.dumps(event, default=str) + "\n")
                self.events_file.flush()
            return event["seq"]

    def close(self):
        if self.events_file is not None:
            self.events_file.close()
            self.events_file = None
        text = render(self.events, title=f"graphjit report, {self.started_at}",
                      argv=" ".join(sys.argv) if sys.argv else "")
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)


class _Report:
    """`graphjit.report`: `with graphjit.report(path, profile=False):`, or `.start(path)` / `.stop()`."""

    def __call__(self, path, profile=False):
        return _Context(path, profile)

    def start(self, path, profile=False):
        """Open a report written to `path` (HTML) and `<path without .html>.jsonl`; one at a time."""
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError(f"graphjit.report: a report is already open ({_active.path}); stop it first")
            session = Session(path, profile)
            if profile:
                session.profiler = _start_profiler()
            _active = session
        return session

    def stop(self):
        """Close the open report and write its HTML; returns the HTML's path (None if none was open)."""
        global _active
        with _lock:
            session, _active = _active, None
        if session is None:
            return None
        if session.profiler is not None:
            rows = _stop_profiler(session.profiler)
            session.add("profile", {"rows": rows})
        session.close()
        return session.path

    @property
    def active(self):
        return _active is not None


class _Context:
    def __init__(self, path, profile):
        self.path, self.profile = path, profile

    def __enter__(self):
        report.start(self.path, self.profile)
        return self

    def __exit__(self, *exc):
        report.stop()


report = _Report()


def start_from_environment():
    """GRAPHJIT_REPORT=path opens a report at import, written when the process exits."""
    from . import config
    if config.report and _active is None:
        report.start(config.report, profile=bool(config.report_profile))
        atexit.register(report.stop)


# ---- profiling -------------------------------------------------------------------------------------------

_COMPILE_RANGE = "graphjit compile"


def _compile_range(session):
    """Under a profiled report, a profiler range around a translation: what runs inside it (tracing, the
    compiler, autotuning) is left out of the report's run times."""
    if session.profiler is None:
        return None
    import torch
    entered = torch.profiler.record_function(_COMPILE_RANGE)
    entered.__enter__()
    return entered


def compiling():
    """A context for compiler work outside a translation (a backward graph compiled at its first call)."""
    session = _active
    if session is None or session.profiler is None:
        import contextlib
        return contextlib.nullcontext()
    import torch
    return torch.profiler.record_function(_COMPILE_RANGE)

def _start_profiler():
    """torch.profiler over the report's calls; the compiler names each kernel call in it (config
    profile_kernels) while the report is open."""
    import torch
    from . import config
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.graphjit_knob = config.profile_kernels
    config.profile_kernels = 1
    profiler.__enter__()
    return profiler


def _stop_profiler(profiler, top=60):
    """Rows of self time per name, over what ran outside the compile ranges, most time first."""
    from . import config
    profiler.__exit__(None, None, None)
    config.profile_kernels = profiler.graphjit_knob
    events = list(profiler.events() or ())
    compile_spans = [(e.time_range.start, e.time_range.end) for e in events if e.name == _COMPILE_RANGE]

    def in_compile(e):
        start = e.time_range.start
        return any(a <= start <= b for a, b in compile_spans)

    totals = {}
    for e in events:
        if e.name == _COMPILE_RANGE or in_compile(e):
            continue
        row = totals.setdefault(e.name, {"name": e.name, "calls": 0, "cpu_us": 0.0, "device_us": 0.0})
        row["calls"] += 1
        row["cpu_us"] += float(getattr(e, "self_cpu_time_total", 0) or 0)
        device = getattr(e, "self_device_time_total", None)
        if device is None:
            device = getattr(e, "self_cuda_time_total", 0)
        row["device_us"] += float(device or 0)
    rows = sorted(totals.values(), key=lambda r: -(r["device_us"] or r["cpu_us"]))
    for r in rows:
        r["cpu_us"], r["device_us"] = round(r["cpu_us"], 1), round(r["device_us"], 1)
    return rows[:top]


# ---- HTML ------------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d8dce4}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d8dce4;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f1f3f7}pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:480px;
font:12px/1.35 ui-monospace,monospace}details{margin:6px 0}summary{cursor:pointer}
.break{border-left:4px solid #d9822b;padding:4px 10px;background:#fff8f0;margin:6px 0}
.recompile{border-left:4px solid #b83280;padding:4px 10px;background:#fdf2f8;margin:6px 0}
.fallback{border-left:4px solid #c53030;padding:4px 10px;background:#fff5f5;margin:6px 0}
.muted{color:#667085}.num{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}
.card{display:inline-block;border:1px solid #d8dce4;border-radius:6px;padding:8px 14px;margin:4px 8px 4px 0}
.card b{font-size:20px;display:block}
"""

_STAGE_COLORS = {"capture": "#5b8def", "decompose": "#8e6cef", "lower": "#e86bb0", "schedule": "#f2994a",
                 "plan": "#f2c94c", "codegen": "#6fcf97", "build": "#27ae60", "wrapper": "#56ccf2"}


def _e(text):
    return html.escape(str(text), quote=True)


def _bar_chart(items, unit, width=640, row=22):
    """A horizontal bar chart in SVG: items = [(label, value)]."""
    if not items:
        return "<p class=muted>nothing measured</p>"
    top = max(v for _, v in items) or 1.0
    label_w = 230
    height = row * len(items) + 6
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, (label, value) in enumerate(items):
        y = 3 + i * row
        w = max(1.0, (width - label_w - 90) * value / top)
        color = _STAGE_COLORS.get(label, "#5b8def")
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{_e(label[:36])}</text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{color}"/>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="12">{value:.3g} {unit}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _stacked_bar(stages, width=640, height=18):
    """One bar split into stages [(name, seconds)], with a legend."""
    total = sum(v for _, v in stages) or 1.0
    x, parts = 0.0, [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for name, value in stages:
        w = width * value / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" '
                     f'fill="{_STAGE_COLORS.get(name, "#999")}"><title>{_e(name)} {value:.3f} s</title></rect>')
        x += w
    parts.append("</svg>")
    legend = " ".join(f'<span style="color:{_STAGE_COLORS.get(n, "#999")}">&#9632;</span> {_e(n)} {v:.3f} s'
                      for n, v in stages)
    return "".join(parts) + f"<div class=muted>{legend}</div>"


def _pre(text):
    return f"<pre>{_e(text)}</pre>"


def render(events, title="graphjit report", argv=""):
    """The HTML page of a list of events."""
    by_seq = {e["seq"]: e for e in events}
    frames = [e for e in events if e["kind"] == "frame"]
    compiles = [e for e in events if e["kind"] == "compile"]
    recompiles = [e for e in events if e["kind"] == "recompile"]
    limits = [e for e in events if e["kind"] == "limit"]
    refused = [e for e in events if e["kind"] == "refused"]
    logs_ = [e for e in events if e["kind"] == "log"]
    profiles = [e for e in events if e["kind"] == "profile"]
    attached = {s for f in frames for s in f.get("compiles", ())}

    graphs = sum(1 for f in frames if f.get("graph"))
    breaks = [f for f in frames if f.get("break") and not f["break"].get("fallback")]
    fallbacks = [f for f in frames if f.get("break") and f["break"].get("fallback")]
    kernels = sum(len(c.get("kernels", ())) for c in compiles)
    out = [f"<!doctype html><html><head><meta charset=utf-8><title>{_e(title)}</title><style>{_CSS}</style>"
           f"</head><body><h1>{_e(title)}</h1>"]
    if argv:
        out.append(f"<p class=muted>command: <code>{_e(argv)}</code></p>")
    cards = [("compiled functions", len({(f['file'], f['line'], f['function']) for f in frames})),
             ("graphs", graphs), ("graph breaks", len(breaks)), ("eager frames", len(fallbacks)),
             ("recompiles", len(recompiles)), ("kernels", kernels),
             ("compile time", f"{sum(f['seconds'] for f in frames):.2f} s")]
    out.append("<div>" + "".join(f"<span class=card><b>{_e(v)}</b>{_e(k)}</span>" for k, v in cards) + "</div>")

    # compile time per stage, over the whole run
    stage_totals = {"capture": 0.0}
    for f in frames:
        inner = sum(sum(by_seq[s].get("stages", {}).values()) for s in f.get("compiles", ()) if s in by_seq)
        stage_totals["capture"] += max(0.0, f["seconds"] - inner)
    for c in compiles:
        for stage, seconds in c.get("stages", {}).items():
            stage_totals[stage] = stage_totals.get(stage, 0.0) + seconds
    out.append("<h2>Compile time per stage</h2><p class=muted>capture: translating bytecode into graphs, guards "
               "and entries (translation time less the compiler's stages); the rest are the compiler's stages "
               "(graphjit/compiler/pipeline.py), summed over every graph.</p>")
    out.append(_bar_chart([(k, v) for k, v in stage_totals.items() if v > 0], "s"))

    if breaks or fallbacks:
        out.append("<h2>Graph breaks</h2>")
        for f in breaks + fallbacks:
            out.append(_break_html(f))
    if recompiles or limits:
        out.append("<h2>Recompiles</h2>")
        for r in recompiles:
            out.append(_recompile_html(r))
        for r in limits:
            out.append(f"<div class=fallback><b>recompile limit</b> {_e(r['function'])} "
                       f"<code>{_e(r['file'])}:{r['line']}</code>: {_e(r.get('message', ''))}</div>")

    if profiles and profiles[-1].get("rows"):
        rows = profiles[-1]["rows"]
        device = any(r["device_us"] for r in rows)
        key = "device_us" if device else "cpu_us"
        out.append(f"<h2>Run time per kernel and op</h2><p class=muted>torch.profiler over the report's calls, "
                   f"self {'device' if device else 'CPU'} time; graphjit's kernels are named "
                   f"<code>graphjit &lt;graph&gt;:&lt;kernel&gt;</code>.</p>")
        top = [r for r in rows if r[key]][:25]
        out.append(_bar_chart([(r["name"], r[key] / 1000.0) for r in top], "ms", width=900))
        out.append("<table><tr><th>name</th><th>calls</th><th>self CPU us</th><th>self device us</th></tr>" +
                   "".join(f"<tr><td><code>{_e(r['name'])}</code></td><td class=num>{r['calls']}</td>"
                           f"<td class=num>{r['cpu_us']}</td><td class=num>{r['device_us']}</td></tr>"
                           for r in rows) + "</table>")

    out.append("<h2>Compiled functions</h2>")
    groups = {}
    for f in frames:
        groups.setdefault((f["file"], f["line"], f["function"]), []).append(f)
    recompiles_of = {}
    for r in recompiles:
        recompiles_of.setdefault((r["file"], r["line"], r["function"]), []).append(r)
    for (file, line, function), entries in groups.items():
        out.append(f"<h3>{_e(function)} <code class=muted>{_e(file)}:{line}</code></h3>")
        out.append(f"<p>{len(entries)} translation(s), {sum(1 for f in entries if f.get('graph'))} graph(s), "
                   f"{len(recompiles_of.get((file, line, function), ()))} recompile(s)</p>")
        for i, f in enumerate(entries):
            out.append(_frame_html(i, f, by_seq))
    loose = [c for c in compiles if c["seq"] not in attached]
    if loose:
        out.append("<h2>Graphs compiled outside a translation</h2><p class=muted>backward graphs, compiled at "
                   "the first backward call, and graphs handed to the compiler directly.</p>")
        for c in loose:
            out.append(_compile_html(c))
    if refused:
        out.append("<h2>Graphs the compiler ran as captured</h2><ul>" +
                   "".join(f"<li>{_e(r.get('name', 'graph'))}: {_e(r.get('reason', ''))}</li>" for r in refused) +
                   "</ul>")
    if logs_:
        out.append("<h2>Logs</h2><p class=muted>every GRAPHJIT_LOGS artifact, in order</p>")
        per = {}
        for entry in logs_:
            per.setdefault(entry["artifact"], []).append(entry["text"])
        for artifact, texts in per.items():
            out.append(f"<details><summary>{_e(artifact)} ({len(texts)})</summary>"
                       f"{_pre(chr(10).join(texts))}</details>")
    out.append("</body></html>")
    return "\n".join(out)


def _break_html(f):
    b = f["break"]
    kind = "fallback" if b.get("fallback") else "break"
    where = f"<code>{_e(b['file'])}:{b['line']}</code>" if b.get("file") else ""
    parts = [f"<div class={kind}><b>{'eager frame' if kind == 'fallback' else 'graph break'}</b> in "
             f"{_e(f['function'])} {where}<br>{_e(b['reason'])}"]
    if b.get("source"):
        parts.append(f"<pre>{_e(b['source'])}</pre>")
    for s in b.get("stack", ()):
        parts.append(f"<div class=muted>called from <code>{_e(s)}</code></div>")
    if b.get("hint"):
        parts.append(f"<div>hint: {_e(b['hint'])}</div>")
    if b.get("fallback"):
        parts.append(f"<div class=muted>no graph break was possible ({_e(b['fallback'])}): the frame ran "
                     f"eagerly, the functions it called compiled as their own frames</div>")
    return "".join(parts) + "</div>"


def _recompile_html(r):
    args = ", ".join(r.get("args", ()))
    return (f"<div class=recompile><b>recompile</b> {_e(r['function'])} <code>{_e(r['file'])}:{r['line']}</code> "
            f"(entry {r.get('entries', 0) + 1})<br>guard failed: <code>{_e(r.get('guard'))}</code>"
            f"<br><span class=muted>call: ({_e(args)})</span></div>")


def _frame_html(i, f, by_seq):
    parts = [f"<details open><summary>translation {i + 1}: {f['ops']} ops, {len(f['guards'])} guards, "
             f"{f['seconds']:.3f} s</summary>"]
    if f.get("break"):
        parts.append(_break_html(f))
    if f.get("dynamic"):
        parts.append("<p>dynamic inputs (symbolic sizes):</p><ul>" +
                     "".join(f"<li><code>{_e(d)}</code></li>" for d in f["dynamic"]) + "</ul>")
    else:
        parts.append("<p class=muted>dynamic inputs: none (static sizes)</p>")
    if f.get("graph"):
        parts.append(f"<details><summary>graph code</summary>{_pre(f['graph'])}</details>")
    parts.append(f"<details><summary>guards ({len(f['guards'])})</summary>{_pre(chr(10).join(f['guards']))}"
                 f"</details>")
    for seq in f.get("compiles", ()):
        if seq in by_seq:
            parts.append(_compile_html(by_seq[seq]))
    return "".join(parts) + "</details>"


def _compile_html(c):
    stages = list(c.get("stages", {}).items())
    parts = [f"<div><b>compiled</b> {_e(c.get('name', 'graph'))} for {_e(c.get('device', '?'))}: "
             f"{len(c.get('kernels', ()))} kernel(s), {len(c.get('externs', ()))} extern call(s), "
             f"{sum(v for _, v in stages):.3f} s</div>", _stacked_bar(stages)]
    if c.get("kernels"):
        parts.append("<table><tr><th>kernel</th><th>what it fuses</th></tr>" +
                     "".join(f"<tr><td><code>{_e(k['name'])}</code></td><td><pre>{_e(k['text'])}</pre></td></tr>"
                             for k in c["kernels"]) + "</table>")
    if c.get("externs"):
        parts.append("<details><summary>extern calls (not fused) and why</summary><table>"
                     "<tr><th>name</th><th>op</th><th>reason</th></tr>" +
                     "".join(f"<tr><td>{_e(x['name'])}</td><td><code>{_e(x['op'])}</code></td>"
                             f"<td>{_e(x['reason'])}</td></tr>" for x in c["externs"]) + "</table></details>")
    if c.get("source"):
        parts.append(f"<details><summary>generated kernels ({_e(c.get('language', ''))})</summary>"
                     f"{_pre(c['source'])}</details>")
    if c.get("wrapper"):
        parts.append(f"<details><summary>generated wrapper (Python)</summary>{_pre(c['wrapper'])}</details>")
    return "".join(parts)
