"""Small models end to end: graphjit.compile(model, backend="graphjit") against eager."""
import pytest
import torch

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.examples.tiny_gpt import GPT, GPTConfig

from graphjit.testing import CompileCounter, assert_same


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                               torch.nn.LayerNorm(64), torch.nn.SiLU(), torch.nn.Linear(64, 10)).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_mlp(dtype):
    model = mlp().to(dtype)
    backend = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (32, 32, 7):            # the second call reuses the compiled graph
            x = torch.randn(batch, 64, dtype=dtype)
            assert_same(compiled(x), model(x), where=f"mlp batch {batch}", rtol=1e-4 if dtype == torch.float32 else 3e-2,
                        atol=1e-4 if dtype == torch.float32 else 3e-2)
    assert all(hasattr(fn, "items") for fn in backend.compiled_functions()), "a graph ran eagerly instead of compiling"


def tiny_gpt(n_layer=2):
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=128, block_size=32)).eval()


def test_tiny_gpt():
    model = tiny_gpt()
    backend = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=backend)
    idx = torch.randint(0, 128, (2, 24))
    with torch.inference_mode():
        assert_same(compiled(idx), model(idx), where="gpt logits", rtol=1e-4, atol=1e-4)
    (fn,) = backend.compiled
    assert not fn.graph.fallbacks, fn.graph.fallbacks


def test_tiny_gpt_bfloat16_is_as_accurate_as_eager():
    """bf16 logits reach ~60 (a bf16 ulp there is 0.25), so compare errors against an fp32 reference:
    graphjit keeps fused intermediates in fp32 and may only be more accurate than eager bf16."""
    reference = tiny_gpt()
    model = tiny_gpt().to(torch.bfloat16)
    compiled = graphjit.compile(model, backend="graphjit")
    idx = torch.randint(0, 128, (2, 24))
    with torch.inference_mode():
        exact = reference(idx)
        eager_error = (model(idx).float() - exact).abs()
        error = (compiled(idx).float() - exact).abs()
    assert error.mean() <= 1.1 * eager_error.mean() and error.max() <= 1.5 * eager_error.max(), \
        (error.mean(), eager_error.mean(), error.max(), eager_error.max())


def test_gpt_with_targets_computes_the_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=64, block_size=16)).eval()
    compiled = graphjit.compile(model, backend="graphjit")
    idx, targets = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        assert_same(compiled(idx, targets), model(idx, targets), where="logits, loss", rtol=1e-4, atol=1e-4)


def test_training_mode_with_grad_runs_eagerly_and_trains():
    model = mlp()
    compiled = graphjit.compile(model, backend="graphjit")
    x = torch.randn(8, 64)
    compiled(x).sum().backward()
    assert model[0].weight.grad is not None


def test_as_torch_compile_backend():
    model = mlp()
    compiled = torch.compile(model, backend=graphjit_backend)
    x = torch.randn(16, 64)
    with torch.no_grad():
        assert_same(compiled(x), model(x), where="torch.compile(backend=graphjit)", rtol=1e-4, atol=1e-4)
