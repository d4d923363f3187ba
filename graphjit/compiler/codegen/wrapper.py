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
import collections
import ctypes
import operator

import torch
from torch.utils import _pytree as pytree

from ..ir import StorageView
from ..scheduler import Kernel
from .cpp import kernel_error


_guards = getattr(torch._C, "_dynamo", None) and getattr(torch._C._dynamo, "guards", None)
_FAST_EMPTY = {device: getattr(_guards, f"_empty_strided_{device}", None) for device in ("cpu", "cuda")}
_FAST_EMPTY = {device: fn for device, fn in _FAST_EMPTY.items() if fn is not None}
_reinterpret = getattr(_guards, "_reinterpret_tensor", None) or (
    lambda t, sizes, strides, offset: torch.as_strided(t, sizes, strides, t.storage_offset() + offset))


class WrapperCode:
    fast_cuda_empty = False     # set by wrappers that run on their device (see empty())

    def __init__(self, graph, items, signatures):
        self.graph = graph
        self.items = items
        self.signatures = signatures
        self.lines = []
        self.globals = {"empty_strided": torch.empty_strided, "reinterpret": _reinterpret, "torch": torch}
        # matmul epilogues (TritonWrapperCode): kernels emitted at an earlier item, buffers that must not
        # take a dead buffer's memory (allocated earlier than the item order says), names never bound
        self.fused_away, self.fresh, self.unbound = set(), set(), set()
        self._constants = {}

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
        if isinstance(value, float):
            return repr(value) if value == value and abs(value) != float("inf") else f"float('{value}')"
        return self.bind(value)

    def view(self, view):
        """A StorageView as a tensor expression: the buffer itself or an as_strided view of it."""
        name = view.buffer.name
        if view.is_full():
            return name
        sizes = tuple(int(s) for s in view.sizes)
        strides = tuple(int(s) for s in view.strides)
        return f"reinterpret({name}, {sizes}, {strides}, {int(view.offset)})"    # offset from name's own

    def generate(self, check_inputs, eager_if_grad):
        graph = self.graph
        inputs = [b for b in graph.inputs if b.position is not None]
        params = ", ".join(b.name for b in sorted(inputs, key=operator.attrgetter("position")))
        self.lines.append(f"def call({params}):")
        body = []
        if eager_if_grad:
            body.append(f"if grad_enabled(): return eager({params})")
            self.globals["grad_enabled"] = torch.is_grad_enabled
        if check_inputs and inputs:
            # kernels index inputs with the sizes, strides and dtypes seen at compile time
            got = ", ".join(f"{b.name}.shape, {b.name}.stride(), {b.name}.dtype" for b in inputs)
            self.globals["_expected"] = tuple(
                item for b in inputs for item in (tuple(int(s) for s in b.layout.sizes),
                                                  tuple(int(s) for s in b.layout.strides), b.layout.dtype))
            body.append(f"if ({got},) != _expected: return eager({params})")
        for buf in graph.inputs:
            if buf.position is None:
                self.globals[buf.name] = buf.value
        last_use = self._last_uses()
        outputs = {v.buffer.name for v in graph.outputs if isinstance(v, StorageView)}
        donors = self._donors(outputs)
        layouts = {b.name: b.layout for b in graph.buffers()}

        def key(name):
            layout = layouts[name]
            return (tuple(int(s) for s in layout.sizes), tuple(int(s) for s in layout.strides), layout.dtype,
                    layout.device)
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
                body += self._kernel_call(item)
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
        body.append("return " + self._outputs())
        self.lines += ["    " + line for line in body]
        return "\n".join(self.lines) + "\n"

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
        sizes = tuple(int(s) for s in layout.sizes)
        strides = tuple(int(s) for s in layout.strides)
        dtype = self.bind(layout.dtype, '_dtype')
        fast = _FAST_EMPTY.get(layout.device.type) if self.fast_cuda_empty or layout.device.type == "cpu" else None
        if fast is not None:
            self.globals[f"empty_{layout.device.type}"] = fast
            return f"{name} = empty_{layout.device.type}({sizes}, {strides}, {dtype})"
        return f"{name} = empty_strided({sizes}, {strides}, dtype={dtype}, device={self.bind(layout.device, '_device')})"

    def _kernel_call(self, kernel):
        lines = [self.alloc(node) for node in self._allocated(kernel)]
        signature = self.signatures[kernel.name]
        args = ", ".join(f"{name}.data_ptr()" for name in signature.args)
        call = f"{kernel.name}({args})"
        if signature.returns_status:
            self.globals["kernel_error"] = kernel_error
            lines.append(f"if status := {call}: kernel_error(status, {kernel.name!r})")
        else:
            lines.append(call)
        return lines

    def _extern_call(self, kernel):
        op = self.bind(getattr(kernel.op, "_op", kernel.op), "_op")
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
        """Lines giving a fallback op's outputs the strides the trace saw. Its ATen kernel may lay a result
        out otherwise than the meta function the trace ran (copysign of a transposed operand comes out
        transposed, its meta says contiguous), and what reads the result indexes it with the traced
        strides: a result laid out otherwise is copied into them. Extern ops proper (matmuls, convolution,
        attention) are trusted."""
        if kernel.reason == "extern op":
            return []
        lines = []
        for out in kernel.outputs:
            sizes = tuple(int(n) for n in out.layout.sizes)
            strides = tuple(int(st) for st in out.layout.strides)
            if not any(st == 0 and n > 1 for n, st in zip(sizes, strides)):     # an expanded layout: as it is
                self.globals["in_layout"] = _in_layout
                lines.append(f"{out.name} = in_layout({out.name}, {strides})")
        return lines

    def _last_uses(self):
        """buffer name -> index of the last item that reads or writes it."""
        last = {}
        for step, item in enumerate(self.items):
            if isinstance(item, Kernel):
                names = self.signatures[item.name].args
            else:
                names = [v.buffer.name for v in item.inputs()] + [o.name for o in item.outputs]
            for name in names:
                last[name] = step
        inputs = {b.name for b in self.graph.inputs}
        return {name: step for name, step in last.items() if name not in inputs}

    def _outputs(self):
        flat = [self.view(v) if isinstance(v, StorageView) else self.arg(v) for v in self.graph.outputs]
        spec = self.graph.output_spec
        if spec.type in (tuple, list) and spec.num_leaves == spec.num_children:
            items = ", ".join(flat)
            return f"({items}{',' if len(flat) == 1 else ''})" if spec.type is tuple else f"[{items}]"
        if spec.type is None:
            return flat[0]
        self.globals["_unflatten"] = pytree.tree_unflatten
        return f"_unflatten([{', '.join(flat)}], {self.bind(spec, '_spec')})"


def _in_layout(t, strides):
    """t if it is laid out with `strides` (dims of one element aside), else a copy of t laid out so."""
    if t.stride() == strides or all(n <= 1 or st == want for n, st, want in zip(t.shape, t.stride(), strides)):
        return t
    return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def build(graph, items, signatures, lib, eager, check_inputs, eager_if_grad):
    """The compiled callable: (source, function). signatures: kernel name -> cpp.Signature."""
    code = WrapperCode(graph, items, signatures)
    source = code.generate(check_inputs, eager_if_grad)
    code.globals["eager"] = eager
    for name, signature in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * len(signature.args)
        fn.restype = ctypes.c_int
        code.globals[name] = fn
    namespace = dict(code.globals)
    exec(compile(source, "<graphjit wrapper>", "exec"), namespace)
    return source, namespace["call"]

