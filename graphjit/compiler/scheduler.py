"""Fusion: which computed buffers share a kernel (one loop nest), and why not.

A kernel has an outer loop (the parallel one) shared by all its nodes; each node adds an inner loop:
a reduction's inner loop is what it reduces over, a pointwise node's inner loop is its remaining dims.
Softmax over the last dim of [rows, n] is one kernel: outer [rows], inner loops max, sum, then write.

    kernel3  outer [256]
      group 0 inner [1024]: buf1 = reduction max         (local: kept in a register)
      group 1 inner [1024]: buf2 = reduction sum         (local)
      group 2 inner [1024]: buf3 = pointwise             (stored)

Nodes are fused greedily in program order. A node joins the current kernel if its loops match and
every value it reads from that kernel is produced in the same iteration (same index); otherwise the
refusal's reason goes to GRAPHJIT_LOGS=fusion. A buffer read only inside its kernel, right where it is
produced, is never stored (`local`). Inlining pointwise producers into their readers happens earlier, in
lowering; `realize_reason` is the policy deciding when a shared lazy value is computed once instead.
"""
import dataclasses

import sympy
import torch

from .. import logs
from .. import config
from .ir import (ComputedBuffer, ExternKernel, Pointwise, Reduction, StorageView, index_symbol, linear_index,
                 record, simplify_with_ranges)

# Ops whose recomputation in every reader costs more than reading a stored result.
EXPENSIVE_OPS = {"exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
                 "sigmoid", "erf", "pow", "atan2", "masked", "rand"}


def realize_reason(value, num_users):
    """Why a lazy value should be computed into a buffer rather than inlined into its readers, or None."""
    if not isinstance(value, Pointwise):
        return None
    rec = record(value.inner_fn, [index_symbol(f"x{i}") for i in range(len(value.sizes))])
    if rec.op_count > config.realize_opcount_threshold:
        return f"its body has {rec.op_count} ops (> realize_opcount_threshold)"
    if len(rec.reads) > config.realize_loads_threshold:
        # the body is everything inlined into it, transitively: bound what each reader recomputes
        return f"its body loads {len(rec.reads)} values (> config.realize_loads_threshold)"
    index_ops = max((sympy.count_ops(index) for _, index in rec.reads if isinstance(index, sympy.Basic)),
                    default=0)
    if index_ops > config.realize_index_ops_threshold:
        return f"it reads through an index of {index_ops} operations (> realize_index_ops_threshold)"
    if num_users > 1:
        streamed = _streamed_reads(rec.reads, value.sizes)
        if len(streamed) > config.realize_reads_threshold:
            return f"read by {num_users} ops and loads {len(streamed)} values along its last dim " \
                   f"(> realize_reads_threshold)"
        expensive = sorted(set(rec.op_counts) & EXPENSIVE_OPS)
        if expensive:
            return f"read by {num_users} ops and computes {', '.join(expensive)}"
    return None


def _streamed_reads(reads, sizes):
    """The distinct reads of a body whose index moves along its innermost dim (of size > 1): what each
    reader that recomputes the body reads again in full. A read constant along that dim (a per-row
    statistic, a label, a scalar) is one value per row, cheap to read again."""
    dims = [i for i, n in enumerate(sizes) if n != 1]
    if not dims:
        return set()
    inner = index_symbol(f"x{dims[-1]}")
    return {(name, index) for name, index in reads if inner in getattr(index, "free_symbols", ())}


# ---------------------------------------------------------------------------------------------------------
# Scheduled nodes and kernels
# ---------------------------------------------------------------------------------------------------------


def nonunit(sizes):
    return tuple(s for s in sizes if s != 1)


def expand_index(sizes, loop_vars):
    """The index of a tensor of `sizes` from loop variables of its non-1 dims (0 at size-1 dims)."""
    it = iter(loop_vars)
    return [sympy.Integer(0) if s == 1 else next(it) for s in sizes]


def outer_vars(n):
    return [index_symbol(f"x{i}") for i in range(n)]


def inner_vars(n):
    return [index_symbol(f"r{i}") for i in range(n)]


@dataclasses.dataclass(eq=False)
class SchedNode:
    """A computed buffer placed in a kernel: `outer` loop dims (shared) and its own `inner` loop dims."""
    buffer: ComputedBuffer
    outer: tuple
    inner: tuple
    _accesses: tuple = None
    _column: bool = None

    @property
    def name(self):
        return self.buffer.name

    def is_column_reduction(self):
        """Whether this is a reduction one of whose reads moves by 1 along its innermost outer (result) dim
        and by more than 1 along its innermost reduced dim (computed once)."""
        if self._column is None:
            self._column = False
            if self.is_reduction and self.outer and self.inner:
                x, r = outer_vars(len(self.outer))[-1], inner_vars(len(self.inner))[-1]
                for _, index in self.accesses()[0]:
                    index = sympy.expand(index)
                    if index.coeff(x) == 1 and index.coeff(r) not in (0, 1) and not index.coeff(r).has(x):
                        self._column = True
                        break
        return self._column

    @property
    def is_reduction(self):
        return isinstance(self.buffer.data, Reduction)

    def body_args(self, xs, rs):
        """Arguments of the node's inner_fn, given the kernel's loop variables."""
        data = self.buffer.data
        if self.is_reduction:
            return [expand_index(data.sizes, xs), expand_index(data.reduction_sizes, rs)]
        return [expand_index(data.sizes, list(xs) + list(rs))]

    def write_index(self, xs, rs):
        layout = self.buffer.layout
        if self.is_reduction:
            return linear_index(expand_index(layout.sizes, xs), layout.strides)
        return linear_index(expand_index(layout.sizes, list(xs) + list(rs)), layout.strides)

    def ranges(self):
        xs, rs = outer_vars(len(self.outer)), inner_vars(len(self.inner))
        return {**dict(zip(xs, self.outer)), **dict(zip(rs, self.inner))}

    def accesses(self):
        """(reads, write index) in the canonical variables x0.. (outer) and r0.. (inner), simplified."""
        if self._accesses is None:
            xs, rs = outer_vars(len(self.outer)), inner_vars(len(self.inner))
            rec = record(self.buffer.data.inner_fn, *self.body_args(xs, rs), ranges=self.ranges())
            self._accesses = rec.reads, simplify_with_ranges(self.write_index(xs, rs), self.ranges())
        return self._accesses

    def __str__(self):
        kind = f"reduction {self.buffer.data.reduction_type}" if self.is_reduction else "pointwise"
        return f"{self.name} ({kind}, inner [{', '.join(map(str, self.inner))}])"


def split_node(buffer, outer=None):
    """A SchedNode for buffer whose outer loop is `outer`, or (None, reason) if its loops don't allow it.
    Without `outer`, the node picks: a reduction its output dims, a pointwise node all but its last dim."""
    data = buffer.data
    if isinstance(data, Reduction):
        own_outer, inner = nonunit(data.sizes), nonunit(data.reduction_sizes)
        if outer is not None and tuple(outer) != own_outer:
            return None, f"loops differ: kernel iterates [{_fmt(outer)}], reduction {buffer.name} [{_fmt(own_outer)}]"
        return SchedNode(buffer, own_outer, inner), None
    dims = nonunit(data.sizes)
    if outer is None:
        outer = dims[:-1]
    outer = tuple(outer)
    if dims[:len(outer)] != outer:
        return None, f"loops differ: kernel iterates [{_fmt(outer)}], {buffer.name} is [{_fmt(dims)}]"
    return SchedNode(buffer, outer, dims[len(outer):]), None


def _starved(node, outer):
    """Why node, placed under a kernel's outer loop `outer`, would lose the parallelism of its own outer
    loop (split_node's choice), or None: it has at least config.fusion_parallel_elements elements, and
    `outer` has fewer iterations than config.fusion_parallel_rows and than its own loop. Sizes that are
    not numbers (symbolic) are not judged."""
    own, _ = split_node(node.buffer)
    here, alone = product_int(outer), product_int(own.outer)
    elements = product_int(node.outer + node.inner)
    if None in (here, alone, elements) or elements < config.fusion_parallel_elements:
        return None
    if here < alone and here < config.fusion_parallel_rows:
        return (f"its {elements} elements would run {here} outer iterations at a time, not {alone} "
                f"(fusion_parallel_rows)")
    return None


def _fmt(sizes):
    return ", ".join(map(str, sizes))


@dataclasses.dataclass(eq=False)
class Group:
    """Nodes of a kernel that run in one inner loop (same inner dims, no dependence on a reduction
    finished in the same loop)."""
    inner: tuple
    nodes: list


@dataclasses.dataclass(eq=False)
class Kernel:
    name: str
    outer: tuple
    nodes: list                                            # SchedNode, in execution order
    groups: list = dataclasses.field(default_factory=list)
    local: set = dataclasses.field(default_factory=set)    # buffers never stored: read only in place
    # pointwise buffers read only in this kernel, by later inner loops of the same outer iteration: the
    # C++ codegen keeps one outer iteration's elements in an array on the stack, not in an allocated buffer
    scratch: set = dataclasses.field(default_factory=set)

    def written(self):
        return {n.name: n for n in self.nodes}

    def try_add(self, buffer):
        """Add buffer's node to this kernel; returns None, or the reason it can't join."""
        if len(self.nodes) >= config.max_fusion_size:
            return f"kernel already has {len(self.nodes)} nodes (max_fusion_size)"
        node, reason = split_node(buffer, self.outer)
        if node is None and self._pointwise_only() and isinstance(buffer.data, Reduction):
            node, reason = self._resplit_for(buffer) or (None, reason)
        if node is None:
            return reason
        reason = _starved(node, self.outer) or self._dependence_refusal(node) or self._column_refusal(node)
        if reason:
            return reason
        self.nodes.append(node)
        return None

    def _column_refusal(self, node):
        """On the CPU, a column reduction (its results contiguous, its reduced rows strided: a bias gradient)
        joins a kernel only where it and the kernel's nodes read some element in the same iteration: the
        same buffer at the same index, or a buffer the kernel produces. Otherwise it stays apart, in a kernel
        the C++ codegen runs in tiles of results (CppKernel._column_tile runs them only in a kernel of
        reductions): fused with row-wise work it scans each result's column at a stride. That happens with
        unrelated work whose outer loop has the same size (an MLP's bias gradient beside the GELU backward,
        both over 256 rows: 2x Inductor's time) and with work reading the same buffer transposed, which a
        square matrix allows (layer_norm's weight gradients, sums down the columns of a [256, 256] input,
        beside the row statistics of its input gradient, sums along the rows: 4.5x)."""
        if node.buffer.layout.device.type != "cpu" or not self.nodes:
            return None
        if not (node.is_column_reduction() or any(n.is_column_reduction() for n in self.nodes)):
            return None
        reads = set(node.accesses()[0])
        if {name for name, _ in reads} & {n.name for n in self.nodes}:
            return None
        if reads & {access for n in self.nodes for access in n.accesses()[0]}:
            return None
        return ("a column reduction reads no element in the same iteration as this kernel (kept apart for its "
                "column tiles)")

    def _pointwise_only(self):
        return all(not n.is_reduction for n in self.nodes)

    def _resplit_for(self, buffer):
        """A pointwise-only kernel can move its outer/inner boundary to match a reduction's outer loop."""
        target = nonunit(buffer.data.sizes)
        nodes = [split_node(n.buffer, target)[0] for n in self.nodes]
        if any(n is None or _starved(n, target) for n in nodes):
            return None
        node, reason = split_node(buffer, target)
        if node is None:
            return None
        old = (self.outer, self.nodes)
        self.outer, self.nodes = target, nodes
        if self._dependence_refusal(node) is None and all(
                self._dependence_refusal(n, upto=i) is None for i, n in enumerate(nodes)):
            return node, None
        self.outer, self.nodes = old
        return None

    def _dependence_refusal(self, node, upto=None):
        """A node may read a buffer produced in this kernel only where, and when, it is produced: at the
        same index, in the same outer iteration."""
        writers = {n.name: n for n in self.nodes[:upto]}
        reads, _ = node.accesses()
        for name, index in reads:
            writer = writers.get(name)
            if writer is None:
                continue
            _, written_at = writer.accesses()
            uses_inner = any(s.name.startswith("r") for s in written_at.free_symbols)
            if uses_inner and writer.inner != node.inner:
                return (f"reads {name} (made in this kernel over inner [{_fmt(writer.inner)}]) over a different "
                        f"inner loop [{_fmt(node.inner)}]")
            if sympy.expand(index - written_at) != 0:
                return f"reads {name} at {index}, not where this kernel writes it ({written_at})"
        return None

    def finish(self):
        """Group nodes into inner loops, in order. Then a loop that sits between two loops over the same
        row, reads nothing made in this kernel and writes nothing read before it moves to the front: a copy
        of attention's values fused between softmax's exp and its division kept Triton from keeping the exp
        in registers from one to the other."""
        self.groups = []
        for node in self.nodes:
            group = self.groups[-1] if self.groups else None
            if group is not None and group.inner == node.inner and not self._reads_reduction_of(node, group):
                group.nodes.append(node)
            else:
                self.groups.append(Group(node.inner, [node]))
        made = {n.name for n in self.nodes}
        moved = True
        while moved:
            moved = False
            for p in range(1, len(self.groups) - 1):
                group, before, after = self.groups[p], self.groups[p - 1], self.groups[p + 1]
                if before.inner != after.inner or group.inner == after.inner:
                    continue
                reads = {name for n in group.nodes for name, _ in n.accesses()[0]}
                read_before = {name for g in self.groups[:p] for n in g.nodes for name, _ in n.accesses()[0]}
                if reads & made or {n.name for n in group.nodes} & read_before:
                    continue
                self.groups.insert(0, self.groups.pop(p))
                moved = True
                break

    @staticmethod
    def _reads_reduction_of(node, group):
        reductions = {n.name for n in group.nodes if n.is_reduction}
        return any(name in reductions for name, _ in node.accesses()[0])

    def group_of(self, name):
        for i, group in enumerate(self.groups):
            if any(n.name == name for n in group.nodes):
                return i
        return None

    def __str__(self):
        lines = [f"{self.name}  outer [{_fmt(self.outer)}]"]
        for i, group in enumerate(self.groups):
            nodes = ", ".join(str(n) + (" local" if n.name in self.local else " scratch" if n.name in self.scratch
                                        else "") for n in group.nodes)
            lines.append(f"  group {i} inner [{_fmt(group.inner)}]: {nodes}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Scheduling a LoopGraph
# ---------------------------------------------------------------------------------------------------------


def schedule(graph):
    """The graph's work as a list of Kernels and ExternKernels, in execution order.

    A computed buffer joins the latest kernel that takes it, so long as no kernel or extern call after that
    one makes a value it reads (moving it earlier keeps its inputs ready): a layer_norm's saved statistics
    join its kernel across the matmul that reads its output. It moves across matmuls and convolutions only
    (_extern_barrier), and no further back than MOVE_BACK_KERNELS kernels. A buffer without elements has
    nothing to compute: it gets a kernel of its own that nothing joins, and that runs no loop."""
    items, open_kernels = [], []
    for node in graph.nodes:
        if isinstance(node, ExternKernel):
            items.append(node)
            if _extern_barrier(node):
                open_kernels = []
            else:
                open_kernels.append(node)
            continue
        if has_no_elements(node):
            node_split, _ = split_node(node)
            items.append(Kernel(f"kernel{sum(isinstance(i, Kernel) for i in items)}", node_split.outer, [node_split]))
            continue
        if not _fuse_into_open_kernel(node, open_kernels):
            node_split, _ = split_node(node)
            kernel = Kernel(f"kernel{sum(isinstance(i, Kernel) for i in items)}", node_split.outer, [node_split])
            items.append(kernel)
            open_kernels.append(kernel)
    kernels = [k for k in items if isinstance(k, Kernel)]
    for kernel in kernels:
        kernel.finish()
    _find_local_buffers(graph, kernels, items)
    if logs.wanted("fusion"):
        logs.log("fusion", "schedule:\n" + "\n".join(
            str(i) if isinstance(i, Kernel) else f"{i.name}: extern {i.op} ({i.reason})" for i in items))
    return items


def has_no_elements(buffer):
    """Whether a computed buffer has no elements (a zero-size dim): a loop over it would run zero times,
    and fused into another kernel's loop it would be stored where it has no memory."""
    return any(s == 0 for s in buffer.layout.sizes)


def is_empty_kernel(kernel):
    """A kernel of buffers without elements: Triton prints and launches nothing for it (C++ prints loops
    that run zero times); the wrapper still allocates its buffers."""
    return all(has_no_elements(n.buffer) for n in kernel.nodes)


# How many kernels back a computed buffer may move to join one (each try costs compile time).
MOVE_BACK_KERNELS = 16


# The extern calls work may move back across: matmuls and convolutions write no argument, draw no random
# numbers, and raise on no value of their operands (their sizes were checked by the trace).
_PASSABLE_EXTERNS = frozenset({
    torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default, torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default,
})


def _extern_barrier(extern):
    """Whether nothing may move from after this extern call to before it: any call but those of
    _PASSABLE_EXTERNS. Work moved before a matmul cannot change what the graph computes or, where that work
    raises (a checked index, an integer division by zero), which error comes first; a check
    (aten._linalg_check_errors, an assert, a custom op) must raise before later work runs."""
    return extern.op not in _PASSABLE_EXTERNS


def _fuse_into_open_kernel(buffer, open_kernels):
    reads = {name for name, _ in split_node(buffer)[0].accesses()[0]}
    later_writes = set()
    tried = 0
    for item in reversed(open_kernels):
        if reads & later_writes or tried == MOVE_BACK_KERNELS:
            break
        if isinstance(item, ExternKernel):
            later_writes |= {out.name for out in item.outputs}
            continue
        reason = item.try_add(buffer)
        if reason is None:
            return True
        if tried == 0:
            logs.log("fusion", f"{buffer.name} not fused into {item.name}: {reason}")
        tried += 1
        later_writes |= set(item.written())
    return False


def _find_local_buffers(graph, kernels, items):
    """A buffer is local (never stored) if it is not an output, nothing outside its kernel reads it, and
    inside it every reader gets the value in place: a reduction's result from the outer iteration, a
    pointwise value from the same inner loop."""
    outside = {v.buffer.name for v in graph.outputs if isinstance(v, StorageView)}
    for item in items:
        if isinstance(item, ExternKernel):
            outside |= {v.buffer.name for v in item.inputs()}
    readers = {}
    for kernel in kernels:
        for node in kernel.nodes:
            for name, _ in node.accesses()[0]:
                readers.setdefault(name, set()).add((kernel.name, node.name))
    for kernel in kernels:
        for node in kernel.nodes:
            if node.name in outside:
                continue
            users = readers.get(node.name, set())
            if any(k != kernel.name for k, _ in users):
                continue
            home = kernel.group_of(node.name)
            if node.is_reduction or all(kernel.group_of(reader) == home for _, reader in users):
                kernel.local.add(node.name)
            elif kernel.outer and (product_int(node.inner) or config.scratch_max_elements + 1) <= \
                    config.scratch_max_elements:
                kernel.scratch.add(node.name)


def product_int(sizes):
    total = 1
    for s in sizes:
        if not sympy.sympify(s).is_Integer:
            return None
        total *= int(s)
    return total
