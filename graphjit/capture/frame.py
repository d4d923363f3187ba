"""Frame interception: the per-code-object cache of (guards, compiled entry), the dispatch on every call,
translation on a miss, the recompile limit, and the eager fallback.

    CompiledFunction.__call__ -> first entry whose guards pass -> its result
                              -> none: FrameCache.miss -> translate (Tracer + backend) -> new entry
"""
import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import threading
import time
import types
import warnings
import weakref

import torch

from .. import config, gcpause, logs, reporting
from ..exc import Unsupported, UserError
from ..ops import function_modes, function_modes_suspended
from .codegen import (MISS, ReturnCodegen, build_entry, build_guard_reporter, entry_namespace,
                      graph_call_body, forward_call_body)
from . import dynamic
from .dynamic import DynamicPolicy
from .guards import GuardSet, LENGTH, TENSOR as TENSOR_GUARD_COST, lit
from .interpreter import Tracer, BreakPoint, CALLER, bind_by_code
from .intercept import Interceptor, intercepting_function, rebound
from .sources import AttrSource, ItemSource, LocalSource
from .variables.base import BINARY_OPS
from .variables import randomvars
from .variables.symbolic import DRAWS, FLOATS, Respecialize


@dataclasses.dataclass
class CompileOptions:
    backend: object
    fullgraph: bool = False
    dynamic: object = None
    mode: object = None
    options: object = None
    _compiler: object = dataclasses.field(default=None, compare=False, repr=False)

    def compiler(self):
        """The backend's callable in these options' mode: one per compile() call (in a CUDA-graph mode it
        holds the memory pool its graphs share)."""
        if self._compiler is None:
            from ..backends.registry import lookup_backend
            self._compiler = lookup_backend(self.backend, self.mode, self.options)
        return self._compiler

    @property
    def key(self):
        # the backend object itself (not its id, which a collected backend's successor may reuse)
        options = repr(sorted(self.options.items())) if self.options else None
        return (_Identity(self.backend), self.fullgraph, self.dynamic, self.mode, options)


class _Identity:
    """Hashes and compares by identity, and keeps the object alive while a cache key holds it."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.obj is self.obj


@dataclasses.dataclass
class CompileRecord:
    """What one translation produced: explain() and the logs read these."""
    code: object
    graph: object = None             # GraphModule, or None when nothing was captured
    op_count: int = 0
    guards: list = dataclasses.field(default_factory=list)
    break_reason: Unsupported = None
    seconds: float = 0.0
    dynamic: list = dataclasses.field(default_factory=list)   # the graph's symbolic inputs, described


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
    """The cache of one code object with one globals dict, under one set of compile options."""

    def __init__(self, code, f_globals=None):
        self.code = code
        self.f_globals = f_globals  # held: the cache's key has its id (entries read and write this dict)
        self.entries = []          # entry functions, tried in order
        self.reporters = []        # per entry: returns the first failing guard's text
        self.eager = False         # recompile limit hit: always run the original
        self.last_failures = []
        self.policy = None         # dynamic.DynamicPolicy: what earlier traces saw, which sizes vary
        self.limit = None          # entries before eager: config.recompile_limit unless set (compile_regions)
        self.generation = 0        # changes whenever entries are added or removed (miss: RETRY)

    def clear(self):
        self.generation += 1
        self.entries.clear()
        self.reporters.clear()
        self.eager = False
        self.last_failures.clear()
        self.policy = None

    def miss(self, fn, closure, options, args, kwargs, generation):
        """A call no entry served: translate it into a new entry (under the translation lock), or run it
        eagerly past the recompile limit. `generation` is self.generation when the caller tried the
        entries: if another thread added one since, RETRY (the caller tries the entries again)."""
        try:
            bind_by_code(fn, args, kwargs)
        except TypeError:       # arguments that do not bind: eager's own TypeError, naming the function
            return fn(*args, **kwargs)
        with TRANSLATION_LOCK:
            if self.generation != generation:
                return RETRY
            outer, CALLER.exception = CALLER.exception, sys.exception()   # the caller's: no handler runs here
            outer_modes = CALLER.function_modes, CALLER.dispatch_modes
            CALLER.function_modes = function_modes()
            CALLER.dispatch_modes = torch._C._len_torch_dispatch_stack()
            # saved-tensor hooks the caller has on (a non-reentrant checkpoint's) see the tensors the
            # entry saves when it runs, not those the translation and compile save
            hooks = torch._C._autograd._saved_tensors_hooks_set_tracing(True)
            try:
                with gcpause.paused():
                    entry = self._translate_locked(fn, closure, options, args, kwargs)
            finally:
                CALLER.exception = outer
                CALLER.function_modes, CALLER.dispatch_modes = outer_modes
                torch._C._autograd._saved_tensors_hooks_set_tracing(hooks)
        if entry is None:
            return eager_function(fn, closure, options)(*args, **kwargs)
        # the fresh entry runs outside the lock: user code may wait on a thread that is translating
        result = entry(closure, *args, **kwargs)
        if result is MISS:
            with TRANSLATION_LOCK:
                position = next((i for i, e in enumerate(self.entries) if e is entry), None)
                reporter = self.reporters[position] if position is not None else None
                failed = reporter(closure, *args, **kwargs) if reporter is not None else "unknown"
                if config.strict_fresh_guards:
                    raise AssertionError(f"graphjit: a fresh entry's guards failed on the inputs it was made "
                                         f"for ({self.code.co_qualname}); guards:\n{failed}")
                # what the guards check changed while the entry compiled: this call runs eagerly, the next
                # translates again
                if position is not None:
                    del self.entries[position], self.reporters[position]
                    self.generation += 1
            logs.log("recompiles", f"{self.code.co_qualname}: a fresh entry's guard failed on its own call "
                                   f"({failed}); running the call eagerly")
            return eager_function(fn, closure, options)(*args, **kwargs)
        return result

    def _translate_locked(self, fn, closure, options, args, kwargs):
        """A new entry for this call, appended; None when the call runs eagerly (the recompile limit)."""
        if self.eager:
            return None
        if self.entries:
            failed = [_other_defaults(e, fn) or r(closure, *args, **kwargs)
                      for e, r in zip(self.entries, self.reporters)]
            self.last_failures = failed
            logs.log("recompiles", f"recompiling {self.code.co_qualname} "
                                   f"({self.code.co_filename}:{self.code.co_firstlineno}): "
                                   f"guard failed: {failed[-1]}")
            if reporting.active():
                reporting.emit("recompile", function=self.code.co_qualname, file=self.code.co_filename,
                               line=self.code.co_firstlineno, guard=failed[-1], entries=len(self.entries),
                               args=reporting.describe_args(args, kwargs))
        limit = self.limit or config.recompile_limit
        if len(self.entries) >= limit:
            self.eager = True
            reason = self.last_failures[-1] if self.last_failures else "unknown"
            dynamic_part = f"; dynamic so far: {self.policy.describe()}" if self.policy is not None else ""
            message = (f"graphjit: {self.code.co_qualname} ({self.code.co_filename}:"
                       f"{self.code.co_firstlineno}) hit the recompile limit "
                       f"({limit}); its {len(self.entries)} compiled entries keep running "
                       f"for the inputs they were made for, other calls run eagerly (the functions "
                       f"and modules they call are still compiled). "
                       f"The guard that kept failing: {reason}{dynamic_part}")
            warnings.warn(message, RuntimeWarning, stacklevel=5)
            reporting.emit("limit", function=self.code.co_qualname, file=self.code.co_filename,
                           line=self.code.co_firstlineno, message=message)
            return None
        if self.policy is None:
            self.policy = DynamicPolicy(options.dynamic)
        entry, reporter = translate(fn, options, args, kwargs, policy=self.policy)
        if entry.graphless and self.entries and all(e.graphless for e in self.entries):
            # a second trace with no tensor work, and no graph break: for arguments of these types the frame
            # is Python alone, and values it guards on keep changing (a formatted number, a string a graph
            # break handed over), so CPython runs it (arguments of other types, tensors, trace it again)
            entry, reporter = argument_types_entry(fn, options, args, kwargs)
            logs.log("recompiles", f"{self.code.co_qualname}: no graph in two traces; for arguments of these "
                                   "types it runs in CPython")
        self.entries.append(entry)
        self.reporters.append(reporter)
        self.generation += 1
        return entry


@contextlib.contextmanager
def compiling_in_a_call():
    """For a compile that runs inside an entry's call (a graph compiled per set of sizes, a backward at its
    first call): torch's tracing machinery is process-wide, so one at a time, as translations are (this
    lock first); and not under the caller's torch function modes (its default device is not the
    compiler's)."""
    with TRANSLATION_LOCK, function_modes_suspended():
        yield


def _same_items(made_with, now):
    """Defaults (a tuple) or keyword defaults (a dict) holding the very objects an entry was made with, in
    a new container (a function made anew each call: `lambda t, k=k: ...`): the entry binds the same."""
    if type(made_with) is tuple and type(now) is tuple:
        return len(made_with) == len(now) and all(a is b for a, b in zip(made_with, now))
    if type(made_with) is dict and type(now) is dict:
        return made_with.keys() == now.keys() and all(made_with[k] is now[k] for k in made_with)
    return False


def _other_defaults(entry, fn):
    """Why `entry` does not serve fn's call though its guards may pass: other default values."""
    for attr in ("__defaults__", "__kwdefaults__"):
        made_with, now = getattr(entry, attr), getattr(fn, attr)
        if made_with is not now and not _same_items(made_with, now):
            return (f"{fn.__qualname__}.{attr} holds other objects than those the entry binds (a function "
                    f"made anew with new default values, or its defaults replaced)")
    return None


# One translation at a time, in all threads: concurrent first calls of a function compile it once (the
# others wait, then find its entry), and capture's and torch's tracing state is never shared by two
# translations. Re-entrant: a translation may call into code that misses in the same thread. Entries run
# outside it.
TRANSLATION_LOCK = threading.RLock()
RETRY = object()    # miss(): another thread added an entry since the caller tried them


_CACHES = {}   # (code, options key, id of the globals) -> FrameCache (graphjit.compile(f) made anew reuses it)


def cache_for(code, options, f_globals):
    """The FrameCache of functions with this code and these globals (functions sharing a code object,
    `types.FunctionType(f.__code__, other_globals)`, read and write their own globals: an entry binds the
    globals it was traced with, and its guards test them)."""
    key = (code, options.key, id(f_globals))
    cache = _CACHES.get(key)
    if cache is None:
        cache = _CACHES[key] = FrameCache(code, f_globals)
    return cache


def forget(options):
    """Drop every cache made under these options (explain's one-off backend): its frame caches, its
    interceptors and the compiled functions and module wrappers made for it."""
    key = options.key
    for cache_key in [k for k in _CACHES if k[1] == key]:
        del _CACHES[cache_key]
    for interceptor_key in [k for k in _INTERCEPTORS if k[0] == key]:
        del _INTERCEPTORS[interceptor_key]
    for fn in list(_INTERCEPTED_FUNCTIONS):
        fn.__dict__.get(_INTERCEPTED, {}).pop(key, None)


def reset_caches():
    """Empty every cache (kept in place, so compiled functions made before still reset with it)."""
    from . import intercept, resume
    for cache in _CACHES.values():
        cache.clear()
    _LOGGED_BREAKS.clear()
    resume.clear()
    intercept.clear()
    _INTERCEPTORS.clear()


class CompiledFunction:
    """What graphjit.compile returns for a function: same call signature, guarded compiled entries."""

    def __init__(self, fn, options):
        self._graphjit_compiled_fn = fn
        self._options = options
        self._closure = fn.__closure__
        self._code = fn.__code__
        self._cache = cache_for(fn.__code__, options, fn.__globals__)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        fn = self._graphjit_compiled_fn
        if fn.__code__ is not self._code:       # `fn.__code__ = other` since: that code's entries
            self._refresh()
        # _dispatch's first pass, inlined: a hit costs no further Python frame
        cache, closure = self._cache, self._closure
        generation = cache.generation
        defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
        try:
            for entry in cache.entries:
                if (entry.__defaults__ is defaults or _same_items(entry.__defaults__, defaults)) and \
                        (entry.__kwdefaults__ is kwdefaults or _same_items(entry.__kwdefaults__, kwdefaults)):
                    result = entry(closure, *args, **kwargs)
                    if result is not MISS:
                        return result
        except TypeError as e:
            if e.__traceback__.tb_next is None:     # the arguments do not bind: no frame of the entry ran
                return fn(*args, **kwargs)          # eager's own TypeError, naming the function
            raise
        result = cache.miss(fn, closure, self._options, args, kwargs, generation)
        return self._dispatch(fn, closure, args, kwargs) if result is RETRY else result

    def call_in(self, closure, *args, **kwargs):
        """Call with `closure`'s cells instead of the function's own: a resume function is made once per
        break and serves every closure of its `def`, each entry passing the cells of its own call."""
        return self._dispatch(rebound(self._graphjit_compiled_fn, closure), closure, args, kwargs)

    def _dispatch(self, fn, closure, args, kwargs):
        defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
        cache = self._cache
        while True:
            generation = cache.generation
            try:
                for entry in cache.entries:
                    # an entry binds missing arguments from the defaults it was made with: those of another
                    # function with this code, or replaced since (`f.__defaults__ = ...`), are not this call's
                    if _other_defaults(entry, fn) is not None:
                        continue
                    result = entry(closure, *args, **kwargs)
                    if result is not MISS:
                        return result
            except TypeError as e:
                if e.__traceback__.tb_next is None:     # the arguments do not bind (see __call__)
                    return fn(*args, **kwargs)
                raise
            result = cache.miss(fn, closure, self._options, args, kwargs, generation)
            if result is not RETRY:
                return result

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    def _refresh(self):
        self._code = self._graphjit_compiled_fn.__code__
        self._cache = cache_for(self._code, self._options, self._graphjit_compiled_fn.__globals__)


def translate(fn, options, args, kwargs, defer_logging=True, policy=None):
    if config.triton_prewarm_at_capture:
        from ..backends.registry import before_capture
        before_capture(options.backend, [*args, *kwargs.values()])
    token = reporting.frame_begin()
    kept = {DRAWS: True, FLOATS: True}     # what stays unspecialized (variables/symbolic.py)
    try:
        while True:     # each retry turns one option off, so this ends
            try:
                return _translate(fn, options, args, kwargs, defer_logging, policy, kept)
            except _RetryWithoutDeferral:
                defer_logging = False
            except Respecialize as retry:
                kept = {**kept, retry.kind: False}
    finally:
        reporting.frame_end(token)


def _translate(fn, options, args, kwargs, defer_logging, policy, kept):
    """Trace one frame; returns (entry, guard reporter).

    Capture the whole frame if possible. If something can't be captured, restart the trace and stop just
    before the root-frame instruction where it happened (a graph break): compile the graph so far, run
    that instruction in CPython, continue in a resume function. Where no break is possible, the frame
    runs eagerly under the guards collected up to the failure.
    """
    start = time.perf_counter()
    record = CompileRecord(code=fn.__code__)
    tracer = Tracer(fn, defer_logging=defer_logging, policy=policy, draws=kept[DRAWS], keep_floats=kept[FLOATS])
    try:
        try:
            result = tracer.trace(args, kwargs)
            _check_deferral(tracer)
            entry, reporter = _finish(fn, options, tracer, record, lambda cg: _return_tail(cg, result))
            entry.graphless = record.op_count == 0       # the whole frame, no graph break: Python alone
        except Unsupported:
            raise
        except Exception as internal:   # a graphjit bug must not break the user's program
            logs.log("graph_breaks", f"graphjit internal error in {fn.__code__.co_qualname}: "
                                     f"{type(internal).__name__}: {internal}")
            raise Unsupported(f"graphjit internal error: {type(internal).__name__}: {internal}",
                              hint="please report this with GRAPHJIT_LOGS=all output") from internal
    except Unsupported as e:
        if options.fullgraph and getattr(e, "respecialize", None):
            raise Respecialize(e.respecialize) from None   # one graph, the value guarded, not no graph
        if options.fullgraph and not isinstance(e, UserError):
            raise           # the code's own exception is no capture failure: CPython raises it, as below
        record.break_reason = _without_frames(e)
        entry = reporter = None
        why_not = breakable(fn, e)
        if why_not is None:
            try:
                entry, reporter = _translate_break(fn, options, args, kwargs, e, record, defer_logging, policy,
                                                   kept)
            except Unsupported as e2:
                why_not = f"graph break not possible: {e2.reason}"
            except Exception as internal:
                why_not = f"graph break failed: {type(internal).__name__}: {internal}"
        if entry is None and getattr(e, "respecialize", None):
            raise Respecialize(e.respecialize)   # no break where the value is used: trace without keeping it
        if entry is None:
            logs.log("graph_breaks", f"{fn.__code__.co_qualname} runs eagerly ({why_not}): {e}")
            e.fallback = why_not
            record.graph = None
            record.guards = [g.reason for g in tracer.guards.ordered()]
            entry, reporter = eager_entry(fn, tracer.guards, options)
        else:
            _log_break_once(fn, e)
    record.seconds = time.perf_counter() - start
    _record(record)
    reporting.frame_record(record)
    return entry, reporter


_LOGGED_BREAKS = set()


def _log_break_once(fn, error):
    key = (error.filename, error.lineno, error.reason)
    if key not in _LOGGED_BREAKS:
        _LOGGED_BREAKS.add(key)
        logs.log("graph_breaks", f"graph break in {fn.__code__.co_qualname}: {error}")


class _RetryWithoutDeferral(BaseException):   # passes through the internal-error handlers
    pass


def _check_deferral(tracer):
    """Logger calls may only be deferred past the graph when no other effect could be observed by a
    handler in between; otherwise translate again with logging calls as real graph breaks."""
    effects = tracer.side_effects
    if effects.deferred_calls and not effects.only_deferred_calls():
        effects.drop_restored_stores(tracer.guards)
    if effects.deferred_calls and not effects.only_deferred_calls():
        raise _RetryWithoutDeferral()


def _return_tail(cg, result):
    return {"__gj_ret": cg.expr(result)}, ["return __gj_ret"]


def _finish(fn, options, tracer, record, make_tail, differentiated_again=False):
    """Build the graph, compile it, generate the entry. make_tail(cg) -> (values, tail lines);
    differentiated_again: the frame differentiates the graph's gradients again after it (compile_graph)."""
    namespace = {}
    cg = ReturnCodegen(namespace)
    cg.frame_objects = tracer.frame_objects
    cg.raised = tracer.raised
    values, tail = make_tail(cg)
    replay = tracer.side_effects.replay_lines(cg)
    gm, sources, example_inputs = tracer.graph.finish(cg.output_nodes)
    record.op_count = tracer.graph.op_count()
    record.dynamic = tracer.graph.describe_symbolic()
    compiled = None
    shape_guards = _shape_guards(tracer)          # before the backend: a refused mark_dynamic compiles nothing
    if record.op_count:
        logs.log("graph", lambda: f"graph of {fn.__code__.co_qualname}:\n{gm.print_readable(print_output=False)}")
        known = len(tracer.graph.shape_env.guards)
        compiled = compile_graph(gm, example_inputs, options, sources, fn.__code__.co_qualname,
                                 differentiated_again=differentiated_again)
        record.graph = gm
        if len(tracer.graph.shape_env.guards) != known:    # the backend assumed more about the sizes
            shape_guards = _shape_guards(tracer)
    for template, guard_sources, reason in shape_guards:
        tracer.guards.add(TENSOR_GUARD_COST, template, reason, guard_sources)
    if shape_guards:
        namespace.update(dynamic.guard_namespace())
    record.guards = [g.reason for g in tracer.guards.ordered()]
    logs.log("guards", f"guards of {fn.__code__.co_qualname}:\n  " + "\n  ".join(record.guards))
    namespace.update(entry_namespace(fn, tracer.guards))
    namespace["__gj_graph"] = _restoring_state(compiled, gm) if compiled is not None else None
    body = graph_call_body(sources, compiled, cg.prelude, values, replay, tail)
    start, end = tracer.grad_modes
    if end != start:
        # the traced code changed the grad mode and left it so (torch.set_grad_enabled(False), or a break
        # inside a no_grad block): set it after the graph, whatever the backend's callable does with the
        # graph's own mode nodes (AOTAutograd's runtime wrapper restores the mode it was called in)
        body.insert(int(compiled is not None), f"__gj_torch._C._set_grad_enabled({end!r})")
    if tracer.draws:      # first: the entry draws before its graph and everything after it
        namespace["__gj_draws"] = randomvars.drawing_function(tracer.draws)
        body.insert(0, randomvars.draw_line(len(tracer.draws)))
    entry = build_entry(fn, tracer.guards, body, namespace, input_sources=sources)
    reporter = build_guard_reporter(fn, tracer.guards, dict(namespace))
    return entry, reporter


def _shape_guards(tracer):
    """The ShapeEnv's guards on the trace's size symbols, as (template, sources, reason); with draws, less
    the draws' own finiteness checks (a guard on a draw traces the frame again: randomvars.unguarded)."""
    try:
        guards = tracer.graph.shape_guards()
    except Exception as e:   # noqa: BLE001 -- e.g. a mark_dynamic dim the trace had to specialize
        raise Unsupported(f"dynamic shapes: {e}", hint="a dim marked with graphjit.mark_dynamic was "
                          "specialized: use maybe_mark_dynamic, or see GRAPHJIT_LOGS=dynamic") from e
    return randomvars.unguarded(tracer, guards) if tracer.draws else guards


_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION_EX")
_BRANCHES = ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")

# Other instructions a graph break can run in CPython: opname -> (stack items consumed, pushes a result,
# Python source from the instruction and its inputs' expressions, bottom of the stack first). E.g. an
# attribute whose property getter can't be captured: the entry evaluates `obj.attr` for real.
_SINGLE = {
    "LOAD_ATTR": (1, True, lambda i, a: f"{a[0]}.{i.argval}"),
    "BINARY_OP": (2, True, lambda i, a: f"__gj_binary[{i.argval!r}]({a[0]}, {a[1]})"),
    "BINARY_SUBSCR": (2, True, lambda i, a: f"{a[0]}[{a[1]}]"),
    "COMPARE_OP": (2, True, lambda i, a: f"({a[0]} {i.argval} {a[1]})"),
    "CONTAINS_OP": (2, True, lambda i, a: f"({a[0]} {'not in' if i.argval else 'in'} {a[1]})"),
    "UNARY_NEGATIVE": (1, True, lambda i, a: f"(-{a[0]})"),
    "UNARY_INVERT": (1, True, lambda i, a: f"(~{a[0]})"),
    "UNARY_NOT": (1, True, lambda i, a: f"(not {a[0]})"),
    "STORE_ATTR": (2, False, lambda i, a: f"{a[1]}.{i.argval} = {a[0]}"),
    "STORE_SUBSCR": (3, False, lambda i, a: f"{a[1]}[{a[2]}] = {a[0]}"),
    # f-strings: argval (conversion, has a spec) and the conversion alone
    "FORMAT_VALUE": (lambda i: 1 + i.argval[1], True,
                     lambda i, a: f"format({_converted(i.argval[0], a[0])}, {a[1] if i.argval[1] else repr('')})"),
    "CONVERT_VALUE": (1, True, lambda i, a: _converted(i.argval, a[0])),
}


def _converted(conversion, text):
    """An f-string's !s, !r or !a conversion (None: none) of the value that `text` reads."""
    return text if conversion is None else f"{conversion}({text})"


def _without_frames(error):
    """`error` with no tracebacks, itself and the exceptions chained to it: a kept break reason's traceback
    holds the translation's frames and, through them, its callers', whose locals (the user's tensors, a
    generator the caller dropped) would then live until a garbage collection."""
    seen, link = set(), error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return error


def breakable(fn, error):
    """None if the frame can break at the instruction where `error` happened, else the reason it can't."""
    from . import bytecode
    from .resume import in_loop, enclosing_handler_kinds
    from ..exc import UserError
    code = fn.__code__
    index = getattr(error, "root_index", None)
    if isinstance(error, UserError):
        return "an exception raised by the code itself"
    if getattr(error, "no_break", None):
        return error.no_break
    if index is None or index < 0:
        return "no instruction of the frame to break at"
    if getattr(error, "in_handler", False):
        # CPython would run the rest without the exception the trace is handling (sys.exception(), bare
        # raise, __context__ and the handler's restore of the caller's exception all depend on it)
        return "graph break inside an except, finally or __exit__ handler"
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return "graph breaks in generators are not supported"
    opname = bytecode.read(code)[index].opname
    if opname not in _CALLS + _BRANCHES + tuple(_SINGLE):
        return f"graph breaks at {opname} are not supported"
    if in_loop(code, index):
        return "graph break inside a loop"
    if "try" in enclosing_handler_kinds(code, index):
        return "graph break inside a try block"
    return None


def _set_cells(frame):
    """name -> cell of the frame's own cell variables that hold a value at the break."""
    return {name: cell for name, cell in frame.cells.items()
            if name in frame.code.co_cellvars and cell.real_cell is None and cell.contents is not cell.EMPTY}


# the instructions that load a cell itself (to make a closure over it): LOAD_CLOSURE, or on 3.13 LOAD_FAST
_LOADS_A_CELL = ("LOAD_CLOSURE", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST")


def _closure_made(code, index, names):
    """Whether an instruction before `index` may have made a closure over one of the cells `names` (which
    would keep the frame's cell, where the resume function makes a new one)."""
    from . import bytecode
    for ins in bytecode.read(code)[:index]:
        if ins.opname in _LOADS_A_CELL:
            loaded = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if any(name in names for name in loaded):
                return True
    return False


def _translate_break(fn, options, args, kwargs, error, record, defer_logging, policy, kept):
    """Trace again up to the breaking instruction; emit graph + instruction in CPython + resume call."""
    tracer = Tracer(fn, stop_at=error.root_index, defer_logging=defer_logging, policy=policy, draws=kept[DRAWS],
                    keep_floats=kept[FLOATS])
    state = tracer.trace(args, kwargs)
    _check_deferral(tracer)
    if not isinstance(state, BreakPoint):
        raise Unsupported("the second trace did not reach the graph break")
    frame = state.frame
    set_cells = _set_cells(frame)
    if set_cells and _closure_made(frame.code, state.index, set_cells):
        raise Unsupported("graph break after a closure over a cell the frame set was made")
    inst = frame.instructions[state.index]
    from .resume import enclosing_handler_kinds
    from .variables.torchvars import AutocastVariable, WithExitVariable
    open_withs = enclosing_handler_kinds(fn.__code__, state.index).count("with")
    if open_withs != sum(isinstance(v, WithExitVariable) for v in frame.stack):
        raise Unsupported("graph break inside the with-block of a user context manager")
    for item in reversed(frame.stack):          # innermost block first, as the with-exits would run
        if isinstance(item, WithExitVariable) and isinstance(item.ctx, AutocastVariable):
            item.ctx.close_at_break(tracer)

    def make_tail(cg):
        return _break_tail(fn, options, frame, inst, state.index, cg)
    # the instruction may ask for gradients to be differentiated again (autograd.grad(..., create_graph=True))
    return _finish(fn, options, tracer, record, make_tail,
                   differentiated_again=getattr(error, "differentiated_again", False))


def _break_tail(fn, options, frame, inst, index, cg):
    from .resume import resume_function, NULL_SLOT, Reentered, original_code, super_self
    from .variables.base import NULL
    from .variables.torchvars import AutocastVariable, ReenterAutocast, WithExitVariable
    stack = list(frame.stack)
    values = {}
    call_expr = None
    statement = None
    if inst.opname in _CALLS:
        call_expr, consumed = _call_expression(inst, stack, cg, values)
        stack = stack[:-consumed]
        targets = [(None, index + 1)]
    elif inst.opname in _SINGLE:
        consumed, pushes, source = _SINGLE[inst.opname]
        consumed = consumed(inst) if callable(consumed) else consumed
        operands = [_read_operand(values, cg, v) for v in stack[len(stack) - consumed:]]
        stack = stack[:len(stack) - consumed]
        text = source(inst, operands)
        call_expr, statement = (text, None) if pushes else (None, text)
        cg.namespace["__gj_binary"] = BINARY_OPS
        targets = [(None, index + 1)]
    else:
        cond = cg.expr(stack.pop())
        values["__gj_cond"] = cond
        jump_when = {"POP_JUMP_IF_TRUE": "__gj_cond", "POP_JUMP_IF_FALSE": "not __gj_cond",
                     "POP_JUMP_IF_NONE": "__gj_cond is None",
                     "POP_JUMP_IF_NOT_NONE": "__gj_cond is not None"}[inst.opname]
        targets = [(jump_when, inst.target), (None, index + 1)]
    # The entry holds stack item k in `__gj_s{k}`; the resume function receives it as `__gj_stack{k}`.
    # The resume function is compiled too, and its entry binds `__gj_s{k}` while later value expressions
    # still read its parameters: a parameter sharing a temporary's name would be overwritten first.
    layout = [NULL_SLOT if item is NULL else f"__gj_stack{k}" for k, item in enumerate(stack)]
    passed = [f"__gj_s{k}" for k, item in enumerate(stack) if item is not NULL]
    for k, item in enumerate(stack):
        if item is not NULL:
            values[f"__gj_s{k}"] = cg.expr(item)
    # a cell the frame set is passed by its contents: the resume function's own cell of that name (its
    # MAKE_CELL wraps the argument) starts with them; no closure over the old cell exists (_closure_made)
    cells = _set_cells(frame)
    local_names = sorted([n for n in frame.locals if not n.startswith("__gj_")] + list(cells))
    first = super_self(original_code(fn.__code__))
    leading = 0
    if first in local_names:         # zero-argument super() in the resume function reads its first local
        local_names.remove(first)
        local_names.insert(0, first)
        leading = 1
    for name in local_names:
        values[f"__gj_l_{name}"] = cg.expr(cells[name].contents if name in cells else frame.locals[name])
    if call_expr is not None:
        layout.append(f"__gj_stack{len(stack)}")
    tail = []
    # if the instruction raises, the with-blocks open at the break must still be exited, innermost first
    exits = [f"__gj_s{k}" for k, item in enumerate(stack) if isinstance(item, WithExitVariable)][::-1]
    guarded = f"__gj_result = {call_expr}" if call_expr is not None else statement if statement else \
        "__gj_cond = bool(__gj_cond)" if inst.opname in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE") else "pass"
    if exits:
        tail += ["try:", f"    {guarded}", "except BaseException:", "    __gj_info = __gj_sys.exc_info()"]
        tail += [f"    {name}(*__gj_info)" for name in exits] + ["    raise"]
        cg.namespace["__gj_sys"] = sys
    else:
        tail.append(guarded)
    # an autocast block open at the break: entered for the instruction only (its with-exit in __gj_s<k>);
    # the resume function enters it again itself (ReenterAutocast), inside its own graph when traced
    for k, item in reversed(list(enumerate(stack))):
        if isinstance(item, WithExitVariable) and isinstance(item.ctx, AutocastVariable):
            tail += [f"__gj_s{k}(None, None, None)", f"__gj_s{k} = {cg.obj(ReenterAutocast(item.ctx.params))}"]
            layout[k] = Reentered(layout[k])
    closure = fn.__closure__
    for k, (condition, target) in enumerate(targets):
        resume = resume_function(fn.__code__, target, layout, local_names, fn.__globals__, closure, leading)
        name = f"__gj_resume{k}"
        cg.namespace[name] = CompiledFunction(resume, options)
        arguments = ", ".join([f"__gj_l_{n}" for n in local_names[:leading]] + passed +
                              (["__gj_result"] if call_expr is not None else []) +
                              [f"__gj_l_{n}" for n in local_names[leading:]])
        line = f"return {name}.call_in(__gj_closure, {arguments})"
        tail.append(f"if {condition}: {line}" if condition else line)
    cg.namespace["__gj_call"] = intercepting_call(options)
    return values, tail


def _call_expression(inst, stack, cg, values):
    """The Python expression running a CALL / CALL_KW / CALL_FUNCTION_EX on the traced stack (its
    operands bound among `values`), and how many stack slots it consumes."""
    from .variables.base import NULL
    if inst.opname == "CALL_FUNCTION_EX":
        has_kw = bool(inst.argval)
        kwargs = stack[-1] if has_kw else None
        args = stack[-1 - has_kw]
        a, b = stack[-3 - has_kw:-1 - has_kw]
        consumed = 3 + has_kw
        fn, self_arg = (b, None) if a is NULL else (a, None) if b is NULL else (a, b)
        read = functools.partial(_read_operand, values, cg)
        parts = [read(fn)] + ([read(self_arg)] if self_arg is not None else [])
        parts.append(f"*{read(args)}")
        if kwargs is not None:
            parts.append(f"**{read(kwargs)}")
        return f"__gj_call({', '.join(parts)})", consumed
    names = ()
    items = stack
    extra = 0
    if inst.opname == "CALL_KW":
        names = stack[-1].as_python_constant()
        items = stack[:-1]
        extra = 1
    argc = inst.argval
    call_args = items[len(items) - argc:]
    a, b = items[len(items) - argc - 2:len(items) - argc]
    fn, first = (b, []) if a is NULL else (a, []) if b is NULL else (a, [b])
    positional = first + call_args[:len(call_args) - len(names)]
    keywords = call_args[len(call_args) - len(names):] if names else []
    read = functools.partial(_read_operand, values, cg)
    parts = [read(fn)] + [read(v) for v in positional]
    parts += [f"{k}={read(v)}" for k, v in zip(names, keywords)]
    return f"__gj_call({', '.join(parts)})", argc + 2 + extra


def _read_operand(values, cg, var):
    """A name bound to an operand of the break's instruction among `values`, which are read before the
    replayed effects: the instruction runs after them, but on the objects the traced code had on its
    stack (`print(lst[0])` after `del lst[0]` prints the old first item)."""
    name = f"__gj_a{len(values)}"
    values[name] = cg.expr(var)
    return name


# ---- interception: calls made in CPython at a graph break are captured as their own frames ----

# the attribute of a Python function called from a graph break or an eager frame that holds its compiled
# versions, per options (a dict of the function's own: a table keyed by the function, holding values that
# hold it, would keep every such function alive)
_INTERCEPTED = "__graphjit_intercepted__"
_INTERCEPTED_FUNCTIONS = weakref.WeakSet()     # the functions that have it (forget() drops an options' entries)


def _package_dir(module):
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


# Libraries whose functions are called as they are, never compiled as frames of their own: numerical and
# data libraries with no torch work to capture, where a compile per call site would only cost time
_SKIPPED_PACKAGES = frozenset({"numpy", "scipy", "pandas", "sklearn", "tqdm", "PIL", "matplotlib", "IPython",
                               "tensorboard", "wandb", "triton", "sympy", "networkx", "onnx", "onnxruntime"})


def _skipped(fn):
    """Library code we never trace into: the standard library, torch, graphjit itself, and the numerical
    and data libraries above."""
    import torch
    import graphjit
    filename = fn.__code__.co_filename
    from .variables.functions import STDLIB_DIRS
    return (filename.startswith(STDLIB_DIRS) and "site-packages" not in filename) or \
        filename.startswith((_package_dir(torch), _package_dir(graphjit))) or filename.startswith("<") or \
        str(getattr(fn, "__module__", None) or "").partition(".")[0] in _SKIPPED_PACKAGES


def _implicit_parameters(code):
    """Whether the code takes a parameter that is no Python name: a comprehension's iterator `.0` (on 3.11
    a list, set or dict comprehension is a function of its own, reached from a graph break inside it). A
    generated entry could not name it, and a break inside the comprehension's loop would run it eagerly
    anyway: it runs as it is."""
    count = code.co_argcount + code.co_kwonlyargcount
    return not all(name.isidentifier() for name in code.co_varnames[:count])


def intercepting_call(options):
    def call(fn, *args, **kwargs):
        return intercepted(fn, options)(*args, **kwargs)
    return call


_INTERCEPTORS = {}   # (options key, code) -> intercept.Interceptor
_PASSED_THROUGH = frozenset({types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                             types.MethodWrapperType, type, functools.partial})


def eager_function(fn, closure, options):
    """fn's code, bound to `closure`, with its calls intercepted (as by `__gj_call`): a frame that runs
    eagerly still has the functions and modules it calls captured as their own frames."""
    key = (options.key, fn.__code__)
    interceptor = _INTERCEPTORS.get(key)
    if interceptor is None:
        interceptor = _INTERCEPTORS[key] = Interceptor(lambda f: intercepted(f, options), fn.__code__)
    try:
        return intercepting_function(fn, closure, interceptor)
    except Exception as e:   # a graphjit bug must not break the user's program: run the original
        logs.log("graph_breaks", f"graphjit internal error rewriting {fn.__code__.co_qualname} to intercept "
                                 f"its calls: {type(e).__name__}: {e}")
        return rebound(fn, closure)


def intercepted(fn, options):
    """What a call to `fn` from a graph break or an eager frame should run: a compiled version where it
    is Python code."""
    import torch
    if type(fn) in _PASSED_THROUGH:
        return fn
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        inner = intercepted(fn.__func__, options)
        return fn if inner is fn.__func__ else types.MethodType(inner, fn.__self__)
    if isinstance(fn, types.FunctionType):
        if getattr(fn, "_graphjit_disable", False) or _skipped(fn) or _implicit_parameters(fn.__code__):
            return fn
        key = options.key
        per_fn = fn.__dict__.get(_INTERCEPTED)      # on the function: a cycle through it, which gc frees
        if per_fn is None or per_fn.get("fn") is not fn:
            # (none yet, or one functools.wraps copied from the function a decorator wraps)
            per_fn = fn.__dict__[_INTERCEPTED] = {"fn": fn}
            _INTERCEPTED_FUNCTIONS.add(fn)
        if key not in per_fn:
            per_fn[key] = CompiledFunction(fn, options)
        return per_fn[key]
    if not isinstance(fn, (type, torch.nn.Module)) and isinstance(getattr(type(fn), "__call__", None),
                                                                  types.FunctionType):
        inner = intercepted(type(fn).__call__, options)
        return types.MethodType(inner, fn)
    if isinstance(fn, torch.nn.Module) and isinstance(type(fn).forward, types.FunctionType):
        if _torch_leaf_module(fn):
            return fn
        from ..api import _compile_module
        return _compile_module(fn, options)     # a wrapper sharing the module's dict (cheap), not kept
    return fn


def _torch_leaf_module(module):
    """Whether a module is one of torch's own with no submodules (nn.Linear, nn.Embedding, nn.Dropout ...),
    whose forward is one op: called from a frame that runs eagerly, it runs eagerly too (a graph of one op
    would cost a guard check per call and fuse nothing; torch.compile does not compile torch's frames
    either). A container (nn.Sequential, nn.ModuleList's users) is still compiled, and reaches its
    children."""
    return not module._modules and _in_torch(type(module).forward)


@functools.lru_cache(maxsize=1024)
def _in_torch(function):
    """Whether a function is defined in torch's own source (asked on every call an eager frame makes)."""
    import torch
    return function.__code__.co_filename.startswith(_package_dir(torch))


def compile_graph(gm, example_inputs, options, sources=None, name="graph", differentiated_again=False):
    """The backend's callable for gm, in the options' mode. What capture knows about the graph's inputs
    goes with it in gm.meta["graphjit"] (compiler/facts.py): our guards check every tensor input's
    layout, which inputs stay at one address (CUDA graphs read those in place), and whether the frame
    differentiates the graph's gradients again (create_graph=True at the break after it)."""
    gm.meta["graphjit"] = {
        "inputs_guarded": True, "name": name, "differentiated_again": differentiated_again,
        "static_inputs": [_is_parameter_or_buffer(value, source) or _marked_static_address(value)
                          for value, source in zip(example_inputs, sources or [None] * len(example_inputs))]}
    backend = options.compiler()
    grad_mode, default_dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        with function_modes_suspended():   # the caller's default device is not the compiler's
            return backend(gm, example_inputs)
    except Exception as e:  # a backend failure must not fail the user's program: run the graph as is
        warnings.warn(f"graphjit: backend {getattr(backend, '__name__', backend)} failed ({type(e).__name__}: "
                      f"{e}); running the captured graph without it", RuntimeWarning)
        return gm.forward
    finally:
        # a backend that runs or traces the graph (AOTAutograd) runs its grad-mode changes
        # (torch.set_grad_enabled(False) left set at the end of the frame): the state the entry is guarded on
        torch._C._set_grad_enabled(grad_mode)
        if torch.get_default_dtype() is not default_dtype:
            torch.set_default_dtype(default_dtype)


def _restoring_state(compiled, gm):
    """compiled, for a graph that switches grad mode or autocast inside (a with block): on an error raised
    while it runs (an index out of range), the modes it switched are put back as they were, as the with
    blocks' exits do in eager (a graph run as captured would leave autocast on, or grad mode off)."""
    from torch.amp.autocast_mode import _enter_autocast
    switches = (torch._C._set_grad_enabled, _enter_autocast)
    if not any(node.op == "call_function" and node.target in switches for node in gm.graph.nodes):
        return compiled

    def run(*args):
        grad = torch.is_grad_enabled()
        autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
        cache, nesting = torch.is_autocast_cache_enabled(), _autocast_nesting()
        try:
            return compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(grad)
            for device, enabled, dtype in autocast:
                torch.set_autocast_enabled(device, enabled)
                torch.set_autocast_dtype(device, dtype)
            torch.set_autocast_cache_enabled(cache)
            # the blocks' exits would have counted their nesting down, and the outermost cleared the cache of
            # weight casts (else later blocks read casts of weights an optimizer has since changed)
            entered = _autocast_nesting() - nesting
            for _ in range(entered):
                torch.autocast_decrement_nesting()
            if entered > 0 and nesting == 0:
                torch.clear_autocast_cache()
            raise
    run.__wrapped__ = compiled
    return run


def _autocast_nesting():
    """How many autocast blocks are open (torch counts them, and clears its cache of casts at the last exit)."""
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


def _is_parameter_or_buffer(value, source):
    """Whether a graph input is a module's parameter or buffer: CUDA graphs read those in place."""
    if isinstance(value, torch.nn.Parameter):
        return True
    return isinstance(source, ItemSource) and isinstance(source.base, AttrSource) and \
        source.base.attr in ("_parameters", "_buffers")


def _marked_static_address(value):
    """Whether a graph input was marked with torch._dynamo.mark_static_address (or graphjit's): the caller
    keeps it at one address across calls (transformers' StaticCache marks its key and value tensors), so
    CUDA graphs read it in place instead of copying it in (and back, when written) at every replay. Its
    sizes stay as they are (symbolic where they change), unlike a parameter's."""
    return isinstance(value, torch.Tensor) and getattr(value, "_dynamo_static_input_type", None) is not None


def argument_types_entry(fn, options, args, kwargs):
    """An eager entry guarded only on the types of the arguments (and of the items of *args and **kwargs,
    with their count and names); `graphless`, as the traces it replaces. Which path the frame takes may
    depend on the arguments' values, or on state it reads: a later call whose path would do tensor work
    runs eagerly too (torch.compile skips such a frame for good)."""
    guards = GuardSet()
    bound = bind_by_code(fn, args, kwargs)
    for name, value in bound.arguments.items():
        source = LocalSource(name)
        guards.add_type(source, type(value))
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            guards.add(LENGTH, f"len({{0}}) == {len(value)}", None, (source,))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            guards.add(LENGTH, f"sorted({{0}}) == {lit(sorted(value))}", None, (source,))
        else:
            continue
        for key in (range(len(value)) if kind is inspect.Parameter.VAR_POSITIONAL else value):
            guards.add_type(ItemSource(source, key), type(value[key]))
    entry, reporter = eager_entry(fn, guards, options)
    entry.graphless = True
    return entry, reporter


def eager_entry(fn, guards, options):
    """An entry that runs the function under the guards collected before tracing stopped (the same
    inputs would stop it at the same place), with the calls it makes intercepted (`eager_function`)."""
    namespace = entry_namespace(fn, guards)
    last = [fn.__closure__, eager_function(fn, fn.__closure__, options)]   # the closure served last

    def eager_for(closure):
        if closure is not last[0]:
            last[:] = closure, eager_function(fn, closure, options)
        return last[1]
    namespace["__gj_eager_for"] = eager_for
    body = forward_call_body(fn.__code__, callee="__gj_eager_for(__gj_closure)")
    entry = build_entry(fn, guards, body, namespace, kind="eager entry")
    return entry, build_guard_reporter(fn, guards, dict(namespace))
