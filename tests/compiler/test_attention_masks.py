"""Attention masks that are all True whatever the inputs (transformers builds them from torch.ones while
compiling) are dropped before decomposition, so attention runs as one fused kernel (flash/cuDNN on CUDA)
instead of the math path. Masks that depend on inputs, on randomness, or that mask something, stay."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler import decompose


def capture(fn, *args, **kwargs):
    graphs = []

    def backend(gm, example_inputs):
        gm.example_inputs = example_inputs
        graphs.append(gm)
        return gm.forward
    graphjit.compile(fn, backend=backend)(*args, **kwargs)
    (gm,) = graphs
    return gm


def masks_of(gm):
    found = []
    for node in gm.graph.nodes:
        if node.target is F.scaled_dot_product_attention:
            found.append(node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None))
    return found


def attention(q, mask_fn):
    return F.scaled_dot_product_attention(q, q, q, attn_mask=mask_fn(q))


def test_an_all_true_mask_built_from_constants_is_dropped_and_results_hold():
    def all_true(q):
        return torch.ones(q.shape[0], 1, q.shape[2], q.shape[2], dtype=torch.bool).expand(-1, q.shape[1], -1, -1)
    q = torch.randn(2, 3, 7, 8)
    gm = capture(lambda q: attention(q, all_true), q)
    assert decompose.fold_constant_attention_masks(gm) == 1
    assert masks_of(gm) == [None]
    torch.testing.assert_close(gm(q)[0], attention(q, all_true))
    compiled = graphjit.compile(lambda q: attention(q, all_true), backend="graphjit")
    for _ in range(2):
        q = torch.randn(2, 3, 7, 8)
        torch.testing.assert_close(compiled(q), attention(q, all_true), rtol=1e-5, atol=1e-5)


def test_one_mask_read_by_every_layer_is_dropped_once():
    """Layers reading one constant mask: every layer's attention drops it, and its nodes are erased once
    (fx warned of nodes erased twice)."""
    import warnings

    def layers(q):
        mask = torch.ones(q.shape[0], 1, q.shape[2], q.shape[2], dtype=torch.bool).expand(-1, q.shape[1], -1, -1)
        for _ in range(3):
            q = F.scaled_dot_product_attention(q, q, q, attn_mask=mask) + q
        return q
    q = torch.randn(2, 3, 7, 8)
    gm = capture(layers, q)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decompose.fold_constant_attention_masks(gm) == 3
    assert masks_of(gm) == [None] * 3
    assert not [n for n in gm.graph.nodes if n.target in (torch.ones, "expand")]
    torch.testing.assert_close(gm(q)[0], layers(q))


def test_an_all_zero_additive_mask_is_dropped():
    q = torch.randn(1, 2, 5, 4)
    gm = capture(lambda q: attention(q, lambda q: torch.zeros(5, 5)), q)
    assert decompose.fold_constant_attention_masks(gm) == 1


def test_masks_that_mask_depend_on_inputs_or_are_random_stay():
    q = torch.randn(1, 2, 6, 4)
    causal = capture(lambda q: attention(q, lambda q: torch.ones(6, 6, dtype=torch.bool).tril()), q)
    assert decompose.fold_constant_attention_masks(causal) == 0
    torch.testing.assert_close(causal(q)[0], attention(q, lambda q: torch.ones(6, 6, dtype=torch.bool).tril()))
    from_input = capture(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), q,
                         torch.ones(6, 6, dtype=torch.bool))
    assert decompose.fold_constant_attention_masks(from_input) == 0
    random = capture(lambda q: attention(q, lambda q: torch.rand(6, 6) < 2.0), q)   # all True, but random
    assert decompose.fold_constant_attention_masks(random) == 0


def test_bert_and_vit_without_masks_get_fused_attention():
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel
    small = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
    torch.manual_seed(0)
    cases = [(BertModel(BertConfig(**small), add_pooling_layer=False).eval(), torch.randint(0, 1000, (2, 16))),
             (ViTModel(ViTConfig(**small, image_size=32, patch_size=8), add_pooling_layer=False).eval(),
              torch.randn(2, 3, 32, 32))]
    for model, x in cases:
        with torch.no_grad():
            gm = capture(model, x)
            decompose.fold_constant_attention_masks(gm)
            assert masks_of(gm) == [None, None]     # (on the CPU transformers passes none in the first place)
            aten = decompose.decompose(gm, gm.example_inputs)
            ops = {str(n.target) for n in aten.graph.nodes}
            assert not any("bmm" in op or "softmax" in op for op in ops), sorted(ops)
            graphjit.reset()
            compiled = graphjit.compile(model, backend="graphjit")
            torch.testing.assert_close(compiled(x)[0], model(x)[0], rtol=1e-4, atol=1e-4)



class _MaskedSelfAttention(torch.nn.Module):
    """A self-attention layer that builds an all-true mask from constants, as transformers does on CUDA for
    BERT and ViT called without an attention_mask."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        mask = torch.ones(b, 1, n, n, dtype=torch.bool)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, n, 16))


def test_a_training_graph_drops_the_constant_mask_before_autograd_picks_the_attention_kernel():
    # AOTAutograd decides the attention op of the joint graph: with the mask it is the math path (whose
    # bfloat16 inputs ATen upcasts to float32, saved as such for the backward), without it a fused kernel
    # and that kernel's backward. Gradients and the optimizer's steps stay eager's.
    from graphjit.testing import check_training
    counter, *_ = check_training(_MaskedSelfAttention, lambda step: (torch.randn(2, 5, 16),), steps=2,
                                 backend="graphjit", atol=1e-5, rtol=1e-5)
    halves = [h for f in counter.compiled for h in f.graphjit_halves]
    assert {h.which for h in halves} == {"forward", "backward"}
    ops = {str(n.target) for h in halves for n in h.graph.graph.nodes if n.op == "call_function"}
    assert not any("_softmax" in op or "bmm" in op for op in ops), sorted(ops)
    # on the CPU the fused kernel takes masks too: the mask it is given tells whether it was dropped
    (fused,) = [n for h in halves if h.which == "forward" for n in h.graph.graph.nodes
                if n.target is torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default]
    assert fused.kwargs.get("attn_mask", fused.args[5] if len(fused.args) > 5 else None) is None, fused.format_node()


class _CountingAttention(torch.nn.Module):
    """A step counter written in place beside an all-true constant mask (BatchNorm's num_batches_tracked
    is such a write): dropping the mask must not drop the write, which nothing in the graph reads."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, h, scale):
        self.steps += 1
        scale.mul_(2)
        q = self.proj(h)
        mask = torch.ones(h.shape[1], h.shape[1], dtype=torch.bool)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_writes_beside_a_dropped_mask_stay(grad):
    torch.manual_seed(0)
    eager = _CountingAttention()
    compiled_module = _CountingAttention()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = graphjit.compile(compiled_module, backend="graphjit")
    h = torch.randn(2, 4, 8)
    scales = torch.ones(3), torch.ones(3)
    with torch.set_grad_enabled(grad):
        for _ in range(3):
            torch.testing.assert_close(compiled(h, scales[1]), eager(h, scales[0]), rtol=1e-5, atol=1e-5)
    assert compiled_module.steps.item() == eager.steps.item() == 3
    torch.testing.assert_close(scales[1], scales[0])


def test_a_mask_beside_is_causal_is_kept():
    """torch refuses or ignores a mask given with is_causal=True depending on the kernel it picks; the mask
    stays, so the compiled call does what eager's does."""
    def f(q):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool), is_causal=True)
    q = torch.randn(1, 2, 5, 4)
    try:
        expected = f(q)
    except RuntimeError:                    # torch 2.14 refuses it
        with pytest.raises(RuntimeError):
            graphjit.compile(f, backend="graphjit")(q)
        return
    assert decompose.fold_constant_attention_masks(capture(f, q)) == 0
    torch.testing.assert_close(graphjit.compile(f, backend="graphjit")(q), expected)


@pytest.mark.parametrize("draw", ["cauchy_", "geometric_", "exponential_", "log_normal_"])
def test_a_mask_drawn_at_random_is_not_evaluated_at_compile_time(draw):
    """Random ops of every kind (cauchy_, geometric_ ... too) keep a mask from being evaluated once at compile
    time: here the draw always gives an all-True mask, which a fold would drop for good."""
    from graphjit.compiler.decompose import fold_constant_attention_masks

    def fn(q):
        mask = getattr(torch.empty(6, 6), draw)(0.5).abs() < float("inf")
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    graphjit.compile(fn, backend=record)(torch.randn(1, 6, 4))
    assert fold_constant_attention_masks(graphs[0]) == 0
