"""Rows of large 16-bit CUDA values that a matmul reads are padded to a multiple of 8 elements
(lowering._buffer_strides), so cuBLAS gets aligned leading dimensions; never for a value the graph returns
(or returns a view of), for 32-bit values, small values, or rows already a multiple of 8. Checked on the
strides chosen for fake CUDA values (no GPU needed); the GPU tests run such graphs."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphjit.compiler import lowering

aten = torch.ops.aten


def graph(shape, dtype=torch.bfloat16, returned=None):
    """exp(a) viewed 2-d, transposed, and multiplied; `returned`: "value" or "view" is also returned."""
    g = torch.fx.Graph()
    a, w = g.placeholder("a"), g.placeholder("w")
    e = g.call_function(aten.exp.default, (a,))
    rows = 1
    for n in shape[:-1]:
        rows *= n
    v = g.call_function(aten.view.default, (e, [rows, shape[-1]]))
    t = g.call_function(aten.t.default, (v,))
    m = g.call_function(aten.mm.default, (t, w))
    g.output((m, {"value": e, "view": v}[returned]) if returned else m)
    with FakeTensorMode():
        e.meta["val"] = torch.empty(*shape, dtype=dtype, device="cuda")
    return e


def test_padded_rows():
    assert lowering._buffer_strides(graph((8, 512, 50257))) == (512 * 50264, 50264, 1)


@pytest.mark.parametrize("case", [dict(shape=(8, 512, 50257), returned="value"),
                                  dict(shape=(8, 512, 50257), returned="view"),
                                  dict(shape=(8, 512, 50257), dtype=torch.float32),
                                  dict(shape=(8, 512, 50264)),
                                  dict(shape=(8, 50257))], ids=["returned", "view-returned", "float32",
                                                                "aligned", "small"])
def test_not_padded(case):
    node = graph(**case)
    assert lowering._buffer_strides(node) == tuple(node.meta["val"].stride())


def test_lowered_matmul_operands_read_the_padded_buffer():
    """A softmax gradient (the value under a view and a transposed view, each a matmul operand) is
    realized with padded rows, and both products read it with the padded leading dimension."""
    from graphjit.compiler import decompose
    from graphjit.compiler.ir import StorageView

    def f(g, w, x):
        grad = (g.float().softmax(-1) - 1.0).to(torch.bfloat16)
        flat = grad.view(-1, 50257)
        return flat @ w, flat.t() @ x
    with FakeTensorMode():
        inputs = [torch.empty(8, 512, 50257, dtype=torch.bfloat16, device="cuda"),
                  torch.empty(50257, 768, dtype=torch.bfloat16, device="cuda"),
                  torch.empty(4096, 768, dtype=torch.bfloat16, device="cuda")]
    aten_gm = decompose.decompose(torch.fx.symbolic_trace(f), inputs)
    graph = lowering.lower(aten_gm, inputs)
    operands = [a for n in graph.nodes if getattr(n, "op", None) == aten.mm.default
                for a in n.args if isinstance(a, StorageView) and getattr(a.buffer, "position", None) is None]
    assert sorted(tuple(int(s) for s in a.strides) for a in operands) == [(1, 50264), (50264, 1)]
