"""fx graph (torch functions, methods, modules) -> functional core-ATen graph with fake-tensor metadata.

make_fx retraces the captured graph with fake tensors: mutations are removed (functionalization), and
composite ops decompose through torch's core ATen decompositions, except the ops lowering.py lowers whole
(softmax, layer_norm, gelu ... are one fused kernel each, not a dozen small ops) and the extern ops
(matmuls, convolution, attention). Every node of the result carries meta["val"], a FakeTensor.

    aten_gm = decompose(gm, example_inputs)
    print(aten_gm.code)       # torch.ops.aten.native_layer_norm.default(arg0_1, [64], ...)
"""
import functools

import torch
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten

# Composite ops whose decompositions we never want: they would hide an extern call (attention).
KEEP_WHOLE = {aten.scaled_dot_product_attention.default}

# Calls that change global state mid-graph (grad mode, autocast): retracing would not replay them.
STATE_FUNCTIONS = {torch._C._set_grad_enabled}


@functools.cache
def decomposition_table():
    """torch's core ATen decompositions, minus every op lowering.py lowers whole or calls as an extern."""
    from .lowering import EXTERN_OPS, LOWERINGS
    table = dict(core_aten_decompositions())
    for op in list(table):
        if op in LOWERINGS or op in EXTERN_OPS or op in KEEP_WHOLE:
            del table[op]
    return table


def unsupported_reason(gm, example_inputs):
    """Why graphjit's compiler should leave this graph to eager, or None."""
    for value in example_inputs:
        if not isinstance(value, torch.Tensor):
            return f"a graph input is a {type(value).__name__}, not a tensor (only tensor inputs for now)"
        if value.device.type != "cpu":
            return f"an input is on {value.device}: the C++ codegen is CPU-only (Triton codegen is next)"
    if torch.is_grad_enabled() and any(v.requires_grad for v in example_inputs):
        return "inputs require grad and grad mode is on: the compiler is inference-only for now " \
               "(wrap the call in torch.no_grad() or torch.inference_mode())"
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", "")
        if node.op == "call_function" and (node.target in STATE_FUNCTIONS or "autocast" in name):
            return f"the graph changes global state ({name})"
    return None


def decompose(gm, example_inputs):
    """The functional core-ATen GraphModule equivalent to gm on inputs shaped like example_inputs."""
    functional = torch.func.functionalize(gm, remove="mutations")
    with torch.no_grad():
        # _allow_non_fake_inputs: tensor constants held by the graph (get_attr) stay real; make_fx keeps them
        # as constants of the traced graph.
        traced = make_fx(functional, decomposition_table=decomposition_table(), tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*example_inputs)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced
