"""Repeated layers share compiled Triton kernels: a fused loop printed with the same text and the same
compile-time parameters as an earlier one (parameters are named by role: in_ptr0, out_ptr0 ...) reuses the
first one's function, so Triton compiles it once. Results match eager; under max-autotune the copies
follow the first kernel's contest instead of holding their own. Triton interpreter (skipped without Triton)."""
import pytest
import torch

import graphjit
from graphjit.compiler import decompose, lowering, scheduler
from graphjit.compiler.codegen import triton as triton_codegen

pytestmark = pytest.mark.skipif(not triton_codegen.triton_available(), reason="Triton is not installed")


def blocks(x, ws):
    for w in ws:                                   # the same block three times, other weights
        h = torch.nn.functional.layer_norm(x, x.shape[-1:])
        x = x + torch.nn.functional.gelu(h @ w)
    return x.softmax(-1)


def scheduled(fn, *args):
    found = []

    def backend(gm, example_inputs):
        graph = lowering.lower(decompose.decompose(gm, example_inputs), example_inputs)
        found.append((graph, scheduler.schedule(graph), example_inputs))
        return gm.forward
    graphjit.compile(fn, backend=backend)(*args)
    return found[0]


def test_copies_of_a_layer_compile_once_and_match_eager(monkeypatch):
    monkeypatch.setattr(triton_codegen, "triton_cpu", 1)
    x, ws = torch.randn(4, 32), [torch.randn(32, 32) * 0.2 for _ in range(3)]
    graph, items, _ = scheduled(blocks, x, ws)
    source, launches = triton_codegen.generate(graph, items)
    launched = [launch.name for kl in launches.values() for launch in kl.launches]
    printed = source.count("@triton.jit") - triton_codegen.PRELUDE.count("@triton.jit")
    assert len(set(launched)) == printed < len(launched)          # some launches share a function
    assert "def " in source and "in_ptr0" in source
    compiled = graphjit.compile(blocks, backend="graphjit")
    for _ in range(2):
        x, ws = torch.randn(4, 32), [torch.randn(32, 32) * 0.2 for _ in range(3)]
        torch.testing.assert_close(compiled(x, ws), blocks(x, ws), rtol=1e-5, atol=1e-5)


def test_copies_follow_the_first_kernels_contest():
    x, ws = torch.randn(4, 32), [torch.randn(32, 32) * 0.2 for _ in range(3)]
    graph, items, examples = scheduled(blocks, x, ws)
    tuning, followers = [], []
    triton_codegen.generate(graph, items, tuning=tuning, device=torch.device("cpu"), candidates=True,
                            followers=followers, example_inputs=examples)
    contests = {key for key, *_ in tuning}
    assert followers and all(key in contests for key, *_ in followers)
    assert len(tuning) == len(contests)                          # one contest per distinct kernel
