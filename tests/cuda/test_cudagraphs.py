"""mode="reduce-overhead" and "max-autotune" on a CUDA GPU (skipped elsewhere): differential tests against
eager over several calls, that replays really replay (the compiled callable is not called again), the
output rules (stale outputs raise, outputs feeding the next graph stay valid), re-recording when
parameters move, input mutation, and graphs that can't be recorded."""
import pytest
import torch

import graphjit
from graphjit import config as frontend_config
from graphjit.backends import cudagraphs, registry
from graphjit import config as compiler_config

pytestmark = pytest.mark.gpu
DEV = "cuda"


class Counting:
    """A backend wrapping another: counts compiles and calls of the compiled callables (replays skip them)."""

    def __init__(self, name="graphjit"):
        self.inner = registry.lookup_backend(name)
        self.compiles = self.calls = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        compiled = self.inner(gm, example_inputs)

        def call(*args):
            self.calls += 1
            return compiled(*args)
        return call


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),
                               torch.nn.LayerNorm(32)).to(DEV).eval()


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("backend", ["graphjit", "eager"])
def test_replays_equal_eager_on_fresh_inputs(mode, backend):
    model = mlp()
    counting = Counting(backend)
    compiled = graphjit.compile(model, backend=counting, mode=mode)
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(8, 64, device=DEV)
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-3, atol=2e-3)
    assert counting.compiles == 1
    # call 1 runs the compiled callable (warm-up) and records it (a capture calls it once more); calls 2-5 replay
    assert counting.calls == 2


def test_a_stale_output_raises_and_a_live_one_is_right():
    compiled = graphjit.compile(lambda x: (x * 2).sin(), mode="reduce-overhead")
    xs = [torch.randn(1000, device=DEV) for _ in range(4)]
    compiled(xs[0])                       # recorded
    first = compiled(xs[1])               # replayed
    view = first[10:20]
    second = compiled(xs[2])              # overwrites first's memory
    with pytest.raises(RuntimeError, match="overwritten by a later call of the compiled model"):
        first.sum()
    with pytest.raises(RuntimeError, match="overwritten"):
        view.sum()
    torch.testing.assert_close(second, (xs[2] * 2).sin())
    held = second.clone()
    del second
    third = compiled(xs[3])               # nothing of the previous replay is referenced: no error anywhere
    torch.testing.assert_close(third, (xs[3] * 2).sin())
    torch.testing.assert_close(held, (xs[2] * 2).sin())


def test_the_loop_pattern_keeps_working():
    compiled = graphjit.compile(lambda x: x.exp() + 1, mode="reduce-overhead")
    out = None
    for _ in range(6):
        x = torch.randn(64, device=DEV)
        out = compiled(x)                 # the previous `out` is alive during the call, then dropped
        torch.testing.assert_close(out, x.exp() + 1)


def test_outputs_of_an_earlier_graph_feeding_a_later_one_stay_valid():
    def f(x):
        h = x.relu() * 3
        print("graph break")               # two graphs: h comes from the first and feeds the second
        return h + h.sum(), h

    compiled = graphjit.compile(f, mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(128, device=DEV)
        got, h = compiled(x)
        want, want_h = f(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(h, want_h)   # h (first graph's output) survived the second replay


def test_moved_parameters_are_recorded_again():
    model = mlp()
    compiled = graphjit.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 64, device=DEV)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        model[0].weight = torch.nn.Parameter(torch.randn_like(model[0].weight))
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-3, atol=2e-3)
        model[0].weight.mul_(0.5)         # in place: same memory, the graph reads the new values
        torch.testing.assert_close(compiled(x), model(x), rtol=2e-3, atol=2e-3)


def test_two_instances_of_one_class_alternate():
    a, b = mlp(), mlp()
    with torch.no_grad():
        b[0].weight.add_(1)
        ca, cb = graphjit.compile(a, mode="reduce-overhead"), graphjit.compile(b, mode="reduce-overhead")
        x = torch.randn(4, 64, device=DEV)
        for _ in range(3):
            torch.testing.assert_close(ca(x).clone(), a(x), rtol=2e-3, atol=2e-3)
            torch.testing.assert_close(cb(x).clone(), b(x), rtol=2e-3, atol=2e-3)


def test_input_mutation_reaches_the_callers_tensor():
    def f(x, y):
        x.add_(1)
        return x * y

    compiled = graphjit.compile(f, mode="reduce-overhead")
    for _ in range(4):
        x, y = torch.randn(32, device=DEV), torch.randn(32, device=DEV)
        ex = x.clone()
        got = compiled(x, y)
        want = f(ex, y)
        torch.testing.assert_close(x, ex)
        torch.testing.assert_close(got, want)


def test_a_graph_that_syncs_runs_plainly_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(frontend_config, "logs", "cudagraphs")

    def syncing(gm, example_inputs):
        def call(*args):
            out = gm.forward(*args)
            torch.cuda.synchronize()           # not allowed while capturing
            return out
        return call
    compiled = graphjit.compile(lambda x: x * 2 + 1, backend=syncing, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(16, device=DEV)
        torch.testing.assert_close(compiled(x), x * 2 + 1)
    assert "recording failed" in capsys.readouterr().err
    # a failed capture leaves torch's CUDA generator believing it is still capturing; graphjit resets it
    torch.randn(4, device=DEV)
    torch.nn.functional.dropout(torch.ones(8, device=DEV), 0.5)


def test_outputs_aliasing_inputs_run_plainly():
    compiled = graphjit.compile(lambda x: (x[1:], x * 2), backend="eager", mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(8, device=DEV)
        view, doubled = compiled(x)
        assert view.data_ptr() == x[1:].data_ptr()
        torch.testing.assert_close(doubled, x * 2)


def test_max_autotune_caches_its_choices(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler_config, "cache_dir", str(tmp_path))

    def f(x, w):
        return torch.softmax(x @ w, -1) * 2, (x.sin() + 1).sum(0)
    x, w = torch.randn(512, 256, device=DEV), torch.randn(256, 384, device=DEV)
    compiled = graphjit.compile(f, mode="max-autotune-no-cudagraphs")
    for got, want in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    choices = list((tmp_path / "autotune").glob("*.json"))
    assert choices, "autotuning stored its choices"
    graphjit.reset()
    stamps = {p: p.stat().st_mtime_ns for p in choices}
    again = graphjit.compile(f, mode="max-autotune")
    for _ in range(3):
        x = torch.randn(512, 256, device=DEV)
        for got, want in zip(again(x, w), f(x, w)):
            torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    assert {p: p.stat().st_mtime_ns for p in choices} == stamps     # read, not tuned again


def test_bf16_gpt2_one_token_in_reduce_overhead():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2)).to(DEV, torch.bfloat16).eval()
    compiled = graphjit.compile(model, mode="reduce-overhead")
    with torch.inference_mode():
        for step in range(4):
            ids = torch.randint(0, 50257, (1, 1), device=DEV)
            got = compiled(ids).logits.float()
            want = model(ids).logits.float()
            assert (got - want).abs().max() / want.abs().max() < 2e-2


# ---- dynamic sizes: one compile, a CUDA graph per size ----

def test_dynamic_sizes_compile_once_and_record_a_graph_per_size(monkeypatch):
    """dynamic=True: the graph is compiled once for all sizes; each new batch size is recorded (a warm-up
    call and a capture), a size seen before replays; past config.cudagraph_sizes_limit sizes, new sizes
    run the compiled graph as plain launches, with one warning."""
    monkeypatch.setattr(frontend_config, "cudagraph_sizes_limit", 3)
    monkeypatch.setattr(cudagraphs, "_warned", set())
    model = mlp()
    counting = Counting()
    compiled = graphjit.compile(model, backend=counting, mode="reduce-overhead", dynamic=True)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="cudagraph_sizes_limit"):
        for n in [3, 5, 3, 7, 5, 9, 11, 9, 3]:
            x = torch.randn(n, 64, device=DEV)
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-3, atol=2e-3)
    assert counting.compiles == 1
    # recorded: 3, 5, 7 (2 calls each); replayed: 3, 5, 3; past the limit: 9, 11, 9 (1 call each)
    assert counting.calls == 3 * 2 + 3


def sum_of_first_rows(x, n):
    return (x[:n] * 2).sum(0), x.shape[0] - n


def test_an_int_argument_is_a_constant_of_each_recording():
    counting = Counting()
    compiled = graphjit.compile(sum_of_first_rows, backend=counting, mode="reduce-overhead", dynamic=True)
    x = torch.randn(6, 16, device=DEV)
    for n in [2, 3, 2, 4, 3]:
        got, rest = compiled(x, n)
        want, want_rest = sum_of_first_rows(x, n)
        torch.testing.assert_close(got, want)
        assert rest == want_rest
    assert counting.compiles == 1
    assert counting.calls == 3 * 2       # n = 2, 3, 4 recorded; the second 2 and 3 replay


# ---- inputs read in place: a cache the graph writes, tensors marked with mark_static_address ----

def append_step(cache, pos, x):
    """A decode step's shape: write x at row pos of a cache kept by the caller, read the whole cache."""
    cache.index_copy_(0, pos, x)
    return (cache * 2).sum(0)


def test_a_written_input_kept_at_one_address_is_read_in_place(monkeypatch, capsys):
    """The cache is written by the graph at every call: it is read and written in place (no copy in and
    back out), and the writes land in the caller's tensor at every replay."""
    monkeypatch.setattr(frontend_config, "logs", "cudagraphs")
    counting = Counting()
    compiled = graphjit.compile(append_step, backend=counting, mode="reduce-overhead")
    cache, ref = torch.zeros(8, 16, device=DEV), torch.zeros(8, 16, device=DEV)
    for step in range(6):
        pos, x = torch.tensor([step], device=DEV), torch.randn(1, 16, device=DEV)
        got = compiled(cache, pos, x)
        torch.testing.assert_close(got, append_step(ref, pos, x))
        torch.testing.assert_close(cache, ref)
    assert counting.calls == 2                 # recorded once, then replays
    assert "2 inputs copied per call, 1 read in place" in capsys.readouterr().err


def test_a_written_input_that_moves_is_copied_from_then_on():
    counting = Counting()
    compiled = graphjit.compile(append_step, backend=counting, mode="reduce-overhead")
    for step in range(6):
        cache = torch.randn(8, 16, device=DEV)        # a new tensor every call
        ref = cache.clone()
        pos, x = torch.tensor([step], device=DEV), torch.randn(1, 16, device=DEV)
        got = compiled(cache, pos, x)
        torch.testing.assert_close(got, append_step(ref, pos, x))
        torch.testing.assert_close(cache, ref)
    # recorded reading it in place, recorded again copying it (a warm-up and a capture each), replays after
    assert counting.calls == 4


def test_a_tensor_marked_with_mark_static_address_is_read_in_place_and_recorded_again_when_it_moves():
    def f(table, x):
        return table[x].sum(0) * 3
    counting = Counting()
    compiled = graphjit.compile(f, backend=counting, mode="reduce-overhead")
    tables = [torch.randn(32, 8, device=DEV) for _ in range(2)]
    for t in tables:
        torch._dynamo.mark_static_address(t)
    for step in range(8):
        table = tables[step // 4]                    # 4 calls on one, then 4 on the other
        x = torch.randint(0, 32, (5,), device=DEV)
        torch.testing.assert_close(compiled(table, x), f(table, x))
        table.mul_(1.5)                               # in place: the recording reads the new values
    assert counting.compiles == 1
    assert counting.calls == 4                        # one recording per table


def test_inputs_read_in_place_that_move_at_every_call_end_recording(monkeypatch):
    """A marked tensor at a new address every call: each call would record; once the recordings are
    replayed fewer than min_replays times on average the runner runs as plain launches, still right."""
    monkeypatch.setattr(cudagraphs, "_warned", set())
    def f(table, x):
        return table * x
    compiled = graphjit.compile(f, mode="reduce-overhead")
    x = torch.randn(16, device=DEV)
    with pytest.warns(RuntimeWarning, match="recordings for different addresses"):
        for step in range(cudagraphs.CUDAGraphRunner.max_recordings + 3):
            table = torch.randn(16, device=DEV)
            torch._dynamo.mark_static_address(table)
            torch.testing.assert_close(compiled(table, x), table * x)


def test_large_written_inputs_that_move_stay_in_place_and_are_recorded_again(monkeypatch):
    """Past config.cudagraph_copy_bytes a moved cache is not copied at every replay: the graph is recorded
    again for its address (the two caches alternate: two recordings, then replays)."""
    monkeypatch.setattr(frontend_config, "cudagraph_copy_bytes", 0)
    counting = Counting()
    compiled = graphjit.compile(append_step, backend=counting, mode="reduce-overhead")
    caches = [torch.zeros(8, 16, device=DEV) for _ in range(2)]
    refs = [c.clone() for c in caches]
    for step in range(8):
        k = (step // 2) % 2                          # A A B B A A B B
        pos, x = torch.tensor([step % 8], device=DEV), torch.randn(1, 16, device=DEV)
        torch.testing.assert_close(compiled(caches[k], pos, x), append_step(refs[k], pos, x))
        torch.testing.assert_close(caches[k], refs[k])
    assert counting.calls == 4
