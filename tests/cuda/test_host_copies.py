"""A compiled CUDA call copies nothing between host and device: constants built inside the model
(transformers' empty KV-cache start, `torch.tensor([], device=...)`) are folded at compile time
(decompose.fold_constants), not copied to the GPU on every call, which would block the CPU and keep the
graph from being recorded as a CUDA graph. Skipped without a GPU."""
import pytest
import torch

import graphjit

pytestmark = pytest.mark.gpu


def gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64)
    return transformers.GPT2LMHeadModel(config).cuda().eval()


def host_copies(fn, *args):
    """The copies between host and device in one call of fn (after warm-up), by the GPU's name for them
    ("Memcpy HtoD (Pageable -> Device)" ...). Device-to-device copies (reduce-overhead copies the
    non-static inputs into the CUDA graph's buffers) are not counted."""
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return {e.key: e.count for e in prof.key_averages() if "HtoD" in e.key or "DtoH" in e.key}


def test_the_count_sees_a_copy_to_the_device():
    x = torch.randn(4, device="cuda")
    assert host_copies(lambda: x + torch.ones(4).cuda()), "a CPU tensor moved to the GPU is a host copy"


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_gpt2_prefill_copies_nothing_to_the_device(mode):
    model = gpt2()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    compiled = graphjit.compile(model, backend="graphjit", mode=mode)
    with torch.inference_mode():
        expected = model(ids).logits
        for _ in range(3):
            torch.testing.assert_close(compiled(ids).logits, expected, rtol=2e-3, atol=2e-3)
        copies = host_copies(lambda x: compiled(x).logits, ids)
    assert not copies, f"host/device copies per call: {copies}"
