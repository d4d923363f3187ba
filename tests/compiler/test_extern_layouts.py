"""Extern ATen calls get their tensor arguments in the strides the trace saw: the trace chose the kernel
for that layout (efficient attention pads its mask rows to an aligned stride and slices them back, and
rejects a compact copy: "attn_bias is not correctly aligned"). Checked on the lowered graph and against
eager, on the CPU (the layout rule is the same on every device)."""
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler import decompose, lowering, scheduler


def extern_layouts(fn, *args):
    """[(traced strides, strides the extern call gets)] for each tensor argument of each extern call."""
    found = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        traced = [[a.meta["val"].stride() for a in n.args if isinstance(a, torch.fx.Node)]
                  for n in aten.graph.nodes if n.op == "call_function" and "mm" in str(n.target)]
        graph = lowering.lower(aten, example_inputs)
        given = [[tuple(int(s) for s in a.strides) for a in item.args if hasattr(a, "strides")]
                 for item in scheduler.schedule(graph) if getattr(item, "op", None) is not None]
        found.extend(zip(traced, given))
        return gm.forward
    graphjit.compile(fn, backend=backend)(*args)
    return found


def padded_rows(x, y):
    return torch.mm(F.pad(x.sin(), (0, 3))[:, :5], y)


def test_a_padded_and_sliced_operand_keeps_its_row_stride():
    x, y = torch.randn(4, 5), torch.randn(5, 3)
    ((traced, given),) = extern_layouts(padded_rows, x, y)
    assert given == [tuple(s) for s in traced] == [(8, 1), (3, 1)]
    compiled = graphjit.compile(padded_rows, backend="graphjit")
    for _ in range(2):
        x, y = torch.randn(4, 5), torch.randn(5, 3)
        torch.testing.assert_close(compiled(x, y), padded_rows(x, y))


def test_transposed_and_expanded_operands_are_not_copied():
    def f(x, w, v):
        return x @ w.t(), torch.mm(x, v.expand(5, 3))
    x, w, v = torch.randn(4, 5), torch.randn(6, 5), torch.randn(1, 3)
    layouts = extern_layouts(f, x, w, v)
    assert [given for _, given in layouts] == [[(5, 1), (1, 5)], [(5, 1), (0, 1)]]
