"""compile(mode=...) on the CPU: names are checked, named modes pick graphjit's compiler, CUDA graphs and
autotuning step aside with a logged reason and results equal eager; autotuning's cached choices are
validated and applied (through the Triton interpreter where Triton is installed); the progress line."""
import json
import os
import threading

import pytest
import torch

import graphjit
from graphjit import config as frontend_config
from graphjit.backends import registry
from graphjit.compiler import autotune
from graphjit import config as compiler_config
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit.progress import Progress
from graphjit import config as gj_config

from ..conftest import other_python

MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def f(x, y):
    return (torch.sin(x) * 2 + y).relu().sum(-1), x.cos()


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown mode 'fastest'; known modes: default, reduce-overhead"):
        graphjit.compile(f, mode="fastest")
    with pytest.raises(ValueError, match="either mode= or options="):
        graphjit.compile(f, mode="reduce-overhead", options={})


@pytest.mark.parametrize("mode", MODES)
def test_modes_on_cpu_equal_eager_and_pick_graphjits_compiler(mode, monkeypatch):
    calls = []
    real = registry.lookup_backend("graphjit")

    def spy(gm, example_inputs):
        calls.append(gm)
        return real(gm, example_inputs)
    monkeypatch.setitem(registry._BACKENDS, "graphjit", spy)
    compiled = graphjit.compile(f, mode=mode)
    for _ in range(3):
        x, y = torch.randn(5, 7), torch.randn(7)
        got, want = compiled(x, y), f(x, y)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    assert len(calls) == 1          # one graph, compiled once, by the graphjit backend


def test_cuda_graph_modes_say_why_they_step_aside_on_cpu(monkeypatch, capsys):
    monkeypatch.setattr(frontend_config, "logs", "cudagraphs")
    compiled = graphjit.compile(f, mode="reduce-overhead")
    x, y = torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y)[0], f(x, y)[0])
    assert "no CUDA graph: inputs on cpu, not only CUDA" in capsys.readouterr().err


def test_an_explicit_backend_keeps_its_place_under_a_mode():
    seen = []

    def backend(gm, example_inputs):
        seen.append(len(example_inputs))
        return gm.forward
    compiled = graphjit.compile(f, backend=backend, mode="reduce-overhead")
    x, y = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y)[1], x.cos())
    assert seen == [2]


# ---- autotuning's choices: validity, the on-disk cache ----

def _launch(kind, constexprs, warps, sizes):
    return triton_codegen.Launch("k", ("a",), 1, constexprs, warps, kind=kind, sizes=sizes)


def test_valid_rejects_configs_that_would_compute_something_else():
    persistent = _launch("persistent reduction", {"XBLOCK": 8, "RBLOCK": 1024}, 4, (512, 1000, False))
    assert autotune.valid({"XBLOCK": 2, "RBLOCK": 1024, "num_warps": 8}, persistent)
    assert not autotune.valid({"XBLOCK": 16, "RBLOCK": 32, "num_warps": 4}, persistent)   # row not covered
    assert not autotune.valid({"XBLOCK": 3, "RBLOCK": 1024, "num_warps": 4}, persistent)  # not a power of 2
    assert not autotune.valid({"XBLOCK": 2, "num_warps": 4}, persistent)                  # other parameters
    assert not autotune.valid(["XBLOCK"], persistent)
    looped = _launch("looped reduction", {"XBLOCK": 1, "RBLOCK": 2048}, 8, (64, 50000, False))
    assert autotune.valid({"XBLOCK": 4, "RBLOCK": 512, "num_warps": 4}, looped)


@pytest.mark.parametrize("launch", [
    _launch("pointwise", {"XBLOCK": 1024}, 4, (1 << 20, 1, False)),
    _launch("pointwise", {"XBLOCK": 128}, 1, (100, 1, False)),
    _launch("persistent reduction", {"XBLOCK": 4, "RBLOCK": 1024}, 8, (4096, 768, False)),
    _launch("looped reduction", {"XBLOCK": 1, "RBLOCK": 2048}, 8, (64, 50000, False)),
    _launch("looped reduction", {"XBLOCK": 64, "RBLOCK": 64}, 8, (4096, 4096, True)),
], ids=lambda l: l.kind)
def test_candidates_are_valid_distinct_and_exclude_the_heuristic(launch):
    found = autotune.candidates(launch)
    assert found, "every kind of kernel has other configurations to try"
    heuristic = {**launch.constexprs, "num_warps": launch.num_warps}
    assert heuristic not in found
    assert len({json.dumps(c, sort_keys=True) for c in found}) == len(found)
    assert all(autotune.valid(c, launch) for c in found)


def test_choice_cache_round_trip_and_damaged_files(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler_config, "cache_dir", str(tmp_path))
    autotune.store_choice("abc", {"XBLOCK": 64, "num_warps": 4}, [0.1, 0.05])
    assert autotune.load_choice("abc") == {"XBLOCK": 64, "num_warps": 4}
    path = tmp_path / "autotune" / "abc.json"
    path.write_text("{not json")
    assert autotune.load_choice("abc") is None
    path.write_text(json.dumps({"ms": []}))
    assert autotune.load_choice("abc") is None
    assert autotune.load_choice("missing") is None
    assert [p for p in os.listdir(tmp_path / "autotune") if p.startswith(".tmp")] == []


# ---- cached choices applied to generated Triton (interpreter) ----

needs_triton = pytest.mark.skipif(not triton_codegen.triton_available(), reason="Triton is not installed")


def kernels(x, y, z, w):
    # a persistent softmax over 5 rows of 600 (a partial block for XBLOCK 2 and 8), a reduction over dim 0
    # (strided rows), a looped reduction over rows of 1100, a pointwise kernel on its own (7 * 33
    # elements: masked in any block)
    return torch.softmax(x * 2, -1) + y, (x.sin() + 1).sum(0), z.exp().sum(-1), w.cos() * 3


CONFIGS = [
    None,
    {"XBLOCK": 2, "RBLOCK": 1024, "num_warps": 4},          # persistent kernels
    {"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 1},
    {"XBLOCK": 256, "num_warps": 2},                        # pointwise kernels
    {"XBLOCK": 4096, "num_warps": 8},
    {"XBLOCK": 2, "RBLOCK": 512, "num_warps": 4},           # looped: 1100 = 2 full steps of 512 + a tail
    {"XBLOCK": 8, "RBLOCK": 32, "num_warps": 4},            # invalid for persistent rows: must be ignored
]


# On one Python: Triton's interpreter runs the same kernels on every Python (~20 s)
@needs_triton
@other_python()
@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_cached_choices_apply_and_compute_the_same(cfg, monkeypatch, triton_interpreter):
    applied = []

    def load_choice(key):
        return cfg
    real_valid = autotune.valid

    def valid(c, launch):
        ok = real_valid(c, launch)
        applied.append(ok)
        return ok
    monkeypatch.setattr(autotune, "load_choice", load_choice)
    monkeypatch.setattr(autotune, "valid", valid)
    compiled = graphjit.compile(kernels, mode="max-autotune-no-cudagraphs")
    for _ in range(2):
        x, y, z, w = torch.randn(5, 600), torch.randn(600), torch.randn(3, 1100), torch.randn(7, 33)
        for got, want in zip(compiled(x, y, z, w), kernels(x, y, z, w)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    if cfg is not None:
        assert True in applied, "each choice fits some kernel of the graph"
    if cfg is CONFIGS[-1]:
        assert False in applied, "... and the last one is refused for the persistent softmax"


# ---- the progress line ----

def test_progress_is_quiet_for_short_work_and_reports_long_work(capsys, monkeypatch):
    monkeypatch.setattr(frontend_config, "progress", 1)
    quick = Progress("quick", 3)
    for i in range(1, 4):
        quick.update(i)
    quick.finish()
    assert capsys.readouterr().err == ""
    slow = Progress("compiling Triton kernels", 4, after=0.0)
    for i in range(1, 5):
        slow.update(i)
    slow.finish()
    err = capsys.readouterr().err
    assert "graphjit: compiling Triton kernels [" in err and "4/4" in err
    assert err.count("4/4") == 1
    monkeypatch.setattr(frontend_config, "progress", 0)
    off = Progress("off", 1, after=0.0)
    off.update(1)
    assert capsys.readouterr().err == ""


# ---- CUDA-graph helpers that run without a GPU ----

@pytest.mark.parametrize("make,dense,span", [
    (lambda: torch.randn(3, 4), True, 12),
    (lambda: torch.randn(3, 4).t(), True, 12),
    (lambda: torch.randn(2, 3, 4).permute(2, 0, 1), True, 24),
    (lambda: torch.randn(1, 5), True, 5),
    (lambda: torch.randn(3, 4)[:, :2], False, 10),
    (lambda: torch.randn(4).expand(3, 4), False, 4),
    (lambda: torch.randn(6)[::2], False, 5),
    (lambda: torch.randn(0, 3), True, 0),
])
def test_static_input_copies_know_dense_layouts_and_spans(make, dense, span):
    from graphjit.backends.cudagraphs import _span, is_non_overlapping_and_dense_or_false
    t = make()
    assert is_non_overlapping_and_dense_or_false(t) is dense
    assert _span(t) == span


@pytest.mark.parametrize("make", [lambda: torch.randn(3, 4).t(), lambda: torch.randn(3, 4)[:, :2],
                                  lambda: torch.randn(6)[::2], lambda: torch.randn(0, 3)],
                         ids=["dense", "gapped", "strided", "empty"])
def test_static_copies_round_trip(make):
    """An input copied into its static buffer reads the same there; what the graph writes into the static
    buffer is copied back into the caller's tensor (the runner's two directions, on CPU memory: the
    (static side, caller's side) pairs, copied as the runner does, many at once)."""
    from graphjit.backends.cudagraphs import _copy_all, _copy_pair, _span, is_non_overlapping_and_dense_or_false
    x, other = make(), torch.randn(3)
    span = _span(x)
    base = torch.empty(max(span, 1), dtype=x.dtype)
    view = torch.as_strided(base, x.shape, x.stride(), 0)
    dense_base = None if is_non_overlapping_and_dense_or_false(x) else base
    ours, theirs = _copy_pair(view, dense_base, span, x)
    other_static = torch.empty(3)
    _copy_all([ours, other_static], [theirs, other])        # in: the caller's tensors into static buffers
    torch.testing.assert_close(view, x)
    torch.testing.assert_close(other_static, other)
    view.mul_(2)
    other_static.add_(1)
    expected, other_expected = view.clone(), other_static.clone()
    _copy_all([theirs, other], [ours, other_static])        # back: the static buffers into the caller's
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(other, other_expected)


def test_mutated_inputs_are_found_through_views():
    from graphjit.backends.cudagraphs import mutated_inputs
    seen = []

    def backend(gm, example_inputs):
        seen.append(mutated_inputs(gm))
        return gm.forward

    def f(a, b, c, d, e):
        a.add_(1)
        b[0] = 2
        c.view(-1)[1:].mul_(2)
        fresh = d + 1
        fresh.add_(1)                   # a new tensor: d is only read
        return fresh + e, torch.relu(e)
    graphjit.compile(f, backend=backend)(*[torch.zeros(2, 2) for _ in range(5)])
    assert seen == [[0, 1, 2]]


# ---- the output rules of CUDA-graph replays, on CPU memory standing in for the pool ----

class _FakePool:
    mode_name = "reduce-overhead"

    def __init__(self):
        self.live = set()


def _recording_over(pool_tensor, outputs):
    """A cudagraphs.Recording whose 'graph outputs' are views of pool_tensor (no GPU, no capture)."""
    from graphjit.backends import cudagraphs
    rec = object.__new__(cudagraphs.Recording)
    rec.pool, rec.name, rec.device, rec.cached = _FakePool(), "f", pool_tensor.device, None
    rec._describe_outputs(outputs)
    return rec


@pytest.fixture
def cpu_tensors_from_storages(monkeypatch):
    if not hasattr(torch._C, "_set_storage_data_ptr_access_error_msg"):
        pytest.skip("this torch lacks storage access errors")

    def make(meta, storage):
        return torch.empty(0, dtype=meta["dtype"]).set_(storage, meta["storage_offset"], meta["size"],
                                                        meta["stride"])
    monkeypatch.setattr(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", make, raising=False)


def test_unreferenced_outputs_are_handed_out_again(cpu_tensors_from_storages):
    pool = torch.arange(12.0)
    rec = _recording_over(pool, (pool[:4], pool[4:].view(2, 4)))
    a, b = rec.hand_out()
    torch.testing.assert_close(b, pool[4:].view(2, 4))
    ids = (id(a), id(b))
    del a, b
    rec.invalidate_outputs()               # nothing referenced: kept
    a2, b2 = rec.hand_out()
    assert (id(a2), id(b2)) == ids
    pool.add_(1)                           # "the replay" writes the pool; the handed-out tensors see it
    torch.testing.assert_close(a2, pool[:4])


@pytest.mark.parametrize("hold", ["tensor", "view", "tuple"])
def test_referenced_outputs_raise_after_the_next_replay(hold, cpu_tensors_from_storages):
    pool = torch.arange(12.0)
    rec = _recording_over(pool, (pool[:4], pool[4:]))
    out = rec.hand_out()
    held = {"tensor": out[0], "view": out[1][2:], "tuple": out}[hold]
    del out
    rec.invalidate_outputs()
    with pytest.raises(RuntimeError, match="overwritten by a later call of the compiled model"):
        (held[0] if hold == "tuple" else held).sum()
    fresh = rec.hand_out()                 # new tensors, readable
    torch.testing.assert_close(fresh[0], pool[:4])


def test_graphs_that_wait_for_the_gpu_are_not_recorded():
    from graphjit.backends.cudagraphs import syncing_op
    assert syncing_op(torch.fx.symbolic_trace(lambda x: torch.nonzero(x) + 1)) == "nonzero"
    assert syncing_op(torch.fx.symbolic_trace(lambda x: x.sum().item())) == "item"
    assert syncing_op(torch.fx.symbolic_trace(lambda x: (x * 2).sin())) is None


def test_graphs_copying_cpu_tensors_to_the_gpu_are_not_recorded():
    from graphjit.backends.cudagraphs import syncing_op
    gm = torch.fx.symbolic_trace(lambda x, c: x + c.to("meta"))     # "meta" stands in for a GPU here
    for node in gm.graph.nodes:
        if node.op != "output":
            device = "cpu" if node.name == "c" else "meta"
            node.meta["example_value"] = torch.empty(3, device=device)
    assert syncing_op(gm) == "a copy of a CPU tensor to the GPU"
    for node in gm.graph.nodes:
        if node.name == "c":
            node.meta["example_value"] = torch.empty(3, device="meta")
    assert syncing_op(gm) is None


def test_each_compiled_model_keeps_its_mode_in_two_threads(monkeypatch):
    """Two graphs handed to graphjit's backend in different modes from two threads, both compiles begun
    before either reads its mode (graphjit's own frontend translates one frame at a time, a frontend of
    another kind may not): the max-autotune one autotunes, the default one does not."""
    pytest.importorskip("triton")
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
    barrier = threading.Barrier(2, timeout=300)
    real_backend = registry._BACKENDS["graphjit"]

    def rendezvous(gm, example_inputs, mode=None):
        barrier.wait()
        return real_backend(gm, example_inputs, mode=mode)
    rendezvous.graphjit_takes_mode = True
    monkeypatch.setitem(registry._BACKENDS, "graphjit", rendezvous)
    tuned = {}
    real_generate = triton_codegen.generate

    def generate(graph, items, check=False, tuning=None, *args, **kwargs):
        tuned[threading.current_thread().name] = tuning is not None
        return real_generate(graph, items, check, tuning, *args, **kwargs)
    monkeypatch.setattr(triton_codegen, "generate", generate)

    def tuned_fn(x):
        return (x.sin() + 1).sum(-1)

    def plain_fn(x):
        return (x.cos() * 2).sum(-1)
    jobs = {"autotune": (torch.fx.symbolic_trace(tuned_fn), "max-autotune-no-cudagraphs"),
            "default": (torch.fx.symbolic_trace(plain_fn), None)}
    errors = []

    def run(name):
        gm, mode = jobs[name]
        try:
            x = torch.randn(8, 16)
            compiled = registry.lookup_backend("graphjit", mode)(gm, [x])
            torch.testing.assert_close(compiled(x), gm(x))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=run, args=(name,), name=name) for name in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert tuned == {"autotune": True, "default": False}


def test_every_augmented_assignment_on_an_input_is_a_write():
    """`a **= 2`, `b //= 3`, `c |= d`, `e @= w` ... write into their input as `+=` does: each must be
    found, or a CUDA-graph replay would write into its static copy and leave the caller's tensor as it was."""
    from graphjit.backends.cudagraphs import mutated_inputs
    seen = []

    def backend(gm, example_inputs):
        seen.append(mutated_inputs(gm))
        return gm.forward

    def f(a, b, c, d, e, w):
        a **= 2
        b //= 3
        c |= d
        e @= w
        return a + 1
    floats = [torch.ones(2, 2) * 3 for _ in range(2)]
    ints = [torch.ones(2, 2, dtype=torch.int64) for _ in range(2)]
    graphjit.compile(f, backend=backend)(floats[0], floats[1], ints[0], ints[1], torch.ones(2, 2), torch.eye(2))
    assert seen == [[0, 1, 2, 4]]
