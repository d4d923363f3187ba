"""Backends: `backend(gm: torch.fx.GraphModule, example_inputs: list) -> callable`, torch.compile's
contract. Register with @register_backend("name"); any such callable can also be passed directly.

lookup_backend(backend, mode) is the one door from capture to the backends: it gives the callable that
compiles a graph with `backend` in a compile() call's mode. A backend registered with takes_mode=True
gets the mode's name as its `mode` argument (graphjit's compiler autotunes in the max-autotune modes);
in a CUDA-graph mode the callable a backend returns is recorded and replayed as CUDA graphs here, with
what capture knows about the graph's inputs read from gm.meta["graphjit"] (compiler/facts.py).
"""
import threading

import torch

from .. import logs, modes

_BACKENDS = {}


def register_backend(name, takes_mode=False, takes_symbols=False, takes_options=None):
    """takes_symbols: the backend compiles a graph with symbolic sizes for all sizes at once; one that
    doesn't gets the graph once per distinct set of sizes (backends/dynamic.py). takes_options: the backend
    takes compile(options=...) as its `options` argument: "config" (graphjit.config knobs, check_options),
    "any", or a function checking them (returning them checked, a ValueError otherwise)."""
    def register(fn):
        fn.graphjit_takes_mode = takes_mode
        fn.graphjit_takes_symbols = takes_symbols
        fn.graphjit_takes_options = takes_options
        _BACKENDS[name] = fn
        return fn
    return register


def registered_backend(name):
    """The function registered as `name`, as registered: a backend that wraps another passes its mode and
    takes_symbols on (benchmarks/gpu.py's Recording); compile() calls go through lookup_backend."""
    return _BACKENDS[name]


def lookup_backend(backend, mode=None, options=None):
    """The callable compiling graphs with `backend` (a registered name or a callable) in `mode` (a name of
    modes.MODES, None for the default) with `options` (check_options'); a ValueError naming the known
    backends otherwise."""
    if not callable(backend):
        if backend not in _BACKENDS:
            raise ValueError(f"unknown graphjit backend {backend!r}; known: {sorted(_BACKENDS)} "
                             "(or pass a callable backend(gm, example_inputs) -> callable)")
        backend = _BACKENDS[backend]
    if options:
        backend = WithOptions(backend, check_options(backend, options))
    chosen = modes.lookup(mode)
    in_mode = backend if chosen.name == "default" else InMode(backend, chosen)
    # a callable passed by the user gets symbolic graphs as torch.compile's backends do; in a CUDA-graph
    # mode InMode records a CUDA graph per distinct set of sizes (cudagraphs.PerSize)
    takes_symbols = getattr(backend, "graphjit_takes_symbols", True)
    return WithSymbols(in_mode, takes_symbols)


def before_capture(backend, values):
    """What a backend starts before a process's frame is captured, given the frame's arguments `values`:
    for graphjit's compiler with config.triton_prewarm_at_capture, Triton's start-up thread where the
    arguments are on a GPU and nothing is cached yet (compiler.runtime.triton_build.prewarm_if_cold)."""
    from .. import config
    if (backend or config.default_backend) == "graphjit":
        from ..compiler.runtime import triton_build
        triton_build.prewarm_if_cold(values)


def check_options(backend, options):
    """compile(options=...) for `backend` (a name or a callable), checked: a dict whose entries a backend
    registered with takes_options=True takes. graphjit's compiler takes the knobs of graphjit.config that
    change generated code (`{"fallback_random": True}`), applied while it compiles that compile() call's
    graphs; Inductor takes its config's entries (torch.compile's options=). A ValueError otherwise."""
    from .. import config
    if not isinstance(options, dict):
        raise ValueError(f"graphjit.compile: options must be a dict, not {type(options).__name__}")
    fn = _BACKENDS.get(backend, backend) if isinstance(backend, str) else backend
    takes = getattr(fn, "graphjit_takes_options", None)
    if takes is None:
        raise ValueError(f"graphjit.compile: options= is for the 'graphjit', 'inductor' and 'onnxrt' backends; "
                         f"backend {getattr(fn, '__name__', fn)!r} takes none")
    if callable(takes):
        return takes(options)
    if takes != "config":
        return dict(options)
    known = {name: knob for name, knob in config.KNOBS.items() if knob.codegen}
    checked = {}
    for name, value in options.items():
        if name not in known:
            raise ValueError(f"graphjit.compile: unknown option {name!r} for graphjit's compiler; known: "
                             f"{', '.join(sorted(known))} (graphjit.config)")
        kind = known[name].type
        if kind is int and isinstance(value, (bool, int)):
            value = int(value)
        if not isinstance(value, kind):
            raise ValueError(f"graphjit.compile: option {name!r} takes {kind.__name__} values, not {value!r}")
        checked[name] = value
    return checked


class WithOptions:
    """A backend given a compile() call's options (as its `options` argument)."""

    def __init__(self, backend, options):
        self.backend, self.options = backend, options
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)
        for attr in ("graphjit_takes_mode", "graphjit_takes_symbols", "graphjit_takes_options"):
            setattr(self, attr, getattr(backend, attr, None))

    def __call__(self, gm, example_inputs, **kwargs):
        return self.backend(gm, example_inputs, options=self.options, **kwargs)


class WithSymbols:
    """A backend's callable for one compile() call that also takes graphs with symbolic sizes."""

    def __init__(self, backend, takes_symbols):
        self.backend, self.takes_symbols = backend, takes_symbols
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)

    def __call__(self, gm, example_inputs):
        from .dynamic import compile_dynamic
        return compile_dynamic(self.backend, gm, example_inputs, self.takes_symbols)


class InMode:
    """A backend in a named mode, for one compile() call: the mode goes to a backend that takes it; in a
    CUDA-graph mode each compiled graph is wrapped to record and replay CUDA graphs, all of them in this
    object's one memory pool."""

    def __init__(self, backend, mode):
        self.backend, self.mode = backend, mode
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)
        self._pool = None
        self._lock = threading.Lock()

    def __call__(self, gm, example_inputs):
        if getattr(self.backend, "graphjit_takes_mode", False):
            compiled = self.backend(gm, example_inputs, mode=self.mode.name)
        else:
            compiled = self.backend(gm, example_inputs)
        if not self.mode.cudagraphs:
            return compiled
        from . import cudagraphs
        from .dynamic import symbolic_inputs
        meta = gm.meta.get("graphjit") or {}
        static = meta.get("static_inputs") or [isinstance(t, torch.nn.Parameter) for t in example_inputs]
        return cudagraphs.wrap(compiled, example_inputs, static, self.pool(), meta.get("name", "graph"),
                               cudagraphs.mutated_inputs(gm), gm, sized=symbolic_inputs(gm))

    def pool(self):
        with self._lock:
            if self._pool is None:
                from .cudagraphs import GraphPool
                self._pool = GraphPool(self.mode.name)
            return self._pool


def _symbolic_training(gm, train, compile_fn):
    """A training graph with size symbols compiled once for all sizes: AOTAutograd traces the joint graph
    over capture's fake inputs, in their ShapeEnv, and each half compiles with the symbols (one that needs
    concrete sizes compiles per size: PerSizeBoxed). None where the symbolic trace fails: the caller
    compiles per size. The backward half is compiled at the first backward, after the frame's entry took
    its guards: a backward whose compile would add a guard on the sizes compiles per size instead, so it
    never relies on what the entry does not check."""
    from torch._guards import TracingContext, tracing
    from ..compiler.ir import StaticOnly
    from ..compiler.pipeline import symbolic_example
    from .dynamic import PerSizeBoxed, fake_mode_of, shape_env_checkpoint, symbolic_inputs
    fakes, env = symbolic_example(gm)
    mode = fake_mode_of(gm)
    if fakes is None or mode is None:
        return None
    name = (gm.meta.get("graphjit") or {}).get("name", "graph")
    building = [True]

    def half(g, inputs):
        for node in g.graph.nodes:       # AOTAutograd's placeholders carry their fake values as "val"
            if node.op == "placeholder" and "example_value" not in node.meta:
                node.meta["example_value"] = node.meta.get("val")
        restore, known = shape_env_checkpoint(g), len(env.guards)
        try:
            with tracing(TracingContext(mode)):     # also for the backward, compiled at the first backward
                compiled = compile_fn(g, inputs)
            if building[0] or len(env.guards) == known:
                return compiled
            logs.log("dynamic", f"{g.meta['graphjit']['name']}: compiling per size: its symbolic compile "
                                f"assumed what the entry's guards do not check")
        except StaticOnly as e:
            logs.log("dynamic", f"{g.meta['graphjit']['name']}: compiling per size: {e}")
        restore()
        return PerSizeBoxed(compile_fn, g, symbolic_inputs(g))

    restore, pinned_before = shape_env_checkpoint(gm), _pinned(env)
    try:
        with tracing(TracingContext(mode)):
            compiled = train(gm, fakes, compile_fn=half)
    except Exception as e:  # noqa: BLE001 - what the symbolic trace refuses compiles per size, as before
        restore()
        logs.log("dynamic", f"{name}: training graph compiled per size: {type(e).__name__}: {e}")
        return None
    finally:
        building[0] = False
    pinned = _pinned(env) - pinned_before
    if pinned:
        # the joint trace fixed a size (torch's lstm decomposition unrolls the time loop): the entry would
        # keep that size, and every other one would recompile the frame; compiled per size, one entry
        # serves them all
        restore()
        logs.log("dynamic", f"{name}: training graph compiled per size: its joint trace fixed "
                            f"{', '.join(sorted(map(str, pinned)))}")
        return None
    return compiled


def _pinned(env):
    """The size symbols the ShapeEnv has replaced by a number."""
    return {s for s, v in getattr(env, "replacements", {}).items() if getattr(v, "is_number", False)}


def list_backends():
    return sorted(_BACKENDS)


@register_backend("eager", takes_symbols=True)
def eager(gm, example_inputs):
    """Run the captured GraphModule as it is (no optimization): the reference backend."""
    return gm.forward


_STATE_OPS = {torch._C._set_grad_enabled}


@register_backend("aot_eager")
def aot_eager(gm, example_inputs):
    """Retrace the graph with make_fx into core-ATen ops (torch's core decompositions), then run that; a
    graph that needs gradients goes through AOTAutograd as graphjit's compiler takes it (compiler/training.py),
    its forward and backward halves run as traced (make_fx's own trace has no autograd: a detach() in it
    would be an alias that gradients flow through)."""
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx
    from ..compiler import training
    if training.wants_aot(gm, example_inputs):
        return training.compile_training(gm, example_inputs, compile_fn=lambda g, inputs: g.forward)
    if any(n.op == "call_function" and (n.target in _STATE_OPS or "autocast" in getattr(n.target, "__name__", ""))
           for n in gm.graph.nodes):
        logs.log("graph", "aot_eager: graph changes grad/autocast mode; running it without retracing")
        return gm.forward
    traced = make_fx(gm, decomposition_table=core_aten_decompositions(), tracing_mode="fake")(*example_inputs)
    logs.log("graph", f"aot_eager graph:\n{traced.print_readable(print_output=False)}")
    return traced.forward


def _check_onnxrt_options(options):
    from .onnxrt import check_options
    return check_options(options)


@register_backend("onnxrt", takes_symbols=True, takes_options=_check_onnxrt_options)
def onnxrt(gm, example_inputs, options=None):
    """ONNX Runtime: the graph exported by torch.onnx (its dynamo path) and run in an InferenceSession,
    dynamic dims as dynamic axes (backends/onnxrt.py). Inference only: a graph needing gradients runs as
    captured. options: providers, graph_optimization_level, intra_op_num_threads, inter_op_num_threads,
    optimized_model_path, cache."""
    from .onnxrt import compile_onnxrt
    return compile_onnxrt(gm, example_inputs, options)


@register_backend("inductor", takes_symbols=True, takes_options="any")
def inductor(gm, example_inputs, options=None):
    """torch's own TorchInductor: the yardstick we measure graphjit's compiler against. options: entries of
    torch._inductor.config, as torch.compile's options= gives them."""
    from torch._inductor.compile_fx import compile_fx
    from .dynamic import PerSize, symbolic_inputs
    if any(isinstance(n.meta.get("example_value"), torch.SymFloat) for n in gm.graph.nodes if n.op == "placeholder"):
        # Inductor takes floats as tensors that torch.compile's frontend made of them (its restart analysis
        # asks that frontend to specialize them): a graph with float inputs compiles per set of values
        return PerSize(lambda g, inputs: compile_fx(g, inputs, config_patches=options), gm, symbolic_inputs(gm))
    return compile_fx(gm, example_inputs, config_patches=options)


@register_backend("graphjit", takes_mode=True, takes_symbols=True, takes_options="config")
def graphjit_backend(gm, example_inputs, mode=None, options=None):
    """graphjit's own compiler (graphjit/compiler): fused C++/OpenMP kernels on CPU, ATen for matmuls,
    convolutions and attention. A graph that needs gradients compiles its forward and backward halves
    (compiler/training.py, through AOTAutograd; so does one that changes grad mode or autocast mid-graph).
    Also a torch.compile backend: torch.compile(model, backend=graphjit_backend). A graph with size
    symbols, however it arrives, compiles once for all sizes (kernels take the sizes as arguments); where
    the compiler needs concrete sizes (ir.StaticOnly, logged under GRAPHJIT_LOGS=dynamic) it compiles per
    distinct set of sizes instead."""
    from ..compiler import compile_graph, training
    from ..compiler.ir import StaticOnly
    from .dynamic import PerSize, shape_env_checkpoint, symbolic_inputs
    positions = symbolic_inputs(gm)
    if training.wants_aot(gm, example_inputs):
        def compile_half(g, inputs):
            return compile_graph(g, inputs, mode, options)

        def train(g, inputs, compile_fn=compile_half):
            from .. import config
            with config.patch(**(options or {})):      # AOTAutograd's trace decomposes by them too
                return training.compile_training(g, inputs, compile_fn=compile_fn)
        if not positions:
            return train(gm, example_inputs)
        symbolic = _symbolic_training(gm, train, compile_half)
        return symbolic if symbolic is not None else PerSize(train, gm, positions)
    if positions:
        restore = shape_env_checkpoint(gm)
        try:
            return compile_graph(gm, example_inputs, mode, options)
        except StaticOnly as e:
            restore()       # what the failed attempt asked of the sizes guards nothing: it compiles per size
            name = (gm.meta.get("graphjit") or {}).get("name", "graph")
            logs.log("dynamic", f"{name}: compiling per size: {e}")
        return PerSize(lambda g, inputs: compile_graph(g, inputs, mode, options), gm, positions)
    return compile_graph(gm, example_inputs, mode, options)
