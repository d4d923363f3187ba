"""Random numbers drawn in graphjit's Triton kernels on a CUDA GPU (skipped elsewhere): Philox bits equal to
the C++ codegen's for the same seed, dropout's statistics, reproducibility under torch.manual_seed, a
training step's mask reused by its backward, and reduce-overhead's CUDA graphs drawing new numbers on each
replay."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from tests.compiler.test_random import reference_uniforms

pytestmark = pytest.mark.gpu
DEV = "cuda"


def test_rand_is_the_reference_philox_on_the_gpu():
    graphjit.reset()
    compiled = graphjit.compile(lambda x: torch.rand_like(x) + x)
    x = torch.zeros(33, 65, device=DEV)
    torch.cuda.manual_seed(5)
    seed = int(torch.randint(0, 2 ** 63 - 1, (1,), device=DEV).item())
    torch.cuda.manual_seed(5)
    out = compiled(x)
    assert torch.equal(out.cpu(), reference_uniforms(seed, 0, x.numel()).view(33, 65))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_dropout_statistics_reproducible_and_fresh_per_call(mode):
    graphjit.reset()
    compiled = graphjit.compile(lambda x: F.dropout(x, 0.25, training=True) + 1, mode=mode)
    x = torch.randn(512, 1024, device=DEV)
    outs = []
    for _ in range(4):
        torch.cuda.manual_seed(1)
        outs.append(compiled(x).clone())
        outs.append(compiled(x).clone())
    kept = outs[0] != 1
    n = x.numel()
    assert abs(kept.sum().item() - 0.75 * n) < 5 * (n * 0.25 * 0.75) ** 0.5
    torch.testing.assert_close(outs[0][kept], (x * (1 / 0.75) + 1)[kept])
    assert all(torch.equal(outs[0], o) for o in outs[2::2])          # after manual_seed: the same numbers
    assert not torch.equal(outs[0], outs[1])                          # the next call: other numbers


def test_training_dropout_mask_reaches_the_backward():
    graphjit.reset()
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.rand(256, device=DEV) + 0.5)
    compiled = graphjit.compile(lambda x: F.dropout(x * w, 0.5, training=True))
    for _ in range(3):
        out = compiled(torch.randn(128, 256, device=DEV))
        out.sum().backward()
        torch.testing.assert_close(w.grad, (out.detach() / w.detach()).sum(0), atol=1e-4, rtol=1e-4)
        w.grad = None
