"""The public API: compile(), explain(), reset(), disable, allow_in_graph, and the nn.Module wrapper.

Follow compile() down: it builds a CompiledFunction (capture/frame.py), whose first call translates the
frame (capture/interpreter.py) into an fx graph plus guards, hands the graph to a backend, and caches the
generated entry (capture/codegen.py) on the function's code object.
"""
import copy
import dataclasses
import functools
import types

import torch

from . import config
from .capture.frame import CompiledFunction, CompileOptions, Recorder, forget, reset_caches
from .exc import Unsupported


def compile(fn_or_module=None, *, backend=None, fullgraph=False, dynamic=None, mode=None, options=None):
    """Compile a function, bound method or nn.Module; usable as a decorator with or without arguments.

        model = graphjit.compile(model)
        @graphjit.compile(fullgraph=True)
        def f(x): ...
    """
    if mode is not None and options is not None:
        raise ValueError("graphjit.compile: pass either mode= or options=, not both")
    if dynamic not in (None, False, True):
        raise ValueError(f"graphjit.compile: dynamic must be None, True or False, not {dynamic!r}")
    if not isinstance(fullgraph, bool):
        raise ValueError(f"graphjit.compile: fullgraph must be True or False, not {fullgraph!r}")
    from . import modes
    chosen = modes.lookup(mode)
    if backend is None:    # a named mode means graphjit's compiler, as torch.compile's modes mean Inductor
        backend = config.default_backend if mode is None else "graphjit"
    opts = CompileOptions(backend=backend, fullgraph=fullgraph, dynamic=dynamic,
                          mode=None if chosen.name == "default" else chosen.name, options=options)
    from .backends.registry import lookup_backend
    lookup_backend(opts.backend, None, options)   # unknown backends and options fail here, not at the first call
    if fn_or_module is None:
        return functools.partial(_compile, options=opts)
    return _compile(fn_or_module, opts)


def _compile(target, options):
    if isinstance(target, torch.nn.Module):
        return _compile_module(target, options)
    if isinstance(target, CompiledFunction):
        target = target._graphjit_compiled_fn
    if isinstance(target, types.MethodType):
        func = target.__func__
        if isinstance(func, CompiledFunction):      # a method decorated with @graphjit.compile
            func = func._graphjit_compiled_fn
        if getattr(func, "_graphjit_disable", False):
            return target
        return types.MethodType(CompiledFunction(func, options), target.__self__)
    if isinstance(target, types.FunctionType):
        if getattr(target, "_graphjit_disable", False):
            return target
        return CompiledFunction(target, options)
    if callable(target) and isinstance(getattr(type(target), "__call__", None), types.FunctionType):
        return types.MethodType(CompiledFunction(type(target).__call__, options), target)
    raise TypeError(f"graphjit.compile expects a function, method or nn.Module, got {type(target).__name__}")


# ---- nn.Module wrapper ----

class CompiledModule:
    """Mixed into a subclass of the module's own class. The wrapper shares the original's __dict__, so
    parameters, buffers, state_dict, attributes and hooks are the original's; only forward is compiled.
    isinstance(wrapper, OriginalClass) holds, and nn.Module.__call__ (hooks included) runs as usual."""
    __slots__ = ("_orig_mod",)
    _graphjit_forward = None

    def forward(self, *args, **kwargs):
        return type(self)._graphjit_forward(self, *args, **kwargs)

    def __repr__(self):
        return f"graphjit.compile({object.__getattribute__(self, '_orig_mod')!r})"

    def __setattr__(self, name, value):
        if name == "__class__" and isinstance(value, type) and issubclass(value, torch.nn.Module):
            # a module that changes its class: the original changes too, and the wrapper's class stays one
            # whose original class (_ORIGINAL_CLASS) is the original's
            orig = object.__getattribute__(self, "_orig_mod")
            options = type(self)._graphjit_forward._options
            if not issubclass(value, CompiledModule):   # a lazy module becoming its plain class
                orig.__class__, value = value, _wrapper_class(value, options)
            else:       # a subclass of the wrapper class (parametrize's) or back to a wrapper class
                orig.__class__ = _original_class(value)
            object.__setattr__(self, "__class__", value)
            return
        super().__setattr__(name, value)

    def __deepcopy__(self, memo):
        """As __reduce_ex__ (defined here, so that torch.nn.utils.parametrize keeps it rather than adding its
        own, which would copy the wrapper without its original)."""
        options = dataclasses.replace(type(self)._graphjit_forward._options, _compiler=None)
        return _compile_module(copy.deepcopy(object.__getattribute__(self, "_orig_mod"), memo), options)

    def __reduce_ex__(self, protocol):
        """copy.deepcopy and pickle: the original module (copied or pickled as any module is) compiled again
        with the same options on the way back; nn.Module's own state would drop the wrapper's slot, and
        pickle would look the wrapper class up under the original's name."""
        options = dataclasses.replace(type(self)._graphjit_forward._options, _compiler=None)
        return _compile_module, (object.__getattribute__(self, "_orig_mod"), options)


_WRAPPER_CLASSES = {}
# wrapper class (or a subclass of one made from outside) -> the class its original module has
_ORIGINAL_CLASS = {}


def _original_class(wrapper_cls):
    """The original module's class for a wrapper of class wrapper_cls. A class made from outside on top of
    a wrapper class (torch.nn.utils.parametrize's `Parametrized<Name>`, which gets a property per
    parametrized tensor after the swap) gets a twin on top of the original class that reads and writes
    through the outside class's attributes, so that the original module sees what the wrapper sees."""
    if wrapper_cls not in _ORIGINAL_CLASS:
        (base, *others) = wrapper_cls.__bases__
        if others or not issubclass(base, CompiledModule):
            raise TypeError(f"graphjit.compile: cannot give the compiled module the class {wrapper_cls.__name__} "
                            "(a class made on top of a compiled module's class must have it as its only base)")
        _ORIGINAL_CLASS[wrapper_cls] = type(wrapper_cls.__name__, (_original_class(base),),
                                            {"__getattr__": _twin_getattr, "__setattr__": _twin_setattr,
                                             "_graphjit_outside_class": wrapper_cls})
    return _ORIGINAL_CLASS[wrapper_cls]


def _outside_attribute(twin, name):
    """The attribute `name` that the class made from outside (not the wrapper class or anything under it)
    defines, or _MISSING; dunder names (the instance dict's descriptor, which copy.deepcopy sets) are the
    twin's own."""
    if name.startswith("__") and name.endswith("__"):
        return _MISSING
    for klass in type(twin)._graphjit_outside_class.__mro__:
        if "_graphjit_forward" in vars(klass) or klass is CompiledModule:
            break
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def _twin_getattr(self, name):
    attr = _outside_attribute(self, name)
    if attr is _MISSING:
        return torch.nn.Module.__getattr__(self, name)
    return attr.__get__(self, type(self)) if hasattr(type(attr), "__get__") else attr


def _twin_setattr(self, name, value):
    attr = _outside_attribute(self, name)
    if hasattr(type(attr), "__set__"):
        attr.__set__(self, value)
    else:
        torch.nn.Module.__setattr__(self, name, value)


_MISSING = object()


def _follow_original(wrapper):
    """Where the original module's class was changed from outside (torch.nn.utils.parametrize on the
    original after compiling it), the wrapper takes the wrapper class of the original's new class; returns
    whether it changed."""
    orig_cls = type(object.__getattribute__(wrapper, "_orig_mod"))
    if _ORIGINAL_CLASS.get(type(wrapper)) is orig_cls:
        return False
    object.__setattr__(wrapper, "__class__", _wrapper_class(orig_cls, type(wrapper)._graphjit_forward._options))
    return True


def _wrapper_class(cls, options):
    key = (cls, options.key)
    cached = _WRAPPER_CLASSES.get(key)
    if cached is None or cached._graphjit_original_forward is not cls.forward:   # none yet, or forward replaced
        original = forward = cls.forward
        if isinstance(forward, CompiledFunction):    # a forward decorated with @graphjit.compile
            forward = forward._graphjit_compiled_fn
        if not isinstance(forward, types.FunctionType):
            raise TypeError(f"graphjit.compile: {cls.__name__}.forward is not a Python function")
        compiled = CompiledFunction(forward, options)

        def wrapper_forward(self, *args, **kwargs):
            if _ORIGINAL_CLASS.get(type(self)) is not type(object.__getattribute__(self, "_orig_mod")) and \
                    _follow_original(self):
                return self.forward(*args, **kwargs)
            if cls.forward is not original:
                return _forward_replaced(self, cls, options, args, kwargs)
            return compiled(self, *args, **kwargs)
        # forward's own signature and names (inspect.signature follows __wrapped__): transformers' generate()
        # reads the signature to decide which arguments (position_ids, attention_mask) to build and pass
        functools.update_wrapper(wrapper_forward, forward, updated=())
        # the wrapper class keeps the original's names: libraries key registries on str(type(model))
        _WRAPPER_CLASSES[key] = type(cls.__name__, (CompiledModule, cls),
                                     {"_graphjit_forward": compiled, "forward": wrapper_forward,
                                      "_graphjit_original_forward": original,
                                      "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _ORIGINAL_CLASS[_WRAPPER_CLASSES[key]] = cls
    return _WRAPPER_CLASSES[key]


def _forward_replaced(wrapper, cls, options, args, kwargs):
    """The original class's forward was replaced after compiling (`Model.forward = new_forward`): the
    wrapper takes a wrapper class compiling the new one. One that is not a Python function, or a
    descriptor that makes a new one at each lookup (functools.partialmethod), runs as it is."""
    forward = cls.forward
    if forward is cls.forward:
        try:
            replacement = _wrapper_class(cls, options)
        except TypeError:
            pass
        else:
            object.__setattr__(wrapper, "__class__", replacement)
            return wrapper.forward(*args, **kwargs)
    return forward(wrapper, *args, **kwargs)


def _compile_module(module, options):
    if isinstance(module, CompiledModule):
        module = object.__getattribute__(module, "_orig_mod")
    if getattr(type(module).forward, "_graphjit_disable", False) or \
            getattr(module, "_graphjit_disable", False):       # graphjit.disable on it or on its forward
        return module
    wrapper_cls = _wrapper_class(type(module), options)
    wrapper = object.__new__(wrapper_cls)
    object.__setattr__(wrapper, "__dict__", module.__dict__)
    object.__setattr__(wrapper, "_orig_mod", module)
    return wrapper


# ---- regional compilation ----

_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)


def compile_regions(model, **compile_kwargs):
    """Regional compilation: compile each repeated block of `model` on its own, in place, and return
    `model`. A repeated block is a child of a ModuleList, Sequential or ModuleDict whose children (two or
    more) are all of one class: each such child is replaced in its container by graphjit.compile(child,
    **compile_kwargs). The compiled child shares the original's parameters and attributes, is an instance
    of its class, and keeps the state_dict's names; the code outside the blocks runs as it is. Every block
    of a class shares one cache of compiled entries: blocks that read nothing of their own but parameters
    run the first block's entry; an int attribute that differs between blocks (`layer_idx`) becomes
    symbolic, and a list read at it (a KV cache's layers) is read at that index on each call, so one entry
    serves them all. A block whose own attribute is read otherwise by value gets entries of its own, so the
    class's entry limit is config.recompile_limit per block, as if each were compiled alone. A model
    without repeated blocks is compiled whole."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"graphjit.compile_regions expects an nn.Module, got {type(model).__name__}")
    if isinstance(model, CompiledModule):
        raise TypeError("graphjit.compile_regions: the model is already compiled as a whole")
    regions = []
    _find_regions(model, regions, set())
    if not regions:
        return compile(model, **compile_kwargs)
    compiled = [(container, key, compile(block, **compile_kwargs)) for container, key, block in regions]
    for container, key, wrapper in compiled:            # all compiled first: nothing is half replaced
        container._modules[key] = wrapper
    per_class = {}
    for _, _, wrapper in compiled:
        per_class.setdefault(type(wrapper), []).append(wrapper)
    for cls, wrappers in per_class.items():
        cache = cls._graphjit_forward._cache
        cache.limit = max(cache.limit or 0, config.recompile_limit * len(wrappers))
    return model


def _find_regions(module, regions, seen):
    """(container, key, block) for each repeated block under `module`, outermost first."""
    if id(module) in seen or isinstance(module, CompiledModule):
        return
    seen.add(id(module))
    children = list(module._modules.items())
    blocks = [m for _, m in children if m is not None]
    if isinstance(module, _CONTAINERS) and len(blocks) >= 2 and len({type(m) for m in blocks}) == 1 and \
            isinstance(type(blocks[0]).forward, types.FunctionType) and \
            not isinstance(blocks[0], (CompiledModule, *_CONTAINERS)):
        regions += [(module, key, m) for key, m in children if m is not None]
        return
    for _, child in children:
        if child is not None:
            _find_regions(child, regions, seen)


# ---- compiled-graph artifacts ----

def save_cache_artifacts(path):
    """Write the compiled-graph cache (CPU graphs: kernels' C++ source, wrappers, as JSON) into one file,
    for machines that run the same models to load with load_cache_artifacts; returns the number of graphs."""
    from .compiler.runtime import graph_cache
    return graph_cache.save_artifacts(path)


def load_cache_artifacts(path):
    """Add the graphs of a file from save_cache_artifacts to this machine's cache: the models they came from
    then load them instead of compiling (after capture, which still runs). Returns the number added."""
    from .compiler.runtime import graph_cache
    return graph_cache.load_artifacts(path)


# ---- the rest of the API ----

def reset():
    """Forget every compiled entry (each compiled function re-translates on its next call)."""
    reset_caches()
    from .capture.interpreter import instructions_of
    instructions_of.cache_clear()


def disable(fn=None, recursive=True):
    """Never capture `fn`: compiled code calling it runs it in CPython, at a graph break."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    return _marked(fn, "_graphjit_disable", "disable")


def allow_in_graph(fn):
    """Record calls to `fn` as one opaque node of the graph instead of tracing into it."""
    return _marked(fn, "_graphjit_allow_in_graph", "allow_in_graph")


def _marked(fn, attr, api):
    """fn with `attr` set; a callable that takes no attributes (a bound method, a builtin) is wrapped in
    a function that calls it, which carries the mark (marking a method's function would mark it for
    every instance)."""
    if not callable(fn):
        raise TypeError(f"graphjit.{api} expects a callable, got {type(fn).__name__}")
    if isinstance(fn, types.FunctionType) or isinstance(fn, torch.nn.Module):
        setattr(fn, attr, True)
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    setattr(call, attr, True)
    return call


class ExplainOutput:
    """What explain() found: graphs, breaks (reason, file:line, source line, hint), ops and guards."""

    def __init__(self, records):
        self.records = records
        self.graphs = [r.graph for r in records if r.graph is not None]
        self.graph_count = len(self.graphs)
        self.break_reasons = [r.break_reason for r in records if r.break_reason is not None]
        self.graph_break_count = len(self.break_reasons)
        self.ops_per_graph = [[n for n in g.graph.nodes if n.op.startswith("call")] for g in self.graphs]
        self.guards = [g for r in records for g in r.guards]
        self.compile_times = [r.seconds for r in records]
        self.dynamic_inputs = [d for r in records for d in r.dynamic]

    def __str__(self):
        return self.format()

    def format(self, max_guards=None):
        """The summary as text; at most `max_guards` guards listed (all by default)."""
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}",
                 f"Op count: {sum(len(o) for o in self.ops_per_graph)}"]
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"Graph {i}: {len(ops)} ops")
        if self.break_reasons:
            lines.append("Break reasons:")
            for i, e in enumerate(self.break_reasons, 1):
                lines.append(f"  {i}. {e.reason}")
                if e.filename:
                    lines.append(f"     at {e.filename}:{e.lineno}")
                if e.source_line:
                    lines.append(f"       {e.source_line}")
                for filename, lineno in getattr(e, "user_stack", [])[1:6]:
                    lines.append(f"     called from {filename}:{lineno}")
                if e.hint:
                    lines.append(f"     hint: {e.hint}")
                if getattr(e, "fallback", None):
                    lines.append(f"     no graph break was possible here ({e.fallback}): the frame ran eagerly; "
                                 f"the functions and modules it called were compiled as their own frames")
        if self.dynamic_inputs:
            lines.append("Dynamic inputs (symbolic sizes):")
            lines += [f"  {d}" for d in self.dynamic_inputs]
        else:
            lines.append("Dynamic inputs: none (sizes are static on a first compile with dynamic=None; a later "
                         "call with other sizes makes what changed symbolic, see graphjit.mark_dynamic)")
        lines.append(f"Guards ({len(self.guards)}):")
        shown = self.guards if max_guards is None else self.guards[:max_guards]
        lines += [f"  {g}" for g in shown]
        if len(shown) < len(self.guards):
            lines.append(f"  ... ({len(self.guards) - len(shown)} more)")
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn, *extra_args, **extra_kwargs):
    """graphjit.explain(fn)(*args, **kwargs) -> ExplainOutput, from a fresh translation of fn (dims marked
    with mark_dynamic are symbolic in it)."""
    if extra_args or extra_kwargs:
        return explain(fn)(*extra_args, **extra_kwargs)

    def run(*args, **kwargs):
        target = fn
        if isinstance(target, CompiledModule):
            target = object.__getattribute__(target, "_orig_mod")
        if isinstance(target, CompiledFunction):
            target = target._graphjit_compiled_fn
        def explain_backend(gm, example_inputs):      # a new backend: a cache of its own, fresh each time
            return gm.forward

        options = CompileOptions(backend=explain_backend)
        try:
            with Recorder() as recorder:
                _compile(target, options)(*args, **kwargs)
        finally:        # its caches serve no later call: they go (20 explains would keep 20 of each)
            forget(options)
            for key in [k for k in _WRAPPER_CLASSES if k[1] == options.key]:
                _ORIGINAL_CLASS.pop(_WRAPPER_CLASSES.pop(key), None)
        return ExplainOutput(recorder.records)
    return run
