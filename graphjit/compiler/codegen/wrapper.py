"""The Python that runs a compiled graph: allocate buffers, call kernels and extern ops in order, return.

    def call(arg0, arg1):
        buf0 = empty_strided((256, 1024), (1024, 1), dtype=float32)
        kernel0(arg0.data_ptr(), buf0.data_ptr())
        buf1 = extern0(buf0, reinterpret(arg1, (1024, 512), (1, 1024), 0))
        del buf0
        return (buf1,)

Everything the source names (kernels, ops, dtypes, constants) is bound in its globals, so each call runs
only these lines. GRAPHJIT_LOGS=output_code prints it.
"""
import bisect
import collections
import ctypes
import hashlib
import linecache
import math
import operator
import re

import sympy
import torch
from torch.utils import _pytree as pytree

from ...code_cache import compile_source
from ..ir import SizeFloat, StaticOnly, StorageView, as_expr, format_index, is_static
from ..scheduler import Kernel
from .cpp import kernel_error


_guards = getattr(torch._C, "_dynamo", None) and getattr(torch._C._dynamo, "guards", None)
_FAST_EMPTY = {device: getattr(_guards, f"_empty_strided_{device}", None) for device in ("cpu", "cuda")}
_FAST_EMPTY = {device: fn for device, fn in _FAST_EMPTY.items() if fn is not None}
_reinterpret = getattr(_guards, "_reinterpret_tensor", None) or (
    lambda t, sizes, strides, offset: torch.as_strided(t, sizes, strides, t.storage_offset() + offset))


def _as_view(t, sizes, strides, offset):
    """An output that is a view of an input or of another output, as eager's is: an autograd view of it,
    sharing its version counter (a write into the input after the call is one into the view: the backward
    that saved the view sees it; an in-place op on the view with a tensor that requires grad makes the
    viewed tensor require grad). _reinterpret's alias, a tensor of its own over the same memory, is
    neither."""
    return torch.as_strided(t, sizes, strides, t.storage_offset() + offset)


class WrapperCode:
    fast_cuda_empty = False     # set by wrappers that run on their device (see empty())

    def __init__(self, graph, items, signatures, facts):
        self.graph = graph
        self.facts = facts          # facts.GraphFacts: which inputs are parameters or buffers
        self.items = items
        self.signatures = signatures
        self.lines = []
        self.globals = {"empty_strided": torch.empty_strided, "reinterpret": _reinterpret, "as_view": _as_view,
                        "torch": torch}
        # matmul epilogues (TritonWrapperCode): kernels emitted at an earlier item, buffers that must not
        # take a dead buffer's memory (allocated earlier than the item order says), names never bound
        self.fused_away, self.fresh, self.unbound = set(), set(), set()
        self._constants = {}
        self.op_names = {}          # bound name -> the OpOverload it calls (runtime/graph_cache.py records it)

    def bind(self, value, prefix="_c"):
        """A global name for value in the generated module."""
        key = id(value)
        if key not in self._constants:
            name = f"{prefix}{len(self._constants)}"
            self._constants[key] = (name, value)
            self.globals[name] = value
        return self._constants[key][0]

    def arg(self, value):
        """Source text of an extern call's argument."""
        if isinstance(value, StorageView):
            return self.view(value)
        if isinstance(value, (list, tuple)):
            items = ", ".join(self.arg(v) for v in value)
            if isinstance(value, list) and not all(type(v) in (int, bool) for v in value):
                return f"[{items}]"
            # a list of ints (a conv's stride, a view's sizes) as a tuple: a constant of the code object,
            # not a list built on every call; ATen's int[] arguments take either
            return f"({items}{',' if len(value) == 1 else ''})"
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value)
        if isinstance(value, (sympy.Expr, torch.SymInt)):
            return pyexpr(value)
        if isinstance(value, SizeFloat):
            self.globals["math"] = math
            if value.steps is not None:
                return f"float({_float_steps_text(value.steps)})"
            return f"float({_float_expr_text(value.expr)})"
        if isinstance(value, float):
            return repr(value) if value == value and abs(value) != float("inf") else f"float('{value}')"
        return self.bind(value)

    def view(self, view, output=False):
        """A StorageView as a tensor expression: the buffer itself or an as_strided view of it (an output:
        eager's autograd view of the input or other output it views, _as_view)."""
        name = view.buffer.name
        if view.is_full():
            return name
        how = "as_view" if output else "reinterpret"
        return f"{how}({name}, {pytuple(view.sizes)}, {pytuple(view.strides)}, {pyexpr(view.offset)})"

    def generate(self, check_inputs, eager_if_grad):
        graph = self.graph
        inputs = [b for b in graph.inputs if b.position is not None]
        named = [(b.position, b.name) for b in inputs] + [(p, f"arg{p}") for p, _ in graph.size_inputs] + \
            [(p, f"arg{p}") for p in graph.unread_inputs]
        params = ", ".join(name for _, name in sorted(named))
        self.params = params
        body = []
        if self.facts.boxed:
            # one list of arguments, emptied: the caller's list keeps no input alive, and each input is
            # dropped after its last use below
            self.lines.append("def call(args):")
            if named:
                body.append(f"{params}{',' if len(named) == 1 else ''} = args")
            body.append("args.clear()")
        else:
            self.lines.append(f"def call({params}):")
        if eager_if_grad:
            body.append(f"if grad_enabled(): return eager({params})")
            self.globals["grad_enabled"] = torch.is_grad_enabled
        body += self._bind_sizes()
        if check_inputs and inputs:
            # kernels index inputs with the sizes, strides and dtypes seen at compile time (with size
            # symbols: the sizes and strides as the symbols read off the inputs give them)
            got = ", ".join(f"{b.name}.shape, {b.name}.stride(), {b.name}.dtype" for b in inputs)
            if all(is_static(e) for b in inputs for e in (*b.layout.sizes, *b.layout.strides)):
                self.globals["_expected"] = tuple(
                    item for b in inputs for item in (tuple(int(s) for s in b.layout.sizes),
                                                      tuple(int(s) for s in b.layout.strides), b.layout.dtype))
                body.append(f"if ({got},) != _expected: return eager({params})")
            else:
                expected = ", ".join(f"{pytuple(b.layout.sizes)}, {pytuple(b.layout.strides)}, "
                                     f"{self.bind(b.layout.dtype, '_dtype')}" for b in inputs)
                body.append(f"if ({got},) != ({expected},): return eager({params})")
        body += self._disjoint_check(params)
        for buf in graph.inputs:
            if buf.position is None:
                self.globals[buf.name] = buf.value
        last_use = self._last_uses(inputs_too=self.facts.boxed)
        outputs = {v.buffer.name for v in graph.outputs if isinstance(v, StorageView)}
        returned = self._outputs()
        # inputs the return expression names (returned as they are, as views, or as eager's alias)
        outputs |= {b.name for b in inputs if re.search(rf"\b{b.name}\b", returned)}
        donors = self._donors(outputs)
        layouts = {b.name: b.layout for b in graph.buffers()}

        def key(name):      # equal expressions of the size symbols: equal sizes on every call
            layout = layouts[name]
            return tuple(layout.sizes), tuple(layout.strides), layout.dtype, layout.device
        allocated = [[n.name for n in self._allocated(item)] if isinstance(item, Kernel) else []
                     for item in self.items]
        upcoming = collections.Counter(key(name) for names in allocated for name in names)
        free = collections.defaultdict(list)     # layout key -> dead buffers kept for a later allocation
        self.reuse = {}
        for step, item in enumerate(self.items):
            for name in allocated[step]:
                upcoming[key(name)] -= 1
                if free[key(name)] and name not in self.fresh:
                    self.reuse[name] = free[key(name)].pop()
            if isinstance(item, Kernel):
                body += self._profiled(item.name, self._kernel_call(item))
            else:
                body += self._extern_call(item)
            dead = []
            for name, last in last_use.items():
                if last != step or name in outputs or name in self.unbound:
                    continue
                if name in donors and upcoming[key(name)] > len(free[key(name)]):
                    free[key(name)].append(name)      # a later kernel output of the same layout takes it
                else:
                    dead.append(name)
            if dead:
                body.append(f"del {', '.join(dead)}")
        body.append("return " + returned)
        self.lines += ["    " + line for line in body]
        return "\n".join(self.lines) + "\n"

    def _profiled(self, name, lines):
        """Lines of one kernel call, inside a profiler range named after the graph and kernel when
        config.profile_kernels is set (a compile report's profile reads them)."""
        from ... import config
        if not config.profile_kernels or not lines:
            return lines
        self.globals["_record_function"] = torch.profiler.record_function
        return [f"with _record_function({f'graphjit {self.facts.name}:{name}'!r}):"] + ["    " + l for l in lines]

    def _bind_sizes(self):
        """Lines reading each size symbol off the call's inputs: an int input that is one, or the first
        input dim (else stride) whose size is exactly the symbol."""
        wanted = self.graph.size_symbols()
        if not wanted:
            return []
        sources = {symbol: f"arg{position}" for position, symbol in self.graph.size_inputs if symbol.is_Symbol}
        for buf in sorted((b for b in self.graph.inputs if b.position is not None),
                          key=operator.attrgetter("position")):
            for attr, exprs in (("size", buf.layout.sizes), ("stride", buf.layout.strides)):
                for d, e in enumerate(exprs):
                    if e.is_Symbol and e in wanted and e not in sources:
                        sources[e] = f"{buf.name}.{attr}({d})"
        missing = wanted - set(sources)
        if missing:
            raise StaticOnly(f"size symbols {sorted(map(str, missing))} are no input's size, stride or int")
        return [f"{symbol.name} = {sources[symbol]}" for symbol in sorted(sources, key=str)]

    def _allocated(self, kernel):
        """The nodes of a kernel whose buffers the wrapper allocates (not kept in registers)."""
        return [n for n in kernel.nodes if n.name not in kernel.local and n.name not in kernel.scratch]

    def _donors(self, outputs):
        """Kernel outputs whose memory may be reused once dead: not graph outputs, and read only by
        kernels and by extern ops that return new tensors (a view op's result would alias the memory)."""
        from ..lowering import EXTERN_OPS
        donors = {n.name for item in self.items if isinstance(item, Kernel) for n in self._allocated(item)}
        for item in self.items:
            if not isinstance(item, Kernel) and item.op not in EXTERN_OPS:
                donors -= {v.buffer.name for v in item.inputs()}
        return donors - outputs

    def alloc(self, node):
        """The line allocating a kernel output: a dead buffer of the same layout, or a new one."""
        donor = self.reuse.get(node.name)
        if donor is not None:
            return f"{node.name} = {donor}; del {donor}   # reuse"
        return self.empty(node.name, node.buffer.layout)

    def empty(self, name, layout):
        """The line allocating a new buffer `name` of `layout`. On the CPU and CUDA through torch's C++
        allocation helpers (what Inductor's wrappers call: a third of empty_strided's cost); a CUDA wrapper
        makes sure its device is the current one first (TritonWrapperCode's prologue)."""
        sizes, strides = pytuple(layout.sizes), pytuple(layout.strides)
        dtype = self.bind(layout.dtype, '_dtype')
        fast = _FAST_EMPTY.get(layout.device.type) if self.fast_cuda_empty or layout.device.type == "cpu" else None
        if fast is not None:
            self.globals[f"empty_{layout.device.type}"] = fast
            return f"{name} = empty_{layout.device.type}({sizes}, {strides}, {dtype})"
        return f"{name} = empty_strided({sizes}, {strides}, dtype={dtype}, device={self.bind(layout.device, '_device')})"

    def _kernel_call(self, kernel):
        lines = [self.alloc(node) for node in self._allocated(kernel)]
        signature = self.signatures[kernel.name]
        args = ", ".join([f"{name}.data_ptr()" for name in signature.args] + list(signature.sizes))
        call = f"{kernel.name}({args})"
        if signature.returns_status:
            self.globals["kernel_error"] = kernel_error
            lines.append(f"if status := {call}: kernel_error(status, {kernel.name!r})")
        else:
            lines.append(call)
        return lines

    def _extern_call(self, kernel):
        op = self.bind(getattr(kernel.op, "_op", kernel.op), "_op")
        self.op_names[op] = kernel.op
        args = [self.arg(a) for a in kernel.args]
        args += [f"{k}={self.arg(v)}" for k, v in kernel.kwargs.items()]
        call = f"{op}({', '.join(args)})"
        if not kernel.outputs:
            return [call]
        if len(kernel.outputs) == 1 and kernel.outputs[0].path == ():
            return [f"{kernel.outputs[0].name} = {call}"] + self._traced_layouts(kernel)
        result = f"_{kernel.name}"
        lines = [f"{result} = {call}"]
        for out in kernel.outputs:
            lines.append(f"{out.name} = {result}" + "".join(f"[{i}]" for i in out.path))
        lines.append(f"del {result}")
        return lines + self._traced_layouts(kernel)

    def _traced_layouts(self, kernel):
        """Lines giving a fallback op's outputs the dtype and strides the trace saw. Its ATen kernel may lay
        a result out otherwise than the meta function the trace ran (copysign of a transposed operand comes
        out transposed, its meta says contiguous), or make it of another dtype (the CPU kernel of
        _native_batch_norm_legit_functional returns bf16 running statistics for bf16 ones, its meta says
        float32), and what reads the result indexes it with the traced strides and reads it as the traced
        dtype: such a result is converted and copied into them. Extern ops proper (matmuls, attention) are
        trusted, but for convolution: its output's layout is the kernel's choice, which can differ from the
        meta function's (on the CPU with one thread, contiguous where the meta function propagates an
        input's channels-first-in-memory strides: fuzz triton 10800862), so its strides are checked
        inline and a differing result copied."""
        if kernel.reason == "extern op":
            if kernel.op is not torch.ops.aten.convolution.default:
                return []
            self.globals["as_traced"] = _as_traced
            return [f"if {out.name}.stride() != {pytuple(out.layout.strides)}: "
                    f"{out.name} = as_traced({out.name}, {pytuple(out.layout.strides)}, {out.layout.dtype})"
                    for out in kernel.outputs
                    if not any(st == 0 and n not in (0, 1) for n, st in zip(out.layout.sizes, out.layout.strides))]
        self.globals["as_traced"] = _as_traced
        lines = []
        for out in kernel.outputs:
            sizes, strides = out.layout.sizes, out.layout.strides
            expanded = any(st == 0 and n != 0 and n != 1 for n, st in zip(sizes, strides))
            strides = None if expanded else pytuple(strides)        # an expanded layout: as it is
            lines.append(f"{out.name} = as_traced({out.name}, {strides}, {out.layout.dtype})")
        return lines

    def _last_uses(self, inputs_too=False):
        """buffer name -> index of the last item that reads or writes it (graph inputs: only if
        inputs_too)."""
        last = {}
        for step, item in enumerate(self.items):
            if isinstance(item, Kernel):
                names = self.signatures[item.name].args
            else:
                names = [v.buffer.name for v in item.inputs()] + [o.name for o in item.outputs]
            for name in names:
                last[name] = step
        inputs = {b.name for b in self.graph.inputs if not (inputs_too and b.position is not None)}
        return {name: step for name, step in last.items() if name not in inputs}

    def _written_inputs(self):
        """The graph inputs that extern calls write (functionalization's copy_ of an input's new value)."""
        written = []
        for item in self.items:
            op = getattr(item, "op", None)
            schema = getattr(op, "_schema", None)
            if isinstance(item, Kernel) or schema is None or not schema.is_mutable:
                continue
            for i, arg in enumerate(schema.arguments):
                if arg.alias_info is None or not arg.alias_info.is_write:
                    continue
                value = item.args[i] if i < len(item.args) else item.kwargs.get(arg.name)
                for v in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(v, StorageView) and getattr(v.buffer, "position", None) is not None and \
                            v.buffer not in written:
                        written.append(v.buffer)
        return written

    def _disjoint_check(self, params):
        """Lines running eager's graph when an input the graph writes shares memory with another input (or
        another written one) on this call: the compiled graph writes each back as a tensor of its own, so
        reads of the other input would miss the write (decompose.check_written_inputs refused it for the
        example inputs)."""
        written = self._written_inputs()
        if not written:
            return []
        others = [b for b in self.graph.inputs if b.position is not None and b not in written]
        fixed = [b for b in others if self.facts.is_static(b.position) and _span(b.layout) is not None]
        moving = [b for b in others if b not in fixed]
        self.globals["inputs_disjoint"] = DisjointInputs([_span(b.layout) for b in written],
                                                         [_span(b.layout) for b in moving],
                                                         [_span(b.layout) for b in fixed])

        def names(bufs):
            return "[" + ", ".join(b.name for b in bufs) + "]"
        return [f"if not inputs_disjoint({names(written)}, {names(moving)}, {names(fixed)}): "
                f"return eager({params})"]

    def _outputs(self):
        flat = [self.view(v, output=True) if isinstance(v, StorageView) else self.arg(v) for v in self.graph.outputs]
        aliases = getattr(self.graph, "output_aliases", None) or ()
        names = {b.position: b.name for b in self.graph.inputs if b.position is not None}
        for k, alias in enumerate(aliases):
            if alias is not None:
                flat[k] = self._input_alias(alias, names)
        self._fresh_views(flat, aliases, set(names.values()))
        spec = self.graph.output_spec
        if spec.type in (tuple, list) and spec.num_leaves == spec.num_children:
            items = ", ".join(flat)
            return f"({items}{',' if len(flat) == 1 else ''})" if spec.type is tuple else f"[{items}]"
        if spec.type is None:
            return flat[0]
        self.globals["_unflatten"] = pytree.tree_unflatten
        return f"_unflatten([{', '.join(flat)}], {self.bind(spec, '_spec')})"

    def _fresh_views(self, flat, aliases, input_names):
        """Eager's view op returns a new tensor object even where it changes nothing (x[:, 0:1] of a
        one-column x, an expand to the same shape): an output the lowering made the very tensor of an input,
        or of another output, while eager computed it by another node, becomes a new view of it (setting
        an attribute on it, or resizing it, must leave the other alone). Of outputs that are one tensor, the
        one eager computed by an op that is no view keeps it (a training graph's `mul` and `mul.view(-1)`:
        AOTAutograd makes the view from `mul` after the call, and `mul` returned as a view of a buffer made
        inside its autograd Function refuses writes through views of it)."""
        nodes = getattr(self.graph, "output_nodes", None) or [None] * len(flat)
        tensors = [k for k, (node, value) in enumerate(zip(nodes, self.graph.outputs))
                   if node is not None and not (k < len(aliases) and aliases[k] is not None) and value is not None
                   and not isinstance(value, (bool, int, float, sympy.Expr, torch.SymInt))]
        made = {}       # expression -> the output node it came from
        for k in sorted(tensors, key=lambda k: nodes[k][2]):     # views last
            expr, (name, is_input, _) = flat[k], nodes[k]
            if (expr in input_names and not is_input) or made.get(expr, name) != name:
                self.globals["_alias"] = torch.ops.aten.alias.default
                flat[k] = f"_alias({expr})"
            else:
                made[expr] = name

    @staticmethod
    def _input_alias(alias, names):
        """Eager's output that is an input, or a view of one (decompose.output_aliases)."""
        if alias[0] == "input":
            return names[alias[1]]
        _, position, sizes, strides, offset = alias
        return f"as_view({names[position]}, {pytuple(sizes)}, {pytuple(strides)}, {pyexpr(offset)})"


def _float_expr_text(expr):
    from torch.utils._sympy.printers import PythonPrinter      # torch's functions (FloatPow ...)
    return PythonPrinter().doprint(expr)


def _float_steps_text(steps):
    """A SizeFloat's steps (lowering.float_steps) as Python source, every operation parenthesized in the
    graph's order, so that Python rounds each as eager did."""
    kind = steps[0]
    if kind == "const":
        value = steps[1]
        return repr(value) if not isinstance(value, float) or (value == value and abs(value) != float("inf")) \
            else f"float('{value}')"
    if kind == "size":
        return f"({pyexpr(steps[1])})"
    if kind == "float":
        return f"({_float_expr_text(steps[1])})"
    if kind == "op":
        return f"({_float_steps_text(steps[2])} {steps[1]} {_float_steps_text(steps[3])})"
    if kind == "neg":
        return f"(-{_float_steps_text(steps[1])})"
    return f"{steps[1]}({_float_steps_text(steps[2])})"


def pyexpr(e):
    """A size expression (int, sympy or SymInt) as Python source over the size symbols."""
    return format_index(as_expr(e), "//")


def pytuple(exprs):
    """A tuple of size expressions as Python source."""
    items = [pyexpr(e) for e in exprs]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _span(layout):
    """How many bytes past its data_ptr() a tensor of layout reaches (0: it has no elements); None where
    its sizes are symbolic (DisjointInputs measures the tensor itself on each call)."""
    if not all(is_static(e) for e in (*layout.sizes, *layout.strides)):
        return None
    sizes = [int(n) for n in layout.sizes]
    if 0 in sizes:
        return 0
    reach = sum(int(st) * (n - 1) for n, st in zip(sizes, layout.strides))
    return (reach + 1) * layout.dtype.itemsize


def _tensor_span(t):
    """How many bytes past its data_ptr() tensor t reaches (0: it has no elements)."""
    if t.numel() == 0:
        return 0
    return (sum(st * (n - 1) for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()


class DisjointInputs:
    """Whether the memory of the inputs a graph writes overlaps neither each other nor the graph's other
    inputs: a data_ptr() per input (spans: bytes each reaches, fixed by the compiled layouts). The graph's
    parameters and buffers (`fixed`) rarely move: their addresses are compared with the last ones seen
    (one list comparison, or torch's _tensors_data_ptrs_at_indices_equal where it has it), and the memory
    they cover is kept as sorted disjoint intervals, rebuilt only when one has moved, that each written
    span is looked up in by bisection: O(F + W log F) per call for W written and F fixed inputs. The
    moving inputs' memory is scanned per written span where they are few, else merged and bisected too."""

    def __init__(self, written, moving, fixed):
        self.written, self.moving, self.fixed = written, moving, fixed
        self.same = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
        if self.same is None or len(fixed) < 8:     # a handful of data_ptr() calls cost less than the C++ call
            self.same = None
        self.seen = [-1] * len(fixed)
        self.indices = list(range(len(fixed)))
        self.starts, self.ends = [], []          # the fixed inputs' memory: sorted disjoint intervals

    def __call__(self, written, moving, fixed):
        spans = sorted((t.data_ptr(), t.data_ptr() + n) for t, n in zip(written, self._spans(written, self.written))
                       if n)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            if start < end:
                return False
        if not spans:
            return True
        if self.same is not None:
            if not self.same(fixed, self.seen, self.indices):
                self._remember([t.data_ptr() for t in fixed])
        else:
            pointers = [t.data_ptr() for t in fixed]
            if pointers != self.seen:
                self._remember(pointers)
        if any(self._covered(start, end) for start, end in spans):
            return False
        pointers = [t.data_ptr() for t in moving]
        sizes = self._spans(moving, self.moving)
        if len(pointers) * len(spans) <= 64:
            for p, n in zip(pointers, sizes):
                if n:
                    for start, end in spans:
                        if p < end and start < p + n:
                            return False
            return True
        starts, ends = _merged(pointers, sizes)
        return not any(_meets(starts, ends, start, end) for start, end in spans)

    @staticmethod
    def _spans(tensors, spans):
        """Each tensor's span: the compiled one, or (None: symbolic sizes) measured on this call."""
        if None not in spans:
            return spans
        return [n if n is not None else _tensor_span(t) for t, n in zip(tensors, spans)]

    def _remember(self, pointers):
        self.seen = pointers
        self.starts, self.ends = _merged(pointers, self.fixed)

    def _covered(self, start, end):
        """Whether [start, end) meets the fixed inputs' memory."""
        return _meets(self.starts, self.ends, start, end)


def _merged(pointers, sizes):
    """The memory of tensors at `pointers` reaching `sizes` bytes: (starts, ends) of sorted disjoint
    intervals."""
    merged = []
    for start, end in sorted((p, p + n) for p, n in zip(pointers, sizes) if n):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [a for a, _ in merged], [b for _, b in merged]


def _meets(starts, ends, start, end):
    """Whether [start, end) meets one of the sorted disjoint intervals [starts[i], ends[i])."""
    i = bisect.bisect_right(starts, start) - 1
    if i >= 0 and ends[i] > start:
        return True
    return i + 1 < len(starts) and starts[i + 1] < end


def _as_traced(t, strides, dtype):
    """t if it is of dtype and laid out with `strides` (dims of one element aside; None: any layout), else a
    copy of t so. None (an undefined output: mkldnn_rnn's workspace without grad mode) stays None."""
    if t is None:
        return t
    if t.dtype != dtype:
        t = t.to(dtype)
    if strides is None or t.stride() == strides or \
            all(n <= 1 or st == want for n, st, want in zip(t.shape, t.stride(), strides)):
        return t
    return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def build(graph, items, signatures, lib, eager, facts, eager_if_grad):
    """The compiled callable: (source, function). signatures: kernel name -> cpp.Signature; facts: the
    graph's facts.GraphFacts."""
    code = WrapperCode(graph, items, signatures, facts)
    source = code.generate(facts.check_inputs(), eager_if_grad)
    code.globals["eager"] = eager
    for name, signature in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * len(signature.args) + [ctypes.c_int64] * len(signature.sizes)
        fn.restype = ctypes.c_int
        code.globals[name] = fn
    namespace = dict(code.globals)
    run_source(source, "graphjit wrapper", namespace)
    call = namespace["call"]
    call.wrapper_code = code            # its globals and ops: what runtime/graph_cache.py stores
    return source, call


def run_source(source, kind, namespace):
    """exec a generated wrapper's source into namespace, under a file name of its own that linecache knows
    (`<graphjit wrapper 1a2b3c4d5e>`): tracebacks, profilers and memory snapshots show its lines."""
    filename = f"<{kind} {hashlib.sha1(source.encode()).hexdigest()[:10]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile_source(source, filename), namespace)

