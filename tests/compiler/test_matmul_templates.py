"""max-autotune's Triton matmul templates (compiler/codegen/matmul.py), run in Triton's interpreter: a
cached choice of a template configuration replaces the mm/addmm extern call, and the result matches eager
for odd sizes, transposed operands, broadcast and full biases, fp32/bf16/fp16. Which calls qualify, and
that a cached "cuBLAS won" keeps the ATen call."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler import autotune
from graphjit.compiler.codegen import matmul
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config
from graphjit.testing import TOLERANCES

pytestmark = pytest.mark.skipif(not triton_codegen.triton_available(), reason="Triton is not installed")

CONFIGS = [dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=2),
           dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=64, GROUP_M=2, num_warps=4, num_stages=3)]
# a template's float32 tiles add in another order than ATen's matmul: a few ulp more than TOLERANCES
TOL = {**TOLERANCES, torch.float32: dict(rtol=1e-4, atol=1e-4)}


def products(x, w, b, y, b2):
    return F.linear(x, w, b).relu(), x @ y, torch.addmm(b2, x, y), x @ w.t()[:, :7]


@pytest.fixture
def cached(monkeypatch, triton_interpreter):
    def use(choice):
        monkeypatch.setattr(autotune, "load_choice", lambda key: choice)
    return use


# one_python (3.12), like the op matrices (harness.triton_devices): configurations x dtypes x sizes of our
# template in the interpreter, the same kernels on every Python.
@pytest.mark.one_python
@pytest.mark.parametrize("cfg", CONFIGS, ids=["16x32x16", "32x16x64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("M", [1, 37])
def test_templates_match_eager(cfg, dtype, M, cached):
    cached(cfg)
    compiled = graphjit.compile(products, mode="max-autotune-no-cudagraphs")
    gen = torch.Generator().manual_seed(M)
    for _ in range(2):
        x = torch.randn(M, 33, generator=gen).to(dtype)
        w, b = torch.randn(50, 33, generator=gen).to(dtype), torch.randn(50, generator=gen).to(dtype)
        y, b2 = torch.randn(33, 21, generator=gen).to(dtype), torch.randn(M, 21, generator=gen).to(dtype)
        for got, want in zip(compiled(x, w, b, y, b2), products(x, w, b, y, b2)):
            torch.testing.assert_close(got, want, **TOL[dtype])
    (call,) = _wrappers(compiled)
    assert call.wrapper_source.count("as a Triton template") == 4


def test_a_cached_cublas_choice_keeps_the_aten_call(cached):
    cached({"extern": 1})
    compiled = graphjit.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
    x, y = torch.randn(5, 6), torch.randn(6, 7)
    torch.testing.assert_close(compiled(x, y), x @ y)
    (call,) = _wrappers(compiled)
    assert "Triton template" not in call.wrapper_source


def test_damaged_choices_are_ignored():
    assert matmul.valid(CONFIGS[0])
    assert not matmul.valid({**CONFIGS[0], "BLOCK_M": 24})
    assert not matmul.valid({**CONFIGS[0], "BLOCK_K": 8})
    assert not matmul.valid({"BLOCK_M": 16})
    assert not matmul.valid({"extern": 1})


def test_which_calls_qualify():
    plans = []

    def backend(gm, example_inputs):
        from graphjit.compiler import decompose, lowering, scheduler
        graph = lowering.lower(decompose.decompose(gm, example_inputs), example_inputs)
        plans.extend(matmul.plan_for(item) for item in scheduler.schedule(graph))
        return gm.forward
    x, y, b = torch.randn(4, 6), torch.randn(6, 5), torch.randn(5)
    graphjit.compile(lambda x, y, b: (x @ y, torch.addmm(b, x, y, beta=0.5), (x @ y).sum(),
                                      x.double() @ y.double()), backend=backend)(x, y, b)
    kinds = sorted(p.kind for p in plans if p is not None)
    assert kinds == ["mm", "mm"]          # beta != 1 and float64 stay with ATen; sum is a kernel
    plan = next(p for p in plans if p is not None)
    assert (plan.M, plan.N, plan.K) == (4, 5, 6)
    assert all(matmul.valid(c) for c in matmul.candidates(plan))


def _wrappers(compiled):
    """The compiled graph callables behind a compiled function (through its cache entries)."""
    from graphjit.capture.frame import _CACHES
    found = []
    for cache in _CACHES.values():
        for entry in cache.entries:
            graph = getattr(entry, "__globals__", {}).get("__gj_graph")
            if graph is not None and hasattr(graph, "wrapper_source"):
                found.append(graph)
    return found


def test_repeated_layers_share_one_template_kernel(cached, monkeypatch):
    """Three products of the same shapes and strides (a stack of equal layers) print and compile one
    template kernel, each launch on its own operands; a copy whose input starts misaligned gets its own."""
    cached(CONFIGS[0])
    monkeypatch.setattr(gj_config, "triton_mm_epilogues", 0)

    def layers(x, w1, w2, w3):
        return F.linear(F.linear(F.linear(x, w1).relu(), w2).relu(), w3)
    compiled = graphjit.compile(layers, mode="max-autotune-no-cudagraphs")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, 24, generator=gen)
    ws = [torch.randn(24, 24, generator=gen) for _ in range(3)]
    torch.testing.assert_close(compiled(x, *ws), layers(x, *ws), **TOL[torch.float32])
    (call,) = _wrappers(compiled)
    assert call.wrapper_source.count("as a Triton template") == 3
    assert call.source.count("def triton_mm_") == 1

    def two(x, y, w):
        return x @ w.t(), y @ w.t()
    compiled = graphjit.compile(two, mode="max-autotune-no-cudagraphs")
    storage = torch.randn(9 * 24 + 1, generator=gen)
    y = storage[1:].view(9, 24)                      # same shape and strides, 4 bytes past 16-byte alignment
    for got, want in zip(compiled(x, y, ws[0]), two(x, y, ws[0])):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    calls = _wrappers(compiled)
    assert calls[-1].source.count("def triton_mm_") == 2


# ---- epilogues: the pointwise kernel after a template's product runs on its accumulator tile ----

def _gelu_mlp(x, w1, b1, w2, b2, r):
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2) + r


def _epilogue_inputs(dtype, M=37, gen=None):
    gen = gen or torch.Generator().manual_seed(M)
    x = torch.randn(M, 24, generator=gen).to(dtype)
    w1, b1 = torch.randn(40, 24, generator=gen).to(dtype), torch.randn(40, generator=gen).to(dtype)
    w2, b2 = torch.randn(24, 40, generator=gen).to(dtype), torch.randn(24, generator=gen).to(dtype)
    return x, w1, b1, w2, b2, torch.randn(M, 24, generator=gen).to(dtype)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["16x32x16", "32x16x64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_gelu_and_residual_run_as_epilogues(cfg, dtype, cached):
    """GPT-2's MLP: the GELU after the first product and the bias-and-residual add after the second run
    inside the templates; the products are never stored, and results match eager (16-bit products are
    rounded before the epilogue, as the store and reload would)."""
    cached(cfg)
    compiled = graphjit.compile(_gelu_mlp, mode="max-autotune-no-cudagraphs")
    for M in (37, 37, 1):
        inputs = _epilogue_inputs(dtype, M)
        torch.testing.assert_close(compiled(*inputs), _gelu_mlp(*inputs), **TOL[dtype])
    call = _wrappers(compiled)[0]
    assert call.wrapper_source.count("as its epilogue") == 2
    assert call.source.count("acc_in = ") == 2 and "tl.store(c_ptr" not in call.source
    assert "triton_fused" not in call.wrapper_source           # no kernel of its own left


def test_a_product_read_twice_or_by_a_reduction_keeps_its_store(cached):
    """Epilogues only for a kernel that alone reads the product, elementwise, in the product's order."""
    cached(CONFIGS[0])

    def read_twice(x, w):
        y = x @ w.t()
        return y.relu(), y

    def reduced(x, w):
        return F.layer_norm(x @ w.t(), (40,))

    def transposed(x, w):       # written in the other order: not elementwise along the tile
        return (x @ w.t()).t().contiguous() * 2
    for fn in (read_twice, reduced, transposed):
        compiled = graphjit.compile(fn, mode="max-autotune-no-cudagraphs")
        x, w = torch.randn(37, 24), torch.randn(40, 24)
        got, want = compiled(x, w), fn(x, w)
        for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, e, **TOL[torch.float32])
        call = _wrappers(compiled)[-1]
        assert "as its epilogue" not in call.wrapper_source, fn.__name__
        assert call.wrapper_source.count("as a Triton template") == 1, fn.__name__


def test_layers_with_epilogues_share_their_kernel(cached):
    """Three Linear+ReLU layers: one template kernel with the ReLU epilogue, launched three times."""
    cached(CONFIGS[1])

    def layers(x, w1, w2, w3):
        return F.linear(F.linear(F.linear(x, w1).relu(), w2).relu(), w3).relu()
    compiled = graphjit.compile(layers, mode="max-autotune-no-cudagraphs")
    gen = torch.Generator().manual_seed(3)
    x, ws = torch.randn(9, 24, generator=gen), [torch.randn(24, 24, generator=gen) for _ in range(3)]
    torch.testing.assert_close(compiled(x, *ws), layers(x, *ws), **TOL[torch.float32])
    (call,) = _wrappers(compiled)
    assert call.wrapper_source.count("as its epilogue") == 3
    assert call.source.count("def triton_mm_") == 1
