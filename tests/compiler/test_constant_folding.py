"""decompose.fold_constants: nodes computed only from the graph's tensor constants are evaluated once at
compile time (a constant built for the device, e.g. transformers' empty KV-cache start
`torch.tensor([], device=k.device)`, would otherwise be copied host to device on every call: a sync, and
no CUDA-graph capture). Differential: compiled vs eager through the frontend; structural: what is left in
the ATen graph; and what must never be folded (random ops, writes, anything returned)."""
import pytest
import torch

import graphjit
from graphjit.compiler import decompose
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config


def cache_like(k):
    empty = torch.tensor([], dtype=k.dtype, device=k.device)
    scale = torch.tensor([0.5, 2.0], device=k.device).prod()
    return torch.cat([empty, k], dim=-2) * scale + 1


def captured(fn, *args):
    """The ATen graph of fn as graphjit's frontend captures it (factory calls stay graph nodes)."""
    got = []

    def backend(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward
    graphjit.compile(fn, backend=backend)(*args)
    (gm, example_inputs), = got
    return decompose.decompose(gm, example_inputs)


def ops_of(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_constant_chains_become_one_constant_each():
    gm = captured(cache_like, torch.randn(1, 2, 3, 4))
    assert torch.ops.aten.lift_fresh_copy.default not in ops_of(gm)
    assert torch.ops.aten.prod.default not in ops_of(gm)
    folded = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert len(folded) == 2 and all(name.startswith("_folded_constant") for name in folded)
    assert set(gm._buffers) == set(folded)      # the constants folded into them are gone


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.skipif(
    not triton_codegen.triton_available(), reason="Triton is not installed"))])
def test_compiled_matches_eager_over_calls(codegen, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", int(codegen == "triton"))
    compiled = graphjit.compile(cache_like, backend="graphjit")
    for seed in range(3):
        k = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(k), cache_like(k))


def test_returned_constants_and_random_ops_are_not_folded():
    def fn(x):
        c = torch.tensor([1.0, 2.0, 3.0])
        noise = torch.rand(3)
        return x + c.sum(), c.view(3), noise
    ops = ops_of(captured(fn, torch.randn(3)))
    assert any("rand" in str(op) for op in ops)                    # random: computed per call
    compiled = graphjit.compile(fn, backend="graphjit")
    x = torch.randn(3)
    first = compiled(x)
    first[1].add_(100)                                             # the caller writes to a returned constant
    again = compiled(x)
    torch.testing.assert_close(again[1], torch.tensor([1.0, 2.0, 3.0]))
    assert not torch.equal(first[2], again[2])                     # fresh noise each call


def test_only_small_results_are_folded():
    def graph_on(constant):
        g = torch.fx.Graph()
        x = g.placeholder("x")
        doubled = g.call_function(torch.ops.aten.mul.Tensor, (g.get_attr("c"), 2))
        g.output(g.call_function(torch.ops.aten.add.Tensor, (x, doubled)))
        root = torch.nn.Module()
        root.register_buffer("c", constant)
        return torch.fx.GraphModule(root, g)
    small, large = graph_on(torch.ones(100)), graph_on(torch.ones(300, 300))     # 90,000 > 65,536 elements
    assert decompose.fold_constants(small) == 1 and decompose.fold_constants(large) == 0
    small.recompile()
    torch.testing.assert_close(small(torch.zeros(100)), torch.full((100,), 2.0))


def test_a_factory_value_moved_to_another_device_is_folded_once():
    """full(cpu) -> _to_copy(device=...): the copy is the per-call host-to-device transfer; it becomes a
    constant on the target device. A factory feeding same-device math stays in the graph (lowered as an
    inline constant). The meta device stands in for a GPU here."""
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    cpu = torch.device("cpu")
    fill = g.call_function(aten.full.default, ([4], 2.0), dict(dtype=torch.float32, device=cpu))
    moved = g.call_function(aten._to_copy.default, (fill,), dict(device=torch.device("meta")))
    same = g.call_function(aten.add.Tensor, (fill, 1))
    g.output((g.call_function(aten.mul.Tensor, (x, same)), g.call_function(aten.add.Tensor, (moved, moved))))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert decompose.fold_constants(gm) == 1
    ops = ops_of(gm)
    assert aten._to_copy.default not in ops and aten.full.default in ops and aten.add.Tensor in ops
    (constant,) = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert getattr(gm, constant).device.type == "meta"


def test_a_returned_value_moved_to_another_device_is_cloned_from_a_folded_constant():
    """tensor(8) made on the CPU, then _to_copy to the device, and returned (transformers' sliding-window
    cache layer keeps its window size so): folded once on the device, returned as a clone each call (the
    caller may write to it) instead of a host-to-device copy per call. A returned value that stays on its
    device is still not folded."""
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    size = g.call_function(aten.scalar_tensor.default, (8,), dict(dtype=torch.int64, device=torch.device("cpu")))
    moved = g.call_function(aten._to_copy.default, (size,), dict(device=torch.device("meta")))
    kept = g.call_function(aten.full.default, ([2], 3.0), dict(dtype=torch.float32, device=torch.device("cpu")))
    g.output((g.call_function(aten.mul.Tensor, (x, 2)), moved, kept))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert decompose.fold_constants(gm) == 1
    ops = ops_of(gm)
    assert aten._to_copy.default not in ops and aten.clone.default in ops and aten.full.default in ops
    output = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert output[1].target is aten.clone.default and output[1].args[0].op == "get_attr"
    assert getattr(gm, output[1].args[0].target).device.type == "meta"


def test_a_returned_moved_constant_matches_eager_and_stays_private(monkeypatch):
    """Through the frontend and graphjit's compiler: a CPU-made tensor moved to the graph's device (here
    the CPU itself: no move, nothing folded) and returned; a caller's write to one call's result does not
    reach the next call's."""
    def fn(x):
        window = torch.tensor(8, dtype=torch.int64)
        return x * 2, window.to(x.device)
    compiled = graphjit.compile(fn, backend="graphjit")
    x = torch.randn(3)
    first = compiled(x)
    first[1].add_(1)
    again = compiled(x)
    torch.testing.assert_close(again[0], x * 2)
    assert again[1].item() == 8
