"""decompose's trace, one captured call at a time: each distinct call is traced once, its copies reuse it.

A model's captured graph repeats itself: GPT-2's twelve layers call the same functions on tensors of the
same sizes, and make_fx spends about a millisecond on every call it traces (0.3-0.5 s of a 12-layer
GPT-2's compile). Here the captured graph is walked node by node. A call's key is what make_fx's trace of
it can depend on: the function or method, its constant arguments, and each tensor argument's sizes,
strides, storage offset and size, dtype, device, flags and which arguments are one tensor or share memory. The
distinct calls the captured graph's example values foresee are traced by one make_fx call, each on fake
tensors made to its key (its template); a call whose actual key was not foreseen is traced on its own, on
its arguments' fake values. Every call copies its key's template's ATen nodes onto its own arguments'
nodes, with fake values made anew: a view of an argument's memory where the template's value was a view of
the argument's, memory of its own where the template's was, so the result's nodes share memory exactly
where make_fx's would. Writes are copied like any op; an in-place op that returns its argument makes that
op's node the argument's node for later calls, as make_fx's proxy of the tensor moves to it.

`trace_by_templates` returns None (decompose then traces the whole graph) for what it does not cover:
inputs that are not plain tensors, nodes other than calls, a call changing an argument's sizes or
strides in place (a later call would see another tensor than its key says), an argument it can't key,
and graphs too small or too varied for templates to pay (MIN_CALLS, MAX_DISTINCT). decompose does not
ask it for symbolic sizes or a graph that changes grad mode or autocast. A failure inside it returns None
too: the whole trace then reports what it finds, as it always has.
"""
import contextlib
import logging
import operator
import struct
import types

import torch
from torch._dispatch.python import no_python_dispatcher
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager


# Graphs of fewer calls, or whose distinct calls are more than this share of them, are traced whole: the
# templates' bookkeeping would cost what they save.
MIN_CALLS = 8
MAX_DISTINCT = 0.6


class _Unkeyable(Exception):
    pass


class _Value:
    """A tensor of the result: its node and its fake value."""
    __slots__ = ("node", "val")

    def __init__(self, node, val):
        self.node = node
        self.val = val


_CONSTANTS = (bool, int, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format,
              types.EllipsisType)


def _storage(t):
    return t.untyped_storage()._cdata


def _key_of(op, target, args, kwargs):
    """(key, tensors, descriptions): the call's key, its tensor arguments (_Value) in the order the key
    names them, and the key's description of each."""
    tensors, storages, descriptions = [], {}, []

    def walk(a):
        if isinstance(a, _Value):
            t = a.val
            same = next((i for i, other in enumerate(tensors) if other is a), -1)
            shared = storages.setdefault(_storage(t), len(tensors))
            tensors.append(a)
            descriptions.append(("tensor", tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device,
                                 t.layout, t.requires_grad, t.is_conj(), t.is_neg(), same, shared,
                                 t.untyped_storage().nbytes()))
            return descriptions[-1]
        if isinstance(a, (list, tuple)):
            return (type(a).__name__,) + tuple(walk(v) for v in a)
        if isinstance(a, dict):
            return ("dict",) + tuple((k, walk(v)) for k, v in a.items())
        if isinstance(a, float):
            return ("float", struct.pack("<d", a))
        if isinstance(a, complex):
            return ("complex", struct.pack("<dd", a.real, a.imag))
        if isinstance(a, slice):
            return ("slice", walk(a.start), walk(a.stop), walk(a.step))
        if type(a) in _CONSTANTS:
            return (type(a).__name__, a)
        raise _Unkeyable(type(a).__name__)

    return (op, target, walk(args), walk(kwargs)), tensors, descriptions


def _substituted(a, tensors):
    """a (the call's arguments) with each _Value replaced by the next of `tensors` (an iterator)."""
    if isinstance(a, _Value):
        return next(tensors)
    if isinstance(a, (list, tuple)):
        return type(a)(_substituted(v, tensors) for v in a)
    if isinstance(a, dict):
        return {k: _substituted(v, tensors) for k, v in a.items()}
    return a


def _leaves(val):
    if isinstance(val, (tuple, list)):
        return [t for v in val for t in _leaves(v)]
    return [val]


class _Template:
    """One call traced by make_fx: its ATen nodes, and where each node's fake values live."""

    def __init__(self, module, placeholders, body, output, inputs, returned, moved):
        self.module = module
        self.placeholders = placeholders
        self.body = body
        self.output = output
        self.returned = returned        # {result leaf index: index of the argument that leaf is}
        self.moved = moved              # {argument index: the body node later calls read it from}
        # where each fake value's memory comes from: ("same", ref) the very value of an argument or an
        # earlier leaf, ("view", ref) a view of its memory, ("fresh", nbytes) memory of its own; a ref is
        # (index of an argument) or (body node, leaf index)
        known = {}              # storage -> ref of the first value holding it
        objects = {}            # id(value) -> ref
        for i, (p, x) in enumerate(zip(placeholders, inputs)):
            for t in (x, p.meta.get("val")):
                if isinstance(t, torch.Tensor):
                    known.setdefault(_storage(t), ("input", i))
                    objects[id(t)] = ("input", i)
        self.origins = {}
        for node in body:
            val = node.meta.get("val")
            origins = []
            for k, leaf in enumerate(_leaves(val)):
                if not isinstance(leaf, torch.Tensor):
                    origins.append(None)
                    continue
                if id(leaf) in objects:
                    origins.append(("same", objects[id(leaf)]))
                    continue
                storage = _storage(leaf)
                if storage in known:
                    origins.append(("view", known[storage]))
                else:
                    origins.append(("fresh", leaf.untyped_storage().nbytes()))
                    known[storage] = (node, k)
                objects[id(leaf)] = (node, k)
            self.origins[node] = origins


def _marker():
    """The target of the marker nodes between a batch's calls (never called: a template's code never runs)."""
    raise AssertionError("a template's marker node ran")


def _mark():
    get_proxy_mode().tracer.create_node("call_function", _marker, (), {})


def _is_mark(node):
    return node.op == "call_function" and node.target is _marker


def _proxy_node(t, tracer):
    """The node make_fx now reads tensor t from (its proxy's), or None."""
    slot = get_proxy_slot(t, tracer, None)
    return getattr(getattr(slot, "proxy", None), "node", None)


def _caller(calls, marked=False):
    """A function of the calls' tensor arguments (in order) making the calls, each (node, args, kwargs, n):
    args and kwargs hold _Values where its n tensors go; `marked`: with a _mark() before each and after the
    last. Returns the tuple of their results. The function's `returned` lists, per call, {index of a result
    leaf: index of the argument it is} (an in-place op returns its argument, as can .contiguous()), and
    `moved` {index of an argument: the node make_fx reads it from after the call} for each argument whose
    node the call changed (a write into it: `x[i] = v` returns None, yet later reads of x read its
    index_put_); a failed call (marked batches only) gets None in both."""
    returned, moved = [], []

    def run(*values):
        tracer = get_proxy_mode().tracer
        out, first = [], 0
        for node, args, kwargs, n in calls:
            if marked:
                _mark()
            mine = values[first:first + n]
            first += n
            before = [_proxy_node(v, tracer) for v in mine]
            taken = iter(mine)
            a, k = _substituted(args, taken), _substituted(kwargs, taken)
            try:
                result = getattr(a[0], node.target)(*a[1:], **k) if node.op == "call_method" else \
                    node.target(*a, **k)
            except Exception:       # noqa: BLE001 - (marked batches only) the call gets no template
                if not marked:
                    raise
                returned.append(None)
                moved.append(None)
                out.append(None)
                continue
            returned.append({j: next(i for i, v in enumerate(mine) if v is leaf)
                             for j, leaf in enumerate(_leaves(result)) if any(v is leaf for v in mine)})
            moved.append({i: after for i, (v, was) in enumerate(zip(mine, before))
                          if (after := _proxy_node(v, tracer)) is not was})
            out.append(result)
        if marked:
            _mark()
        return tuple(out)
    run.returned = returned
    run.moved = moved
    run.template_trace = True
    return run


def _example(node):
    """The captured node's example value, its tensors as _Values without nodes."""
    val = node.meta.get("example_value")
    if isinstance(val, torch.Tensor):
        return _Value(None, val)
    if isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val):
        return type(val)(_Value(None, v) for v in val)
    return val


def _changes_metadata(target):
    """Whether target (an ATen op) changes a tensor's sizes, strides or memory in place (t_, unsqueeze_,
    resize_, set_ ...): a later call would see another tensor than its key says."""
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.is_mutable:
        return False
    name = target._schema.name.split("::")[-1]
    return torch.Tag.inplace_view in target.tags or name.startswith(("resize", "_resize", "set_", "as_strided_"))


def trace_by_templates(gm, example_inputs, trace, layouts, always=False):
    """The graph decompose's whole trace `trace(gm)(*example_inputs)` gives, built from traces of its
    distinct calls, or None where this does not apply (module docstring). `layouts(node)`: the context to
    trace node's call under (decompose's TorchFunctionMode for the functions it lays out). `always`: also
    for graphs too small or too varied to gain (tests and fuzzing use it)."""
    if any(type(x) not in (torch.Tensor, torch.nn.Parameter) or x.layout != torch.strided or x.is_quantized
           for x in example_inputs):
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs) or \
            any(n.op not in ("placeholder", "call_function", "call_method", "output") for n in gm.graph.nodes):
        return None
    try:
        # lazy graph modules: the templates' code is never run, the result's is generated when first needed
        with _use_lazy_graph_module(True):
            return _Builder(trace, layouts, always).build(gm, placeholders, example_inputs)
    except Exception:               # noqa: BLE001 - _Unkeyable, or a failure the whole trace reports as it always has
        return None


class _Builder:
    def __init__(self, trace, layouts, always):
        self.always = always
        self.mode = None
        self.trace = trace
        self.layouts = layouts
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.templates = {}
        self.constants = 0

    def build(self, gm, placeholders, example_inputs):
        calls, count = self.foreseen(gm, placeholders)
        if not self.always and (count < MIN_CALLS or len(calls) > MAX_DISTINCT * count):
            raise _Unkeyable("too few calls alike: the whole trace is as fast")
        import torch._functorch.config as functorch_config
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        with functorch_config.patch(fake_tensor_allow_unsafe_data_ptr_access=False):       # make_fx's mode
            self.mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True,
                                       shape_env=ShapeEnv(), static_shapes=True)
        try:
            self.trace_foreseen(calls)
        except Exception:           # noqa: BLE001 - each call is then traced on its own
            self.templates.clear()
        env = {}
        for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
            val = self.mode.from_tensor(x, static_shapes=True)
            p = self.graph.placeholder(f"arg{i}_1")           # make_fx's names
            p.meta["val"] = self.detached(val)                # make_fx's values are detached too
            p.meta["tensor_meta"] = torch.fx.passes.shape_prop._extract_tensor_metadata(val)
            env[node] = _Value(p, val)
        out = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            if node.op == "output":
                out = args[0]
                continue
            if node.target is operator.getitem and isinstance(args[0], (tuple, list, dict)):
                env[node] = args[0][args[1]]
                continue
            env[node] = self.call(node, args, kwargs)
        self.graph.output(_as_nodes(out))
        return _make_graph_module(self.root, self.graph)

    def call(self, node, args, kwargs):
        key, tensors, _ = _key_of(node.op, node.target, args, kwargs)
        template = self.templates.get(key)
        if template is None:
            template = self.templates[key] = self.traced(node, args, kwargs, tensors)
        return self.copied(template, tensors)

    def traced(self, node, args, kwargs, tensors):
        """A template of one call, traced on its own arguments' fake values."""
        inputs = [t.val for t in tensors]
        with torch.no_grad(), self.layouts(node):
            caller = _caller([(node, args, kwargs, len(tensors))])
            traced = self.trace(caller)(*inputs)
        nodes = list(traced.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        body = [n for n in nodes if n.op not in ("placeholder", "output")]
        return self.template(traced, placeholders, body, nodes[-1].args[0][0], inputs, caller.returned[0],
                             caller.moved[0])

    def template(self, module, placeholders, body, output, inputs, returned, moved):
        if any(n.op not in ("call_function", "get_attr") for n in body):
            raise _Unkeyable("a traced node of another kind")
        inside = set(body)
        if any(node not in inside for node in moved.values()):
            raise _Unkeyable("an argument moved to a node outside the call")
        # an op changing sizes or strides in place is fine on the call's own values (mean restrides its
        # result), not on memory of an argument: a later call would see another tensor than its key says
        argument_memory = {_storage(p.meta["val"]) for p in placeholders if isinstance(p.meta.get("val"), torch.Tensor)}
        for n in body:
            if n.op == "call_function" and _changes_metadata(n.target):
                written = n.args[0] if n.args else None
                val = written.meta.get("val") if isinstance(written, torch.fx.Node) else None
                if not isinstance(val, torch.Tensor) or _storage(val) in argument_memory:
                    raise _Unkeyable("a call that changes an argument's sizes or memory in place")
        return _Template(module, placeholders, body, output, inputs, returned, moved)

    def foreseen(self, gm, placeholders):
        """(calls, count): the distinct calls the captured graph's own example values foresee, each (key,
        node, args, kwargs, the key's descriptions of its tensor arguments), and how many calls the graph
        makes."""
        env = {n: _example(n) for n in placeholders}
        calls, keys, count = [], set(), 0
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            count += 1
            args = torch.fx.node.map_arg(node.args, env.get)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.get)
            env[node] = _example(node)
            if node.target is operator.getitem and not isinstance(args[0], _Value):
                continue
            try:
                key, _, descriptions = _key_of(node.op, node.target, args, kwargs)
            except (_Unkeyable, AttributeError, RuntimeError):
                continue
            if key not in keys:
                keys.add(key)
                calls.append((key, node, args, kwargs, descriptions))
        return calls, count

    def trace_foreseen(self, calls):
        """Templates of the foreseen calls, traced by one make_fx call (a trace has a fixed cost of some
        milliseconds): each call on fake tensors made to its key (same sizes, strides, offsets, flags and
        shared memory), between two marker nodes that cut the traced graph into the calls' templates. A call
        whose actual key differs is traced on its own when it comes."""
        made_calls = []
        for key, node, args, kwargs, descriptions in calls:
            try:
                made = self.made_to(descriptions)
            except _Unkeyable:
                continue
            taken = iter(made)
            if _key_of(node.op, node.target, _substituted(args, taken), _substituted(kwargs, taken))[0] == key:
                made_calls.append((key, node, args, kwargs, made))
        calls = made_calls
        inputs = [t.val for *_, made in calls for t in made]
        layouts = next((c for c in (self.layouts(node) for _, node, *_ in calls)
                        if not isinstance(c, contextlib.nullcontext)), contextlib.nullcontext())
        # a call can fail on the tensors made to its foreseen key (where the captured values were wrong):
        # fake tensors' logger reports that as an error before the call raises, which the batch catches
        fake_log = logging.getLogger("torch._subclasses.fake_tensor")
        level = fake_log.level
        fake_log.setLevel(logging.CRITICAL)
        try:
            with torch.no_grad(), layouts:
                caller = _caller([(node, args, kwargs, len(made)) for _, node, args, kwargs, made in calls],
                                 marked=True)
                traced = self.trace(caller)(*inputs)
        finally:
            fake_log.setLevel(level)
        nodes = list(traced.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        marks = [i for i, n in enumerate(nodes) if _is_mark(n)]
        if len(marks) != len(calls) + 1 or len(placeholders) != len(inputs) or len(caller.returned) != len(calls):
            return
        outputs, first = nodes[-1].args[0], 0
        for k, (key, _, _, _, made) in enumerate(calls):
            mine = placeholders[first:first + len(made)]
            body = nodes[marks[k] + 1:marks[k + 1]]
            first += len(made)
            inside = set(mine) | set(body)
            if any(a not in inside for n in body for a in n.all_input_nodes):
                return
            if caller.returned[k] is None:
                continue            # the call failed: traced on its own when its actual key is known
            try:
                self.templates[key] = self.template(traced, mine, body, outputs[k], [t.val for t in made],
                                                    caller.returned[k], caller.moved[k])
            except _Unkeyable:
                continue

    def made_to(self, descriptions):
        """Fake tensors as `key` describes its tensor arguments (sizes, strides, offset, dtype, device, flags,
        which argument each is the same as or shares memory with), as _Values without nodes."""
        made, extent = [], {}
        for d in descriptions:
            _, shape, stride, offset, dtype, device, layout, requires_grad, conj, neg, same, shared, nbytes = d
            if layout != torch.strided or conj or neg:
                raise _Unkeyable("a tensor argument that is not a plain strided one")
            extent[shared] = max(extent.get(shared, 0), nbytes)
        storages = {}
        for i, d in enumerate(descriptions):
            _, shape, stride, offset, dtype, device, layout, requires_grad, conj, neg, same, shared, nbytes = d
            if same >= 0:
                made.append(made[same])
                continue
            if shared not in storages:
                storages[shared] = torch.empty((extent[shared],), dtype=torch.uint8, device="meta")
            meta = torch.empty((0,), dtype=dtype, device="meta").set_(
                storages[shared].untyped_storage(), offset, shape, stride)
            fake = FakeTensor(self.mode, meta, device)
            if requires_grad:
                fake.requires_grad_(True)
            made.append(_Value(None, fake))
        return made

    def copied(self, template, tensors):
        nodes = {p: t.node for p, t in zip(template.placeholders, tensors)}
        leaves = {("input", i): t.val for i, t in enumerate(tensors)}
        for tnode in template.body:
            if tnode.op == "get_attr":
                name = f"_tensor_constant{self.constants}"
                self.constants += 1
                value = getattr(template.module, tnode.target)
                if isinstance(value, torch.Tensor):
                    self.root.register_buffer(name, value.clone())
                else:
                    setattr(self.root, name, value)
                new = self.graph.get_attr(name)
            else:
                new = self.graph.node_copy(tnode, nodes.__getitem__)
            new.meta = dict(tnode.meta)
            if "val" in tnode.meta:
                new.meta["val"] = self.remade(tnode, tnode.meta["val"], template.origins[tnode], leaves)
            nodes[tnode] = new

        for i, tnode in template.moved.items():     # make_fx reads the argument from here on
            tensors[i].node = nodes[tnode]
        index = iter(range(1 << 30))
        values = {}             # node -> its _Value: a result holding one tensor twice holds one object

        def value(a):
            if isinstance(a, (list, tuple)):
                return type(a)(value(v) for v in a)
            j = next(index)
            if not isinstance(a, torch.fx.Node):
                return a
            i = template.returned.get(j)
            if i is not None:       # the argument itself (an in-place op returns it)
                tensors[i].node = nodes[a]
                return tensors[i]
            if a not in values:
                values[a] = _Value(nodes[a], nodes[a].meta.get("val"))
            return values[a]
        return value(template.output)

    def detached(self, t):
        with no_python_dispatcher(), in_kernel_invocation_manager(self.mode):
            meta = torch.ops.aten.detach.default(t)
        return FakeTensor(self.mode, meta, t.device)

    def remade(self, tnode, val, origins, leaves):
        """tnode's value for this copy: each tensor the same as, a view of or memory apart from the values
        before it, as origins say (fake tensors made directly on meta tensors: a fake op's dispatch costs
        ten times more)."""
        made = []
        for k, (leaf, origin) in enumerate(zip(_leaves(val), origins)):
            if origin is None:
                made.append(leaf)
                continue
            how, ref = origin
            if how == "same":
                new = leaves[ref] if not leaves[ref].requires_grad else self.detached(leaves[ref])
            elif how == "view":
                base = leaves[ref]
                if base.dtype != leaf.dtype:
                    raise _Unkeyable("a view as another dtype")
                with no_python_dispatcher(), in_kernel_invocation_manager(self.mode):
                    meta = torch.ops.aten.as_strided.default(torch.ops.aten.detach.default(base), leaf.shape,
                                                             leaf.stride(), leaf.storage_offset())
                new = FakeTensor(self.mode, meta, leaf.device)
            else:
                meta = torch.empty_strided(leaf.shape, leaf.stride(), dtype=leaf.dtype, device="meta")
                if leaf.storage_offset() != 0 or meta.untyped_storage().nbytes() != ref:
                    meta = torch.empty((ref // leaf.element_size(),), dtype=leaf.dtype, device="meta").as_strided(
                        leaf.shape, leaf.stride(), leaf.storage_offset())
                new = FakeTensor(self.mode, meta, leaf.device)
            leaves.setdefault((tnode, k), new)
            made.append(new)
        if isinstance(val, (tuple, list)):
            return _rebuilt(val, iter(made))
        return made[0]


def _rebuilt(val, it):
    if isinstance(val, (tuple, list)):
        return type(val)(_rebuilt(v, it) for v in val)
    return next(it)


def _as_nodes(a):
    if isinstance(a, _Value):
        return a.node
    if isinstance(a, (list, tuple)):
        return type(a)(_as_nodes(v) for v in a)
    if isinstance(a, dict):
        return {k: _as_nodes(v) for k, v in a.items()}
    return a
