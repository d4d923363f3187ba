"""Calling a weak reference read from outside the frame (`ref()`): the object it refers to, read through
the reference and guarded like any value from outside, or None, guarded to stay None. nn.RNN/LSTM/GRU
call their `_flat_weight_refs` on every forward to see whether their weights were replaced: that call was
a graph break, and inlined in a parent module's forward the whole RNN call then ran in CPython."""
import copy
import gc
import weakref

import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, assert_same


class Tagger(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.rnn = cell(4, 5, num_layers=2)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


def _ops(counter):
    return [getattr(n.target, "__name__", str(n.target)) for g in counter.graphs for n in g.graph.nodes]


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
@pytest.mark.parametrize("cell", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN], ids=lambda c: c.__name__)
def test_a_recurrent_module_inside_a_model_is_one_graph(cell, backend):
    torch.manual_seed(0)
    model = Tagger(cell).eval()
    counter = CompileCounter(backend)
    compiled = graphjit.compile(model, backend=counter)
    with torch.no_grad():
        for length in (6, 6, 9):
            ids = torch.randint(0, 10, (length, 2))
            assert_same(compiled(ids), model(ids), atol=1e-6, rtol=1e-6, where=f"length {length}")
    assert any(cell.__name__.lower().replace("rnn", "rnn_tanh") in op for op in _ops(counter)), _ops(counter)


def test_replaced_recurrent_weights_are_seen():
    """A weight replaced after a compiled call: the reference no longer refers to it, the guard fails, and
    the RNN re-flattens its weights in CPython as in eager (same results, same module state)."""
    torch.manual_seed(0)
    model = Tagger(torch.nn.LSTM).eval()
    twin = copy.deepcopy(model)
    compiled = graphjit.compile(twin, backend=CompileCounter())
    ids = torch.randint(0, 10, (5, 2))
    with torch.no_grad():
        assert_same(compiled(ids), model(ids), atol=1e-6, rtol=1e-6)
        for m in (model, twin):
            m.rnn.weight_hh_l0 = torch.nn.Parameter(m.rnn.weight_hh_l0 * 0.5)
        for _ in range(2):
            assert_same(compiled(ids), model(ids), atol=1e-6, rtol=1e-6, where="after the replacement")
    assert [r() is w for r, w in zip(twin.rnn._flat_weight_refs, twin.rnn._flat_weights)] == \
        [r() is w for r, w in zip(model.rnn._flat_weight_refs, model.rnn._flat_weights)]


class Holder:
    pass


def test_a_dead_reference_gives_none_and_a_live_one_its_object():
    live = torch.randn(3)
    refs = {"live": weakref.ref(live), "dead": None}
    gone = Holder()
    refs["dead"] = weakref.ref(gone)
    del gone
    gc.collect()

    def f(x):
        target = refs["live"]()
        return x + (0 if refs["dead"]() is None else 100) + (target * 2 if target is not None else 0)

    counter = CompileCounter()
    compiled = graphjit.compile(f, backend=counter)
    x = torch.randn(3)
    assert_same(compiled(x), f(x))
    refs["live"] = weakref.ref(other := torch.ones(3))
    assert_same(compiled(x), f(x), where="a reference to another tensor")
    assert counter.frame_count == 1         # the referent is a graph input, read through the reference
    del other
    gc.collect()
    assert_same(compiled(x), f(x), where="the referent gone")
    assert counter.frame_count == 2
