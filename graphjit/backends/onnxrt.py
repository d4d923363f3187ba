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
  a graph the exporter or ORT refuses for another reason than an op (one warning naming the error). A
  session run that fails (an input it does not take) warns once and runs the graph as captured from then on.
  A call with an input of no elements runs as captured (ORT's mean over none is 0, torch's NaN).
- **GPU.** CUDA inputs go to the TensorRT and CUDA providers this ONNX Runtime has (onnxruntime-gpu),
  through an IO binding (Session._bound): inputs read at their data pointers, outputs allocated by ORT on
  the GPU and taken through DLPack, ORT's work on torch's current stream (provider option
  user_compute_stream), TensorRT's engines cached under config.cache_dir/onnx/trt. options={"io_binding":
  True} takes the same path on the CPU.
- **Partial support.** Where the export fails on ops ONNX has no function for, the graph is split
  (_partitioned): those ops run in PyTorch, the parts around them in sessions of their own, with one
  warning naming the ops and the partition under GRAPHJIT_LOGS=onnxrt.

Options (compile(options=...)): providers (ORT provider names, default CPUExecutionProvider),
graph_optimization_level ("disable", "basic", "extended", "all"; default "all"), intra_op_num_threads,
inter_op_num_threads, optimized_model_path (where ORT writes the model it optimized), cache (bool),
io_binding (bool; default: on for GPU inputs).
"""
import contextlib
import functools
import hashlib
import os
import warnings

import torch

from ..cache_files import write_whole
from .. import config, logs

OPTIONS = {"providers": (list, tuple), "graph_optimization_level": str, "intra_op_num_threads": int,
           "inter_op_num_threads": int, "optimized_model_path": str, "cache": bool, "io_binding": bool}
# the providers that run on an NVIDIA GPU (onnxruntime-gpu; TensorRT's libraries for the second)
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
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


def compile_onnxrt(gm, example_inputs, options=None, partition=True):
    """The callable running gm in an ONNX Runtime session, or gm.forward where the graph runs as captured
    (the reason logged; a warning where the exporter or ORT refused it). Where the export fails and
    `partition`, the ops ONNX has no function for run in PyTorch and the rest in sessions (_partitioned)."""
    from .dynamic import PerSize, symbolic_inputs
    options = check_options(options)
    name = (gm.meta.get("graphjit") or {}).get("name", "graph")
    try:
        device = _check_graph(gm, example_inputs, options)
    except Unsupported as e:
        logs.log("onnxrt", f"{name}: running the graph as captured: {e}")
        return gm.forward
    ort = _runtime()
    gm = _zero_fully_masked_rows(gm)
    dynamic = symbolic_inputs(gm)

    def per_size(reason):
        logs.log("onnxrt", f"{name}: one session per set of sizes: {reason}")
        return PerSize(lambda g, inputs: compile_onnxrt(g, inputs, options), gm, dynamic)
    if any(isinstance(v, (torch.SymInt, torch.SymFloat)) for v in _placeholder_values(gm)):
        # an int or float that changes between calls is a graph input: the export would keep its first value
        return per_size("the graph takes an int or float argument (the export makes it a constant)")
    differing = _ort_differs(gm)
    if differing:
        # ops whose ONNX Runtime result differs from torch's run in PyTorch, the rest in sessions
        parts = _partitioned(gm, example_inputs, options, name, dynamic=bool(dynamic), forced=True) \
            if partition else None
        if parts is not None:
            return parts
        if dynamic and partition:
            return per_size(f"{differing[0]}: it runs in parts, for one set of sizes at a time")
        logs.log("onnxrt", f"{name}: running the graph as captured: {differing[0]}, and the graph does not "
                           f"split around it")
        return gm.forward
    try:
        model, axes, cached = _exported(gm, example_inputs, options, name)
        if _narrows_float64(gm, model):
            logs.log("onnxrt", f"{name}: running the graph as captured: it computes in float64 and the exported "
                               f"model casts to a narrower float (an ONNX op without a float64 kernel, e.g. Celu)")
            return gm.forward
        try:
            session = Session(_session(ort, model, options, device), gm, name, device, options.get("io_binding"))
        except Exception as e:  # noqa: BLE001 - a cached file ORT does not load (truncated, foreign): export again
            if not cached:
                raise
            logs.log("onnxrt", f"{name}: the cached ONNX model does not load ({type(e).__name__}); exporting")
            model, axes, _ = _exported(gm, example_inputs, options, name, fresh=True)
            session = Session(_session(ort, model, options, device), gm, name, device, options.get("io_binding"))
    except Exception as e:  # noqa: BLE001 - the exporter's and ORT's errors are many; the graph still runs
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        if dynamic:
            parts = _partitioned(gm, example_inputs, options, name, dynamic=True) if partition else None
            return parts or per_size(f"the export with dynamic axes failed ({type(e).__name__}: {first})")
        parts = _partitioned(gm, example_inputs, options, name) if partition else None
        if parts is not None:
            return parts
        warnings.warn(f"graphjit: backend 'onnxrt' could not take graph {name} ({type(e).__name__}: {first}); "
                      f"it runs as captured", RuntimeWarning, stacklevel=2)
        return gm.forward
    logs.log("onnxrt", f"{name}: ONNX Runtime session ({', '.join(session.session.get_providers())}), "
                       f"{len(session.input_names)} inputs, dynamic axes: {', '.join(axes) or 'none'}")
    return session


def _check_graph(gm, example_inputs, options):
    """The device of the graph's inputs (the CPU where it has none), where a session can run the graph;
    Unsupported, with the reason, where not."""
    from ..compiler import training
    if training.wants_aot(gm, example_inputs):
        raise Unsupported("it needs gradients or changes grad mode mid-graph (ONNX Runtime runs inference: "
                          "call it under torch.no_grad() or torch.inference_mode())")
    if training._inputs_written(gm):
        raise Unsupported("it writes into an input (ONNX Runtime's outputs are new tensors)")
    devices = {v.device for v in example_inputs if isinstance(v, torch.Tensor)}
    if len(devices) > 1:
        raise Unsupported(f"its inputs are on several devices ({', '.join(sorted(map(str, devices)))})")
    device = devices.pop() if devices else torch.device("cpu")
    if device.type not in ("cpu", "cuda"):
        raise Unsupported(f"an input is on {device}, which ONNX Runtime's providers do not take")
    if device.type == "cuda":
        available = _runtime().get_available_providers()
        providers = _providers(options, device)
        if not any(p in GPU_PROVIDERS for p in providers):
            raise Unsupported(f"an input is on {device}, and the providers asked for ({', '.join(providers)}) "
                              f"do not run there")
        if not any(p in available for p in GPU_PROVIDERS):
            raise Unsupported(f"an input is on {device}, and this ONNX Runtime has no GPU provider (it has "
                              f"{', '.join(available)}; pip install onnxruntime-gpu)")
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            if value.dtype not in _NUMPY_DTYPES:
                raise Unsupported(f"an input is {value.dtype}, which NumPy does not hold")
            if not value.numel() and not any(isinstance(d, torch.SymInt) for d in value.shape):
                raise Unsupported("an input has no elements (ONNX Runtime's reductions over none differ from "
                                  "torch's: a mean is 0, not NaN)")
            if value.layout != torch.strided or value.is_quantized:
                raise Unsupported(f"an input is a {value.layout} tensor")
        elif not isinstance(value, (int, float, bool, torch.SymInt)):
            raise Unsupported(f"an input is a {type(value).__name__}")
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and _draws_random(node):
            raise Unsupported(f"it draws random numbers ({_node_name(node)}: ONNX Runtime's generator is not "
                              f"torch's, whose seed and state it would ignore)")
    if _float64_with_float_constants(gm):
        raise Unsupported("it computes in float64 with Python float constants (the exporter makes them float32)")
    constant = _float_constant_out_of_16_bit_range(gm)
    if constant is not None:
        raise Unsupported(f"it computes in a 16-bit float type with the Python float {constant!r}, which that type "
                          f"cannot hold (the exporter makes it an inf or a 0 of that type; eager computes it in float32)")
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
    return device


def _node_name(node):
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))


def _argument(node, index, name, default=None):
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def _draws_random(node):
    """A call drawing random numbers (dropout only in training, with p > 0; attention with dropout_p > 0)."""
    from ..ops import is_random_name
    name = _node_name(node)
    if name == "scaled_dot_product_attention":
        return _argument(node, 4, "dropout_p", 0.0) != 0
    if not is_random_name(name):
        return False
    if "dropout" in name and name not in ("bernoulli", "bernoulli_"):
        training = _argument(node, 2, "training", node.kwargs.get("train", True))
        p = _argument(node, 1, "p", 0.5)
        return training is not False and p != 0
    return True


def _dtypes(gm):
    """The dtypes of gm's values (None for a value that is not a tensor)."""
    return {getattr(n.meta.get("example_value"), "dtype", None) for n in gm.graph.nodes}


def _float_arguments(gm):
    """The Python floats gm's calls take."""
    return (leaf for n in gm.graph.nodes if n.op in ("call_function", "call_method")
            for leaf in torch.utils._pytree.tree_leaves((n.args, n.kwargs)) if type(leaf) is float)


def _float64_with_float_constants(gm):
    """Whether gm computes in float64 and some call takes a Python float (the exporter's constants are
    float32: 0.1 * a float64 tensor loses the float64 digits of 0.1)."""
    return torch.float64 in _dtypes(gm) and next(_float_arguments(gm), None) is not None


_NARROW_FLOATS = {1, 10, 16}        # ONNX's FLOAT, FLOAT16, BFLOAT16


def _narrows_float64(gm, model):
    """Whether gm computes in float64 alone (no narrower float anywhere in it) and the exported model casts
    to a narrower float: the exporter's way around an ONNX op with no float64 kernel, which loses digits."""
    dtypes = _dtypes(gm)
    if torch.float64 not in dtypes or dtypes & {torch.float32, torch.float16, torch.bfloat16}:
        return False
    import onnx
    return any(node.op_type == "Cast" and attribute.name == "to" and attribute.i in _NARROW_FLOATS
               for node in _onnx_nodes(onnx.load_from_string(model).graph) for attribute in node.attribute)


def _onnx_nodes(graph):
    """The nodes of an ONNX graph and of the subgraphs its nodes hold (an If's branches, a Loop's body)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _onnx_nodes(sub)


def _dim_order(value):
    """The dims of an output, outermost first, by the strides eager gives it (the example's: a symbolic
    stride by its hint), where it is laid out densely but not contiguously; None where it is contiguous or
    its elements share memory (an expand's layout can't be copied into: left contiguous)."""
    sizes = [d if type(d) is int else getattr(getattr(d, "node", None), "hint", None)
             for d in (*value.shape, *value.stride())]
    if not all(type(d) is int for d in sizes):
        return None
    shape, strides = sizes[:value.dim()], sizes[value.dim():]
    probe = torch.empty_strided(shape, strides, device="meta")
    if probe.is_contiguous() or not torch._prims_common.is_non_overlapping_and_dense_or_false(probe):
        return None
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    return order if _strides_in_order(shape, order) == tuple(strides) else None


def _strides_in_order(shape, order):
    """Dense strides of `shape` with its dims laid out in `order` (outermost first)."""
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def _float_constant_out_of_16_bit_range(gm):
    """A Python float some call of gm takes that a 16-bit float type gm computes in has no normal number for
    (beyond its largest, or nonzero under its smallest normal), else None."""
    types = _dtypes(gm) & {torch.float16, torch.bfloat16}
    if not types:
        return None
    return next((value for value in _float_arguments(gm) if value == value and value != 0 and
                 any(not torch.finfo(t).tiny <= abs(value) <= torch.finfo(t).max for t in types)), None)


# ops of gm (by name) whose ONNX Runtime kernels differ from torch's: max/min reductions and max pooling
# skip NaN (eager propagates it)
_NAN_SKIPPING = frozenset({"max", "min", "amax", "amin", "argmax", "argmin", "aminmax", "cummax", "cummin",
                           "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
                           "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d",
                           "adaptive_max_pool2d", "adaptive_max_pool3d", "fractional_max_pool2d",
                           "fractional_max_pool3d"})


def _ort_differs(gm):
    """Reasons gm holds an op whose ONNX Runtime result differs from eager's ([] where none): max/min
    reductions and max pooling (NaN skipped), cross entropy with label smoothing (another value)."""
    reasons = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = _node_name(node)
        if name in _NAN_SKIPPING:
            reasons.append(f"{name} (ONNX Runtime's skips NaN)")
        elif name == "cross_entropy" and _argument(node, 7, "label_smoothing", 0.0) != 0.0:
            reasons.append("cross entropy with label smoothing (the exporter's differs)")
    return reasons


def _zero_fully_masked_rows(gm):
    """gm where each attention with a bool or float mask gives zeros for a query row its mask blocks
    entirely (all False, or all -inf), as eager does; ONNX Runtime's attention averages the values there.
    A copy of gm where it has such a call, else gm."""
    import copy

    def masked_attention(n):
        return n.op == "call_function" and getattr(n.target, "__name__", "") == "scaled_dot_product_attention" \
            and isinstance(_argument(n, 3, "attn_mask"), torch.fx.Node)
    if not any(masked_attention(n) for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    for node in [n for n in graph.nodes if masked_attention(n)]:
        mask = _argument(node, 3, "attn_mask")
        value = mask.meta.get("example_value")
        anchor = node
        if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
            allowed = mask
        else:
            with graph.inserting_after(anchor):
                allowed = anchor = graph.call_function(torch.ne, (mask, float("-inf")))
        with graph.inserting_after(anchor):
            keep = graph.call_function(torch.any, (allowed, -1), {"keepdim": True})
        with graph.inserting_after(keep):
            zeroed = graph.call_function(torch.where, (keep, node, 0.0))
        node.replace_all_uses_with(zeroed, delete_user_cb=lambda user: user is not zeroed)
        if "example_value" in node.meta:
            zeroed.meta["example_value"] = node.meta["example_value"]
    module = torch.fx.GraphModule(gm, graph)
    module.meta.update(gm.meta)
    return module


def _differs_in_ort(node):
    """_ort_differs for a node of the ATen graph (torch.export's, decomposed as the exporter does)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    name = node.target._schema.name.split("::")[-1]
    if name in _NAN_SKIPPING:
        return True
    if name == "cross_entropy_loss":
        return _argument(node, 5, "label_smoothing", 0.0) != 0.0
    return False


# the dtypes NumPy holds, by the name of NumPy's dtype
_NUMPY_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.int64: "int64",
                torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool_"}
_NUMPY_DTYPES = frozenset(_NUMPY_NAMES)


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
    from ..compiler.runtime.graph_cache import uncacheable_reason
    dynamic_shapes, dims = _dynamic_shapes(gm)
    path = None
    uncacheable = uncacheable_reason(gm)
    if uncacheable is not None:
        logs.log("onnxrt", f"{name}: not kept in the disk cache: {uncacheable}")
    elif options.get("cache", True):
        path = os.path.join(config.cache_dir, "onnx", _key(gm, example_inputs, dims) + ".onnx")
        if not fresh and os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            logs.log("onnxrt", f"{name}: ONNX model from the cache: {path}")
            return data, sorted(dims), True
    data = _export(gm, example_inputs, dynamic_shapes)
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_whole(path, data)       # whole or not at all: a reader never sees half a file
    return data, sorted(dims), False


@contextlib.contextmanager
def _quiet():
    """The exporter's logs below errors and its warnings ignored, outside the tracing context capture's
    symbolic graphs are handed over in (torch.export traces with a fake mode of its own)."""
    import logging
    from torch._guards import tracing
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript", "onnx_ir")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), tracing(None):
            warnings.simplefilter("ignore")
            yield
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


def _export(gm, example_inputs, dynamic_shapes):
    """gm exported by torch.onnx (its dynamo path), as the serialized model."""
    with _quiet():
        program = torch.onnx.export(gm, tuple(example_inputs), dynamo=True, dynamic_shapes=dynamic_shapes,
                                    verbose=False, report=False)
    return program.model_proto.SerializeToString()


# sessions made in this process (tests count them)
sessions_made = 0


def _providers(options, device):
    """The providers a session for inputs on `device` asks for: options' providers, else the CPU's, or
    for CUDA inputs the GPU providers of this ONNX Runtime (TensorRT first), then the CPU's."""
    if options.get("providers"):
        return list(options["providers"])
    if device.type != "cuda":
        return ["CPUExecutionProvider"]
    available = _runtime().get_available_providers()
    return [p for p in GPU_PROVIDERS if p in available] + ["CPUExecutionProvider"]


def _provider_options(providers, device):
    """(name, options) per provider: on a GPU, the device's index, and ORT's CUDA work on torch's current
    stream of it, so that ORT's kernels run after torch's that made the inputs and before those reading
    the outputs, with no synchronization; TensorRT's engines cached under config.cache_dir/onnx/trt."""
    out = []
    for p in providers:
        if device.type == "cuda" and p in GPU_PROVIDERS:
            opts = {"device_id": str(device.index or 0),
                    "user_compute_stream": str(torch.cuda.current_stream(device).cuda_stream)}
            if p == "TensorrtExecutionProvider":
                opts.update(trt_engine_cache_enable="True",
                            trt_engine_cache_path=os.path.join(config.cache_dir, "onnx", "trt"))
            out.append((p, opts))
        else:
            out.append((p, {}))
    return out


def _session(ort, model, options, device=torch.device("cpu")):
    global sessions_made
    sessions_made += 1
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[options.get("graph_optimization_level", "all")])
    if "intra_op_num_threads" in options:
        so.intra_op_num_threads = options["intra_op_num_threads"]
    if "inter_op_num_threads" in options:
        so.inter_op_num_threads = options["inter_op_num_threads"]
    if "optimized_model_path" in options:
        path = os.path.abspath(options["optimized_model_path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)      # ORT fails on a missing folder
        so.optimized_model_filepath = path
    so.log_severity_level = 3
    providers = _providers(options, device)
    missing = [p for p in providers if p not in ort.get_available_providers()]
    if missing:
        raise RuntimeError(f"ONNX Runtime here has no {', '.join(missing)} (it has "
                           f"{', '.join(ort.get_available_providers())})")
    names, provider_options = zip(*_provider_options(providers, device))
    return ort.InferenceSession(model, sess_options=so, providers=list(names), provider_options=list(provider_options))


_ORT_NUMPY = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
              "tensor(double)": "float64", "tensor(bool)": "bool", "tensor(float16)": "float16"}


def _np():
    import numpy
    return numpy


def _returns_tuple(gm):
    """Whether gm returns a tuple (or list) of values rather than one value."""
    return isinstance([n for n in gm.graph.nodes if n.op == "output"][0].args[0], (tuple, list))


class Session:
    """gm's forward in an ONNX Runtime session: tensors in as NumPy views, outputs back as tensors. The
    inputs the exported model dropped (unused by the graph) are not passed."""

    def __init__(self, session, gm, name, device=torch.device("cpu"), io_binding=None):
        self.session, self.gm, self.name = session, gm, name
        self.device = device
        # IO binding: ORT reads the inputs where they are and allocates the outputs on the device (on a
        # GPU the NumPy path would copy both ways through the host); on the CPU, NumPy views cost nothing
        self.io_binding = device.type != "cpu" if io_binding is None else io_binding
        self.output_names = [o.name for o in session.get_outputs()]
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
        self.tuple_out = _returns_tuple(gm)
        if len(session.get_outputs()) != len(leaves):
            raise RuntimeError(f"the exported model has {len(session.get_outputs())} outputs, the graph {len(leaves)}")
        # each output's dtype and layout in eager: the exporter may compute in another dtype (a float16 sum
        # comes back float32) and ORT's outputs are contiguous (eager's of a channels-last conv or a permute
        # are not): the order of its dims by stride, where that is not the contiguous one
        self.layouts = [(value.dtype, _dim_order(value)) if isinstance(value, torch.Tensor) else (None, None)
                        for value in (leaf.meta.get("example_value") for leaf in leaves)]

    def __call__(self, *args):
        if self.fallback is not None:
            return self.fallback(*args)
        if any(isinstance(a, torch.Tensor) and not a.numel() for a in args):
            # ONNX Runtime's reductions over no elements differ from torch's (a mean is 0, not NaN)
            return self.gm.forward(*args)
        if self.io_binding:
            return self._bound(args)
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
        return self._as_eager(outs)

    def _as_eager(self, outs):
        """The outputs in eager's dtypes and strides."""
        for i, (out, (dtype, order)) in enumerate(zip(outs, self.layouts)):
            if dtype is not None and out.dtype != dtype:
                out = out.to(dtype)
            if order is not None:
                strides = _strides_in_order(out.shape, order)
                if out.stride() != strides:
                    out = torch.empty_strided(out.shape, strides, dtype=out.dtype, device=out.device).copy_(out)
            outs[i] = out
        return tuple(outs) if self.tuple_out else outs[0]

    def _bound(self, args):
        """One run through an IO binding: each tensor input bound at its data pointer on its device (a
        strided one made contiguous first), each output allocated by ORT on self.device and taken as a
        tensor through DLPack (no copy)."""
        binding = self.session.io_binding()
        kept = []           # the tensors whose memory is bound, alive until the run ends
        device_type, device_id = self.device.type, self.device.index or 0
        for name, k, kind in zip(self.input_names, self.positions, self.input_types):
            value = args[k]
            if isinstance(value, torch.Tensor):
                value = value.detach().contiguous()
                kept.append(value)
                binding.bind_input(name, device_type, device_id, getattr(_np(), _NUMPY_NAMES[value.dtype]), list(value.shape),
                                   value.data_ptr())
            else:
                binding.bind_cpu_input(name, _np().asarray(value, dtype=_ORT_NUMPY.get(kind, None)))
        for name in self.output_names:
            binding.bind_output(name, device_type, device_id)
        try:
            self.session.run_with_iobinding(binding)
        except Exception as e:  # noqa: BLE001 - as in __call__
            warnings.warn(f"graphjit: backend 'onnxrt' failed to run graph {self.name} ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:300]}); it runs as captured from now on", RuntimeWarning)
            self.fallback = self.gm.forward
            return self.fallback(*args)
        outs = [torch.from_dlpack(v) for v in binding.get_outputs()]
        return self._as_eager(outs)


# Partial support: a graph with ops ONNX has no function for is exported in parts.
#
# The graph is exported by torch.export and decomposed as torch.onnx decomposes it (its ONNX-friendly
# table: ops with an ONNX function stay whole), so that each node is an ATen op the exporter would
# translate; the nodes whose op has no function in the exporter's registry run in PyTorch, and each
# maximal connected set of the others (torch's CapabilityBasedPartitioner) is a graph of its own, compiled
# by compile_onnxrt as a whole graph is (its own session and disk cache entry; a part that still fails runs
# as captured). A graph with dynamic dims is exported with them, so its parts' sessions take new sizes;
# where that fails, the graph is taken one set of sizes at a time (backends/dynamic.PerSize).


@functools.cache
def _exporter_tables():
    """(the exporter's registry of ONNX functions, its decomposition table), or None where this torch's
    exporter does not have them where this module looks (its internals move between releases)."""
    try:
        from torch.onnx._internal.exporter import _decomp, _registration
        with _quiet():
            registry = _registration.ONNXRegistry.from_torchlib()
        table = _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))
        return registry, table
    except Exception:  # noqa: BLE001 - any of these internals missing or changed: no partition
        return None


def _aten_graph(gm, example_inputs, table, dynamic_shapes):
    """gm as a flat graph of ATen ops (torch.export, then the exporter's decompositions): a GraphModule
    taking gm's inputs in order and returning the tuple of its output leaves."""
    with _quiet():
        program = torch.export.export(gm, tuple(example_inputs), dynamic_shapes=dynamic_shapes,
                                      strict=False).run_decompositions(table)
        module = program.module()
    graph = torch.fx.Graph()
    values = {}
    for node in module.graph.nodes:
        if node.op == "call_module" and not node.users:    # the input checks torch.export adds (_guards_fn)
            continue
        if node.op == "output":
            graph.output(tuple(values[leaf] if isinstance(leaf, torch.fx.Node) else leaf
                               for leaf in torch.fx.node.map_arg(node.args[0], lambda n: n)))
        else:
            values[node] = graph.node_copy(node, lambda n: values[n])
    flat = torch.fx.GraphModule(module, graph)
    flat.recompile()
    return flat


class _OnnxSupport:
    """Which nodes of an ATen graph the exporter translates: an op with a function in its registry, a
    getitem of such a node, and the rest of Python's operators (sizes). With `forced`, not the ops whose
    ONNX Runtime result differs from eager's (_differs_in_ort)."""

    def __init__(self, registry, forced=False):
        self.registry = registry
        self.forced = forced

    def is_node_supported(self, submodules, node):
        import operator
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            source = node.args[0]
            return not isinstance(source, torch.fx.Node) or self.is_node_supported(submodules, source)
        if self.forced and _differs_in_ort(node):
            return False
        if isinstance(node.target, torch._ops.OpOverload):
            return bool(self.registry.is_registered(node.target))
        return not isinstance(node.target, torch._ops.HigherOrderOperator)


class _Part(torch.nn.Module):
    """A compiled part of a partitioned graph, as the submodule its call_module node calls."""

    def __init__(self, run):
        super().__init__()
        self.run = run

    def forward(self, *args):
        return self.run(*args)


class Partitioned:
    """A graph run in parts: `graph` calls each part's session (a _Part submodule) and runs the other ops in
    PyTorch; it returns what gm returns (one value, or a tuple)."""

    def __init__(self, graph, tuple_out, parts, eager_ops):
        self.graph, self.tuple_out, self.parts, self.eager_ops = graph, tuple_out, parts, eager_ops

    def __call__(self, *args):
        outs = self.graph(*args)
        return tuple(outs) if self.tuple_out else outs[0]


def _partitioned(gm, example_inputs, options, name, dynamic=False, forced=False):
    """gm run in parts (a Partitioned), or None where it cannot be: no exporter tables, an export to ATen
    that fails, every op supported (the failure was not an op's), or no op supported. With `dynamic`, gm's
    size symbols are dynamic in the ATen graph and so in each part's session (a part whose sizes are not
    one symbol each takes one session per set of sizes). With `forced`, the ops _ort_differs found run in
    PyTorch too (None where the ATen graph shows none of them: they were decomposed)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    tables = _exporter_tables()
    if tables is None or any(not isinstance(v, torch.Tensor) for v in example_inputs):
        return None
    registry, table = tables
    try:
        flat = _aten_graph(gm, example_inputs, table, _dynamic_shapes(gm)[0] if dynamic else None)
    except Exception as e:  # noqa: BLE001 - torch.export's refusals are many
        logs.log("onnxrt", f"{name}: no partition: torch.export failed ({type(e).__name__}: {str(e)[:200]})")
        return None
    support = _OnnxSupport(registry, forced)
    computing = [n for n in flat.graph.nodes if n.op == "call_function"]
    if forced and not any(_differs_in_ort(n) for n in computing):
        logs.log("onnxrt", f"{name}: no partition: the ops ONNX Runtime computes otherwise are not in the ATen graph")
        return None
    eager_ops = sorted({str(n.target) for n in computing if not support.is_node_supported(None, n)})
    if not eager_ops or len(eager_ops) == len({str(n.target) for n in computing}):
        return None
    fused = CapabilityBasedPartitioner(flat, support, allows_single_node_partition=True).partition_and_fuse()
    calls = [n for n in fused.graph.nodes if n.op == "call_module"]
    inputs = _part_inputs(fused, example_inputs, {n.target for n in calls})
    parts = []
    for node in calls:
        sub = getattr(fused, node.target)
        for sub_node in sub.graph.nodes:
            if "val" in sub_node.meta:
                sub_node.meta["example_value"] = sub_node.meta["val"]
        sub.meta["graphjit"] = {"name": f"{name}.{node.target}"}
        run = compile_onnxrt(sub, inputs[node.target], options, partition=False)
        parts.append((node.target, isinstance(run, Session)))
        setattr(fused, node.target, _Part(run))
    in_sessions = sum(ok for _, ok in parts)
    warnings.warn(f"graphjit: backend 'onnxrt': graph {name} has ops ONNX Runtime cannot take or computes "
                  f"otherwise ({', '.join(eager_ops)}): they run in PyTorch, {in_sessions} of the {len(parts)} parts "
                  f"around them in ONNX Runtime", RuntimeWarning, stacklevel=3)
    logs.log("onnxrt", f"{name}: partitioned: {len(parts)} parts "
                       f"({', '.join(f'{t}: ' + ('session' if ok else 'as captured') for t, ok in parts)}), "
                       f"in PyTorch: {', '.join(eager_ops)}\n{fused.code}")
    return Partitioned(fused, _returns_tuple(gm), parts, eager_ops)


def _part_inputs(fused, example_inputs, targets):
    """{part name: the values its call receives}, from a run of the fused graph on the example inputs (parts
    still the partitioner's submodules, run by PyTorch)."""
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            if target in targets:
                seen[target] = list(args)
            return super().call_module(target, args, kwargs)
    devices = sorted({v.device.index or 0 for v in example_inputs if isinstance(v, torch.Tensor) and v.is_cuda})
    with torch.no_grad(), torch.random.fork_rng(devices=devices):     # the run draws nothing the user's calls would
        Recorder(fused).run(*example_inputs)
    return seen
