"""Unit tests of the IR (views, index simplification, printer, verify), loop merging and C++ printing."""
import functools

import pytest
import sympy
import torch
import torch.fx

from graphjit import config
from graphjit.compiler import decompose, lowering, scheduler
from graphjit.compiler.codegen.cpp import cexpr, literal, merge_dims
from graphjit.compiler.ir import (ComputedBuffer, FloorDiv, InputBuffer, Layout, LoopGraph, Mod, Pointwise, StorageView,
                                  full_view, index_symbol, ops, simplify_with_ranges, view_permute, view_reshape,
                                  view_slice)

x0, x1, x2 = (index_symbol(f"x{i}") for i in range(3))
S = sympy.Integer


def lower(fn, *inputs):
    gm = torch.fx.symbolic_trace(fn)
    return lowering.lower(decompose.decompose(gm, list(inputs)), list(inputs))


def test_printed_ir_of_sin_plus_one():
    graph = lower(lambda x: x.sin() + 1, torch.randn(4, 8))
    assert str(graph) == """\
arg0: float32[4, 8] strides [8, 1]  (input 0)
buf0: float32[4, 8] strides [8, 1] = pointwise float32[4, 8] (x0, x1):
    tmp0 = load(arg0, 8*x0 + x1)
    tmp1 = sin(tmp0)
    tmp2 = constant(1, float32)
    tmp3 = add(tmp1, tmp2)
    -> tmp3
return buf0"""


def test_views_of_buffers_are_strided_windows():
    buf = InputBuffer("arg0", Layout.contiguous([6, 4], torch.float32), position=0)
    x = full_view(buf)
    t = view_permute(x, [1, 0])
    assert isinstance(t, StorageView) and t.sizes == (4, 6) and t.strides == (1, 4)
    s = view_slice(x, 1, 1, None, 2)
    assert s.sizes == (6, 2) and s.strides == (4, 2) and s.offset == 1
    assert view_reshape(x, [24]).strides == (1,)
    # a transposed buffer can't be flattened by strides: the reshape becomes a lazy index rewrite
    flat = view_reshape(t, [24])
    assert isinstance(flat, Pointwise)


def test_reshape_of_lazy_value_realizes_the_base_and_views_it():
    graph = lower(lambda x: (x.exp() + 1).view(2, 12), torch.randn(6, 4))
    (buf,) = graph.nodes
    assert buf.layout.sizes == (6, 4)
    (out,) = graph.outputs
    assert out.buffer is buf and out.sizes == (2, 12) and out.strides == (12, 1)


@pytest.mark.parametrize("expr,ranges,expected", [
    (FloorDiv(64 * x0 + x1, 1024), {x0: 32, x1: 64}, FloorDiv(x0, 16)),
    (FloorDiv(x1, 64), {x1: 64}, S(0)),
    (Mod(x1, 64), {x1: 64}, x1),
    (sympy.Mod(x1, 64), {x1: 64}, x1),      # sympy's own Mod simplifies too
    (Mod(64 * x0 + x1, 1024), {x0: 32, x1: 64}, 64 * Mod(x0, 16) + x1),
    (1024 * FloorDiv(x0, 16) + 64 * Mod(x0, 16) + x1, {x0: 32, x1: 64}, 64 * x0 + x1),
    (FloorDiv(x0 * 12 + x1, 4), {x0: 5, x1: 4}, 3 * x0),
    # a Mod is printed as C's %, Python's only for a base >= 0: the multiple 6 stays where the rest of the
    # base (-s, s a size without a range here) may be negative
    (Mod(6 - sympy.Symbol("s", integer=True), 6), {x0: 4}, Mod(6 - sympy.Symbol("s", integer=True), 6)),
    (Mod(6 + x0, 6), {x0: 4}, x0),
])
def test_simplify_with_ranges(expr, ranges, expected):
    assert sympy.expand(simplify_with_ranges(expr, ranges) - expected) == 0


def test_merge_dims_merges_contiguous_loops_only():
    dims, subs = merge_dims([(x0, S(4)), (x1, S(8))], [8 * x0 + x1])
    assert dims == [(x0, 32)]
    dims, _ = merge_dims([(x0, S(4)), (x1, S(8))], [8 * x0 + x1, x0])     # x0 alone: a broadcast read
    assert len(dims) == 2
    dims, _ = merge_dims([(x0, S(4)), (x1, S(8)), (x2, S(3))], [24 * x0 + 3 * x1 + x2, x2])
    assert dims == [(x0, 32), (x2, 3)]


def test_cexpr_and_literals():
    assert cexpr(8 * x0 + x1) == "8*x0 + x1"
    assert cexpr(FloorDiv(x0 + 3, 4)) == "(x0 + 3) / 4"
    assert cexpr(2 * FloorDiv(x0, 4) + x1) == "x1 + 2*(x0 / 4)"
    assert cexpr(sympy.Mod(x0, 7)) == "x0 % 7"
    assert literal(0.1, torch.float32) == "0x1.99999a0000000p-4f"
    # negative literals are parenthesized: `-` before one must not print as `--` (a decrement)
    assert literal(float("-inf"), torch.float64) == "(-__builtin_inf())"
    assert literal(-1.0, torch.float32) == "(-0x1.0000000000000p+0f)"
    assert literal(3, torch.int32) == "int32_t(3LL)"
    assert literal(True, torch.bool) == "true"


def test_verify_catches_out_of_bounds_and_undefined_reads():
    graph = LoopGraph()
    arg = InputBuffer("arg0", Layout.contiguous([4], torch.float32), position=0)
    graph.inputs.append(arg)
    bad = Pointwise((S(5),), torch.float32, torch.device("cpu"), lambda idx: ops.load("arg0", idx[0]))
    graph.nodes.append(ComputedBuffer("buf0", Layout.contiguous([5], torch.float32), bad))
    with pytest.raises(AssertionError, match="beyond its 4 elements"):
        graph.verify()
    graph.nodes[0].data = Pointwise((S(4),), torch.float32, torch.device("cpu"), lambda idx: ops.load("buf9", idx[0]))
    with pytest.raises(AssertionError, match="reads buf9 before"):
        graph.verify()


def test_realize_reason_policy():
    cheap = Pointwise((S(8),), torch.float32, torch.device("cpu"),
                      lambda idx: ops.add(ops.load("a", idx[0]), ops.load("b", idx[0])))
    costly = Pointwise((S(8),), torch.float32, torch.device("cpu"), lambda idx: ops.exp(ops.load("a", idx[0])))
    assert scheduler.realize_reason(cheap, 3) is None
    assert scheduler.realize_reason(costly, 1) is None
    assert "computes exp" in scheduler.realize_reason(costly, 2)
    # a long chain of cheap steps, inlined into one reader, is stored once its loads pass the threshold
    n = config.realize_loads_threshold + 1
    chain = Pointwise((S(8),), torch.float32, torch.device("cpu"), lambda idx: functools.reduce(
        ops.add, [ops.load(f"b{i}", idx[0]) for i in range(n)]))
    assert "loads" in scheduler.realize_reason(chain, 1)


def _loss_then_activation(x, w):
    return (x * w).sum(), torch.tanh(x) * 2 + 1


def _activation_then_loss(x, w):
    y = torch.tanh(x) * 2 + 1
    return y, (y * w).sum()


@pytest.mark.parametrize("fn", [_loss_then_activation, _activation_then_loss])
def test_a_large_loop_keeps_its_parallel_rows_beside_a_scalar_reduction(fn):
    """A [256, 512] pointwise node does not join (or get moved under) a scalar reduction's outer loop of
    one iteration: it would run in one Triton program or one thread (a training forward's saved
    activations, fused after the loss, took 50 ms a step on the H200). Small nodes still may."""
    x, w = torch.randn(256, 512), torch.randn(256, 512)
    graph = lower(fn, x, w)
    kernels = [k for k in scheduler.schedule(graph) if isinstance(k, scheduler.Kernel)]
    for kernel in kernels:
        outer = scheduler.product_int(kernel.outer)
        for node in kernel.nodes:
            elements = scheduler.product_int(node.outer + node.inner)
            assert outer >= config.fusion_parallel_rows or elements < config.fusion_parallel_elements or \
                outer >= scheduler.product_int(scheduler.split_node(node.buffer)[0].outer), str(kernel)
    small = lower(fn, torch.randn(8, 16), torch.randn(8, 16))
    assert len([k for k in scheduler.schedule(small) if isinstance(k, scheduler.Kernel)]) == 1
    import graphjit
    graphjit.reset()
    compiled = graphjit.compile(fn, backend="graphjit")
    for rows in (256, 8):
        x, w = torch.randn(rows, 512), torch.randn(rows, 512)
        for got, want in zip(compiled(x, w), fn(x, w)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_decomposition_table_keeps_fused_and_extern_ops_whole():
    table = decompose.decomposition_table()
    aten = torch.ops.aten
    for op in (aten._softmax.default, aten.native_layer_norm.default, aten.gelu.default, aten.addmm.default,
               aten.scaled_dot_product_attention.default, aten.var.correction):
        assert op not in table
    assert aten.hardsigmoid.default in table


def test_mutating_graph_is_functionalized():
    def f(x, y):
        z = x.clone()
        z.add_(y)
        return z.relu_()
    gm = torch.fx.symbolic_trace(f)
    aten_gm = decompose.decompose(gm, [torch.randn(3), torch.randn(3)])
    targets = {str(n.target) for n in aten_gm.graph.nodes if n.op == "call_function"}
    assert not any(t.endswith("_.Tensor") or t.endswith("_.default") for t in targets), targets


def test_scalar_conversions_happen_on_the_host_whatever_the_default_device():
    """int_of and held convert a Python number as eager does, on the host for every device; under `with
    torch.device("cuda")` they converted on the GPU (1e20 into int64: the GPU saturates to the largest
    value, eager's host cast gives the lowest). A meta default device shows it here: no value at all."""
    from graphjit.compiler.ir import int_of
    from graphjit.compiler.lowering import held
    with torch.device("meta"):
        assert int_of(1e20, torch.int64) == torch.iinfo(torch.int64).min
        assert int_of(-2.5, torch.uint8) == 254
        assert held(1e5, torch.float16) == float("inf")
