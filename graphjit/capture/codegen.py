"""The entry function of a captured frame: check guards, read graph inputs, call the compiled graph,
rebuild the return value.

It is generated as Python source with the original function's signature (plus a leading `__gj_closure`
parameter), so the original's parameters are plain locals and guards read them directly:

    def __gj_entry(__gj_closure, x, y):
        try:
            if not (__gj_torch.is_grad_enabled() is True and type(x) is __gj_o1 and ...):
                return __gj_MISS
        except Exception:
            return __gj_MISS
        __gj_out = __gj_graph(x, y)
        return (__gj_out[0], 3)
"""
import collections
import inspect
import math
import sys
import types

import torch

from .. import logs
from ..code_cache import compile_source
from .guards import GuardSet
from .sources import ObjectSource, refs_in
from .variables.base import ConstantVariable, unsupported
from .variables.objects import new_object
from .variables.tensor import TensorVariable

MISS = object()   # an entry returns this when its guards fail

_LITERAL_TYPES = (int, str, bool, type(None), bytes)


class ReturnCodegen:
    """Turns the returned Variable into a Python expression; collects graph outputs on the way."""

    def __init__(self, namespace):
        self.namespace = namespace
        self.output_nodes = []
        self._object_names = {}
        self.prelude = []          # statements building objects made in the frame, each once
        self._temps = {}           # id(Variable) -> temp name holding its rebuilt object
        self._building = set()     # ids of Variables being rebuilt (cycle detection)
        self._kept = []            # the Variables _temps names, alive while this codegen keys by their ids
        self.frame_objects = {}    # the tracer's: objects that may not leave the frame (classdef.py)
        self.raised = {}           # the tracer's: exceptions raised while tracing

    def _refuse_frame_object(self, value):
        """A class built while tracing (or one of its functions) may not leave the frame, not even inside a
        constant (a frozenset, an exception's args, a slice): raise where the frame can break instead
        (variables/classdef.py)."""
        if not self.frame_objects:
            return
        if isinstance(value, (tuple, list, set, frozenset)):
            for item in value:
                self._refuse_frame_object(item)
        elif isinstance(value, dict):
            for item in (*value.keys(), *value.values()):
                self._refuse_frame_object(item)
        elif isinstance(value, slice):
            for item in (value.start, value.stop, value.step):
                self._refuse_frame_object(item)
        elif isinstance(value, BaseException):
            self._refuse_frame_object(value.args)
        if id(value) in self.frame_objects:
            from ..exc import Unsupported
            error = Unsupported(f"{getattr(value, '__qualname__', value)}, built by a class statement while "
                                "tracing, leaves the frame (each call of the function makes a new one)",
                                hint="the class statement is a graph break")
            error.root_index = self.frame_objects[id(value)]
            raise error

    def obj(self, value):
        key = id(value)
        self._refuse_frame_object(value)
        if key not in self._object_names:
            name = f"__gj_c{len(self._object_names)}"
            self._object_names[key] = name
            self.namespace[name] = value
        return self._object_names[key]

    def const(self, value):
        if type(value) in _LITERAL_TYPES or (type(value) is float and math.isfinite(value)):
            return repr(value)
        if id(value) in self.raised:
            unsupported(f"{type(value).__name__} raised in the frame leaves it (its __traceback__ and "
                        "__context__ are made by a raise in CPython)")
        if isinstance(value, BaseException):
            # an exception made in the frame: a new object each call, as eager makes one (it is mutable)
            if not isinstance(type(value).__init__, types.WrapperDescriptorType) or \
                    vars(value) or value.__cause__ or value.__context__ or value.__traceback__:
                unsupported(f"{type(value).__name__} made in the frame, changed there, leaves it")
            return f"{self.obj(type(value))}({''.join(self.const(a) + ', ' for a in value.args)})"
        return self.obj(value)

    def expr(self, var):
        """Python expression for `var`. Mutable objects made in the frame are built once, into a temp, so
        every reference (return value, stack, locals, side effects) sees the same object."""
        # an exception made in the frame is one mutable object, whichever variables hold it
        key = ("exception", id(var.value)) if _is_frame_exception(var) else id(var)
        if key in self._temps:
            return self._temps[key]
        if key in self._building:
            unsupported(f"rebuilding a self-referential {var.python_type().__name__}")
        if self.frame_objects and not isinstance(var, ConstantVariable):
            source = getattr(var, "source", None)
            while source is not None:           # read through a frame class: P, P.method
                if isinstance(source, ObjectSource):
                    self._refuse_frame_object(source.obj)
                source = getattr(source, "base", None)
        self._building.add(key)
        try:
            text = var.reconstruct(self)
        finally:
            self._building.discard(key)
        if _is_new_mutable(var) or _is_frame_exception(var):
            name = f"__gj_t{len(self._temps)}"
            self.prelude.append(f"{name} = {text}")
            self._temps[key] = name
            self._kept.append(var)
            return name
        return text

    def tensor(self, var):
        """A graph value (a TensorVariable or a symbolic number) as the entry reads it."""
        if var.node.op == "placeholder" and var.source is not None:
            return var.source.expr()
        if var.node not in self.output_nodes:
            self.output_nodes.append(var.node)
        return f"__gj_out[{self.output_nodes.index(var.node)}]"


def _is_frame_exception(var):
    return isinstance(var, ConstantVariable) and isinstance(var.value, BaseException) and \
        getattr(var, "source", None) is None


def _is_new_mutable(var):
    from .variables.containers import ListVariable, DictVariable, SetVariable
    from .variables.objects import UserObjectVariable
    if getattr(var, "built_once", False):      # iterators and dict views made in the frame
        return True
    if isinstance(var, (ListVariable, DictVariable, SetVariable)):
        return var.source is None
    return isinstance(var, UserObjectVariable) and var.is_new


def signature_source(code, closure_param="__gj_closure"):
    """`(__gj_closure, a, b, /, c, *args, d, **kw)` for the code object's parameters (no defaults)."""
    names = code.co_varnames
    nargs, nposonly, nkwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    params = [closure_param]
    params += names[:nposonly]
    if nposonly:
        params.append("/")
    params += names[nposonly:nargs]
    index = nargs + nkwonly
    if code.co_flags & inspect.CO_VARARGS:
        params.append("*" + names[index])
        index += 1
    elif nkwonly:
        params.append("*")
    params += names[nargs:nargs + nkwonly]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append("**" + names[index])
    return ", ".join(params)


def entry_namespace(fn, guards):
    """Names every generated entry and guard function can use."""
    from ..ops import autocast_state, function_modes
    from .side_effects import discard_attr
    namespace = dict(guards.objects)
    # the objects sources name (sources.REFS) that the guards' texts use (the reporter compiles them later)
    namespace.update(refs_in(*(g.expr for g in guards.ordered())))
    namespace.update({"__gj_MISS": MISS, "__gj_torch": torch, "__gj_sys": sys, "__gj_G": fn.__globals__,
                      "__gj_new_object": new_object, "__gj_autocast_state": autocast_state,
                      "__gj_any_autocast": torch._C._is_any_autocast_enabled,
                      "__gj_function_modes": function_modes,
                      "__gj_function_mode_count": torch._C._len_torch_function_stack,
                      "__gj_dispatch_modes": torch._C._len_torch_dispatch_stack,
                      "__gj_nn_module": torch.nn.modules.module,
                      "__gj_discard_attr": discard_attr})
    return namespace


class SourceNames:
    """Each source read once per call: nested sources (`self._modules['h']._modules['0']...`) are bound
    to locals as they are first needed, so their common prefixes are evaluated once. A source in `inline`
    (one that only one expression reads: a function's `__code__`, a link of a chain) is read in place
    instead, which spares the store and load of a local (~5 ns of the ~30 a check costs)."""

    def __init__(self, lines, inline=frozenset()):
        self.lines = lines
        self.names = {}
        self.inline = inline
        self.uses = collections.Counter()    # source -> how many expressions read it

    def check(self, guard):
        """The guard's expression over its sources' names (a source its template reads twice, as NaN's
        `{0} != {0}`, counts as read twice: it is never read in place)."""
        for i, source in enumerate(guard.sources):
            self.uses[source] += guard.template.count(f"{{{i}}}") - 1
        return guard.template.format(*(self.ref(s) for s in guard.sources))

    def ref(self, source):
        self.uses[source] += 1
        if source in self.names:
            return self.names[source]
        base = getattr(source, "base", None)
        if source in self.inline:
            return source.leaf_expr() if base is None else source.expr_on(self.ref(base))
        if base is None:
            text = source.leaf_expr()
            if not text.isidentifier():
                self.names[source] = name = f"__gj_v{len(self.names)}"
                self.lines.append(f"        {name} = {text}")
                return name
            self.names[source] = text
            return text
        base_name = self.ref(base)
        name = f"__gj_v{len(self.names)}"
        self.lines.append(f"        {name} = {source.expr_on(base_name)}")
        self.names[source] = name
        return name


def _guarded_block(lines, names, fast, group):
    """`if not (<fast>):` then the group's guards, indented: `fast` implies them all (the tuple seen while
    tracing is still there; an instance dict is its snapshot). Names bound inside the block are forgotten
    after it: the block may not run."""
    lines.append(f"        if not ({fast}):")
    saved, main = dict(names.names), names.lines
    block = names.lines = []
    for guard in group:
        check = names.check(guard)
        block.append(f"        if not ({check}): return __gj_MISS")
    names.names, names.lines = saved, main
    lines += ["    " + line for line in block]


def _immutable_group(lines, names, root, identity, group):
    """`if <root> is not <the tuple seen while tracing>:` then the group's guards (its type, length, items)."""
    _guarded_block(lines, names, f"{names.ref(root)} is {identity}", group)


def _snapshot_block(lines, names, namespace, base, snapshot, read, group):
    """The guards an instance dict's snapshot covers (GuardSet.snapshot_guards), run only where the dict
    is not equal to the snapshot or holds other objects under the names the trace read."""
    name = f"__gj_snapshot{len(namespace)}"
    namespace[name] = snapshot
    d = f"__gj_d{len(namespace)}"
    lines.append(f"        {d} = __gj_object_getattribute({names.ref(base)}, '__dict__')")
    fast = [f"{d} == {name}"]
    for i, (attr, value) in enumerate(sorted(read.items())):
        namespace[f"{name}_{i}"] = value
        fast.append(f"{d}[{attr!r}] is {name}_{i}")
    _guarded_block(lines, names, " and ".join(fast), sorted(group, key=GuardSet.order_key))


def build_entry(fn, guards, body, namespace, kind="entry", input_sources=()):
    """Generate and exec the entry function: the guard checks, then `body` (lines of Python, where
    `__gj_inputs` stands for the graph's input expressions)."""
    code = fn.__code__
    batched = guards.batched_tensor_check()
    snapshots = guards.snapshot_guards()
    covered = {g for _, _, _, group in snapshots for g in group}
    guards.add_membership_guards(input_sources, covered)
    # a first pass counts the reads of each source; graph inputs are read after the guards' try block,
    # where an exception is not a miss, so they stay bound inside it
    counted = SourceNames([])
    _guard_lines(counted, guards, dict(namespace), batched, snapshots, covered, input_sources)
    inline = {source for source, n in counted.uses.items() if n == 1} - set(input_sources)
    lines = [f"def __gj_entry({signature_source(code)}):", "    try:"]
    names = SourceNames(lines, inline)
    inputs = _guard_lines(names, guards, namespace, batched, snapshots, covered, input_sources)
    if lines[-1] == "    try:":
        lines.append("        pass")              # no guard at all (a function of no arguments)
    lines += ["    except Exception:", "        return __gj_MISS"]
    lines += ["    " + line.replace("__gj_inputs", inputs) for line in body]
    source = "\n".join(lines)
    namespace.update(refs_in(source))
    exec(compile_source(source, f"<graphjit {kind} {code.co_qualname}>"), namespace)
    entry = namespace["__gj_entry"]
    entry.__defaults__ = fn.__defaults__
    entry.__kwdefaults__ = fn.__kwdefaults__
    entry.graphless = False      # frame.FrameCache: True where the trace captured no op and did not break
    logs.log("bytecode", f"{kind} for {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}):\n{source}")
    return entry


def _guard_lines(names, guards, namespace, batched, snapshots, covered, input_sources):
    """The guard statements, appended to names.lines; returns the graph inputs' expressions."""
    lines = names.lines
    ordered = [(g, guards.immutable_root(g.sources[0]) if len(g.sources) == 1 else None)
               for g in guards.ordered() if not ((batched is not None and g.tensor) or g in covered)]
    groups = {}     # immutable tuple's source -> the guards on it and on its items
    for guard, root in ordered:
        if root is not None:
            groups.setdefault(root, []).append(guard)
    emitted = set()
    for guard, root in ordered:
        if root is None:
            check = names.check(guard)
            lines.append(f"        if not ({check}): return __gj_MISS")
        elif root not in emitted:
            emitted.add(root)
            _immutable_group(lines, names, root, guards.immutable[root][1], groups[root])
    namespace["__gj_object_getattribute"] = object.__getattribute__
    for base, snapshot, read, group in snapshots:       # after the guards on the objects' types
        if group:
            _snapshot_block(lines, names, namespace, base, snapshot, read, group)
    if batched is not None:
        checker, sources = batched
        namespace["__gj_tensor_guards"] = checker
        lines.append(f"        if not __gj_tensor_guards.check({', '.join(names.ref(s) for s in sources)}): "
                     "return __gj_MISS")
    return ", ".join(names.ref(s) for s in input_sources)


def graph_call_body(input_sources, compiled, prelude, values, replay, tail):
    """Call the graph, rebuild objects made in the frame, bind `values` ({temp name: expression}, built
    from the traced state before any effect is applied), apply the recorded side effects, then `tail`
    (return the result, or run a graph break's instruction and call the resume function)."""
    body = []
    if compiled is not None:
        body.append("__gj_out = __gj_graph(__gj_inputs)")
    body += prelude
    body += [f"{name} = {expr}" for name, expr in values.items()]
    body += replay
    body += tail
    return body


def forward_call_body(code, callee="__gj_fn"):
    """`return __gj_fn(a, b, *args, k=k, **kw)`: call `callee` with the entry's own parameters."""
    names = code.co_varnames
    nargs, nkwonly = code.co_argcount, code.co_kwonlyargcount
    out = list(names[:nargs])
    index = nargs + nkwonly
    if code.co_flags & inspect.CO_VARARGS:
        out.append("*" + names[index])
        index += 1
    out += [f"{n}={n}" for n in names[nargs:nargs + nkwonly]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        out.append("**" + names[index])
    return [f"return {callee}({', '.join(out)})"]


def build_guard_reporter(fn, guards, namespace):
    """A function with the entry's signature that returns the first failing guard's text (or None):
    run only after a cache miss, to say which guard failed. Its source is compiled on its first call:
    for a large model (ResNet-50: 3,500 guards) compiling it took a fifth of the capture."""
    ordered = list(guards.ordered())
    tensor_sources = list(guards.tensors)      # (not the GuardSet: it holds the first call's tensors)
    built = []

    def report(*args, **kwargs):
        if not built:
            built.append(_compile_reporter(fn, ordered, namespace, tensor_sources))
        return built[0](*args, **kwargs)
    return report


def _compile_reporter(fn, ordered, namespace, tensor_sources):
    code = fn.__code__
    lines = [f"def __gj_failing({signature_source(code)}):"]
    for g in ordered:
        lines += ["    try:",
                  f"        if not ({g.expr}):",
                  f"            return {g.reason!r}",
                  "    except Exception:",
                  f"        return {g.reason!r}"]
    if "__gj_tensor_guards" in namespace and tensor_sources:
        # the entry's batched tensor check also compares dispatch keys (a call under inference_mode after
        # one under no_grad), which no guard of its own states
        names = [s.expr() for s in tensor_sources]
        lines += ["    try:",
                  f"        __gj_why = __gj_tensor_guards.check_verbose({', '.join(names)}, "
                  f"tensor_check_names={names!r})",
                  "        return None if __gj_why is True else __gj_why",
                  "    except Exception:",
                  "        return None"]
    lines.append("    return None")
    exec(compile("\n".join(lines), f"<graphjit guards {code.co_qualname}>", "exec"), namespace)
    reporter = namespace["__gj_failing"]
    reporter.__defaults__ = fn.__defaults__
    reporter.__kwdefaults__ = fn.__kwdefaults__
    return reporter
