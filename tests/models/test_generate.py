"""model.generate() with the model's forward compiled gives eager's tokens (greedy, 8 new tokens, a
left-padded batch of 2), two ways:

    compiled = graphjit.compile(model); compiled.generate(...)   # the wrapper's forward is compiled and
                                                                # generate() is the model's own
    model.forward = graphjit.compile(model.forward)              # as torch.compile's docs do it

Each forward is compiled with fullgraph=True, so every step is one whole graph. The mask and the cache grow
by one position per token: with automatic dynamic shapes the decode steps share one graph whose lengths
are symbolic, so 8 or 16 tokens take 3 graphs (prefill, first decode step, the dynamic decode graph), as
torch.compile's (test_generate_graph_count). torch.compile(model).generate(...) doesn't compile at all (its wrapper
forwards .generate to the original module, whose __call__ runs the original forward); graphjit's does.
"""
import functools
import warnings

import pytest
import torch

import graphjit as gj
from graphjit.testing import CompileCounter

from .gaps import GENERATE_GAPS, params, skip_if_missing
from .zoo import ZOO, build, causal_lm_plain_inputs

GREEDY = {"do_sample": False, "max_new_tokens": 8, "pad_token_id": 0}
LMS = ["gpt2", "llama"]


def compiled_module(model, counter):
    return gj.compile(model, backend=counter, fullgraph=True)


def compiled_forward(model, counter):
    model.forward = gj.compile(model.forward, backend=counter, fullgraph=True)
    return model


WAYS = {"compiled-module": compiled_module, "compiled-forward": compiled_forward}


@functools.lru_cache(maxsize=None)   # test_generate_graph_count reuses a run of the first test
def generate_both(name, way, max_new_tokens=8):
    """(eager tokens, compiled tokens, counter, graphjit warnings) of one greedy generate()."""
    skip_if_missing(name)
    gj.reset()
    model, _ = build(ZOO[name])
    torch.manual_seed(1)
    inputs = causal_lm_plain_inputs()()
    options = {**GREEDY, "max_new_tokens": max_new_tokens}
    expected = model.generate(**inputs, **options)
    counter = CompileCounter()
    target = WAYS[way](model, counter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        actual = target.generate(**inputs, **options)
    ours = [str(w.message) for w in caught if str(w.message).startswith("graphjit")]
    return expected, actual, counter, ours


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", params(LMS, GENERATE_GAPS))
def test_generate_greedy_matches_eager(name, way):
    expected, actual, counter, ours = generate_both(name, way)
    assert torch.equal(actual, expected), f"compiled generate() gave\n{actual}\neager\n{expected}"
    assert counter.frame_count >= 1, "the forward was never compiled"
    assert not ours, f"graphjit warned (a step ran eagerly): {ours}"


def test_generate_16_tokens_stays_compiled_and_matches_eager():
    """16 new tokens, twice config.recompile_limit: no step runs eagerly, tokens unchanged."""
    expected, actual, counter, ours = generate_both("gpt2", "compiled-module", max_new_tokens=16)
    assert torch.equal(actual, expected)
    assert counter.frame_count <= 3, f"{counter.frame_count} graphs for 16 new tokens"
    assert not ours, f"graphjit warned: {ours}"


def test_generate_graph_count():
    """8 new tokens in at most 3 graphs, as torch.compile does (prefill, first decode step, one dynamic
    decode graph)."""
    _, _, counter, _ = generate_both("gpt2", "compiled-module")
    assert counter.frame_count <= 3, f"{counter.frame_count} graphs for 8 new tokens"


@pytest.mark.parametrize("name", params(LMS, GENERATE_GAPS))
def test_generate_with_a_static_cache_over_new_prompt_lengths(name):
    """cache_implementation="static": each prompt length makes a cache of another length, which the
    decode step writes into (the cache's index_copy_ or index_put_ on an input). Over four lengths the
    graphs compile for all lengths, not once per length (graphjit's compiler, counted per size), and every
    generate() gives eager's tokens."""
    from graphjit.backends.dynamic import PerSize
    from graphjit.backends.registry import graphjit_backend
    skip_if_missing(name)
    gj.reset()
    model, _ = build(ZOO[name])
    options = {**GREEDY, "max_new_tokens": 4, "cache_implementation": "static", "disable_compile": True}
    counter = CompileCounter(graphjit_backend)
    compiled = gj.compile(model, backend=counter)
    g = torch.Generator().manual_seed(2)
    for length in (6, 9, 12, 7):
        ids = torch.randint(1, model.config.vocab_size, (1, length), generator=g)
        mask = torch.ones_like(ids)
        expected = model.generate(input_ids=ids, attention_mask=mask, **options)
        actual = compiled.generate(input_ids=ids, attention_mask=mask, **options)
        assert torch.equal(actual, expected), f"prompt length {length}"
    per_size = [f for f in counter.compiled if isinstance(f, PerSize)]
    assert not per_size, f"{len(per_size)} graphs compiled once per cache length"
    assert counter.frame_count <= 6, counter.frame_count
