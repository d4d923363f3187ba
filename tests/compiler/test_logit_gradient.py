"""logit's gradient through graphjit's compiler against eager's, NaN and infinities included: eager's
kernels give 0 where x < lo or x > hi and dy / (x (1 - x)) elsewhere, so a NaN x has a NaN gradient
(torch's decomposition tested lo <= x <= hi, which a NaN fails, and gave 0); an eps below 0 is no eps
(x outside [0, 1]: NaN); a NaN eps clamps nothing; bfloat16 compares with bounds rounded to it."""
import math

import pytest
import torch

import graphjit

VALUES = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-4, 1e-3, 0.25, 0.5, 0.999, 0.9995, 1.0,
          1.5, -0.5, 1e30]


def gradients(fn, x, dy):
    x = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(x), x, dy)
    return grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 1e-3, 0.0, -1.0, 0.7, math.nan])
def test_logit_gradient_matches_eager(dtype, eps):
    def f(x):
        return torch.logit(x, eps=eps) * 3

    x = torch.tensor(VALUES, dtype=dtype)
    compiled = graphjit.compile(f)
    rtol = 1.6e-2 if dtype == torch.bfloat16 else 1e-6
    for seed in range(2):
        dy = torch.randn(len(VALUES), generator=torch.Generator().manual_seed(seed)).to(dtype)
        actual = gradients(compiled, x, dy)
        # eager's CPU kernel answers otherwise in its vector loop than in its scalar tail for a NaN x under
        # an eps (0 there, NaN here) and for x = -0.0 (-inf there, +inf here), and which elements take
        # which depends on the CPU's vector width: each element is checked against eager's answer for the
        # whole tensor and for the element alone
        whole = gradients(f, x, dy)
        alone = torch.stack([gradients(f, x[i:i + 1], dy[i:i + 1])[0] for i in range(len(VALUES))])
        for expected in (whole, alone):
            assert expected.dtype == actual.dtype and expected.shape == actual.shape
        agrees = [torch.isclose(actual, e, rtol=rtol, atol=0, equal_nan=True) for e in (whole, alone)]
        assert bool((agrees[0] | agrees[1]).all()), (whole, alone, actual)
