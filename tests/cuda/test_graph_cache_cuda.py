"""The compiled-graph cache on a GPU (skipped elsewhere): a Triton graph loaded after graphjit.reset() and in
a fresh process has its kernels compiled for what the entry kept (each a hit of Triton's cache of binaries)
and launched as the stored wrapper launches them, with eager's results; an input that starts misaligned
keeps the kernel compiled for it."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import graphjit
from tests.compiler.test_graph_cache import compiled_with_record, entries

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setattr(graphjit.config, "cache_dir", str(tmp_path / "kernels"))
    monkeypatch.setattr(graphjit.config, "graph_cache", 1)
    return tmp_path / "kernels" / "graphs"


def block(x, w, b):
    h = torch.nn.functional.layer_norm(x, x.shape[-1:]) @ w + b
    return torch.nn.functional.gelu(h).softmax(-1), h.square().mean()


def misaligned(x):
    return (x[1:] * 2).exp()


def padded_logits(x, w):
    """A large bf16 product whose output width is not a multiple of 8: its rows are padded for cuBLAS, an
    ATen op the wrapper binds itself (GPT-2's logits)."""
    return (x @ w.t()).float().softmax(-1)


@pytest.mark.parametrize("fn, make", [
    # logits of unit scale: at N(0, 1024) a bf16 rounding step of a logit (0.25) moves softmax by 28%
    (padded_logits, lambda: (torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16),
                             torch.randn(1001, 1024, device="cuda", dtype=torch.bfloat16) / 32)),
    (block, lambda: (torch.randn(16, 64, device="cuda"), torch.randn(64, 32, device="cuda"),
                     torch.randn(32, device="cuda"))),
    (misaligned, lambda: (torch.randn(4097, device="cuda"),)),
])
def test_a_triton_graph_loads_from_the_cache(cache, fn, make):
    for attempt in range(2):
        graphjit.reset()
        compiled, made = compiled_with_record(fn)
        for call in range(3):
            torch.manual_seed(call)
            args = make()
            tol = 2e-2 if fn is padded_logits else 1e-4
            torch.testing.assert_close(compiled(*args), fn(*args), rtol=tol, atol=tol)
        assert made and all(getattr(m, "cached", False) == bool(attempt) for m in made), (attempt, made)
        assert made[0].kernel_count > 0
    assert len(entries(cache)) == 1


def test_a_fresh_process_loads_the_triton_graph(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    script = tmp_path / "warm.py"
    script.write_text(textwrap.dedent("""
        import torch, graphjit
        from graphjit.backends.registry import lookup_backend
        made = []
        def recording(gm, inputs):
            made.append(lookup_backend("graphjit")(gm, inputs))
            return made[-1]
        def f(x):
            return (x.sin() * 3).sum(-1)
        x = torch.arange(4096., device="cuda").view(64, 64)
        out = graphjit.compile(f, backend=recording)(x)
        torch.testing.assert_close(out, f(x))
        print("cached", getattr(made[0], "cached", False))
    """))
    env = dict(os.environ, GRAPHJIT_CACHE_DIR=str(tmp_path / "kernels"), GRAPHJIT_GRAPH_CACHE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert "cached False" in runs[0].stdout and "cached True" in runs[1].stdout, [r.stdout for r in runs]
