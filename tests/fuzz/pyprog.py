"""Seeded random Python programs around tensors (python mode): capture semantics, compiled with
backend="eager" against plain Python.

    prog = generate(seed)          # a program.Program with mode "python"

f(t, u, lst, d, box, n) takes two tensors, a list and a dict of tensors, a user object and an int, and runs
statements from TEMPLATES over typed variables: containers and their in-place methods, comprehensions,
closures (nonlocal too), user classes with attributes, dunders and properties, map/filter/zip/enumerate,
try/except, loops, globals, a counted side-effect function, prints, tensor-dependent branches. The runner
compares results, the arguments afterwards (lists, dicts, object attributes), the _G* globals (call
counts, printed text) and which outputs are the arguments. Each candidate statement is kept only if the
whole function runs in plain Python for the inputs of every variant.
"""
import random
import re
import string
import warnings

from .program import VARIANTS, Program, Stmt, load

PRELUDE = '''
import collections
import dataclasses
import functools


class _Box:
    """A user object: attributes, dunders, a method that mutates, a property."""

    def __init__(self, t, k):
        self.t = t
        self.k = k
        self.log = []

    def __add__(self, other):
        return self.t + other

    def __len__(self):
        return self.k

    def __call__(self, w):
        return w * self.k + self.t

    def scale(self, w):
        self.log.append(self.k)
        return w * self.k

    @property
    def double(self):
        return self.t * 2

    def __iter__(self):
        return iter([self.t, self.t + 1])


_P = collections.namedtuple("_P", "a b")


@dataclasses.dataclass
class _DC:
    x: object
    n: int = 0


_G_calls = [0]
_G_n = 0
_G_T = torch.tensor(1.5)
_G_list = []
_G_dict = {}


def _effect(v):
    _G_calls[0] += 1
    return v


def _helper(w, k=2, *rest, scale=1.0, **kw):
    return w * k * scale + len(rest) + len(kw)


def _gen(n):
    for i in range(n):
        yield i * 2


def make_inputs(seed, variant="A", perturb=None):
    g = torch.Generator().manual_seed(seed)
    n, size = {"A": (2, 3), "B": (3, 4), "L": (2, 3), "C": (4, 5)}[variant]
    mk = (lambda: torch.randn(size, generator=g)) if variant != "L" else \\
        (lambda: torch.randn(2 * size, generator=g)[::2])
    t, u = mk(), mk()
    return [t, u, [mk() for _ in range(n)], {f"k{i}": mk() for i in range(n)}, _Box(mk(), n), n]
'''

PARAMS = {"t": "T", "u": "T", "lst": "L", "d": "D", "box": "O", "n": "I"}

# (weight, type of $v or "" (binds nothing), code): $T $T2 $I $L $D $O $S $U are variables of that type
TEMPLATES = [
    (6, "T", "$v = $T + $T2"), (3, "T", "$v = $T * $I"), (3, "T", "$v = $T.sin() - $I"),
    (2, "T", "$v = sum($L, $T)"), (2, "T", "$v = $D.get('k0', $T)"), (2, "T", "$v = $D['k1'] if 'k1' in $D else $T"),
    (2, "T", "$v = $O + $T"), (2, "T", "$v = $O($T)"), (2, "T", "$v = $O.scale($T)"), (1, "T", "$v = $O.double"),
    (1, "T", "$v = $O.t * $O.k"), (2, "T", "$v = _helper($T, $I, $T2, scale=0.5, extra=1)"),
    (2, "T", "$v = _effect($T) * 2"), (1, "T", "$v = _G_T + $T"),
    (2, "T", "def ${v}_f(w):\n    return w * $I + $T\n$v = ${v}_f($T2)"),
    (1, "T", "$v = (lambda w: w.cos() + $I)($T)"), (1, "T", "$v = functools.reduce(lambda a, b: a + b, $L, $T)"),
    (2, "T", "$v = $T.sum() if $T.sum() > 0 else $T"), (1, "T", "$v = torch.stack($L).sum(0) if $L else $T"),
    (1, "T", "$v = $U[0] * 2"), (1, "T", "$v = max($L, key=lambda w: float(w.sum())) if $L else $T"),
    (1, "T", "$v = $T.clone()\n$v.add_($I)"),
    (2, "T", "try:\n    $v = $D['missing'] + 1\nexcept KeyError:\n    $v = $T * 3"),
    (2, "T", "try:\n    if $I > 2:\n        raise ValueError('big')\n    $v = $T + 1\n"
             "except ValueError as e:\n    $v = $T - len(str(e))"),
    (3, "T", "$v = $T\nfor i, w in enumerate($L):\n    $v = $v + w * i"),
    (2, "T", "$v = $T\nfor w, z in zip($L, reversed($L)):\n    $v = $v * 0.5 + w - z"),
    (2, "T", "$v = $T\nfor k in sorted($D):\n    $v = $v + $D[k]"),
    (1, "T", "$v = $T\nfor k, w in $D.items():\n    if k != 'k0':\n        $v = $v - w"),
    (2, "T", "$v = $T\n${v}_j = 0\nwhile ${v}_j < $I:\n    $v = $v * 1.5\n    ${v}_j += 1"),
    (2, "T", "if len($L) > $I:\n    $v = $T + 1\nelse:\n    $v = $T - 1"),
    (1, "T", "$v = $T * 2 if isinstance($L, list) else $T"), (1, "T", "$v = [*$L, $T][-1]"),
    (1, "T", "$v = _DC($T, $I)\n$v.n += 1\n$v = $v.x * $v.n"), (1, "T", "$v = next(iter($O))"),
    (1, "T", "$v = $T if $T.numel() > 2 else $T2"), (1, "T", "$v = getattr($O, 't', $T) + 0"),
    (3, "L", "$v = list(map(lambda w: w + 1, $L))"), (2, "L", "$v = [w * 2 for w in $L if w is not None]"),
    (1, "L", "$v = list(filter(lambda w: w.numel() > 0, $L))"),
    (1, "L", "$v = [w for i, w in enumerate($L) if i % 2 == 0]"), (1, "L", "$v = $L + [$T]"),
    (1, "L", "$v = sorted($L, key=lambda w: float(w[0]))"), (1, "L", "$v = list($D.values())"),
    (2, "D", "$v = {k: w * 2 for k, w in $D.items()}"), (1, "D", "$v = dict(zip(['a', 'b'], [$T, $T2]))"),
    (1, "D", "$v = {**$D, 'z': $T}"), (1, "D", "$v = dict($D)\n$v['k0'] = $T"),
    (2, "S", "$v = {len($L), $I, 3}"), (1, "S", "$v = set(range($I)) | {7}"), (1, "S", "$v = {k for k in $D}"),
    (3, "I", "$v = len($L)"), (2, "I", "$v = len($D) + $I"), (2, "I", "$v = $I * 2 - 1"), (1, "I", "$v = $I // 2"),
    (2, "I", "$v = len($O)"), (1, "I", "$v = sum(range($I))"), (1, "I", "$v = max($I, len($L))"),
    (1, "I", "$v = $T.shape[0] + $T.dim()"), (2, "I", "$v = sum(_gen($I))"), (1, "I", "$v = len($S)"),
    (1, "I", "$v = int($I in $S)"), (1, "I", "$v = $I if isinstance($O, _Box) else -1"),
    (1, "I", "$v = getattr($O, 'missing', 7)"), (1, "I", "$v = int(hasattr($O, 'k'))"), (1, "I", "$v = _G_n + $I"),
    (2, "I", "$v = 0\ndef ${v}_f():\n    nonlocal $v\n    $v += 1\n${v}_f()\n${v}_f()"),
    (1, "I", "${v}_c = [0]\ndef ${v}_inc():\n    ${v}_c[0] += 1\n    return ${v}_c[0]\n${v}_inc()\n$v = ${v}_inc()"),
    (1, "I", "$v = len(str($I)) + len(repr($S))"), (1, "I", "$v = $U[1] if len($U) > 1 else $I"),
    (2, "U", "$v = ($T, $I)"), (1, "U", "$v = tuple($L)"), (1, "U", "$v = _P($T, $I)"), (1, "U", "$v = (*$L, $T)"),
    (1, "U", "${v}_a, *${v}_r = [$I, $T, $T2]\n$v = (${v}_a, len(${v}_r))"),
    (3, "", "$L.append($T)"), (2, "", "$L.extend([$T, $T2])"), (1, "", "$L.insert(0, $T)"),
    (2, "", "if $L:\n    $L.pop()"),
    (2, "", "if $L:\n    $L[0] = $T"), (1, "", "$L.reverse()"), (1, "", "if $L:\n    del $L[0]"),
    (1, "", "$L[:] = $L[::-1]"), (1, "", "$L += [$T]"),
    (3, "", "$D['k$k'] = $T"), (1, "", "$D.pop('k0', None)"), (1, "", "$D.update(k9=$T)"),
    (1, "", "$D.setdefault('k5', $T)"), (1, "", "if 'k1' in $D:\n    del $D['k1']"),
    (2, "", "$O.k = $I"), (2, "", "$O.t = $T"), (1, "", "$O.extra = $I"), (1, "", "$O.log.append($I)"),
    (1, "", "$O.k += 1"), (1, "", "setattr($O, 'z', $T)"), (1, "", "if hasattr($O, 'extra'):\n    del $O.extra"),
    (2, "", "_G_n += $I"), (1, "", "_G_list.append($I)"), (1, "", "_G_dict['k'] = $T"), (1, "", "_effect(None)"),
    (2, "", "$T.add_($I)"), (1, "", "$T.mul_(2)"), (1, "", "$S.add($I)"),
    (2, "", "print('$v', $I, len($L), file=_G_out)"),
    # aliasing, nesting, iterators, odd corners
    (2, "L", "$v = $L"), (1, "L", "$v = $L\n$v.append($T)"), (1, "", "$D['nested'] = [$T, $I]"),
    (1, "", "$D['k0'] = $D.pop('k0', $T)"), (1, "T", "${v}_it = iter($L)\n$v = next(${v}_it, $T)"),
    (1, "T", "$v = sum((w.sum() for w in $L), $T)"), (1, "T", "$v = $T + 1 if any(w.sum() > 0 for w in $L) else $T"),
    (1, "", "$S.discard($I)"), (1, "S", "$v = $S & {1, 2, 3}"), (1, "L", "$v = [$T * i for i in sorted($S)]"),
    (1, "", "$O.t.add_(1)"), (1, "", "_Box.shared = $I"), (1, "I", "$v = getattr(_Box, 'shared', 0) + $I"),
    (1, "", "$L.sort(key=lambda w: float(w.sum()))"), (1, "", "if $L:\n    del $L[-1]"),
    (1, "T", "with torch.no_grad():\n    $v = $T * 2"), (1, "I", "$v = len($T.tolist()) + $I"),
    (1, "I", "if ($v := len($L)) > 1:\n    $v += 1"), (1, "T", "${v}_fs = [lambda w, i=i: w + i for i in range(3)]\n"
                                                           "$v = ${v}_fs[1]($T)"),
    (1, "T", "$v = functools.partial(_helper, k=3)($T)"), (2, "O", "$v = _Box($T, $I)"), (1, "", "_G_n = $I"),
    (1, "", "_G_list[:] = [$I, len($L)]"), (1, "D", "$v = $D.copy()\n$v.clear()"),
    (1, "T", "try:\n    $v = $T + 1\nfinally:\n    _G_calls[0] += 1"),
    (1, "", "def ${v}_f():\n    $L.append($T)\n${v}_f()"), (1, "T", "$v = $T if $O else $T2"),
    (1, "I", "$v = 0\nfor i in range($I + 2):\n    if i == 3:\n        break\n    $v += i\nelse:\n    $v = -1"),
    (1, "T", "$v = $T.clone()\n$v[0] = $I"), (1, "T", "$v = $T if isinstance($T, torch.Tensor) else $T2"),
    (1, "I", "$v = sum(1 for k in $D if k.startswith('k'))"), (1, "", "$D.update({'k7': $T, 'k8': $I})"),
    (1, "T", "$v = $T\nfor w in $O:\n    $v = $v + w"), (1, "L", "$v = list(reversed($L))"),
    (1, "I", "$v = [len($L), $I, 3].index(3)"), (1, "T", "$v = $T * float($I)"),
    (1, "T", "$v = torch.cat([$T] + $L) if $L else $T"), (1, "I", "$v = $O.k if hasattr($O, 'k') else 0"),
]


class PyGen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.prog = Program(mode="python", seed=seed, prelude=PRELUDE, params=list(PARAMS))
        self.types = dict(PARAMS)
        self.count = 0

    def var(self, typ, avoid=()):
        names = [n for n, t in self.types.items() if t == typ and n not in avoid]
        if not names:
            return None
        return names[-1] if self.rng.random() < 0.3 else self.rng.choice(names)

    def candidate(self):
        produces, code = self.rng.choices([(p, c) for _, p, c in TEMPLATES], weights=[w for w, _, _ in TEMPLATES])[0]
        self.count += 1
        v = f"v{self.count}"
        fill = {"v": v, "k": str(self.rng.randrange(10))}
        for slot in sorted(set(re.findall(r"\$([TILDOSU]2?)\b", code))):
            name = self.var(slot[0], avoid=[fill.get("T")] if slot == "T2" else ())
            if name is None:
                return None
            fill[slot] = name
        text = string.Template(code).safe_substitute(fill)
        uses = tuple(sorted({fill[s] for s in fill if s not in ("v", "k")}))
        return Stmt(text, (v,) if produces else (), uses, produces or "effect"), produces

    def runs(self, prog):
        """Whether f runs in plain Python for every variant's inputs."""
        try:
            ns = load(prog.source())
            for variant in VARIANTS:
                ns["f"](*ns["make_inputs"](0, variant))
            return True
        except Exception:  # noqa: BLE001 - a candidate plain Python rejects is simply not taken
            return False


def generate(seed, n_stmts=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _generate(seed, n_stmts)


def _generate(seed, n_stmts):
    g = PyGen(seed)
    g.prog.stmts.append(Stmt("global _G_n", (), (), "global"))
    target = n_stmts or g.rng.randint(3, 12)
    for _ in range(target * 10):
        if len(g.prog.stmts) > target:
            break
        made = g.candidate()
        if made is None:
            continue
        stmt, produces = made
        cand = g.prog.copy(stmts=g.prog.stmts + [stmt], returns=_returns(g, stmt))
        if g.runs(cand):
            g.prog = cand
            if produces:
                g.types[stmt.defs[0]] = produces
    seeds = [g.rng.randrange(1000) for _ in range(4)]
    g.prog.calls = [("A", seeds[0]), ("A", seeds[1]), (g.rng.choice("BL"), seeds[2])]
    if g.rng.random() < 0.3:
        g.prog.calls.append(("A", seeds[3]))
    # a last call with a third n and size (program.py's variant C), from a stream of its own
    g.prog.calls.append(("C", random.Random(seed * 7919 + 17).randrange(1000)))
    return g.prog


def _returns(g, stmt):
    defined = [n for s in g.prog.stmts + [stmt] for n in s.defs]
    chosen = defined[-3:] + [g.rng.choice(list(PARAMS))] if g.rng.random() < 0.5 else defined[-3:]
    return list(dict.fromkeys(chosen))
