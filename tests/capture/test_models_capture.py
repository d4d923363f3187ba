"""Acceptance tests of the capture core on whole models: a hand-written GPT-2 and transformers'
GPT2LMHeadModel / BertModel (small random configs) capture as one graph with no breaks, match eager,
compile with fullgraph=True, and identical blocks compiled separately share one translation."""
import pytest
import torch

import graphjit as gj
from graphjit.examples.tiny_gpt import GPT, GPTConfig, Block
from graphjit.testing import CompileCounter

from graphjit.testing import assert_same, check_module

transformers = pytest.importorskip("transformers")


def tiny_gpt():
    return GPT(GPTConfig(vocab_size=97, block_size=32, n_layer=4, n_head=4, n_embd=32)).eval()


def hf_gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=97, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def hf_bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                  intermediate_size=64, vocab_size=97, max_position_embeddings=32)
    return transformers.BertModel(cfg).eval()


def tokens(batch=2, seq=12):
    return torch.randint(0, 97, (batch, seq))


def bert_kwargs():
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    return {"attention_mask": mask, "token_type_ids": torch.zeros(2, 12, dtype=torch.long)}


MODELS = {
    "tiny_gpt": (tiny_gpt, None),
    "tiny_gpt_with_loss": (tiny_gpt, lambda: {"targets": tokens()}),
    "hf_gpt2": (hf_gpt2, None),
    "hf_gpt2_no_cache_tuple": (hf_gpt2, lambda: {"use_cache": False, "return_dict": False}),
    "hf_bert": (hf_bert, bert_kwargs),
}


@pytest.mark.parametrize("name", MODELS)
def test_model_one_graph_no_breaks(name):
    factory, kwargs = MODELS[name]
    torch.manual_seed(0)
    model = factory()
    kw = kwargs() if kwargs else {}
    explained = gj.explain(model)(tokens(), **kw)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("name", MODELS)
def test_model_matches_eager_fullgraph(name):
    factory, kwargs = MODELS[name]
    check_module(factory, lambda: (tokens(),), kwargs_factory=kwargs, graphs=1, compile_kwargs={"fullgraph": True},
                 atol=1e-5, rtol=1e-5)


def test_model_under_no_grad_and_grad_recompiles_once():
    check_module(tiny_gpt, lambda: (tokens(),), graphs=1, context=torch.no_grad, atol=1e-5, rtol=1e-5)


def test_identical_blocks_compiled_separately_translate_once():
    torch.manual_seed(0)
    model = tiny_gpt()
    counter = CompileCounter()
    compiled_blocks = [gj.compile(block, backend=counter) for block in model.h]
    x = torch.randn(2, 12, 32)
    for block, compiled in zip(model.h, compiled_blocks):
        with torch.no_grad():
            assert_same(compiled(x), block(x), atol=1e-6, rtol=1e-6)
    assert counter.frame_count == 1, "4 identical blocks must share one cache entry"
    # and a fifth, new block of the same class reuses it too (parameters are graph inputs)
    extra = gj.compile(Block(model.config).eval(), backend=counter)
    with torch.no_grad():
        extra(x)
    assert counter.frame_count == 1


def test_compiled_module_keeps_hooks_and_state():
    torch.manual_seed(0)
    model = tiny_gpt()
    seen = []
    model.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    compiled = gj.compile(model, backend=CompileCounter())
    out = compiled(tokens())
    assert seen == [out.shape]
    assert compiled.state_dict().keys() == model.state_dict().keys()
    assert isinstance(compiled, GPT) and compiled.config is model.config
