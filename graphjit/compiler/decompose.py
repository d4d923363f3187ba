"""fx graph (torch functions, methods, modules) -> functional core-ATen graph with fake-tensor metadata.

make_fx retraces the captured graph with fake tensors: mutations are removed (the ATen graph of a graph
that writes is functionalized: input writes become copy_ into the input at the end), and composite ops
decompose through torch's core ATen decompositions, except the ops lowering.py lowers whole
(softmax, layer_norm, gelu ... are one fused kernel each, not a dozen small ops) and the extern ops
(matmuls, convolution, attention). Every node of the result carries meta["val"], a FakeTensor.

    aten_gm = decompose(gm, example_inputs)
    print(aten_gm.code)       # torch.ops.aten.native_layer_norm.default(arg0_1, [64], ...)
"""
import collections
import contextlib
import functools
import math
import operator
import struct
import threading

import torch
from torch._decomp import core_aten_decompositions
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch.fx.experimental.proxy_tensor import make_fx

from .. import config, logs
from ..ops import is_random_name, scalar_as as _scalar_as
from . import op_templates
from .graph_checks import Refused, changes_state


aten = torch.ops.aten

# Composite ops whose decompositions we never want: they would hide an extern call (attention), or compute
# otherwise than eager (std_mean as sqrt of var_mean's float32 variance overflows past 1e19; index_add and
# index_copy decompose to index_put, which takes a negative index from the end, where eager's kernels
# raise, and on the CPU adds in another order than eager's index_add with more than one thread;
# index_fill decomposes to index_copy, which raises for the negative index eager's index_fill takes).
KEEP_WHOLE = {aten.scaled_dot_product_attention.default, aten.std_mean.correction, aten.index_add.default,
              aten.index_copy.default, aten.index_fill.int_Scalar, aten.index_fill.int_Tensor,
              # (their in-place forms too: functionalization makes them the ops above)
              aten.index_add_.default, aten.index_copy_.default, aten.index_fill_.int_Scalar,
              aten.index_fill_.int_Tensor}



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


def _converting_alpha(decomposition):
    """torch's index_add decomposition with `alpha` converted (_scalar_as) to self's dtype first, as eager's
    kernel does: its `source * alpha` would promote a bool source times an int alpha to int64."""
    def converted(self, dim, index, source, *, alpha=1):
        return decomposition(self, dim, index, source, alpha=_scalar_as(alpha, self.dtype))
    return converted


# Ops whose torch reference refuses Python scalar arguments that eager's kernels take: traced through
# a decomposition of ours that converts them as eager does
EAGER_SCALARS = {op: _converting_value(op) for op in (aten.addcmul.default, aten.addcmul_.default)}
# Ops whose torch decomposition takes a scalar unconverted: wrapped to convert it as eager does
EAGER_ALPHAS = (aten.index_add.default, aten.index_add_.default)


def _pow_of_bool_exponent(x, exponent):
    """x ** True is x and x ** False is ones, of x's dtype, as in eager (torch's meta function says int64
    for a bool x); any other exponent: the op itself (NotImplemented lets make_fx trace it)."""
    if isinstance(exponent, bool):
        return x.clone() if exponent else torch.ones_like(x)
    return NotImplemented


# Ops whose meta function gives another dtype than eager's kernel for some scalar arguments
EAGER_DTYPES = {aten.pow.Tensor_Scalar: _pow_of_bool_exponent}


def _element(value, dtype):
    """A Python float as an element of a float dtype, converted as c10 does (16-bit through float32)."""
    if dtype == torch.float64:
        return value
    value = struct.unpack("f", struct.pack("f", value))[0]
    if dtype == torch.float16:
        return struct.unpack("e", struct.pack("e", value))[0]
    if dtype == torch.bfloat16 and math.isfinite(value):
        bits = struct.unpack("I", struct.pack("f", value))[0]
        bits = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) << 16
        return struct.unpack("f", struct.pack("I", bits & 0xffffffff))[0]
    return value


def _logit_bounds(x, eps):
    """logit's clamp bounds (lo, hi) as eager's kernels take them: on the CPU elements of x's dtype (hi is
    1 - lo rounded to it, through float32 for 16-bit types); on a GPU in its accumulation type (float32,
    float64 for double), where x is compared after converting it (_logit_compared)."""
    dtype = x.dtype if x.device.type == "cpu" or x.dtype == torch.float64 else torch.float32
    lo = _element(eps, dtype)
    return lo, _element(1.0 - lo if dtype == torch.float64 else _element(1.0 - lo, torch.float32), dtype)


def _logit_compared(x):
    """x as eager's logit kernels compare it with their bounds: a 16-bit x converted to float32 on a GPU."""
    return x.float() if x.device.type != "cpu" and x.dtype in (torch.float16, torch.bfloat16) else x


def _logit_as_cpu_kernel(core):
    """logit as eager's CPU kernel computes it, in x's dtype: lo = eps and hi = 1 - lo as elements of it
    (1 - 1e-3 is 1.0 in bfloat16, so logit(x >= 1) is inf), each operation rounded to it. torch's
    decomposition (eager's CUDA kernel) computes in float32 with hi = 1 - eps unrounded."""
    def decomposition(x, eps=None):
        if x.device.type != "cpu" or not x.dtype.is_floating_point:
            return core(x, eps)
        if eps is not None and not math.isnan(eps):
            lo, hi = _logit_bounds(x, eps)
            x = torch.where(x < lo, lo, torch.where(x > hi, hi, x))
        return torch.log(x / (1 - x))
    return decomposition


def _logit_backward_as_eager(core):
    """logit's gradient as eager's kernels compute it: 0 where x < lo or x > hi, dy * inf at x = 0 or 1
    (either sign of zero: +inf for a positive dy), dy / (x (1 - x)) elsewhere, so a NaN x has a NaN
    gradient (torch's decomposition keeps lo <= x <= hi, which a NaN fails, and gives 0, and divides by
    x (1 - x) at -0.0: -inf); lo and hi as logit's own (_logit_bounds). No eps, or one below 0: NaN outside
    [0, 1]; a NaN eps clamps nothing."""
    def decomposition(grad_output, x, eps=None):
        if not x.dtype.is_floating_point:
            return core(grad_output, x, eps)
        if eps is not None and eps < 0:
            eps = None
        edge = (x == 0) | (x == 1)
        if eps is not None and math.isnan(eps):
            return torch.where(edge, grad_output * math.inf, grad_output / (x * (1 - x)))
        # dy / (x (1 - x)) in [0, 1] in the decomposition's arithmetic, NaN elsewhere and at a NaN x
        inside = torch.where(edge, grad_output * math.inf, core(grad_output, x, None))
        if eps is None:
            return inside
        lo, hi = _logit_bounds(x, eps)
        compared = _logit_compared(x)
        return torch.where((compared < lo) | (compared > hi),
                           torch.zeros((), dtype=inside.dtype, device=inside.device), inside)
    return decomposition


@functools.cache
def decomposition_table():
    """torch's core ATen decompositions, minus every op lowering.py lowers whole or calls as an extern, plus
    SCHEMA_FIXES, EAGER_SCALARS, EAGER_DTYPES and EAGER_ALPHAS, and EAGER_LAYOUTS around all of them."""
    from .lowering import EXTERN_OPS, LOWERINGS
    table = dict(core_aten_decompositions())
    for op in list(table):
        if op in LOWERINGS or op in EXTERN_OPS or op in KEEP_WHOLE:
            del table[op]
    table.update(SCHEMA_FIXES)
    table.update(POINTWISE_FORMS)
    table.update(EAGER_SCALARS)
    table.update(EAGER_DTYPES)
    if aten.embedding_dense_backward.default in table:
        table[aten.embedding_dense_backward.default] = _embedding_backward_by_index_add(
            table[aten.embedding_dense_backward.default])
    for op in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default):
        if op in table:
            table[op] = _nll_loss_with_eagers_target_check(table[op])
    table[aten.bernoulli.default] = _bernoulli_with_eagers_check
    table[aten.logit.default] = _logit_as_cpu_kernel(table[aten.logit.default])
    table[aten.logit_backward.default] = _logit_backward_as_eager(table[aten.logit_backward.default])
    table[aten.elu_backward.default] = _elu_backward_as_cpu_kernel(table[aten.elu_backward.default])
    table[aten.hardswish_backward.default] = _hardswish_backward_as_cpu_kernel(
        table[aten.hardswish_backward.default])
    table.update({op: _converting_alpha(table[op]) for op in EAGER_ALPHAS if op in table})
    for op in list(table):
        if op.name().startswith(NEAREST_UPSAMPLES):
            table[op] = _in_eagers_dtypes(table[op], NEAREST_UPSAMPLE_DTYPES)
    for op, layout in EAGER_LAYOUTS.items():
        table[op] = _in_eager_layout(op, layout, table.get(op))
    return table


# Nearest-neighbour upsampling: eager's kernels (CPU and CUDA) take floating point and uint8 tensors only;
# torch's decompositions (index gathers) take any dtype.
NEAREST_UPSAMPLES = ("aten::upsample_nearest", "aten::_upsample_nearest_exact")
NEAREST_UPSAMPLE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8)


def _in_eagers_dtypes(decomposed, dtypes):
    """A decomposition used for inputs of `dtypes` only: for others make_fx keeps the op itself, whose eager
    kernel then raises eager's error when the graph runs."""
    def decomposition(x, *args, **kwargs):
        if x.dtype not in dtypes:
            return NotImplemented
        return decomposed(x, *args, **kwargs)
    return decomposition


def _embedding_backward_by_index_add(decomposed):
    """embedding's weight gradient on the CPU, float32 and float64, as eager's kernel computes it: the
    gradient rows added into zeros by index_add, in the order of the indices (rows at padding_idx add
    zeros). torch's decomposition puts them with index_put(accumulate=True), which adds in another order
    with more than one thread and takes 2-4x index_add's time (benchmarks/probes/embedding_backward_probe.py).
    Elsewhere (CUDA, 16-bit gradients, scale_grad_by_freq): torch's."""
    def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
        if grad_output.device.type != "cpu" or scale_grad_by_freq or \
                grad_output.dtype not in (torch.float32, torch.float64) or indices.dim() == 0:
            return decomposed(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
        width = grad_output.shape[indices.dim():]
        rows = grad_output.reshape(-1, *width)
        flat = indices.reshape(-1)
        rows = rows.masked_fill((flat == padding_idx).reshape(-1, *[1] * len(width)), 0)
        return rows.new_zeros((num_weights, *width)).index_add(0, flat, rows)
    return embedding_dense_backward


def _nll_loss_with_eagers_target_check(decomposed):
    """nll_loss (and nll_loss2d) whose target out of range raises eager's IndexError ("Target 4 is out of
    bounds."), and whose target or class weights of another dtype than eager's kernel takes raise its
    RuntimeError (the op kept whole): a check of every target (graphjit::check_indices, on the CPU; a device assert on a GPU, as
    eager's CUDA kernel asserts), and the out-of-range targets replaced by 0 for torch's decomposition,
    whose gather of them would raise gather's RuntimeError first."""
    def nll_loss_forward(self, target, weight, reduction, ignore_index):
        if target.dtype not in (torch.int64, torch.uint8) or weight is not None and weight.dtype != self.dtype:
            return NotImplemented       # the op itself, whose kernel raises eager's dtype error
        classes = self.shape[0 if self.dim() < 2 else 1]
        valid = (target == ignore_index) | ((target >= 0) & (target < classes))
        if target.device.type == "cpu":
            torch.ops.graphjit.check_indices(valid.all(), "Target is out of bounds.")
        else:
            torch.ops.aten._assert_async.msg(valid.all(), "Target is out of bounds.")
        return decomposed(self, torch.where(valid, target, 0), weight, reduction, ignore_index)
    return nll_loss_forward


def _bernoulli_with_eagers_check(p, generator=None):
    """bernoulli of a tensor of probabilities, after eager's check that each is in [0, 1] (a NaN fails it;
    RuntimeError on the CPU, a device assert on a GPU, as eager's kernels); the op itself is traced next."""
    if p.is_floating_point():
        torch.ops.aten._assert_async.msg(((p >= 0) & (p <= 1)).all(), "Expected p_in >= 0 && p_in <= 1 to be true")
    return NotImplemented


def _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """nll_loss's gradient (and nll_loss2d's) as one pointwise expression: -grad_output (divided by the
    total weight for a mean, times the class weight) where the class index is the sample's target, 0
    elsewhere and where the target is ignore_index. torch's decomposition writes zeros and scatters -1 into
    them: a full-size fill and a scatter, where this fuses into the kernel of log_softmax's backward."""
    channel_dim = 0 if self.dim() < 2 else 1
    if reduction == 1:                              # mean
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:        # eager's kernel reads target[0] only
        target = target[0]
    target = target.unsqueeze(channel_dim)
    kept = target != ignore_index
    classes = torch.arange(self.shape[channel_dim], device=self.device)
    classes = classes.view([-1 if d == channel_dim else 1 for d in range(self.dim())])
    grad_input = torch.where(classes == torch.where(kept, target, 0), -1.0, 0.0).to(self.dtype)
    if grad_input.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel_dim)
    if weight is not None:
        grad_output = grad_output * weight.reshape([-1 if d == channel_dim else 1 for d in range(self.dim())])
    return grad_input * torch.where(kept, grad_output, 0)


# Decompositions of ours where torch's writes a tensor in parts (a fill, then a scatter) and a pointwise
# form fuses with its neighbours.
def _native_dropout(x, p, train):
    """native_dropout as a draw and pointwise math on it, as eager's kernels compute it (in float32 for
    16-bit x, the mask's product first, p = 1 scaling by 0): the mask from a float32 rand_like, which the
    lowering draws by Philox, then x * mask / (1 - p). In a joint graph the partitioner may then save the bool
    mask alone and recompute the product in the backward; native_dropout whole, a random op it never
    recomputes, has both its outputs saved. With config.fallback_random, native_dropout stays whole (eager's
    kernel and bits)."""
    from .. import config
    if config.fallback_random or train is False or not x.is_floating_point() or not isinstance(p, (int, float)):
        return NotImplemented
    # kept where the draw is below 1 - p, as lowering.bernoulli keeps: dropout outside a training graph
    # (bernoulli(1 - p)) draws the same mask from the same generator state (a reentrant checkpoint's
    # forward under no_grad and its recompute)
    keep = torch.rand_like(x, dtype=torch.float32) < (1.0 - p)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return (x.to(compute) * keep * scale).to(x.dtype), keep


def _frac(x):
    """frac as eager's kernel computes it, x - trunc(x) (exact in every float dtype): torch's decomposition,
    x - floor(|x|) * sign(x), gives frac(-0.0) as -0.0 where eager's is +0.0."""
    if not x.is_floating_point():
        return NotImplemented
    return x - torch.trunc(x)


def _elu_backward_as_cpu_kernel(core):
    """elu's gradient as eager's vectorized CPU kernel computes it: the positive branch where x > 0, the
    exponential one elsewhere, so a NaN x takes the exponential branch and its gradient is NaN. torch's
    decomposition (eager's CUDA kernel, and the CPU kernel's scalar tail) tests x <= 0, so on the CPU a NaN
    x took the positive branch and a zero gradient stayed 0 where eager's is NaN."""
    def decomposition(grad_output, alpha, scale, input_scale, is_result, self_or_result):
        if self_or_result.device.type != "cpu":
            return core(grad_output, alpha, scale, input_scale, is_result, self_or_result)
        negcoef, poscoef, negiptcoef = alpha * scale, scale, input_scale
        if is_result:
            negative = grad_output * negiptcoef * (self_or_result + negcoef)
        else:
            negative = grad_output * negiptcoef * negcoef * torch.exp(self_or_result * negiptcoef)
        return torch.where(self_or_result > 0, grad_output * poscoef, negative)
    return decomposition


def _hardswish_backward_as_cpu_kernel(core):
    """hardswish's gradient as eager's vectorized CPU kernel computes it (in float32 for 16-bit dtypes): 0
    where x <= -3, the incoming gradient where x >= 3, and its product with x / 3 + 0.5 elsewhere, so a NaN
    x takes the middle branch and its gradient is NaN. torch's decomposition (eager's CUDA kernel, and the
    CPU kernel's scalar tail) tests x < 3 for the middle branch, so a NaN x took the last one: the incoming
    gradient, where eager's is NaN."""
    def decomposition(grad_output, self):
        if self.device.type != "cpu" or not self.dtype.is_floating_point:
            return core(grad_output, self)
        dtype = grad_output.dtype
        compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        grad, x = grad_output.to(compute), self.to(compute)
        return torch.where(x <= -3, 0.0, torch.where(x >= 3, grad, grad * (x / 3 + 0.5))).to(dtype)
    return decomposition


POINTWISE_FORMS = {aten.nll_loss_backward.default: _nll_loss_backward,
                   aten.nll_loss2d_backward.default: _nll_loss_backward,
                   aten.native_dropout.default: _native_dropout,
                   aten.frac.default: _frac}


_SDPA = torch.nn.functional.scaled_dot_product_attention


def fold_constant_attention_masks(gm):
    """Drop attention masks that are all True (or all 0 added) whatever the inputs: fused attention kernels
    (flash, cuDNN) take no mask, so such a mask costs the math path (two batched matmuls and a softmax).

    Traced models make them: transformers, while compiling, cannot test at run time whether a padding mask
    is all ones, so it builds the full [batch, 1, query, key] mask from torch.ones(...) even when there is
    no padding at all (BERT and ViT without an attention_mask argument). A mask computed only from
    constants and factory calls (no graph input, nothing random) is evaluated here, once: the graph is
    specialized to its shapes, so its value is the same on every call. A mask eager would refuse is kept,
    so that the error stays eager's: one beside is_causal=True, one of another float dtype than the query,
    one whose broadcast would enlarge the scores. The nodes that made a dropped mask are erased where
    nothing else reads them and they write nothing (an in-place op beside the mask, `self.steps += 1`,
    stays). Returns the number of masks dropped."""
    dropped, written = [], None
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        in_kwargs = "attn_mask" in node.kwargs
        mask = node.kwargs["attn_mask"] if in_kwargs else (node.args[3] if len(node.args) > 3 else None)
        if not isinstance(mask, torch.fx.Node) or not _mask_is_accepted(node):
            continue
        if written is None:
            written = _written_in_place(gm)
        value = _constant_value(gm, mask, written)
        if not isinstance(value, torch.Tensor) or not _mask_fits(node, value):
            continue
        neutral = bool(value.all()) if value.dtype == torch.bool else \
            (value.is_floating_point() and not bool(value.any()))
        if not neutral:
            continue
        if in_kwargs:
            node.kwargs = {**node.kwargs, "attn_mask": None}
        else:
            node.args = node.args[:3] + (None,) + node.args[4:]
        dropped.append(mask)
    if dropped:
        _erase_if_unread(gm, dropped)
        gm.recompile()
    return len(dropped)


def _sdpa_arg(node, index, name, default=None):
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def _mask_is_accepted(node):
    """Whether eager takes a mask in this call at all: not beside is_causal=True (it raises there)."""
    return _sdpa_arg(node, 5, "is_causal", False) is False


def _mask_fits(node, mask):
    """Whether eager accepts `mask` for this call as it is: a bool mask or one of the query's dtype, whose
    broadcast with the scores [..., L, S] is the scores' shape (a larger one raises or changes the
    output's shape). Unknown shapes: no."""
    q, k = (_sdpa_arg(node, 0, "query"), _sdpa_arg(node, 1, "key"))
    q, k = (getattr(n, "meta", {}).get("example_value") for n in (q, k))
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor) or q.dim() < 2 or k.dim() < 2:
        return False
    if mask.dtype != torch.bool and mask.dtype != q.dtype:
        return False
    scores = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])) + (q.shape[-2], k.shape[-2])
    try:
        return tuple(torch.broadcast_shapes(tuple(mask.shape), scores)) == scores
    except (RuntimeError, TypeError):
        return False


def _erase_if_unread(gm, nodes):
    """Erase `nodes` and, transitively, the nodes only they read, where nothing else reads a node and it
    writes nothing (training._in_place: fx's eliminate_dead_code takes in-place calls for pure and would
    drop `self.steps += 1`)."""
    from .training import _in_place
    stack, erased = list(nodes), set()
    while stack:
        node = stack.pop()
        if node in erased or node.users or node.op not in ("call_function", "call_method", "get_attr") or \
                _in_place(node):
            continue        # (a mask every layer reads is in `nodes` once per layer)
        inputs = node.all_input_nodes
        gm.graph.erase_node(node)
        erased.add(node)
        stack.extend(inputs)


def _written_in_place(gm):
    """The nodes of a captured graph a call writes into (training.written_args), with every node they were
    computed from (a view's base among them): more than is written, never less."""
    from .training import written_args
    written, stack = set(), []
    for n in gm.graph.nodes:
        stack += written_args(n)
    while stack:
        n = stack.pop()
        if n not in written:
            written.add(n)
            stack.extend(n.all_input_nodes)
    return written


def _constant_value(gm, node, written, limit=200):
    """node's value if it depends on no graph input, nothing random and nothing `written` in place
    (_written_in_place: evaluated now), else None."""
    needed, stack = {}, [node]
    while stack:
        current = stack.pop()
        if current in needed:
            continue
        if current.op in ("placeholder", "output") or len(needed) > limit:
            return None
        name = current.target if isinstance(current.target, str) else getattr(current.target, "__name__", "")
        if is_random_name(name):
            return None
        needed[current] = True
        stack.extend(current.all_input_nodes)
    if written & needed.keys():
        return None                     # written in place (torch.empty(...).cauchy_()): not a function of its inputs
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


def _batch_norm_writing_stats(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """native_batch_norm in training mode updates running_mean and running_var in place, but its schema
    does not say so: traced as is, its write is invisible (dead-code elimination drops the call when the
    output is unused, and functionalization writes nothing back). _native_batch_norm_legit is the same op
    with the writes in its schema. Other uses stay native_batch_norm (lowered in eval mode)."""
    if not training or running_mean is None or running_var is None:
        return NotImplemented
    return aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var, training,
                                                 momentum, eps)


# Ops whose schema hides a write, traced as an op whose schema shows it.
SCHEMA_FIXES = {aten.native_batch_norm.default: _batch_norm_writing_stats}


def _strides_for(shape, memory_format):
    if memory_format == torch.channels_last and len(shape) == 4:
        return torch._prims_common.make_channels_last_strides_for(shape)
    return torch._prims_common.make_contiguous_strides_for(shape)


def _input_format_on_cpu(out, x, *args, **kwargs):
    """Eager's CPU kernel allocates the result in its input's suggested memory format (channels-last or
    not); elsewhere the meta function's layout is kept (None)."""
    if x.device.type != "cpu":
        return None
    return _strides_for(out.shape, torch._prims_common.suggest_memory_format(x))


def _contiguous(out, *args, **kwargs):
    return _strides_for(out.shape, torch.contiguous_format)


def _elementwise(out, a, b, *args, **kwargs):
    """A TensorIterator kernel's layout: its operands' memory order."""
    operands = [t.expand(out.shape) for t in (a, b) if isinstance(t, torch.Tensor)]
    return torch._prims_common.compute_elementwise_output_strides(*operands)


def _roll_layout(out, x, shifts, dims=(), *args, **kwargs):
    """roll's CPU kernel: its input's suggested memory format along dims; without dims it rolls the flattened
    tensor and views it back, contiguous."""
    return _input_format_on_cpu(out, x) if dims else _contiguous_on_cpu(out, x)


# Ops whose eager kernel lays its (first) result out otherwise than torch's meta function, which the traced
# graph's strides come from: traced with a copy into eager's layout where the two differ, so outputs and
# what reads their strides (a later .view()) are as in eager. (Composite ops: EAGER_FUNCTION_LAYOUTS.)
EAGER_LAYOUTS = {
    aten.native_batch_norm.default: _input_format_on_cpu,
    aten._native_batch_norm_legit.default: _input_format_on_cpu,
    aten._native_batch_norm_legit.no_stats: _input_format_on_cpu,
    aten._native_batch_norm_legit_no_training.default: _input_format_on_cpu,
    aten._native_batch_norm_legit_functional.default: _input_format_on_cpu,
    aten.channel_shuffle.default: _input_format_on_cpu,
    aten.roll.default: _roll_layout,
    aten.pow.Scalar: _contiguous,
    aten.copysign.Tensor: _elementwise,
    aten.copysign.Scalar: _elementwise,
}


def _contiguous_on_cpu(out, x, *args, **kwargs):
    return _contiguous(out) if x.device.type == "cpu" else None


def _max_pool1d_layout(out, x, *args, **kwargs):
    """max_pool1d's CPU kernel writes a contiguous result where no indices are asked for (with them, or off
    the CPU, it is max_pool2d_with_indices', which the decomposition traces)."""
    indices = kwargs.get("return_indices", args[5] if len(args) > 5 else False)
    return None if indices else _contiguous_on_cpu(out, x)


def _rrelu_layout(out, x, *args, **kwargs):
    inplace = kwargs.get("inplace", args[3] if len(args) > 3 else False)
    return None if inplace else _contiguous_on_cpu(out, x)


# Composite functions, decomposed before make_fx's table is consulted, whose eager kernel lays its result
# out otherwise than their decomposition: the first trace runs under _EagerFunctionLayouts, which copies
# their results into eager's layout, where the graph calls one of them.
EAGER_FUNCTION_LAYOUTS = {
    torch.nn.functional.max_pool1d: _max_pool1d_layout,
    torch.max_pool1d: _contiguous_on_cpu,
    torch.nn.functional.rrelu: _rrelu_layout,
    torch.rrelu: _contiguous_on_cpu,
}


def _one_hot_checked(x, num_classes=-1):
    """one_hot with eager's CPU checks of its classes (non-negative, under num_classes) as runtime checks
    (aten._assert_async, which the compiled graph runs): the traced form compares x with each class and
    gave a row of zeros for a class out of range where eager raises. A CUDA tensor's classes are not
    checked, as in eager. num_classes=-1 (the max class plus one) is left to torch's own form."""
    if num_classes == -1 or x.device.type != "cpu":
        return torch.nn.functional.one_hot(x, num_classes)
    if x.numel():
        torch._assert_async((x >= 0).all(), "Class values must be non-negative.")
        torch._assert_async((x < num_classes).all(), "Class values must be smaller than num_classes.")
    return (x.unsqueeze(-1) == torch.arange(num_classes, device=x.device)).to(torch.int64)


# Composite functions traced in a form of ours instead of their own (make_fx decomposes a composite op
# before the decomposition table is asked): function -> the form.
EAGER_FUNCTION_FORMS = {
    torch.nn.functional.one_hot: _one_hot_checked,
}


class _EagerFunctionLayouts(torch.overrides.TorchFunctionMode):
    """While make_fx traces: EAGER_FUNCTION_FORMS' functions in their forms, EAGER_FUNCTION_LAYOUTS' with
    their results in eager's layout."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = EAGER_FUNCTION_FORMS.get(func, func)(*args, **kwargs)
        layout = EAGER_FUNCTION_LAYOUTS.get(func)
        if layout is None or not isinstance(out, torch.Tensor):
            return out
        return _laid_out(out, layout(out, *args, **kwargs))


def _laid_out_call(node):
    """Whether node calls a function _EagerFunctionLayouts lays out or traces in a form of ours."""
    return node.op == "call_function" and (node.target in EAGER_FUNCTION_LAYOUTS or node.target in EAGER_FUNCTION_FORMS)


def _function_layouts(gm):
    """_EagerFunctionLayouts where gm calls a function it lays out or traces in a form of ours, else a
    context doing nothing."""
    return _EagerFunctionLayouts() if any(map(_laid_out_call, gm.graph.nodes)) else contextlib.nullcontext()


def _call_layouts(node):
    """_function_layouts for one call (op_templates traces one call at a time)."""
    return _EagerFunctionLayouts() if _laid_out_call(node) else contextlib.nullcontext()


_tracing_itself = threading.local()     # the ops a layout decomposition is calling (traced as themselves)


def _in_eager_layout(op, layout, inner):
    """A decomposition of op: inner (the table's decomposition) or op itself, its first result copied into
    the strides `layout` gives (permuted, made contiguous, permuted back) where they differ."""
    def decomposition(*args, **kwargs):
        out = inner(*args, **kwargs) if inner is not None else NotImplemented
        if out is NotImplemented:
            calling = _tracing_itself.__dict__.setdefault("ops", set())
            if op in calling:
                return NotImplemented
            calling.add(op)
            try:
                out = op(*args, **kwargs)
            finally:
                calling.discard(op)
        first = out[0] if isinstance(out, (tuple, list)) else out
        laid = _laid_out(first, layout(first, *args, **kwargs))
        if isinstance(out, (tuple, list)):
            return type(out)([laid, *out[1:]])
        return laid
    return decomposition


def _laid_out(t, strides):
    """t, or a copy of t with the dense `strides` where t's differ (dims of one element aside)."""
    if strides is None or all(n == 1 or a == b for n, a, b in zip(t.shape, t.stride(), strides)):
        return t
    order = sorted(range(t.dim()), key=lambda d: (-strides[d], d))
    inverse = sorted(range(t.dim()), key=order.__getitem__)
    return t.permute(order).contiguous().permute(inverse)


# Writes functionalization cannot express (copy_ writes values back, never which storage an input views).
REFUSED_WRITES = {aten.set_.source_Tensor: "set_ (makes a tensor view another storage)",
                  aten.set_.source_Storage: "set_ (makes a tensor view another storage)",
                  aten.set_.source_Storage_storage_offset: "set_ (makes a tensor view another storage)",
                  aten.set_.default: "set_ (makes a tensor view another storage)"}


def _writes(traced):
    """The ATen ops of a traced graph that write to an argument (schema annotated `(a!)`)."""
    return [node.target for node in traced.graph.nodes if _writes_in_place(node)]


def decompose(gm, example_inputs, traced_by_aot=False):
    """The functional core-ATen GraphModule equivalent to gm on inputs shaped like example_inputs.
    Raises Refused where no functional graph keeps eager's semantics (see eager_writes).

    traced_by_aot: gm is a half of a training graph, traced by AOTAutograd functionalized with this
    module's decomposition_table: its ops are what that table left whole (or declined to decompose, which
    it declines again), so where it writes nothing and calls no op that EAGER_LAYOUTS lays out, tracing it
    again would give the same graph: a copy of it is taken as it is (a second make_fx of GPT-2's halves
    took 2 of the 16 seconds of its first training step on the H200).

    A graph that writes is traced twice: first as is, which records eager's ATen ops, views and writes on
    fake tensors with eager's sizes, strides and storages, then that ATen graph functionalized. (Tracing
    gm functionalized at once decides composite ops on the functional wrappers' metadata: the strides of an
    input written earlier in the graph are those of its new value, so `.contiguous()` of it returns an alias
    instead of a copy, and `x.type_as(x)` returns a tensor that is x for eager but not for the write-back.)
    meta["output_aliases"] of the result: per output (pytree leaf), how to return eager's alias of an
    input where the functional graph computes a new tensor (see output_aliases)."""
    fold_constant_attention_masks(gm)
    if traced_by_aot and _decomposed_already(gm):
        return _finish(_copied(gm), None)
    with torch.no_grad():
        trace = tracer()
        traced = first_trace(gm, example_inputs, trace, config.decompose_by_templates)
        aliases = None
        if _writes(traced) and _symbolic(example_inputs) and writes_into_inputs(traced):
            check_written_inputs(functional_writes(traced), example_inputs)
        elif _writes(traced) and not writes_out_of_place(traced):
            if _symbolic(example_inputs):
                # the graph rewrites below put sizes into nodes as values, which a second trace can't
                # take as symbols
                from .ir import StaticOnly
                raise StaticOnly("a graph that writes through views, with symbolic sizes")
            eager_writes(traced)
            eager = _unfolds_as_views(_expands_as_views(_views_before_expands(traced)))
            check_writes_through_overlaps(eager)
            try:
                traced = trace(torch.func.functionalize(eager, remove="mutations"))(*example_inputs)
            except RuntimeError as e:
                if "as_strided() is non-compositional" in str(e):
                    # functionalization can't replay a write through a chain of views with an as_strided
                    raise Refused("a write through a view chain made with as_strided (functionalization "
                                  "cannot replay it)") from e
                if "internal overlap" not in str(e):
                    raise
                # a write through a view whose elements share memory (unfold windows, as_strided)
                raise Refused(f"a write into a tensor whose elements overlap in memory: {e}") from e
            written = functional_writes(traced)
            check_written_inputs(written, example_inputs)
            aliases = output_aliases(eager, traced, written)
    return _finish(traced, aliases)


def tracer():
    """make_fx with decompose's table, on fake tensors; tensor constants held by the graph (get_attr) stay
    real (_allow_non_fake_inputs) and make_fx keeps them as constants of the traced graph."""
    return functools.partial(make_fx, decomposition_table=decomposition_table(), tracing_mode="fake",
                             _allow_non_fake_inputs=True)


def first_trace(gm, example_inputs, trace, templates):
    """The ATen graph of gm as it is (eager's ops, views and writes on fake tensors), traced by `trace`
    (make_fx with decompose's table) whole, or by op_templates where `templates` and it applies (the same
    graph). Call under no_grad."""
    traced = None
    if templates and not changes_state(gm) and not _symbolic(example_inputs):
        traced = op_templates.trace_by_templates(gm, example_inputs, trace, _call_layouts, always=templates >= 2)
    if traced is not None:
        return traced
    with _function_layouts(gm):
        try:
            return trace(gm)(*example_inputs)
        except RuntimeError as e:
            if "single memory location" not in str(e) and "internal overlap" not in str(e):
                raise
            # an in-place op on an expanded input: eager raises the same error when the graph runs
            raise Refused(f"a write into a tensor whose elements overlap in memory: {e}") from e


def is_impure(node):
    """fx's rule (writes, calls registered as side-effectful), and any op that returns nothing: it runs only
    for its effect, as the checks that raise eager's error do (aten._linalg_check_errors, which fx on torch
    2.11 takes for dead code: a compiled cholesky of a matrix that is not positive definite returned a
    value where eager raises)."""
    if node.is_impure():
        return True
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
        not node.target._schema.returns


def eliminate_dead_code(graph):
    graph.eliminate_dead_code(is_impure_node=is_impure)


def _finish(traced, aliases):
    """decompose's passes after the trace: scatters of dense values, index checks of indexing ops read in
    part, constants folded, dead code gone."""
    _dense_scatter_values(traced)
    check_indices_read_in_part(traced)
    folded = fold_constants(traced)
    merge_repeated_ops(traced)
    eliminate_dead_code(traced.graph)
    if folded:
        used = {node.target for node in traced.graph.nodes if node.op == "get_attr"}
        for name in [n for n in traced._buffers if n.startswith(("_folded_constant", "_tensor_constant"))
                     and n not in used]:
            del traced._buffers[name]       # folded into later constants
    traced.recompile()
    traced.meta["output_aliases"] = aliases
    return traced


def merge_repeated_ops(traced):
    """Nodes that call the same op on the same arguments become one (common subexpressions): a model
    passes one attention mask to every layer, and each layer's attention converts and pads it again (12
    kernels a GPT-2 decode step, where one does). In a graph that writes, only into its inputs (a
    functionalized graph copying new values back: BatchNorm's running statistics), nodes merge only
    between one write and the next (a read before and after a write is not the same value); a graph that
    writes into anything else merges nothing. Not random ops, not a node whose memory an output holds or
    views (eager returns each such output in memory of its own), and not a node whose result is an
    unbacked size symbol (its readers' metas name the symbol it made)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    graph = traced.graph
    nodes = list(graph.nodes)
    writes = {node for node in nodes if _writes_in_place(node)}
    if any(not _writes_first_argument_only(node.target._schema) or getattr(node.args[0], "op", None) != "placeholder"
           for node in writes):
        return 0
    held = _held_by_outputs(nodes)
    seen, merged, region = {}, 0, 0
    for node in nodes:
        if node in writes:
            region += 1
            continue
        if node.op != "call_function" or node in held or not _pure(node.target):
            continue
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and free_unbacked_symbols(val):
            continue
        try:
            key = (region, node.target, _frozen(node.args), _frozen(node.kwargs))
            hash(key)
        except TypeError:
            continue
        prior = seen.setdefault(key, node)
        if prior is not node:
            node.replace_all_uses_with(prior)
            graph.erase_node(node)
            merged += 1
    return merged


def _pure(target):
    if target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and not target._schema.is_mutable and \
        torch.Tag.nondeterministic_seeded not in target.tags and not is_random_name(target.__name__)


def _frozen(value):
    """value (fx node arguments) as a hashable key: lists become tuples, dicts sorted item tuples; floats
    keep their type (1 and 1.0 are different arguments), and -0.0 stays apart from 0.0."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _frozen(v)) for k, v in sorted(value.items()))
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("object", id(value))
    return (type(value).__name__, value)


def _held_by_outputs(nodes, through_writes=True):
    """The nodes whose memory an output of the graph is, or views (through ops that return an alias; an
    in-place op's result is its argument unless not through_writes)."""
    held, todo = set(), []
    for node in nodes:
        if node.op == "output":
            todo += [a for a in torch.utils._pytree.tree_leaves(node.args[0]) if isinstance(a, torch.fx.Node)]
    while todo:
        node = todo.pop()
        if node in held:
            continue
        held.add(node)
        if _is_view(node) and (through_writes or not _writes_in_place(node)):
            todo += [a for a in node.all_input_nodes]
    return held


def _is_view(node):
    """Whether node's value is memory of its arguments: getitem, _unsafe_view (a reshape's view of its copy,
    whose schema declares no alias), or an op that returns an alias (a view, or an in-place op's result)."""
    return node.op == "call_function" and (node.target in (operator.getitem, aten._unsafe_view.default) or (
        isinstance(node.target, torch._ops.OpOverload) and
        any(r.alias_info is not None for r in node.target._schema.returns)))


def _writes_first_argument_only(schema):
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == \
        [schema.arguments[0].name]


# ---------------------------------------------------------------------------------------------------------
# Writes and aliases: what functionalization can express, checked on the traced graphs' fake tensors
# ---------------------------------------------------------------------------------------------------------


def _decomposed_already(gm):
    """Whether gm, traced by make_fx with decomposition_table, calls only ATen ops that write nothing and
    that EAGER_LAYOUTS does not lay out (a second trace would copy their results into eager's layout
    again), getitem of their results and tensor constants it holds: what a second trace gives back
    unchanged."""
    import operator
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr" and isinstance(getattr(gm, node.target, None), torch.Tensor):
            continue
        if node.op != "call_function" or "val" not in node.meta:
            return False
        if node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload) or node.target in EAGER_LAYOUTS or \
                node.target._schema.is_mutable:
            return False
    return True


def _copied(gm):
    """A GraphModule of a copy of gm's graph (nodes' meta copied shallowly: the same fake values)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def _symbolic(example_inputs):
    """Whether the example inputs carry size symbols (a SymInt, or a tensor with symbolic sizes)."""
    return any(isinstance(t, torch.SymInt) or isinstance(t, torch.Tensor) and
               any(isinstance(n, torch.SymInt) for n in (*t.shape, *t.stride())) for t in example_inputs)


def writes_out_of_place(traced):
    """Rewrites the traced graph's writes out of place where each is an in-place op on a value nothing else
    holds (`relu(..., inplace=True)` after a convolution: no input, constant or view shares its memory):
    the op's out-of-place form, read from then on instead. Returns whether it did (all writes or none):
    functionalizing by a second trace costs as much as the first."""
    storages = collections.defaultdict(list)        # storage -> the nodes whose value lives in it
    for node in traced.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            storages[_storage(val)].append(node)
    order = {node: i for i, node in enumerate(traced.graph.nodes)}
    plans = []
    for node in traced.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                node.target._schema.is_mutable:
            functional = _out_of_place_form(node, storages, order)
            if functional is None:
                return False
            plans.append((node, functional))
    for node, (op, val) in plans:
        with traced.graph.inserting_before(node):
            new = traced.graph.call_function(op, node.args, node.kwargs)
        new.meta = {**node.meta, "val": val}
        written = node.args[0]
        node.replace_all_uses_with(new)
        for user in list(written.users):
            if user is not new and order.get(user, len(order)) > order[node]:
                user.replace_input_with(written, new)
        order[new] = order[node]
        traced.graph.erase_node(node)
    _revalue_views(traced)
    traced.recompile()
    return True


def _revalue_views(gm):
    """A view now read from an out-of-place result still holds the first trace's value, a view of the
    written tensor's memory: its value is taken again from the new one (later passes tell aliases by
    storage, and would read the view from the unwritten tensor), and so are the items of a view op with
    several outputs (split)."""
    revalued = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        base = node.args[0].meta.get("val")
        if node.target is operator.getitem:
            if node.args[0] in revalued:
                node.meta["val"] = base[node.args[1]]
                revalued.add(node)
            continue
        if not (_is_view(node) and isinstance(node.target, torch._ops.OpOverload) and isinstance(base, torch.Tensor)):
            continue
        val = node.meta.get("val")
        views = [val] if isinstance(val, torch.Tensor) else \
            [t for t in val if isinstance(t, torch.Tensor)] if isinstance(val, (list, tuple)) else []
        if not views or all(_storage(t) == _storage(base) for t in views):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
        with torch._guards.detect_fake_mode([base]):
            node.meta["val"] = node.target(*args, **kwargs)
        revalued.add(node)


def _functional_op(schema):
    """The out-of-place overload of an in-place op's schema (index_copy_ -> index_copy), taking the same
    arguments and returning one new tensor; None if there is none."""
    packet = getattr(aten, schema.name.split("::")[-1].rstrip("_"), None)
    op = getattr(packet, schema.overload_name or "default", None)
    if op is None or [a.name for a in op._schema.arguments] != [a.name for a in schema.arguments] or \
            len(op._schema.returns) != 1 or op._schema.returns[0].alias_info is not None:
        return None
    return op


def writes_into_inputs(traced):
    """For a graph with size symbols, whose writes a second, functionalizing trace can't take (it would put
    sizes into nodes as values): rewrites each write that is an in-place op on an input itself (a static
    KV cache's index_put_, a counter's add_), or on a tensor the graph made itself (the cache, made by full
    on the first call), into its out-of-place form, which every later read reads instead; an input's last
    value is copied into it at the end, as functionalization writes back. Only where every write is such
    an op (one argument written), on a tensor the graph takes no view of (a view taken before a write would
    see it) and no output is or views (an input's new value neither: eager returns the input), and whose
    views of a new value see no later write. Returns whether it did (all writes or none)."""
    graph = traced.graph
    nodes = list(graph.nodes)
    plans = []
    for node in nodes:
        if not _writes_in_place(node):
            continue
        schema = node.target._schema
        written = _whole(node.args[0]) if node.args else None
        op = _functional_op(schema)
        if op is None or not isinstance(written, torch.fx.Node) or not (written.op == "placeholder" or _fresh(written)) or \
                not _writes_first_argument_only(schema):
            return False
        plans.append((node, op, written))
    writes = collections.Counter(written for _, _, written in plans)
    writers = {node for node, _, _ in plans}
    held = _held_by_outputs(nodes, through_writes=False)
    if held & set(writes) or any(node in held for node, _, written in plans if written.op == "placeholder"):
        return False                    # eager returns the input itself, or a view of it
    for node, _, placeholder in plans:
        for user in node.users:
            if _is_view(user) and writes[placeholder] > 1:
                return False            # a view of one value that a later write would change
    order = {node: i for i, node in enumerate(nodes)}
    last_write = {written: order[node] for node, _, written in plans}
    written_by = {node: written for node, _, written in plans}
    if _as_strided_after_write(nodes, lambda node: [written_by[node]] if node in written_by else []):
        return False                    # its absolute offset would index the new value
    for placeholder in writes:
        if any(_is_view(user) and order[user] < last_write[placeholder] and not _only_writes(user, writers)
               for user in placeholder.users if user not in writers):
            return False                # a view taken before a write, which would see it
    fake_mode = torch._guards.detect_fake_mode([p.meta.get("val") for p in writes])
    latest = {p: p for p in writes}
    for node, op, placeholder in plans:
        args = (latest[placeholder],) + tuple(node.args[1:])
        values = torch.fx.node.map_arg((args, node.kwargs), lambda n: n.meta.get("val"))
        try:
            with fake_mode:
                val = op(*values[0], **values[1])
        except Exception:   # noqa: BLE001 -- as before: functionalization, per size
            return False
        before = placeholder.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(before, torch.Tensor) or \
                (val.dtype, val.device, [str(n) for n in val.shape]) != \
                (before.dtype, before.device, [str(n) for n in before.shape]):
            return False    # float32 x.add_(float64 y) stays float32; add(x, y) would be float64
        with graph.inserting_before(node):
            new = graph.call_function(op, args, node.kwargs)
        new.meta = {**node.meta, "val": val}
        order[new] = order[node]
        for user in list(placeholder.users):
            if user is not new and user not in writers and order[user] > order[node]:
                user.replace_input_with(placeholder, new)
        node.replace_all_uses_with(new)
        latest[placeholder] = new
    for node, _, _ in plans:
        graph.erase_node(node)
    if not _refresh_views(graph, set(latest.values()) - set(writes), fake_mode):
        return False
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        for placeholder in writes:
            if placeholder.op == "placeholder":
                copy = graph.call_function(aten.copy_.default, (placeholder, latest[placeholder]))
                copy.meta["val"] = placeholder.meta.get("val")
    traced.recompile()
    return True


def _refresh_views(graph, fresh, fake_mode):
    """Traced again on fake tensors: the views of the new values (in program order, views of views too),
    whose metas still hold the written tensor's storage (the lowering groups outputs by storage: a slice
    of a rewritten copy_ would be returned as a slice of the tensor it was copied into). False if one
    fails to trace."""
    refreshed = set(fresh)
    for node in graph.nodes:
        if node.target is operator.getitem:     # an item of a refreshed split/unbind: its new item
            base = node.args[0]
            if base in refreshed and isinstance(base.meta.get("val"), (list, tuple)):
                node.meta["val"] = base.meta["val"][node.args[1]]
                refreshed.add(node)
            continue
        if not _is_view(node) or not any(a in refreshed for a in node.all_input_nodes):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
        try:
            with fake_mode:
                node.meta["val"] = node.target(*args, **kwargs)
        except Exception:   # noqa: BLE001 -- as before: functionalization, per size
            return False
        refreshed.add(node)
    return True


def _whole(node):
    """The tensor a chain of slices covering whole dims (x[:, :] before a write through it) views, or
    node itself."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is aten.slice.Tensor:
        base = node.args[0]
        dim, start, end, step = (list(node.args[1:]) + [0, None, None, 1][len(node.args) - 1:])[:4]
        val = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
        size = val.shape[dim] if isinstance(val, torch.Tensor) else None
        if size is None or start not in (0, None) or step != 1 or not (end is None or isinstance(end, int) and (
                end >= 2 ** 62 or isinstance(size, int) and end >= size)):
            break
        node = base
    return node


def _only_writes(view, writers):
    """Whether a view's only users are writes (x[:, :] written through, read nowhere else)."""
    return all(user in writers for user in view.users)


def _fresh(node):
    """Whether node makes a tensor of its own (an op that returns no view: transformers' cache tensors
    made in the graph by full), which only the graph holds."""
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
        not node.target._schema.is_mutable and len(node.target._schema.returns) == 1 and \
        node.target._schema.returns[0].alias_info is None


def _out_of_place_form(node, storages, order):
    """(out-of-place op, its value) for an in-place op on a value that only the node making it, the writes
    on it, and views taken after the last of those writes hold (the views then read the new value: Mixtral's
    router divides its top-k weights in place, then reshapes them), with a result laid out as the value;
    else None."""
    schema = node.target._schema
    written = node.args[0] if node.args else None
    ret = schema.returns[0].alias_info if len(schema.returns) == 1 else None
    if ret is None or not ret.is_write or not isinstance(written, torch.fx.Node) or \
            not _writes_first_argument_only(schema):
        return None
    op = _functional_op(schema)
    if op is None:
        return None
    val = written.meta.get("val")
    holders = storages.get(_storage(val), []) if isinstance(val, torch.Tensor) else []
    writes = [n for n in holders if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
              and n.target._schema.is_mutable]
    makers = [n for n in holders if n not in writes]
    last_write = max(order[n] for n in writes)
    if not makers or makers[0].op != "call_function" or overlaps_itself(val) or \
            any(not (_is_view(n) and order[n] > last_write) for n in makers[1:]):
        return None
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    fake_mode = torch._guards.detect_fake_mode([val])
    try:
        with fake_mode:
            out = op(*args, **kwargs)
    except Exception:   # noqa: BLE001 -- left to functionalization
        return None
    if not isinstance(out, torch.Tensor) or (out.shape, out.stride(), out.dtype, out.device) != \
            (val.shape, val.stride(), val.dtype, val.device):
        return None
    return op, out


def _expands_as_views(gm):
    """gm with each expand that broadcasts nothing (sizes kept, or leading dims of 1 added) as the view it
    is: functionalization writes through an expand as base + sum_to(new - base), which fails for bool and
    is not the new value for floats (inf + 1 written through one reads nan), and through a view as the new
    value itself."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.expand.default:
            continue
        before, after = tuple(node.args[0].meta["val"].shape), tuple(node.meta["val"].shape)
        added = len(after) - len(before)
        if added >= 0 and after[added:] == before and all(n == 1 for n in after[:added]):
            node.target, node.args, node.kwargs = aten.view.default, (node.args[0], list(after)), {}
    gm.recompile()
    return gm


def _unfolds_as_views(gm):
    """gm with each unfold that a write goes through as slice, view, slice and permute, the same view:
    functionalization writes through an unfold as unfold_backward(new value), which is zero where no window
    reaches (`y.unfold(-1, 2, 2).mul_(2)` of a last dim of 5 zeroed y[..., 4]) and sums where windows
    overlap. Refused where the windows can't be such a chain: they overlap (a write through one window of
    them is legal in eager) or leave a gap after the last that a whole number of steps overruns."""
    written = _written_view_chains(gm)
    for node in list(gm.graph.nodes):
        if node not in written or node.target is not aten.unfold.default:
            continue
        replacement = _unfold_as_view_chain(gm, node)
        if replacement is None:
            raise Refused(f"a write through {node.name}, an unfold whose windows overlap in memory or leave an "
                          f"uneven gap (functionalization would write it back as unfold_backward, not exactly)")
        node.replace_all_uses_with(replacement)
        gm.graph.erase_node(node)
    eliminate_dead_code(gm.graph)
    gm.recompile()
    return gm


def _unfold_as_view_chain(gm, node):
    """x.unfold(d, size, step) as x[d: :m*step].view(.., m, step, ..)[d+1: :size].movedim(d+1, -1), inserted
    before node, or None where that is not the same view (windows overlap, or m*step overruns the dim)."""
    x, dim, size, step = node.args
    t = x.meta["val"]
    if t.dim() == 0:
        return None
    dim = dim % t.dim()
    length = t.shape[dim]
    windows = (length - size) // step + 1
    step = size if windows == 1 else step
    if step < size or windows * step > length:
        return None
    with gm.graph.inserting_before(node):
        cut = _call(gm, aten.slice.Tensor, (x, dim, 0, windows * step))
        shape = list(t.shape[:dim]) + [windows, step] + list(t.shape[dim + 1:])
        split = _call(gm, aten.view.default, (cut, shape))
        narrowed = _call(gm, aten.slice.Tensor, (split, dim + 1, 0, size))
        order = [i for i in range(len(shape)) if i != dim + 1] + [dim + 1]
        new = _call(gm, aten.permute.default, (narrowed, order))
    if not _same_view(new.meta["val"], node.meta["val"]):
        for n in (new, narrowed, split, cut):
            gm.graph.erase_node(n)
        return None
    return new


# view'(base) of the expand's input (added: the dims expand adds in front) for a view of the expand along
# its dim d: (op, its arguments after base), or None where base itself is it

def _select_below(base, added, d, index):
    b = d - added
    if b < 0:
        return None
    return aten.select.int, (b, 0 if base.shape[b] == 1 else index)


def _slice_below(base, added, d, start=None, end=None, step=1):
    b = d - added
    if b < 0 or base.shape[b] == 1:
        return None
    return aten.slice.Tensor, (b, start, end, step)


def _unsqueeze_below(base, added, d):
    return None if d < added else (aten.unsqueeze.default, (d - added,))


# view(expand(base, sizes), dim, ...) is expand(view'(base), sizes') for these views: per view, its dim
# normalized and the view' of base (op, args after base; None: base itself)
VIEWS_BELOW_EXPAND = {
    aten.select.int: (lambda t, d, *rest: d % t.dim(), _select_below),
    aten.slice.Tensor: (lambda t, d=0, *rest: d % t.dim(), _slice_below),
    aten.unsqueeze.default: (lambda t, d: d % (t.dim() + 1), _unsqueeze_below),
}


def _views_before_expands(gm):
    """gm with each select, slice or unsqueeze of an expand that a write goes through taken before the
    expand: `x.expand(2, *x.shape)[1] += 1` writes through x.expand(x.shape), a view, where functionalizing
    the write through a broadcasting expand would write back base + sum_to(new - base) (see
    check_writes_through_overlaps). Each rewritten view has the sizes, offset and strides (dims of one
    element aside) of the one it replaces."""
    written = _written_view_chains(gm)
    for node in list(gm.graph.nodes):
        expand = node.args[0] if node in written and node.target in VIEWS_BELOW_EXPAND else None
        if not (isinstance(expand, torch.fx.Node) and expand.target is aten.expand.default):
            continue
        replacement = _expand_of_view(gm, node, expand)
        if replacement is not None:
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
    eliminate_dead_code(gm.graph)
    gm.recompile()
    return gm


def _expand_of_view(gm, node, expand):
    """expand(view'(base)) inserted before node (a view of expand = expand(base, ...)), or None where
    that is not the same view."""
    base, big, val = expand.args[0], expand.meta["val"], node.meta["val"]
    normalize, below = VIEWS_BELOW_EXPAND[node.target]
    dim = normalize(big, *node.args[1:])
    view = below(base.meta["val"], big.dim() - base.meta["val"].dim(), dim, *node.args[2:])
    with gm.graph.inserting_before(node):
        if view is not None:
            base = _call(gm, view[0], (base,) + view[1])
        new = _call(gm, aten.expand.default, (base, list(val.shape)))
    if not _same_view(new.meta["val"], val):
        gm.graph.erase_node(new)
        if view is not None:
            gm.graph.erase_node(base)
        return None
    return new


def _call(gm, target, args):
    """A call_function node of target with its fake value computed."""
    node = gm.graph.call_function(target, args)
    values = torch.fx.node.map_arg(args, lambda n: n.meta["val"])
    with torch._guards.detect_fake_mode(torch.utils._pytree.tree_leaves(values)):
        node.meta["val"] = target(*values)
    return node


def _same_view(a, b):
    """Whether a and b view the same elements of one storage in the same order."""
    return _storage(a) == _storage(b) and a.shape == b.shape and a.storage_offset() == b.storage_offset() and \
        all(n == 1 or sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()))


def _written_view_chains(gm):
    """The nodes an in-place op writes through: its written arguments and the views they are taken of."""
    chains = set()
    for node in filter(_writes_in_place, gm.graph.nodes):
        for written in _written_args(node):
            chains.update(_view_chain(written))
    return chains


def _writes_in_place(node):
    """Whether node calls an ATen op that writes to an argument (schema annotated `(a!)`)."""
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
        node.target._schema.is_mutable


def aliases_its_argument(target):
    """Whether a call of target returns memory of its first argument: getitem (a piece of a split, chunk or
    unbind), or an ATen op whose first result is an alias (a view, or an in-place op's result)."""
    if target is operator.getitem:
        return True
    schema = getattr(target, "_schema", None)
    return schema is not None and bool(schema.returns) and schema.returns[0].alias_info is not None


def _view_chain(node):
    """node and the nodes it views, back to the one owning the memory (through in-place ops' results, and
    through getitem to the split, chunk or unbind whose piece it is)."""
    chain = [node]
    while node.op == "call_function" and aliases_its_argument(node.target) and \
            node.args and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
        chain.append(node)
    return chain


def check_writes_through_overlaps(gm):
    """Refused if a write goes through an expand that broadcasts (other than by a select, slice or
    unsqueeze that _views_before_expands takes before it): functionalization writes back through an
    expand as base + sum_to(new - base), which raises for bool, reads nan where inf was written and
    rounds 16-bit values; or through an as_strided whose elements share memory: functionalization writes
    back the whole as_strided view, each shared element once per element sharing it (eager's
    as_strided_scatter refuses that), where eager wrote a part of it (one element of `as_strided((1, 3),
    (0, 0))`)."""
    for node in filter(_writes_in_place, gm.graph.nodes):
        for written in _written_args(node):
            for view in _view_chain(written):
                if view.target is aten.expand.default:
                    raise Refused(f"{node.name} ({node.target}) writes through a broadcasting expand "
                                  f"(functionalization's write-back through it is not exact)")
                value = view.meta.get("val")
                if view.target is aten.as_strided.default and isinstance(value, torch.Tensor) and \
                        overlaps_itself(value):
                    raise Refused(f"{node.name} ({node.target}) writes through {view.name}, an as_strided "
                                  f"whose elements share memory (functionalization would write each back "
                                  f"once per element sharing it)")


def _storage(t):
    return t.untyped_storage()._cdata


def _reach(t):
    """How many elements past its first one t's last element lies (-1: t has none)."""
    if t.numel() == 0:
        return -1
    return sum(stride * (size - 1) for size, stride in zip(t.shape, t.stride()))


def _byte_range(t):
    """[start, end) of the bytes t's elements occupy in its storage (empty for no elements)."""
    start = t.storage_offset() * t.element_size()
    return start, start + (_reach(t) + 1) * t.element_size()


def overlaps_itself(t):
    """Whether two elements of t share memory (an expanded dim, or strides that interleave). Conservative:
    a layout this test can't prove free of overlap counts as overlapping."""
    if t.numel() == 0:
        return False
    reach = 0
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def _written_args(node):
    """The fx nodes that node's op writes (its schema's `(a!)` arguments)."""
    schema = node.target._schema
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        out += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.fx.Node)]
    return out


def eager_writes(traced):
    """Refused unless functionalization can express every write of the (unfunctionalized) ATen graph:
    a write into a tensor whose elements share memory (`x.expand(...).fill_()`, an expanded input's
    `index_put_`) stores several values in one place, in an order eager's kernel decides, and so does one
    that reads elements it writes through another view (`x[1:].add_(x[:-1])`); a write into a
    tensor constant or outside the memory of the input it views (as_strided), or a change of an input's
    sizes, strides or storage (t_, resize_, set_) has no write-back."""
    inputs = [n.meta["val"] for n in traced.graph.nodes
              if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)]
    constants = {_storage(n.meta["val"]) for n in traced.graph.nodes
                 if n.op == "get_attr" and isinstance(n.meta.get("val"), torch.Tensor)}
    mutating = set()
    for node in traced.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or \
                not node.target._schema.is_mutable:
            continue
        if node.target in REFUSED_WRITES:
            raise Refused(f"the graph calls {REFUSED_WRITES[node.target]}")
        mutating.add(node)
        for written in _written_args(node):
            _check_write(node, written.meta.get("val"), inputs, constants)
            _check_reads_of_written(node, written)
    input_memory = {_storage(i) for i in inputs}
    strided = _as_strided_after_write(traced.graph.nodes, lambda node: [
        w for w in (_written_args(node) if node in mutating else ())
        if isinstance(w.meta.get("val"), torch.Tensor) and _storage(w.meta["val"]) in input_memory])
    if strided is not None:
        raise Refused(f"{strided.name} takes an as_strided view of an input after the graph wrote it (its "
                      f"absolute offset would be replayed on the written value)")


def _as_strided_after_write(nodes, writes):
    """The first aten.as_strided of `nodes` (program order) whose source shares memory with a tensor an
    earlier node wrote (`writes(node)`: the written nodes that matter), or None. Functionalization, and
    writes_into_inputs, replay such a view on the written value, a new tensor whose storage starts at the
    written tensor's first element, so the view's absolute offset picks other elements than eager's (an
    input viewing its storage from element 3, written, then `x.as_strided((2,), (2,), 4)`, read the old
    values: fuzz seed 200, 20001551)."""
    written = set()
    for node in nodes:
        if node.op == "call_function" and node.target is aten.as_strided.default and \
                isinstance(node.args[0], torch.fx.Node) and isinstance(node.args[0].meta.get("val"), torch.Tensor) \
                and _storage(node.args[0].meta["val"]) in written:
            return node
        written |= {_storage(w.meta["val"]) for w in writes(node) if isinstance(w.meta.get("val"), torch.Tensor)}
    return None


def _check_write(node, t, inputs, constants):
    if not isinstance(t, torch.Tensor):
        return
    what = f"{node.name} ({node.target})"
    if overlaps_itself(t):
        raise Refused(f"{what} writes into a tensor whose elements share memory (an expanded view)")
    storage = _storage(t)
    if storage in constants:
        raise Refused(f"{what} writes into a tensor constant of the graph")
    start, end = _byte_range(t)
    sharing = [i for i in inputs if _storage(i) == storage]
    if sharing and torch.Tag.inplace_view in node.target.tags:
        raise Refused(f"{what} changes the sizes, strides or offset of an input (or a view of one) in place")
    if sharing and start < end and not any(_byte_range(i)[0] <= start and end <= _byte_range(i)[1]
                                           for i in sharing):
        raise Refused(f"{what} writes memory outside the input it views")


def _check_reads_of_written(node, written):
    """Refused where node reads, through another tensor argument, elements it writes through `written`
    that are not the same view of them (`x[1:].add_(x[:-1])`, `x.add_(x.t())`): eager raises ("some
    elements of the input tensor and the written-to tensor refer to a single memory location") or, where
    its overlap check gives up, computes in its kernel's order, reading elements it has already written;
    the functional graph would read the old values."""
    t = written.meta.get("val")
    if not isinstance(t, torch.Tensor):
        return
    args = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
    if torch.Tag.pointwise not in node.target.tags and sum(a is written for a in args) > 1:
        # the written tensor is also a source of a write that is not element by element (masked_scatter_,
        # index_put_, scatter_, index_add_, put_, an out= op reading its out): eager raises ("some elements
        # ... refer to a single memory location") or reads elements it has already written
        raise Refused(f"{node.name} ({node.target}) reads the tensor it writes as another argument: eager "
                      f"raises, or computes in its kernel's order")
    for arg in dict.fromkeys(a for a in args if isinstance(a, torch.fx.Node) and a is not written):
        other = arg.meta.get("val")
        if isinstance(other, torch.Tensor) and not _same_view(t, other) and _shares_elements(t, other):
            raise Refused(f"{node.name} ({node.target}) reads elements it writes through another view "
                          f"({arg.name}): eager raises, or computes in its kernel's order")


def _shares_elements(a, b, limit=1 << 16):
    """Whether an element of a and one of b are the same memory: exact for tensors of one dtype up to
    `limit` elements, by their byte ranges otherwise."""
    if _storage(a) != _storage(b) or a.numel() == 0 or b.numel() == 0:
        return False
    (start, end), (other_start, other_end) = _byte_range(a), _byte_range(b)
    if not (start < other_end and other_start < end):
        return False
    if a.dtype != b.dtype or a.numel() > limit or b.numel() > limit:
        return True
    return bool(torch.isin(_element_offsets(a), _element_offsets(b)).any())


def _element_offsets(t):
    """The storage offsets of t's elements."""
    offsets = torch.tensor([t.storage_offset()], dtype=torch.int64, device="cpu")
    for size, stride in zip(t.shape, t.stride()):
        offsets = (offsets[:, None] + torch.arange(size, dtype=torch.int64, device="cpu") * stride).reshape(-1)
    return offsets


def functional_writes(traced):
    """The positions of the inputs functionalization writes back (copy_ into them); Refused if the
    functional graph writes anything else."""
    position = {n: i for i, n in enumerate(n for n in traced.graph.nodes if n.op == "placeholder")}
    written = set()
    for node in traced.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or \
                not node.target._schema.is_mutable:
            continue
        target = node.args[0] if node.args else None
        if node.target is not aten.copy_.default or target not in position:
            raise Refused(f"functionalization left a write: {node.name} ({node.target})")
        written.add(position[target])
    return written


def check_written_inputs(written, example_inputs):
    """Refused if an input the graph writes overlaps itself or shares memory with another input: each is
    written back whole, as a tensor of its own, so a read of the other input (or of its own other
    elements) in the graph misses the write. The compiled graph checks the same per call (the wrapper's
    disjoint-inputs check)."""
    tensors = [(i, t) for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)]
    for position in written:
        t = example_inputs[position]
        if overlaps_itself(t):
            raise Refused(f"input {position} is written and its elements share memory (an expanded view)")
        memory, lo, hi = memory_span(t)
        for other, u in tensors:
            other_memory, ulo, uhi = memory_span(u)
            if other != position and memory == other_memory and lo < uhi and ulo < hi:
                raise Refused(f"input {position} is written and shares memory with input {other}")


def memory_span(t):
    """(memory, first, last + 1) of t's elements' bytes (an empty range for none). A real tensor's are
    addresses in one memory (None); a fake tensor (AOTAutograd's compilers get fake example inputs) has
    no addresses: its bytes are offsets into its storage, which is the memory."""
    if t.numel() == 0:
        return None, 0, 0
    if isinstance(t, torch._subclasses.FakeTensor):
        memory, start = t.untyped_storage()._cdata, t.storage_offset() * t.element_size()
    else:
        memory, start = None, t.data_ptr()
    return memory, start, start + (_reach(t) + 1) * t.element_size()


def output_aliases(eager, functional, written):
    """Per output leaf of the functional graph: None where it returns what eager returns, else how to make
    eager's output from the graph's inputs: ("input", i) where eager returns input i itself, ("view", i,
    sizes, strides, offset) where it returns a view of input i (offset: elements past input i's own).
    That is the case for an output that is, or views, an input the graph writes: the functional graph
    computes a new tensor with its values, eager returns the input. Refused where the functional graph
    returns a view of an input that eager's output is not, or eager's view cannot be rebuilt from an input
    (it reaches memory outside any one input, or as_strided made it: its offset is absolute)."""
    eager_ins = [n.meta.get("val") for n in eager.graph.nodes if n.op == "placeholder"]
    functional_ins = [n.meta.get("val") for n in functional.graph.nodes if n.op == "placeholder"]
    eager_nodes = _output_nodes(eager)
    eager_outs = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in eager_nodes]
    functional_outs = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None
                       for a in _output_nodes(functional)]
    positions = {n: i for i, n in enumerate(n for n in eager.graph.nodes if n.op == "placeholder")}
    strided = any(n.op == "call_function" and n.target in (aten.as_strided.default, aten.as_strided_.default)
                  for n in eager.graph.nodes)
    aliases = []
    for k, (e, f) in enumerate(zip(eager_outs, functional_outs)):
        eager_views = _viewed_inputs(e, eager_ins)
        functional_views = _viewed_inputs(f, functional_ins)
        if functional_views - eager_views:
            raise Refused(f"output {k} is a view of an input in the compiled graph, not in eager")
        if not eager_views or (eager_views & functional_views and not eager_views & written):
            aliases.append(None)
            continue
        same = positions.get(_written_through(eager_nodes[k]))
        aliases.append(("input", same) if same is not None else _rebuild(k, e, eager_ins, strided))
    return aliases if any(a is not None for a in aliases) else None


def _output_nodes(gm):
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    return torch.utils._pytree.tree_leaves(output.args[0])


def _written_through(node):
    """The node whose tensor node is: an in-place op (or an out= one) returns the tensor it wrote."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            isinstance(node.target, torch._ops.OpOverload):
        schema = node.target._schema
        ret = schema.returns[0].alias_info if len(schema.returns) == 1 else None
        if ret is None or not ret.is_write:
            break
        args = [n for i, a in enumerate(schema.arguments) if a.alias_info is not None and
                a.alias_info.before_set == ret.before_set
                for n in [node.args[i] if i < len(node.args) else node.kwargs.get(a.name)]]
        if len(args) != 1:
            break
        node = args[0]
    return node


def _viewed_inputs(t, inputs):
    """Positions of the inputs whose storage t shares."""
    if not isinstance(t, torch.Tensor):
        return set()
    storage = _storage(t)
    return {i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and _storage(x) == storage}


def _rebuild(k, t, inputs, strided):
    if strided:
        raise Refused(f"output {k} views a written input through as_strided (an absolute offset)")
    start, end = _byte_range(t)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and _storage(x) == _storage(t) and x.dtype == t.dtype:
            lo, hi = _byte_range(x)
            if lo <= start and end <= hi:
                return ("view", i, tuple(t.shape), tuple(t.stride()), t.storage_offset() - x.storage_offset())
    raise Refused(f"output {k} views memory of the inputs that no single input covers")


# Indexing ops whose kernels check each index they read, where eager checks them all: op -> its arguments
# -> (the indexed tensor, the index, the indexed dim)
INDEX_READS = {
    aten.gather.default: lambda x, dim, index, *_: (x, index, dim),
    aten.index_select.default: lambda x, dim, index: (x, index, dim),
    aten.embedding.default: lambda weight, indices, *_: (weight, indices, 0),
}

# Ops that read every element of their arguments and keep their result in memory (a lazy pointwise
# value may be read in part by what reads it; these are computed whole), besides reductions and extern ops
READS_WHOLE = {aten.native_layer_norm.default, aten.native_group_norm.default, aten._softmax.default,
               aten._log_softmax.default}

def _check_indices(inside, message):
    """Raises IndexError(message) unless the 0-d bool `inside` holds: eager's CPU indexing kernels raise
    IndexError for an index out of range, where aten._assert_async raises RuntimeError."""
    if not bool(inside):
        raise IndexError(message)


# graphjit::check_indices, defined through a Library rather than torch.library.custom_op: custom_op's fake
# registration records its caller's file and line through inspect.getframeinfo, whose first call in a
# process walks every loaded module (40-60 ms with transformers imported, on every cold and warm start).
_LIBRARY = torch.library.Library("graphjit", "FRAGMENT")
_LIBRARY.define("check_indices(Tensor inside, str message) -> ()")
_LIBRARY.impl("check_indices", _check_indices, "CompositeExplicitAutograd")
_LIBRARY.impl("check_indices", lambda inside, message: None, "Meta")
torch.fx.node.has_side_effect(torch.ops.graphjit.check_indices.default)


def _random_seeds(count, device):
    """`count` seeds drawn from torch's generator for `device`, one for each random op of a compiled graph
    (lowering._random_seed): row i's first element is op i's, each row 16 bytes apart, aligned as Triton
    assumes of the pointers it compiled a shared kernel for."""
    return torch.randint(0, 2 ** 63 - 1, (count, 2), dtype=torch.int64, device=device)


_LIBRARY.define("random_seeds(int count, Device device) -> Tensor")
_LIBRARY.impl("random_seeds", _random_seeds, "CompositeExplicitAutograd")
_LIBRARY.impl("random_seeds", lambda count, device: torch.empty(count, 2, dtype=torch.int64, device="meta"), "Meta")

# Checks that return nothing and raise eager's error (the compiled graph runs them as ATen calls)
RUNTIME_CHECKS = (aten._assert_async.msg, aten._assert_async.default, torch.ops.graphjit.check_indices.default)

# Ops that return a view of every element of their argument
VIEWS_WHOLE = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.t.default,
    aten.transpose.int, aten.alias.default,
}


def check_indices_read_in_part(gm):
    """Adds a runtime check of every index to each indexing op (INDEX_READS, advanced indexing) whose
    result is read in part: its kernel checks only the indices of the elements that are read
    (`index_select(x, 0, i)[:1] * 2` read one index), where eager raises for any index out of range. Not on
    a GPU where config.triton_check_indices turns index checks off. Likewise a check of every divisor of
    an integer division on the CPU read in part or not at all (`(x // y)[0]`: eager's ZeroDivisionError)."""
    from .. import config
    whole = {}      # node -> whether every element of its value is read
    for node in reversed(gm.graph.nodes):
        whole[node] = bool(node.users) and all(_reads_whole(user, whole) for user in node.users)
    for node in list(gm.graph.nodes):
        for x, index, dim in [] if whole[node] else _indexed(node):
            if index.meta["val"].device.type != "cpu" and config.triton_check_indices == 0:
                continue
            error, negative = _eager_index_rule(node.target, dim, x.meta["val"].dim())
            with gm.graph.inserting_before(node.next):
                if dim is None:         # put: an index into the flattened tensor
                    size = x.meta["val"].numel()
                    if isinstance(size, torch.SymInt):
                        continue
                    x, dim = _call(gm, aten.reshape.default, (x, [-1])), 0
                else:
                    size = x.meta["val"].shape[dim]
                _insert_range_check(gm, x, index, dim, size, -size if negative else 0, error)
        divisor = None if whole[node] else _integer_divisor(node)
        if divisor is not None:
            # an integer division read in part, or not at all: its kernel checks only the divisors of the
            # elements it computes, where eager's CPU kernel raises for any 0 (CUDA's divides unchecked)
            with gm.graph.inserting_before(node.next):
                nonzero = _call(gm, aten.all.default, (_call(gm, aten.ne.Scalar, (divisor, 0)),))
                gm.graph.call_function(aten._assert_async.msg, (nonzero, "ZeroDivisionError"))


_INTEGER_DIVISIONS = {aten.div.Tensor_mode, aten.floor_divide.default, aten.remainder.Tensor, aten.fmod.Tensor}


def _integer_divisor(node):
    """The divisor node of an integer division on the CPU (floor, trunc, remainder, fmod), else None."""
    if node.op != "call_function" or node.target not in _INTEGER_DIVISIONS or len(node.args) < 2:
        return None
    if node.target is aten.div.Tensor_mode and node.kwargs.get("rounding_mode") is None:
        return None
    value, divisor = node.meta.get("val"), node.args[1]
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype.is_complex or \
            value.dtype == torch.bool or value.device.type != "cpu" or not isinstance(divisor, torch.fx.Node) or \
            not isinstance(divisor.meta.get("val"), torch.Tensor):
        return None
    return divisor


# Index writes (functional, as decompose's graph holds them): (tensor written, index, dim) of each index;
# dim None: put's index into the flattened tensor. A write whose result is not read is removed as dead
# code, and one read in part computes only that part: eager checks every index.
def _along_dim(x, dim, index, *_, **__):
    return [(x, index, dim)]


INDEX_WRITES = {op: _along_dim for op in (
    aten.index_add.default, aten.index_copy.default, aten.index_fill.int_Scalar, aten.index_fill.int_Tensor,
    aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce, aten.scatter_add.default,
    aten.scatter_reduce.two)}
INDEX_WRITES[aten.put.default] = lambda x, index, *_, **__: [(x, index, None)]
INDEX_WRITES[aten.index_put.default] = lambda x, indices, *_, **__: _index_dims(x, indices)


def _index_dims(x, indices):
    """(x, index, dim) of each index of advanced indexing: a bool or uint8 mask covers as many dims as it has."""
    found, d = [], 0
    for index in indices:
        value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        found.append((x, index, d))
        d += value.dim() if isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8) else 1
    return found


def _indexed(node):
    """(indexed tensor, index, dim) of each integer index an indexing node reads or writes through."""
    if node.target in INDEX_READS:
        x, index, dim = INDEX_READS[node.target](*node.args)
        return [(x, index, dim % max(x.meta["val"].dim(), 1))]
    if node.target is aten.index.Tensor:
        found = _index_dims(node.args[0], node.args[1])
    elif node.target in INDEX_WRITES:
        found = INDEX_WRITES[node.target](*node.args, **node.kwargs)
        # (a 0-d tensor has no dim to check against: its kernels take index 0 and -1)
        found = [(x, index, d if d is None else d % x.meta["val"].dim()) for x, index, d in found
                 if d is None or x.meta["val"].dim() > 0]
    else:
        return []
    return [(x, index, d) for x, index, d in found
            if isinstance(index, torch.fx.Node) and isinstance(index.meta.get("val"), torch.Tensor) and
            not index.meta["val"].dtype.is_floating_point and index.meta["val"].dtype not in (torch.bool, torch.uint8)]


@functools.lru_cache(maxsize=None)
def _eager_index_rule(target, dim, ndim):
    """(the exception class eager's CPU kernel of an indexing op along `dim` of an `ndim`-d tensor raises for
    an index out of range, whether it takes a negative index from the end), found by running the op on
    probes: the class differs between ops, dims and torch versions (on torch 2.13 index_select raises
    IndexError along dim 0 and RuntimeError along dim 1; index_put_ takes -1, index_add_ refuses it). On the
    CPU whatever the default device (on a GPU, under `torch.device("cuda")`, the bad index would fail a
    device-side assert, which ends the process's CUDA context)."""
    cpu = torch.device("cpu")
    x = torch.zeros((2,) * max(ndim, 1), device=cpu)
    d = 0 if dim is None else dim
    rows = [1 if k == d else 2 for k in range(x.dim())]

    def probe(i):
        index = torch.tensor([i], device=cpu)
        full = torch.full(rows, i, device=cpu)
        one = torch.zeros(rows, device=cpu)
        return {aten.gather.default: lambda: (x, d, full),
                aten.index_select.default: lambda: (x, d, index),
                aten.embedding.default: lambda: (torch.zeros(2, 2, device=cpu), index),
                aten.index.Tensor: lambda: (x, [None] * d + [index]),
                aten.index_put.default: lambda: (x, [None] * d + [index], torch.tensor(1.0, device=cpu)),
                aten.index_add.default: lambda: (x, d, index, one),
                aten.index_copy.default: lambda: (x, d, index, one),
                aten.index_fill.int_Scalar: lambda: (x, d, index, 1.0),
                aten.index_fill.int_Tensor: lambda: (x, d, index, torch.tensor(1.0, device=cpu)),
                aten.scatter.src: lambda: (x, d, full, one),
                aten.scatter.value: lambda: (x, d, full, 1.0),
                aten.scatter.reduce: lambda: (x, d, full, one, "add"),
                aten.scatter.value_reduce: lambda: (x, d, full, 1.0, "add"),
                aten.scatter_add.default: lambda: (x, d, full, one),
                aten.scatter_reduce.two: lambda: (x, d, full, one, "sum"),
                aten.put.default: lambda: (x, index, torch.ones(1, device=cpu))}[target]()

    def raised(i):
        try:
            target(*probe(i))
        except IndexError:
            return IndexError
        except Exception:   # noqa: BLE001 -- RuntimeError, as _assert_async raises
            return RuntimeError
        return None
    return raised(1 << 20) or RuntimeError, raised(-1) is None     # out of range in any dim, and flattened


def _insert_range_check(gm, x, index, dim, size, low, error=RuntimeError):
    """A check that all(low <= index < size) at the insertion point (size: the indexed dim's size),
    raising `error` on the CPU."""
    if isinstance(size, torch.SymInt):
        size = _call(gm, aten.sym_size.int, (x, dim))
        low = 0 if isinstance(low, int) and low == 0 else _call(gm, operator.neg, (size,))
    above = _call(gm, aten.ge.Scalar, (index, low))
    below = _call(gm, aten.lt.Scalar, (index, size))
    inside = _call(gm, aten.logical_and.default, (above, below))
    # CPU: IndexError, as eager's kernels raise (a synchronous check costs nothing there); on a GPU eager's
    # kernels assert on the device, and so does _assert_async, without waiting for the GPU
    check = torch.ops.graphjit.check_indices.default if index.meta["val"].device.type == "cpu" and \
        error is IndexError else aten._assert_async.msg
    gm.graph.call_function(check, (_call(gm, aten.all.default, (inside,)), "index out of range in self"))


def _reads_whole(user, whole):
    """Whether user reads every element of its arguments: it is the output, reads them all and keeps its
    result (READS_WHOLE, a reduction, an extern op), or is a pointwise op or a whole view whose own value
    is read whole."""
    from .lowering import EXTERN_OPS
    target = user.target
    if user.op == "output":
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target in READS_WHOLE or target in EXTERN_OPS or torch.Tag.reduction in target.tags:
        return True
    passes = target in VIEWS_WHOLE or torch.Tag.pointwise in target.tags
    return passes and not _drops_elements(user) and whole[user]


def _drops_elements(node):
    """Whether node's value has no elements where one of its tensor arguments may have some (a broadcast
    to an empty shape)."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and _empty(val) and any(
        isinstance(a.meta.get("val"), torch.Tensor) and not _empty(a.meta["val"]) for a in node.all_input_nodes)


def _empty(t):
    """Whether t is known to have no elements (a symbolic count is not known)."""
    count = t.numel()
    return isinstance(count, int) and count == 0


# Ops returning a copy of `self` with a part written: torch 2.11's meta functions lay the result out as
# `self` even where self's elements share memory (an expand); the kernels return a dense tensor.
SCATTERS = {aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default}


def _dense_scatter_values(gm):
    """Gives each scatter into an expanded tensor the dense value its kernel returns (SCATTERS): what reads
    it (kernels, the layout a fallback's result is copied into) indexes it with its traced strides."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.target in SCATTERS and isinstance(val, torch.Tensor) and overlaps_itself(val):
            with torch._guards.detect_fake_mode([val]):
                node.meta["val"] = torch.empty(val.shape, dtype=val.dtype, device=val.device)


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
        if target in RUNTIME_CHECKS:
            gm.graph.erase_node(node)          # it passed on constants: it passes on every call
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


def channels_last_convolutions(traced):
    """traced (an inference ATen graph, static sizes) with its 2-D convolutions computed in channels-last
    memory: each convolution whose input is 4-D and not already channels-last reads a channels-last copy of
    it, the values recomputed by fake propagation (so the ops after a convolution lay out their results as
    eager lays out ops on channels-last tensors, and the next convolution's input needs no copy), and each
    output whose strides changed is copied back into eager's. cuDNN converts an NCHW input and its output
    for each call otherwise (SD-1.5's UNet: 101 conversions, 3 ms a step on the H100). Leaves traced as it
    was and returns False where nothing is converted, the graph reads layouts (LAYOUT_READERS), an output
    is memory of another value, or an output's eager layout is neither contiguous nor channels-last."""
    graph = traced.graph
    convs = [n for n in graph.nodes if n.op == "call_function" and n.target is aten.convolution.default
             and _converts(n)]
    if not convs or any(n.op == "call_function" and n.target in LAYOUT_READERS for n in graph.nodes):
        return False
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("val") for n in placeholders]
    mode = torch._guards.detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
    output = next(n for n in graph.nodes if n.op == "output")
    leaves = [a for a in torch.utils._pytree.tree_leaves(output.args) if isinstance(a, torch.fx.Node)]
    if any(_returns_an_alias(leaf) for leaf in leaves):
        # an output that is memory of another value (a view, a chunk) would come back as a copy: its
        # storage, offset and sharing with other outputs would not be eager's
        return False
    before = {n: n.meta.get("val") for n in graph.nodes}
    added, copies = [], {}
    for conv in convs:
        if conv.args[0] not in copies:      # one copy of an input several convolutions read, before the first
            with graph.inserting_before(conv):
                copies[conv.args[0]] = graph.call_function(aten.clone.default, (conv.args[0],),
                                                           {"memory_format": torch.channels_last})
            added.append(copies[conv.args[0]])
        conv.replace_input_with(conv.args[0], copies[conv.args[0]])

    def undo():
        for copy in added:
            copy.replace_all_uses_with(copy.args[0])
            graph.erase_node(copy)
        for node, meta in before.items():
            if meta is not None:
                node.meta["val"] = meta
        return False
    try:
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp
        with torch.no_grad(), logs.quiet_meta_failures():     # no traceback printed for an op that refuses
            FakeTensorProp(traced, mode).propagate_dont_convert_inputs(*values)
    except Exception as e:      # noqa: BLE001 -- an op fake propagation can't rerun: eager's layouts
        logs.log("fusion", f"channels-last convolutions not used: fake propagation failed ({e})")
        return undo()
    restore = {}
    for leaf in leaves:
        meta = leaf.meta.get("val")
        if not isinstance(meta, torch.Tensor) or meta.stride() == before[leaf].stride():
            continue
        eager = before[leaf]
        if eager.is_contiguous():
            restore[leaf] = torch.contiguous_format
        elif eager.dim() == 4 and eager.is_contiguous(memory_format=torch.channels_last):
            restore[leaf] = torch.channels_last
        else:
            return undo()
    for leaf, fmt in restore.items():
        with graph.inserting_before(output):
            back = graph.call_function(aten.clone.default, (leaf,), {"memory_format": fmt})
        eager = before[leaf]
        with mode, torch.no_grad():     # eager's exact strides (size-1 dims too): the buffer is stored in them
            back.meta["val"] = torch.empty_strided(eager.shape, eager.stride(), dtype=eager.dtype,
                                                   device=eager.device)
        output.replace_input_with(leaf, back)
    merge_repeated_ops(traced)      # convolutions of one input now read one copy
    traced.recompile()
    return True


# ops whose result depends on the strides of their input's memory, not only on its values
LAYOUT_READERS = {aten.as_strided.default, aten.as_strided_.default, aten.as_strided_scatter.default,
                  aten.view.dtype}


def _returns_an_alias(node):
    """Whether an output node's value is memory of another value: a view op's result, or an item of one
    (split, chunk, unbind)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return isinstance(node.args[0], torch.fx.Node) and _is_view(node.args[0])
    return _is_view(node)


def _converts(conv):
    """Whether a convolution node is one channels_last_convolutions converts: 2-D, not transposed, one
    group (cuDNN's grouped and depthwise kernels are not all faster channels-last), floating, its input
    not channels-last already."""
    x, weight = conv.args[0], conv.args[1]
    meta, weight_meta = x.meta.get("val"), weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    transposed, groups = conv.args[6], conv.args[8]
    if not isinstance(meta, torch.Tensor) or not isinstance(weight_meta, torch.Tensor) or meta.dim() != 4 or \
            transposed or groups != 1 or not meta.is_floating_point():
        return False
    if any(not isinstance(s, int) for s in (*meta.shape, *meta.stride())):
        return False
    return not meta.is_contiguous(memory_format=torch.channels_last)
