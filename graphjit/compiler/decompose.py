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


@torch.library.custom_op("graphjit::sdpa", mutates_args=())
def runtime_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """scaled_dot_product_attention kept whole until run time, so torch picks its kernel (flash, cuDNN,
    memory-efficient) on the real tensors: traced on fake tensors with a mask it would pick the math path.
    The result is made contiguous, so its layout is the one the fake implementation promises."""
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa)
    return out.contiguous()


@runtime_sdpa.register_fake
def _runtime_sdpa_fake(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def keep_attention_whole(gm):
    """On CUDA graphs: attention calls -> graphjit::sdpa (an extern chosen at run time)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.nn.functional.scaled_dot_product_attention:
            node.target = torch.ops.graphjit.sdpa.default
            changed = True
    if changed:
        gm.recompile()
    return gm


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
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs):
        gm = keep_attention_whole(gm)
    functional = torch.func.functionalize(gm, remove="mutations")
    with torch.no_grad():
        # _allow_non_fake_inputs: tensor constants held by the graph (get_attr) stay real; make_fx keeps them
        # as constants of the traced graph.
        traced = make_fx(functional, decomposition_table=decomposition_table(), tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*example_inputs)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced
