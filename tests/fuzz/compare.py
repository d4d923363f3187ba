"""Comparing an eager run with a compiled one: values, dtypes and shapes, mutated arguments, aliasing.

A run's state is {"out": result, "arg": arguments, "global": the module's _G* globals}. `leaves` flattens
it into (path, leaf) pairs; `diff` lists the paths whose leaves differ. Float tensors match within TOL
(NaN == NaN, inf == inf of one sign, -0.0 == 0.0); the runner's triage then decides with a float64
replay and perturbed replays whether a float mismatch is rounding noise (`accept_by_ref`).

    diff(state(out_e, args_e, ns_e), state(out_c, args_c, ns_c))   # [] when they agree
"""
import dataclasses
import functools
import io
import types

import torch

# (rtol, atol) per float dtype
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1.6e-2, 1e-2)}
SCALARS = (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device)


@dataclasses.dataclass
class Mismatch:
    path: str
    msg: str
    meta: bool = False         # type, dtype, shape or structure: never rounding noise
    maxerr: float = 0.0
    nbad: int = 0
    verdict: str = ""          # set by triage when the mismatch is noise: nondeterministic/precision/unstable

    def __str__(self):
        return f"{self.path}: {self.msg}" + (f"  [{self.verdict}]" if self.verdict else "")


def state(out, args, ns):
    return {"out": out, "arg": list(args), "global": {k: ns[k] for k in sorted(ns) if k.startswith("_G")}}


# ------------------------------------------------------------------------------------------------ leaves

def leaves(obj, path=""):
    """(path, leaf) pairs: tensors and scalars as they are, containers and objects as a summary tuple
    (type, length or keys or attribute names) followed by their children's pairs."""
    return [(p, _summary(o)) for p, o in nodes(obj, path)]


def nodes(obj, path="", seen=frozenset()):
    """(path, object) for obj and everything reachable from it through containers and attributes."""
    yield path, obj
    if id(obj) in seen:
        return
    for suffix, child in _children(obj):
        yield from nodes(child, path + suffix, seen | {id(obj)})


_OPAQUE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType, type,
           functools.partial, io.StringIO)


def _children(obj):
    if isinstance(obj, (torch.Tensor, _OPAQUE) + SCALARS):
        return []
    if isinstance(obj, (tuple, list)):
        return [(f"[{i}]", o) for i, o in enumerate(obj)]
    if isinstance(obj, dict):
        return [(f"[{k!r}]", o) for k, o in obj.items()]
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f".{k}", attrs[k]) for k in sorted(attrs)]
    return []


def _summary(obj):
    if isinstance(obj, torch.Tensor) or isinstance(obj, SCALARS):
        return obj
    if isinstance(obj, io.StringIO):
        return ("<printed>", obj.getvalue())
    if isinstance(obj, _OPAQUE):
        return ("<callable>", getattr(obj, "__qualname__", type(obj).__name__))
    if isinstance(obj, (tuple, list)):
        return (f"<{type(obj).__name__}>", len(obj))
    if isinstance(obj, dict):
        return ("<dict>", tuple(repr(k) for k in obj))
    if isinstance(obj, (set, frozenset)):
        return (f"<{type(obj).__name__}>", tuple(sorted(repr(o) for o in obj)))
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return (f"<{type(obj).__name__}>", tuple(sorted(attrs)))
    return (f"<{type(obj).__name__}>", repr(obj))


# ------------------------------------------------------------------------------------------------ diff

def diff(eager, compiled):
    """Mismatches between two states (dicts of the same keys)."""
    found = []
    for key in eager:
        le, lc = leaves(eager[key], key), leaves(compiled[key], key)
        if [p for p, _ in le] != [p for p, _ in lc]:
            found.append(Mismatch(key, f"structure differs: {_paths(le)} vs {_paths(lc)}", meta=True))
            continue
        found += [m for (p, e), (_, c) in zip(le, lc) if (m := diff_leaf(p, e, c))]
    return found


def _paths(pairs):
    return [p for p, _ in pairs][:8]


def diff_leaf(path, e, c):
    """None if compiled leaf c matches eager leaf e, else a Mismatch."""
    if isinstance(e, torch.Tensor) and isinstance(c, torch.Tensor):
        return _diff_tensor(path, e, c)
    if type(e) is not type(c):
        return Mismatch(path, f"type {type(e).__name__} vs {type(c).__name__}", meta=True)
    if isinstance(e, float):
        if (e != e and c != c) or e == c or abs(e - c) <= 1e-5 + 1e-4 * abs(e):
            return None
        return Mismatch(path, f"{e!r} vs {c!r}", maxerr=abs(e - c), nbad=1)
    if e != c:
        return Mismatch(path, f"{e!r} vs {c!r}", meta=not isinstance(e, (int, complex)))
    return None


def _diff_tensor(path, e, c):
    for what in ("dtype", "shape", "device"):
        if getattr(e, what) != getattr(c, what):
            return Mismatch(path, f"{what} {getattr(e, what)} vs {getattr(c, what)}", meta=True)
    if e.numel() == 0:
        return None
    e, c = e.detach(), c.detach()
    if not e.is_floating_point():
        ok = e == c
    else:
        rtol, atol = TOL.get(e.dtype, TOL[torch.float32])
        ed = e.double()
        ok = close(c.double(), ed, rtol, atol, rtol * 0.1 * rms(ed))
    if bool(ok.all()):
        return None
    return _describe(path, e, c, ~ok)


def _describe(path, e, c, bad):
    ed, cd = e.double(), c.double()
    d = (cd - ed).abs()
    finite_bad = bad & d.isfinite()
    maxerr = float(d[finite_bad].max()) if bool(finite_bad.any()) else float("inf")
    first = tuple(int(i) for i in bad.nonzero()[0])
    return Mismatch(path, f"{int(bad.sum())}/{e.numel()} elements differ, max abs err {maxerr:.4g}; first at "
                          f"{first}: eager {e[first].item()!r} compiled {c[first].item()!r}",
                    maxerr=maxerr, nbad=int(bad.sum()))


def close(x, y, rtol, atol, slack=0.0):
    """Elementwise, float64 tensors: x close to y; NaN == NaN, inf == inf of the same sign."""
    both_nan = x.isnan() & y.isnan()
    finite = x.isfinite() & y.isfinite()
    return both_nan | (x == y) | (finite & ((x - y).abs() <= atol + rtol * y.abs() + slack))


def rms(t):
    t = t[t.isfinite()]
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


# ------------------------------------------------------------------------------------------------ triage

def accept_by_ref(e, c, r):
    """Whether compiled leaf c is as good as eager's e, judged by r, the float64 reference's leaf."""
    if isinstance(e, float) and isinstance(c, float) and isinstance(r, (float, int)):
        return abs(c - r) <= 3 * abs(e - r) + 1e-5 + 1e-4 * abs(r)
    if not all(isinstance(t, torch.Tensor) for t in (e, c, r)) or r.shape != c.shape:
        return False
    ed, cd, rd = e.double(), c.double(), r.double()
    if not e.is_floating_point():
        return bool(((cd == ed) | (cd == rd)).all())
    rtol, atol = TOL.get(e.dtype, TOL[torch.float32])
    slack = rtol * 0.1 * rms(rd)
    ok = close(cd, ed, rtol, atol, slack) | close(cd, rd, rtol, atol, slack)
    finite = cd.isfinite() & ed.isfinite() & rd.isfinite()
    ok |= finite & ((cd - rd).abs() <= 3 * (ed - rd).abs() + atol + rtol * rd.abs() + slack)
    ok |= ~rd.isfinite() & ~ed.isnan() & ~cd.isnan() & (ed != rd)    # float64 itself overflowed differently
    if e.dtype != torch.float64:
        # eager overflowed where float64 did not, or values within a few orders of the dtype's range (1e30,
        # -3e38 inputs): any result is as good as eager's
        big = torch.finfo(e.dtype).max / 1e3
        ok |= rd.isfinite() & ~ed.isfinite()
        ok |= (ed.abs() > big) | (rd.abs() > big)
    return bool(ok.all())


def noise_dominated(e, c, r):
    """Whether eager's leaf e is itself mostly rounding error, judged by the float64 reference r (its
    largest error is over a tenth of r's largest value: a normalization of one-element groups multiplies
    the rounding of x - mean by 1/sqrt(eps)), and compiled's c is within three times that error of r
    everywhere: then c is as good as e, element by element comparisons aside."""
    if not all(isinstance(t, torch.Tensor) for t in (e, c, r)) or not e.shape == c.shape == r.shape or \
            not e.is_floating_point() or not e.numel():
        return False
    ed, cd, rd = e.double(), c.double(), r.double()
    if not (ed.isfinite().all() and cd.isfinite().all() and rd.isfinite().all()):
        return False
    eager_err = (ed - rd).abs().max().item()
    _, atol = TOL.get(e.dtype, TOL[torch.float32])
    return eager_err > 0.1 * rd.abs().max().item() and (cd - rd).abs().max().item() <= 3 * eager_err + atol


def explained_by(e, c, p):
    """Whether eager's own leaf p on perturbed inputs moved, at every element where compiled's c differs
    from eager's e, by at least 5% of that difference (or to/from a non-finite value)."""
    unexplained = unexplained_by(e, c, p)
    return unexplained is not None and not bool(unexplained.any())


def unexplained_by(e, c, p, share=0.05):
    """The elements (a bool tensor) where compiled's c differs from eager's e and eager's own leaf p on
    perturbed inputs did not move by at least `share` of that difference; None where the leaves are no
    tensors of one shape."""
    if not all(isinstance(t, torch.Tensor) for t in (e, c, p)) or not e.shape == c.shape == p.shape:
        return None
    ed, cd, pd = e.detach().double(), c.detach().double(), p.detach().double()
    rtol, atol = TOL.get(e.dtype, TOL[torch.float32]) if e.is_floating_point() else (0.0, 0.0)
    bad = ~close(cd, ed, rtol, atol)
    finite = ed.isfinite() & cd.isfinite() & pd.isfinite()
    moved = torch.where(finite, (pd - ed).abs() >= share * (cd - ed).abs(), ~close(pd, ed, rtol, atol))
    return bad & ~moved


def leafmap(st):
    return {p: v for key in st for p, v in leaves(st[key], key)}


# ------------------------------------------------------------------------------------------------ aliasing

def aliasing(out, args):
    """How outputs share memory: {output path: {"is": path or None, "storage": path}} for each output that is
    (or shares a tensor's storage with) an argument, an object inside one, or an earlier output; a storage
    is named by the first path found holding it, arguments first."""
    by_id, by_storage = {}, {}
    for path, v in nodes(list(args), "arg"):
        if _is_object(v):
            by_id.setdefault(id(v), path)
            by_storage.setdefault(_storage(v), path)
    found = {}
    for path, v in nodes(out, "out"):
        if not _is_object(v):
            continue
        if _storage(v) in by_storage:
            found[path] = {"is": by_id.get(id(v)), "storage": by_storage[_storage(v)]}
        by_id.setdefault(id(v), path)
        by_storage.setdefault(_storage(v), path)
    return found


def alias_diff(eager, compiled):
    """Paths whose memory aliasing differs: shared with an argument or an earlier output in one run and
    not the other, or with another one, or an output that *is* an object in eager and is not compiled.
    (Compiled returning the object itself where eager returns a view of it is not counted.)"""
    bad = {}
    for path in sorted(set(eager) | set(compiled)):
        e, c = eager.get(path), compiled.get(path)
        if e is None or c is None or e["storage"] != c["storage"] or e["is"] and e["is"] != c["is"]:
            bad[path] = {"eager": e, "compiled": c}
    return bad


def _is_object(v):
    return isinstance(v, (torch.Tensor, list, dict, set)) or isinstance(getattr(v, "__dict__", None), dict) \
        and not isinstance(v, _OPAQUE)


def _storage(v):
    if isinstance(v, torch.Tensor) and v.numel():
        return ("storage", v.untyped_storage().data_ptr())
    return ("id", id(v))
