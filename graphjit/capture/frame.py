"""Frame interception: the per-code-object cache of (guards, compiled entry), the dispatch on every call,
translation on a miss, the recompile limit, and the eager fallback.

    CompiledFunction.__call__ -> first entry whose guards pass -> its result
                              -> none: FrameCache.miss -> translate (Tracer + backend) -> new entry
"""
import dataclasses
import functools
import time
import warnings

from .. import config, logs
from ..exc import Unsupported
from .codegen import (MISS, ReturnCodegen, build_entry, build_guard_reporter, entry_namespace,
                      graph_call_body, forward_call_body)
from .interpreter import Tracer


@dataclasses.dataclass
class CompileOptions:
    backend: object
    fullgraph: bool = False
    dynamic: object = None
    mode: object = None
    options: object = None

    @property
    def key(self):
        return (id(self.backend), self.fullgraph, self.dynamic, self.mode)


@dataclasses.dataclass
class CompileRecord:
    """What one translation produced: explain() and the logs read these."""
    code: object
    graph: object = None             # GraphModule, or None when nothing was captured
    op_count: int = 0
    guards: list = dataclasses.field(default_factory=list)
    break_reason: Unsupported = None
    seconds: float = 0.0


class Recorder:
    """Collects CompileRecords while installed (explain() installs one)."""
    active = []

    def __init__(self):
        self.records = []

    def __enter__(self):
        Recorder.active.append(self)
        return self

    def __exit__(self, *exc):
        Recorder.active.remove(self)


def _record(rec):
    for r in Recorder.active:
        r.records.append(rec)


class FrameCache:
    """The cache of one code object under one set of compile options."""

    def __init__(self, code):
        self.code = code
        self.entries = []          # entry functions, tried in order
        self.reporters = []        # per entry: returns the first failing guard's text
        self.eager = False         # recompile limit hit: always run the original
        self.last_failures = []

    def clear(self):
        self.entries.clear()
        self.reporters.clear()
        self.eager = False
        self.last_failures.clear()

    def miss(self, fn, closure, options, args, kwargs):
        if self.eager:
            return fn(*args, **kwargs)
        if self.entries:
            failed = [r(closure, *args, **kwargs) for r in self.reporters]
            self.last_failures = failed
            logs.log("recompiles", f"recompiling {self.code.co_qualname} "
                                   f"({self.code.co_filename}:{self.code.co_firstlineno}): "
                                   f"guard failed: {failed[-1]}")
        if len(self.entries) >= config.recompile_limit:
            self.eager = True
            reason = self.last_failures[-1] if self.last_failures else "unknown"
            warnings.warn(f"graphjit: {self.code.co_qualname} ({self.code.co_filename}:"
                          f"{self.code.co_firstlineno}) hit the recompile limit "
                          f"({config.recompile_limit}); it runs eagerly from now on. "
                          f"The guard that kept failing: {reason}", RuntimeWarning, stacklevel=3)
            return fn(*args, **kwargs)
        entry, reporter = translate(fn, options, args, kwargs)
        self.entries.append(entry)
        self.reporters.append(reporter)
        result = entry(closure, *args, **kwargs)
        if result is MISS:
            raise AssertionError(f"graphjit: a fresh entry's guards failed on the inputs it was made "
                                 f"for ({self.code.co_qualname}); guards:\n{reporter(closure, *args, **kwargs)}")
        return result


_CACHES = {}   # (code, options key) -> FrameCache


def cache_for(code, options):
    key = (code, options.key)
    if key not in _CACHES:
        _CACHES[key] = FrameCache(code)
    return _CACHES[key]


def reset_caches():
    for cache in _CACHES.values():
        cache.clear()
    _CACHES.clear()


class CompiledFunction:
    """What graphjit.compile returns for a function: same call signature, guarded compiled entries."""

    def __init__(self, fn, options):
        self._graphjit_compiled_fn = fn
        self._options = options
        self._closure = fn.__closure__
        self._cache = cache_for(fn.__code__, options)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        closure = self._closure
        for entry in self._cache.entries:
            result = entry(closure, *args, **kwargs)
            if result is not MISS:
                return result
        return self._cache.miss(self._graphjit_compiled_fn, closure, self._options, args, kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        import types
        return types.MethodType(self, obj)

    def _refresh(self):
        self._cache = cache_for(self._graphjit_compiled_fn.__code__, self._options)


def translate(fn, options, args, kwargs):
    """Trace one frame; returns (entry, guard reporter). Unsupported code gives an eager entry."""
    start = time.perf_counter()
    tracer = Tracer(fn)
    record = CompileRecord(code=fn.__code__)
    namespace = {}
    try:
        result = tracer.trace(args, kwargs)
        cg = ReturnCodegen(namespace)
        return_expr = cg.expr(result)
        replay = tracer.side_effects.replay_lines(cg)
        gm, sources, example_inputs = tracer.graph.finish(cg.output_nodes)
        record.op_count = tracer.graph.op_count()
        compiled = None
        if record.op_count:
            logs.log("graph", f"graph of {fn.__code__.co_qualname}:\n{gm.print_readable(print_output=False)}")
            compiled = compile_graph(gm, example_inputs, options)
            record.graph = gm
    except Unsupported as e:
        if options.fullgraph:
            raise
        logs.log("graph_breaks", f"{fn.__code__.co_qualname} runs eagerly: {e}")
        record.break_reason = e
        record.guards = [g.reason for g in tracer.guards.ordered()]
        record.seconds = time.perf_counter() - start
        _record(record)
        return eager_entry(fn, tracer.guards)
    record.guards = [g.reason for g in tracer.guards.ordered()]
    logs.log("guards", f"guards of {fn.__code__.co_qualname}:\n  " + "\n  ".join(record.guards))
    namespace.update(entry_namespace(fn, tracer.guards))
    namespace["__gj_graph"] = compiled
    entry = build_entry(fn, tracer.guards, graph_call_body(sources, compiled, replay, return_expr), namespace)
    reporter = build_guard_reporter(fn, tracer.guards, dict(namespace))
    record.seconds = time.perf_counter() - start
    _record(record)
    return entry, reporter


def compile_graph(gm, example_inputs, options):
    from ..backends.registry import lookup_backend
    backend = lookup_backend(options.backend)
    try:
        return backend(gm, example_inputs)
    except Exception as e:  # a backend failure must not fail the user's program: run the graph as is
        warnings.warn(f"graphjit: backend {getattr(backend, '__name__', backend)} failed ({type(e).__name__}: "
                      f"{e}); running the captured graph without it", RuntimeWarning)
        return gm.forward


def eager_entry(fn, guards):
    """An entry that runs the original function under the guards collected before tracing stopped
    (the same inputs would stop it at the same place)."""
    namespace = entry_namespace(fn, guards)
    namespace["__gj_fn"] = fn
    entry = build_entry(fn, guards, forward_call_body(fn.__code__), namespace, kind="eager entry")
    return entry, build_guard_reporter(fn, guards, dict(namespace))
