"""Column reductions in the C++ codegen (CppKernel._column_tile): a reduction whose results are contiguous in
memory and whose reduced elements are not (a sum over dim 0 of a matrix, per-channel statistics of a
channels-last tensor, a bias gradient) runs in tiles of results, with one accumulator per lane. Checked
against eager over odd sizes (a last tile of fewer lanes), several reductions and their epilogues in one
kernel, a statistic computed from an earlier one (a mean, then the variance around it), NaN in max/min,
integer sums, and symbolic sizes; and that the tiled form is the one generated."""
import pytest
import torch

from graphjit import testing
from graphjit.backends.registry import graphjit_backend

from .harness import run_cases


def tiled(compiled):
    return "xl" in compiled.source


def column_stats(x, y):
    return (x * y).sum(0), x.amax(0), x.amin(0), (x - y).sum(0).relu(), x.mean(0)


@pytest.mark.parametrize("shape", [(300, 37), (4096, 32), (129, 8), (5, 16, 19), (257, 200)], ids=str)
def test_sums_and_extremes_over_leading_dims(shape):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    x.view(-1)[7] = float("nan")
    compiled = run_cases(column_stats, [(x, y)], atol=1e-5, rtol=1e-5)
    assert tiled(compiled)


def channels_last_var(x):
    """Per-channel mean, then the variance around it (two reductions, the second reading the first's
    result back), over a channels-last tensor; an int sum."""
    mean = x.mean((0, 2, 3), keepdim=True)
    return mean, ((x - mean) ** 2).mean((0, 2, 3)), (x > 0).sum((0, 2, 3))


def test_statistics_of_a_channels_last_tensor():
    x = torch.randn(4, 40, 9, 7).contiguous(memory_format=torch.channels_last) * 3 + 1
    compiled = run_cases(channels_last_var, [(x,)], atol=1e-5, rtol=1e-5)
    assert tiled(compiled)


def test_long_sum_rounds_as_blocks_of_rows():
    """A float32 sum over 2^17 rows: blocks of rows summed separately keep it close to the float64 sum."""
    x = torch.rand(1 << 17, 16, generator=torch.Generator().manual_seed(3)) + 1000
    compiled = run_cases(lambda t: t.sum(0), [(x,)], atol=0.5, rtol=1e-5)
    got = compiled(x)[0]
    exact = x.double().sum(0)
    assert ((got.double() - exact).abs() / exact).max() < 2e-6


def test_symbolic_sizes():
    """Sizes that change between calls: one compile, the tile count and the last tile's lanes at run time."""
    def make(call):
        g = torch.Generator().manual_seed(call)
        return (torch.randn(50 + 13 * call, 20 + 7 * call, generator=g),)
    counter = testing.check(lambda x: (x.sum(0) * 2, x.amax(0)), make, calls=4, backend=graphjit_backend,
                            atol=1e-5, rtol=1e-5, graphs=None, compile_kwargs={"dynamic": True})
    assert any(tiled(f) for f in counter.compiled_functions())


def test_rows_reduction_is_not_tiled():
    """A reduction along contiguous memory keeps the row loop."""
    x = torch.randn(64, 300)
    compiled = run_cases(lambda t: t.sum(1), [(x,)], atol=1e-5, rtol=1e-5)
    assert not tiled(compiled)


def test_bias_gradient_in_training():
    """A Linear's bias gradient (grad_output summed over the batch) through compiled training steps."""
    def model():
        return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Tanh(), torch.nn.Linear(40, 36))
    testing.check_training(model, lambda: (torch.randn(333, 24),), backend=graphjit_backend,
                           optimizer=lambda params: torch.optim.SGD(params, lr=1e-3), atol=1e-5, rtol=1e-4)


def scaled_column_sum(g, x, n):
    m = n.clamp_min(1e-12)
    return ((-g) * (x / m / m)).sum(1, keepdim=True)


@pytest.mark.parametrize("shape", [(5, 2, 5, 2), (3, 2, 10)], ids=str)
def test_two_rows_of_ten_columns(shape):
    """A column sum over two rows, one tile of ten lanes: gcc 12's straight-line vectorizer, packing the
    simd loop's scalar tail, read the last lane's accumulator before the first row's store to it, and that
    column lost a row (F.normalize's gradient, fuzz grad 11000913; config.cxx_flags now turns it off)."""
    gen = torch.Generator().manual_seed(0)
    g, x = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    n = torch.rand(shape[:1] + (1,) + shape[2:], generator=gen) + 0.5
    compiled = run_cases(scaled_column_sum, [(g, x, n)], atol=1e-5, rtol=1e-5)
    assert tiled(compiled)


def layer_norm_weight_gradients(g, x, mean, rstd):
    """layer_norm's weight and bias gradients: sums over the rows, each row's element scaled by its own
    statistics (read contiguous along the reduced rows, shared by all results)."""
    return (g * ((x - mean) * rstd)).sum(0), g.sum(0)


def test_per_row_statistics_leave_a_column_reduction_tiled():
    gen = torch.Generator().manual_seed(2)
    g, x = torch.randn(300, 70, generator=gen), torch.randn(300, 70, generator=gen)
    mean, rstd = torch.randn(300, 1, generator=gen), torch.rand(300, 1, generator=gen) + 0.5
    compiled = run_cases(layer_norm_weight_gradients, [(g, x, mean, rstd)], atol=1e-4, rtol=1e-5)
    assert tiled(compiled)


def bias_gradient_beside_gelu_backward(g, h, a):
    """A column sum beside unrelated row-wise work of the same outer size (an MLP's backward: a bias
    gradient over [256, 256] and the GELU backward over [256, 1024])."""
    return g.sum(0), h * torch.erf(a * 0.7)


def test_column_reduction_keeps_its_tiles_beside_unrelated_work():
    gen = torch.Generator().manual_seed(4)
    g, h, a = (torch.randn(n, m, generator=gen) for n, m in [(96, 96), (96, 160), (96, 160)])
    compiled = run_cases(bias_gradient_beside_gelu_backward, [(g, h, a)], atol=1e-4, rtol=1e-5)
    assert tiled(compiled)


def row_and_column_sums(g, x):
    """Sums along the rows and down the columns of the same square matrices (layer_norm's backward over
    [256, 256]: its input gradient's row statistics, its weight and bias gradients): both loop over 256
    results and 256 reduced elements, but they read each element in different iterations."""
    return (g * x).sum(1), g.sum(1), (g * x).sum(0), g.sum(0)


@pytest.mark.parametrize("n", [64, 67])
def test_square_matrix_column_sums_keep_their_tiles_beside_row_sums(n):
    gen = torch.Generator().manual_seed(5)
    g, x = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    compiled = run_cases(row_and_column_sums, [(g, x)], atol=1e-4, rtol=1e-5)
    assert tiled(compiled)
