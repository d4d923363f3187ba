"""torch.ao.quantization's fake quantization through graphjit's compiler, its observers' state compared
with eager's after every call.

The per-channel FusedMovingAvgObsFakeQuantize (the weight fake-quant of the x86/fbgemm QAT qconfigs)
calls fused_moving_avg_obs_fake_quant with per-row quantization, which resizes the buffers it writes
(running min/max from (0,), scale and zero point from (1,) to one per channel) where the fake kernels keep
their sizes: a functional graph's write-back raised (inference) or was lost (training: a scale computed
afresh every step, outputs drifting from eager's). Such graphs run as captured.
"""
import copy
import warnings

import pytest
import torch

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.testing import assert_same

Q = pytest.importorskip("torch.ao.quantization")


def _same_state(compiled_module, eager_module, where):
    got, expected = compiled_module.state_dict(), eager_module.state_dict()
    assert list(got) == list(expected), where
    for name in expected:
        assert_same(got[name], expected[name], where=f"{where}: {name}")


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_per_channel_weight_fake_quant_keeps_its_observer_state(grad):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = Q.default_fused_per_channel_wt_fake_quant()
    twin = copy.deepcopy(eager)
    compiled = graphjit.compile(twin, backend=graphjit_backend)
    for step in range(3):
        w = (torch.randn(8, 6) * (step + 1)).requires_grad_(grad)
        assert_same(compiled(w.detach().requires_grad_(grad)), eager(w), where=f"step {step}")
        _same_state(twin, eager, f"step {step}")


def test_qat_linear_trains_with_eager_observer_state():
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.linear, self.dequant = Q.QuantStub(), torch.nn.Linear(8, 8), Q.DeQuantStub()

        def forward(self, x):
            return self.dequant(self.linear(self.quant(x)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = Model().train()
        eager.qconfig = Q.get_default_qat_qconfig("x86")
        Q.prepare_qat(eager, inplace=True)
    twin = copy.deepcopy(eager)
    compiled = graphjit.compile(twin, backend=graphjit_backend)
    for step in range(3):
        x = torch.randn(4, 8) * (step + 1)
        expected, got = eager(x), compiled(x)
        assert_same(got, expected, where=f"step {step}")
        expected.sum().backward()
        got.sum().backward()
        with torch.no_grad():       # an optimizer step's worth of change, the same in both
            for p, q in zip(eager.parameters(), twin.parameters()):
                assert_same(q.grad, p.grad, atol=1e-6, rtol=1e-6, where=f"step {step}: gradient")
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
                p.grad = q.grad = None
        _same_state(twin, eager, f"step {step}")


def test_per_row_fake_quant_called_as_the_aten_op_runs_as_captured():
    """torch.ops.aten.fused_moving_avg_obs_fake_quant (no overload named) and torch's
    _fused_moving_avg_obs_fq_helper resize the same buffers."""
    def make():
        return [torch.tensor([1], dtype=torch.long), torch.tensor([1], dtype=torch.long), torch.zeros(0),
                torch.zeros(0), torch.ones(1), torch.zeros(1, dtype=torch.int32)]

    def packet(x, state):
        return torch.ops.aten.fused_moving_avg_obs_fake_quant(x, *state, 0.01, -128, 127, 0, True, True)

    def helper(x, state):
        return torch._fused_moving_avg_obs_fq_helper(x, *state, 0.01, -128, 127, 0, True, True)[0]

    for fn in (packet, helper):
        compiled = graphjit.compile(fn, backend=graphjit_backend)
        eager_state, compiled_state = make(), make()
        for step in range(2):
            x = torch.randn(8, 6) * (step + 1)
            assert_same(compiled(x, compiled_state), fn(x, eager_state), where=f"{fn.__name__} step {step}")
            for got, expected in zip(compiled_state, eager_state):
                assert_same(got, expected, where=f"{fn.__name__} step {step}: state")
