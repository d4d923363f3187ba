"""Recurrent modules and lazily negated views through graphjit's compiler.

- nn.LSTM on the CPU: ATen's lstm runs as mkldnn_rnn, whose workspace output is undefined without grad
  mode (the wrapper's layout check must leave it None); in training, AOTAutograd traces with oneDNN off, so
  torch's decomposition picks its plain ATen form (the mkldnn one's undefined workspace can't be saved).
- `z.conj().imag` is a view with the negative bit: its memory holds the un-negated values, which kernels
  would read, so such a graph runs as captured.
"""
import pytest
import torch

import graphjit
from graphjit.compiler.training import _plain_lstm_decomposition_right
from graphjit.testing import CompileCounter, assert_same

TOL = dict(atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("options", [dict(), dict(batch_first=True, bidirectional=True, num_layers=2)],
                         ids=["plain", "bidirectional"])
def test_lstm_matches_eager(grad, options):
    torch.manual_seed(0)
    module = torch.nn.LSTM(4, 5, **options).eval()
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(module, backend=counter)
    with torch.set_grad_enabled(grad):
        for length in (6, 6):
            x = torch.randn(2, length, 4) if options.get("batch_first") else torch.randn(length, 2, 4)
            assert_same(compiled(x), module(x), **TOL)
    # with grad, a torch whose lstm decomposition is wrong (2.11) runs the graph as captured
    assert not counter.ran_as_captured() or grad and not _plain_lstm_decomposition_right()


def test_lstm_training_gradients_match_eager():
    torch.manual_seed(0)
    eager = torch.nn.LSTM(4, 5, num_layers=2)
    mine = torch.nn.LSTM(4, 5, num_layers=2)
    mine.load_state_dict(eager.state_dict())
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(mine, backend=counter)
    for _ in range(2):
        x = torch.randn(6, 2, 4)
        out_e, (h_e, _) = eager(x)
        out_c, (h_c, _) = compiled(x)
        assert_same(out_c, out_e, **TOL)
        (out_e.sum() + h_e.square().sum()).backward()
        (out_c.sum() + h_c.square().sum()).backward()
        for (name, p_e), p_c in zip(eager.named_parameters(), mine.parameters()):
            assert_same(p_c.grad, p_e.grad, **TOL, where=name)
    assert not counter.ran_as_captured() or not _plain_lstm_decomposition_right()


@pytest.mark.parametrize("f", [lambda z: z.conj().imag.exp(), lambda z: (z.conj().imag * 2, z.conj().real)],
                         ids=["imag", "imag_and_real"])
def test_the_imaginary_part_of_a_conjugate_keeps_its_sign(f):
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    compiled = graphjit.compile(f)
    for _ in range(2):
        assert_same(compiled(z), f(z), **TOL)


@pytest.mark.parametrize("cls", [torch.nn.GRU, torch.nn.RNN, torch.nn.LSTM], ids=lambda c: c.__name__)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_dropout_between_recurrent_layers_is_applied(cls, grad):
    """torch's decompositions of rnn/gru/lstm drop the dropout between layers: a training module of several
    layers with dropout runs its graph as captured, so eager's kernel draws eager's masks."""
    torch.manual_seed(0)
    module = cls(4, 5, num_layers=3, dropout=0.5).train()
    compiled = graphjit.compile(module)
    x = torch.randn(6, 2, 4)
    with torch.set_grad_enabled(grad):
        for seed in range(2):
            torch.manual_seed(seed)
            expected = module(x)[0]
            torch.manual_seed(seed)
            assert_same(compiled(x)[0], expected)
