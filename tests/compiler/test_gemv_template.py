"""The one-row matmul template (matmul.gemv_config / _gemv_loop), which every mode uses for 16-bit
mm/addmm of one row (decode at batch 1), run in Triton's interpreter: results match eager for odd sizes,
both weight layouts (x @ w.t() and x @ w), biases, and a GELU folded in as its epilogue; fp32 and
several-row products keep the ATen call; layers share one kernel; max-autotune can cache a one-row choice."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler import autotune
from graphjit.compiler.codegen import matmul
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config
from graphjit.testing import TOLERANCES, assert_same

pytestmark = pytest.mark.skipif(not triton_codegen.triton_available(), reason="Triton is not installed")


@pytest.fixture(autouse=True)
def interpreter(triton_interpreter):
    graphjit.reset()


def _wrappers():
    from graphjit.capture.frame import _CACHES
    return [entry.__globals__["__gj_graph"] for cache in _CACHES.values() for entry in cache.entries
            if hasattr(entry.__globals__.get("__gj_graph"), "wrapper_source")]


def decode_step(x, w_t, b, w, b2, w3):
    h = F.linear(x, w_t, b)                                  # weight contiguous along K (x @ w.t())
    g = F.gelu(torch.addmm(b2, h, w), approximate="tanh")    # contiguous along N (GPT-2's Conv1D), + GELU
    return g @ w3, h                                          # no bias; odd N


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_one_row_products_match_eager(dtype):
    compiled = graphjit.compile(decode_step)
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        args = [torch.randn(*shape, generator=gen).to(dtype) / 4 for shape in
                ((1, 50), (40, 50), (40,), (40, 300), (300,), (300, 37))]
        for got, want in zip(compiled(*args), decode_step(*args)):
            torch.testing.assert_close(got, want, **TOLERANCES[dtype])
    (call,) = _wrappers()
    assert call.wrapper_source.count("as a Triton template") == 3, call.wrapper_source
    assert "as its epilogue" in call.wrapper_source        # the GELU after the addmm
    assert "one-row template" in call.source


@pytest.mark.parametrize("dtype,rows", [(torch.float32, 1), (torch.bfloat16, 2)], ids=["fp32", "two-rows"])
def test_other_products_keep_the_aten_call(dtype, rows):
    compiled = graphjit.compile(lambda x, w: x @ w)
    x, w = torch.randn(rows, 24).to(dtype), torch.randn(24, 16).to(dtype)
    assert_same(compiled(x, w), x @ w)                      # the same ATen call: the same bits
    (call,) = _wrappers()
    assert "Triton template" not in call.wrapper_source


def test_switched_off_keeps_the_aten_call(monkeypatch):
    monkeypatch.setattr(gj_config, "triton_gemv", 0)
    compiled = graphjit.compile(lambda x, w: x @ w)
    x, w = torch.randn(1, 24).bfloat16(), torch.randn(24, 16).bfloat16()
    torch.testing.assert_close(compiled(x, w), x @ w, **TOLERANCES[torch.bfloat16])
    (call,) = _wrappers()
    assert "Triton template" not in call.wrapper_source


def test_layers_share_one_kernel():
    def layers(x, ws):
        for w in ws:
            x = torch.relu(x @ w)
        return x
    compiled = graphjit.compile(layers)
    x = torch.randn(1, 32).bfloat16()
    ws = [torch.randn(32, 32).bfloat16() / 6 for _ in range(3)]
    torch.testing.assert_close(compiled(x, ws), layers(x, ws), **TOLERANCES[torch.bfloat16])
    (call,) = _wrappers()
    assert call.wrapper_source.count("as a Triton template") == 3
    assert call.source.count("one-row template") == 1


def test_heuristic_configs_follow_the_measured_shapes():
    def plan(K, N, k_contiguous):
        from types import SimpleNamespace
        b = SimpleNamespace(strides=(1, K) if k_contiguous else (N, 1))
        return SimpleNamespace(K=K, N=N, b=b)
    assert matmul.gemv_config(plan(768, 2304, False)) == dict(GEMV=1, BLOCK_N=16, BLOCK_K=256, num_warps=8)
    assert matmul.gemv_config(plan(768, 768, False))["BLOCK_N"] == 8
    assert matmul.gemv_config(plan(3072, 768, False))["BLOCK_K"] == 128
    assert matmul.gemv_config(plan(768, 50257, True)) == dict(GEMV=1, BLOCK_N=16, BLOCK_K=256, num_warps=8)
    assert matmul.gemv_config(plan(4096, 4096, True)) == dict(GEMV=1, BLOCK_N=8, BLOCK_K=512, num_warps=8)
    assert matmul.gemv_config(plan(10, 4, False)) == dict(GEMV=1, BLOCK_N=8, BLOCK_K=16, num_warps=8)


def test_cached_choices_are_validated():
    assert matmul.valid(dict(GEMV=1, BLOCK_N=16, BLOCK_K=256, num_warps=8))
    assert not matmul.valid(dict(GEMV=1, BLOCK_N=12, BLOCK_K=256, num_warps=8))
    assert not matmul.valid(dict(GEMV=1, BLOCK_N=16, BLOCK_K=256))
    assert not matmul.valid(dict(GEMV=1, BLOCK_N=4, BLOCK_K=256, num_warps=8))


def test_max_autotune_runs_a_cached_one_row_choice(monkeypatch):
    monkeypatch.setattr(autotune, "load_choice", lambda key: dict(GEMV=1, BLOCK_N=8, BLOCK_K=32, num_warps=4))
    fn = lambda x, w, b: torch.addmm(b, x, w)       # noqa: E731
    compiled = graphjit.compile(fn, mode="max-autotune-no-cudagraphs")
    x, w, b = torch.randn(1, 70).bfloat16(), torch.randn(70, 45).bfloat16(), torch.randn(45).bfloat16()
    torch.testing.assert_close(compiled(x, w, b), fn(x, w, b), **TOLERANCES[torch.bfloat16])
    (call,) = _wrappers()
    assert "one-row template" in call.source


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_one_row_products_on_cuda(dtype, monkeypatch):
    """The same products compiled for the GPU (real Triton, not the interpreter), GPT-2-sized too: the
    logits product over a 50257-row weight (rows padded for cuBLAS elsewhere) and the MLP's 3072-wide
    GELU epilogue."""
    monkeypatch.setattr(gj_config, "triton_cpu", 0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shapes in [((1, 50), (40, 50), (40,), (40, 300), (300,), (300, 37)),
                   ((1, 768), (768, 768), (768,), (768, 3072), (3072,), (3072, 50257))]:
        graphjit.reset()
        compiled = graphjit.compile(decode_step)
        for _ in range(2):
            args = [torch.randn(*shape, generator=gen, device="cuda").to(dtype) / 8 for shape in shapes]
            for got, want in zip(compiled(*args), decode_step(*args)):
                torch.testing.assert_close(got, want, **TOLERANCES[dtype])
        (call,) = _wrappers()
        assert call.wrapper_source.count("as a Triton template") == 3, call.wrapper_source


@pytest.mark.parametrize("cfg", [dict(GEMV=1, BLOCK_N=16, BLOCK_K=256, num_warps=8),
                                 dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4)],
                         ids=["one-row", "tiled"])
def test_max_autotune_stores_the_winners_own_configuration(cfg, monkeypatch):
    """A winning candidate's choice is cached as the configuration it was made from (a one-row winner has
    no BLOCK_M: reading one failed the whole graph on the H200), and loads back as the same launch."""
    from types import SimpleNamespace
    plan = SimpleNamespace(item=SimpleNamespace(op=lambda *args: None, name="mm0"), a=None, b=None, bias=None,
                           M=1, N=64, K=256, key_text=lambda: "mm M1 N64 K256")
    winner = matmul.launch("triton_mm_0", plan, cfg)
    stored = {}
    monkeypatch.setattr(autotune, "time_call", lambda fn, device: 1.0)
    monkeypatch.setattr(autotune, "_timings", lambda candidates, compiled, arguments, device: [0.5])
    monkeypatch.setattr(autotune, "store_choice", lambda key, choice, timings: stored.update({key: choice}))
    chosen = autotune.tune_matmuls([("key", plan, [winner])], {}, lambda launch: [None, None], "cuda")
    assert chosen == {"mm0": winner} and stored == {"key": cfg} and matmul.valid(stored["key"])
    again = matmul.launch("triton_mm_0", plan, stored["key"])
    assert (again.grid, again.constexprs, again.num_warps) == (winner.grid, winner.constexprs, winner.num_warps)


def test_a_cached_one_row_choice_is_refused_for_more_rows():
    """A damaged cache can't make a several-row product run the one-row kernel (only row 0 would be
    computed)."""
    from types import SimpleNamespace
    cfg = dict(GEMV=1, BLOCK_N=8, BLOCK_K=32, num_warps=4)
    assert matmul.valid(cfg, SimpleNamespace(M=1)) and not matmul.valid(cfg, SimpleNamespace(M=4))


def test_switched_off_also_in_max_autotune(monkeypatch):
    """GRAPHJIT_TRITON_GEMV=0: max-autotune neither races one-row candidates nor uses a cached one-row
    choice; with its matmul templates off too, cuBLAS always."""
    monkeypatch.setattr(gj_config, "triton_gemv", 0)
    monkeypatch.setattr(autotune, "load_choice", lambda key: dict(GEMV=1, BLOCK_N=8, BLOCK_K=32, num_warps=4))
    fn = lambda x, w: x @ w       # noqa: E731
    compiled = graphjit.compile(fn, mode="max-autotune-no-cudagraphs")
    x, w = torch.randn(1, 40).bfloat16(), torch.randn(40, 24).bfloat16()
    torch.testing.assert_close(compiled(x, w), fn(x, w), **TOLERANCES[torch.bfloat16])
    (call,) = _wrappers()
    assert "one-row template" not in call.source
    assert all(not c.get("GEMV") for c in matmul.candidates(
        __import__("types").SimpleNamespace(M=1, N=24, K=40, a=x, b=w)))


def test_mm_templates_off_means_cublas_in_max_autotune(monkeypatch):
    monkeypatch.setattr(gj_config, "triton_mm_templates", 0)
    compiled = graphjit.compile(lambda x, w: x @ w, mode="max-autotune-no-cudagraphs")
    x, w = torch.randn(1, 40).bfloat16(), torch.randn(40, 24).bfloat16()
    torch.testing.assert_close(compiled(x, w), x @ w, **TOLERANCES[torch.bfloat16])
    (call,) = _wrappers()
    assert "Triton template" not in call.wrapper_source
