"""The fx graph under construction: graph inputs (one placeholder per source), op nodes with fake-tensor
example values, and the outputs.

Every node's `meta["example_value"]` is a FakeTensor (or a tuple of them), so the interpreter can answer
shape, dtype, device and stride questions without computing anything.
"""
import math
import operator
import re

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._guards import SLoc
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .. import logs
from . import dynamic, fake_memo


class _ShapeEnv(ShapeEnv):
    """torch's ShapeEnv without its provenance walk: for every symbol it makes and every guard it records,
    ShapeEnv walks the Python stack for the first frame outside a set of torch's files (`_get_stack_summary`),
    and the first walk imports those files' modules: torch.export and, through it, networkx (0.25 s of a
    process's first symbolic capture). The location only labels torch's debug logs; graphjit reports its
    guards by their sources (guards.py) and the instruction's file:line (explain())."""

    def _get_stack_summary(self, is_debug=False, framework_loc=None):
        return SLoc(framework_loc or "graphjit", None), ""    # a str: torch 2.11's SLoc can't print None


def _node_name(source_expr: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", source_expr.replace("__gj_", "")).strip("_")
    name = re.sub(r"_(parameters|buffers|modules)_", "_", name)
    if not name or name[0].isdigit():
        name = "in_" + name
    return name.lower()


_SIZE_READS = (torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default)


class OutputGraph:
    def __init__(self):
        self.graph = torch.fx.Graph()
        # data-dependent results (.item(), nonzero, boolean masks) raise while tracing, as without a
        # ShapeEnv, so capture breaks there rather than making unbacked symbols
        self.shape_env = _ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        self.fake_memo = fake_memo.FakeMemo(self.fake_mode)
        self.symbolic_inputs = []    # (fake tensor or SymInt, source, symbolic context) per input with symbols
        self.input_sources = []      # source per placeholder, in order
        self.example_inputs = []     # the real values read at trace time
        self._placeholder_by_id = {}  # id(real tensor) or ("int", source) -> (node, fake or SymInt)
        self.nn_module_attrs = {}
        self._placeholder_names = set()

    # ---- inputs ----
    def _placeholder_name(self, source):
        """A name for a new placeholder: the generated forward's argument, so unique (fx renames a clashing
        node but keeps its target, the argument's name: globals `w` and `W` both read `g_w`)."""
        base = name = _node_name(source.expr())
        k = 1
        while name in self._placeholder_names:
            name, k = f"{base}_{k}", k + 1
        self._placeholder_names.add(name)
        return name

    def add_input(self, source, value: torch.Tensor, dynamic_dims=()):
        """A placeholder for a tensor read from `source`; the same tensor object gets the same placeholder.
        `dynamic_dims`: the dims given size symbols (see dynamic.py)."""
        hit = self._placeholder_by_id.get(id(value))
        if hit is not None:
            return hit
        node = self.graph.placeholder(self._placeholder_name(source))
        if dynamic_dims:
            marks = getattr(value, dynamic.MARK_DYNAMIC, {})
            index = len(self.symbolic_inputs)
            context = dynamic.symbolic_context(value, dynamic_dims, marks)
            fake = self.fake_mode.from_tensor(value, source=dynamic.torch_source(index), symbolic_context=context)
            # the guards are on the input as it came in: a view with its metadata, which an in-place
            # metadata change of the input while tracing (`x.t_()`) leaves alone
            with self.fake_mode:
                as_given = fake.as_strided(fake.size(), fake.stride(), fake.storage_offset())
            self.symbolic_inputs.append((as_given, source, context))
        else:
            fake = self.fake_mode.from_tensor(value, static_shapes=True)
        node.meta["example_value"] = fake
        node.meta["source"] = source
        self.input_sources.append(source)
        self.example_inputs.append(value)
        self._placeholder_by_id[id(value)] = (node, fake)
        return node, fake

    def add_int_input(self, source, value: int):
        """A SymInt graph input for the int read from `source` (an int that changes between calls)."""
        return self._add_number_input(source, value, lambda symbol, torch_source: symbol)

    def add_float_input(self, source, value: float):
        """A SymFloat graph input for the float read from `source` (a float that changes between calls)."""
        return self._add_number_input(source, value, lambda symbol, torch_source: self.shape_env.create_symfloatnode(
            symbol, hint=value, source=torch_source))

    def _add_number_input(self, source, value, make_sym):
        key = (type(value).__name__, source)
        hit = self._placeholder_by_id.get(key)
        if hit is not None:
            return hit
        from torch.fx.experimental.symbolic_shapes import DimDynamic
        torch_source = dynamic.torch_source(len(self.symbolic_inputs))
        if isinstance(value, int):
            symbol = self.shape_env.create_unspecified_symint_and_symbol(value, torch_source, DimDynamic.DYNAMIC)
        else:
            symbol = self.shape_env.create_unspecified_symbol(value, torch_source, DimDynamic.DYNAMIC)
        sym = make_sym(symbol, torch_source)
        node = self.graph.placeholder(self._placeholder_name(source))
        node.meta["example_value"] = sym
        node.meta["source"] = source
        self.symbolic_inputs.append((sym, source, None))
        self.input_sources.append(source)
        self.example_inputs.append(value)
        self._placeholder_by_id[key] = (node, sym)
        return node, sym

    def describe_symbolic(self):
        """One line per input with size symbols: `x: sizes (s0, 4)`, `n: int s1`."""
        out = []
        for value, source, _ in self.symbolic_inputs:
            if isinstance(value, torch.Tensor):
                out.append(f"{source.expr()}: sizes ({', '.join(str(s) for s in value.shape)})")
            else:
                out.append(f"{source.expr()}: {'float' if isinstance(value, torch.SymFloat) else 'int'} {value}")
        return out

    def shape_guards(self):
        """[(template, sources, reason)] for what the trace assumed about its size symbols."""
        return dynamic.shape_guards(self.shape_env, self.symbolic_inputs)

    # ---- ops ----
    def create_node(self, kind, target, args, kwargs, example_value):
        kind, target, args = _printed_as_called(kind, target, tuple(args))
        node = self.graph.create_node(kind, target, args, dict(kwargs))
        node.meta["example_value"] = example_value
        return node

    def run_fake(self, fn, args, kwargs, memo=True):
        """fn on fake tensors. memo: the result may come from an earlier call with arguments of the same
        metadata (fake_memo.py); False for ops that write into their arguments."""
        if not self.symbolic_inputs:
            return self._run_memoized(fn, args, kwargs, memo)
        # Python meta kernels (torch/_meta_registrations.py) keep sizes symbolic where some C++ ones
        # (CPU attention on older torch) read them as ints and specialize
        from torch._dispatch.python import enable_python_dispatcher
        with enable_python_dispatcher():
            return self._run_memoized(fn, args, kwargs, memo)

    def _run_memoized(self, fn, args, kwargs, memo):
        key = self.fake_memo.key(fn, args, kwargs) if memo and fake_memo.enabled else None
        if key is None:
            with self.fake_mode, logs.quiet_meta_failures():
                return fn(*args, **kwargs)
        hit = self.fake_memo.lookup(key, args)
        if hit is not None:
            return hit
        tensors, versions = self.fake_memo.versions(args, kwargs)
        with self.fake_mode, logs.quiet_meta_failures():
            result = fn(*args, **kwargs)
        self.fake_memo.record(key, args, result, tensors, versions)
        return result

    def op_count(self):
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))

    # ---- finishing ----
    def finish(self, output_nodes):
        """Add the output node, drop unused placeholders; returns (GraphModule, sources, example_inputs)."""
        self.graph.output(tuple(output_nodes))
        for node in reversed(list(self.graph.nodes)):     # sizes read but never used
            if node.op == "call_function" and node.target in _SIZE_READS and not node.users:
                self.graph.erase_node(node)
        keep_sources, keep_inputs = [], []
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        for node, source, value in zip(placeholders, self.input_sources, self.example_inputs):
            if node.users:
                keep_sources.append(source)
                keep_inputs.append(value)
            else:
                self.graph.erase_node(node)
        self.graph.lint()
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        return gm, keep_sources, keep_inputs


def _printed_as_called(kind, target, args):
    """fx writes an operator.pow node infix, `{} ** {}`, with a constant base as its repr: `-1 ** x` for
    (-1) ** x, which Python reads as -(1 ** x), and every backend runs that code (or traces it). A power
    of a negative (or -0.0) constant base calls torch.pow instead (what Tensor.__rpow__ calls) for a tensor
    exponent, or the exponent's own __rpow__ for a size symbol: printed as calls, they keep the base whole."""
    if kind != "call_function" or target is not operator.pow or len(args) != 2 or \
            type(args[0]) not in (int, float) or math.copysign(1, args[0]) > 0:
        return kind, target, args
    exponent = args[1]
    if isinstance(exponent, torch.fx.Node) and isinstance(exponent.meta.get("example_value"), torch.Tensor):
        return kind, torch.pow, args
    return "call_method", "__rpow__", (exponent, args[0])
