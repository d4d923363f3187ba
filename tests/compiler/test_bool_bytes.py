"""Bool tensors in the C++ codegen are read and written as their bytes (uint8_t): gcc 12 vectorizes no loop
that loads or stores a C++ bool, so a mask beside a float output (a training forward's ReLU, a comparison
saved for the backward) left the whole loop scalar. Checked against eager over odd sizes (a vector tail),
masks made and read in one kernel, masks read from inputs (views included), and bool outputs of reductions;
and that the kernels read and write bools through bytes."""
import pytest
import torch

from .harness import run_cases


def relu_and_its_mask(x, w):
    y = torch.relu(x * w)
    return y, y <= 0


def masked_fill_from_input(x, m):
    return torch.where(m, x, x * 0.5), ~m, m & (x > 0)


def mask_reductions(x):
    return (x > 0).any(-1), (x > -5).all(0), (x > 0).sum(-1)


@pytest.mark.parametrize("shape", [(8, 64, 33), (3, 1027), (17,)], ids=str)
def test_masks_made_beside_float_outputs(shape):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(*shape, generator=g), torch.randn(shape[-1], generator=g)
    compiled = run_cases(relu_and_its_mask, [(x, w)])
    assert "reinterpret_cast<uint8_t*>" in compiled.source


@pytest.mark.parametrize("shape", [(8, 64, 33), (5, 129)], ids=str)
def test_masks_read_from_inputs(shape):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g)
    m = torch.randn(*shape, generator=g) > 0
    cases = [(x, m), (x.transpose(-1, -2).contiguous(), m.transpose(-1, -2)), (x[..., 1:], m[..., :-1])]
    compiled = run_cases(masked_fill_from_input, cases)
    assert "reinterpret_cast<const uint8_t*>" in compiled.source


def test_bool_results_of_reductions():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 40, 21, generator=g)
    x[2] = -1.0
    run_cases(mask_reductions, [(x,)])
