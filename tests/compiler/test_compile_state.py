"""The compiler runs outside the caller's inference mode, with the cyclic GC paused (compiler.compiling()),
and leaves both as it found them; it keeps the caller's grad mode, so a graph compiled under
torch.inference_mode() or torch.no_grad() still compiles to kernels (a regression of the first version:
leaving inference mode turned grad mode on, and every graph then ran eagerly)."""
import gc

import pytest
import torch

import graphjit
from graphjit.backends.registry import lookup_backend


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()


class Recording:
    def __init__(self):
        self.compiled, self.states = [], []

    def __call__(self, gm, example_inputs):
        fn = lookup_backend("graphjit")(gm, example_inputs)
        self.compiled.append(fn)
        self.states.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled(), gc.isenabled()))
        return fn


@pytest.mark.parametrize("context", ["inference_mode", "no_grad"])
def test_graphs_compiled_under_inference_or_no_grad_become_kernels(context):
    m = model()
    recording = Recording()
    compiled = graphjit.compile(m, backend=recording)
    ctx = torch.inference_mode if context == "inference_mode" else torch.no_grad
    with ctx():
        for _ in range(3):
            x = torch.randn(4, 16)
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-5)
        assert torch.is_inference_mode_enabled() == (context == "inference_mode")
        assert not torch.is_grad_enabled()
    assert len(recording.compiled) == 1
    fn = recording.compiled[0]
    assert hasattr(fn, "items") or hasattr(fn, "launches"), "compiled to kernels, not run eagerly"
    # the collector is paused while the frame translates (the backend runs inside), on again after
    assert recording.states == [(context == "inference_mode", False, False)], "the caller's state after compile"
    assert gc.isenabled()


def test_a_graph_needing_gradients_still_runs_eagerly_with_grad_on():
    m = model()
    recording = Recording()
    compiled = graphjit.compile(m, backend=recording)
    x = torch.randn(4, 16)
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    for got, want in zip(grads, [p.grad for p in m.parameters()]):
        torch.testing.assert_close(got, want)


def test_gc_state_is_restored_even_when_the_caller_disabled_it():
    gc.disable()
    try:
        recording = Recording()
        with torch.no_grad():
            graphjit.compile(model(), backend=recording)(torch.randn(2, 16))
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert gc.isenabled()


def test_a_write_into_an_input_made_under_inference_mode_compiles():
    """A KV-cache-style write into an input created under inference mode: its fake copy must not be an
    inference tensor, or the functionalized write-back fails outside inference mode (review finding)."""
    def f(cache, k):
        cache[:, 1] = k * 2
        return cache.sum(1) + 1
    recording = Recording()
    compiled = graphjit.compile(f, backend=recording)
    with torch.inference_mode():
        for _ in range(2):
            cache, k = torch.zeros(4, 3), torch.randn(4)
            mine, theirs = cache.clone(), cache.clone()
            torch.testing.assert_close(compiled(mine, k), f(theirs, k))
            torch.testing.assert_close(mine, theirs)
    assert recording.compiled and all(hasattr(fn, "items") for fn in recording.compiled)


def test_overlapping_compiles_turn_the_collector_on_only_after_the_last():
    from graphjit.compiler import compiling
    assert gc.isenabled()
    with compiling():
        with compiling():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the outer compile is still running"
    assert gc.isenabled()
