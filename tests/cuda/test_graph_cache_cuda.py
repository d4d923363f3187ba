"""The compiled-graph cache on a GPU (skipped elsewhere): a Triton graph loaded after graphjit.reset() and in
a fresh process has its kernels compiled for what the entry kept (each a hit of Triton's cache of binaries)
and launched as the stored wrapper launches them, with eager's results; an input that starts misaligned
keeps the kernel compiled for it."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import graphjit
from graphjit.compiler.runtime import graph_cache
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


WARM_SCRIPT = """
import torch, graphjit
from graphjit.backends.registry import lookup_backend
made = []
def recording(gm, inputs):
    made.append(lookup_backend("graphjit")(gm, inputs))
    return made[-1]
def f(x, w):
    return torch.nn.functional.layer_norm(x @ w, (64,)).relu().softmax(-1), (x.sin() * 3).sum(-1)
torch.manual_seed(0)
x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
out = graphjit.compile(f, backend=recording)(x, w)
torch.testing.assert_close(out, f(x, w), rtol=1e-4, atol=1e-4)
print("cached", getattr(made[0], "cached", False))
"""


def _cubins(folder):
    return sorted(p.name for p in folder.rglob("*.cubin"))


def test_a_warm_process_loads_the_kept_binaries_without_triton(tmp_path):
    """A fresh process given the entry, with an empty Triton cache: the kernels load from the binaries the
    entry keeps, so Triton compiles none of the graph's kernels (the only cubin it makes is its start-up
    thread's first kernel)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    script = tmp_path / "warm.py"
    script.write_text(WARM_SCRIPT)
    env = dict(os.environ, GRAPHJIT_CACHE_DIR=str(tmp_path / "kernels"), GRAPHJIT_GRAPH_CACHE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    for folder in ("triton_cold", "triton_warm"):
        env["TRITON_CACHE_DIR"] = str(tmp_path / folder)
        runs.append(subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                                   timeout=300))
        assert runs[-1].returncode == 0, runs[-1].stderr[-3000:]
    assert "cached False" in runs[0].stdout and "cached True" in runs[1].stdout, [r.stdout for r in runs]
    cold = [name for name in _cubins(tmp_path / "triton_cold") if name != "first_kernel.cubin"]
    assert cold, "the cold process compiled no kernel"
    assert [name for name in _cubins(tmp_path / "triton_warm") if name != "first_kernel.cubin"] == []
    (entry,) = entries(tmp_path / "kernels" / "graphs")
    launches = json.loads(entry.read_text())["body"]["triton"]["launches"]
    assert launches and all(launch["binary"] for launch in launches)


@pytest.mark.parametrize("fault", ["another_gpu", "another_triton", "no_binary", "reordered_signature",
                                   "swapped", "corrupted"])
def test_binaries_that_do_not_fit_compile_through_triton(cache, monkeypatch, fault):
    """An entry whose kept binaries were made for another GPU or Triton, keep none, are another kernel's,
    list the arguments in another order or are damaged still loads: its kernels compile through Triton for
    this GPU (compile_all runs), with eager's results."""
    from graphjit.compiler.runtime import triton_build

    def f(x, y):
        return (x.exp() * 2).softmax(-1), (y.sin() + x.sum()).relu()
    x, y = torch.randn(32, 128, device="cuda"), torch.randn(100, device="cuda")
    graphjit.reset()
    compiled, made = compiled_with_record(f)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    (entry,) = entries(cache)
    stored = json.loads(entry.read_text())
    launches = stored["body"]["triton"]["launches"]
    assert len(launches) >= 2 and all(launch["binary"] for launch in launches)
    for launch in launches:
        binary = launch["binary"]
        if fault == "another_gpu":
            metadata = json.loads(binary["metadata"])
            metadata["target"]["arch"] = 1
            binary["metadata"] = json.dumps(metadata)
        elif fault == "another_triton":
            binary["triton"] = "0.0.1"
        elif fault == "no_binary":
            launch["binary"] = None
        elif fault == "reordered_signature":
            binary["signature"] = binary["signature"][::-1]
        elif fault == "corrupted":
            binary["binary"] = binary["binary"][:-8] + "!!!!!!!!"
    if fault == "swapped":
        launches[0]["binary"], launches[1]["binary"] = launches[1]["binary"], launches[0]["binary"]
    stored["digest"] = graph_cache._body_digest(stored["body"])
    entry.write_text(json.dumps(stored))
    compiles = []
    real = triton_build.compile_all
    monkeypatch.setattr(triton_build, "compile_all", lambda *a, **k: compiles.append(1) or real(*a, **k))
    graphjit.reset()
    compiled, made = compiled_with_record(f)
    for seed in range(2):
        torch.manual_seed(seed)
        x, y = torch.randn(32, 128, device="cuda"), torch.randn(100, device="cuda")
        torch.testing.assert_close(compiled(x, y), f(x, y))
    assert made and made[0].cached
    assert compiles == [1], "the entry's binaries loaded where they do not fit"


def test_fitting_binaries_load_without_compile_all(cache, monkeypatch):
    """The same entry unaltered: its kernels load from the kept binaries, compile_all never runs."""
    from graphjit.compiler.runtime import triton_build

    def f(x):
        return (x.exp() * 2).softmax(-1)
    x = torch.randn(32, 128, device="cuda")
    graphjit.reset()
    compiled, _ = compiled_with_record(f)
    torch.testing.assert_close(compiled(x), f(x))
    monkeypatch.setattr(triton_build, "compile_all", lambda *a, **k: pytest.fail("compile_all ran"))
    graphjit.reset()
    compiled, made = compiled_with_record(f)
    torch.testing.assert_close(compiled(x), f(x))
    assert made and made[0].cached
