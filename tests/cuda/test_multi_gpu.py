"""Graphs compiled for one GPU and called while another is the current device (skipped with fewer than two
GPUs): the Triton wrapper's device guard must allocate and launch on the graph's own device, in every mode,
and a model on the second GPU must give eager's results there."""
import pytest
import torch

import graphjit

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two CUDA devices")]


def body(x, w):
    h = torch.nn.functional.gelu(x @ w) * 2
    return h.softmax(-1) + x.sum(-1, keepdim=True)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("graph_device,current", [(1, 0), (0, 1)])
def test_graph_runs_on_its_own_device_whatever_is_current(mode, graph_device, current):
    compiled = graphjit.compile(body, backend="graphjit", mode=mode)
    dev = torch.device("cuda", graph_device)
    w = torch.randn(64, 64, device=dev)
    for step in range(4):
        x = torch.randn(32, 64, device=dev)
        # the first call compiles with the graph's device current; the later ones run with the other one current
        with torch.cuda.device(graph_device if step == 0 else current):
            got = compiled(x, w)
            assert torch.cuda.current_device() == (graph_device if step == 0 else current)
        assert got.device == dev
        torch.testing.assert_close(got, body(x, w), rtol=2e-3, atol=2e-3)


def test_one_function_on_two_devices_compiles_twice_and_both_are_right():
    calls = []

    def backend(gm, example_inputs):
        calls.append({t.device for t in example_inputs})
        from graphjit.backends import registry
        return registry.lookup_backend("graphjit")(gm, example_inputs)

    compiled = graphjit.compile(body, backend=backend)
    for _ in range(2):
        for index in (0, 1):
            dev = torch.device("cuda", index)
            x, w = torch.randn(16, 64, device=dev), torch.randn(64, 64, device=dev)
            got = compiled(x, w)
            assert got.device == dev
            torch.testing.assert_close(got, body(x, w), rtol=2e-3, atol=2e-3)
    assert calls == [{torch.device("cuda", 0)}, {torch.device("cuda", 1)}]
