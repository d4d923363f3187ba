"""Runs a program's call plan eagerly and compiled, on fresh identical inputs, and says how they differ.

    res = run(src)                      # src: a rendered Program (program.py); res["status"]:
      ok | noise (float mismatches explained by rounding) | invalid (eager raised: not a test)
      wrong | wrong_mutation | wrong_meta | alias | alias_outputs | fallback | crash
      (failures; worker.py adds segv and hang)

Each call compares outputs, arguments after the call (mutations), _G* globals, and which outputs alias
arguments (alias) or only each other (alias_outputs). A compiler error that made a graph run eagerly is
a `fallback` (the worker sets graphjit.config.raise_errors = 1, so every such error warns
"backend graphjit failed").

A mismatch is triaged before it counts: eager replayed (nondeterminism), the float64 reference replayed
(is compiled at least as close to it as eager?), eager on inputs perturbed by 1e-6 (does the program
amplify rounding?), eager with each rounding op's result moved by one ulp (does a discontinuity, such as
an exact comparison or the sign of a zero, amplify one op's rounding?), eager's ops checked for an
overflow the float64 run does not have. `rerun(path)` is
the entry point of a saved reproducer.
"""
import itertools
import os
import re
import sys
import time
import traceback
import warnings

from . import compare, program

FAILURES = ("wrong", "wrong_grad", "wrong_mutation", "wrong_meta", "alias", "alias_outputs", "fallback", "crash", "segv", "hang")
# a graphjit warning that its compiler (or another backend) raised and the graph ran as captured
FALLBACK = re.compile(r"graphjit: backend .* failed \(|graphjit compiler failed|Running this graph eagerly")


def run(src, backend="graphjit", triage=True, attribute=True, calls=None, grad=False):
    """The result dict of running src's call plan (or `calls`) eagerly and through graphjit.compile.
    grad (or GRAD = True in src): floating arguments require grad, and each call also backpropagates a
    fixed random projection of the floating outputs into the arguments: their gradients are compared
    too (status wrong_grad)."""
    import graphjit
    graphjit.reset()
    ns_e, ns_c = program.load(src), program.load(src)
    calls = ns_e["CALLS"] if calls is None else calls
    res = {"status": "ok", "calls_done": 0, "fallbacks": [], "mismatches": [], "aliases": None}
    counting = Counting(backend)
    compiled = graphjit.compile(ns_c["f"], backend=counting, dynamic=ns_c.get("DYNAMIC"))
    grad = grad or bool(ns_c.get("GRAD"))
    for i, (variant, seed) in enumerate(calls):
        step = _call(ns_e, ns_c, compiled, variant, seed, grad)
        res["fallbacks"] += step.pop("fallbacks", [])
        if variant == "C" and step.get("status") == "invalid":
            break                   # third sizes the program can't take (program.py): no verdict
        if step:
            res.update(step, call=i)
            break
        res["calls_done"] = i + 1
    if res["status"] == "wrong":
        _triage(src, calls[:res["call"] + 1], res, triage)
    if res["status"] == "wrong_grad":
        _triage_gradients(src, calls[:res["call"] + 1], res)
    if res["status"] == "ok" and res["fallbacks"]:
        res["status"] = "fallback"
    if res["status"] in FAILURES and attribute and backend == "graphjit":
        res["attribution"] = attribute_to(src, calls[:res.get("call", len(calls)) + 1])
    res["graphs"], res["ops"] = counting.graphs, counting.ops
    return res


def run_eager(src, grad=False):
    """The eager half of run's call plan alone (no capture, no compiler), on the same inputs, gradients
    included: the worker asks for it after a death, to tell torch's own crash from ours."""
    ns = program.load(src)
    grad = grad or bool(ns.get("GRAD"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for variant, seed in ns["CALLS"]:
            args = requiring_grad(ns["make_inputs"](seed, variant), grad)
            try:
                out = ns["f"](*args)
                if grad:
                    _gradients(out, args)
            except Exception:  # noqa: BLE001 - eager raising ends the plan, as in run
                break
    return {"status": "ok"}


class Counting:
    """A backend that counts the graphs (and their ops) it hands to the named backend."""

    def __init__(self, name):
        from graphjit.backends.registry import lookup_backend
        self.backend = lookup_backend(name)
        self.__name__ = getattr(name, "__name__", name)
        self.graphs = self.ops = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        self.ops += sum(node.op.startswith("call_") for node in gm.graph.nodes)
        return self.backend(gm, example_inputs)


def _call(ns_e, ns_c, compiled, variant, seed, grad=False):
    """One call of the plan: {} when eager and compiled agree, else the fields that say how not."""
    try:
        args_e = requiring_grad(ns_e["make_inputs"](seed, variant), grad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out_e = ns_e["f"](*args_e)
            grads_e = _gradients(out_e, args_e) if grad else None
    except Exception as e:  # noqa: BLE001 - any eager error makes the program invalid, not a failure
        return {"status": "invalid", "msg": f"eager raised {type(e).__name__}: {str(e)[:300]}"}
    args_c = requiring_grad(ns_c["make_inputs"](seed, variant), grad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out_c = compiled(*args_c)
            grads_c = _gradients(out_c, args_c) if grad else None
        except Exception as e:  # noqa: BLE001
            return {"status": "crash", "exc": type(e).__name__, "msg": str(e)[:800],
                    "tb": traceback.format_exc()[-4000:], "fallbacks": _fallbacks(caught)}
    step = {"fallbacks": _fallbacks(caught)}
    if grad:        # outputs first: a forward mismatch (and its triage) explains the gradients' too
        args_e, args_c = ([a.detach() if isinstance(a, _torch().Tensor) else a for a in args]
                          for args in (args_e, args_c))
        out_e, out_c = (_detached(o) for o in (out_e, out_c))
    st_e, st_c = compare.state(out_e, args_e, ns_e), compare.state(out_c, args_c, ns_c)
    mismatches = compare.diff(st_e, st_c)
    if mismatches:
        step.update(status="wrong", mismatches=mismatches, states=(st_e, st_c))
        return step
    if grad:
        wrong = _gradient_mismatch(grads_e, grads_c)
        if wrong:
            step.update(status="wrong_grad", msg=wrong, grads=grads_c, grads_eager=grads_e)
            return step
    aliases = compare.alias_diff(compare.aliasing(out_e, args_e), compare.aliasing(out_c, args_c))
    if aliases:
        with_args = any(r and r["storage"].startswith("arg") for d in aliases.values() for r in d.values())
        step.update(status="alias" if with_args else "alias_outputs", aliases=aliases)
    return step if len(step) > 1 or step["fallbacks"] else {}


def _torch():
    import torch
    return torch


def requiring_grad(args, grad):
    """args, with each floating tensor that is a leaf made to require grad (when grad)."""
    if not grad:
        return args
    torch = _torch()
    return tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() and a.is_leaf
                 else a for a in args)


def _float_outputs(out):
    torch = _torch()
    leaves = out if isinstance(out, (tuple, list)) else [out]
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _gradients(out, args):
    """The gradients of the arguments that require grad, of the floating outputs that require grad, each
    times a fixed random tensor (seeded by its position) summed; None where nothing requires grad. Where
    there are several such outputs, then the gradients of the same sum over some of them (_reached): the
    others get no gradient, and the backward from them must not run (eager's gradients are None, or
    finite where the unreached path has an infinite partial derivative)."""
    torch = _torch()
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = _float_outputs(out)
    if not inputs or not outs:
        return None

    def loss(positions):
        return sum((outs[i] * torch.randn(outs[i].shape, generator=torch.Generator().manual_seed(i),
                                          dtype=torch.float32).to(outs[i].dtype)).sum().float()
                   for i in positions)
    reached = _reached(outs)
    grads = torch.autograd.grad(loss(range(len(outs))), inputs, allow_unused=True, retain_graph=bool(reached))
    if not reached:
        return grads
    return grads + torch.autograd.grad(loss(reached), inputs, allow_unused=True)


def _reached(outs):
    """The positions of the outputs a second loss sums: a fixed draw by their number and sizes, of at least
    one and not all; [] for a single output."""
    torch = _torch()
    if len(outs) < 2:
        return []
    draw = torch.rand(len(outs), generator=torch.Generator().manual_seed(
        len(outs) * 7919 + sum(t.numel() for t in outs) % 7907))
    keep = [i for i in range(len(outs)) if draw[i] < 0.5]
    return keep if 0 < len(keep) < len(outs) else [int(draw.argmin())]


def _gradient_mismatch(expected, actual):
    """What differs between eager's and compiled gradients (None where nothing does): a gradient None on
    one side only (but zeros where eager has None); NaN and infinities must be where eager has them; finite values within a tolerance
    of the largest finite gradient (1e-3 for 32/64-bit floats, 3e-2 for 16-bit ones)."""
    torch = _torch()
    if (expected is None) != (actual is None):
        return f"gradients: eager {'none' if expected is None else len(expected)}, compiled " \
               f"{'none' if actual is None else len(actual)}"
    for k, (e, a) in enumerate(zip(expected or (), actual or ())):
        if e is None and a is None:
            continue
        if e is None and a is not None and not a.count_nonzero():
            # zeros where eager has None: an output of zero derivative reached (sgn's, norm(0)'s) leaves
            # no trace in the backward graph of which inputs it reaches, so those its graph gives no other
            # gradient get zeros (compiler/training.py, _without_tangents)
            continue
        if e is None or a is None:      # an optimizer skips a parameter whose gradient is None
            return f"gradient {k}: eager {'None' if e is None else 'a tensor'}, compiled " \
                   f"{'None' if a is None else 'a tensor'}"
        if e.shape != a.shape or e.dtype != a.dtype:
            return f"gradient {k}: eager {e.dtype}{list(e.shape)}, compiled {a.dtype}{list(a.shape)}"
        e64, a64 = e.double(), a.double()
        if not torch.equal(e64.isnan(), a64.isnan()) or not torch.equal(e64.isinf() * e64.sign(),
                                                                         a64.isinf() * a64.sign()):
            return f"gradient {k}: NaN or infinities differ"
        finite = e64.isfinite()
        if finite.any():
            tol, scale = _gradient_tolerance(e64, e.dtype)
            worst = (e64[finite] - a64[finite]).abs().max().item()
            if worst > tol * scale:
                return f"gradient {k}: max abs diff {worst:.3g} > {tol} x {scale:.3g}"
    return None


def _gradient_tolerance(e64, dtype):
    """(tol, scale): a compiled gradient's finite elements may differ from eager's e64 (in float64) by tol
    times scale, the largest finite magnitude of e64 (at least 1); tol is 1e-3, 3e-2 for 16-bit dtypes."""
    torch = _torch()
    finite = e64.isfinite()
    scale = max(1.0, e64[finite].abs().max().item()) if finite.any() else 1.0
    return (3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-3), scale


def _triage_gradients(src, calls, res):
    """A gradient mismatch that AOTAutograd alone gives too (its joint graph run with eager halves, no
    graphjit kernels) is torch's tracing-time backward formulas against eager's backward kernels: they
    differ on special values (prod's gradient by exclusive products where eager divides the product by
    each element, inf/inf = NaN; layer_norm's over values near 1e30, where eager's float32 variance
    overflows). Such a mismatch is noise; one AOTAutograd does not give is graphjit's."""
    ours, eager = res.pop("grads", None), res.pop("grads_eager", None)
    reference = _reference_gradients(src, calls, res)
    if reference is not None and ours is not None and _gradient_mismatch(
            [r.to(o.dtype) if r is not None and o is not None else r for r, o in zip(reference, ours)], ours) is None:
        res["status"] = "noise"
        res.setdefault("notes", []).append("the float64 reference gives these gradients: eager's are off "
                                           "(an overflow in its float32 arithmetic)")
        return
    if reference is not None and eager is not None and ours is not None and \
            _gradients_noise_dominated(eager, ours, reference):
        res["status"] = "noise"
        res.setdefault("notes", []).append("where eager's and compiled's gradients differ, eager's are mostly "
                                           "rounding error (float64 reference) and compiled's within three "
                                           "times eager's largest such error")
        return
    try:
        import graphjit
        from graphjit.compiler.training import compile_training
        graphjit.reset()
        ns = program.load(src)
        # torch's formulas as AOTAutograd gives them: unreached outputs' gradients are its zeros, so a bug
        # of compile_training's own handling of them is not taken for torch's
        compiled = graphjit.compile(ns["f"], backend=lambda gm, inputs: compile_training(
            gm, inputs, lambda graph, example_inputs: graph.forward, unreached=False), dynamic=ns.get("DYNAMIC"))
        # _gradients backpropagates twice (retain_graph): AOTAutograd refuses that for a backward it gave
        # donated buffers
        import torch._functorch.config as functorch_config
        with warnings.catch_warnings(), functorch_config.patch(donated_buffer=False):
            warnings.simplefilter("ignore")
            for variant, seed in calls:
                args = requiring_grad(ns["make_inputs"](seed, variant), True)
                reference = _gradients(compiled(*args), args)
    except Exception as e:  # noqa: BLE001
        res.setdefault("notes", []).append(f"AOTAutograd-only replay raised {type(e).__name__}: {str(e)[:200]}")
        return
    # the replay's unreached outputs get AOTAutograd's zero gradients: a None of ours there is its zeros
    if _gradient_mismatch(_none_as_zeros(reference, ours), _none_as_zeros(ours, reference)) is None:
        res["status"] = "noise"
        res.setdefault("notes", []).append("AOTAutograd with eager halves gives the same gradients: torch's "
                                           "traced backward formulas, not graphjit's kernels")
        return
    notes = res.setdefault("notes", [])
    if _eager_overflowed(src, calls, notes, grad=True):
        res["status"] = "noise"
        notes.append("eager's float32/16 forward or backward made an inf or NaN where the float64 reference "
                     "did not: past an overflow its gradients are as meaningless as compiled's")
        return
    if eager is not None and ours is not None and _gradients_explained_by_rounding(src, calls, eager, ours, notes):
        res["status"] = "noise"
        notes.append("eager's gradients move as far as compiled's differ when its ops' results move by one ulp")
        return
    if ours is not None and _gradients_of_a_nan_branch(src, calls, ours, notes):
        res["status"] = "noise"
        notes.append("eager's gradients are compiled's where its kernels take one branch at every NaN input "
                     "(NAN_BRANCH_OPS)")


# Backward ops whose CPU kernel takes another branch at a NaN input in its vectorized loop than in its scalar
# tail (the comparisons differ: x > 0 against x <= 0), so which gradient a NaN gets depends on where the
# element falls in eager's loop (the tensor's size, strides, offset): name -> (the vectorized loop's value,
# the scalar tail's) there, functions of the op's arguments.
NAN_BRANCH_OPS = {
    "elu_backward": (lambda grad, alpha, scale, input_scale, is_result, x: grad * float("nan"),
                     lambda grad, alpha, scale, input_scale, is_result, x: grad * scale),
    "hardswish_backward": (lambda grad, x: grad * float("nan"), lambda grad, x: grad),
}


def _gradients_of_a_nan_branch(src, calls, ours, notes):
    """Whether eager's gradients, replayed with every NAN_BRANCH_OPS result at a NaN input taken from one
    branch (the vectorized loop's, then the scalar tail's), are compiled's."""
    for branch in (0, 1):
        try:
            replayed = _run_last_call_in(_NanBranch(branch), src, calls, grad=True)[0]
        except Exception as e:  # noqa: BLE001
            notes.append(f"NaN branch replay raised {type(e).__name__}: {str(e)[:200]}")
            return False
        if _gradient_mismatch(replayed, ours) is None:
            return True
    return False


def _NanBranch(branch):
    """A dispatch mode giving each NAN_BRANCH_OPS result, at its NaN inputs, the value of `branch`."""
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch

    class NanBranch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            forms = NAN_BRANCH_OPS.get(func.overloadpacket.__name__)
            if forms is None or kwargs:
                return out
            x = args[-1]
            return torch.where(x.isnan(), forms[branch](*args).to(out.dtype), out)

    return NanBranch()


def _gradients_noise_dominated(eager, ours, reference):
    """Whether every gradient where eager's and compiled's differ is one whose eager value is mostly
    rounding error (its error against the float64 reference over a tenth of the reference's largest value),
    and compiled's error there is within three times the largest such error of eager's gradients (and the
    dtype's atol). A group_norm of a constant group: every gradient is 1/sqrt(eps) times rounding error,
    and a scalar's gradient sums it, closer to 0 in eager's run or in compiled's by chance (grad 10100671)."""
    torch = _torch()
    pairs = [(e, c, r) for e, c, r in zip(eager, ours, reference) if _gradient_mismatch([e], [c]) is not None]
    if not pairs or not all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.isfinite().all()
                            for trio in pairs for t in trio):
        return False
    noise = 0.0
    for e, c, r in zip(eager, ours, reference):
        if isinstance(e, torch.Tensor) and isinstance(r, torch.Tensor) and e.is_floating_point() and \
                e.shape == r.shape and e.numel() and e.isfinite().all() and r.isfinite().all():
            err = (e.double() - r.double()).abs().max().item()
            if err > 0.1 * r.double().abs().max().item():
                noise = max(noise, err)
    for e, c, r in pairs:
        ed, cd, rd = e.double(), c.double(), r.double()
        _, atol = compare.TOL.get(e.dtype, compare.TOL[torch.float32])
        if not (ed - rd).abs().max().item() > 0.1 * rd.abs().max().item() or \
                (cd - rd).abs().max().item() > 3 * noise + atol:
            return False
    return True


def _gradients_explained_by_rounding(src, calls, eager, ours, notes, replays=16):
    """Whether each gradient element where compiled differs from eager (beyond _gradient_mismatch's
    tolerance) moved by at least half that difference in one of a few eager replays whose forward and
    backward ops each round their float results by one ulp at random elements (_rounding_replay's nudge):
    compiled's kernels round a 16-bit result differently (rsqrt once, where eager's kernel rounds the sqrt
    and then its reciprocal), and the backward formula amplifies that (rsqrt's gradient is its result
    cubed). NaN and infinities are never explained this way."""
    torch = _torch()
    left = []
    for e, a in zip(eager, ours):
        if e is None or a is None or e.shape != a.shape:
            left.append(None if e is None and a is None else torch.ones((), dtype=torch.bool))
            continue
        e64, a64 = e.double(), a.double()
        if not torch.equal(e64.isnan(), a64.isnan()) or not torch.equal(e64.isinf(), a64.isinf()):
            return False
        tol, scale = _gradient_tolerance(e64, e.dtype)
        left.append(e64.isfinite() & ((a64 - e64).abs() > tol * scale))
    if any(m is not None and m.dim() == 0 for m in left):
        return False
    for k in range(replays):
        if not any(m is not None and bool(m.any()) for m in left):
            return True
        generator = torch.Generator().manual_seed(k)
        try:
            moved = _run_last_call_in(_Nudging(generator), src, calls, grad=True)[0]
        except Exception as e:  # noqa: BLE001
            notes.append(f"gradient rounding replay raised {type(e).__name__}: {str(e)[:200]}")
            return False
        for i, (e, a, p) in enumerate(zip(eager, ours, moved or ())):
            if left[i] is None or p is None or p.shape != e.shape:
                continue
            e64, a64, p64 = e.double(), a.double(), p.double()
            left[i] = left[i] & ~((p64 - e64).abs() >= 0.5 * (a64 - e64).abs())
    return not any(m is not None and bool(m.any()) for m in left)


def _none_as_zeros(grads, like):
    """grads with zeros (of like's gradient there) where it has None and like a tensor."""
    torch = _torch()
    if grads is None or like is None or len(grads) != len(like):
        return grads
    return [torch.zeros_like(o) if g is None and o is not None else g for g, o in zip(grads, like)]


def _reference_gradients(src, calls, res):
    """The gradients of the plan's last call in the float64 reference run (None where it raised)."""
    import torch
    saved = torch.get_default_dtype()
    try:
        ns = program.load(src, ref=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for variant, seed in calls:
                args = requiring_grad(ns["make_inputs"](seed, variant), True)
                torch.set_default_dtype(torch.float64)
                try:
                    grads = _gradients(ns["f"](*args), args)
                finally:
                    torch.set_default_dtype(saved)
        return grads
    except Exception as e:  # noqa: BLE001
        res.setdefault("notes", []).append(f"float64 replay raised {type(e).__name__}: {str(e)[:200]}")
        return None


def _detached(out):
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (tuple, list)):
        return type(out)(_detached(o) for o in out)
    return out


def _fallbacks(caught):
    messages = [str(w.message) for w in caught]
    return [m[:1500] for m in messages if FALLBACK.search(m)]


# ------------------------------------------------------------------------------------------------ triage

def _replay(src, calls, ref=False, perturb=None):
    """Eager run of the plan in a fresh namespace; the last call's state (perturbed inputs if asked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _replay_quietly(src, calls, ref, perturb)


def _replay_quietly(src, calls, ref, perturb):
    import torch
    ns = program.load(src, ref=ref)
    saved = torch.get_default_dtype()
    for i, (variant, seed) in enumerate(calls):
        last = i == len(calls) - 1
        args = ns["make_inputs"](seed, variant, perturb) if last and perturb else ns["make_inputs"](seed, variant)
        # the float64 reference computes in float64 throughout: values f makes in the default dtype
        # (`mask.sqrt()`, `torch.tensor([0.5])`) too, or they meet its float64 tensors as float32
        # (inputs are made as in the real run: their random draws depend on the default dtype)
        torch.set_default_dtype(torch.float64 if ref else saved)
        try:
            out = ns["f"](*args)
        finally:
            torch.set_default_dtype(saved)
    return compare.state(out, args, ns)


def _triage(src, calls, res, replay=True):
    """Marks noise mismatches with a verdict; status "noise" when all are, else a failure kind."""
    st_e, st_c = res.pop("states")
    mism, notes = res["mismatches"], []
    res["notes"] = notes
    if not replay:
        res["status"] = kind_of(mism)
        return
    try:
        if any(compare.diff(st_e, _replay(src, calls)) for _ in range(2)):
            for m in mism:
                m.verdict = "nondeterministic"
    except Exception as e:  # noqa: BLE001
        notes.append(f"eager replay raised {type(e).__name__}: {e}")
    _judge_by_reference(src, calls, st_e, st_c, mism, notes)
    _judge_by_perturbation(src, calls, st_e, st_c, mism, notes)
    _judge_by_rounding(src, calls, st_e, st_c, mism, notes)
    _judge_by_overflow(src, calls, mism, notes)
    res["status"] = "noise" if all(m.verdict for m in mism) else kind_of(mism)


def _replayed(notes, what, replay, *args, **kwargs):
    """The leafmap of replay(*args, **kwargs)'s state, or None with a note where it raised."""
    try:
        return compare.leafmap(replay(*args, **kwargs))
    except Exception as e:  # noqa: BLE001
        notes.append(f"{what} raised {type(e).__name__}: {str(e)[:200]}")
        return None


def _judge_by_reference(src, calls, st_e, st_c, mism, notes):
    """A mismatch is 'precision' where compiled's leaf is as good as eager's against the float64 replay;
    a shape mismatch (a data-dependent size: nonzero, a boolean mask) where compiled's shape is the
    float64 replay's and eager's is not (eager's float32 overflowed on the way)."""
    open_ = [m for m in mism if not m.verdict]
    if not open_:
        return
    ref = _replayed(notes, "float64 replay", _replay, src, calls, ref=True)
    if ref is None:
        return
    eager, comp = compare.leafmap(st_e), compare.leafmap(st_c)
    for m in [m for m in open_ if m.meta]:
        e, c, r = eager.get(m.path), comp.get(m.path), ref.get(m.path)
        if all(isinstance(t, _torch().Tensor) for t in (e, c, r)) and c.shape == r.shape != e.shape:
            m.verdict = "precision"
    open_ = [m for m in open_ if not m.meta]
    for m in open_:
        if m.path in ref and (compare.accept_by_ref(eager[m.path], comp[m.path], ref[m.path]) or
                              compare.noise_dominated(eager[m.path], comp[m.path], ref[m.path])):
            m.verdict = "precision"


def _judge_by_perturbation(src, calls, st_e, st_c, mism, notes):
    """A mismatch is 'unstable' when eager itself, on inputs perturbed by 1e-6 or 1e-5, moves at every
    element where compiled differs by at least 5% of compiled's difference: the program amplifies
    rounding (a floor, a comparison, a cast near a boundary)."""
    eager, comp = compare.leafmap(st_e), compare.leafmap(st_c)
    for k, eps in enumerate((1e-6, 1e-6, 1e-5)):
        if all(m.verdict or m.meta for m in mism):
            return
        moved = _replayed(notes, "perturbed replay", _replay, src, calls, perturb=(eps, k))
        if moved is None:
            continue
        for m in mism:
            if not (m.verdict or m.meta) and compare.explained_by(eager[m.path], comp[m.path], moved.get(m.path)):
                m.verdict = "unstable"


# Aten ops (overload packet names) whose float result is exact given their inputs: data movement,
# selection, sign and absolute value, rounding to integral values. A rounding replay leaves them alone.
EXACT_OPS = frozenset("""
    clone copy copy_ _to_copy contiguous alias lift_fresh detach cat stack where masked_fill masked_fill_ fill
    fill_ zero_ zeros ones full zeros_like ones_like full_like empty empty_like empty_strided scalar_tensor
    new_zeros new_ones new_full new_empty index index_select gather scatter scatter_ index_put index_put_
    masked_scatter masked_select take flip roll repeat tile constant_pad_nd reflection_pad1d
    reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d sort topk max
    min amax amin maximum minimum fmax fmin median nanmedian kthvalue mode cummax cummin max_pool2d
    max_pool2d_with_indices max_pool3d_with_indices abs abs_ neg neg_ relu relu_ clamp clamp_ clamp_min
    clamp_max hardtanh floor ceil round trunc sign sgn signbit copysign nan_to_num tril triu diag_embed
    unfold im2col narrow_copy slice_scatter select_scatter diagonal_scatter as_strided_scatter
    """.split())


# Exact ops (all in EXACT_OPS) whose result's sign at a tie of +0.0 and -0.0 is not specified: eager's CPU kernels take one
# operand in their vector loop and the other in its scalar tail (torch.maximum(+0.0, -0.0) is +0.0 for one
# element, -0.0 for twenty), the GPU's yet another. A rounding replay gives their zeros a random sign.
ZERO_TIE_OPS = frozenset("maximum minimum fmax fmin max min amax amin clamp clamp_min clamp_max".split())
assert ZERO_TIE_OPS <= EXACT_OPS

# Exact ops whose NaN results' sign eager's CPU kernels do not keep alike: a float -> bfloat16 conversion of
# a 0-d tensor gives +NaN (c10::BFloat16's 0x7FC0), its vector loop over a tensor of elements keeps the
# sign. A rounding replay gives their NaNs a random sign.
NAN_SIGN_OPS = frozenset({"_to_copy"})
assert NAN_SIGN_OPS <= EXACT_OPS


def _judge_by_rounding(src, calls, st_e, st_c, mism, notes, replays=16):
    """A mismatch is 'rounding' when, at each element where compiled differs, eager itself moved by at
    least half of compiled's difference in one of a few replays where every op that rounds its float result
    (not EXACT_OPS, not a view) moves that result by one ulp at random elements and gives a NaN it makes
    a random sign (IEEE 754 leaves a NaN's sign unspecified), and every ZERO_TIE_OPS result's zeros and NaNs
    a random sign: compiled's fused kernels round differently
    (one ulp of a transcendental, a product fused into an add, 16-bit steps rounded once), and the program
    amplifies that through a discontinuity (an exact comparison, signbit, copysign of a zero, a floor)."""
    eager, comp = compare.leafmap(st_e), compare.leafmap(st_c)
    open_ = [m for m in mism if not (m.verdict or m.meta) and m.path in eager and m.path in comp]
    left = {m.path: None for m in open_}
    for k in range(replays):
        if not open_ or all(left[m.path] is not None and not bool(left[m.path].any()) for m in open_):
            break
        moved = _replayed(notes, "rounding replay", _rounding_replay, src, calls, seed=k)
        if moved is None:
            return
        for m in open_:
            unexplained = compare.unexplained_by(eager[m.path], comp[m.path], moved.get(m.path), share=0.5)
            if unexplained is None:
                continue
            left[m.path] = unexplained if left[m.path] is None else left[m.path] & unexplained
    for m in open_:
        if left[m.path] is not None and not bool(left[m.path].any()):
            m.verdict = "rounding"


def _rounding_replay(src, calls, seed):
    """Eager run of the plan whose last call rounds each inexact op's float result by one ulp up or down
    at random elements (a NaN to a random sign); the last call's state."""
    return compare.state(*_run_last_call_in(_Nudging(_torch().Generator().manual_seed(seed)), src, calls))


def _Nudging(generator):
    """A dispatch mode that moves each inexact op's fresh float result by one ulp at random elements."""
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch

    class Nudging(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if not _computes_fresh_result(func) or (name in EXACT_OPS and name not in ZERO_TIE_OPS | NAN_SIGN_OPS):
                return out
            change = _sign_zeros if name in ZERO_TIE_OPS else _sign_nans if name in NAN_SIGN_OPS else _nudge
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if _plain_float(t) and t.numel():
                    with torch.no_grad():
                        change(t, generator)
            return out

    return Nudging()


def RoundedValues():
    """A dispatch mode that tells which storages hold values some op rounded: an op not in EXACT_OPS with a
    floating result rounds; whatever is computed from a rounded value (the result of an op reading one, a
    write in place into its storage) is rounded too. A value it does not call rounded has the same bits in
    every correct implementation: the generator bit-views only such values (a float's bits as int32 make
    one ulp a difference that no float tolerance covers).

        with RoundedValues() as mode:
            v = x.sin().view(torch.int32)
        mode.rounded(v)        # True
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    import torch

    def storage(t):
        return t.untyped_storage()._cdata

    class Rounded(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.storages = set()

        def rounded(self, t):
            return storage(t) in self.storages

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            rounds = func.overloadpacket.__name__ not in EXACT_OPS and any(t.is_floating_point() for t in outs)
            if rounds or any(self.rounded(t) for t in ins):
                self.storages.update(storage(t) for t in outs)
            return out

    return Rounded()


def _run_last_call_in(mode, src, calls, ref=False, grad=False, finite=False):
    """(out, args, namespace) of an eager run of the plan whose last call runs in a dispatch mode; with
    grad, (gradients, args, namespace), the gradients computed in the mode too (the backward's ops); with
    finite, the last call's floating inputs have their infinities and NaNs replaced by 0."""
    ns = program.load(src, ref=ref)
    saved = _torch().get_default_dtype()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for variant, seed in calls[:-1]:
            ns["f"](*requiring_grad(ns["make_inputs"](seed, variant), grad))
        args = ns["make_inputs"](calls[-1][1], calls[-1][0])
        if finite:
            for t in args:
                if isinstance(t, _torch().Tensor) and t.is_floating_point():
                    # through the whole storage: an expanded input refuses a write through itself
                    whole = _torch().empty(0, dtype=t.dtype).set_(t.untyped_storage())
                    whole.copy_(whole.nan_to_num(0.0, 0.0, 0.0))
        args = requiring_grad(args, grad)
        try:
            if ref:
                _torch().set_default_dtype(_torch().float64)
            with mode:
                out = ns["f"](*args)
                if grad:
                    out = _gradients(out, args)
        finally:
            _torch().set_default_dtype(saved)
    return out, args, ns


def _plain_float(t):
    """Whether t is a floating tensor with elements to read: not an autograd zero tensor
    (`_efficientzerotensor`, sgn's gradient), whose elements segfault when read, nor a meta tensor (the
    sizes an op on such a zero computes through the meta device)."""
    import torch
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not t._is_zerotensor() and not t.is_meta


def _computes_fresh_result(func):
    """Whether an op's results are values it computed: not a view of an input (an in-place op's is)."""
    returns = func._schema.returns
    return all(r.alias_info is None or r.alias_info.is_write for r in returns)


def _nudge(t, generator):
    """t, in place: one ulp up or down in magnitude at random nonzero finite elements (a third each way),
    NaNs given a random sign. (A float's bits as a signed integer of its width: +1 is one ulp further from
    zero, -1 one nearer, whatever its sign.)"""
    import torch
    bits = t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    step = torch.randint(-1, 2, t.shape, generator=generator)
    finite = t.isfinite() & (t != 0)
    flip = t.isnan() & (step > 0)
    bits.add_(torch.where(finite, step, 0).to(bits.dtype))
    _flip_nan_signs(t, flip)


def _flip_nan_signs(t, where):
    """t, in place: the sign bit of its NaNs at `where` flipped, through their bits (a 0-d bfloat16's -x is
    +NaN whatever x's sign: eager converts it through float32 and back, which gives +NaN)."""
    import torch
    bits = t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    bits.copy_(torch.where(where & t.isnan(), bits ^ torch.iinfo(bits.dtype).min, bits))


def _sign_zeros(t, generator, zeros=True):
    """t, in place: its zeros (unless not `zeros`) and NaNs given a random sign (eager's CPU minimum gives a
    NaN with the sign bit set in its vector loop, the NaN operand itself in its scalar tail)."""
    import torch
    negative = torch.randint(0, 2, t.shape, generator=generator).bool()
    if zeros:
        t.copy_(torch.where(t == 0, torch.where(negative, -0.0, 0.0).to(t.dtype), t))
    _flip_nan_signs(t, negative)


def _sign_nans(t, generator):
    _sign_zeros(t, generator, zeros=False)


def _judge_by_overflow(src, calls, mism, notes):
    """All open mismatches of values, and of shapes (a size that depends on the values: nonzero, a boolean
    mask), are 'overflow' when eager's float32/16 run made inf or NaN in some op where the float64
    reference did not: past an overflow, the compiled result is as meaningless as eager's (layer_norm of a
    row near 1e30: eager's float32 variance gives NaN, compiled's 0, the float64 reference finite values;
    a mask of them then counts differently)."""
    judged = [m for m in mism if not m.verdict and (not m.meta or m.msg.startswith("shape "))]
    if judged and _eager_overflowed(src, calls, notes):
        for m in judged:
            m.verdict = "overflow"


def _eager_overflowed(src, calls, notes, grad=False):
    """Whether the eager replay (with grad: forward and backward) made an inf or NaN in some op where the
    float64 reference's did not (_overflowed); False, with a note, where a replay raised.
    An input's inf or NaN can hide an overflow of its finite part: a sum of -3e38, -3e38 and inf is inf or
    NaN by the order it is added in (float32 overflows to -inf on the way, float64 does not), while both
    logs show the one non-finite sum. So where the plain replays show no overflow, they run again with the
    inputs' infinities and NaNs replaced by 0 (triton 10302233)."""
    for finite in (False, True):
        try:
            low = _nonfinite_log(src, calls, False, grad, finite)
            ref = _nonfinite_log(src, calls, True, grad, finite)
        except Exception as e:  # noqa: BLE001
            notes.append(f"overflow replay raised {type(e).__name__}: {str(e)[:200]}")
            return False
        if _overflowed(low, ref):
            return True
    return False


def _overflowed(low, ref):
    """Whether the float32/16 run's _nonfinite_log shows an op making more infs or NaNs than the float64
    reference's same op. The logs align op by op once dtype conversions are left out (a float64 run
    converts where a float32 one has nothing to do), as far as their ops are the same (a backward's ops may
    differ past an overflow: a formula takes another path); where they part with no such op found, whether
    the float32 run made any where the reference made none."""
    low, ref = ([(name, n) for name, n in log if name not in CONVERSIONS] for log in (low, ref))
    same = list(itertools.takewhile(lambda pair: pair[0][0] == pair[1][0], zip(low, ref)))
    if any(a > b for (_, a), (_, b) in same):
        return True
    if len(same) == len(low) == len(ref):
        return False
    return sum(n for _, n in low) > 0 == sum(n for _, n in ref)


CONVERSIONS = frozenset(("_to_copy", "to", "copy_", "_copy_from_and_resize", "alias", "detach"))


def _nonfinite_log(src, calls, ref, grad=False, finite=False):
    """(op name, how many non-finite elements it produced) for each float op of an eager replay, in order."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    import torch
    log = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            log.extend((func.overloadpacket.__name__, int((~t.isfinite()).sum())) for t in tree_leaves(out)
                       if _plain_float(t))
            return out

    _run_last_call_in(Record(), src, calls, ref, grad, finite)
    return log


def kind_of(mism):
    """The failure kind of a list of mismatches, the genuine ones (no verdict) deciding."""
    real = [m for m in mism if not m.verdict]
    if any(m.meta for m in real):
        return "wrong_meta"
    return "wrong" if any(m.path.startswith("out") for m in real) else "wrong_mutation"


def attribute_to(src, calls):
    """The same plan with capture-only backends: "ok" there puts the bug in graphjit's compiler."""
    out = {}
    for backend in ("eager", "aot_eager"):
        try:
            out[backend] = run(src, backend=backend, triage=True, attribute=False, calls=calls)["status"]
        except Exception as e:  # noqa: BLE001
            out[backend] = f"harness error {type(e).__name__}: {e}"
    return out


# ------------------------------------------------------------------------------------------------ report

def describe(res):
    """A few lines saying what went wrong."""
    lines = [f"status: {res['status']}" + (f" at call {res['call']}" if "call" in res else "")]
    if res.get("exc"):
        lines.append(f"  {res['exc']}: {res.get('msg', '')[:600]}")
    elif res.get("msg"):
        lines.append(f"  {res['msg'][:600]}")
    lines += [f"  {m}" for m in res.get("mismatches", [])[:6]]
    lines += [f"  compiler fallback: {f.splitlines()[0][:400]}" for f in res.get("fallbacks", [])[:3]]
    if res.get("aliases"):
        lines.append(f"  output aliasing differs: {res['aliases']}")
    lines += [f"  note: {n}" for n in res.get("notes", [])]
    if res.get("attribution"):
        lines.append(f"  attribution (same plan, capture-only backends): {res['attribution']}")
    return "\n".join(lines)


def setup_process(triton=False):
    """Process-wide settings of a fuzz process, before graphjit is imported: compiler errors raise (and so
    warn as fallbacks), one thread (deterministic eager reductions), Triton's interpreter if asked."""
    os.environ["GRAPHJIT_COMPILER_RAISE"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if triton:
        os.environ["GRAPHJIT_TRITON_CPU"] = "1"
    import torch
    torch.set_num_threads(1)
    import logging
    logging.getLogger("torch.__trace").propagate = False
    from graphjit import config
    config.raise_errors = 1


def rerun(path):
    """A reproducer's main: runs its plan with the backend named in argv[1] (default: graphjit for tensor
    programs, eager for python ones); exit 1 while it fails."""
    src = open(path).read()
    default = "eager" if "\nMODE = 'python'" in src else "graphjit"
    backend = sys.argv[1] if len(sys.argv) > 1 else default
    setup_process(triton="\nTRITON = True" in src)
    start = time.perf_counter()
    res = run(src, backend=backend, triage=True, attribute=False)
    print(describe(res))
    print(f"({time.perf_counter() - start:.1f} s)")
    return 1 if res["status"] in FAILURES else 0
