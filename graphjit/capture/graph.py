"""The fx graph under construction: graph inputs (one placeholder per source), op nodes with fake-tensor
example values, and the outputs.

Every node's `meta["example_value"]` is a FakeTensor (or a tuple of them), so the interpreter can answer
shape, dtype, device and stride questions without computing anything.
"""
import re

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode


def _node_name(source_expr: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", source_expr.replace("__gj_", "")).strip("_")
    name = re.sub(r"_(parameters|buffers|modules)_", "_", name)
    if not name or name[0].isdigit():
        name = "in_" + name
    return name.lower()


class OutputGraph:
    def __init__(self):
        self.graph = torch.fx.Graph()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        self.input_sources = []      # source per placeholder, in order
        self.example_inputs = []     # the real values read at trace time
        self._placeholder_by_id = {}  # id(real tensor) -> (node, fake)
        self.nn_module_attrs = {}

    # ---- inputs ----
    def add_input(self, source, value: torch.Tensor):
        """A placeholder for a tensor read from `source`; the same tensor object gets the same placeholder."""
        hit = self._placeholder_by_id.get(id(value))
        if hit is not None:
            return hit
        node = self.graph.placeholder(_node_name(source.expr()))
        fake = self.fake_mode.from_tensor(value, static_shapes=True)
        node.meta["example_value"] = fake
        node.meta["source"] = source
        self.input_sources.append(source)
        self.example_inputs.append(value)
        self._placeholder_by_id[id(value)] = (node, fake)
        return node, fake

    # ---- ops ----
    def create_node(self, kind, target, args, kwargs, example_value):
        node = self.graph.create_node(kind, target, tuple(args), dict(kwargs))
        node.meta["example_value"] = example_value
        return node

    def run_fake(self, fn, args, kwargs):
        with self.fake_mode:
            return fn(*args, **kwargs)

    def op_count(self):
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))

    # ---- finishing ----
    def finish(self, output_nodes):
        """Add the output node, drop unused placeholders; returns (GraphModule, sources, example_inputs)."""
        self.graph.output(tuple(output_nodes))
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
