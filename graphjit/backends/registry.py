"""Backends: `backend(gm: torch.fx.GraphModule, example_inputs: list) -> callable`, torch.compile's
contract. Register with @register_backend("name"); any such callable can also be passed directly."""
import torch

from .. import logs

_BACKENDS = {}


def register_backend(name):
    def register(fn):
        _BACKENDS[name] = fn
        return fn
    return register


def lookup_backend(backend):
    if callable(backend):
        return backend
    if backend not in _BACKENDS:
        raise ValueError(f"unknown graphjit backend {backend!r}; known: {sorted(_BACKENDS)} "
                         "(or pass a callable backend(gm, example_inputs) -> callable)")
    return _BACKENDS[backend]


def list_backends():
    return sorted(_BACKENDS)


@register_backend("eager")
def eager(gm, example_inputs):
    """Run the captured GraphModule as it is (no optimization): the reference backend."""
    return gm.forward


_STATE_OPS = {torch._C._set_grad_enabled}


@register_backend("aot_eager")
def aot_eager(gm, example_inputs):
    """Retrace the graph with make_fx into core-ATen ops (torch's core decompositions), then run that."""
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx
    if any(n.op == "call_function" and (n.target in _STATE_OPS or "autocast" in getattr(n.target, "__name__", ""))
           for n in gm.graph.nodes):
        logs.log("graph", "aot_eager: graph changes grad/autocast mode; running it without retracing")
        return gm.forward
    traced = make_fx(gm, decomposition_table=core_aten_decompositions(), tracing_mode="fake")(*example_inputs)
    logs.log("graph", f"aot_eager graph:\n{traced.print_readable(print_output=False)}")
    return traced.forward


@register_backend("inductor")
def inductor(gm, example_inputs):
    """torch's own TorchInductor: the yardstick we measure graphjit's compiler against."""
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


@register_backend("graphjit")
def graphjit_backend(gm, example_inputs):
    """graphjit's own compiler (graphjit/compiler): fused C++/OpenMP kernels on CPU, ATen for matmuls,
    convolutions and attention. Inference-only for now: graphs that need gradients run eagerly.
    Also a torch.compile backend: torch.compile(model, backend=graphjit_backend)."""
    from ..compiler import compile_graph
    return compile_graph(gm, example_inputs)
