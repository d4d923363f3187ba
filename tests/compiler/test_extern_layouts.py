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


def test_a_padded_and_sliced_matmul_operand_is_given_as_realized():
    """Matmuls take any strides and their result's layout does not depend on them: a matmul operand is
    not copied into its traced strides (lowering._buffer_strides may have padded its rows)."""
    x, y = torch.randn(4, 5), torch.randn(5, 3)
    ((traced, given),) = extern_layouts(padded_rows, x, y)
    assert [tuple(s) for s in traced] == [(8, 1), (3, 1)] and given == [(5, 1), (3, 1)]
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


def test_a_padded_broadcast_operand_keeps_its_row_stride_and_broadcast():
    """Efficient attention's mask: [batch, heads (expanded), q, k] padded along k to an aligned row and
    sliced back, here read by a matmul: results equal eager's."""
    def f(m, y):
        padded = F.pad(m.sin(), (0, 2))[..., :6]            # [2, 1, 3, 6], row stride 8
        return torch.matmul(padded.expand(2, 4, 3, 6), y)   # heads broadcast: stride 0
    m, y = torch.randn(2, 1, 3, 6), torch.randn(6, 5)
    compiled = graphjit.compile(f, backend="graphjit")
    for _ in range(2):
        m, y = torch.randn(2, 1, 3, 6), torch.randn(6, 5)
        torch.testing.assert_close(compiled(m, y), f(m, y))


def test_an_attention_mask_gets_its_traced_broadcast_layout():
    def f(q, m):
        mask = (m.sin() > 0)[:, None].expand(2, 3, 5, 5)      # heads broadcast (stride 0)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    found = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        traced = {str(n.target): [a.meta["val"].stride() for a in list(n.args) + list(n.kwargs.values())
                                  if isinstance(a, torch.fx.Node)]
                  for n in aten.graph.nodes if "attention" in str(n.target)}
        graph = lowering.lower(aten, example_inputs)
        for item in scheduler.schedule(graph):
            if "attention" in str(getattr(item, "op", "")):
                given = [tuple(int(s) for s in a.strides) for a in item.inputs()]
                found.append((traced[str(item.op)], given))
        return gm.forward
    q, m = torch.randn(2, 3, 5, 4), torch.randn(2, 5, 5)
    graphjit.compile(f, backend=backend)(q, m)
    ((traced, given),) = found
    assert given[-1] == tuple(traced[-1])
    compiled = graphjit.compile(f, backend="graphjit")
    for _ in range(2):
        q, m = torch.randn(2, 3, 5, 4), torch.randn(2, 5, 5)
        torch.testing.assert_close(compiled(q, m), f(q, m), rtol=1e-5, atol=1e-5)


def test_a_broadcast_operand_of_a_fallback_keeps_stride_zero():
    def f(x):
        return torch.cumprod(x.sin()[:, None].expand(3, 4, 5), 1)    # cumprod: an ATen fallback
    found = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        graph = lowering.lower(aten, example_inputs)
        found.extend(tuple(int(s) for s in a.strides) for item in scheduler.schedule(graph)
                     if "cumprod" in str(getattr(item, "op", "")) for a in item.inputs())
        return gm.forward
    graphjit.compile(f, backend=backend)(torch.randn(3, 5))
    assert found == [(5, 0, 1)]
    compiled = graphjit.compile(f, backend="graphjit")
    for _ in range(2):
        x = torch.randn(3, 5)
        torch.testing.assert_close(compiled(x), f(x))


def test_a_padded_and_broadcast_operand_keeps_both():
    """Whisper's efficient-attention mask on CUDA: rows padded to an aligned stride and sliced back, heads
    broadcast; the kernel checks the row stride."""
    def f(x):
        mask = F.pad(x.sin(), (0, 2))[..., :6][:, None].expand(2, 4, 3, 6)
        return torch.cumprod(mask, 2)                     # cumprod: an ATen fallback, like the attention op
    found = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        traced = [n.args[0].meta["val"].stride() for n in aten.graph.nodes if "cumprod" in str(n.target)]
        graph = lowering.lower(aten, example_inputs)
        found.extend((tuple(traced[0]), tuple(int(s) for s in a.strides)) for item in scheduler.schedule(graph)
                     if "cumprod" in str(getattr(item, "op", "")) for a in item.inputs())
        return gm.forward
    graphjit.compile(f, backend=backend)(torch.randn(2, 3, 6))
    ((traced, given),) = found
    assert given == traced and traced[1] == 0 and traced[2] == 8
    compiled = graphjit.compile(f, backend="graphjit")
    for _ in range(2):
        x = torch.randn(2, 3, 6)
        torch.testing.assert_close(compiled(x), f(x))
