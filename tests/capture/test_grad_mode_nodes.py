"""A grad-mode context that doesn't change the mode (torch.no_grad() in code called under no_grad or
inference_mode, as transformers' rotary embeddings are) leaves no _set_grad_enabled node in the graph:
graphjit's compiler refuses graphs that change global state, so one such node sent the whole graph (every
Llama-family model on the GPU) to eager, and in reduce-overhead made its capture copy host memory."""
import torch

import graphjit


def _rotary_like(x, inv_freq):
    with torch.no_grad():
        freqs = x[..., None] * inv_freq
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1) * 2


def _grad_nodes(gm):
    return [n for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled]


def _compiled_with_graphs(fn):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    return graphjit.compile(fn, backend=backend), graphs


def test_no_grad_under_inference_leaves_no_state_node_and_matches_eager():
    graphjit.reset()
    compiled, graphs = _compiled_with_graphs(_rotary_like)
    for _ in range(3):
        x, inv = torch.randn(4, 6), torch.randn(5)
        with torch.inference_mode():
            got, expected = compiled(x, inv), _rotary_like(x, inv)
        torch.testing.assert_close(got, expected)
    assert len(graphs) == 1 and _grad_nodes(graphs[0]) == []


def test_no_grad_with_grad_enabled_keeps_its_state_nodes():
    graphjit.reset()
    compiled, graphs = _compiled_with_graphs(_rotary_like)
    x, inv = torch.randn(4, 6, requires_grad=True), torch.randn(5)
    got, expected = compiled(x, inv), _rotary_like(x, inv)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad is expected.requires_grad is False     # computed under no_grad: no graph to x
    assert [n.args[0] for n in _grad_nodes(graphs[0])] == [False, True]
    assert torch.is_grad_enabled()


def test_graphjit_compiler_compiles_the_graph_under_inference(monkeypatch):
    """The default backend compiles it (no 'running the graph eagerly' for the grad-mode change)."""
    from graphjit import logs
    graphjit.reset()
    messages = []
    monkeypatch.setattr(logs, "log", lambda artifact, text: messages.append(text() if callable(text) else text))
    compiled = graphjit.compile(_rotary_like)
    with torch.inference_mode():
        for _ in range(2):
            x, inv = torch.randn(4, 6), torch.randn(5)
            torch.testing.assert_close(compiled(x, inv), _rotary_like(x, inv))
    assert not [m for m in messages if "eagerly" in m], messages
