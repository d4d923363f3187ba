"""backend="onnxrt": a captured graph exported to ONNX by torch's own exporter (`torch.onnx.export(...,
dynamo=True)`: torch.export, then onnxscript's ATen-to-ONNX translation) and run in an ONNX Runtime
InferenceSession.

    model = graphjit.compile(model, backend="onnxrt")
    model = graphjit.compile(model, backend="onnxrt", options={"intra_op_num_threads": 4})

- **Inputs.** Parameters and buffers are inputs of the ONNX model, as they are of the captured graph (capture
  passes them in; a weight changed in place or by load_state_dict is what the next call reads), not
  initializers folded into it. CPU tensors go to the session as NumPy views of their memory, outputs come
  back as tensors over ORT's memory (no copies either way, beyond making a strided input contiguous).
- **Sizes.** A dim capture treats as dynamic (graphjit.compile(dynamic=True), mark_dynamic, or a size seen
  to change) is a dynamic axis of the model (one `torch.export.Dim` per size symbol), so a new batch size
  or sequence length runs in the same session. Where the export must specialize one, or a graph takes an
  int argument, the graph is exported per distinct set of sizes instead (backends/dynamic.PerSize).
- **Cache.** The exported model is kept on disk under config.cache_dir/onnx, named by a hash of the graph's
  code, its inputs' dtypes and sizes (symbols named), its tensor constants, and the torch and onnxscript
  versions: a new process with the same graph skips the export (the slow part: seconds) and builds its
  session from the file. options={"cache": False} turns it off. A file that does not load is exported again.
- **What runs as captured** (logged under GRAPHJIT_LOGS=onnxrt, the graph otherwise unchanged): a graph
  needing gradients (ORT runs inference), a graph writing into its inputs or returning a view of one (ORT
  returns new tensors), inputs on a device without an ORT provider here (CUDA needs onnxruntime-gpu), and
  a graph the exporter or ORT refuses (one warning naming the error). A session run that fails (an input it
  does not take) warns once and runs the graph as captured from then on.

Options (compile(options=...)): providers (ORT provider names, default CPUExecutionProvider),
graph_optimization_level ("disable", "basic", "extended", "all"; default "all"), intra_op_num_threads,
inter_op_num_threads, optimized_model_path (where ORT writes the model it optimized), cache (bool).
"""
import hashlib
import os
import threading
import warnings

import torch

from .. import config, logs

OPTIONS = {"providers": (list, tuple), "graph_optimization_level": str, "intra_op_num_threads": int,
           "inter_op_num_threads": int, "optimized_model_path": str, "cache": bool}
_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


class Unsupported(Exception):
    """A graph this backend runs as captured (the reason in its message)."""


def check_options(options):
    """options as compile(options=...) gives them, checked: a ValueError naming what is wrong."""
    options = dict(options or {})
    for key, value in options.items():
        if key not in OPTIONS:
            raise ValueError(f"graphjit.compile: unknown option {key!r} for backend 'onnxrt'; known: "
                             f"{', '.join(sorted(OPTIONS))}")
        if not isinstance(value, OPTIONS[key]) or (OPTIONS[key] is int and isinstance(value, bool)):
            raise ValueError(f"graphjit.compile: option {key!r} of backend 'onnxrt' takes "
                             f"{getattr(OPTIONS[key], '__name__', 'a list')}, not {value!r}")
    if options.get("graph_optimization_level", "all") not in _LEVELS:
        raise ValueError(f"graphjit.compile: graph_optimization_level must be one of {', '.join(_LEVELS)}, "
                         f"not {options['graph_optimization_level']!r}")
    return options


def _runtime():
    import importlib.util
    missing = [m for m in ("onnxruntime", "onnxscript", "onnx") if importlib.util.find_spec(m) is None]
    if missing:     # onnxscript: torch.onnx's exporter (imported only where a graph is exported)
        raise RuntimeError(f"backend 'onnxrt' needs {', '.join(missing)}: pip install onnxruntime onnxscript onnx")
    import onnxruntime
    return onnxruntime


def compile_onnxrt(gm, example_inputs, options=None):
    """The callable running gm in an ONNX Runtime session, or gm.forward where the graph runs as captured
    (the reason logged; a warning where the exporter or ORT refused it)."""
    from .dynamic import PerSize, symbolic_inputs
    options = check_options(options)
    name = (gm.meta.get("graphjit") or {}).get("name", "graph")
    try:
        _check_graph(gm, example_inputs, options)
    except Unsupported as e:
        logs.log("onnxrt", f"{name}: running the graph as captured: {e}")
        return gm.forward
    ort = _runtime()
    dynamic = symbolic_inputs(gm)

    def per_size(reason):
        logs.log("onnxrt", f"{name}: one session per set of sizes: {reason}")
        return PerSize(lambda g, inputs: compile_onnxrt(g, inputs, options), gm, dynamic)
    if any(isinstance(v, torch.SymInt) for v in _placeholder_values(gm)):
        return per_size("the graph takes an int argument (the export makes it a constant)")
    try:
        model, axes, cached = _exported(gm, example_inputs, options, name)
        try:
            session = Session(_session(ort, model, options), gm, name)
        except Exception as e:  # noqa: BLE001 - a cached file ORT does not load (truncated, foreign): export again
            if not cached:
                raise
            logs.log("onnxrt", f"{name}: the cached ONNX model does not load ({type(e).__name__}); exporting")
            model, axes, _ = _exported(gm, example_inputs, options, name, fresh=True)
            session = Session(_session(ort, model, options), gm, name)
    except Exception as e:  # noqa: BLE001 - the exporter's and ORT's errors are many; the graph still runs
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        if dynamic:
            return per_size(f"the export with dynamic axes failed ({type(e).__name__}: {first})")
        warnings.warn(f"graphjit: backend 'onnxrt' could not take graph {name} ({type(e).__name__}: {first}); "
                      f"it runs as captured", RuntimeWarning, stacklevel=2)
        return gm.forward
    logs.log("onnxrt", f"{name}: ONNX Runtime session ({', '.join(session.session.get_providers())}), "
                       f"{len(session.input_names)} inputs, dynamic axes: {', '.join(axes) or 'none'}")
    return session


def _check_graph(gm, example_inputs, options):
    from ..compiler import training
    if training.wants_aot(gm, example_inputs):
        raise Unsupported("it needs gradients or changes grad mode mid-graph (ONNX Runtime runs inference: "
                          "call it under torch.no_grad() or torch.inference_mode())")
    if training._inputs_written(gm):
        raise Unsupported("it writes into an input (ONNX Runtime's outputs are new tensors)")
    providers = options.get("providers") or ["CPUExecutionProvider"]
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                raise Unsupported(f"an input is on {value.device}: this backend feeds ONNX Runtime NumPy arrays "
                                  f"(CPU tensors; the providers asked for: {providers})")
            if value.dtype not in _NUMPY_DTYPES:
                raise Unsupported(f"an input is {value.dtype}, which NumPy does not hold")
            if value.layout != torch.strided or value.is_quantized:
                raise Unsupported(f"an input is a {value.layout} tensor")
        elif not isinstance(value, (int, float, bool, torch.SymInt)):
            raise Unsupported(f"an input is a {type(value).__name__}")
    inputs = {training.traced_storage(n) for n in gm.graph.nodes if n.op == "placeholder"} - {None}
    seen = set()
    for leaf in training.output_leaves(gm):
        if not isinstance(leaf, torch.fx.Node):
            raise Unsupported(f"an output is the constant {leaf!r}")
        if leaf.op == "placeholder":
            raise Unsupported("it returns one of its inputs (ONNX Runtime's outputs are new tensors)")
        storage = training.traced_storage(leaf)
        if storage in inputs:
            raise Unsupported("an output views an input (ONNX Runtime's outputs are new tensors)")
        if storage is not None and storage in seen:
            raise Unsupported("two outputs share memory (ONNX Runtime's outputs are tensors of their own)")
        seen.add(storage)
        value = leaf.meta.get("example_value")
        if value is not None and not isinstance(value, torch.Tensor):
            raise Unsupported(f"an output is a {type(value).__name__}, not a tensor")
        if isinstance(value, torch.Tensor) and value.dtype not in _NUMPY_DTYPES:
            raise Unsupported(f"an output is {value.dtype}, which NumPy does not hold")


_NUMPY_DTYPES = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                 torch.uint8, torch.bool}


def _placeholder_values(gm):
    return [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]


def _dynamic_shapes(gm):
    """(torch.export's dynamic_shapes for gm's inputs, {symbol name: Dim}) from the placeholders' size
    symbols; (None, {}) where no size is symbolic."""
    dims, shapes = {}, []
    for value in _placeholder_values(gm):
        spec = {}
        if isinstance(value, torch.Tensor):
            for i, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and not size.node.is_constant() and \
                        not getattr(size.node.expr, "is_number", False):
                    expr = size.node.expr
                    if not getattr(expr, "is_Symbol", False):
                        raise Unsupported(f"an input's size is the expression {expr}, not one symbol")
                    spec[i] = dims.setdefault(str(expr), torch.export.Dim(str(expr)))
        shapes.append(spec or None)
    return (tuple(shapes), dims) if dims else (None, {})


def _key(gm, example_inputs, dynamic):
    """The disk cache's name for gm's model: its code, its inputs' dtypes and sizes (symbols by name), its
    tensor constants' bytes, and the exporter's versions."""
    from importlib.metadata import version
    h = hashlib.sha256()
    h.update(gm.code.encode())
    for value, example in zip(_placeholder_values(gm), example_inputs):
        # the traced sizes (symbols by name) where the graph holds them, else the example's (a per-size copy)
        sized = value if isinstance(value, torch.Tensor) else example
        shape = [str(s) for s in sized.shape] if isinstance(sized, torch.Tensor) else None
        h.update(repr((type(example).__name__, getattr(example, "dtype", None), shape,
                       None if isinstance(example, torch.Tensor) else example)).encode())
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            const = getattr(gm, node.target, None)
            if isinstance(const, torch.Tensor):
                h.update(repr((node.target, const.dtype, tuple(const.shape))).encode())
                h.update(const.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    h.update(repr((torch.__version__, version("onnxscript"), sorted(dynamic))).encode())
    return h.hexdigest()[:32]


def _exported(gm, example_inputs, options, name, fresh=False):
    """(the ONNX model's bytes, the names of its dynamic size symbols, whether it came from the disk
    cache): read from the cache unless fresh, else exported (and stored)."""
    dynamic_shapes, dims = _dynamic_shapes(gm)
    path = None
    if options.get("cache", True):
        path = os.path.join(config.cache_dir, "onnx", _key(gm, example_inputs, dims) + ".onnx")
        if not fresh and os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            logs.log("onnxrt", f"{name}: ONNX model from the cache: {path}")
            return data, sorted(dims), True
    data = _export(gm, example_inputs, dynamic_shapes)
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)       # whole or not at all: a reader never sees half a file
    return data, sorted(dims), False


def _export(gm, example_inputs, dynamic_shapes):
    """gm exported by torch.onnx (its dynamo path), as the serialized model."""
    import logging
    args = tuple(example_inputs)
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    from torch._guards import tracing
    try:
        # outside the tracing context capture's symbolic graphs are handed over in: torch.export traces
        # with a fake mode of its own
        with warnings.catch_warnings(), tracing(None):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(gm, args, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False,
                                        report=False)
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    return program.model_proto.SerializeToString()


# sessions made in this process (tests count them)
sessions_made = 0


def _session(ort, model, options):
    global sessions_made
    sessions_made += 1
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[options.get("graph_optimization_level", "all")])
    if "intra_op_num_threads" in options:
        so.intra_op_num_threads = options["intra_op_num_threads"]
    if "inter_op_num_threads" in options:
        so.inter_op_num_threads = options["inter_op_num_threads"]
    if "optimized_model_path" in options:
        so.optimized_model_filepath = options["optimized_model_path"]
    so.log_severity_level = 3
    providers = list(options.get("providers") or ["CPUExecutionProvider"])
    missing = [p for p in providers if p not in ort.get_available_providers()]
    if missing:
        raise RuntimeError(f"ONNX Runtime here has no {', '.join(missing)} (it has "
                           f"{', '.join(ort.get_available_providers())})")
    return ort.InferenceSession(model, sess_options=so, providers=providers)


_ORT_NUMPY = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
              "tensor(double)": "float64", "tensor(bool)": "bool", "tensor(float16)": "float16"}


def _np():
    import numpy
    return numpy


class Session:
    """gm's forward in an ONNX Runtime session: tensors in as NumPy views, outputs back as tensors. The
    inputs the exported model dropped (unused by the graph) are not passed."""

    def __init__(self, session, gm, name):
        self.session, self.gm, self.name = session, gm, name
        self.input_names = [i.name for i in session.get_inputs()]
        self.input_types = [i.type for i in session.get_inputs()]
        # torch.onnx names the model's inputs after gm.forward's arguments: the placeholders' targets (a
        # placeholder's node name differs where its target shadows a builtin: `input` is node input_1)
        placeholders = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
        self.positions = [placeholders.index(n) if n in placeholders else None for n in self.input_names]
        if None in self.positions:
            raise RuntimeError(f"the exported model's inputs {self.input_names} are not the graph's {placeholders}")
        self.fallback = None
        from ..compiler.training import output_leaves
        leaves = output_leaves(gm)
        self.tuple_out = isinstance([n for n in gm.graph.nodes if n.op == "output"][0].args[0], (tuple, list))
        if len(session.get_outputs()) != len(leaves):
            raise RuntimeError(f"the exported model has {len(session.get_outputs())} outputs, the graph {len(leaves)}")

    def __call__(self, *args):
        if self.fallback is not None:
            return self.fallback(*args)
        feed = {}
        for name, k, kind in zip(self.input_names, self.positions, self.input_types):
            value = args[k]
            if isinstance(value, torch.Tensor):
                value = value.detach()
                if not value.is_contiguous():
                    value = value.contiguous()
                value = value.numpy()
            else:                   # a number the export kept as an input: a 0-d array of its type
                value = _np().asarray(value, dtype=_ORT_NUMPY.get(kind, None))
            feed[name] = value
        try:
            results = self.session.run(None, feed)
        except Exception as e:  # noqa: BLE001 - ORT refusing a call's inputs: the graph still runs
            warnings.warn(f"graphjit: backend 'onnxrt' failed to run graph {self.name} ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:300]}); it runs as captured from now on", RuntimeWarning)
            self.fallback = self.gm.forward
            return self.fallback(*args)
        outs = [torch.from_numpy(r) if r.flags.writeable else torch.from_numpy(r.copy()) for r in results]
        return tuple(outs) if self.tuple_out else outs[0]
