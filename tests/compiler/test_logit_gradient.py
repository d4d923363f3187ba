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
    for seed in range(2):
        dy = torch.randn(len(VALUES), generator=torch.Generator().manual_seed(seed)).to(dtype)
        expected, actual = gradients(f, x, dy), gradients(compiled, x, dy)
        assert torch.equal(expected.isnan(), actual.isnan()), (expected, actual)
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1.6e-2 if dtype == torch.bfloat16 else 1e-6,
                                   atol=0)
