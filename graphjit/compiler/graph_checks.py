"""What graphjit's compiler refuses in a graph before any stage runs (the graph then runs eagerly, the reason
logged): inputs it has no codegen for, gradients (the graphjit backend sends those graphs through
AOTAutograd: training.py), mid-graph changes of global state. Kept apart from decompose.py and lowering.py,
so that a graph loaded from the compiled-graph cache checks them without importing the stages."""
import torch


class Refused(Exception):
    """A stage (decompose, lower) cannot keep eager's semantics for this graph (the message says why): the
    graph runs as captured."""


# Calls that change global state mid-graph (grad mode, autocast): retracing would not replay them.
STATE_FUNCTIONS = {torch._C._set_grad_enabled}


def unsupported_reason(gm, example_inputs):
    """Why graphjit's compiler should leave this graph to eager, or None."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in enumerate(example_inputs):
        if isinstance(value, (torch.SymInt, torch.SymFloat)):   # a size symbol, a float that changes
            continue
        if type(value) in (int, float, bool) and i < len(placeholders) and not placeholders[i].users:
            continue        # a number the graph does not read (a per-size copy has its value built in)
        if not isinstance(value, torch.Tensor):
            return f"a graph input is a {type(value).__name__}, not a tensor (only tensor inputs for now)"
        if value.device.type != "cpu":
            return f"an input is on {value.device}: the C++ codegen is CPU-only (Triton codegen is next)"
    return graph_reason(gm, example_inputs)


def graph_reason(gm, example_inputs):
    """What any of graphjit's codegens refuses in a graph of tensor inputs: gradients, global state."""
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and (value.is_neg() or value.is_conj()):
            return "an input carries the negative or conjugate bit (a lazy negation or conjugation: its memory " \
                   "holds the other value, which the kernels would read)"
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return "the graph makes tensors on the meta device (no kernel computes there)"
        if isinstance(value, torch.Tensor) and (value.is_neg() or value.is_conj()):
            return "the graph makes a lazily negated or conjugated view (`z.conj()`, its `.imag`): its memory " \
                   "holds the other value, which the kernels would read"
    reason = recurrent_dropout(gm) or makes_a_leaf_requiring_grad(gm) or resizing_write(gm)
    if reason is not None:
        return reason
    if needs_autograd(example_inputs):
        return "inputs require grad and grad mode is on: compile_graph compiles inference graphs " \
               "(the graphjit backend sends such graphs through AOTAutograd: compiler/training.py)"
    name = changes_state(gm)
    if name is not None:
        return f"the graph changes global state ({name}; the graphjit backend sends such graphs through " \
               f"AOTAutograd: compiler/training.py)"
    return None


_RECURRENT = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def recurrent_dropout(gm):
    """A reason where gm calls a recurrent op of several layers with dropout in training: torch's
    decompositions of them (which a trace takes, AOTAutograd's too) leave the dropout between the layers
    out (`_rnn_helper` zeroes it), so such a graph runs as captured; else None."""
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", "")
        if node.op != "call_function" or name not in _RECURRENT or len(node.args) < 7:
            continue
        num_layers, dropout, train = node.args[4], node.args[5], node.args[6]
        if train is True and isinstance(dropout, (int, float)) and dropout > 0 and \
                isinstance(num_layers, int) and num_layers > 1:
            return f"a {name} of {num_layers} layers with dropout {dropout} in training: torch's decomposition " \
                   "of it leaves the dropout between the layers out"
    return None


def _per_row_fake_quant(node):
    per_row = node.args[11] if len(node.args) > 11 else node.kwargs.get("per_row_fake_quant", False)
    return per_row is not False


# ops that write into arguments of other sizes than they had (a per-channel observer's running min/max,
# scale and zero point grow from (0,) and (1,) to (channels,)), where the fake kernels keep the sizes, so
# functionalization's write-back (the compiler's, AOTAutograd's) would copy into the old sizes: the op's
# name (torch.*, torch.ops.aten.* and its overloads all spell it so) -> whether the node resizes (its
# arguments say)
_RESIZING_WRITES = {
    "fused_moving_avg_obs_fake_quant": _per_row_fake_quant,
    "_fused_moving_avg_obs_fq_helper": _per_row_fake_quant,
}


def resizing_write(gm):
    """A reason where gm calls an op that resizes what it writes in place (_RESIZING_WRITES), else None:
    such a graph runs as captured, with eager's kernel writing the real buffers."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        resizes = _RESIZING_WRITES.get(str(getattr(node.target, "__name__", "")).split(".")[0])
        if resizes is not None and resizes(node):
            return f"{getattr(node.target, '__name__', node.target)} with per-row fake quantization resizes the " \
                   f"buffers it writes (running min/max, scale, zero point), which a functional graph cannot"
    return None


def makes_a_leaf_requiring_grad(gm):
    """A reason where gm makes a new tensor that requires grad (`torch.ones(2, requires_grad=True)`, a leaf
    of autograd's graph: the captured graph makes one per call, a compiled one would make a plain tensor),
    else None. Known by the node's example value (not a view, nor a placeholder) or, in a copy without
    them (backends/dynamic.PerSize), its requires_grad=True argument."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        value = node.meta.get("example_value", node.meta.get("val"))
        values = value if isinstance(value, (tuple, list)) else (value,)
        made = any(isinstance(v, torch.Tensor) and v.requires_grad and v.grad_fn is None and not v._is_view()
                   for v in values)
        if made and not _returns_an_argument(node, values) or node.kwargs.get("requires_grad") is True:
            return f"{getattr(node.target, '__name__', node.target)} makes a tensor that requires grad (a leaf of " \
                   f"autograd's graph), which compiled code would make without it"
    return None


def _returns_an_argument(node, values):
    """Whether the node's result is one of its arguments' example values (`w.to(w.dtype)` is w)."""
    arguments = {id(a.meta.get("example_value", a.meta.get("val"))) for a in node.all_input_nodes}
    return all(id(v) in arguments for v in values if isinstance(v, torch.Tensor) and v.requires_grad)


def needs_autograd(example_inputs):
    """Whether a graph must record gradients: grad mode is on and an input requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs)


def changes_state(gm):
    """The name of a call in gm that changes grad mode or autocast mid-graph, or None."""
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", "")
        if node.op == "call_function" and (node.target in STATE_FUNCTIONS or "autocast" in name):
            return name
    return None
