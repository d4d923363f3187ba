"""fx graph (torch functions, methods, modules) -> functional core-ATen graph with fake-tensor metadata.

make_fx retraces the captured graph with fake tensors: mutations are removed (functionalization, skipped
for graphs that mutate nothing), and
composite ops decompose through torch's core ATen decompositions, except the ops lowering.py lowers whole
(softmax, layer_norm, gelu ... are one fused kernel each, not a dozen small ops) and the extern ops
(matmuls, convolution, attention). Every node of the result carries meta["val"], a FakeTensor.

    aten_gm = decompose(gm, example_inputs)
    print(aten_gm.code)       # torch.ops.aten.native_layer_norm.default(arg0_1, [64], ...)
"""
import functools
import operator

import torch
from torch._decomp import core_aten_decompositions
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten

# Composite ops whose decompositions we never want: they would hide an extern call (attention).
KEEP_WHOLE = {aten.scaled_dot_product_attention.default}

# Calls that change global state mid-graph (grad mode, autocast): retracing would not replay them.
STATE_FUNCTIONS = {torch._C._set_grad_enabled}


def _scalar_as(value, dtype):
    """value as eager's kernels convert a Python scalar argument for an integer dtype (c10's Scalar.to):
    truncated toward zero, a RuntimeError where it does not fit. Floating and bool dtypes: value as is."""
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or isinstance(value, (bool, int)):
        return value
    info = torch.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise RuntimeError(f"value cannot be converted to type {dtype} without overflow")
    return int(value)


def _converting_value(op):
    """A decomposition calling op with its `value` converted (_scalar_as) to the dtype eager computes in:
    torch's reference (the fake tensors' meta function) refuses a float value for an integer tensor, which
    eager truncates (`x.addcmul_(a, b, value=0.5)` on int64 adds 0)."""
    def decomposition(self, tensor1, tensor2, *, value=1):
        dtype = elementwise_dtypes(self, tensor1, tensor2,
                                   type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
        converted = _scalar_as(value, dtype)
        if converted is value:
            return NotImplemented           # make_fx traces op itself
        return op(self, tensor1, tensor2, value=converted)
    return decomposition


# Ops whose torch reference refuses Python scalar arguments that eager's kernels take: traced through
# a decomposition of ours that converts them as eager does
EAGER_SCALARS = {op: _converting_value(op) for op in (aten.addcmul.default, aten.addcmul_.default)}


@functools.cache
def decomposition_table():
    """torch's core ATen decompositions, minus every op lowering.py lowers whole or calls as an extern."""
    from .lowering import EXTERN_OPS, LOWERINGS
    table = dict(core_aten_decompositions())
    for op in list(table):
        if op in LOWERINGS or op in EXTERN_OPS or op in KEEP_WHOLE:
            del table[op]
    table.update(EAGER_SCALARS)
    return table


def unsupported_reason(gm, example_inputs):
    """Why graphjit's compiler should leave this graph to eager, or None."""
    for value in example_inputs:
        if not isinstance(value, torch.Tensor):
            return f"a graph input is a {type(value).__name__}, not a tensor (only tensor inputs for now)"
        if value.device.type != "cpu":
            return f"an input is on {value.device}: the C++ codegen is CPU-only (Triton codegen is next)"
    return graph_reason(gm, example_inputs)


def graph_reason(gm, example_inputs):
    """What any of graphjit's codegens refuses in a graph of tensor inputs: gradients, global state."""
    if torch.is_grad_enabled() and any(v.requires_grad for v in example_inputs):
        return "inputs require grad and grad mode is on: the compiler is inference-only for now " \
               "(wrap the call in torch.no_grad() or torch.inference_mode())"
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", "")
        if node.op == "call_function" and (node.target in STATE_FUNCTIONS or "autocast" in name):
            return f"the graph changes global state ({name})"
    return None


_SDPA = torch.nn.functional.scaled_dot_product_attention
_RANDOM = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential")


def fold_constant_attention_masks(gm):
    """Drop attention masks that are all True (or all 0 added) whatever the inputs: fused attention kernels
    (flash, cuDNN) take no mask, so such a mask costs the math path (two batched matmuls and a softmax).

    Traced models make them: transformers, while compiling, cannot test at run time whether a padding mask
    is all ones, so it builds the full [batch, 1, query, key] mask from torch.ones(...) even when there is
    no padding at all (BERT and ViT without an attention_mask argument). A mask computed only from
    constants and factory calls (no graph input, nothing random) is evaluated here, once: the graph is
    specialized to its shapes, so its value is the same on every call. Returns the number of masks dropped."""
    dropped = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        in_kwargs = "attn_mask" in node.kwargs
        mask = node.kwargs["attn_mask"] if in_kwargs else (node.args[3] if len(node.args) > 3 else None)
        if not isinstance(mask, torch.fx.Node):
            continue
        value = _constant_value(gm, mask)
        if not isinstance(value, torch.Tensor):
            continue
        neutral = bool(value.all()) if value.dtype == torch.bool else \
            (value.is_floating_point() and not bool(value.any()))
        if not neutral:
            continue
        if in_kwargs:
            node.kwargs = {**node.kwargs, "attn_mask": None}
        else:
            node.args = node.args[:3] + (None,) + node.args[4:]
        dropped += 1
    if dropped:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return dropped


def _constant_value(gm, node, limit=200):
    """node's value if it depends on no graph input and nothing random (evaluated now), else None."""
    needed, stack = {}, [node]
    while stack:
        current = stack.pop()
        if current in needed:
            continue
        if current.op in ("placeholder", "output") or len(needed) > limit:
            return None
        name = current.target if isinstance(current.target, str) else getattr(current.target, "__name__", "")
        if any(word in name for word in _RANDOM):
            return None
        needed[current] = True
        stack.extend(current.all_input_nodes)
    sub = torch.fx.Graph()
    env = {}
    for n in gm.graph.nodes:            # graph order: every input is copied before its users
        if n in needed:
            env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(env[node])
    try:
        with torch.no_grad():
            return torch.fx.GraphModule(gm, sub)()
    except Exception:   # noqa: BLE001 -- a mask that can't be evaluated early is just kept
        return None


_IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                       operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                       operator.ilshift, operator.irshift, operator.imatmul, operator.setitem}


def may_mutate(gm):
    """Whether the torch-level graph visibly writes to a tensor: an in-place method or function (`add_`,
    `relu(..., inplace=True)`, `x += y`, `x[i] = y`) or an `out=` argument. A write it misses (an
    inplace flag passed positionally) shows in the traced graph, and decompose() then traces again."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if node.kwargs.get("inplace") is True or "out" in node.kwargs or node.target in _IN_PLACE_OPERATORS:
            return True
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.endswith("__"):
            return True
    return False


def _writes(traced):
    """The ATen ops of a traced graph that write to an argument (schema annotated `(a!)`)."""
    return [node.target for node in traced.graph.nodes if node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable]


def decompose(gm, example_inputs):
    """The functional core-ATen GraphModule equivalent to gm on inputs shaped like example_inputs."""
    fold_constant_attention_masks(gm)
    traced = None
    with torch.no_grad():
        # _allow_non_fake_inputs: tensor constants held by the graph (get_attr) stay real; make_fx keeps them
        # as constants of the traced graph.
        trace = functools.partial(make_fx, decomposition_table=decomposition_table(), tracing_mode="fake",
                                  _allow_non_fake_inputs=True)
        if not may_mutate(gm):
            traced = trace(gm)(*example_inputs)
            if _writes(traced):         # a write the torch-level check missed: functionalize after all
                traced = None
        if traced is None:
            traced = trace(torch.func.functionalize(gm, remove="mutations"))(*example_inputs)
    folded = fold_constants(traced)
    traced.graph.eliminate_dead_code()
    if folded:
        used = {node.target for node in traced.graph.nodes if node.op == "get_attr"}
        for name in [n for n in traced._buffers if n.startswith(("_folded_constant", "_tensor_constant"))
                     and n not in used]:
            del traced._buffers[name]       # folded into later constants
    traced.recompile()
    return traced


def fold_constants(gm, limit=1 << 16):
    """Evaluates, once, the nodes computed only from the graph's tensor constants (get_attr): a constant
    built for the GPU (`torch.tensor([], device=k.device)`, transformers' empty KV-cache start) traces as
    a CPU constant, lift_fresh_copy and a _to_copy to the device, which would copy host to device on
    every call: a device sync in the default mode, and no CUDA-graph capture in reduce-overhead. Not
    folded: random ops, ops that write, results over `limit` elements (memory), and anything the graph
    returns or returns a view of (a caller could write to it; a folded value is shared by every call),
    except a copy to another device: the graph then returns a clone of the folded value, made on the
    device.

    Factory calls with no tensor inputs (full, scalar_tensor, arange ...) are evaluated too, but stay in
    the graph: lowered, they are constants inside the kernels that read them (and an arange is an index the
    codegen can bound). What they feed is folded only where it moves them to another device: that copy is
    the per-call host-to-device transfer. Returns the number of nodes folded."""
    values, made, count = {}, set(), 0     # node -> value; nodes whose value only factories made
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            if isinstance(value, torch.Tensor):
                values[node] = value
            continue
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or \
                target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags or \
                torch.Tag.nondeterministic_bitwise in target.tags:
            continue
        inputs = node.all_input_nodes
        if any(i not in values for i in inputs):
            continue
        returned = _reaches_output(node)
        traced = node.meta.get("val")
        if isinstance(traced, torch.Tensor) and traced.numel() > limit:
            continue                           # not even evaluated: a factory may be large
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: values[n])
        try:
            with torch.no_grad():
                value = target(*args, **kwargs)
        except Exception:   # noqa: BLE001 -- left to run per call, as before
            continue
        if not isinstance(value, torch.Tensor) or value.numel() > limit:
            continue
        moved = any(values[i].device != value.device for i in inputs)
        if returned and not moved:
            continue
        if not inputs or all(i in made for i in inputs):
            if not moved:
                values[node] = value           # a factory's value: kept in the graph, known here
                made.add(node)
                continue
        name = f"_folded_constant{count}"
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, value, persistent=False)
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
            # returned (a cache layer's sliding-window size, moved to the GPU): a copy on the device
            # each call, so the caller may write to it, but no host-to-device transfer
            fresh = gm.graph.call_function(torch.ops.aten.clone.default, (constant,)) if returned else constant
        constant.meta = dict(node.meta)
        fresh.meta = dict(node.meta)
        node.replace_all_uses_with(fresh)
        gm.graph.erase_node(node)
        values[constant] = value
        count += 1
    return count


def _reaches_output(node):
    """Whether the graph returns node's value or a view of it."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        for user in current.users:
            if user.op == "output":
                return True
            if user not in seen and isinstance(user.target, torch._ops.OpOverload) and any(
                    r.alias_info is not None for r in user.target._schema.returns):
                seen.add(user)
                stack.append(user)
    return False
