"""ATen graph -> LoopGraph: one lowering per ATen op, looked up in a table.

A lowering takes IR values (Pointwise or StorageView) and Python arguments and returns IR values. Most
return lazy Pointwise values, which later readers inline; reductions are computed into buffers; extern
ops (mm, convolution, attention) and ops without a lowering become ExternKernels that call ATen.

    @register(aten.exp.default)
    def exp(x): return unary("exp", x)

Whether a lazy value read by several ops is computed once into a buffer is the scheduler's policy
(scheduler.realize_reason); this file only applies it.
"""
import functools
import math
import operator

import sympy
import torch
import torch.fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch.utils import _pytree as pytree

from .. import logs
from .. import config
from . import scheduler
from .decompose import RUNTIME_CHECKS, aliases_its_argument
from .ir import (SizeFloat, StaticOnly, guard_bool, is_one, is_static, size_hint, static_int, sym_max, sym_min)
from .ir import FloorDiv, Mod
from .ir import (ComputedBuffer, ExternKernel, ExternOutput, InputBuffer, Layout, LoopGraph, Pointwise,
                 Reduction, StorageView, as_expr, broadcast_index, contiguous_strides, full_view, is_value, linear_index,
                 ops, product, reduction_identity, view_as_strided, view_expand, view_permute, view_reshape,
                 view_select, view_slice, view_squeeze, view_unsqueeze, wrap_int)

aten = torch.ops.aten

LOWERINGS = {}            # OpOverload -> lowering function

# Ops always run as ATen calls (library kernels beat generated loops here), never lowered to loops.
EXTERN_OPS = {
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.convolution.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
}

# dtypes the C++ codegen computes on; other dtypes (complex, float8 ...) go through extern calls.
SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool}

# ops whose eager kernels have no bool implementation (abs of a bool tensor raises "abs_cpu" not implemented
# for 'Bool'; trunc division of booleans likewise): with a bool result they run as ATen calls, which raise
# where eager raises (a generated loop would compute a value)
NO_BOOL_KERNEL = {aten.abs.default, aten.floor.default, aten.ceil.default, aten.round.default, aten.round.decimals,
                  aten.trunc.default, aten.div.Tensor_mode, aten.div.Scalar_mode, aten.remainder.Tensor,
                  aten.remainder.Scalar, aten.remainder.Scalar_Tensor, aten.relu.default, aten.sub.Tensor,
                  aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar}


# the graph's operations on Python numbers that a SizeFloat's steps replay: target -> its Python text
_FLOAT_OPERATORS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
                    operator.pow: "**", operator.floordiv: "//", operator.mod: "%"}
# torch.sym_float, and torch's symbolic math functions (torch._sym_cos ...) as the math module's
_FLOAT_FUNCTIONS = {torch.sym_float: "float", **{
    getattr(torch, name): f"math.{name[len('_sym_'):]}" for name in dir(torch)
    if name.startswith("_sym_") and callable(getattr(math, name[len("_sym_"):], None))}}


def float_steps(target, args, kwargs):
    """A float node's operation over its lowered arguments, as a tree the wrapper prints in the graph's
    order: ("op", text, a, b), ("neg", a), ("call", name, a), ("size", int expression), ("float", the
    ShapeEnv's expression of a float without steps) or ("const", value);
    None for an operation not listed (the wrapper then prints the ShapeEnv's expression)."""
    def leaf(value):
        if isinstance(value, SizeFloat):
            return value.steps if value.steps is not None else ("float", value.expr)
        if isinstance(value, sympy.Expr):
            return ("size", value)
        if type(value) in (int, float, bool):
            return ("const", value)
        return None
    if kwargs:
        return None
    leaves = [leaf(a) for a in args]
    if any(l is None for l in leaves):
        return None
    if target in _FLOAT_OPERATORS and len(leaves) == 2:
        return ("op", _FLOAT_OPERATORS[target], *leaves)
    if target is operator.neg and len(leaves) == 1:
        return ("neg", leaves[0])
    if target in _FLOAT_FUNCTIONS and len(leaves) == 1:
        return ("call", _FLOAT_FUNCTIONS[target], leaves[0])
    return None


class NotLowered(Exception):
    """Raised by a lowering for an argument combination it does not handle: the op becomes an extern call."""


def register(*targets):
    def decorate(fn):
        for target in targets:
            LOWERINGS[target] = fn
        return fn
    return decorate


def overloads(packet, names=("default", "Tensor", "Scalar")):
    return [getattr(packet, n) for n in names if n in packet.overloads()]


# ---------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------


class Slot:
    """The value of one fx node while lowering. realize() swaps a lazy value for a buffer in place, so
    every reader from then on loads the buffer instead of recomputing the value."""

    def __init__(self, value, node):
        self.value = value
        self.node = node
        self._reason = None

    def current(self):
        """The value, as stored as it has become: a lazy value realized meanwhile (through another reader,
        another Slot holding it, or a view of it that an extern call needed) reads its buffer from now on."""
        self.value = current_value(self.value)
        return self.value

    def realize_reason(self):
        if self._reason is None:
            self._reason = scheduler.realize_reason(self.value, len(self.node.users)) or ""
        return self._reason


_current = []   # the fx node being lowered (innermost last)
# Ops whose lowering reads its input in several loops over each row (statistics, then the output)
ROW_NORMALIZATIONS = {aten.native_layer_norm.default, aten._softmax.default, aten._log_softmax.default}


def size_value(expr):
    """ops value of a size: a constant, or an index expression over the size symbols."""
    expr = as_expr(expr)
    return ops.constant(int(expr), torch.int64) if expr.is_Integer else ops.index_expr(expr, torch.int64)


def out_meta():
    """The fake tensor (or tuple of them) that the node being lowered produces (None for a node that
    returns nothing: a runtime check)."""
    return _current[-1].meta.get("val")


class Lowering(torch.fx.Interpreter):
    """Walks the ATen graph, building a LoopGraph."""

    def __init__(self, gm, example_inputs):
        super().__init__(gm)
        self.loops = LoopGraph()
        self.example_inputs = example_inputs
        self._inputs = iter(range(len(example_inputs)))
        self._input_writes = []     # (fx node, args, kwargs) of copy_ into graph inputs, run after the outputs
        self._slots = {}            # fx node -> its Slot (the Interpreter's env drops a node after its last use)
        # storage of an output's traced value -> the Slot of the first node holding it (its owner, once run)
        self._owners = dict.fromkeys(_storage(m) for m in _output_metas(gm.graph) if isinstance(m, torch.Tensor))
        self._returned = {leaf for leaf in _output_leaves(gm.graph) if isinstance(leaf, torch.fx.Node)}

    def run_node(self, n):
        _current.append(n)
        try:
            result = super().run_node(n)
        finally:
            _current.pop()
        if isinstance(result, Slot):
            # getitem of a multi-output op (native_layer_norm ...): a Slot of its own, so that the policy
            # counts this element's readers (the op node's users are just its getitems)
            result = Slot(result.value, n)
        else:
            result = pytree.tree_map(lambda v: Slot(v, n) if is_value(v) else v, result)
        meta = n.meta.get("val")
        if isinstance(result, Slot):
            self._slots[n] = result
            if isinstance(result.value, Pointwise) and result.value.node is None:
                result.value.node = n
            if isinstance(meta, torch.Tensor):
                storage = _storage(meta)
                if storage in self._owners and self._owners[storage] is None:
                    self._owners[storage] = result
        return result

    def placeholder(self, target, args, kwargs):
        position = next(self._inputs)
        meta = _current[-1].meta.get("val")
        if not _current[-1].users and not isinstance(meta, (torch.Tensor, torch.SymInt, torch.SymFloat)):
            self.loops.unread_inputs.append(position)   # a number a per-size copy has built in
            return None
        if isinstance(meta, torch.SymInt):       # a size the caller passes as an int
            expr = as_expr(meta)
            self.loops.size_inputs.append((position, expr))
            return expr
        if isinstance(meta, torch.SymFloat):     # a float that changes between calls: extern calls read it
            expr = meta.node.expr
            self.loops.size_inputs.append((position, expr))
            return SizeFloat(expr)
        if not isinstance(meta, torch.Tensor):
            raise NotLowered(f"graph input {position} is a {type(meta).__name__}")
        buf = InputBuffer(f"arg{position}", Layout.of(meta), position=position)
        self.loops.inputs.append(buf)
        return full_view(buf)

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if not isinstance(value, torch.Tensor):
            return value
        buf = InputBuffer(self.loops.new_name("const"), Layout.of(value), value=value)
        self.loops.inputs.append(buf)
        return full_view(buf)

    def call_function(self, target, args, kwargs):
        if target is operator.getitem:
            return args[0][args[1]]
        meta = _current[-1].meta.get("val")
        if isinstance(meta, torch.SymInt):           # size arithmetic (sym_size, mul ...): its expression
            return as_expr(meta)
        if isinstance(meta, torch.SymFloat):         # a scale from sizes: for extern calls' arguments
            return SizeFloat(meta.node.expr, float_steps(target, args, kwargs))
        if isinstance(meta, torch.SymBool):
            raise StaticOnly(f"{target} computes a SymBool from sizes")
        if target is aten.copy_.default:
            # functionalization writes mutated inputs back last (copy_(input, new value)); lazy values that
            # read the input's old contents are computed later, when their readers realize them, so the
            # write waits until the outputs are computed. A write into anything else (a slice of a value
            # the graph made) would be lost: the compile fails rather than drop it.
            dest = _current[-1].args[0]
            if not isinstance(dest, torch.fx.Node) or dest.op != "placeholder":
                raise NotLowered(f"copy_ into {dest}, not into a graph input: a write the functional graph "
                                 "should not have")
            self._input_writes.append((_current[-1], args, kwargs))
            return args[0]
        if target in RUNTIME_CHECKS:
            # a check a decomposition adds where sizes are symbolic (one_hot's `all(x >= 0)`): ATen's op
            # raises eager's error; it returns nothing, so nothing fuses with it
            return self._extern(target, args, kwargs, "extern op")
        empty = _without_elements(out_meta())
        if empty is not None:
            if _eager_refuses_empty(target, _current[-1]):
                # eager's kernel raises for these inputs (a dtype it does not take): the ATen op raises it
                return self._extern(target, args, kwargs, "eager's kernel raises for these inputs")
            return empty
        if target is aten.convolution.default and _splits_bias(args):
            return self._convolution_then_bias(args, kwargs)
        lowering = LOWERINGS.get(target)
        reason = self._refusal(target, lowering, args, kwargs)
        if reason is None:
            try:
                values, kwvalues = self._unwrap(args), self._unwrap(kwargs)
                operands = pytree.tree_leaves((values, kwvalues))
                return pytree.tree_map(lambda v: _held_in_dtype(v, operands), lowering(*values, **kwvalues))
            except NotLowered as e:
                reason = f"no lowering for this call: {e}"
        return self._extern(target, args, kwargs, reason)

    def _convolution_then_bias(self, args, kwargs):
        """A convolution with a bias, in Triton: the library convolution without it, then the bias added as
        a lazy pointwise value that fuses into what reads the result. Eager's CUDA convolution adds its
        bias in a kernel of its own after cuDNN's (in float32 for 16-bit tensors, rounded once), which
        this computes alike, one pass over the output fewer (98 launches a step of the SD-1.5 UNet)."""
        bias = args[2]
        out = self._extern(aten.convolution.default, (*args[:2], None, *args[3:]), kwargs, "extern op")
        meta = out_meta()
        acc = torch.float32 if meta.dtype in (torch.float16, torch.bfloat16) else meta.dtype
        per_channel = [meta.shape[1]] + [1] * (meta.dim() - 2)
        (bias,) = self._unwrap([bias])
        return make_pointwise(ops.add, out, view_reshape(bias, per_channel), dtype=meta.dtype, compute_dtype=acc)

    def _refusal(self, target, lowering, args, kwargs):
        if target in EXTERN_OPS:
            return "extern op"
        if lowering is None:
            return "no lowering"
        if any(isinstance(a, SizeFloat) for a in pytree.tree_leaves((args, kwargs))):
            return "a float computed from size symbols"
        dtypes = [v.dtype for v in pytree.tree_leaves(out_meta()) if isinstance(v, torch.Tensor)]
        dtypes += [s.value.dtype for s in pytree.tree_leaves((args, kwargs)) if isinstance(s, Slot)]
        bad = sorted({str(d) for d in dtypes if d not in SUPPORTED_DTYPES})
        if bad:
            return f"dtype {', '.join(bad)} not supported by the C++ codegen"
        if target in NO_BOOL_KERNEL and torch.bool in dtypes:
            return "eager's kernel has no bool implementation: the ATen call raises as eager does"
        return None

    def _unwrap(self, tree):
        """Slots -> values; a lazy value that the scheduler's policy says to compute once is realized."""
        def unwrap(slot):
            if not isinstance(slot, Slot):
                return slot
            slot.current()
            reason = slot.realize_reason() if isinstance(slot.value, Pointwise) else None
            if isinstance(slot.value, Pointwise) and not reason and slot.node in self._returned and \
                    self.loops.autograd and _current and _current[-1].target in ROW_NORMALIZATIONS:
                # stored anyway: the normalization's loops read it back and the scheduler puts its store in
                # their first loop. Recomputed there, a training forward stored each residual sum that
                # feeds a layer_norm (saved for the backward) in one kernel of its own beside the per-row
                # statistics the backward reads (BERT: 0.16-0.21 ms a step of 4 ms of kernels)
                reason = "a graph output a row normalization reads (training)"
            if reason:
                logs.log("fusion", f"realize {slot.node.name}: {reason}")
                slot.value = realize(slot.value, self.loops, _buffer_strides(slot.node))
            return slot.value
        return pytree.tree_map(unwrap, tree)

    def _realized(self, tree):
        """Slots -> StorageViews (extern calls need tensors in memory)."""
        def unwrap(slot):
            if not isinstance(slot, Slot):
                return slot
            slot.current()
            if isinstance(slot.value, Pointwise):
                slot.value = realize(slot.value, self.loops, _buffer_strides(slot.node))
            return slot.value
        return pytree.tree_map(unwrap, tree)

    def _traced_layout(self, tree, any_strides=False):
        """Slots -> StorageViews with the strides the trace saw. The trace picked the ATen kernel for those
        strides: efficient attention's mask is padded to aligned rows and sliced back (`pad_bias`), and
        given a compact copy instead the kernel refuses it ("attn_bias is not correctly aligned"). A value
        realized in another layout is copied into one with the traced strides (gaps kept; expanded,
        overlapping layouts are left as they are). any_strides: an op that takes any strides and whose
        result's layout does not depend on them (mm, addmm, bmm: _buffer_strides pads their operands'
        rows) gets the values as realized."""
        def unwrap(slot):
            if not isinstance(slot, Slot):
                return slot
            meta = slot.node.meta.get("val")
            view = self._realized(slot)
            if any_strides:
                return view
            strides = _gapped_strides(meta)
            if strides is None or not isinstance(view, StorageView) or \
                    tuple(as_expr(s) for s in view.sizes) != tuple(as_expr(s) for s in meta.shape) or \
                    tuple(view.strides) == strides:
                return view
            if all(mine == traced or n == 1 for n, mine, traced in zip(view.sizes, view.strides, strides)):
                # other strides only where the size is 1, which no element's address depends on: the same
                # memory, viewed with the traced strides (a query split from a fused projection)
                return StorageView(view.buffer, view.sizes, strides, view.offset)
            logs.log("fusion", f"copy {slot.node.name} (strides {tuple(view.strides)}) into its traced strides {tuple(meta.stride())} for "
                               f"{_current[-1].name}")
            # broadcast dims (stride 0) are stored once: the buffer has size 1 there, the view expands it
            sizes = tuple(as_expr(1) if st == 0 else as_expr(n) for n, st in zip(meta.shape, strides))
            load = view.make_loader()
            copy = Pointwise(sizes, view.dtype, view.device, load)   # broadcast dims: index 0, as all alike
            stored = realize(copy, self.loops, strides)
            laid_out = StorageView(stored.buffer, tuple(as_expr(n) for n in meta.shape), strides, stored.offset)
            if slot.node not in self._returned:     # an output keeps its value (a view of an input stays one)
                slot.value = laid_out
            return laid_out
        return pytree.tree_map(unwrap, tree)

    def _realize_matmul_operands(self, args):
        """Realize the value under each matmul operand (followed up through view ops) in the strides
        _buffer_strides gives it, before the operand's view is realized: realized through the view, the
        value would get eager's strides."""
        for slot in args:
            if not isinstance(slot, Slot):
                continue
            node = slot.node
            while node.op == "call_function" and node.target in _VIEW_OPS and isinstance(node.args[0], torch.fx.Node):
                node = node.args[0]
            root = self._slots.get(node)
            if root is not None:
                root.current()
                if isinstance(root.value, Pointwise) and root.value.view_base is None:
                    root.value = realize(root.value, self.loops, _buffer_strides(node))

    def _extern(self, target, args, kwargs, reason):
        node = _current[-1]
        if reason != "extern op":
            self.loops.fallbacks.append((str(target), reason))
            logs.log("fusion", f"fallback {node.name} = {target}: {reason} (runs the ATen op, not fused)")
        any_strides = target in MM_OPS
        if any_strides:
            self._realize_matmul_operands(args)
        kernel = ExternKernel(self.loops.new_name("extern"), target, self._traced_layout(args, any_strides),
                              self._traced_layout(kwargs, any_strides), reason)
        self.loops.nodes.append(kernel)

        def make_output(path, meta):
            if isinstance(meta, (tuple, list)):     # nested results (run_and_save_rng_state's (state, outputs))
                return type(meta)(make_output((*path, i), m) for i, m in enumerate(meta))
            if not isinstance(meta, torch.Tensor):
                return meta
            layout = row_padded_layout(target, node, meta) or Layout.of(meta)
            out = ExternOutput(self.loops.new_name(), layout, kernel, path)
            kernel.outputs.append(out)
            return full_view(out)
        return make_output((), out_meta())

    def output(self, target, args, kwargs):
        (result,) = args
        flat, spec = pytree.tree_flatten(result)
        metas = _output_metas(_current[-1].graph)
        # outputs the wrapper returns as eager's alias of an input instead (decompose.output_aliases)
        aliases = self.module.meta.get("output_aliases")
        views = self._views_of_owners(metas, aliases)
        outs = []
        for k, (value, meta) in enumerate(zip(flat, metas)):
            if k in views:
                value = views[k]
            elif isinstance(value, Slot) and self.loops.autograd and isinstance(value.current(), Pointwise):
                # a half of a training graph: the other half (and AOTAutograd's wrappers) were traced with
                # its outputs in their traced strides; a lazy view realized over a base in eager's dense
                # strides can have others (a saved transpose, which the backward views as flat: fuzz grad
                # 10600281). Values already in memory (an extern's padded rows) are returned as they are.
                value = self._traced_layout(value)
            elif isinstance(value, Slot):
                value.current()
                if isinstance(value.value, Pointwise):
                    value.value = realize(value.value, self.loops, _dense_strides(meta))
                value = value.value
            outs.append(value)
        self.loops.outputs = outs
        self.loops.output_spec = spec
        self.loops.output_nodes = [(a.name, a.op == "placeholder", a.op == "call_function" and
                                    aliases_its_argument(a.target)) if isinstance(a, torch.fx.Node) else None
                                   for a in _output_leaves(_current[-1].graph)]
        self.loops.output_aliases = aliases
        self._compute_writes_first()
        for node, write_args, write_kwargs in self._input_writes:
            _current.append(node)
            try:
                self._extern(aten.copy_.default, write_args, write_kwargs, "extern op")
            finally:
                _current.pop()
        return result

    def _views_of_owners(self, metas, aliases):
        """Output position -> its value as eager lays it out, for the outputs whose traced value shares its
        storage with another output or covers only part of it (a slice, an unbind, a row and the matrix it
        is a row of): the value owning that storage is stored whole, in its traced strides, and each such
        output is the view of it with its traced sizes, strides and offset, so outputs share memory where
        eager's do (a later write through one shows in the other). Outputs that are, or view, an input or
        a constant are the lowering's views already (or decompose.output_aliases's); storage held by no
        node that owns it whole, or viewed in another dtype, is refused."""
        from . import decompose
        groups = {}
        for k, meta in enumerate(metas):
            if isinstance(meta, torch.Tensor) and meta.numel() and not (aliases and aliases[k] is not None) \
                    and self._owners.get(_storage(meta)) is not None:
                groups.setdefault(_storage(meta), []).append(k)
        views = {}
        for storage, positions in groups.items():
            owner = self._owners[storage]
            if owner.node.op in ("placeholder", "get_attr") or \
                    (len(positions) == 1 and _owns_storage(metas[positions[0]])):
                continue
            base_meta = owner.node.meta["val"]
            if not _owns_storage(base_meta) or any(metas[k].dtype != base_meta.dtype for k in positions):
                raise decompose.Refused(f"outputs {positions} view memory that {owner.node.name} does not hold "
                                        "whole in their dtype: they would not alias as eager's do")
            base = _stored_in(owner.current(), _dense_strides(base_meta), self.loops)
            owner.value = base
            for k in positions:
                meta = metas[k]
                views[k] = StorageView(base.buffer, tuple(as_expr(n) for n in meta.shape),
                                       tuple(as_expr(st) for st in meta.stride()), as_expr(meta.storage_offset()))
        return views

    def _compute_writes_first(self):
        """Every value written back into an input is computed before the first write-back: one that reads an
        input's old contents (x2 + x1 written into x2 while x1 is written too, or x1 itself copied into x2)
        must not run, or be read, after that input has been overwritten."""
        written = {_buffer_name(_stored_value(args[0])) for _, args, _ in self._input_writes}
        for k, (node, args, kwargs) in enumerate(self._input_writes):
            src = _stored_value(args[1])
            strides = _dense_strides(node.args[1].meta.get("val"))
            if isinstance(src, Pointwise):
                src = realize(src, self.loops, strides)      # may still view an input (a transpose of x1)
            if isinstance(src, StorageView) and src.buffer.name in written:
                src = realize(Pointwise(src.sizes, src.dtype, src.device, src.make_loader()), self.loops, strides)
            self._input_writes[k] = (node, (args[0], src) + tuple(args[2:]), kwargs)


def _output_leaves(graph):
    (output,) = [n for n in graph.nodes if n.op == "output"]
    return pytree.tree_leaves(output.args[0])


def _output_metas(graph):
    """The traced values of the graph's output leaves (None for a leaf that is no node)."""
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in _output_leaves(graph)]


def _storage(t):
    return t.untyped_storage()._cdata


def _owns_storage(meta):
    """Whether meta's elements are all of its storage, densely, from its start."""
    return meta.storage_offset() == 0 and _dense_strides(meta) is not None and \
        meta.numel() * meta.element_size() == meta.untyped_storage().nbytes()


def _stored_in(value, strides, graph):
    """value as the whole of a buffer this graph allocates (a computed one or an extern op's) laid out with
    `strides`: realized so if lazy, copied into such a buffer if stored otherwise."""
    value = current_value(value)
    if not isinstance(value, StorageView):
        value = realize(value, graph, strides)
    if value.is_full() and isinstance(value.buffer, (ComputedBuffer, ExternOutput)) and \
            tuple(value.strides) == tuple(strides):
        return value
    return realize(Pointwise(value.sizes, value.dtype, value.device, value.make_loader()), graph, strides)


def _held_in_dtype(value, operands):
    """A node's lazy 16-bit float result rounded to its dtype. Kernels compute 16-bit floats in float32 and
    round them where they are stored; eager holds every op's result in its dtype, so a fused reader (a cast
    to int64, the next op) must see it rounded too. Views, and operands returned as they are, are rounded
    already."""
    if not isinstance(value, Pointwise) or value.dtype not in (torch.bfloat16, torch.float16) or \
            value.realized is not None or value.view_base is not None or any(value is v for v in operands):
        return value
    inner, dtype = value.inner_fn, value.dtype
    return Pointwise(value.sizes, dtype, value.device, lambda index: ops.to_dtype(inner(index), dtype))


def _stored_value(value):
    return value.current() if isinstance(value, Slot) else current_value(value)


def _buffer_name(value):
    """The buffer a value reads or views, through lazy views (None for a computed lazy value)."""
    while isinstance(value, Pointwise) and value.realized is None and value.view_base is not None:
        value = value.view_base[0]
    if isinstance(value, Pointwise) and value.realized is not None:
        value = value.realized
    return value.buffer.name if isinstance(value, StorageView) else None


def _without_elements(meta):
    """The values of a node whose tensor results all have no elements (None if one has some): constants
    that nothing computes, so no lowering builds index arithmetic over their zero-size dims (a reshape's
    `% 0`) and no kernel loops over them."""
    tensors = [m for m in pytree.tree_leaves(meta) if isinstance(m, torch.Tensor)]
    if not tensors or any(m.numel() for m in tensors) or any(m.dtype not in SUPPORTED_DTYPES for m in tensors):
        return None
    return pytree.tree_map(lambda m: constant_value(0, m.shape, m.dtype, m.device)
                           if isinstance(m, torch.Tensor) else m, meta)


def _eager_refuses_empty(target, node):
    """Whether eager's op raises for the inputs of `node`, a node without elements whose tensor inputs have
    none either (var of an int64 tensor, argmax of a bool one): it is run on empty tensors of the inputs'
    dtypes to see. False where an input has elements or symbolic sizes, or for an op not of ATen's (a
    custom op's kernel could have effects): not probed."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False

    def real(value):
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val")
        if isinstance(value, torch.Tensor):
            if value.numel() != 0 or not all(type(n) is int for n in (*value.shape, *value.stride())):
                raise _NotProbed
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise _NotProbed
        return value
    try:
        args, kwargs = pytree.tree_map(real, (node.args, node.kwargs))
    except _NotProbed:
        return False
    try:
        with torch.no_grad():
            target(*args, **kwargs)
    except Exception:   # noqa: BLE001 -- any error eager raises is the one the graph must raise
        return True
    return False


class _NotProbed(Exception):
    pass


def row_padded_layout(target, node, meta):
    """The layout of a large 16-bit CUDA mm/addmm output whose width isn't a multiple of 8, rows padded to
    one (config.triton_pad_mm: the Triton wrapper runs the product padded and views its first N columns), else
    None (eager's layout)."""
    if target not in (aten.mm.default, aten.addmm.default) or meta.dim() != 2 or not _unaligned_rows(meta):
        return None
    right = node.args[-1].meta.get("val") if isinstance(node.args[-1], torch.fx.Node) else None
    rows, cols = meta.shape
    if not isinstance(right, torch.Tensor) or not all(type(n) is int for n in (rows, cols, right.shape[0])):
        return None         # sizes with symbols: eager's layout (no guards on their divisibility)
    if rows * cols * right.shape[0] < (1 << 30):
        return None
    return Layout(tuple(as_expr(n) for n in meta.shape), _padded_row_strides(meta.shape), meta.dtype, meta.device)


def _unaligned_rows(meta):
    """Whether padding meta's rows (config.triton_pad_mm) would give cuBLAS aligned leading dimensions: a
    16-bit CUDA value whose last dim is a known size that is no multiple of 8."""
    cols = meta.shape[-1] if meta.dim() else None
    return bool(config.triton_pad_mm) and meta.device.type == "cuda" and \
        meta.dtype in (torch.bfloat16, torch.float16) and type(cols) is int and cols % 8 != 0


def _padded_row_strides(shape):
    """Contiguous strides of `shape` with its last dim padded to a multiple of 8 elements."""
    return tuple(as_expr(s) for s in contiguous_strides([*shape[:-1], shape[-1] + -shape[-1] % 8]))


def lower(gm, example_inputs, autograd=False):
    """The LoopGraph computing the ATen graph `gm` (autograd: a half from AOTAutograd, GraphFacts.autograd)."""
    lowering = Lowering(gm, example_inputs)
    lowering.loops.autograd = autograd
    _graphs.append(lowering.loops)
    try:
        lowering.run(*example_inputs)
    finally:
        _graphs.pop()
    return lowering.loops


_graphs = []    # the LoopGraph being built (reductions realize into it)


def current_graph():
    return _graphs[-1]


def realize(value, graph, strides=None):
    """Compute a lazy value (or a reduction) into a new buffer; returns a view of the whole buffer.
    A lazy view of a lazy value realizes that value in its own shape and views it (as eager would)."""
    if isinstance(value, StorageView):
        return value
    if isinstance(value, Pointwise):
        if value.realized is None:
            if value.view_base is not None:
                # the base in its node's layout (eager's), so that the view has eager's strides too
                base, view = value.view_base
                base_strides = _buffer_strides(base.node) if base.node is not None else None
                value.realized = realize(view(realize(base, graph, base_strides)), graph, strides)
            else:
                value.realized = _new_buffer(value, graph, strides)
        return value.realized
    return _new_buffer(value, graph, strides)


def current_value(value):
    """value, or what reads it from memory if it (or the lazy value it is a view of) has been realized."""
    if not isinstance(value, Pointwise):
        return value
    if value.realized is not None:
        return value.realized
    if value.view_base is not None:
        base, view = value.view_base
        stored = current_value(base)
        if stored is not base:
            return view(stored)
    return value


def _new_buffer(value, graph, strides):
    sizes = tuple(value.sizes)
    strides = strides if strides is not None and len(strides) == len(sizes) else contiguous_strides(sizes)
    buf = ComputedBuffer(graph.new_name(), Layout(sizes, tuple(strides), value.dtype, value.device), value)
    graph.nodes.append(buf)
    return full_view(buf)


def _gapped_strides(meta):
    """meta's strides if no two of its elements share memory apart from broadcast (stride 0) dims (gaps
    allowed: a padded row), else None."""
    if not isinstance(meta, torch.Tensor) or meta.numel() == 0:
        return None
    dims = sorted((st, n) for n, st in zip(meta.shape, meta.stride()) if n != 1 and st != 0)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return None
        extent = stride * size
    return tuple(as_expr(s) for s in meta.stride())


MM_OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default}
# ops through which a value reaches a matmul as the same memory
_VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
             aten.transpose.int, aten.permute.default}
PAD_MM_OPERAND_MIN_ELEMENTS = 1 << 22


def _buffer_strides(node):
    """The strides of the buffer a node's value is realized into: eager's (_dense_strides), or, for a
    large 16-bit CUDA value whose rows (last dim) are no multiple of 8 elements long and that a matmul
    reads (through views), rows padded to one: cuBLAS's fast kernels need 16-byte aligned leading
    dimensions (a 50257-wide logits gradient took cuBLAS's sm75 kernels, 2.3 ms per product on the H200,
    where Inductor pads). Not for graph outputs (their callers expect eager's strides)."""
    meta = node.meta.get("val")
    strides = _dense_strides(meta)
    if strides is not None and _permuted_by_an_operand(node, meta):
        return tuple(as_expr(s) for s in torch._prims_common.make_contiguous_strides_for(meta.shape))
    if strides is None or meta.dim() < 2 or not _unaligned_rows(meta) or \
            tuple(meta.stride()) != tuple(torch._prims_common.make_contiguous_strides_for(meta.shape)) or \
            meta.numel() < PAD_MM_OPERAND_MIN_ELEMENTS or not _feeds_matmul(node):
        return strides
    return _padded_row_strides(meta.shape)


def _permuted_by_an_operand(node, meta):
    """Whether a Triton buffer eager lays out permuted (dense, not contiguous) is stored contiguous instead.
    Eager's elementwise ops take the layout of their first operand, so a residual stream that starts as a
    convolution's output seen transposed (Whisper's encoder: conv1d, permute, + positions) stays
    transposed through every residual add, each read against contiguous operands one strided element at a
    time (17% of the copy bandwidth on the H100). Only where some operand of the same shape is contiguous,
    the value is no graph output and not written (its layout is eager's there), and everything that reads
    it (through views) is an op lowered here (an extern call gets its arguments in the traced strides)."""
    from . import decompose
    if not (meta.device.type == "cuda" or config.triton_cpu) or meta.dim() < 2 or meta.is_contiguous() or \
            node.op != "call_function" or node.target in _VIEW_OPS or _writes_any(node.graph):
        return False
    operands = [a.meta.get("val") for a in node.all_input_nodes]
    if not any(isinstance(v, torch.Tensor) and v.shape == meta.shape and v.is_contiguous() for v in operands):
        return False
    return all(user.op == "call_function" and user.target in LOWERINGS and user.target not in EXTERN_OPS and
               user.target not in decompose.LAYOUT_READERS for user in _readers(node, ANY_VIEW))


def _splits_bias(args):
    """Whether a convolution call's bias is added after it (Lowering._convolution_then_bias): a tensor bias,
    on the Triton path, static sizes, the result's dtype the bias's."""
    meta, bias = out_meta(), args[2]
    if not isinstance(bias, Slot) or not isinstance(meta, torch.Tensor) or meta.dim() < 3 or \
            not (meta.device.type == "cuda" or config.triton_cpu):
        return False
    bias_meta = bias.node.meta.get("val")
    return isinstance(bias_meta, torch.Tensor) and bias_meta.dtype == meta.dtype and bias_meta.dim() == 1 and \
        all(isinstance(n, int) for n in meta.shape)


class _AnyView:
    """`target in ANY_VIEW`: an op whose result views its argument's memory (an ATen view op, getitem), not
    an in-place op."""

    def __contains__(self, target):
        from .decompose import aliases_its_argument
        schema = getattr(target, "_schema", None)
        return aliases_its_argument(target) and not (schema is not None and schema.is_mutable)


ANY_VIEW = _AnyView()


def _returned(node):
    """Whether node's value, an item of it (a multi-output op's) or a view of either is a graph output."""
    return any(user.op == "output" for user in _readers(node, ANY_VIEW))


def _writes_any(graph):
    """Whether an fx graph writes in place (a functional graph's copy_ back into an input), memoized on it."""
    if not hasattr(graph, "_graphjit_writes"):
        graph._graphjit_writes = any(n.op == "call_function" and getattr(n.target, "_schema", None) is not None
                                     and n.target._schema.is_mutable for n in graph.nodes)
    return graph._graphjit_writes


def _feeds_matmul(node):
    """Whether node's value reaches a matmul's operand through view ops, with neither it nor any view of it
    a graph output."""
    return not _returned(node) and \
        any(user.op == "call_function" and user.target in MM_OPS for user in _readers(node))


def _readers(node, through=_VIEW_OPS):
    """The nodes that read node's value, directly or through ops in `through` (views of it), each once."""
    stack, seen = [node], {node}
    while stack:
        for user in stack.pop().users:
            if user not in seen:
                seen.add(user)
                yield user
                if user.op == "call_function" and user.target in through:
                    stack.append(user)


def _dense_strides(meta):
    """meta's strides if they lay its elements out without gaps or overlaps (some permutation of
    contiguous), else None: buffers realized for an fx node keep eager's memory layout."""
    if not isinstance(meta, torch.Tensor):
        return None
    dims = sorted((st, n) for n, st in zip(meta.shape, meta.stride()) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return None
        expected *= size
    return tuple(as_expr(s) for s in meta.stride())


# ---------------------------------------------------------------------------------------------------------
# Helpers lowerings are written with
# ---------------------------------------------------------------------------------------------------------


def broadcast_sizes(*shapes):
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(ndim):
        size = sympy.Integer(1)
        for s in shapes:
            k = d - (ndim - len(s))
            if k >= 0 and not is_one(s[k]):
                size = s[k]
        out.append(size)
    return tuple(out)


def cast(x, dtype):
    """x as dtype (lazy); a Python scalar stays a scalar."""
    if not is_value(x) or x.dtype == dtype:
        return x
    loader = x.make_loader()
    return Pointwise(x.sizes, dtype, x.device, lambda index: ops.to_dtype(loader(index), dtype))


def held(value, dtype):
    """A Python number as an element of dtype holds it: rounded for a 16-bit float (1e15 is
    998356558020608.0 in bfloat16, 1e5 is inf in float16), as is for any other dtype. Eager converts a
    scalar so where it becomes an element of the result or an operand in the tensor's dtype (a fill, a
    where branch, a clamp bound, add's alpha on the CPU)."""
    if dtype in (torch.bfloat16, torch.float16) and isinstance(value, (int, float)) and \
            not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64, device="cpu").to(dtype).item()
    return value


def make_pointwise(fn, *inputs, dtype, compute_dtype=None, fn_dtype=None, sizes=None, input_dtypes=None):
    """Elementwise fn over inputs (values or Python scalars), broadcast to `sizes`.

    Inputs are cast to compute_dtype (default: dtype), or each to its entry of input_dtypes; fn's
    result (of fn_dtype, default compute_dtype) is cast to dtype.
    """
    compute_dtype = compute_dtype or dtype
    fn_dtype = fn_dtype or compute_dtype
    input_dtypes = input_dtypes or [compute_dtype] * len(inputs)
    tensors = [x for x in inputs if is_value(x)]
    sizes = tuple(sizes) if sizes is not None else broadcast_sizes(*[t.sizes for t in tensors])
    device = tensors[0].device if tensors else _traced_device()
    loaders = []
    for x, x_dtype in zip(inputs, input_dtypes):
        if is_value(x):
            loaders.append(_broadcast_loader(cast(x, x_dtype), sizes))
        else:
            loaders.append(lambda index, v=x, d=x_dtype: ops.constant(v, d))

    def inner(index):
        result = fn(*[load(index) for load in loaders])
        return result if fn_dtype == dtype else ops.to_dtype(result, dtype)
    return Pointwise(sizes, dtype, device, inner)


def _traced_device():
    """The device of the node being lowered's result (a pointwise op over scalars only, such as copy_ of
    a Python number: on the destination's device, not the CPU)."""
    meta = _current[-1].meta.get("val") if _current else None
    return meta.device if isinstance(meta, torch.Tensor) else torch.device("cpu")


def _broadcast_loader(x, sizes):
    loader = x.make_loader()
    if tuple(x.sizes) == tuple(sizes):
        return loader
    return lambda index: loader(broadcast_index(index, x.sizes, sizes))


def promoted_dtype(*inputs, kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT):
    """torch's type promotion for the inputs (values and Python scalars): the result dtype."""
    args = [torch.empty([1] * len(x.sizes), dtype=x.dtype, device="meta") if is_value(x) else x
            for x in inputs]
    return elementwise_dtypes(*args, type_promotion_kind=kind)[1]


def constant_value(value, sizes, dtype, device=torch.device("cpu")):
    value = held(value, dtype)
    return Pointwise(tuple(as_expr(s) for s in sizes), dtype, device, lambda index: ops.constant(value, dtype))


def acc_dtype_of(dtype, reduction_type):
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    if reduction_type == "sum":
        return torch.int64
    return dtype


def reduction_dims(dims, ndim):
    """dims (every dim if empty) as sorted non-negative dims. A 0-d tensor takes dim 0 or -1, as in
    eager, meaning no dim at all."""
    if not dims:
        return list(range(ndim))
    return sorted({d % ndim for d in dims}) if ndim else []


def reduce(x, dims, reduction_type, dtype, keepdim, acc_dtype=None):
    """reduction_type (sum, max, min) of x over dims (all if empty), accumulated in acc_dtype, as dtype.
    The reduction is computed into a buffer (a StorageView of it is returned); over no elements (a
    zero-size dim) it is the reduction's identity, a constant, and no loop runs."""
    ndim = len(x.sizes)
    dims = reduction_dims(dims, ndim)
    acc_dtype = acc_dtype or acc_dtype_of(x.dtype if reduction_type != "sum" else dtype, reduction_type)
    out_sizes = tuple(sympy.Integer(1) if d in dims else s for d, s in enumerate(x.sizes) if keepdim or d not in dims)
    red_sizes = tuple(x.sizes[d] for d in dims)
    if any(s == 0 for s in red_sizes):
        identity = reduction_identity(reduction_type, acc_dtype)
        return constant_value(identity if dtype.is_floating_point or dtype == torch.bool else int(identity),
                              out_sizes, dtype, x.device)
    loader = cast(x, acc_dtype).make_loader()

    def inner(index, rindex):
        full, it_out, it_red = [], iter(index), iter(rindex)
        for d in range(ndim):
            if d in dims:
                full.append(next(it_red))
                if keepdim:
                    next(it_out)
            else:
                full.append(next(it_out))
        return loader(full)
    splits = split_count(out_sizes, red_sizes, reduction_type, x.device, _innermost_reduced(dims))
    if splits:
        return _split_reduce(inner, out_sizes, red_sizes, reduction_type, dtype, acc_dtype, x.device, splits)
    red = Reduction(out_sizes, red_sizes, reduction_type, dtype, acc_dtype, x.device, inner)
    return realize(red, current_graph())


# A long reduction with few results is split in two on the GPU (split_count).
SPLIT_MIN_LENGTH = 2048       # elements reduced per result, at least
SPLIT_MAX_COLUMNS = 8192      # results of a column reduction, at most
SPLIT_MAX_ROWS = 128          # results of a row reduction, at most
SPLIT_TARGET = 32768          # results * pieces, at most
SPLIT_MIN_PIECE = 256         # elements per piece, at least


def _innermost_reduced(dims):
    """Whether the input's innermost dim in memory (its stride-1 dim, as the trace laid it out) is
    reduced: a row reduction. None where the input's layout is not known."""
    node = _current[-1] if _current else None
    arg = node.args[0] if node is not None and node.args else None
    meta = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dim() == 0:
        return None
    strides = [st if n != 1 else None for n, st in zip(meta.shape, meta.stride())]
    candidates = [d for d, st in enumerate(strides) if st == 1]
    if not candidates:
        return None
    return candidates[-1] in dims


def split_count(out_sizes, red_sizes, reduction_type, device, row=None):
    """Into how many pieces a reduction is split (0: not split). A Triton kernel runs a reduction's
    results in parallel and each result's elements one after another; a column reduction (the input's
    innermost dim is kept: a bias's or a channels-last BatchNorm's gradient, a sum over every row for a
    few hundred columns) takes 64 results per program. A long reduction with few results then keeps a
    few programs busy and the GPU idle. Split, each of up to SPLIT_TARGET // results pieces of at least
    SPLIT_MIN_PIECE elements reduces into a partial result, and a second reduction combines the partials
    (sum, max, min: the same operation; in float32 for floats). Row reductions (row: True, or None where
    the layout is unknown) split only when there are at most SPLIT_MAX_ROWS results: a program per row
    already fills the GPU, and splitting would cost a second pass (a softmax's max and sum are one
    looped kernel). Triton only (the C++ codegen's threads split the results, or a long row's vector
    loop is fast): on CUDA, and on the CPU under GRAPHJIT_TRITON_CPU so that the interpreter tests check
    the split kernels."""
    if reduction_type not in ("sum", "max", "min") or not (device.type == "cuda" or config.triton_cpu):
        return 0
    results, length = product(out_sizes), product(red_sizes)
    if not (results.is_Integer and length.is_Integer):
        return 0
    results, length = int(results), int(length)
    if results > (SPLIT_MAX_COLUMNS if row is False else SPLIT_MAX_ROWS) or length < SPLIT_MIN_LENGTH:
        return 0
    pieces = min(length // SPLIT_MIN_PIECE, SPLIT_TARGET // max(results, 1))
    pieces = 1 << (pieces.bit_length() - 1) if pieces > 0 else 0       # a power of two, rounded down
    return pieces if pieces >= 2 else 0


def _split_reduce(inner, out_sizes, red_sizes, reduction_type, dtype, acc_dtype, device, pieces):
    """reduce()'s reduction in two: partial[p, index] reduces the p-th of `pieces` runs of the flattened
    reduction index (the last run masked to the length), then out[index] reduces over p."""
    length = int(product(red_sizes))
    piece = -(-length // pieces)
    strides = contiguous_strides(red_sizes)
    identity = reduction_identity(reduction_type, acc_dtype)

    def partial_inner(index, rindex):
        flat = index[0] * piece + rindex[0]
        rdims = [flat] if len(red_sizes) == 1 else \
            [FloorDiv(flat, st) if d == 0 else Mod(FloorDiv(flat, st), size)
             for d, (st, size) in enumerate(zip(strides, red_sizes))]
        if piece * pieces == length:
            return inner(index[1:], rdims)
        inside = ops.lt(ops.index_expr(flat, torch.int64), ops.constant(length, torch.int64))
        return ops.masked(inside, lambda: inner(index[1:], rdims), identity, acc_dtype)
    partial = Reduction((sympy.Integer(pieces), *out_sizes), (sympy.Integer(piece),), reduction_type, acc_dtype,
                        acc_dtype, device, partial_inner)
    partial_loader = realize(partial, current_graph()).make_loader()
    red = Reduction(out_sizes, (sympy.Integer(pieces),), reduction_type, dtype, acc_dtype, device,
                    lambda index, rindex: partial_loader([rindex[0], *index]))
    return realize(red, current_graph())


# cumsum as a masked sum per element costs numel * length: longer or larger scans stay ATen calls
CUMSUM_MAX_LENGTH = 1024
CUMSUM_MAX_WORK = 1 << 24


@register(aten.cumsum.default)
def cumsum(x, dim, dtype=None):
    """out[..., i, ...] = sum of x[..., :i + 1, ...] along dim, as a reduction per element over the whole
    dim with the terms past i masked to 0: numel * length work, so only for short, small scans (the
    position ids that OPT and RoBERTa compute from the attention mask). Integer sums are exact; float sums
    add in another order than eager's loop (as torch's CUDA scan does too)."""
    ndim = len(x.sizes)
    if ndim == 0:
        raise NotLowered("cumsum of a 0-d tensor")
    dim = dim % ndim
    length = x.sizes[dim]
    numel = product(x.sizes)
    if not length.is_Integer or not numel.is_Integer or int(length) > CUMSUM_MAX_LENGTH or \
            int(numel) * int(length) > CUMSUM_MAX_WORK:
        raise NotLowered(f"cumsum over more than {CUMSUM_MAX_LENGTH} elements, or of more than "
                         f"{CUMSUM_MAX_WORK} element-terms")
    out_dtype = out_meta().dtype
    acc_dtype = acc_dtype_of(out_dtype, "sum")
    loader = cast(cast(x, out_dtype), acc_dtype).make_loader()     # each element as the result's dtype first

    def inner(index, rindex):
        (r,) = rindex
        src = list(index)
        src[dim] = r
        keep = ops.le(ops.index_expr(r, torch.int64), ops.index_expr(index[dim], torch.int64))
        return ops.where(keep, loader(src), ops.constant(0, acc_dtype))
    red = Reduction(tuple(x.sizes), (length,), "sum", out_dtype, acc_dtype, x.device, inner)
    return realize(red, current_graph())


def _dims_list(dim):
    if dim is None:
        return []
    return [dim] if isinstance(dim, int) else list(dim)


# ---------------------------------------------------------------------------------------------------------
# Pointwise ops
# ---------------------------------------------------------------------------------------------------------

# op -> ops name; the input is cast to the output dtype (so exp(int) computes in float, as torch does).
UNARY = {
    aten.abs: "abs", aten.neg: "neg", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log1p: "log1p", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.tanh: "tanh", aten.sigmoid: "sigmoid",
    aten.erf: "erf", aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.round: "round",
    aten.sign: "sign", aten.reciprocal: "reciprocal", aten.relu: "relu", aten.bitwise_not: "bitwise_not",
}
# op -> ops name; the input is not cast: the result is bool.
PREDICATES = {aten.logical_not: "logical_not", aten.isnan: "isnan", aten.isinf: "isinf"}
# op -> ops name; inputs promoted to the output dtype.
BINARY = {
    aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum", aten.atan2: "atan2",
    aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor",
}
# op -> ops name; inputs promoted to their common dtype, the result is bool.
COMPARISONS = {
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor",
}


def unary(name, x):
    return make_pointwise(getattr(ops, name), x, dtype=out_meta().dtype)


def _register_table():
    for packet, name in UNARY.items():
        register(*overloads(packet))(lambda x, name=name: unary(name, x))
    for packet, name in PREDICATES.items():
        register(*overloads(packet))(
            lambda x, name=name: make_pointwise(getattr(ops, name), x, dtype=torch.bool, compute_dtype=x.dtype))
    for packet, name in BINARY.items():
        register(*overloads(packet))(
            lambda a, b, name=name: _binary(getattr(ops, name), a, b, scalar_in_float=name == "mul"))
    for packet, name in COMPARISONS.items():
        register(*overloads(packet))(lambda a, b, name=name: compare(name, a, b))


_register_table()


def compare(name, a, b):
    """a <name> b in their common dtype; a number operand is converted to it first, as eager does (x == 0.1
    holds for a float16 x of 0.0999755859375)."""
    dtype = promoted_dtype(a, b)
    return make_pointwise(getattr(ops, name), held(a, dtype), held(b, dtype), dtype=torch.bool,
                          compute_dtype=dtype, fn_dtype=torch.bool)


@register(*overloads(aten.add))
def add(a, b, alpha=1):
    return make_pointwise(ops.add, *_add_operands(a, b, alpha), dtype=out_meta().dtype)


@register(*overloads(aten.sub))
def sub(a, b, alpha=1):
    return make_pointwise(ops.sub, *_add_operands(a, b, alpha), dtype=out_meta().dtype)


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(a, b, alpha=1):
    return sub(b, a, alpha)


def _add_operands(a, b, alpha):
    """add's operands a and b * alpha. For a 16-bit result on the CPU eager's kernel converts number
    operands and alpha to the dtype first (x + 0.1 adds 0.0999755859375 in float16); CUDA's reads them
    in float32."""
    meta = out_meta()
    if meta.device.type == "cpu":
        a, b, alpha = (held(v, meta.dtype) for v in (a, b, alpha))
    if alpha == 1:
        return a, b
    return a, make_pointwise(ops.mul, b, alpha, dtype=meta.dtype)


@register(*overloads(aten.div, ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode")))
def div(a, b, rounding_mode=None):
    fn = {None: ops.truediv, "floor": ops.floordiv, "trunc": ops.truncdiv}[rounding_mode]
    return _binary(fn, a, b, scalar_in_float=True)


def _binary(fn, a, b, scalar_in_float=False):
    """fn(a, b) in the result's dtype. With scalar_in_float (mul, div), a 16-bit result on the CPU and b a
    0-d tensor of another dtype: eager's kernel reads b as a float32 from its own dtype, not rounded to
    the 16-bit dtype first (x * torch.tensor(0.7312, dtype=float64) multiplies by 0.7312 in float32, by
    0.73046875 once rounded to bfloat16), and computes in float32; only for b (b * x rounds b)."""
    dtype = out_meta().dtype
    if scalar_in_float and dtype in (torch.bfloat16, torch.float16) and is_value(b) and not b.sizes and \
            b.dtype != dtype and b.device.type == "cpu" and out_meta().device.type == "cpu":
        a = cast(a, dtype) if is_value(a) and a.dtype != dtype else held(a, dtype)
        return make_pointwise(fn, a, b, dtype=dtype, compute_dtype=torch.float32)
    return make_pointwise(fn, a, b, dtype=dtype)


@register(*overloads(aten.pow, ("Tensor_Scalar", "Tensor_Tensor", "Scalar")))
def pow(a, b):
    """A number base or exponent is converted to the result's dtype first, as eager's kernels do. The
    exponents eager's kernels compute otherwise than pow() are computed as they do: 0.5 sqrt, -1 1/x, 2
    and 3 products, -0.5 1/sqrt (-inf at -0.0 and NaN at -inf, where pow gives inf and 0), and -2
    1/(x*x) (0 where x*x overflows, where pow gives a subnormal). On the CPU eager's 16-bit kernels
    differ: bfloat16 -0.5 rounds the sqrt to bfloat16 first and -2 calls pow; float16 calls pow for
    +-0.5 and -2. 16-bit results may differ from eager's CPU kernel by a rounding of its intermediates
    (within the dtype's tolerance)."""
    dtype = out_meta().dtype
    a, b = held(a, dtype), held(b, dtype)
    if is_value(a) and not is_value(b) and dtype.is_floating_point:
        special = {2: ops.square, 0.5: ops.sqrt, 1: lambda x: x, -1: ops.reciprocal,
                   3: lambda x: ops.mul(ops.square(x), x)}
        cuda = a.device.type == "cuda"
        if dtype in (torch.float32, torch.float64) or cuda:
            special.update({-0.5: ops.rsqrt, -2: lambda x: ops.reciprocal(ops.square(x))})
        elif dtype == torch.bfloat16:      # eager's CPU kernel rounds the sqrt to bfloat16 before 1/x
            special[-0.5] = lambda x: ops.reciprocal(ops.to_dtype(ops.sqrt(x), dtype))
        else:                              # float16 on the CPU: eager's kernel calls pow for +-0.5
            del special[0.5]
        if b in special:
            return make_pointwise(special[b], a, dtype=dtype)
    return make_pointwise(ops.pow, a, b, dtype=dtype)


@register(*overloads(aten.remainder))
def remainder(a, b):
    """A number operand is converted to the result's dtype first, as eager's kernels do."""
    dtype = out_meta().dtype
    return make_pointwise(ops.remainder, held(a, dtype), held(b, dtype), dtype=dtype)


@register(aten.fmod.Scalar)
def fmod(a, b):
    """fmod of integers by a number other than 0 and -1 in their dtype (eager raises for 0, int8 by 256
    included; INT_MIN by -1 overflows): a - trunc(a / b) * b, the sign of a's (torch.roll's decomposition
    wraps its indices so)."""
    dtype = out_meta().dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or not isinstance(b, int) or \
            isinstance(b, bool):
        raise NotLowered("fmod of floats, or by a tensor")
    b = wrap_int(b, dtype)
    if b in (0, -1):
        raise NotLowered("fmod by 0 or -1 in the tensor's dtype")
    return make_pointwise(lambda x, y: ops.sub(x, ops.mul(ops.truncdiv(x, y), y)), a, b, dtype=dtype)


@register(aten.where.self)
def where(cond, a, b):
    dtype = out_meta().dtype
    a, b = held(a, dtype), held(b, dtype)
    return make_pointwise(ops.where, cond, a, b, dtype=dtype, input_dtypes=(torch.bool, dtype, dtype))


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    return _clamp(x, min, max, torch.clamp)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return _clamp(x, min, None, torch.clamp_min)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return _clamp(x, None, max, torch.clamp_max)


@register(aten.hardtanh.default)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return _clamp(x, min_val, max_val, torch.nn.functional.hardtanh)


def _clamp(x, min, max, eager_fn):
    """x limited to [min, max] as eager_fn limits it: the min bound first, then the max bound (min > max
    gives max). A number bound is converted to the result's dtype first, as eager's kernels do; a NaN
    number bound makes every element NaN or is ignored, as eager_fn does with it (_nan_bound_fills)."""
    meta = out_meta()
    if _is_nan_number(min) or _is_nan_number(max):
        if _nan_bound_fills(eager_fn, min, max):
            return constant_value(math.nan, meta.shape, meta.dtype, meta.device)
        min, max = (None if _is_nan_number(b) else b for b in (min, max))
        if min is None and max is None:
            return _copy(cast(x, meta.dtype))       # a new tensor, as eager's, not the input itself
    out = cast(x, meta.dtype)
    if min is not None:
        out = _clamp_bound(out, held(min, meta.dtype), meta.dtype, "min")
    if max is not None:
        out = _clamp_bound(out, held(max, meta.dtype), meta.dtype, "max")
    return out


def _is_nan_number(bound):
    return isinstance(bound, float) and bound != bound


def _nan_bound_fills(eager_fn, *bounds):
    """Whether eager_fn with these number bounds, one of them NaN, makes every element NaN (clamp with
    both bounds; with one bound too in torch 2.13 and later, while 2.11 ignores it): asked of the
    installed torch, on a zero."""
    args = [b for b in bounds if b is not None] if eager_fn is not torch.clamp else bounds
    return bool(eager_fn(torch.zeros(1), *args).isnan().item())


# (bound, whether a tie takes the bound) -> the test replacing x by the bound; maximum/minimum for tensors
_CLAMP_BEYOND = {("min", False): ops.lt, ("min", True): ops.le, ("max", False): ops.gt, ("max", True): ops.ge}
_CLAMP_LIMIT = {"min": ops.maximum, "max": ops.minimum}


def _clamp_bound(x, bound, dtype, side):
    """x limited by one bound, as eager's clamp. A number replaces the elements beyond it; a tie keeps x on
    the CPU (std::max: relu6(-0.0) is -0.0) and, on CUDA, takes fmaxf/fminf's choice, which orders -0.0
    below +0.0 (relu6(-0.0) is +0.0, clamp(0.0, max=-0.0) is -0.0); NaN stays. A tensor bound goes
    through maximum/minimum (NaN wins; eager's own choice on a tie with a tensor bound depends on
    vectorization)."""
    if is_value(bound):
        return make_pointwise(_CLAMP_LIMIT[side], x, bound, dtype=dtype)
    takes_bound = x.device.type == "cuda" and bound == 0 and (math.copysign(1.0, bound) < 0) == (side == "max")
    beyond = _CLAMP_BEYOND[side, takes_bound]
    return make_pointwise(lambda v, b: ops.where(beyond(v, b), b, v), x, bound, dtype=dtype)


@register(aten.softshrink.default)
def softshrink(x, lambd=0.5):
    """x moved toward 0 by lambd, 0 (of x's sign) within it, NaN kept; lambd read as the installed torch's
    kernel reads it for x's dtype (_softshrink_lambd)."""
    dtype = out_meta().dtype
    lambd = _softshrink_lambd(lambd, dtype)

    def fn(v):
        lam = ops.constant(lambd, dtype)
        inside = ops.mul(v, ops.constant(0, dtype))
        return ops.where(ops.gt(v, lam), ops.sub(v, lam),
                         ops.where(ops.lt(v, ops.neg(lam)), ops.add(v, lam), inside))
    return make_pointwise(fn, x, dtype=dtype)


@functools.cache
def _softshrink_lambd(lambd, dtype):
    """lambd as eager's softshrink reads it for a 16-bit x: converted to x's dtype (torch 2.14) or as a
    float32 number (torch 2.11, 2.13). Asked of the installed torch, on the first value of dtype beyond
    lambd, where the two readings give different results."""
    rounded = held(lambd, dtype)
    if dtype not in (torch.bfloat16, torch.float16) or rounded == lambd:
        return lambd
    probe = torch.tensor([rounded], dtype=dtype, device="cpu")
    if rounded < lambd:
        probe = torch.nextafter(probe, torch.tensor([float("inf")], dtype=dtype, device="cpu"))
    converted = (probe - torch.tensor([rounded], dtype=dtype, device="cpu")).item()
    return rounded if torch.nn.functional.softshrink(probe, lambd).item() == converted else lambd


@register(aten.gelu.default)
def gelu(x, approximate="none"):
    def exact(v):
        # 0.5 * v * (1 + erf(v / sqrt(2)))
        half = ops.mul(ops.constant(0.5, x.dtype), v)
        return ops.mul(half, ops.add(ops.constant(1.0, x.dtype),
                                     ops.erf(ops.mul(v, ops.constant(math.sqrt(0.5), x.dtype)))))

    def tanh(v):
        # 0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 * v^3)))
        cube = ops.mul(ops.mul(v, v), v)
        inner = ops.mul(ops.constant(math.sqrt(2 / math.pi), x.dtype),
                        ops.add(v, ops.mul(ops.constant(0.044715, x.dtype), cube)))
        half = ops.mul(ops.constant(0.5, x.dtype), v)
        return ops.mul(half, ops.add(ops.constant(1.0, x.dtype), ops.tanh(inner)))
    return make_pointwise(tanh if approximate == "tanh" else exact, x, dtype=out_meta().dtype)


@register(aten.silu.default)
def silu(x):
    return make_pointwise(lambda v: ops.mul(v, ops.sigmoid(v)), x, dtype=out_meta().dtype)


@register(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    def fn(v):
        return ops.where(ops.gt(v, ops.constant(0, x.dtype)), v, ops.mul(v, ops.constant(negative_slope, x.dtype)))
    return make_pointwise(fn, x, dtype=out_meta().dtype)


@register(aten._to_copy.default)
def to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device) != x.device:
        raise NotLowered(f"copy to another device ({device})")
    return _copy(cast(x, dtype or x.dtype))


@register(aten.clone.default, aten.lift_fresh_copy.default)
def clone(x, memory_format=None):
    return _copy(x)


def _copy(x):
    """A new value with x's elements: realized, it is a fresh buffer (never an alias of x)."""
    loader = x.make_loader()
    return Pointwise(x.sizes, x.dtype, x.device, lambda index: loader(index))


@register(aten.copy.default)
def copy(dst, src, non_blocking=False):
    if not is_value(src):       # a Python number: on dst's device
        return Pointwise(dst.sizes, dst.dtype, dst.device, lambda index: ops.constant(held(src, dst.dtype), dst.dtype))
    return make_pointwise(lambda v: v, src, dtype=dst.dtype, sizes=dst.sizes)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    return where(mask, value, x)


# ---------------------------------------------------------------------------------------------------------
# Creation
# ---------------------------------------------------------------------------------------------------------


@register(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    meta = out_meta()
    return constant_value(fill_value, meta.shape, meta.dtype, meta.device)


@register(aten._efficientzerotensor.default)
def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """A backward's ZeroTensor: zeros in eager's arithmetic, but with no storage, so a kernel given its
    data pointer would read address 0. Our zeros are constants, folded into what reads them."""
    meta = out_meta()
    return constant_value(0, meta.shape, meta.dtype, meta.device)


@register(aten.full_like.default)
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # sizes, dtype and device from the output's fake tensor (dtype= and device= applied); its strides
    # (preserve_format keeps x's) are the realized buffer's
    meta = out_meta()
    return constant_value(fill_value, meta.shape, meta.dtype, meta.device)


@register(aten.zeros_like.default)
def zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 0)


@register(aten.ones_like.default)
def ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 1)


@register(aten.empty_like.default, aten.empty_permuted.default, aten.empty.memory_format)
def empty(*args, **kwargs):
    """Uninitialized memory in eager: any contents will do, zeros are the cheapest to fuse."""
    return full_like(None, 0)


@register(aten.scalar_tensor.default)
def scalar_tensor(value, dtype=None, layout=None, device=None, pin_memory=None):
    meta = out_meta()
    return constant_value(value, (), meta.dtype, meta.device)


@register(aten.arange.start_step)
def arange(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    meta = out_meta()
    if all(isinstance(v, int) for v in (start, end, step)):
        def inner(index):
            return ops.to_dtype(ops.index_expr(start + step * index[0], torch.int64), meta.dtype)
    else:
        def inner(index):
            i = ops.to_dtype(ops.index_expr(index[0], torch.int64), torch.float64)
            value = ops.add(ops.constant(float(start), torch.float64),
                            ops.mul(i, ops.constant(float(step), torch.float64)))
            return ops.to_dtype(value, meta.dtype)
    return Pointwise((as_expr(meta.shape[0]),), meta.dtype, meta.device, inner)


# ---------------------------------------------------------------------------------------------------------
# Random numbers
# ---------------------------------------------------------------------------------------------------------
# Drawn in the kernels by Philox (ops.rand): each random op has a seed of its own, which each call of the
# compiled graph draws from torch's generator for that device (one extern graphjit::random_seeds call per
# device draws every op's seed, so torch.manual_seed makes runs reproducible and each call draws new numbers),
# and numbers its elements' counters from 0. A value is a function of (seed, counter): fused into any reader,
# recomputed anywhere, it is the same number. The seed is a buffer of the op's own rather than an offset in
# the kernel's text, so that a model's repeated layers, each with its own dropout, print the same kernels
# (compiled once). The bits are not eager's; config.fallback_random (options={"fallback_random": True}) keeps
# eager's ATen random ops.


def _random_seed(device):
    """A loader of the seed of a new random op on device: the first of the two int64s of its own output of
    the graph's graphjit::random_seeds call."""
    if config.fallback_random:
        raise NotLowered("fallback_random: eager's random ops, and their bits")
    graph = current_graph()
    kernel = graph.random_seeds.get(device)
    if kernel is None:
        kernel = ExternKernel(graph.new_name("extern"), torch.ops.graphjit.random_seeds.default, (0, device), {},
                              "extern op")
        graph.nodes.append(kernel)
        graph.random_seeds[device] = kernel
    count = len(kernel.outputs)
    kernel.args = (count + 1, device)
    out = ExternOutput(graph.new_name(), Layout.contiguous([2], torch.int64, device), kernel, (count,))
    kernel.outputs.append(out)
    load = full_view(out).make_loader()
    return lambda: load((sympy.Integer(0),))


def uniform(sizes, device):
    """float32 numbers uniform in [0, 1), one per element of `sizes` (a lazy value)."""
    sizes = tuple(as_expr(n) for n in sizes)
    seed = _random_seed(device)
    strides = contiguous_strides(sizes)

    def inner(index):
        return ops.rand(seed(), ops.index_expr(linear_index(index, strides), torch.int64))
    return Pointwise(sizes, torch.float32, device, inner)


@register(aten.bernoulli.p, aten.bernoulli.default)
def bernoulli(x, p=None, generator=None):
    """1 with probability p (a number, or per element x itself), else 0, in x's dtype (F.dropout outside
    a training graph: x * bernoulli(empty_like(x), 1 - p) / (1 - p))."""
    if generator is not None or not x.dtype.is_floating_point or (p is not None and not isinstance(p, (int, float))):
        raise NotLowered("bernoulli with a generator, of integers, or with a symbolic p")
    if p is not None and not 0 <= p <= 1:
        raise NotLowered("bernoulli with p outside [0, 1] (eager's kernel raises)")
    draws = uniform(x.sizes, x.device).make_loader()
    if p is None:
        load = x.make_loader()
        probability = lambda index: ops.to_dtype(load(index), torch.float32)    # noqa: E731
    else:
        probability = lambda index: ops.constant(float(p), torch.float32)       # noqa: E731
    return Pointwise(tuple(x.sizes), x.dtype, x.device,
                     lambda index: ops.to_dtype(ops.lt(draws(index), probability(index)), x.dtype))


def _uniform_of(meta):
    if meta.dtype != torch.float32:
        # a float32 number near 1 rounds to 1.0 in a 16-bit float, and float64's would have 24 random bits
        raise NotLowered(f"random numbers of dtype {meta.dtype}: eager's kernel")
    return uniform(meta.shape, meta.device)


@register(aten.rand.default)
def rand(size, dtype=None, layout=None, device=None, pin_memory=None):
    return _uniform_of(out_meta())


@register(aten.rand_like.default)
def rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _uniform_of(out_meta())


# ---------------------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------------------


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(x, size):
    return view_reshape(x, size)


@register(aten.permute.default)
def permute(x, dims):
    return view_permute(x, dims)


@register(aten.expand.default)
def expand(x, size, implicit=False):
    return view_expand(x, size)


@register(aten.slice.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    return view_slice(x, dim, start, end, step)


@register(aten.select.int)
def select(x, dim, index):
    return view_select(x, dim, index)


@register(aten.unsqueeze.default)
def unsqueeze(x, dim):
    return view_unsqueeze(x, dim)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(x, dim=None):
    dims = range(len(x.sizes)) if dim is None else ([dim] if isinstance(dim, int) else dim)
    return view_squeeze(x, list(dims))


@register(aten.transpose.int)
def transpose(x, dim0, dim1):
    dims = list(range(len(x.sizes)))
    if dims:
        dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return view_permute(x, dims)


@register(aten.t.default)
def t(x):
    return transpose(x, 0, 1) if len(x.sizes) == 2 else x


@register(aten.alias.default)
def alias(x):
    return x


@register(aten.split_with_sizes.default)
def split_with_sizes(x, split_sizes, dim=0):
    """Consecutive slices along dim. They cover x, so a piece that has to be stored stores x whole and
    views it, as eager's split does, instead of computing itself into a buffer of its own (a split into
    a thousand pieces, all returned across a graph break, would be a thousand computed buffers)."""
    out, start = [], 0
    for size in split_sizes:
        piece = view_slice(x, dim, start, start + size, 1)
        if isinstance(x, Pointwise):
            piece.view_base = (x, lambda base, begin=start, end=start + size: view_slice(base, dim, begin, end, 1))
        out.append(piece)
        start += size
    return out


@register(aten.split.Tensor)
def split(x, split_size, dim=0):
    total = static_int(x.sizes[dim % len(x.sizes)], "split")
    split_size = static_int(split_size, "split")        # a symbolic piece size: compiled per size
    sizes = [min(split_size, total - s) for s in range(0, total, split_size)] or [0]
    return split_with_sizes(x, sizes, dim)


@register(aten.as_strided.default)
def as_strided(x, size, stride, storage_offset=None):
    """A view of x's storage as eager lays it out (storage_offset counts from the storage's start, not x's):
    lowered where that storage is a whole buffer this graph allocates (decompositions restride a fresh
    result so, e.g. adaptive_avg_pool2d's to channels-last); on an input, a constant or an extern op's
    output (a view with an offset of its own, known only at run time) it stays an ATen call."""
    return view_as_strided(_stored_as_traced(x), size, stride, storage_offset or 0)


def _stored_as_traced(x):
    """x as a whole buffer this graph allocates, in the layout eager gives the node's value (dense, from the
    storage's start); a lazy x is realized so. NotLowered where x is not, or cannot be, stored so and the
    ATen call sees the storage eager gives x; decompose.Refused where it would not (a view of a value the
    graph computes is stored, or read lazily, without the rest of that value's storage)."""
    node = _current[-1].args[0]
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(meta, torch.Tensor) and meta.numel() == 0 and _current[-1].meta["val"].numel():
        # x has no elements (lowered to an empty constant) but the view reads its storage, which eager
        # keeps: the elements of the tensor x was sliced from
        from . import decompose
        raise decompose.Refused("as_strided reads the storage of a view with no elements")
    try:
        return _stored_whole(x, node, meta)
    except NotLowered as e:
        if isinstance(x, Pointwise) and x.view_base is not None:
            realize(x, current_graph())          # the value owning the storage, computed whole, viewed
        if not _aten_sees_traced_storage(current_value(x), node, meta):
            from . import decompose
            raise decompose.Refused(f"as_strided of a view of a value the graph computes ({e})") from None
        raise


def _storage_root(node):
    """The first node, following first arguments back from node, whose traced value shares node's storage."""
    from torch.multiprocessing.reductions import StorageWeakRef
    ref = StorageWeakRef(node.meta["val"].untyped_storage())
    root = node
    while True:
        arg = root.args[0] if root.op == "call_function" and root.args else None
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or StorageWeakRef(val.untyped_storage()) != ref:
            return root
        root = arg


def _aten_sees_traced_storage(x, node, meta):
    """Whether the tensor an extern call gets for x has the storage eager gives node, at the same offset:
    a view of a graph input (or constant) lowered as a view of that input, an extern op's whole output
    that owns its storage, or a view of a computed buffer laid out as the computed value owning node's
    storage (all of that storage, from its start) at node's own offset and strides. A lazy x, or a view of a
    buffer holding only part of that storage (a slice computed into a buffer of its own), is not."""
    if not isinstance(meta, torch.Tensor) or not isinstance(x, StorageView):
        return False
    root = _storage_root(node)
    if isinstance(x.buffer, InputBuffer):
        if x.buffer.position is None:
            return root.op == "get_attr"
        placeholders = [n for n in node.graph.nodes if n.op == "placeholder"]
        return root.op == "placeholder" and placeholders.index(root) == x.buffer.position
    if isinstance(x.buffer, ExternOutput):
        return x.is_full() and root is node
    owner, layout = root.meta["val"], x.buffer.layout
    extent = 1 + sum((n - 1) * st for n, st in zip(owner.shape, owner.stride())) if owner.numel() else 0
    return isinstance(x.buffer, ComputedBuffer) and root.op == "call_function" and \
        owner.dtype == meta.dtype == x.buffer.dtype and \
        owner.storage_offset() == 0 and owner.untyped_storage().nbytes() == extent * owner.element_size() and \
        tuple(layout.sizes) == tuple(owner.shape) and tuple(layout.strides) == tuple(owner.stride()) and \
        tuple(x.sizes) == tuple(meta.shape) and tuple(x.strides) == tuple(meta.stride()) and \
        x.offset == meta.storage_offset()


def _stored_whole(x, node, meta):
    strides = _dense_strides(meta)
    if strides is None or meta.storage_offset() != 0:
        raise NotLowered("as_strided of a value eager does not store densely from its storage's start")
    if not isinstance(x, StorageView):
        x = realize(x, current_graph(), strides)
    if not isinstance(x, StorageView) or not x.is_full() or not isinstance(x.buffer, ComputedBuffer) or \
            tuple(x.strides) != strides:
        raise NotLowered("as_strided of a value that is not a whole buffer this graph allocates")
    return x


# ---------------------------------------------------------------------------------------------------------
# Indexing, concatenation, padding
# ---------------------------------------------------------------------------------------------------------


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if len(weight.sizes) != 2:
        raise NotLowered("embedding weight must be 2-d")
    weight_loader, index_loader = weight.make_loader(), indices.make_loader()
    rows = weight.sizes[0]
    sizes = tuple(indices.sizes) + (weight.sizes[1],)

    def inner(index):
        row = ops.indirect_indexing(index_loader(index[:-1]), rows, wrap=False)
        return weight_loader([row, index[-1]])
    return Pointwise(sizes, weight.dtype, weight.device, inner)


@register(aten.gather.default)
def gather(x, dim, index, sparse_grad=False, op=aten.gather.default):
    """out[i] = x[i with i[dim] replaced by index[i]]; index may be smaller than x in every dim. An index
    out of range raises what eager's kernel of `op` raises (gather: RuntimeError; index_select along dim 0:
    IndexError)."""
    ndim = len(x.sizes)
    if ndim == 0 or len(index.sizes) != ndim:
        raise NotLowered("gather of a 0-d tensor or with a 0-d index")
    dim = dim % ndim
    x_loader, index_loader = x.make_loader(), index.make_loader()
    size = x.sizes[dim]
    from .decompose import _eager_index_rule
    error = _eager_index_rule(op, dim, ndim)[0]

    def inner(idx):
        src = list(idx)
        src[dim] = ops.indirect_indexing(index_loader(idx), size, check=error, wrap=False)
        return x_loader(src)
    return Pointwise(tuple(index.sizes), x.dtype, x.device, inner)


@register(aten.index_select.default)
def index_select(x, dim, index):
    """x's slices along dim at the positions `index` (1-d, or 0-d for one) holds: a gather by the index
    viewed along dim and expanded over x's other dims (torch.roll's decomposition, a Swin block's shifted
    windows)."""
    if len(x.sizes) == 0 or len(index.sizes) > 1 or index.dtype not in (torch.int32, torch.int64):
        raise NotLowered("index_select of a 0-d tensor, or by an index not 1-d (or 0-d) int32 or int64")
    dim = dim % len(x.sizes)
    if as_expr(x.sizes[dim]) == 0:
        raise NotLowered("index_select along a dim without elements (eager raises)")
    picked = index.sizes[0] if index.sizes else sympy.Integer(1)
    sizes = list(x.sizes[:dim]) + [picked] + list(x.sizes[dim + 1:])
    along = [sympy.Integer(1)] * len(sizes)
    along[dim] = picked
    return gather(x, dim, view_expand(view_reshape(index, along), sizes), op=aten.index_select.default)


@register(aten.index.Tensor)
def index(x, indices):
    """Advanced indexing x[i0, :, i2 ...] by integer tensors (broadcast together), as gathers: the
    broadcast index dims replace the indexed dims where those are adjacent, else they come first (numpy's
    rule). Boolean masks (a data-dependent shape) stay ATen calls."""
    ndim = len(x.sizes)
    indices = list(indices) + [None] * (ndim - len(indices))
    tensors = [(d, t) for d, t in enumerate(indices) if t is not None]
    if not tensors or any(not is_value(t) or t.dtype not in (torch.int64, torch.int32) for _, t in tensors):
        raise NotLowered("index by boolean masks or by no tensor")
    positions = [d for d, _ in tensors]
    shape = broadcast_sizes(*[t.sizes for _, t in tensors])
    loaders = {d: _broadcast_loader(t, shape) for d, t in tensors}
    rest = [d for d in range(ndim) if d not in loaders]
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    sizes = tuple(x.sizes[d] for d in rest[:first]) + tuple(shape) + tuple(x.sizes[d] for d in rest[first:])
    if tuple(sizes) != tuple(as_expr(n) for n in out_meta().shape):
        raise NotLowered("index result shape differs from the trace's")
    x_loader = x.make_loader()

    def inner(out_index):
        picked = out_index[first:first + len(shape)]
        plain = list(out_index[:first]) + list(out_index[first + len(shape):])
        src, others = [], iter(plain)
        for d in range(ndim):
            if d in loaders:
                src.append(ops.indirect_indexing(loaders[d](picked), x.sizes[d]))
            else:
                src.append(next(others))
        return x_loader(src)
    return Pointwise(sizes, x.dtype, x.device, inner)


@register(aten.repeat.default)
def repeat(x, repeats):
    """x tiled `repeats` times along each dim (leading new dims for extra repeats): a modulo index."""
    extra = len(repeats) - len(x.sizes)
    if extra < 0:
        raise NotLowered("fewer repeats than dims")
    sizes = tuple(as_expr(n) for n in out_meta().shape)
    loader = x.make_loader()

    def inner(index):
        return loader([i % n if r != 1 else i for i, n, r in zip(index[extra:], x.sizes, repeats[extra:])])
    return Pointwise(sizes, x.dtype, x.device, inner)


@register(aten.cat.default)
def cat(tensors, dim=0):
    meta = out_meta()
    # eager's cat skips empty 1-d pieces (whatever the others' rank); when all are such, it is one of them
    tensors = [t for t in tensors if not (len(t.sizes) == 1 and t.sizes[0] == 0)] or tensors[:1]
    dim = dim % len(meta.shape)
    sizes = tuple(as_expr(s) for s in meta.shape)
    if len(tensors) == 1:
        return _copy(cast(tensors[0], meta.dtype))
    pieces, start = [], sympy.Integer(0)
    for t in tensors:
        length = t.sizes[dim]
        pieces.append((start, start + length, cast(t, meta.dtype).make_loader()))
        start += length

    total = start

    def inner(index):
        d = index[dim]
        pos = ops.index_expr(d, torch.int64)
        result = None
        for begin, end, loader in reversed(pieces):
            shifted = list(index)
            shifted[dim] = d - begin
            # every piece's load is masked to its own range: an unmasked load would read outside its
            # input at the other pieces' positions (both sides of the `where` are evaluated)
            inside = None
            if guard_bool(sympy.Gt(begin, 0)):
                inside = ops.ge(pos, size_value(begin))
            if guard_bool(sympy.Lt(end, total)):
                below = ops.lt(pos, size_value(end))
                inside = below if inside is None else ops.logical_and(inside, below)
            if inside is None:
                return loader(shifted)
            value = ops.masked(inside, lambda s=shifted, load=loader: load(s), 0, meta.dtype)
            result = value if result is None else ops.where(inside, value, result)
        return result
    return Pointwise(sizes, meta.dtype, meta.device, inner)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    meta = out_meta()
    sizes = tuple(as_expr(s) for s in meta.shape)
    loader = x.make_loader()
    ndim = len(sizes)
    padded = [(ndim - 1 - i // 2, pad[i], pad[i + 1]) for i in range(0, len(pad), 2)]

    def inner(index):
        src = list(index)
        mask = None
        for d, before, _ in padded:
            src[d] = index[d] - before
            pos = ops.index_expr(index[d], torch.int64)
            checks = []
            if before > 0:
                checks.append(ops.ge(pos, ops.constant(before, torch.int64)))
            if guard_bool(sympy.Lt(x.sizes[d] + before, sizes[d])) or before > 0:
                checks.append(ops.lt(pos, size_value(before + x.sizes[d])))
            for c in checks:
                mask = c if mask is None else ops.logical_and(mask, c)
        if mask is None:
            return loader(src)
        return ops.masked(mask, lambda: loader(src), held(value, meta.dtype), meta.dtype)
    return Pointwise(sizes, meta.dtype, meta.device, inner)


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Each output element is the max over its window, read with masked loads (padding reads -inf), as
    eager: NaN wins, ties keep the first element. The indices (flat positions in the input plane) are a
    second lazy value: computed only when something reads them."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if kh * kw > 49 or len(x.sizes) not in (3, 4):
        raise NotLowered("max_pool2d window over 49 elements or input not 3-d/4-d")
    values_meta, indices_meta = out_meta()
    sizes = tuple(as_expr(s) for s in values_meta.shape)
    height, width = static_int(x.sizes[-2], "max_pool2d"), static_int(x.sizes[-1], "max_pool2d")
    loader = x.make_loader()
    dtype = values_meta.dtype
    lowest = float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min
    out_h, out_w = int(sizes[-2]), int(sizes[-1])

    def bounds(out, kernel, stride_, pad, dilation_, extent, count):
        """Per window row (or column): its position and an in-bounds check, None where always inside."""
        result = []
        for k in range(kernel):
            low = k * dilation_ - pad                       # position at output 0 ...
            high = (count - 1) * stride_ + low              # ... and at the last output
            pos = out * stride_ + low
            check = None
            if low < 0 or high >= extent:
                value = ops.index_expr(pos, torch.int64)
                if low < 0:
                    check = ops.ge(value, ops.constant(0, torch.int64))
                if high >= extent:
                    upper = ops.lt(value, ops.constant(extent, torch.int64))
                    check = upper if check is None else ops.logical_and(check, upper)
            result.append((pos, check))
        return result

    def axes(index):
        """bounds() of the window's rows and of its columns at output `index`."""
        return bounds(index[-2], kh, sh, ph, dh, height, out_h), bounds(index[-1], kw, sw, pw, dw, width, out_w)

    def windows(index, rows, cols):
        """(in-bounds mask or None, (row, column), input index) per window element, in eager's order."""
        for h, row_check in rows:
            for w, col_check in cols:
                checks = [c for c in (row_check, col_check) if c is not None]
                mask = ops.logical_and(*checks) if len(checks) == 2 else (checks[0] if checks else None)
                yield mask, (h, w), list(index[:-2]) + [h, w]

    def load(mask, src):
        return loader(src) if mask is None else ops.masked(mask, lambda: loader(src), lowest, dtype)

    def replaces(value, best):
        # eager's loop: a later element replaces the max only where it is greater or NaN, so of equal
        # elements the first stays (-0.0 before 0.0 gives -0.0, which digamma or a division tells apart)
        return ops.logical_or(ops.gt(value, best), ops.isnan(value))

    def values(index):
        best = None
        for mask, _, src in windows(index, *axes(index)):
            value = load(mask, src)
            best = value if best is None else ops.where(replaces(value, best), value, best)
        return best

    def first_in_bounds(positions):
        """The first of a window's rows (or columns) inside the input, as an index value."""
        first = None
        for pos, check in reversed(positions):
            value = ops.index_expr(pos, torch.int64)
            first = value if first is None or check is None else ops.where(check, value, first)
        return first

    def indices(index):
        rows, cols = axes(index)
        # eager starts at the window's first in-bounds element, so a window of -inf points there
        where_ = ops.add(ops.mul(first_in_bounds(rows), ops.constant(width, torch.int64)), first_in_bounds(cols))
        best = ops.constant(lowest, dtype)
        for mask, (h, w), src in windows(index, rows, cols):
            value = load(mask, src)
            position = ops.index_expr(h * width + w, torch.int64)
            take = replaces(value, best)
            take = take if mask is None else ops.logical_and(mask, take)
            best = ops.where(take, value, best)
            where_ = ops.where(take, position, where_)
        return where_
    return (Pointwise(sizes, dtype, values_meta.device, values),
            Pointwise(sizes, indices_meta.dtype, indices_meta.device, indices))


def _pair(value):
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


# ---------------------------------------------------------------------------------------------------------
# Reductions and normalizations
# ---------------------------------------------------------------------------------------------------------


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, dtype=None):
    out_dtype = out_meta().dtype
    # eager converts each element to the result's dtype before adding (x.sum(dtype=float16) rounds them)
    return reduce(cast(x, out_dtype), _dims_list(dim), "sum", out_dtype, keepdim)


@register(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, dtype=None):
    out_dtype = out_meta().dtype
    acc = acc_dtype_of(out_dtype, "sum")
    dims = reduction_dims(_dims_list(dim), len(x.sizes))
    total = reduce(x, dims, "sum", acc, keepdim, acc_dtype=acc)
    count = _count(x, dims)
    return make_pointwise(ops.truediv, total, count, dtype=out_dtype, compute_dtype=acc)


@register(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return reduce(x, _dims_list(dim), "max", out_meta().dtype, keepdim)


@register(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return reduce(x, _dims_list(dim), "min", out_meta().dtype, keepdim)


@register(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, "max")


@register(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, "min")


def _arg_reduce(x, dim, keepdim, kind):
    """argmax/argmin as two reductions: the extreme (NaN if any, as eager), then the smallest index whose
    value equals it (or is NaN when it is): eager's first-occurrence rule. Both compare x as its dtype
    holds it (_as_stored): the extreme is stored in that dtype, while a lazy 16-bit x computes in float32.
    An x with transcendental ops is stored first (_read_in_passes): recomputed in the second loop by
    another vector width than in the first, no element might equal the extreme, and the index would be
    the sentinel, out of range."""
    if x.dtype == torch.bool or not x.sizes:
        raise NotLowered("argmax/argmin of a bool or 0-d tensor")
    if dim is None:                 # over every element, in row-major order
        x, dim = view_reshape(x, [product(x.sizes)]), 0
    x = _as_stored(_read_in_passes(x, 2))
    dim = dim % len(x.sizes)
    extreme = reduce(x, [dim], kind, x.dtype, True)
    x_loader, extreme_loader = x.make_loader(), extreme.make_loader()
    length = x.sizes[dim]
    sizes = tuple(as_expr(n) for n in out_meta().shape)
    floating = x.dtype.is_floating_point

    def inner(index, rindex):
        index = list(index)
        if len(index) < len(x.sizes):           # keepdim=False: dim is gone from the output index
            index.insert(dim, sympy.Integer(0))
        elif len(index) > len(x.sizes):          # dim=None, keepdim=True: the output has x's rank before
            index = [sympy.Integer(0)]
        (r,) = rindex
        src = list(index)
        src[dim] = r
        value, best = x_loader(src), extreme_loader(index)
        if x.dtype in (torch.bfloat16, torch.float16):
            value = ops.to_dtype(value, x.dtype)    # as the stored extreme: rounded to the 16-bit dtype
        hit = ops.eq(value, best)
        if floating:
            hit = ops.logical_or(hit, ops.logical_and(ops.isnan(value), ops.isnan(best)))
        return ops.where(hit, ops.index_expr(r, torch.int64), size_value(length))
    red = Reduction(sizes, (length,), "min", torch.int64, torch.int64, x.device, inner)
    return realize(red, current_graph())


def _as_stored(x):
    """x with each element as x's dtype holds it in memory: a lazy 16-bit float value computes in float32
    (rounded only where it is stored), so it is rounded here; any other x as is."""
    if x.dtype not in (torch.bfloat16, torch.float16) or not isinstance(x, Pointwise) or x.realized is not None:
        return x
    loader = x.make_loader()
    return Pointwise(x.sizes, x.dtype, x.device, lambda index: ops.to_dtype(loader(index), x.dtype))


def _bool_reduce(x, dim, keepdim, reduction_type):
    """any (max) / all (min) of x != 0 over dim (None: every dim), as a bool reduction; of the traced
    dtype (eager's any/all of a uint8 tensor is uint8 0 or 1)."""
    truth = x if x.dtype == torch.bool else make_pointwise(
        lambda v: ops.ne(v, ops.constant(0, x.dtype)), x, dtype=torch.bool, compute_dtype=x.dtype)
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return _copy(cast(truth, out_meta().dtype))     # any.dims over no dims: elementwise
    return reduce(truth, _dims_list(dim), reduction_type, out_meta().dtype, keepdim, acc_dtype=torch.bool)


@register(aten.any.dim, aten.any.dims, aten.any.default)
def any_(x, dim=None, keepdim=False):
    return _bool_reduce(x, dim, keepdim, "max")


@register(aten.all.dim, aten.all.dims, aten.all.default)
def all_(x, dim=None, keepdim=False):
    return _bool_reduce(x, dim, keepdim, "min")


def _count(x, dims):
    """How many elements a reduction over dims of x takes: an int, or an expression of size symbols
    (ops.constant of which the codegens compute from the kernel's size arguments)."""
    count = product([x.sizes[d] for d in dims])
    return int(count) if count.is_Integer else count


def _variance(x, dims, correction, keepdim, acc, mean_acc=None, shifted=False):
    """(mean, var) in dtype acc, two passes over x: the second sums squared deviations from the mean. The
    mean is summed and divided in mean_acc (default acc). shifted: the mean is first + sum(x - first) / n,
    where first is each row's first element: a row of one repeated value has exactly that mean and a zero
    variance, as eager's Welford mean gives (sum / n rounds, and layer_norm's rstd of a variance near 0
    magnifies that rounding to about 1e-4), and rows far from 0 lose less to rounding."""
    dims = reduction_dims(dims, len(x.sizes))
    count = _count(x, dims)
    mean_acc = mean_acc or acc
    if shifted and not (isinstance(count, int) and count == 0):
        first = _first_of(x, dims)
        total = reduce(make_pointwise(ops.sub, x, first, dtype=mean_acc), dims, "sum", mean_acc, True,
                       acc_dtype=mean_acc)
        mean = make_pointwise(lambda t, f, n: ops.add(f, ops.truediv(t, n)), total, first, count, dtype=mean_acc)
    else:
        total = reduce(x, dims, "sum", mean_acc, True, acc_dtype=mean_acc)
        mean = make_pointwise(ops.truediv, total, count, dtype=mean_acc)
    deviations = make_pointwise(lambda v, m: ops.square(ops.sub(v, m)), x, mean, dtype=acc)
    sq = reduce(deviations, dims, "sum", acc, keepdim, acc_dtype=acc)
    var = make_pointwise(ops.truediv, sq, max(count - correction, 0) if isinstance(count, int) else
                         sym_max(count - correction, 0), dtype=acc)
    if not keepdim:
        mean = view_squeeze(mean, dims)
    return mean, var


def _first_of(x, dims):
    """x's element at index 0 of each of dims, those dims kept with size 1 (x has no zero-size dim there)."""
    sizes = tuple(sympy.Integer(1) if d in dims else s for d, s in enumerate(x.sizes))
    if isinstance(x, StorageView):
        data = getattr(x.buffer, "data", None)
        if x.is_full() and isinstance(data, Pointwise) and x.dtype in (torch.float32, torch.float64):
            # a pointwise buffer (a residual sum that is also an output) recomputed at each row's first
            # element: a load of it there would keep the scheduler from fusing the reduction into the
            # kernel that computes it (a reader joins only where it reads what the kernel writes). Not for
            # 16-bit buffers, whose stored values are rounded.
            compute = data.inner_fn
            return Pointwise(sizes, x.dtype, x.device,
                             lambda index: compute([sympy.Integer(0) if d in dims else i for d, i in enumerate(index)]))
        return StorageView(x.buffer, sizes, x.strides, x.offset)
    loader = x.make_loader()
    return Pointwise(sizes, x.dtype, x.device,
                     lambda index: loader([sympy.Integer(0) if d in dims else i for d, i in enumerate(index)]))


def _spread(x, dim, correction, keepdim, take_sqrt):
    """var or std of x over dim, of x's dtype. Accumulated as eager's kernels do: in float64 on the CPU
    (values beyond 1e19 square past float32's range; std's square root is taken before the one rounding),
    where float32 or float64 reduced to one element takes the mean in x's dtype first, as eager's
    std_var_all_cpu does (its sum overflows as x's would); in float32 for 16-bit and float32 x on CUDA.
    (var_mean and std_mean stay ATen calls: their mean is eager's Welford mean, NaN after an infinity.)
    Of an integer or bool x: an ATen call, which raises as eager's kernels do."""
    if not x.dtype.is_floating_point:
        raise NotLowered("var or std of a tensor that is not floating point (eager raises)")
    acc, mean_acc = acc_dtype_of(x.dtype, "sum"), None
    if x.device.type == "cpu":
        acc = torch.float64
        if x.dtype in (torch.float32, torch.float64) and guard_bool(sympy.Le(product(out_meta().shape), 1)):
            mean_acc = x.dtype
    correction = 1 if correction is None else correction
    _, variance = _variance(x, _dims_list(dim), correction, keepdim, acc, mean_acc)
    if take_sqrt:
        variance = make_pointwise(ops.sqrt, variance, dtype=acc)
    if x.dtype in (torch.bfloat16, torch.float16):
        variance = cast(variance, torch.float32)      # eager's 16-bit types convert a double through float
    return cast(variance, x.dtype)


@register(aten.var.correction)
def var(x, dim=None, correction=None, keepdim=False):
    return _spread(x, dim, correction, keepdim, False)


@register(aten.std.correction)
def std(x, dim=None, correction=None, keepdim=False):
    return _spread(x, dim, correction, keepdim, True)


def _refuse_mixed_norm_dtypes(name, x, *params):
    """NotLowered (eager's op then runs, and decides: its CPU kernels raise "mixed dtype") where a norm's
    weight, bias or statistics have another dtype than x, except float32 ones for a 16-bit x, which every
    kernel takes."""
    for t in params:
        if t is not None and not isinstance(t, (int, float)) and t.dtype != x.dtype and \
                not (x.dtype in (torch.float16, torch.bfloat16) and t.dtype == torch.float32):
            raise NotLowered(f"{name} with parameters of dtype {t.dtype} for an input of {x.dtype}")


@register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    _refuse_mixed_norm_dtypes("layer norm", x, weight, bias)
    out_meta_, mean_meta, rstd_meta = out_meta()
    acc = acc_dtype_of(x.dtype, "sum")
    ndim = len(x.sizes)
    dims = list(range(ndim - len(normalized_shape), ndim))
    mean_acc = _shifted_mean_dtype(acc, x)
    mean, variance = _variance(x, dims, 0, True, acc, mean_acc, shifted=True)
    mean = cast(mean, acc)
    rstd = make_pointwise(lambda v: ops.rsqrt(ops.add(v, ops.constant(eps, acc))), variance, dtype=acc)
    normed = make_pointwise(ops.mul, make_pointwise(ops.sub, x, mean, dtype=acc), rstd, dtype=acc)
    if weight is not None:
        normed = make_pointwise(ops.mul, normed, weight, dtype=acc)
    if bias is not None:
        normed = make_pointwise(ops.add, normed, bias, dtype=acc)
    elif x.device.type == "cpu":
        # eager's CPU kernel adds a bias of 0 where there is none: a zero result is +0.0 whatever the
        # weight's sign
        normed = make_pointwise(ops.add, normed, 0.0, dtype=acc)
    return (cast(normed, out_meta_.dtype), cast(mean, mean_meta.dtype), cast(rstd, rstd_meta.dtype))


def _shifted_mean_dtype(acc, x):
    """What a norm's shifted mean (the sum of x - first over a row) is summed in. On the CPU float64 where
    acc is float32: x - first and its sum overflow float32 where x's own sum does not, and eager's CPU kernel
    keeps such a mean finite (a first element of -3e38: its variance inf, its output 0; a float32 sum gave
    an infinite mean and NaN). On CUDA acc: eager's kernels run Welford in float32, whose x - mean overflows
    there as well, and float64 conversions and sums slow a 16-bit layer norm's kernel."""
    return torch.float64 if acc == torch.float32 and x.device.type != "cuda" else acc


@register(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, n, c, hw, group, eps):
    """GroupNorm: x's channel dim (1) split into (group, channels per group), each (sample, group)'s mean and
    1 / sqrt(var + eps) taken over its channels and spatial dims as layer_norm takes a row's (two passes,
    the mean shifted by the group's first element), then eager's formula out = x * a + b, with per channel
    a = rstd * weight and b = bias - a * mean (Triton contracts it into a fused multiply-add, as CUDA's
    kernel is compiled). Returns (out, mean, rstd), the statistics of shape (N, group). Triton only: eager's
    CPU kernel adds with fused multiply-adds in its vector body, not in its scalar tail, whose rounding a
    C++ kernel of ours does not reproduce (where x equals its group's mean, eager's output is that rounding,
    ours 0, and a log of it differs)."""
    out_meta_, mean_meta, rstd_meta = out_meta()
    sizes = list(x.sizes)
    if x.device.type == "cpu" and not config.triton_cpu:
        raise NotLowered("group norm in C++: eager's CPU kernel rounds as its fused multiply-adds do")
    if len(sizes) < 2 or not as_expr(sizes[1]).is_Integer or int(sizes[1]) % group:
        raise NotLowered("group norm of a tensor without a static channel dim divisible by the groups")
    x_meta = _current[-1].args[0].meta.get("val")
    if not (isinstance(x_meta, torch.Tensor) and x_meta.is_contiguous()) and _returned(_current[-1]):
        # eager's kernels lay out a channels-last input's output by device (the CPU's keeps the format,
        # CUDA's is contiguous) and torch's meta function, whose strides we store in, by version
        raise NotLowered("a returned group norm of a tensor that is not contiguous (eager's kernel decides "
                         "its layout)")
    if any(t is not None and t.dtype != x.dtype for t in (weight, bias)):
        raise NotLowered("group norm with a weight or bias of another dtype (eager's kernels decide the "
                         "statistics' dtype, or raise)")
    if any(as_expr(s) == 0 for s in out_meta_.shape):
        raise NotLowered("group norm over zero elements (eager's kernel decides the statistics)")
    acc = acc_dtype_of(x.dtype, "sum")
    mean_acc = _shifted_mean_dtype(acc, x)
    grouped_sizes = [sizes[0], group, int(sizes[1]) // group, *sizes[2:]]
    grouped = view_reshape(x, grouped_sizes)
    dims = list(range(2, len(grouped_sizes)))
    mean, variance = _variance(grouped, dims, 0, True, acc, mean_acc, shifted=True)
    mean = cast(mean, acc)
    rstd = make_pointwise(lambda v: ops.rsqrt(ops.add(v, ops.constant(eps, acc))), variance, dtype=acc)
    per_channel = [1, group, int(sizes[1]) // group] + [1] * (len(sizes) - 2)
    channel_sizes = [sizes[0]] + per_channel[1:]
    if weight is not None:
        scale = make_pointwise(ops.mul, rstd, view_reshape(cast(weight, acc), per_channel), dtype=acc,
                               sizes=channel_sizes)
    else:
        scale = make_pointwise(lambda r: r, rstd, dtype=acc, sizes=channel_sizes)
    shift = make_pointwise(lambda a, m: ops.neg(ops.mul(a, m)), scale, mean, dtype=acc, sizes=channel_sizes)
    if bias is not None:
        shift = make_pointwise(ops.add, shift, view_reshape(cast(bias, acc), per_channel), dtype=acc)
    # a and b per (sample, channel), and the output a value of its own over x's sizes (not a view of a
    # grouped value: an output is stored in its traced strides, a view in its base's)
    per_sample_channel = sizes[:2] + [1] * (len(sizes) - 2)
    scale, shift = (view_reshape(v, per_sample_channel) for v in (scale, shift))
    normed = make_pointwise(lambda v, a, b: ops.add(ops.mul(v, a), b), x, scale, shift,
                            dtype=out_meta_.dtype, compute_dtype=acc)
    stats = [sizes[0], group]
    return (normed, cast(view_reshape(mean, stats), mean_meta.dtype), cast(view_reshape(rstd, stats), rstd_meta.dtype))


@register(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    """BatchNorm with running statistics (eval): out = x * scale + shift per channel (dim 1), where
    scale = weight / sqrt(var + eps) and shift = bias - mean * scale, computed in fp32 for 16-bit x; on the
    CPU where eager's kernel takes its other path, its formula (_batch_norm_cpu_strided).
    The saved statistics are as eager's: empty on the CPU; on CUDA the running mean and 1 / sqrt(var + eps)
    (torch's meta function says which, by their size)."""
    _refuse_mixed_norm_dtypes("batch norm", x, weight, bias, running_mean, running_var)
    out_meta_, mean_meta, invstd_meta = out_meta()
    if len(x.sizes) < 2:
        raise NotLowered("batch norm of a tensor without a channel dim")
    acc = acc_dtype_of(x.dtype, "sum")
    channels = x.sizes[1]
    per_channel = [channels] + [1] * (len(x.sizes) - 2)     # broadcasts against x's dims 1..

    def channel(v):
        return view_reshape(cast(v, acc), per_channel)

    def rstd(v):
        return ops.rsqrt(ops.add(v, ops.constant(eps, acc)))
    if x.device.type == "cpu" and not _batch_norm_cpu_contiguous():
        out = _batch_norm_cpu_strided(x, weight, bias, running_mean, running_var, eps, per_channel)
    else:
        scale = make_pointwise(rstd, channel(running_var), dtype=acc)
        if weight is not None:
            scale = make_pointwise(ops.mul, scale, channel(weight), dtype=acc)
        shift = make_pointwise(lambda m, s: ops.neg(ops.mul(m, s)), channel(running_mean), scale, dtype=acc)
        if bias is not None:
            shift = make_pointwise(ops.add, shift, channel(bias), dtype=acc)
        out = make_pointwise(lambda v, s, t: ops.add(ops.mul(v, s), t), x, scale, shift,
                             dtype=out_meta_.dtype, compute_dtype=acc)
    if mean_meta.numel() == 0:
        # eager's CPU kernel makes them of the running statistics' dtype (fp32 for a bf16 x with fp32
        # statistics, where torch's meta function says bf16)
        return (out, constant_value(0, mean_meta.shape, running_mean.dtype, mean_meta.device),
                constant_value(0, invstd_meta.shape, running_mean.dtype, invstd_meta.device))
    invstd = make_pointwise(rstd, running_var, dtype=invstd_meta.dtype, compute_dtype=acc)
    return out, _copy(cast(running_mean, mean_meta.dtype)), invstd


def _batch_norm_cpu_contiguous():
    """Whether eager's CPU eval batch norm takes its contiguous path (x dense in its memory format, the
    per-channel tensors dense): out = x * alpha + beta, alpha and beta per channel in float32 or float64."""
    def dense(node):
        meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if meta is None:
            return True
        formats = [torch.contiguous_format] + [torch.channels_last] * (meta.dim() == 4) + \
            [torch.channels_last_3d] * (meta.dim() == 5)
        return any(meta.is_contiguous(memory_format=f) for f in formats)
    return all(dense(a) for a in _current[-1].args[:5])


def _batch_norm_cpu_strided(x, weight, bias, running_mean, running_var, eps, per_channel):
    """Eager's CPU eval batch norm off its contiguous path: ((x - mean) * invstd) * weight + bias with
    invstd = 1 / sqrt(var + eps), as tensor operations: where x and the statistics are all 16-bit, each
    operation rounds to x's dtype (invstd too, computed as three tensor ops), else in float32 (float64)."""
    dtype = x.dtype
    acc = acc_dtype_of(dtype, "sum")
    stepwise = dtype in (torch.bfloat16, torch.float16) and all(
        t is None or t.dtype == dtype for t in (weight, bias, running_mean, running_var))

    def rounded(v):
        return ops.to_dtype(v, dtype) if stepwise else v

    def invstd(v):
        root = rounded(ops.sqrt(rounded(ops.add(v, ops.constant(eps, acc)))))
        return rounded(ops.truediv(ops.constant(1.0, acc), root))

    def channel(v, fill):
        if v is None:
            return fill
        return view_reshape(v, per_channel)

    def formula(v, m, s, w, b):
        return ops.add(rounded(ops.mul(rounded(ops.mul(rounded(ops.sub(v, m)), s)), w)), b)
    inv = make_pointwise(invstd, view_reshape(running_var, per_channel), dtype=acc)
    return make_pointwise(formula, x, channel(running_mean, 0.0), inv, channel(weight, 1.0),
                          channel(bias, 0.0), dtype=out_meta()[0].dtype, compute_dtype=acc)


@register(aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    # what BatchNorm in eval mode reaches the lowering as (torch's core decompositions leave it whole)
    if training or running_mean is None or running_var is None:
        raise NotLowered("batch norm in training mode (batch statistics)")
    return batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps)


@register(aten._native_batch_norm_legit_functional.default)
def batch_norm_training(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """BatchNorm with batch statistics, as AOTAutograd's functionalized training graphs hold it: per channel
    (dim 1) the mean and biased variance over the other dims, two passes over x; out = (x - mean) * rstd *
    weight + bias; the running statistics come back updated (momentum, the variance unbiased by n / (n - 1))
    for AOTAutograd to copy into the buffers. On the CPU the mean is sum / n summed in float64 for float32,
    as eager's CPU kernel sums in its accumulate type (a channel holding an infinity has an infinite mean,
    and the running mean matches eager's bit for bit); on CUDA it is shifted by each channel's first element
    (as layer_norm's), nearer eager's Welford mean (NaN for such a channel). Only in the
    halves of training graphs (GraphFacts.autograd): elsewhere eager's kernel runs, for its exact rounding
    (its CPU kernel rounds the statistics to the parameters' dtype and computes x * a + b)."""
    if not current_graph().autograd:
        raise NotLowered("batch norm with batch statistics outside a training graph (eager's rounding)")
    if not training:
        raise NotLowered("functional batch norm without batch statistics")
    if len(x.sizes) < 2:
        raise NotLowered("batch norm of a tensor without a channel dim")
    out_meta_, mean_meta, rstd_meta, rm_meta, rv_meta = out_meta()
    acc = acc_dtype_of(x.dtype, "sum")
    dims = [0, *range(2, len(x.sizes))]
    count = _count(x, dims)
    cpu = x.device.type == "cpu"
    mean, var = _variance(x, dims, 0, True, acc, mean_acc=_shifted_mean_dtype(acc, x) if cpu else None,
                          shifted=not cpu)
    rstd = make_pointwise(lambda v: ops.rsqrt(ops.add(v, ops.constant(eps, acc))), var, dtype=acc)
    per_channel = [x.sizes[1]] + [1] * (len(x.sizes) - 2)
    out = make_pointwise(ops.mul, make_pointwise(ops.sub, x, mean, dtype=acc), rstd, dtype=acc)
    if weight is not None:
        out = make_pointwise(ops.mul, out, view_reshape(cast(weight, acc), per_channel), dtype=acc)
    if bias is not None:
        out = make_pointwise(ops.add, out, view_reshape(cast(bias, acc), per_channel), dtype=acc)
    save_mean, save_var, save_rstd = (view_squeeze(v, dims) for v in (mean, var, rstd))

    def running(old, new, meta):
        return make_pointwise(lambda o, v: ops.add(ops.mul(ops.constant(momentum, acc), v),
                                                   ops.mul(ops.constant(1 - momentum, acc), o)),
                              cast(old, acc), new, dtype=meta.dtype, compute_dtype=acc)
    unbiased = make_pointwise(lambda v, n, m: ops.truediv(ops.mul(v, n), m), save_var, count, count - 1, dtype=acc)
    return (cast(out, out_meta_.dtype), cast(save_mean, mean_meta.dtype), cast(save_rstd, rstd_meta.dtype),
            running(running_mean, save_mean, rm_meta), running(running_var, unbiased, rv_meta))


def _read_in_passes(x, passes):
    """x, for a lowering that reads every element of it in `passes` loops (a row's max, then its sum, then
    the output): computed into a buffer first where the scheduler's policy would store a value with that
    many readers. Recomputed, a value with transcendental ops can differ in the last bit between a
    vectorized loop (glibc's vector math) and a scalar one, and softmax's x - max(x) is then not exactly 0
    at the maximum (argmax's equality with the maximum then finds no element)."""
    if isinstance(x, Pointwise) and scheduler.realize_reason(x, passes):
        return realize(x, current_graph())
    return x


@register(aten._softmax.default)
def softmax(x, dim, half_to_float=False):
    out_dtype = out_meta().dtype
    acc = acc_dtype_of(x.dtype, "sum")
    x = cast(_read_in_passes(x, 3), acc)
    top = reduce(x, [dim], "max", acc, True)
    shifted = make_pointwise(lambda v, m: ops.exp(ops.sub(v, m)), x, top, dtype=acc)
    if reduction_dims([dim], len(x.sizes)) == [len(x.sizes) - 1]:
        # exp once per element, not in both the sum and the output: stored where the sum makes it (the
        # scheduler keeps each row in a stack array: kernel.scratch) and scaled by 1/sum after
        shifted = realize(shifted, current_graph())
    total = reduce(shifted, [dim], "sum", acc, True)
    # times 1/sum, as eager's vectorized softmax does (one division per row, not per element)
    return make_pointwise(lambda e, t: ops.mul(e, ops.reciprocal(t)), shifted, total, dtype=out_dtype,
                          compute_dtype=acc)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float=False):
    out_dtype = out_meta().dtype
    acc = acc_dtype_of(x.dtype, "sum")
    x = cast(_read_in_passes(x, 3), acc)
    top = reduce(x, [dim], "max", acc, True)
    shifted = make_pointwise(ops.sub, x, top, dtype=acc)
    total = reduce(make_pointwise(ops.exp, shifted, dtype=acc), [dim], "sum", acc, True)
    return make_pointwise(lambda s, t: ops.sub(s, ops.log(t)), shifted, total, dtype=out_dtype,
                          compute_dtype=acc)
