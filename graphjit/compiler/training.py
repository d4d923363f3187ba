"""Graphs that need gradients: forward and backward through graphjit's compiler, by way of AOTAutograd.
(Inference graphs that change grad mode or autocast mid-graph come this way too, as one inference graph.)

A captured graph whose inputs require grad (parameters in train mode) is handed to torch's AOTAutograd
(`aot_module_simplified`), which traces the joint forward+backward graph functionalized (input
mutations such as BatchNorm's running statistics become copies back into the input; aliasing of
outputs and inputs is replayed by its runtime wrappers), and splits it with torch's min-cut partitioner:
the forward saves few tensors for the backward and the backward recomputes cheap pointwise work, and
(_partition) the softmax or log_softmax of an upcast tensor, which the partitioner would otherwise save
in the wider dtype. Both halves are plain inference graphs, compiled by compile_graph like any other:

    captured graph --AOTAutograd--> forward ATen graph  --compile_graph--> fused kernels
                                    backward ATen graph --compile_graph--> fused kernels (at first backward)

The joint graph is traced with the compiler's own decomposition table (decompose.decomposition_table),
so the ops the lowering takes whole (softmax, layer_norm, their backward decompositions aside) and the
extern ops (matmuls, convolutions, attention) reach the compiler as it expects them.

Before AOTAutograd traces, attention masks that are constant and all true are dropped
(decompose.fold_constant_attention_masks): AOTAutograd's trace picks the attention kernels, and such a
mask would cost the math path (on CUDA, bfloat16 attention upcast to float32, its scores saved in float32).

Grad mode and autocast changes inside the captured graph (`with torch.no_grad():`, `torch.autocast`)
are applied while AOTAutograd traces, so the graphs the compiler sees no longer hold them.

An output whose elements share memory (an unfold's overlapping windows) gets its tangent (the gradient
coming into the backward for it) traced dense, in its memory format, not in the output's strides
(_check_tangent_layouts): a gradient copied into those strides would keep one value per shared element.

Randomness: dropout is traced into the forward graph as a float32 rand_like, a comparison and a product
(decompose._native_dropout), which the lowering draws inside the fused forward kernel by Philox
(lowering.py, "Random numbers"); the mask is a forward output the partitioner saves (random ops are never
recomputed), so the backward reads the mask the forward drew. config.fallback_random keeps eager's
native_dropout instead.
"""

import contextlib
import functools
import re
import sys
import weakref

import sympy
import torch

from .. import logs
from ..ops import AUGMENTED_ASSIGNMENTS


SAVED_VALUE_WRITTEN = "one of the variables needed for gradient computation has been modified by an inplace"


def wants_aot(gm, example_inputs):
    """Whether a graph goes through AOTAutograd: it needs gradients, or it changes grad mode or autocast
    mid-graph (AOTAutograd's trace applies those; compile_graph refuses a graph that holds them)."""
    from .graph_checks import changes_state, needs_autograd
    return needs_autograd(example_inputs) or changes_state(gm) is not None


def _calls_lstm(gm):
    return any(n.op == "call_function" and getattr(n.target, "__name__", "") == "lstm" for n in gm.graph.nodes)


@functools.lru_cache(maxsize=None)
def _plain_lstm_decomposition_right():
    """Whether torch's decomposition of lstm without oneDNN gives eager's shapes (torch 2.11's squeezes
    the batch dim of the final hidden states instead of the layer dim)."""
    from torch._decomp.decompositions import lstm_impl
    x, h = torch.zeros(3, 2, 4), (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))
    params = [torch.zeros(20, 4), torch.zeros(20, 5), torch.zeros(20), torch.zeros(20)]
    with _onednn_off(), torch.no_grad():
        got = lstm_impl(x, h, params, True, 1, 0.0, False, False, False)
        want = torch.lstm(x, h, params, True, 1, 0.0, False, False, False)
    return [t.shape for t in got] == [t.shape for t in want]


@contextlib.contextmanager
def _onednn_off():
    """torch.backends.mkldnn.flags(enabled=False) without its TF32 setting (which warns on CPU builds)."""
    before = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(before)


def _tracing_context():
    """A TracingContext for the joint trace where none is active: AOTAutograd puts the metadata of the
    graph it compiles there (for _donate_no_buffers); it makes one itself only for fake inputs."""
    if torch._guards.TracingContext.try_get() is not None:
        return contextlib.nullcontext()
    return torch._guards.tracing(torch._guards.TracingContext(None))


def _donate_no_buffers():
    """Empties AOTAutograd's list of the forward's saved tensors the backward may free early ("donated
    buffers", in the metadata of the graph being compiled): with a list that is not empty, every backward
    with retain_graph=True raises (two losses from one compiled call, after a step without it). Only a
    backend that reuses their memory gains from them, and graphjit's compiler does not."""
    context = torch._guards.TracingContext.try_get()
    donated = getattr(getattr(context, "fw_metadata", None), "bw_donated_idxs", None)
    if donated:
        donated.clear()     # in place: the metadata of a graph with tensor subclasses shares this list


def compile_training(gm, example_inputs, compile_fn, unreached=True):
    """A callable with gm.forward's signature that runs the compiled forward inside an autograd Function
    whose backward runs the compiled backward. compile_fn(graph, example_inputs) compiles one half (its
    inputs are fake tensors; each half is compiled with grad mode off). unreached=False leaves outputs the
    loss does not reach to AOTAutograd's zero gradients (_AbsentGradients: by default their backward does
    not run, as in eager)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from .decompose import decomposition_table
    name = (gm.meta.get("graphjit") or {}).get("name", "graph")
    halves = []

    def compile_half(which, graph, inputs):
        with torch.no_grad():
            compiled = compile_fn(graph, inputs)
        halves.append(Half(which, graph, compiled))
        return _boxed(compiled)
    absent = _AbsentGradients(name, compile_half, unreached)

    def half(which):
        def compiler(graph, inputs):
            logs.log("graph", lambda: f"{name}: {which} graph from AOTAutograd:\n{graph.code}")
            graph.meta["graphjit"] = {"name": f"{name} ({which})", "boxed": True, "autograd": True}
            if which == "backward" and absent.enabled:
                return _BackwardOfPresent(graph, inputs, absent)     # compiled at its first call
            if which == "backward":
                return _CheckingSavedVersions(compile_half(which, graph, inputs), _unchecked_read(graph))
            if which == "forward":
                _donate_no_buffers()
            compiled = compile_half(which, graph, inputs)
            unchecked = _unchecked_outputs(graph) if which == "forward" else []
            absent.has_unchecked = absent.has_unchecked or bool(unchecked)
            return _ForwardRecording(compiled, absent, unchecked) if absent.enabled or unchecked else compiled
        return compiler

    if _writes_through_overlap(gm):
        logs.log("fusion", f"{name}: running the graph as captured: it writes in place through a view whose "
                           f"elements share memory (an expand or as_strided: AOTAutograd's functionalization "
                           f"would add the write once per element sharing it)")
        return gm.forward
    written = _inputs_written_with_grad(gm, example_inputs)
    if written:
        logs.log("fusion", f"{name}: running the graph as captured: it writes in place into input "
                           f"{written[0]} a value that needs gradients (AOTAutograd would save the input for "
                           f"the backward, then its write-back would change it: the backward raises)")
        return gm.forward
    if _writes(gm) and _shared_memory(example_inputs):
        logs.log("fusion", f"{name}: running the graph as captured: it writes in place and two of its inputs "
                           f"share memory (AOTAutograd's write-back of such inputs differs from eager's)")
        return gm.forward
    from .graph_checks import makes_a_leaf_requiring_grad, recurrent_dropout, resizing_write
    reason = recurrent_dropout(gm) or makes_a_leaf_requiring_grad(gm) or resizing_write(gm)
    if reason is None and (gm.meta.get("graphjit") or {}).get("differentiated_again"):
        reason = "the frame differentiates its gradients again (create_graph=True after it): a compiled " \
                 "backward is not differentiable, the captured ops' is"
    if reason is not None:
        logs.log("fusion", f"{name}: running the graph as captured: {reason}")
        return gm.forward
    if _calls_lstm(gm) and not _plain_lstm_decomposition_right():
        logs.log("fusion", f"{name}: running the graph as captured: this torch's ATen decomposition of lstm "
                           f"(which the joint trace takes) returns hidden states of the wrong shape")
        return gm.forward
    from .decompose import fold_constant_attention_masks     # before AOTAutograd picks the kernels
    fold_constant_attention_masks(gm)
    traced, detached = _detach_after(gm)
    traced = _prods_as_eager(traced)

    def trace():
        # oneDNN off while tracing: torch's lstm/gru decompositions then pick their plain ATen form, not
        # mkldnn_rnn_layer, whose undefined workspace AOTAutograd cannot save for the backward
        with logs.quiet_meta_failures(), _onednn_off(), _tracing_context():
            return aot_module_simplified(traced, example_inputs, fw_compiler=half("forward"),
                                         bw_compiler=half("backward"), inference_compiler=half("inference"),
                                         partition_fn=absent.partition, decompositions=decomposition_table(),
                                         keep_inference_input_mutations=True)
    try:
        run = _with_dense_tangents_where_overlapping(trace, name)
    except _OverlappingTangent as e:
        logs.log("fusion", f"{name}: running the graph as captured: AOTAutograd traced a tangent whose elements "
                           f"share memory ({e}): the backward would keep one of the gradients of each")
        return gm.forward
    except ZeroDivisionError as e:
        # torch's decomposition of an op AOTAutograd traces (its fake-tensor meta too) divides by a count of
        # zero elements: native_group_norm_backward by H * W of an empty input (torch.compile raises there)
        logs.log("fusion", f"{name}: running the graph as captured: AOTAutograd's joint trace divided by zero "
                           f"({e}): an op's decomposition over zero elements")
        return gm.forward
    except AssertionError as e:
        if "FakeTensor" not in str(e):
            raise
        # a derivative formula made a tensor outside AOTAutograd's fake mode (sgn's zero gradient, an
        # efficient zero tensor, reaching einsum's permutes): torch.compile raises there
        logs.log("fusion", f"{name}: running the graph as captured: AOTAutograd's joint trace met a real tensor "
                           f"in a derivative formula ({str(e).splitlines()[0][:200]})")
        return gm.forward
    except RuntimeError as e:
        if _NO_DERIVATIVE.search(str(e)) or _no_eager_gradient(gm, example_inputs):
            # eager's own backward raises (an op without a derivative, a formula refusing its operands'
            # dtypes), but only if a backward reaches that op, or no backward can reach it (the graph's
            # results are detached); AOTAutograd's joint trace raises at once
            logs.log("fusion", f"{name}: running the graph as captured: {str(e).splitlines()[0]} (eager's "
                               f"backward raises too, only if a backward reaches it)")
            return gm.forward
        if SAVED_VALUE_WRITTEN not in str(e) and not _writes(gm):
            raise
        # the graph writes in place: to a value its gradient needs (eager raises only if backward runs, and
        # the graph as captured raises then too), or through a view AOTAutograd's functionalization cannot
        # replay (a write through an expanded bool tensor: torch.compile raises there); it runs as captured
        logs.log("fusion", f"{name}: running the graph as captured: AOTAutograd's joint trace failed: "
                           f"{str(e).splitlines()[0]}")
        return gm.forward
    run.graphjit_halves = halves     # the halves compiled so far (the backward at the first backward)
    if absent.has_unchecked:
        run = _WatchedOutputs(run, absent, halves)
    if absent.enabled:
        run = _UndefinedGradsKept(run, absent, halves)
    if detached:
        run = _ChangedOutputs(run, detached, halves, _detached)
    no_grad = _outputs_without_grad(gm)
    if no_grad:
        run = _ChangedOutputs(run, no_grad, halves, _made_without_grad)
    strides = _size_one_strides(gm, example_inputs)
    if strides:
        run = _EagerStrides(run, strides, halves)
    groups = _output_groups(gm)
    if len({g for g in groups if g is not None}) > 1:
        run = _SeparateOutputs(run, groups, halves)
    if _writes(gm):
        return _CheckingAliases(run, gm.forward, halves)
    return run


# autograd's error for an op of the captured graph that has no derivative formula (floor_divide): eager's
# own, raised by a backward that reaches the op (our decompositions run below autograd)
_NO_DERIVATIVE = re.compile(r"derivative for \S+ is not implemented")


def _no_eager_gradient(gm, example_inputs):
    """Whether eager computes no gradient through gm: none of its outputs requires grad (they are
    detached), or eager's own backward from every output that does raises: gm run on fake tensors, then
    torch's derivative formulas with their meta functions, without our decompositions. An op torch has no
    derivative for (floor_divide) raises there, and so does a formula refusing its operands (addcdiv's for
    an integer divisor divides an int64 tensor in place). Eager raises that only where a backward reaches
    the op, AOTAutograd's joint trace at once. False where gm does not run on fakes, and for a graph that
    changes grad mode or autocast (a run failing midway would leave the change set)."""
    from .graph_checks import changes_state
    if changes_state(gm) is not None:
        return False
    ran = _on_fakes(gm, example_inputs)
    if ran is None:
        return False
    mode, inputs, outputs = ran
    outputs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    leaves = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
    if not leaves:
        return False
    if not outputs:
        return True
    try:
        with mode, logs.quiet_meta_failures():
            torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs], allow_unused=True)
    except RuntimeError:
        return True
    return False


def _on_fakes(gm, example_inputs):
    """(the fake mode, the fake inputs, gm's output leaves) of gm run on fakes of example_inputs with grad
    mode on; None where gm does not run on fakes (a data-dependent op)."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    mode = detect_fake_mode(example_inputs) or FakeTensorMode()
    try:
        with mode, torch.enable_grad(), logs.quiet_meta_failures():
            inputs = [mode.from_tensor(v) if isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor) else v
                      for v in example_inputs]
            # gm.forward: GraphModule's __call__ prints a traceback of a failing call to stderr
            return mode, inputs, torch.utils._pytree.tree_leaves(gm.forward(*inputs))
    except Exception:  # noqa: BLE001 - no answer
        return None


def _with_dense_tangents_where_overlapping(trace, name):
    """trace() (AOTAutograd's), traced again with every tangent dense, in its output's memory format, where
    a tangent came in strides under which elements share memory (_check_tangent_layouts): at the backward
    an incoming gradient in other strides is then copied dense, not into that overlapping layout."""
    import torch._functorch.config as functorch_config
    try:
        return trace()
    except _OverlappingTangent as e:
        logs.log("fusion", f"{name}: tangents traced dense, in their outputs' memory format: {e}")
    with functorch_config.patch(guess_tangent_strides_as_outputs=False):
        return trace()


# Row normalizations the lowering takes whole: the partitioner cannot recompute them (they are not on its
# list of recomputable ops), so it saves their output for the backward
_NORMALIZATIONS = {"_log_softmax", "_softmax"}
# What lies between a normalization and a narrower tensor it upcasts: views and dtype conversions
_UPCAST_PATH = {"_to_copy", "convert_element_type", "view", "_unsafe_view", "reshape", "slice", "select",
                "clone", "t", "transpose", "permute", "expand", "alias", "squeeze", "unsqueeze"}


def _partition(joint, joint_inputs, **kwargs):
    """torch's min-cut partition of the joint graph, with each softmax or log_softmax of an upcast tensor
    recomputed in the backward from the narrower tensor. Under autocast a loss takes log_softmax of
    bfloat16 logits made float32 (`logits.float()`): saving its float32 output (or its float32 input)
    keeps twice the logits' bytes alive until the backward (0.8 GB for GPT-2's 8 x 512 x 50257);
    recomputing it, and the upcast before it, from the bfloat16 logits costs one more pass over them. A
    normalization that is an output of the forward is saved (it exists anyway)."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy
    from .decompose import merge_repeated_ops
    _zero_tensors_as_eager(joint.graph, _materialize_constants(joint))
    _distribute_by_mask(joint.graph)
    _convolution_weights_in_input_layout(joint.graph)
    tangent_dependent = _tangent_dependent(joint.graph)
    backward_reads = _read_by_backward(joint.graph, tangent_dependent)
    _save_compared_operands(joint.graph, backward_reads, tangent_dependent)
    _versions_checked_when_read(joint.graph, kwargs.get("num_fwd_outputs"), tangent_dependent)
    _log_softmax_by_row_statistics(joint.graph, backward_reads)
    for node in joint.graph.nodes:
        if node.op == "call_function" and _op_name(node) in _NORMALIZATIONS and "recompute" not in node.meta \
                and node in backward_reads and not any(user.op == "output" for user in node.users):
            path = _upcast_path(node)
            if path is not None:
                for step in (node, *path):
                    step.meta.setdefault("recompute", CheckpointPolicy.PREFER_RECOMPUTE)
    # the partitioner's own CSE pass imports Inductor's pattern matcher, and with it Inductor's lowerings
    # and templates: 0.7 s of a process's first training compile. decompose's does the same work.
    merge_repeated_ops(joint)
    with functorch_config.patch(cse=False):
        forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    _written_inputs_saved_as_copies(forward, kwargs.get("num_fwd_outputs"))
    return forward, backward


def _written_inputs_saved_as_copies(forward, num_fwd_outputs):
    """Each value the forward saves for the backward that is an input the forward writes (a functionalized
    graph's copy_ into it, after every read), or a view of one, is saved as a copy taken before the write:
    saved as it is, the backward would read it after the write. The partitioner saves such an input to
    recompute a forward value from it (`a = x.exp() * w; x.add_(1)`: exp recomputed from the written x, a
    wrong gradient of w; torch.compile's partition does the same) or where the backward reads it."""
    aten = torch.ops.aten
    graph = forward.graph
    written = {_fake_storage(node.args[0]) for node in graph.nodes
               if node.op == "call_function" and node.target is aten.copy_.default
               and getattr(node.args[0], "op", None) == "placeholder"} - {None}
    if not written or num_fwd_outputs is None:
        return
    (out,) = graph.find_nodes(op="output")
    results = list(out.args[0])
    first_computed = next(n for n in graph.nodes if n.op != "placeholder")
    changed = False
    for position in range(num_fwd_outputs, len(results)):
        saved = results[position]
        if not isinstance(saved, torch.fx.Node) or _fake_storage(saved) not in written:
            continue
        # functionalized, the forward computes every value before its first write
        with graph.inserting_before(first_computed) if saved.op == "placeholder" else graph.inserting_after(saved):
            copy = graph.call_function(aten.clone.default, (saved,))
        copy.meta["val"] = aten.clone.default(saved.meta["val"])
        results[position] = copy
        changed = True
    if changed:
        out.args = (tuple(results) if isinstance(out.args[0], tuple) else results, *out.args[1:])
        forward.recompile()


def _convolution_weights_in_input_layout(graph):
    """A 2-d convolution of a channels-last input whose weight is contiguous (a model left in the default
    layout, fed channels-last images) takes a channels-last copy of its weight, made once in the forward
    and saved for the backward. The convolution libraries (oneDNN, cuDNN) compute in the input's layout:
    given the weight as it is, each convolution and each convolution_backward copies it into that layout
    first, two copies of every weight a step (one forward, one backward) where this makes one, in a kernel
    of ours. The values each library reads are the same either way: the copy it would make itself."""
    aten = torch.ops.aten
    from torch.utils.checkpoint import CheckpointPolicy
    copies = {}
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.convolution.default:           # (input, weight, ..., transposed at 6)
            x, w, transposed = node.args[0], node.args[1], node.args[6]
        elif node.target is aten.convolution_backward.default:  # (grad, input, weight, ..., transposed at 7)
            x, w, transposed = node.args[1], node.args[2], node.args[7]
        else:
            continue
        if transposed or not isinstance(x, torch.fx.Node) or not isinstance(w, torch.fx.Node) or \
                not _layout_is(x, torch.channels_last) or not _layout_is(w, torch.contiguous_format):
            continue
        copy = copies.get(w)
        if copy is None:
            with graph.inserting_before(node):
                copy = graph.call_function(aten.clone.default, (w,), {"memory_format": torch.channels_last})
            copy.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
            copy.meta["val"] = aten.clone.default(w.meta["val"], memory_format=torch.channels_last)
            copy.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            copies[w] = copy
        node.replace_input_with(w, copy)      # w is only the weight: x has the other layout


def _layout_is(node, memory_format):
    """Whether node's value is a 4-d tensor of static sizes and strides dense in `memory_format` alone (a
    tensor of some dims of size one can be dense in both: its library call copies nothing)."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() != 4 or value.layout != torch.strided or \
            not all(type(v) is int for v in (*value.shape, *value.stride())):
        return False
    other = torch.contiguous_format if memory_format is torch.channels_last else torch.channels_last
    return value.is_contiguous(memory_format=memory_format) and not value.is_contiguous(memory_format=other)


def _log_softmax_by_row_statistics(graph, backward_reads):
    """Each log_softmax the backward reads, of a float32 or float64 tensor that is no upcast (_partition
    recomputes those whole) and not itself a forward output, written out as its ops: x - max(x) -
    log(sum(exp(x - max(x)))) along its dim. Whole, its output is what the partitioner saves for the
    backward, one value per element of x (a language model's loss: batch x length x vocabulary floats
    written by the forward and read back by the backward), and the forward writes all of it where the
    loss reads one class of each row. Written out, the partitioner saves the row max and the log of the
    row sum, the backward recomputes exp(x - max - log sum) from x (kept anyway where x is the model's
    logits, an output), and the loss reads the output at its class alone, in the kernel that gathers it."""
    aten = torch.ops.aten
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != aten._log_softmax.default or node not in backward_reads \
                or any(user.op == "output" for user in node.users) or _upcast_path(node) is not None:
            continue
        x, dim, half_to_float = node.args
        value = node.meta.get("val")
        if half_to_float or not isinstance(value, torch.Tensor) or value.dtype not in (torch.float32, torch.float64) \
                or x.meta["val"].dtype != value.dtype or value.dim() == 0 or not isinstance(value.shape[dim], int) \
                or value.shape[dim] == 0:
            continue        # (a 0-d tensor's log_softmax, over its dim -1 or 0, has no row to reduce: 0 each)
        with graph.inserting_before(node):
            def op(target, *args):
                made = graph.call_function(target, args)
                made.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
                made.meta["val"] = target(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args])
                return made
            top = op(aten.amax.default, x, [dim], True)
            shifted = op(aten.sub.Tensor, x, top)
            log_sum = op(aten.log.default, op(aten.sum.dim_IntList, op(aten.exp.default, shifted), [dim], True))
            out = op(aten.sub.Tensor, shifted, log_sum)
        node.replace_all_uses_with(out)
        graph.erase_node(node)


# In-place writes into saved values. Eager's node of each op checks the version of what it saved when its
# own backward runs: a user who writes into a graph's output (or input) after the call gets an error only
# from a backward that reads the old value. AOTAutograd's one node checks every saved tensor at any
# backward, so a loss on another output raised (fuzz grad 12700945: abs(median(x)) saved for var's
# backward, written in place after the graph, the loss on other outputs). The saved values the user can
# reach (those sharing memory with a graph input or output) are saved without AOTAutograd's check; the
# forward notes each one's version (_ForwardRecording) and the backward compares the ones it reads
# (_check_saved_versions), per set of missing tangents (_BackwardOfPresent).

# the node meta key AOTAutograd's partitioner reads: a saved value stashed on its node without a version check
UNCHECKED = "saved_tensor_with_no_vc_check"
# the attribute holding a saved tensor's version at the forward (on the tensor AOTAutograd keeps)
SAVED_VERSION = "_graphjit_saved_version"


def _versions_checked_when_read(graph, num_fwd_outputs, tangent_dependent):
    """Marks the forward values of a joint graph that share memory with a graph input or forward output
    as saved without AOTAutograd's version check (UNCHECKED): graphjit checks them when read."""
    from torch.utils._pytree import tree_leaves
    if num_fwd_outputs is None:
        return
    (out,) = [n for n in graph.nodes if n.op == "output"]
    outputs = [n for n in tree_leaves(out.args)[:num_fwd_outputs] if isinstance(n, torch.fx.Node)]
    inputs = [n for n in graph.nodes if n.op == "placeholder" and not _is_tangent(n)]
    visible = {_fake_storage(n) for n in inputs + outputs} - {None}
    for node in graph.nodes:
        if node.op in ("placeholder", "call_function") and node not in tangent_dependent and \
                _fake_storage(node) in visible:
            node.meta[UNCHECKED] = True


def _fake_storage(node):
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and not value._is_zerotensor():
        return value.untyped_storage()._cdata
    return None


def _unchecked_outputs(graph):
    """Positions of a forward graph's outputs that AOTAutograd saves without its version check."""
    (out,) = [n for n in graph.graph.nodes if n.op == "output"]
    descs = out.meta.get("desc")
    marked = [n for n in out.args[0] if isinstance(n, torch.fx.Node) and n.meta.get(UNCHECKED)]
    if descs is None:
        if marked:
            raise RuntimeError("AOTAutograd's forward graph names no output descriptions: cannot tell which "
                               "saved tensors it keeps without a version check")
        return []
    return [k for k, d in enumerate(descs) if type(d).__name__ == "SavedForBackwardsNoVcCheckAOTOutput"]


def _unchecked_read(gm):
    """Positions of a backward graph's placeholders that are saved tensors without AOTAutograd's version
    check and that something the graph returns (or a write it makes) is computed from."""
    from .decompose import is_impure
    live = set()
    for node in reversed(gm.graph.nodes):
        if node.op == "output" or node.op != "placeholder" and is_impure(node) or \
                any(user in live for user in node.users):
            live.add(node)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(placeholders) if n.meta.get(UNCHECKED) and n in live]


# the attribute listing, on a saved tensor, the user outputs in its memory: [(weakref, version at the forward)]
WATCHED_OUTPUTS = "_graphjit_watched_outputs"


def _check_saved_versions(args, positions):
    """Raises autograd's error where a saved tensor at one of `positions` of a backward's arguments was
    written in place since the forward saved it, itself or through a user output in its memory
    (_WatchedOutputs)."""
    for i in positions:
        t = args[i]
        saved = getattr(t, SAVED_VERSION, None)
        if saved is not None and t._version != saved:
            raise RuntimeError(f"{SAVED_VALUE_WRITTEN} operation: [{t.type()} {list(t.shape)}], which is saved by "
                               f"a graph compiled by graphjit, is at version {t._version}; expected version "
                               f"{saved} instead.")
        for ref, version in getattr(t, WATCHED_OUTPUTS, ()):
            output = ref()
            if output is not None and output._version != version:
                raise RuntimeError(f"{SAVED_VALUE_WRITTEN} operation: [{output.type()} {list(output.shape)}], an "
                                   f"output of a graph compiled by graphjit viewing a value its backward saved, "
                                   f"is at version {output._version}; expected version {version} instead.")


class _WatchedOutputs:
    """A compiled training graph whose user outputs may view a value its backward saved without
    AOTAutograd's version check (softmax's output returned as `.view(-1, 3)`): AOTAutograd returns such an
    output as a tensor of its own over that memory, with a version counter of its own, so a write into it
    went unseen by the backward, which then read the written values (eager raises "modified by an inplace
    operation"). Each such output is noted on the saved tensor (a weak reference and its version), and the
    backward's check (_check_saved_versions) compares it too."""

    def __init__(self, compiled, absent, halves):
        self.compiled, self.absent, self.graphjit_halves = compiled, absent, halves

    def __call__(self, *args):
        self.absent.unchecked_saved = None
        out = self.compiled(*args)
        saved, self.absent.unchecked_saved = self.absent.unchecked_saved, None
        if not saved:
            return out
        by_memory = {}
        for t in saved:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.data_ptr() != 0:
                by_memory.setdefault(t.untyped_storage().data_ptr(), []).append(t)
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.data_ptr() == 0 or \
                    any(t is a for a in args):
                continue
            for s in by_memory.get(t.untyped_storage().data_ptr(), ()):
                if s is not t:
                    watched = getattr(s, WATCHED_OUTPUTS, None)
                    if watched is None:
                        watched = []
                        setattr(s, WATCHED_OUTPUTS, watched)
                    watched.append((weakref.ref(t), t._version))
        return out


# Comparisons whose result flips on a difference in the last bit of an operand
_EXACT_COMPARISONS = {"eq", "ne"}


def _save_compared_operands(graph, backward_reads, tangent_dependent):
    """The forward values the backward compares for equality are saved, never recomputed. min/max's
    gradient goes to the elements equal to the result (`x == amin(x)`, divided by their count): x
    recomputed in the backward by a kernel of another loop shape can differ from the forward's in the last
    bit (a vectorized libm lane against a scalar tail), and then no element equals the saved result and the
    count is 0 (a NaN gradient where eager has none)."""
    from torch.utils.checkpoint import CheckpointPolicy
    for node in graph.nodes:
        if node.op == "call_function" and _op_name(node) in _EXACT_COMPARISONS and node in backward_reads:
            for operand in node.all_input_nodes:
                if operand.op == "call_function" and operand not in tangent_dependent and \
                        operand.meta.get("recompute") is None:
                    operand.meta["recompute"] = CheckpointPolicy.MUST_SAVE


def _unaliased(node):
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and _op_name(node) == "alias":
        node = node.args[0]
    return node


def _equal_or_both_nan(node):
    """Whether node is `(x == v) | (isnan(x) & isnan(v))`: the elements a full min, max or median hands its
    gradient to (autograd's evenly_distribute_backward)."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and _op_name(node) == "logical_or"):
        return False
    eq, both_nan = node.args[:2]
    if not all(isinstance(n, torch.fx.Node) and n.op == "call_function" for n in (eq, both_nan)) or \
            _op_name(eq) != "eq" or _op_name(both_nan) != "logical_and":
        return False
    nans = both_nan.args[:2]
    if not all(isinstance(n, torch.fx.Node) and n.op == "call_function" and _op_name(n) == "isnan" for n in nans):
        return False
    return {_unaliased(a) for a in eq.args[:2]} == {_unaliased(n.args[0]) for n in nans}


def _distribute_by_mask(graph):
    """min(), max() and median() of a whole CPU tensor pass their gradient to the elements equal to the
    result, divided by their count. autograd's formula, traced, multiplies the gradient by the mask, so a
    NaN or infinite gradient (x ** x.min() with a negative x: log(x) is NaN) reaches every element (0 * NaN);
    eager's CPU kernel fills the masked elements into zeros, so the others stay 0. The product of such a
    mask and a quotient by its count is made `where(mask, quotient, 0)`. On CUDA eager multiplies too, so
    CUDA graphs keep the product."""
    for node in list(graph.nodes):
        if node.op != "call_function" or _op_name(node) != "mul" or len(node.args) != 2 or node.kwargs:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            continue
        for mask, share in (node.args, node.args[::-1]):
            if _equal_or_both_nan(mask) and isinstance(share, torch.fx.Node) and share.op == "call_function" \
                    and _op_name(share) == "div" and isinstance(share.args[1], torch.fx.Node) \
                    and _op_name(share.args[1]) == "sum" and share.args[1].args[0] is mask:
                break
        else:
            continue
        with graph.inserting_before(node):
            zero = graph.call_function(torch.ops.aten.scalar_tensor.default, (0.0,),
                                       {"dtype": value.dtype, "device": value.device})
            zero.meta["val"] = value.new_zeros(())
            chosen = graph.call_function(torch.ops.aten.where.self, (mask, share, zero))
            chosen.meta.update(node.meta)
        node.replace_all_uses_with(chosen)
        graph.erase_node(node)


def _materialize_constants(joint):
    """Tensor constants of the joint graph that are efficient zero tensors (no storage) made plain zeros: a
    gradient that depends on no input is traced into a constant, and sgn's is such a zero tensor, on which
    AOTAutograd's deepcopy of the backward module raised at the first backward ("copy_() on an invalid
    python storage"; torch.compile raises there too). Returns their get_attr nodes."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    made = []
    for node in joint.graph.nodes:
        if node.op != "get_attr":
            continue
        value = getattr(joint, node.target, None)
        if not isinstance(value, torch.Tensor) or not value._is_zerotensor():
            continue
        with unset_fake_temporarily():          # the partition runs in AOTAutograd's fake mode
            plain = torch.zeros(value.shape, dtype=value.dtype, device=value.device)
        if node.target in dict(joint.named_buffers()):
            joint.register_buffer(node.target, plain)
        else:
            setattr(joint, node.target, plain)
        made.append(node)
    return made


def _zero_tensors_as_eager(graph, constants=()):
    """The efficient zero tensors of a joint graph (sgn's gradient: `_efficientzerotensor` nodes, and the
    `constants` that were such tensors) computed as eager's ZeroTensor kernels compute them: a product with
    one, a quotient of one by a tensor, a view of one, a sum of two are such a zero tensor (no 0 * inf =
    NaN: `sgn(x.var(correction=1))` over one element has the gradient 0 in eager, var's formula multiplies
    it by 2 / 0); a sum of one and a tensor is that tensor; every other op reads one as plain zeros. Each
    such zero of static sizes becomes a plain `zeros` node (an efficient zero tensor a graph left to eager
    makes segfaulted a dispatch mode of AOTAutograd's runtime)."""
    from .decompose import aliases_its_argument
    aten = torch.ops.aten
    zero = set(constants) | {n for n in graph.nodes if n.target is aten._efficientzerotensor.default}
    if not zero:
        return
    passed = set()
    for node in list(graph.nodes):
        if node.op != "call_function" or node in zero or not node.args:
            continue
        a, b = (isinstance(v, torch.fx.Node) and v in zero for v in (*node.args[:2], None)[:2])
        if node.target in (aten.mul.Tensor, aten.mul.Scalar) and (a or b) or \
                node.target in (aten.div.Tensor, aten.div.Scalar) and a and not b or \
                node.target in (aten.add.Tensor, aten.sub.Tensor) and a and b or \
                aliases_its_argument(node.target) and a:
            zero.add(node)
        elif (other := _gradient_passed(node, zero)) is not None:
            node.replace_all_uses_with(other)
            passed.add(node)
    for node in [n for n in graph.nodes if n in zero]:
        if node.users and _static(node.meta.get("val")):
            with graph.inserting_before(node):
                node.replace_all_uses_with(_zeros_node(graph, node))
    for node in reversed([n for n in graph.nodes if n in zero or n in passed]):
        if not node.users:
            graph.erase_node(node)


def _is_tangent(node):
    """Whether a node of a joint or backward graph is a tangent: the gradient coming into the backward for
    one forward output (AOTAutograd names these placeholders tangents_<k>)."""
    return node.op == "placeholder" and node.name.startswith("tangents")


def _tangent_dependent(graph):
    """The nodes of a joint graph computed from a tangent (the gradient coming into the backward)."""
    tangents = set()
    for node in graph.nodes:
        if _is_tangent(node) or any(arg in tangents for arg in node.all_input_nodes):
            tangents.add(node)
    return tangents


def _read_by_backward(graph, tangents):
    """The nodes of a joint graph that the backward reads, directly or through what it computes from them:
    those with a descendant in `tangents` (`_tangent_dependent(graph)`)."""
    read = set()
    for node in reversed(graph.nodes):
        if node.op != "output" and (node in tangents or any(user in read for user in node.users)):
            read.add(node)
    return read


def _op_name(node):
    target = node.target
    packet = getattr(target, "_overloadpacket", None)
    return getattr(packet, "__name__", None) or getattr(target, "__name__", "")


def _upcast_path(node):
    """The views and dtype conversions between node's input and the nearest tensor of narrower elements
    than node's output, that no forward output reads (the partitioner recomputes them in the backward);
    None where node's input is no such upcast. The narrower tensor itself may be a forward output (the
    bfloat16 logits a model returns beside its loss): it is kept anyway."""
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return None
    path, value = [], node.args[0]
    while isinstance(value, torch.fx.Node):
        source = value.meta.get("val")
        if isinstance(source, torch.Tensor) and source.element_size() < out.element_size():
            return path
        if value.op != "call_function" or _op_name(value) not in _UPCAST_PATH or \
                any(user.op == "output" for user in value.users):
            return None
        path.append(value)
        value = value.args[0]
    return None


def _writes(gm):
    """Whether a call of the captured graph writes into one of its arguments (written_args)."""
    return any(_in_place(node) for node in gm.graph.nodes)


def _in_place(node):
    """Whether a call of the captured graph writes into one of its arguments (written_args)."""
    return bool(written_args(node))


def written_args(node):
    """The argument nodes a call of the captured graph writes into: the first of an in-place method or
    function (a name ending in `_`, requires_grad_ aside; `__iadd__` ...), of an augmented assignment's
    operator (`x += y` is operator.iadd) or an item assignment; the first of a call given `inplace=True`
    (F.relu(x, True), nn.ReLU(inplace=True)); the one given as `out=`; the running statistics of a
    batch_norm in training mode or an instance_norm using its input's statistics."""
    import operator
    if node.op not in ("call_method", "call_function"):
        return []
    name = _call_name(node)
    first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    written = []
    if node.op == "call_method":
        if (name.endswith("_") and not name.startswith("_") and name != "requires_grad_") or name in _IN_PLACE_DUNDERS:
            written.append(first)
    elif node.target in AUGMENTED_ASSIGNMENTS:     # on a tensor, not a size
        if first is not None and isinstance(first.meta.get("example_value"), torch.Tensor):
            written.append(first)
    elif node.target is operator.setitem or (name.endswith("_") and not name.startswith("_")) or \
            name in _IN_PLACE_DUNDERS:
        written.append(first)
    out = node.kwargs.get("out")
    written += [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.fx.Node)]
    bound = _bound_arguments(node) if node.op == "call_function" else None
    if bound is not None:
        if bound.get("inplace") is True:
            written.append(first)
        flag = {"batch_norm": "training", "native_batch_norm": "training", "instance_norm": "use_input_stats"}.get(name)
        if flag is not None and bound.get(flag, flag == "use_input_stats") is True:
            written += [bound.get("running_mean"), bound.get("running_var")]
    return list(dict.fromkeys(n for n in written if isinstance(n, torch.fx.Node)))


# norms whose written arguments are their running statistics: what they write there needs no gradient
_STATISTICS = {"batch_norm", "native_batch_norm", "instance_norm"}
_IN_PLACE_DUNDERS = {f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                              "and", "or", "xor", "lshift", "rshift")}

# torch's C functions with statistics they update, by argument position (no Python signature to bind)
_C_SIGNATURES = {
    "batch_norm": ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"),
    "native_batch_norm": ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"),
    "instance_norm": ("input", "weight", "bias", "running_mean", "running_var", "use_input_stats", "momentum", "eps"),
}


def _bound_arguments(node):
    """{parameter: argument} of a call_function node, where its target has a Python signature (or is one of
    _C_SIGNATURES) and takes an `inplace` flag or running statistics; else None."""
    import inspect
    target = node.target
    if not callable(target):
        return None
    code = getattr(target, "__code__", None)
    if code is not None:
        if not {"inplace", "running_mean"} & set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]):
            return None
        try:
            return dict(inspect.signature(target).bind(*node.args, **node.kwargs).arguments)
        except (TypeError, ValueError):
            return None
    names = _C_SIGNATURES.get(getattr(target, "__name__", ""))
    if names is None or getattr(target, "__module__", None) not in ("torch", "torch._C._VariableFunctions", None):
        return None
    bound = dict(zip(names, node.args))
    bound.update(node.kwargs)
    return bound


# Calls whose result views their first argument: a write into the result writes into the argument
_VIEWS = {"view", "view_as", "reshape", "reshape_as", "transpose", "swapaxes", "t", "permute", "movedim",
          "narrow", "select", "expand", "expand_as", "broadcast_to", "squeeze", "unsqueeze", "flatten", "unflatten",
          "as_strided", "diagonal", "unfold", "split", "chunk", "unbind", "detach", "getitem", "__getitem__"}


# Views whose elements may share memory: a write through one writes some elements more than once
_OVERLAPPING = {"expand", "expand_as", "broadcast_to", "unfold"}


def _call_name(node):
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", "")


def _written_views(gm):
    """(the in-place call, its target, the chain of view calls from it up to where it starts) for each
    argument a call of the captured graph writes into (written_args)."""
    for node in gm.graph.nodes:
        for source in written_args(node):
            chain = []
            while source.op in ("call_method", "call_function") and _call_name(source) in _VIEWS and \
                    source.args and isinstance(source.args[0], torch.fx.Node):
                chain.append(source)
                source = source.args[0]
            yield node, source, chain


def _inputs_written(gm):
    """Positions of the graph inputs that an in-place call or an item assignment writes into, directly or
    through a chain of views."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return sorted({placeholders.index(source) for _, source, _ in _written_views(gm) if source.op == "placeholder"})


def _inputs_written_with_grad(gm, example_inputs):
    """Positions of the graph inputs written in place where the input or the value written into it requires
    grad (w.mul_(x) with x requiring grad and w not)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return sorted({placeholders.index(source) for node, source, _ in _written_views(gm)
                   if source.op == "placeholder" and
                   (getattr(example_inputs[placeholders.index(source)], "requires_grad", False) or
                    (_call_name(node) not in _STATISTICS and
                     getattr(node.meta.get("example_value"), "requires_grad", False)))})


def _writes_through_overlap(gm):
    """Whether an in-place call writes through a view whose elements may share memory (_OVERLAPPING, or an
    as_strided whose elements do: functionalization writes the whole as_strided view back, and eager's
    as_strided_scatter refuses one whose elements share memory)."""
    from .decompose import overlaps_itself
    for _, _, chain in _written_views(gm):
        for view in chain:
            value = view.meta.get("example_value")
            if _call_name(view) in _OVERLAPPING or _call_name(view) == "as_strided" and \
                    isinstance(value, torch.Tensor) and overlaps_itself(value):
                return True
    return False


def _shared_memory(values):
    """Whether two tensors among values share a storage (by address; fake ones, a symbolic training graph's
    example inputs, by their storage object, as capture made them alias)."""
    from torch._subclasses.fake_tensor import FakeTensor
    seen = set()
    for v in values:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            key = storage._cdata if isinstance(v, FakeTensor) else storage.data_ptr()
            if key in seen:
                return True
            seen.add(key)
    return False


def output_leaves(gm):
    """The output values of a captured graph (its flat output tuple, or the one value it returns)."""
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    value = out.args[0]
    return list(value) if isinstance(value, (tuple, list)) else [value]


def traced_storage(node):
    """Which storage a node of a captured graph put its value in (an id; None for a non-tensor, a constant
    or where unknown): its example value's, or, in a per-size copy of a symbolic graph, what that copy
    kept of it (backends/dynamic._static_copy)."""
    if not isinstance(node, torch.fx.Node):
        return None
    value = node.meta.get("example_value")
    if isinstance(value, torch.Tensor):
        return value.untyped_storage()._cdata
    return node.meta.get("traced_storage")


def _output_groups(gm):
    """Per output of the captured graph (a flat tuple): which of its outputs' traced storages it is in (a
    number; None for a non-tensor), so outputs in one group share memory in eager and others do not."""
    ids, groups = {}, []
    for leaf in output_leaves(gm):
        storage = traced_storage(leaf)
        groups.append(None if storage is None else ids.setdefault(storage, len(ids)))
    return groups


def _is_detach(node):
    if node.op == "call_method":
        return node.target == "detach"
    return node.op == "call_function" and (node.target in (torch.detach, torch.Tensor.detach) or (
        node.target is getattr and len(node.args) == 2 and node.args[1] == "data"))


def _detach_after(gm):
    """(the graph AOTAutograd traces, the positions of the outputs to detach after it). An output that is
    a detached view of a view (`h.narrow(0, 1, 2).detach()`) beside another view of the same tensor
    comes back from AOTAutograd's replay of output views wrong (the views applied twice: a wrong size, a
    failed check, or a read out of bounds on every torch we support); such an output is traced as the
    view without the detach, and detached after the call."""
    graph = None
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    leaves = out.args[0] if isinstance(out.args[0], (tuple, list)) else None
    positions = []
    for k, leaf in enumerate(leaves or ()):
        chain, node = [], leaf
        while isinstance(node, torch.fx.Node) and (_is_detach(node) or (
                node.op in ("call_method", "call_function") and _call_name(node) in _VIEWS)) and \
                node.args and isinstance(node.args[0], torch.fx.Node):
            chain.append(node)
            node = node.args[0]
        if not any(_is_detach(n) for n in chain) or all(_is_detach(n) for n in chain):
            continue
        if graph is None:
            graph = torch.fx.Graph()
            env = {}
            graph.graph_copy(gm.graph, env)     # everything but the output node
            copied_leaves = [env[l] if isinstance(l, torch.fx.Node) else l for l in leaves]
        value = env[node]
        for step in reversed(chain):
            if not _is_detach(step):
                value = graph.create_node(step.op, step.target, (value, *[torch.fx.node.map_arg(a, env.__getitem__)
                                                                          for a in step.args[1:]]),
                                          torch.fx.node.map_arg(step.kwargs, env.__getitem__))
                value.meta = dict(step.meta)
        copied_leaves[k] = value
        positions.append(k)
    if graph is None:
        return gm, []
    graph.output(type(leaves)(copied_leaves))
    traced = torch.fx.GraphModule(gm, graph)
    traced.meta.update(gm.meta)
    return traced, positions


def _prods_as_eager(gm):
    """gm, with each prod a _ProdAsEager (a new module where there is one). torch's
    formula for prod's gradient, traced, is the one that is safe for zeros (the product of the other
    elements); eager's divides the product by each element where the input has no zero, so an infinite
    element gets NaN there, not the product of the others."""
    prods = [n for n in gm.graph.nodes if (n.op, n.target) == ("call_method", "prod") or
             n.op == "call_function" and n.target in (torch.prod, torch.Tensor.prod)]
    found = {n: arguments for n in prods if (arguments := _prod_arguments(n)) is not None}
    if not found:
        return gm
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:       # in order: a prod of a prod reads the replacement of the first
        if node in found:
            x, dim, keepdim = found[node]
            env[node] = graph.call_function(prod_as_eager, (env[x], dim, keepdim))
            env[node].meta = dict(node.meta)
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    traced = torch.fx.GraphModule(gm, graph)
    traced.meta.update(gm.meta)
    return traced


def _prod_arguments(node):
    """(input, dim, keepdim) of a captured prod without a dtype argument; else None."""
    args, kwargs = list(node.args), dict(node.kwargs)
    if "input" in kwargs:
        args.insert(0, kwargs.pop("input"))
    if not args or not isinstance(args[0], torch.fx.Node) or kwargs.get("dtype") is not None:
        return None
    dim = args[1] if len(args) > 1 else kwargs.pop("dim", None)
    keepdim = args[2] if len(args) > 2 else kwargs.pop("keepdim", False)
    kwargs.pop("dtype", None)
    if kwargs or len(args) > 3 or not (dim is None or isinstance(dim, int)) or not isinstance(keepdim, bool):
        return None
    return args[0], dim, keepdim


def prod_as_eager(x, dim, keepdim):
    """_ProdAsEager.apply, as a function of this module: fx names a graph's call targets by their module
    (torch 2.14 finds none for a Function's apply)."""
    return _ProdAsEager.apply(x, dim, keepdim)


class _ProdAsEager(torch.autograd.Function):
    """x.prod() or x.prod(dim, keepdim), its gradient as eager's kernel computes it: where no element of x
    is zero, the incoming gradient times the product divided by each element; otherwise torch's formula
    that is safe for zeros (which is what a trace of prod's gradient always gives)."""

    @staticmethod
    def forward(ctx, x, dim, keepdim):
        result = x.prod() if dim is None else x.prod(dim, keepdim)
        ctx.save_for_backward(x, result)
        ctx.dim, ctx.keepdim = dim, keepdim
        return result

    @staticmethod
    def backward(ctx, grad):
        x, result = ctx.saved_tensors
        dim, keepdim = ctx.dim, ctx.keepdim
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            safe, = torch.autograd.grad(leaf.prod() if dim is None else leaf.prod(dim, keepdim), leaf, grad)
        if x.dim() == 0:
            return safe, None, None
        if dim is not None and not keepdim:
            grad, result = grad.unsqueeze(dim), result.unsqueeze(dim)
        return torch.where((x == 0).any(), safe, grad * (result / x).conj()), None, None


class _ChangedOutputs:
    """A compiled training graph whose tensor outputs at `positions` are replaced after the call by
    change(output)."""

    def __init__(self, compiled, positions, halves, change):
        self.compiled, self.positions, self.graphjit_halves, self.change = compiled, positions, halves, change

    def __call__(self, *args):
        out = self.compiled(*args)
        values = list(out)
        for k in self.positions:
            if isinstance(values[k], torch.Tensor):
                values[k] = self.change(values[k])
        return type(out)(values)


def _detached(t):
    """An output _detach_after traced without its detach."""
    return t.detach()


def _outputs_without_grad(gm):
    """Positions of the captured graph's outputs made with grad mode off (between the graph's
    `_set_grad_enabled(False)` and `(True)`: an inner no_grad; a training graph starts with it on)."""
    enabled, made_without = True, set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            enabled = bool(node.args[0])
        elif not enabled:
            made_without.add(node)
    return [k for k, leaf in enumerate(output_leaves(gm)) if isinstance(leaf, torch.fx.Node) and leaf in made_without]


def _made_without_grad(t):
    """An output made under an inner no_grad, as eager's is. AOTAutograd replays an output that views an
    input (`with torch.no_grad(): y = x[1:]`) from the input at run time with grad mode on, so it came back
    with x's gradient (y.sum().backward() gave x one, eager's none): it is made again as a view of the same
    memory under no_grad, eager's view."""
    if not t.requires_grad:
        return t
    with torch.no_grad():
        return t.detach() if t._base is None else t._base.as_strided(t.size(), t.stride(), t.storage_offset())


def _size_one_strides(gm, example_inputs):
    """{output position: its eager strides} for the tensor outputs of a captured graph that view another
    value and have a dim of size 1: from the traced example values, or, where the graph holds none with
    static strides (a per-size copy of a symbolic graph), from a run on fakes of the example inputs."""
    leaves = output_leaves(gm)
    views = [k for k, leaf in enumerate(leaves) if isinstance(leaf, torch.fx.Node) and
             (leaf.op == "call_method" or leaf.op == "call_function") and _call_name(leaf) in _VIEWS]
    if not views:
        return {}
    values = [leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None for leaf in leaves]
    if not all(_static(values[k]) for k in views):
        ran = _on_fakes(gm, example_inputs)
        if ran is None or len(ran[2]) != len(leaves):
            return {}
        values = ran[2]
    for k in views:
        value = values[k]
        if isinstance(value, torch.Tensor) and not _static(value) and value._is_view() and 1 in value.shape:
            # sizes symbolic (the graph's own fake inputs): the stride of the size-1 dim would be needed
            # per call (asking whether a dim is 1 guards the answer: the entry holds only where it holds)
            raise SymbolicRefused(f"output {k} views another value and has a dim of size 1")
    return {k: values[k].stride() for k in views if _static(values[k]) and values[k]._is_view() and
            values[k].layout == torch.strided and 1 in values[k].shape}


class SymbolicRefused(Exception):
    """A training graph the symbolic path does not take (registry._symbolic_training compiles it per size)."""


class _EagerStrides:
    """A compiled training graph whose outputs at the positions of `strides` get eager's strides back where
    they differ only in dims of size 1. AOTAutograd returns an output that views an intermediate nothing
    else views as `_unsafe_view(o, o.shape)`, which recomputes a size-1 dim's stride: a one-window
    unfold's windows dim has eager's step * stride (`x.unfold(-1, 2, 7)` of a [3, 4] x: (4, 7, 1)), the
    view's the next dim's extent ((4, 2, 1)). The output is re-strided with as_strided (its elements and
    gradient are the same)."""

    def __init__(self, compiled, strides, halves):
        self.compiled, self.strides, self.graphjit_halves = compiled, strides, halves

    def __call__(self, *args):
        out = self.compiled(*args)
        if not isinstance(out, (tuple, list)):
            return out
        values = None
        for k, stride in self.strides.items():
            t = out[k] if k < len(out) else None
            if isinstance(t, torch.Tensor) and t.stride() != stride and t.dim() == len(stride) and \
                    all(a == b or n == 1 for a, b, n in zip(t.stride(), stride, t.shape)):
                values = values or list(out)
                values[k] = t.as_strided(t.shape, stride, t.storage_offset())
        return out if values is None else type(out)(values)


class _SeparateOutputs:
    """A compiled training graph whose outputs are in more than one traced storage: AOTAutograd's
    common-subexpression elimination merges identical computations (`x.msort()` and `x.sort(0).values`), so
    outputs that eager returns in memory of their own can come back sharing one tensor, and a write into one
    would show in the other (fuzz grad 10100668). Where outputs of several traced storages share memory, each
    group but the largest that is one output is returned as a copy (a group of several views of one
    another is left as it comes, and so are outputs in the memory of an input)."""

    def __init__(self, compiled, groups, halves):
        self.compiled, self.groups, self.graphjit_halves = compiled, groups, halves

    def __call__(self, *args):
        out = self.compiled(*args)
        if not isinstance(out, (tuple, list)) or len(out) != len(self.groups):
            return out
        shared = {}         # memory -> traced group -> output positions
        # outputs in an input's memory are views of it, as in eager (inputs of separate traced storages may
        # share memory at run time: two views of one buffer), never copied
        inputs = {a.untyped_storage().data_ptr() for a in args
                  if isinstance(a, torch.Tensor) and a.data_ptr() != 0}
        for k, (t, group) in enumerate(zip(out, self.groups)):
            if group is not None and isinstance(t, torch.Tensor) and t.data_ptr() != 0 and \
                    t.untyped_storage().data_ptr() not in inputs:
                shared.setdefault(t.untyped_storage().data_ptr(), {}).setdefault(group, []).append(k)
        changed = None
        for by_group in shared.values():
            if len(by_group) < 2:
                continue
            keeper = max(by_group, key=lambda g: len(by_group[g]))
            for group, positions in by_group.items():
                if group != keeper and len(positions) == 1:
                    changed = changed or list(out)
                    changed[positions[0]] = out[positions[0]].clone()
        return out if changed is None else type(out)(changed)


class _CheckingAliases:
    """A compiled training graph that writes in place, compiled for inputs in separate memory: a call whose
    inputs share memory runs the graph as captured instead (AOTAutograd's write-back of inputs that share
    memory differs from eager's)."""

    def __init__(self, compiled, captured, halves):
        self.compiled, self.captured, self.graphjit_halves = compiled, captured, halves

    def __call__(self, *args):
        if _shared_memory(args):
            return self.captured(*args)
        return self.compiled(*args)


# Gradients of outputs the loss does not reach. Autograd gives such an output no gradient (None), and eager
# then runs none of the backward from it: an input that reaches the loss only through such outputs keeps
# .grad None (an optimizer skips it), and a partial derivative that is inf or NaN there (exp(1000)) never
# meets a zero. AOTAutograd's autograd node fills the missing gradient with zeros by default, so its
# backward computed 0 * inf = NaN into the gradients of the inputs and zeros for the unreached ones.
# Here the node passes None through, and the backward is compiled once per set of missing gradients with
# them as symbolic zeros (_without_tangents).

class _AbsentGradients:
    """One training graph's handling of missing output gradients: enabled where each tangent (an output's
    incoming gradient) has static sizes, so that a zero tensor can stand in for one where the specialized
    backward must still read it."""

    # the specialized backwards one graph keeps; past that, a missing gradient is filled with zeros
    LIMIT = 8

    def __init__(self, name, compile_half, allowed=True):
        # compile_half(which, graph, inputs): the boxed compiled half, noted among the graph's halves
        self.name, self.compile_half, self.allowed = name, compile_half, allowed
        self.enabled, self.produced = False, None
        self.unchecked_saved = None     # this call's saved tensors without AOTAutograd's check (_WatchedOutputs)
        self.has_unchecked = False      # whether the forward saves any
        self.zero_reach = frozenset()

    def partition(self, joint, joint_inputs, **kwargs):
        tangents = [n for n in joint.graph.nodes if _is_tangent(n)]
        _check_tangent_layouts(tangents)
        self.enabled = self.allowed and bool(tangents) and \
            all(isinstance(n.meta.get("val"), torch.Tensor) for n in tangents)
        if self.enabled:
            self.zero_reach = _zero_reach(joint.graph)
        halves = _partition(joint, joint_inputs, **kwargs)
        if self.enabled and not all(_static(n.meta.get("val")) for n in tangents):
            _check_sizes_recoverable(halves[1])
        return halves


class _SizesNotRecoverable(Exception):
    """A tangent of symbolic sizes whose symbols the backward's other arguments do not carry: a zero
    tensor could not stand in for it (the graph then compiles per size)."""


def _check_sizes_recoverable(backward):
    """Raises _SizesNotRecoverable unless each symbol of each tangent's sizes and strides is a SymInt
    argument of the backward, or a dim or stride of one of its tensor arguments that is not a tangent
    (_BackwardOfPresent._filled reads them off a call's arguments: _symbol_values)."""
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    known = set()
    for node in placeholders:
        if not _is_tangent(node):
            known |= {e for _, e in _symbol_slots(node.meta.get("val"))}
    for node in placeholders:
        val = node.meta.get("val")
        if _is_tangent(node) and not _static(val):
            free = set().union(*(_expr(d).free_symbols for d in (*val.shape, *val.stride())))
            if not free <= known:
                raise _SizesNotRecoverable(f"{node.name}'s sizes {tuple(val.shape)} use {free - known}")


def _expr(size):
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def _symbol_slots(val):
    """(where, symbol) for each dim, stride or value of a traced argument that is a plain symbol: where is
    None for a SymInt argument, else ("shape" or "stride", dim)."""
    if isinstance(val, torch.SymInt) and val.node.expr.is_Symbol:
        return [(None, val.node.expr)]
    if not isinstance(val, torch.Tensor):
        return []
    return [((kind, d), s.node.expr) for kind, sizes in (("shape", val.shape), ("stride", val.stride()))
            for d, s in enumerate(sizes) if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol]


def _symbol_values(placeholders, args):
    """{symbol: its value in one call}, read off the call's arguments where a placeholder's traced value has
    the symbol as a dim, a stride or itself (_check_sizes_recoverable made sure each tangent's are there)."""
    values = {}
    for node, arg in zip(placeholders, args):
        for where, symbol in _symbol_slots(node.meta.get("val")):
            if where is None and isinstance(arg, int):
                values[symbol] = arg
            elif where is not None and isinstance(arg, torch.Tensor):
                values[symbol] = (arg.shape if where[0] == "shape" else arg.stride())[where[1]]
    return values


def _runtime_sizes(val, values):
    """val's sizes and strides for one call: static ones as they are, symbolic ones evaluated with the
    call's symbol values (_symbol_values)."""
    def evaluate(size):
        return int(_expr(size).xreplace(values))
    return tuple(map(evaluate, val.shape)), tuple(map(evaluate, val.stride()))


class _OverlappingTangent(Exception):
    """AOTAutograd traced a tangent in the strides of an output whose elements share memory."""


def _check_tangent_layouts(tangents):
    """Raises _OverlappingTangent for a tangent traced with strides under which elements share memory.
    AOTAutograd traces each tangent with its output's strides (torch >= 2.13,
    guess_tangent_strides_as_outputs) unless it finds the output's elements overlapping, which it tells for
    a stride-0 dim only; an unfold's windows (`x.unfold(0, 2, 1)`: strides (1, 1)) pass, and at the
    backward the incoming gradient is copied into a tensor of those strides, which keeps one of the values
    each shared element receives (a wrong gradient)."""
    from .decompose import overlaps_itself
    for node in tangents:
        value = node.meta.get("val")
        if _static(value) and value.layout == torch.strided and overlaps_itself(value):
            raise _OverlappingTangent(f"{node.name} has sizes {tuple(value.shape)} and strides "
                                      f"{tuple(value.stride())}, whose elements share memory")


# ops whose derivative is zero: eager's backward of one hands on a zero tensor, not nothing
_ZERO_DERIVATIVE = {"sign", "sgn", "floor", "ceil", "round", "trunc"}


def _zero_reach(graph):
    """The `seq_nr`s (autograd's number of a forward op, which its backward formula's nodes carry) of
    the forward ops a zero gradient from an output of zero derivative reaches: that op and every op it
    reads from, through the forward part of the joint graph."""
    dependent = _tangent_dependent(graph)
    reach, stack = set(), [n for n in graph.nodes if n.op == "call_function" and n not in dependent
                           and _op_name(n) in _ZERO_DERIVATIVE]
    seen = set(stack)
    while stack:
        node = stack.pop()
        if node.meta.get("seq_nr") is not None:
            reach.add(node.meta["seq_nr"])
        for a in node.all_input_nodes:
            if a not in seen and a not in dependent:
                seen.add(a)
                stack.append(a)
    return frozenset(reach)


def _static(value):
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in (*value.shape, *value.stride()))


class _ForwardRecording:
    """The compiled forward half (boxed), noting the tensors it returns (_UndefinedGradsKept finds this
    call's autograd node as the grad_fn of a user output that is one of them), and returning each one
    AOTAutograd saves without its version check (at positions `unchecked`) as a tensor of its own holding
    its version now (SAVED_VERSION; a detach shares the version counter)."""
    _boxed_call = True

    def __init__(self, compiled, absent, unchecked=()):
        self.compiled, self.absent, self.unchecked = compiled, absent, unchecked

    def __call__(self, args):
        out = self.compiled(args)
        if self.unchecked:
            out = list(out)
            for k in self.unchecked:
                out[k] = out[k].detach()
                setattr(out[k], SAVED_VERSION, out[k]._version)
            self.absent.unchecked_saved = [out[k] for k in self.unchecked]
        if self.absent.enabled:
            self.absent.produced = out
        return out


DOUBLE_BACKWARD = ("graphjit: a backward with create_graph=True through a graph graphjit compiled for training "
                   "(a gradient to be differentiated again: a double backward) is not supported: its compiled "
                   "backward is not differentiable. Compile that code with backend='eager' (capture only), or "
                   "leave it uncompiled.")


def _refuse_double_backward():
    """Raises where the backward runs to be differentiated again (create_graph=True). AOTAutograd then runs
    it with grad mode on where no saved tensor requires grad (torch 2.11: its gradients come out
    constants), or inside the forward of an autograd Function of its own (`_double_backward`, with grad
    mode off) whose backward raises only where some saved tensor requires grad; saved tensors are made in
    the forward under no_grad, so either way a second derivative would silently miss this graph's terms.
    The Function's frame on the stack is the one sign of the second case."""
    if torch.is_grad_enabled():
        raise RuntimeError(DOUBLE_BACKWARD)
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return
        code = frame.f_code
        if code.co_name == "forward" and "_double_backward" in code.co_qualname:
            raise RuntimeError(DOUBLE_BACKWARD)
        frame = frame.f_back


class _CheckingSavedVersions:
    """The backward half (boxed), checking first the versions of the saved tensors it reads that
    AOTAutograd saved without its check (`read`: positions; _BackwardOfPresent checks its own, per set of
    missing tangents)."""
    _boxed_call = True

    def __init__(self, compiled, read):
        self.compiled, self.read = compiled, read

    def __call__(self, args):
        _refuse_double_backward()
        _check_saved_versions(args, self.read)
        return self.compiled(args)


class _UndefinedGradsKept:
    """A compiled training graph whose autograd node hands its backward None, not zeros, for the
    gradient of an output the loss does not reach (_BackwardOfPresent compiles the backward without it)."""

    def __init__(self, compiled, absent, halves):
        self.compiled, self.absent, self.graphjit_halves = compiled, absent, halves

    def __call__(self, *args):
        self.absent.produced = None
        out = self.compiled(*args)
        produced, self.absent.produced = self.absent.produced, None
        if produced is None:
            return out
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if not isinstance(t, torch.Tensor):
                continue
            # an output the forward made: also one that views an intermediate, which AOTAutograd makes
            # again as a tensor of its own, no longer one of `produced`; never an input passed through,
            # whose node is another graph's
            if any(t is a for a in args):
                continue
            node = t.grad_fn
            if node is not None and type(node).__name__ == "CompiledFunctionBackward":
                node.set_materialize_grads(False)
                break
        return out


class _BackwardOfPresent:
    """The backward half (boxed), compiled at its first call for the tangents that call has: whole where
    none is None, else specialized to the missing ones (_without_tangents), each set compiled once."""
    _boxed_call = True

    def __init__(self, graph, inputs, absent):
        self.graph, self.inputs, self.absent = graph, list(inputs), absent
        self.placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        self.tangents = [i for i, n in enumerate(self.placeholders) if _is_tangent(n)]
        self.variants = {}

    def __call__(self, args):
        _refuse_double_backward()
        missing = tuple(i for i in self.tangents if args[i] is None)
        variant = self.variants.get(missing)
        if variant is None:
            from ..capture.frame import compiling_in_a_call
            with compiling_in_a_call():
                variant = self.variants.get(missing)
                if variant is None:
                    variant = self.variants[missing] = self._compile(missing)
        run, read = variant
        _check_saved_versions(args, read)
        return run(args)

    def _compile(self, missing):
        """(the boxed backward for this set of missing tangents, the positions of the arguments it reads that
        AOTAutograd saved without its version check)."""
        if not missing:
            return self.absent.compile_half("backward", self.graph, self.inputs), _unchecked_read(self.graph)
        name = f"{self.absent.name} (backward)"
        if len(self.variants) >= self.absent.LIMIT:
            logs.log("fusion", f"{name}: {self.absent.LIMIT} sets of missing output gradients compiled; "
                               f"others are filled with zeros")
            return self._filled(missing)
        try:
            gm, kept = _without_tangents(self.graph, missing, self.absent.zero_reach)
        except _NoZeroFor as e:
            logs.log("fusion", f"{name}: missing output gradients filled with zeros: {e}")
            return self._filled(missing)
        gm.meta["graphjit"] = dict(self.graph.meta.get("graphjit") or {}, name=f"{name}, {len(missing)} of "
                                   f"{len(self.tangents)} output gradients missing")
        logs.log("graph", lambda: f"{name} without output gradients {missing}:\n{gm.code}")
        compiled = self.absent.compile_half("backward", gm, [self.inputs[i] for i in kept])

        def run(args):
            values = [args[i] for i in kept]
            args.clear()
            return compiled(values)
        return run, [kept[j] for j in _unchecked_read(gm)]

    def _filled(self, missing):
        def run(args):
            values = None
            for i in missing:
                val = self.placeholders[i].meta["val"]
                if _static(val):
                    shape, stride = val.shape, val.stride()
                else:
                    values = values if values is not None else _symbol_values(self.placeholders, args)
                    shape, stride = _runtime_sizes(val, values)
                args[i] = torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device).zero_()
            if () not in self.variants:
                self.variants[()] = self._compile(())
            return self.variants[()][0](args)
        return run, _unchecked_read(self.graph)


class _NoZeroFor(Exception):
    """_without_tangents needs a zero tensor for a value whose sizes it does not know."""


def _without_tangents(gm, missing, zero_reach=frozenset()):
    """(gm without the placeholders at positions `missing`, the positions it keeps). The missing tangents
    are symbolic zeros: an add or sub of such a zero and a gradient (or a zero tensor a formula made:
    `_makes_zeros`) is that operand, a node whose tangent-dependent operands are all such zeros is itself one (eager
    never computes it; so is `exp(log(g) + x)`, logcumsumexp's gradient, which is not linear node by
    node), and any other node mixing a zero
    with a gradient reads a zero tensor of its sizes (as eager's nodes fill one in); an output that is a
    symbolic zero is None (the input gets no gradient), or zeros where a tangent present is one the graph
    never reads. Such a tangent is the output of an op of zero derivative (sgn's): eager hands its zero
    gradient on, and each formula it reaches runs; a node of such a formula (its forward op's `seq_nr`
    among zero_reach, _zero_reach's) reads its symbolic zeros as zero tensors."""
    from torch.fx.node import map_arg
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    absent = {placeholders[i] for i in missing}
    # a tangent the backward never reads is an output whose gradient is zero wherever it flows (sgn's):
    # which inputs it reaches is not in the graph, so where one is present, a gradient made only of
    # symbolic zeros stays a zero tensor (eager's, for the inputs that output reaches)
    unread = any(_is_tangent(n) and n not in absent and not n.users for n in placeholders)
    dependent = _tangent_dependent(gm.graph)
    graph = torch.fx.Graph()
    env, zero = {}, set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if node in absent:
                zero.add(node)
            else:
                env[node] = graph.node_copy(node, env.__getitem__)
            continue
        if node.op == "output":
            for n in node.all_input_nodes:
                if n in zero and n not in env and unread:
                    env[n] = _zeros_node(graph, n)
            graph.output(map_arg(node.args[0], lambda n: None if n in zero and n not in env else env[n]))
            continue
        operands = node.all_input_nodes
        unmade = [a for a in operands if a in zero and a not in env]
        # the formula of a forward op an unread output's zero gradient reaches: eager runs it with that
        # zero (0 * inf is NaN there), so the missing gradients it adds are zero tensors (the last branch)
        reached = unread and node.meta.get("seq_nr") in zero_reach
        if not unmade:
            env[node] = graph.node_copy(node, env.__getitem__)
        elif not reached and (other := _gradient_passed(node, zero)) is not None and other in env and \
                (other in dependent or _makes_zeros(other)):
            # a zero added to a gradient, or to a zero tensor a present output's backward formula made
            # (copysign's for its `other`: eager's input gets that tensor, not None)
            env[node] = env[other]
        elif not reached and not any(a in dependent and a not in zero for a in operands):
            zero.add(node)
        else:
            for a in unmade:
                env[a] = _zeros_node(graph, a)
            env[node] = graph.node_copy(node, env.__getitem__)
    graph.lint()
    out = torch.fx.GraphModule(gm, graph)
    return out, [i for i, n in enumerate(placeholders) if n not in absent]


def _makes_zeros(node):
    """Whether a node of a backward graph makes a tensor of zeros (a formula's gradient for an operand it
    does not depend on: copysign's `other`, a comparison's operands)."""
    aten = torch.ops.aten
    if node.target in (aten.zeros_like.default, aten.zeros.default, aten.new_zeros.default):
        return True
    if node.target in (aten.full.default, aten.full_like.default, aten.new_full.default):
        value = node.args[1] if len(node.args) > 1 else node.kwargs.get("fill_value")
        return isinstance(value, (int, float)) and value == 0
    return False


def _gradient_passed(node, zero):
    """The operand an add of a symbolic zero and a gradient, or a sub of a symbolic zero from one, comes to
    (where it has the result's sizes and dtype); None otherwise."""
    aten = torch.ops.aten
    if node.target not in (aten.add.Tensor, aten.sub.Tensor) or len(node.args) != 2 or \
            node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = node.args
    other = a if b in zero else b if a in zero and node.target is aten.add.Tensor else None
    if not isinstance(other, torch.fx.Node) or other in zero:
        return None
    mine, theirs = node.meta.get("val"), other.meta.get("val")
    if not (isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor)) or \
            mine.dtype != theirs.dtype or [_expr(d) for d in mine.shape] != [_expr(d) for d in theirs.shape]:
        return None
    return other


def _zeros_node(graph, node):
    """A node of `graph` making a zero tensor of node's sizes, dtype and device."""
    val = node.meta.get("val")
    if not _static(val):
        raise _NoZeroFor(f"{node.name} ({type(val).__name__}) is read beside a gradient")
    zeros = graph.call_function(torch.ops.aten.zeros.default, (list(val.shape),),
                                {"dtype": val.dtype, "device": val.device})
    zeros.meta["val"] = val
    return zeros


class Half:
    """One compiled half of a training graph: which ("forward", "backward" or "inference"), its ATen
    graph from AOTAutograd, and what compile_fn made of it (the graph's own forward where the compiler
    left it to eager)."""

    def __init__(self, which, graph, compiled):
        self.which, self.graph, self.compiled = which, graph, compiled

    @property
    def ran_as_captured(self):
        return self.compiled == self.graph.forward

    def __repr__(self):
        return f"Half({self.which}, {'as captured' if self.ran_as_captured else 'compiled'})"


def _boxed(compiled):
    """compiled in AOTAutograd's boxed calling convention: one list of arguments. A compiled wrapper takes
    it so already (GraphFacts.boxed: it empties the list and drops each input after its last use, so a
    backward frees saved activations as it goes); a graph left to eager gets the list unpacked."""
    if getattr(compiled, "_boxed_call", False):
        return compiled

    def run(args):
        values = tuple(args)
        args.clear()
        return compiled(*values)
    run._boxed_call = True
    run.compiled = compiled
    return run
