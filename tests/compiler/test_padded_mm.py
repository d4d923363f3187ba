"""Large 16-bit CUDA matmuls whose output width is not a multiple of 8 (GPT-2's 50257 logits) get an output
layout with rows padded to a multiple of 8 (config.triton_pad_mm); checked on the lowered IR with fake CUDA
tensors, so no GPU is needed. The GPU run itself: tests/compiler/test_triton.py
::test_product_with_unaligned_width_is_padded_on_cuda."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphjit import config
from graphjit.compiler import decompose, lowering
from graphjit.compiler.ir import ExternOutput


def lowered(fn, *shapes, dtype=torch.bfloat16, device="cuda"):
    with FakeTensorMode():
        inputs = [torch.empty(s, device=device, dtype=dtype) for s in shapes]
    gm = torch.fx.symbolic_trace(fn)
    return lowering.lower(decompose.decompose(gm, inputs), inputs)


def product_strides(graph):
    return [tuple(int(s) for s in b.layout.strides) for b in graph.buffers() if isinstance(b, ExternOutput)]


def test_logits_product_has_padded_rows_and_views_follow():
    graph = lowered(lambda x, w: (x @ w.t()).view(8, 512, 50257), (4096, 768), (50257, 768))
    assert product_strides(graph) == [(50264, 1)]
    (out,) = graph.outputs
    assert tuple(int(s) for s in out.strides) == (512 * 50264, 50264, 1)


def test_linear_with_bias_is_padded():
    graph = lowered(lambda x, w, b: torch.nn.functional.linear(x, w, b), (4096, 768), (50257, 768), (50257,))
    assert product_strides(graph) == [(50264, 1)]


@pytest.mark.parametrize("case", ["aligned width", "small", "float32", "cpu"])
def test_other_products_keep_eager_layout(case):
    n = 50256 if case == "aligned width" else 50257
    rows = 16 if case == "small" else 4096
    graph = lowered(lambda x, w: x @ w.t(), (rows, 768), (n, 768),
                    dtype=torch.float32 if case == "float32" else torch.bfloat16,
                    device="cpu" if case == "cpu" else "cuda")
    assert product_strides(graph) == [(n, 1)]


def test_knob_turns_padding_off(monkeypatch):
    monkeypatch.setattr(config, "triton_pad_mm", 0)
    graph = lowered(lambda x, w: x @ w.t(), (4096, 768), (50257, 768))
    assert product_strides(graph) == [(50257, 1)]
