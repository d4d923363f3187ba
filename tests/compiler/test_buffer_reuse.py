"""The generated wrapper reuses a dead kernel output's memory for a later kernel output of the same layout
(one allocation fewer per call), but never memory that a graph output or an alias still refers to (a view
returned by an ATen fallback such as unfold). C++ codegen and, where installed, Triton's interpreter.
Also where the wrapper's per-call input layout checks run, and where they don't need to."""
import pytest
import torch

import graphjit
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit.compiler.codegen import wrapper
from graphjit import config as gj_config

BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not triton_codegen.triton_available(),
                                                                      reason="Triton is not installed"))]


def compiled_with_wrapper(fn, backend, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", int(backend == "triton"))
    from graphjit.backends.registry import graphjit_backend
    calls = []

    def keep(gm, example_inputs):
        calls.append(graphjit_backend(gm, example_inputs))
        return calls[-1]
    return graphjit.compile(fn, backend=keep), calls


def chain(x, w):
    h = x
    for _ in range(4):                     # each matmul's input is a fresh kernel output of one layout
        h = torch.tanh(h @ w) * 0.5 + h
    return h


def aliased(x):
    a = x.softmax(-1)
    u = a.unfold(1, 2, 2)                  # an ATen fallback returning a view of a's memory
    s = u.sum(-1)                          # a is dead from here, u is not
    b = (x * s.sum(-1, keepdim=True) * 2).softmax(-1)   # same layout as a: must not take its memory
    m = b @ b.t()                          # an extern call: b is computed before u is read again
    return m, u * m.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_buffers_are_reused_and_results_hold(backend, monkeypatch):
    compiled, calls = compiled_with_wrapper(chain, backend, monkeypatch)
    for _ in range(3):
        x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.1
        torch.testing.assert_close(compiled(x, w), chain(x, w), rtol=1e-5, atol=1e-5)
    assert "# reuse" in calls[0].wrapper_source


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_an_alias_still_reads_is_not_reused(backend, monkeypatch):
    compiled, calls = compiled_with_wrapper(aliased, backend, monkeypatch)
    for _ in range(2):
        x = torch.randn(8, 16)
        for got, want in zip(compiled(x), aliased(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_alias_test_can_fail(monkeypatch):
    """With the donor rule switched off (every kernel output reusable), the aliased case goes wrong."""
    monkeypatch.setattr(wrapper.WrapperCode, "_donors", lambda self, outputs: {
        n.name for item in self.items if hasattr(item, "groups") for n in self._allocated(item)} - outputs)
    compiled, calls = compiled_with_wrapper(aliased, "cpp", monkeypatch)
    x = torch.randn(8, 16)
    got, want = compiled(x), aliased(x)
    assert "# reuse" in calls[0].wrapper_source
    assert not torch.allclose(got[1], want[1])


def test_input_layout_checks_live_in_the_guards_or_in_the_wrapper(monkeypatch):
    """Through graphjit.compile the frontend's guards check every input's shape and strides, so the
    wrapper doesn't repeat it; called directly (a torch.compile-style caller) the wrapper checks."""
    from graphjit.backends.registry import graphjit_backend
    compiled, calls = compiled_with_wrapper(lambda x: (x * 2).sin(), "cpp", monkeypatch)
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), (x * 2).sin())
    assert "_expected" not in calls[0].wrapper_source
    xt = torch.randn(6, 4).t()                       # other strides: the guards send it to a new compile
    torch.testing.assert_close(compiled(xt), (xt * 2).sin())
    assert len(calls) == 2
    direct = graphjit_backend(torch.fx.symbolic_trace(lambda x: (x * 2).sin()), [x])
    assert "_expected" in direct.wrapper_source
    torch.testing.assert_close(direct(xt), (xt * 2).sin())   # mismatched strides: runs eagerly, right
