"""Repeated layers share compiled Triton kernels: a fused loop printed with the same text and the same
compile-time parameters as an earlier one (parameters are named by role: in_ptr0, out_ptr0 ...) reuses the
first one's function, so Triton compiles it once. Results match eager; under max-autotune the copies
follow the first kernel's contest instead of holding their own. Triton interpreter (skipped without Triton)."""
import pytest
import torch

import graphjit
from graphjit.compiler import decompose, lowering, scheduler
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config

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
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
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
    assert followers and all(f.key in contests for f in followers)
    assert len(tuning) == len(contests)                          # one contest per distinct kernel


def two_lengths(a, b):
    # the same fused loop over two lengths: unmasked (1024 divides both), it prints the same text for both
    return (a * 2).relu() + 1, (b * 2).relu() + 1


def kernel_text(source, name):
    """The @triton.jit function `name` of a module source."""
    start = source.index(f"def {name}(")
    end = source.find("@triton.jit", start)
    return source[start:end if end != -1 else len(source)]


@pytest.mark.parametrize("lengths", [(8192, 32768), (8192, 3072)], ids=["divides", "needs-masks"])
def test_a_copy_over_other_sizes_gets_its_own_grid_from_the_winner(lengths):
    """Regression (H200, ResNet-50 under max-autotune): a copy of a tuned kernel over a 4x shorter tensor
    took the winner's grid along with its block size, and its unmasked loop ran 4x past the end of its
    buffers. Each launch must now cover exactly its own length; a copy whose length the winner's block
    doesn't divide keeps its own (heuristic) launch."""
    a, b = torch.randn(lengths[0]), torch.randn(lengths[1])
    graph, items, examples = scheduled(two_lengths, a, b)
    tuning, followers = [], []
    source, launches = triton_codegen.generate(graph, items, tuning=tuning, device=torch.device("cpu"),
                                               candidates=True, followers=followers, example_inputs=examples)
    assert len(tuning) == 1 and len(followers) == 1, "one contest, the other loop its copy"
    key, variants, _, _ = tuning[0]
    winner = max(variants, key=lambda launch: launch.constexprs["XBLOCK"])     # the largest block: 4096+
    assert winner.constexprs["XBLOCK"] >= 4096
    triton_codegen.resolve_followers(launches, followers, {key: winner})
    follower = followers[0]
    mine = launches[follower.item].launches[follower.position]
    length = mine.sizes[0]
    assert length == follower.own.sizes[0] == lengths[1]
    text = kernel_text(source, mine.name)
    xblock = mine.constexprs["XBLOCK"]
    assert mine.grid == -(-length // xblock), "the grid covers the copy's own length"
    if "xmask" not in text:
        assert length % xblock == 0, f"an unmasked kernel ({mine.name}) must not run past the copy's end"
    if lengths[1] % winner.constexprs["XBLOCK"] == 0:
        assert mine.name == winner.name, "the copy shares the winner's compiled kernel"
    else:
        assert mine is follower.own, "the winner's text lacks the masks this copy needs: it keeps its own"
