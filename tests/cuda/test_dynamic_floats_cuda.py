"""Floats that change between calls on a CUDA GPU (skipped elsewhere): the symbolic float input reaches
the Triton path's extern calls and the CUDA-graph mode, with results equal to eager's."""
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter

pytestmark = pytest.mark.gpu
VALUES = (0.5, 1.5, 2.5, -3.0, 0.5, 7.25)


def scaled(x, s):
    return (x * s).relu().sum(-1) + s * 2


@pytest.fixture
def x():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.randn(8, 64, device="cuda")


def test_a_changing_float_argument_on_cuda_compiles_twice(x):
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(scaled, backend=counter)
    for s in VALUES:
        torch.testing.assert_close(compiled(x, s), scaled(x, s))
    assert counter.frame_count == 2, counter.frame_count


def test_a_changing_float_argument_in_reduce_overhead(x):
    compiled = graphjit.compile(scaled, mode="reduce-overhead")
    for s in VALUES:
        torch.testing.assert_close(compiled(x, s), scaled(x, s))
