"""An extern call whose result nests tuples: transformers' gradient checkpointing makes AOTAutograd run CPU
flash attention under run_and_save_rng_state, which returns (rng state, (attention's outputs ...)). Each
tensor of the nested result is an output of the extern call; the graph compiles (it ran as captured, with a
'compiler failed' warning). The smaller cases check checkpointed attention against eager too."""
import warnings

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import graphjit


def attention_block(q, w, p=0.0):
    # a float mask and a scale: CPU's flash kernel, which checkpointing runs with its random state saved
    mask = torch.zeros(q.shape[-2], q.shape[-2]).masked_fill(torch.ones(q.shape[-2], q.shape[-2]).triu(1) > 0,
                                                            float("-inf"))

    def inner(q):
        h = F.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=0.0, scale=0.35)
        return F.dropout((h @ w).relu(), p=p, training=True)
    return checkpoint(inner, q, use_reentrant=False).sum()


def test_checkpointed_attention_trains_compiled_without_warnings():
    graphjit.reset()
    torch.manual_seed(0)
    q0, w0 = torch.randn(2, 2, 5, 8), torch.randn(8, 8)
    grads = []
    for compiled in (False, True):
        fn = graphjit.compile(attention_block) if compiled else attention_block
        q, w = q0.clone().requires_grad_(), w0.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # a compiler failure warns; none may
            loss = fn(q, w)
            loss.backward()
        grads.append((loss.detach(), q.grad, w.grad))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_checkpointed_attention_with_dropout_compiles_without_warnings():
    """With a random op in the region: the masks differ from eager's (graphjit draws its own), so only
    that it compiles and gives finite gradients is checked."""
    graphjit.reset()
    q, w = torch.randn(2, 2, 5, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = graphjit.compile(attention_block)(q, w, 0.5)
        loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all() and torch.isfinite(w.grad).all()


def test_a_gradient_checkpointed_llama_trains_compiled_without_warnings():
    """transformers' gradient checkpointing around its decoder layers: CPU flash attention inside runs with
    its random state saved."""
    transformers = __import__("pytest").importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, vocab_size=128,
                                      max_position_embeddings=64, attention_dropout=0.0)
    model = transformers.LlamaForCausalLM(config).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(3, 128, (2, 7))
    expected = model(input_ids=ids, labels=ids).loss
    expected.backward()
    expected_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    graphjit.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = graphjit.compile(model)(input_ids=ids, labels=ids).loss
        loss.backward()
    assert not [w for w in caught if "graphjit" in str(w.message)], [str(w.message)[:300] for w in caught]
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip((p.grad for p in model.parameters()), expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
