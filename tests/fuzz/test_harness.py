"""The fuzzer's own checks: it sees a wrong value, a lost mutation, a compiler fallback and a broken alias;
it does not call rounding noise a bug; the shrinker keeps the failing statement; programs are seeded.

Broken backends stand in for a buggy compiler (backend(gm, example_inputs) -> callable), in-process.
"""
import contextlib
import os
import re

import pytest
import torch

from . import compare, generator, ops, program, pyprog, runner, shrink
from .program import Input, Program, Stmt


def _prog(*lines, inputs=(("x1", "f", ("a", 3)),), returns=("v1",), calls=(("A", 1), ("A", 2), ("B", 3))):
    stmts = [Stmt(line, tuple(line.split(" = ")[:1]) if " = " in line else (),
                  tuple(re.findall(r"\b[xv]\d+\b", line.split(" = ")[-1]))) for line in lines]
    return Program(mode="tensor", seed=0, sizes={"A": {"a": 2}, "B": {"a": 5}, "L": {"a": 2}},
                   inputs=[Input(n, k, d, {"A": "c", "B": "c", "L": "c"}) for n, k, d in inputs],
                   stmts=stmts, returns=list(returns), calls=list(calls))


def _sin_to_cos(gm, example_inputs):
    for node in gm.graph.nodes:
        if node.target in (torch.sin, "sin"):
            node.target = torch.cos if node.op == "call_function" else "cos"
    gm.recompile()
    return gm.forward


def _on_clones(gm, example_inputs):
    return lambda *args: gm.forward(*[a.clone() for a in args])


def _raises(gm, example_inputs):
    raise ValueError("a compiler bug")


def _copies_outputs(gm, example_inputs):
    return lambda *args: tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in gm.forward(*args))


def test_sees_a_wrong_value():
    res = runner.run(_prog("v1 = x1.sin() + 1").source(), backend=_sin_to_cos)
    assert res["status"] == "wrong", runner.describe(res)


def test_sees_a_lost_mutation():
    res = runner.run(_prog("x1.mul_(2)", returns=()).source(), backend=_on_clones)
    assert res["status"] == "wrong_mutation", runner.describe(res)


def test_sees_a_fallback():
    res = runner.run(_prog("v1 = x1 * 2").source(), backend=_raises)
    assert res["status"] == "fallback", runner.describe(res)


def test_sees_a_broken_alias():
    res = runner.run(_prog("v1 = x1[0]").source(), backend=_copies_outputs)
    assert res["status"] == "alias", runner.describe(res)


def test_eager_is_clean():
    for seed in range(6):
        res = runner.run(generator.generate(seed).source(), backend="eager")
        assert res["status"] in ("ok", "invalid"), runner.describe(res)
        res = runner.run(pyprog.generate(seed).source(), backend="eager")
        assert res["status"] in ("ok", "invalid"), runner.describe(res)


def test_gradient_programs_are_valid_in_eager():
    """Programs of the gradient mode are generated with their floating inputs requiring grad: no in-place
    write into such an input or its view, no running stats requiring grad, and no returned value whose
    backward eager refuses (floor_divide has no derivative; a saved value written in place later). With
    inputs not requiring grad while generating, 33 of these 100 seeds' programs were invalid."""
    invalid = {}
    for seed in range(15000000, 15000100):
        ns = program.load(generator.generate(seed, grad=True).source())
        for variant, call_seed in ns["CALLS"]:
            if variant == "C":      # the third sizes: a program may refuse them (program.py)
                continue
            args = runner.requiring_grad(ns["make_inputs"](call_seed, variant), True)
            try:
                runner._gradients(ns["f"](*args), args)
            except RuntimeError as e:
                invalid[seed] = str(e)[:100]
    assert not invalid, invalid


def test_rounding_is_not_a_bug():
    e = torch.tensor([1.0, 2.0, float("nan")])
    assert compare.diff_leaf("out", e, e + 1e-6) is None
    wrong = compare.diff_leaf("out", e, e + 1e-2)
    assert wrong is not None and wrong.nbad == 2
    ref = torch.tensor([1.0, 2.0, float("nan")], dtype=torch.float64) + 1e-3   # compiled nearer the truth
    assert compare.accept_by_ref(e, e + 1e-3, ref)
    assert not compare.accept_by_ref(e, e + 1e-2, ref)


def _swapping(name, replacement):
    """A backend calling replacement(original, *args) where the graph calls torch function or method name."""
    def backend(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.target in (getattr(torch, name), name):
                original = getattr(torch, name)
                node.op, node.target = "call_function", lambda *a, _o=original: replacement(_o, *a)
        gm.recompile()
        return gm.forward
    return backend


def _one_ulp_up(fn, *args):
    out = fn(*args)
    return torch.nextafter(out, torch.full_like(out, float("inf")))


def _nan_sign_flipped(fn, *args):
    out = fn(*args)
    return torch.where(out.isnan(), -out, out)


def test_one_ulp_through_a_discontinuity_is_rounding():
    """eager's atan2(a, a) is pi/4 to the last bit; one ulp off, == pi/4 is False everywhere."""
    prog = _prog("v1 = torch.atan2(x1.abs() + 1, x1.abs() + 1) == math.pi / 4")
    res = runner.run(prog.source(), backend=_swapping("atan2", _one_ulp_up))
    assert res["status"] == "noise" and res["mismatches"][0].verdict == "rounding", runner.describe(res)


def test_the_sign_of_a_computed_nan_is_rounding():
    res = runner.run(_prog("v1 = (x1 - 5).log().signbit()").source(), backend=_swapping("log", _nan_sign_flipped))
    assert res["status"] == "noise" and res["mismatches"][0].verdict == "rounding", runner.describe(res)


def test_the_sign_of_a_nan_converted_to_16_bits_is_rounding():
    """eager's float32 -> bfloat16 conversion of a 0-d tensor gives +NaN, of a tensor of elements -NaN for
    -NaN: a conversion keeping the sign of a 0-d NaN is as good."""
    def negative_nan(x, dtype):     # the sign bit set through the bits (a 0-d bfloat16 -x is +NaN again)
        out = x.to(dtype)
        return torch.where(out.isnan(), (out.view(torch.int16) | -0x8000).view(dtype), out)

    def negative_nans(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_method" and node.target == "to":
                node.op, node.target = "call_function", negative_nan
        gm.recompile()
        return gm.forward
    prog = _prog("v1 = (x1.sum() * 0 + float('nan')).to(BF16).signbit()", inputs=(("x1", "f", (3,)),))
    res = runner.run(prog.source(), backend=negative_nans)
    assert res["status"] == "noise" and res["mismatches"][0].verdict == "rounding", runner.describe(res)


def _other_zero(fn, *args):
    out = fn(*args)
    return torch.where(out == 0, -out, out)


def test_the_sign_of_a_zero_tie_is_rounding():
    """maximum(+0.0, -0.0): eager's CPU kernel gives +0.0 in its scalar tail and -0.0 in its vector loop."""
    prog = _prog("v1 = torch.maximum(x1 * 0, -(x1 * 0)).signbit()", inputs=(("x1", "f", (1,)),))
    res = runner.run(prog.source(), backend=_swapping("maximum", _other_zero))
    assert res["status"] == "noise" and res["mismatches"][0].verdict == "rounding", runner.describe(res)


def test_a_wrong_sign_is_not_rounding():
    prog = _prog("v1 = torch.copysign(torch.ones_like(x1), x1 - 0.5)")
    res = runner.run(prog.source(), backend=_swapping("copysign", lambda fn, a, b: fn(a, -b)))
    assert res["status"] == "wrong", runner.describe(res)


def test_shrinks_to_the_failing_statement():
    prog = _prog("v1 = x1 + 1", "v2 = v1.exp()", "v3 = x1.sin()", "v4 = v2 * v3", returns=("v4",))
    run = lambda src, **kw: runner.run(src, backend=_sin_to_cos, **kw)  # noqa: E731
    res = run(prog.source())
    small, small_res = shrink.shrink(prog, res, run)
    assert small_res["status"] == "wrong"
    assert [s.code for s in small.stmts] == ["v3 = x1.sin()"], small.body()
    assert small.calls == [("A", 1)]


def test_programs_are_seeded():
    assert generator.generate(7).source() == generator.generate(7).source()
    assert pyprog.generate(7).source() == pyprog.generate(7).source()
    assert generator.generate(7).source() != generator.generate(8).source()


def test_a_worker_that_cannot_start_stops_the_run(tmp_path, monkeypatch):
    """A child whose imports fail raises SetupError instead of reporting every program as a crash."""
    import pytest
    from .worker import SetupError, Worker
    (tmp_path / "bytecode.py").write_text("raise ImportError('not importable here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))     # a spawned child starts with the parent's sys.path
    with Worker() as worker, pytest.raises(SetupError, match="not importable here"):
        worker.run(generator.generate(1).source(), timeout=120)


# one_python: two fuzzer processes started to check --jobs' bookkeeping (logs, summaries), which is the
# same on every Python; the programs themselves run on every Python in test_fuzz_ci.py.
@pytest.mark.one_python
def test_jobs_run_one_process_per_seed(tmp_path):
    """--jobs N: N processes with consecutive seeds, each with its own log and summary."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-m", "tests.fuzz", "--seed", "40", "--jobs", "2", "--count", "1",
                          "--mode", "python", "--out", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for seed in (40, 41):
        assert f"--- seed {seed}" in out.stdout
        assert "1 programs: " in (tmp_path / f"log_{seed}.txt").read_text()


def test_float64_reference_computes_default_dtype_values_in_float64():
    """A value f makes in the default dtype meets a float64 input in the reference replay: the replay runs
    f with float64 as the default dtype (and makes the inputs as the real run does)."""
    prog = _prog("v1 = x1 @ torch.ones(3, 3)")        # float64 @ float32 raises
    state = runner._replay(prog.source(), prog.calls[:1], ref=True)
    assert state["out"][0].dtype == torch.float64
    plain = runner._replay(prog.source(), prog.calls[:1])
    torch.testing.assert_close(state["arg"][0], plain["arg"][0].double())      # the same inputs


def _doubled_gradient(fn, *args):
    """fn's value with twice its gradient: the forward agrees with eager, the backward does not."""
    out = fn(*args)
    return out + (out - out.detach())


def test_sees_a_wrong_gradient():
    prog = _prog("v1 = x1.sin() * 3")
    res = runner.run(prog.source(), backend=_swapping("sin", _doubled_gradient), grad=True)
    assert res["status"] == "wrong_grad", runner.describe(res)


def _rsqrt_one_ulp_up(fn, x):
    """rsqrt rounded one ulp up, its gradient (-x^-1.5 / 2, as torch computes it: -result^3 / 2) from
    that result, as a kernel rounding differently from eager's gives."""
    y = _one_ulp_up(fn, x.detach())
    return y + (x - x.detach()) * (-0.5 * y ** 3)


def test_a_gradient_amplifying_one_ulp_is_rounding():
    """rsqrt's gradient is its result cubed: one bfloat16 ulp of the result moves the float32 gradient by
    about 2%, beyond its tolerance; eager's own gradient moves that far when its ops round one ulp off."""
    prog = _prog("v1 = x1.abs().add(0.5).to(torch.bfloat16).rsqrt()")
    res = runner.run(prog.source(), backend=_swapping("rsqrt", _rsqrt_one_ulp_up), grad=True)
    assert res["status"] == "noise", runner.describe(res)
    assert any("one ulp" in n for n in res["notes"]), res["notes"]


def test_overflow_logs_align_without_conversions():
    """The float64 reference converts where the float32 run has nothing to do: conversions are left out
    before the logs are compared op by op."""
    low = [("add", 0), ("native_layer_norm", 2), ("mul", 0)]
    ref = [("_to_copy", 0), ("add", 0), ("native_layer_norm", 0), ("_to_copy", 0), ("mul", 0)]
    assert runner._overflowed(low, ref)
    assert not runner._overflowed(low[:1] + [("native_layer_norm", 0)] + low[2:], ref)
    assert not runner._overflowed([("add", 1), ("sum", 1)], [("add", 1)])  # misaligned, reference non-finite too
    assert runner._overflowed([("add", 1), ("sum", 1)], [("add", 0)])
    # the backwards part (another formula's path past the overflow): the forward's layer norm still counts
    parted = [("native_layer_norm", 1), ("lerp", 1), ("mul", 0), ("add", 1)]
    assert runner._overflowed(parted, [("native_layer_norm", 0), ("lerp", 0), ("sub", 0), ("mul", 0), ("add", 1)])


def test_noise_dominated_leaves_are_judged_as_a_whole():
    """A group norm of one-element groups is rounding noise times 1/sqrt(eps) (float64: ~1e-14; eager and
    compiled: ~1e-4, in different elements): compiled within three times eager's largest error is as good
    as eager. Where eager is accurate, a compiled difference of the same size is not."""
    ref = torch.randn(64, dtype=torch.float64) * 1e-14
    g = torch.Generator().manual_seed(0)
    eager = (torch.randn(64, generator=g) * 1e-4).float()
    compiled = (torch.randn(64, generator=g) * 1e-4).float()
    assert not compare.accept_by_ref(eager, compiled, ref)
    assert compare.noise_dominated(eager, compiled, ref)
    accurate = torch.randn(64, generator=g, dtype=torch.float64)
    assert not compare.noise_dominated(accurate.float(), accurate.float() + 1e-3, accurate)
    assert not compare.noise_dominated(eager, compiled * 10, ref)


def test_finite_replay_replaces_the_inputs_infinities_and_nans():
    """The overflow triage's second replay (an input's inf hiding an overflow of its finite part: a float32
    sum of -3e38, -3e38 and inf is inf or NaN by its order, triton 10302233): the same inputs, their
    infinities and NaNs made 0, everything else as made."""
    import contextlib
    prog = _prog("v1 = x1.sum()")
    prog.inputs = [Input("x1", "f", ("a", 3), {"A": "c", "B": "c", "L": "c"}, special=6)]
    _, plain, _ = runner._run_last_call_in(contextlib.nullcontext(), prog.source(), prog.calls)
    _, finite, _ = runner._run_last_call_in(contextlib.nullcontext(), prog.source(), prog.calls, finite=True)
    assert not plain[0].isfinite().all() and finite[0].isfinite().all()
    kept = plain[0].isfinite()
    assert torch.equal(finite[0][kept], plain[0][kept]) and (finite[0][~kept] == 0).all()


def test_gradients_of_pure_rounding_error_are_judged_by_the_graphs_noise():
    """A constant group under group_norm: its gradients are 1/sqrt(eps) times rounding error (float64: ~0).
    A scalar's gradient closer to 0 in eager's run by chance is no reason to call compiled's wrong while
    it is within three times eager's largest such error (grad 10100671); a gradient whose reference is far
    from 0 is judged by the usual tolerance."""
    t = torch.tensor
    reference = [t(4.5e-13, dtype=torch.float64), t([1.8e-14, -2e-14], dtype=torch.float64)]
    eager = [t(6.1e-5), t([9e-4, -8e-4])]
    ours = [t(2.0e-3), t([9e-4, -8e-4])]
    assert runner._gradients_noise_dominated(eager, ours, reference)
    assert not runner._gradients_noise_dominated(eager, [t(5e-3), ours[1]], reference)      # beyond 3x
    real = [t([1.0, 2.0], dtype=torch.float64)]
    assert not runner._gradients_noise_dominated([t([1.0, 2.0])], [t([1.5, 2.0])], real)


def test_the_nonfinite_log_skips_a_backward_zero_tensor():
    """sgn's backward makes an efficient zero tensor (no storage): reading its elements under the overflow
    triage's dispatch mode segfaulted, which hid a wrong gradient (grad 14600852)."""
    prog = _prog("v1 = (x1 * x1).sgn() + x1")
    log = runner._nonfinite_log(prog.source(), prog.calls, ref=False, grad=True)
    assert ("sgn", 0) in log
    assert not any(name == "_efficientzerotensor" for name, _ in log)


def test_a_program_that_kills_eager_alone_is_not_a_finding():
    """A worker that dies is a segv only where eager alone, in a fresh process, lives: torch's own crash
    (max_pool2d's or group_norm's backward over an empty input, grad 14600896 and 14601292) is no test."""
    from .worker import Worker
    prog = _prog("v1 = x1 * (__import__('os').kill(__import__('os').getpid(), 9) or 1)")
    with Worker() as worker:
        res = worker.run(prog.source(), timeout=120)
    assert res["status"] == "invalid", res
    assert "eager alone dies too" in res["msg"]


def test_a_cast_to_float32_stays_float64_in_the_reference():
    """ops.cast's `.float()` form converts to F32, float64 in the reference replay: there `.float()` made a
    float32 tensor beside float64 weights, layer_norm raised "mixed dtype", and eager's float32 overflow
    (NaN where compiled gave the bias) could not be judged (grad fuzz 15002999)."""
    import types
    from . import ops

    class Rng:      # the F32 target and the `.float()` form
        def choice(self, seq):
            return "F32" if "F32" in seq else seq[0]

        def random(self):
            return 0.0

    g = types.SimpleNamespace(rng=Rng(), pick=lambda: "x1", new=lambda: "v1", first=lambda name: torch.zeros(3),
                              stmt=lambda code, defs, tag: code)
    cast = ops.cast(g)
    assert ".float()" in cast
    prog = _prog(cast, "v2 = F.layer_norm(v1, v1.shape[-1:], x2, x2, eps=1e-5)",
                 inputs=(("x1", "f", ("a", 3)), ("x2", "f", (3,))), returns=("v2",))
    assert runner._replay(prog.source(), prog.calls[:1])["out"][0].dtype == torch.float32
    assert runner._replay(prog.source(), prog.calls[:1], ref=True)["out"][0].dtype == torch.float64


def test_a_bit_view_reads_only_values_no_op_rounded():
    """A float's bits as int32 make one ulp of a rounded value (logcumsumexp's, near 0: a sign) a difference
    no float tolerance covers, so the generator bit-views an input, or a value computed from inputs by exact
    ops only; of a rounded value (also through a view of it or a write into it) it takes a plain view."""
    g = generator.Gen(0)
    g.prog = _prog("v1 = x1.abs().flip(0)", "v2 = x1.log_softmax(-1)", "v3 = v2[0]", "v4 = x1.clone()",
                   "v4.add_(v2)", "v5 = x1 + 1")
    g.rebuild()
    assert [n for n in ("x1", "v1", "v2", "v3", "v4", "v5") if g.exact(n)] == ["x1", "v1"]

    class BitView(type(g.rng)):
        def choice(self, seq):
            return next((s for s in seq if "view(torch.int32)" in str(s)), None) or super().choice(seq)

    g.rng, g.count = BitView(0), 5
    for name, bits in (("v1", True), ("v2", False)):
        g.pick = lambda *a, name=name, **k: name
        stmt = ops.view(g)
        assert ("view(torch.int32)" in stmt.code) == bits and g.accept(stmt), stmt.code


def test_the_branch_a_nan_input_takes_in_eager_backward_kernels_is_noise():
    """elu's gradient at a NaN input is NaN in eager's vectorized CPU loop (x > 0 is false) and the incoming
    gradient in its scalar tail (x <= 0 is false): a two-element input falls in the tail, where the compiled
    kernel, as the vectorized loop, gives NaN (fuzz grad 16800502). A replay taking one branch at every NaN
    input gives either; a gradient of neither is no such noise."""
    prog = Program(mode="tensor", seed=0, sizes={"A": {"a": 1}, "B": {"a": 1}, "L": {"a": 1}},
                   inputs=[Input("x3", "f", (2,), {"A": "o", "B": "o", "L": "o"}, 4)],
                   stmts=[Stmt("v1 = F.elu(x3)", ("v1",), ("x3",))], returns=["v1"], calls=[("A", 54)], grad=True)
    src, calls = prog.source(), prog.calls
    x = program.load(src)["make_inputs"](54, "A")[0]
    assert x.isnan().tolist() == [True, False]
    tail = runner._run_last_call_in(contextlib.nullcontext(), src, calls, grad=True)[0]
    vector = runner._run_last_call_in(runner._NanBranch(0), src, calls, grad=True)[0]
    assert not tail[0].isnan().any() and vector[0].isnan().tolist() == [True, False]
    assert runner._gradients_of_a_nan_branch(src, calls, vector, [])
    assert runner._gradients_of_a_nan_branch(src, calls, tail, [])
    assert not runner._gradients_of_a_nan_branch(src, calls, [vector[0] * 2], [])
