"""Graphs with symbolic sizes (capture/dynamic.py) and the backends that compile them.

A backend that takes symbolic sizes (registered with `takes_symbols`, or any callable the user passes, as
torch.compile's contract has it) gets the graph once, inside a torch TracingContext that holds the
trace's FakeTensorMode, so torch's backends (Inductor, AOTAutograd) see the same size symbols.
A backend that compiles for the concrete sizes of its example inputs (graphjit's compiler today) gets
the graph once per distinct set of the dynamic inputs' sizes and int values: `PerSize` keys each call
on them, so a kernel made for one size never runs on another.
"""
import threading
import warnings

import torch

from .. import config, logs


def symbolic_inputs(gm):
    """Positions of the placeholders whose example value has size symbols (tensor sizes or an int)."""
    out = []
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        value = node.meta.get("example_value")
        if isinstance(value, (torch.SymInt, torch.SymFloat)) or (
                isinstance(value, torch.Tensor) and
                any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))):
            out.append(i)
    return out


def fake_mode_of(gm):
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        mode = getattr(value, "fake_mode", None)
        if mode is not None:
            return mode
    return None


# What a ShapeEnv learns while a compile asks about sizes: its guards, and the facts they teach it.
_LEARNED = ("guards", "replacements", "replacements_slocs", "var_to_range", "var_to_range_sloc", "divisible",
            "axioms", "deferred_runtime_asserts", "symbol_guard_counter", "fake_tensor_cache")


def shape_env_checkpoint(gm):
    """A function that puts the ShapeEnv of gm's sizes back as it is now. A symbolic compile that fails
    (ir.StaticOnly: the graph compiles per size instead) may have asked the ShapeEnv things that add guards
    (`x[::2]` traced at size 2 is 1 long); left there, they would restrict the frame's entry to the example's
    sizes and every other size would recompile."""
    mode = fake_mode_of(gm)
    env = getattr(mode, "shape_env", None)
    if env is None:
        return lambda: None
    saved = {}
    for name in _LEARNED:
        value = getattr(env, name, None)
        if isinstance(value, dict):
            saved[name] = {k: list(v) if isinstance(v, list) else v for k, v in value.items()}
        elif isinstance(value, (list, set)):
            saved[name] = type(value)(value)

    def restore():
        for name, value in saved.items():
            setattr(env, name, value)
        bump = getattr(env, "_update_version_counter", None)
        if bump is not None:
            bump()          # its memo of answers keys on this counter
    return restore


def compile_dynamic(backend, gm, example_inputs, takes_symbols):
    """backend's callable for gm: gm as is if it has no size symbols; else per takes_symbols."""
    positions = symbolic_inputs(gm)
    if not positions:
        return backend(gm, example_inputs)
    if takes_symbols:
        mode = fake_mode_of(gm)
        if mode is None:
            return backend(gm, example_inputs)
        from torch._guards import TracingContext, tracing
        with tracing(TracingContext(mode)):
            return backend(gm, example_inputs)
    return PerSize(backend, gm, positions)


class PerSize:
    """Compiles the graph for each distinct (sizes, strides, int values) of its dynamic inputs."""

    def __init__(self, backend, gm, positions):
        self.backend, self.gm, self.positions = backend, gm, positions
        self.compiled = {}
        self.name = (gm.meta.get("graphjit") or {}).get("name", "graph")
        self._lock = threading.Lock()
        self._warned = False

    def key(self, args):
        out = []
        for i in self.positions:
            a = args[i]
            out.append((tuple(a.shape), a.stride(), a.storage_offset()) if isinstance(a, torch.Tensor) else a)
        return tuple(out)

    def __call__(self, *args):
        key = self.key(args)
        fn = self.compiled.get(key)
        if fn is None:
            fn = self._compile(key, list(args))
        return fn(*args)

    def _compile(self, key, args):
        from ..capture.frame import compiling_in_a_call
        with compiling_in_a_call(), self._lock:
            if key in self.compiled:
                return self.compiled[key]
            if len(self.compiled) >= config.dynamic_sizes_limit:
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"graphjit: graph {self.name} was compiled for {len(self.compiled)} sets of "
                                  f"sizes (config.dynamic_sizes_limit); other sizes run the captured graph "
                                  f"without compiling", RuntimeWarning, stacklevel=4)
                return self.gm.forward
            logs.log("dynamic", f"{self.name}: compiling for sizes {key}")
            gm = torch.fx.GraphModule(self.gm, _static_copy(self.gm.graph))
            gm.meta.update(self.gm.meta)
            try:
                fn = self.backend(gm, args)
            except Exception as e:  # as at the first compile (capture/frame.compile_graph): never the user's error
                warnings.warn(f"graphjit: backend {getattr(self.backend, '__name__', self.backend)} failed for "
                              f"sizes {key} of graph {self.name} ({type(e).__name__}: {e}); running the captured "
                              f"graph without it", RuntimeWarning, stacklevel=4)
                fn = self.gm.forward
            self.compiled[key] = fn
            return fn


class PerSizeBoxed(PerSize):
    """PerSize for a graph in AOTAutograd's boxed convention (a half of a training graph): called with one
    list of arguments, which the compiled callable empties."""
    _boxed_call = True

    def __init__(self, backend, gm, positions):
        super().__init__(backend, gm, positions)
        self.boxed = {}         # key -> its compiled callable in the boxed convention (training._boxed)

    def __call__(self, args):
        key = self.key(args)
        fn = self.boxed.get(key)
        if fn is None:
            from ..compiler.training import _boxed
            fn = self.boxed[key] = _boxed(self.compiled.get(key) or self._compile(key, list(args)))
        return fn(args)


def _static_copy(graph):
    """A copy of the graph whose nodes hold no symbolic example values (a backend reading them would
    see symbols it doesn't expect; it reads the concrete example inputs instead), only, for tensors, which
    storage the trace put them in (meta["traced_storage"])."""
    new = torch.fx.Graph()
    env = {}
    for node in graph.nodes:
        env[node] = new.node_copy(node, lambda n: env[n])
        value = env[node].meta.pop("example_value", None)
        if isinstance(value, torch.Tensor):     # which values share memory (compiler/training._output_groups)
            env[node].meta["traced_storage"] = value.untyped_storage()._cdata
    return new
