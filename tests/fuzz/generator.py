"""Seeded random tensor programs: a straight-line `def f(x1, ...)` over ops drawn from ops.py.

    prog = generate(seed)      # a program.Program
    print(prog.source())

The generator runs each candidate statement eagerly, as it goes, on the inputs of every variant (A, B and
L), so it knows each value's dtype and shape, and keeps only statements eager accepts in all three. Sizes
are symbols ("a", "b", "c") with a value per variant, so that inputs built from them broadcast together
in every variant; ops read other sizes from `.shape` in the program text.

In a program of the gradient mode (grad=True) the floating inputs require grad there too, as in
runner.run: eager refuses in-place writes into them or their views, and running stats that require grad.
A value eager cannot backpropagate from (an op without a derivative, or a value a backward saved written
in place later) is left out of the returns.
"""
import contextlib
import random
import warnings

import torch

from . import ops, runner
from .program import VARIANTS, Input, Program, Stmt, load

SYMBOLS = ("a", "b", "c")
SIZE_POOL = (0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7, 8, 11, 16)
KINDS = {"f": 12, "fpos": 1, "h": 1, "bf": 1, "d": 1, "i": 2, "i32": 1, "u8": 1, "b": 2}
LAYOUTS = {"c": 8, "t": 3, "s": 1, "o": 1, "e": 1, "p": 1, "cl": 1}
MAX_NUMEL = 4096          # larger values are rejected: small programs compile and run fast
DTYPE_KIND = {torch.float32: "f", torch.float16: "h", torch.bfloat16: "bf", torch.float64: "d",
              torch.int64: "i", torch.int32: "i32", torch.uint8: "u8", torch.bool: "b"}


def weighted(rng, table):
    return rng.choices(list(table), weights=list(table.values()))[0]


class Gen:
    """The program being built and, per variant, the namespace it has reached (inputs + defined names)."""

    def __init__(self, seed, triton=False, grad=False):
        self.rng = random.Random(seed)
        self.prog = Program(mode="tensor", seed=seed, triton=triton, grad=grad)
        self.envs = {}
        self.count = 0

    # ------------------------------------------------------------------------------------------ state

    def rebuild(self):
        """The namespaces, recomputed from scratch (after an input is added or a candidate failed)."""
        ns = load(self.prog.source())
        self.envs = {variant: self._run(ns, variant) for variant in VARIANTS}

    def _run(self, ns, variant, mode=contextlib.nullcontext()):
        """The namespace of the statements so far run (in `mode`) on variant's inputs."""
        env = dict(ns)
        try:
            inputs = runner.requiring_grad(ns["make_inputs"](0, variant), self.prog.grad)
            env.update(zip(self.prog.arg_names(), inputs))
        except Exception:  # noqa: BLE001 - an alias input invalid in this variant: left unbound
            pass
        with mode:
            for stmt in self.prog.stmts:
                exec(stmt.code, env)
        return env

    def exact(self, name):
        """Whether no op rounded the value of `name` in any variant (runner.RoundedValues): its bits are the
        same in every correct implementation."""
        ns = load(self.prog.source())
        for variant in VARIANTS:
            mode = runner.RoundedValues()
            if mode.rounded(self._run(ns, variant, mode)[name]):
                return False
        return True

    def accept(self, stmt):
        """Adds stmt if it runs in every variant and binds small tensors; otherwise leaves no trace."""
        try:
            for env in self.envs.values():
                exec(stmt.code, env)
                if not all(_small_tensor(env.get(name)) for name in stmt.defs):
                    raise ValueError("not a small tensor")
        except Exception:  # noqa: BLE001 - a candidate eager rejects is simply not taken
            self.rebuild()
            return False
        self.prog.stmts.append(stmt)
        return True

    def differentiable(self, name):
        """Whether eager's backward from value `name` into the inputs that require grad runs in every
        variant (always true for a value that does not require grad)."""
        for env in self.envs.values():
            inputs = [env[n] for n in self.prog.arg_names() if isinstance(env.get(n), torch.Tensor)]
            inputs = [t for t in inputs if t.requires_grad]
            if inputs and env[name].requires_grad:
                try:
                    torch.autograd.grad(env[name].float().sum(), inputs, allow_unused=True, retain_graph=True)
                except RuntimeError:
                    return False
        return True

    def values(self, name):
        return [env[name] for env in self.envs.values()]

    def tensors(self):
        env = self.envs["A"]
        return [n for n in env if _is_var(n) and all(isinstance(e.get(n), torch.Tensor) for e in self.envs.values())]

    # ------------------------------------------------------------------------------------------ picking

    def pick(self, pred=None, prefer_recent=True):
        """A tensor variable (pred(value) true in every variant), recent ones more often; None if none."""
        names = [n for n in self.tensors() if pred is None or all(pred(v) for v in self.values(n))]
        if not names:
            return None
        if prefer_recent and self.rng.random() < 0.5:
            return names[-1] if self.rng.random() < 0.5 else self.rng.choice(names[-3:])
        return self.rng.choice(names)

    def pick_like(self, a, pred):
        """A variable b with pred(value of a, value of b) in every variant."""
        names = [n for n in self.tensors() if all(pred(x, y) for x, y in zip(self.values(a), self.values(n)))]
        return self.rng.choice(names) if names else None

    def first(self, name):
        return self.envs["A"][name]

    def rank(self, name):
        return self.first(name).dim()

    def dim(self, name, scalar_ok=False):
        """A random valid dim of name (sometimes negative); None for a 0-d tensor unless scalar_ok."""
        r = self.rank(name)
        if r == 0:
            return self.rng.choice([0, -1]) if scalar_ok else None
        return self.rng.randrange(-r, r)

    def new(self):
        self.count += 1
        return f"v{self.count}"

    def stmt(self, code, defs=(), tag=""):
        names = set(self.tensors())
        uses = tuple(sorted(n for n in names if _mentions(code, n)))
        return Stmt(code, tuple(defs), uses, tag)

    # ------------------------------------------------------------------------------------------ inputs

    def token(self, name, d):
        """A size symbol (or int) equal to name.shape[d] in every variant, or None."""
        sizes = [v.shape[d] for v in self.values(name)]
        for tok in SYMBOLS + (1, 2, 3, 0):
            if [self.prog.sizes[v].get(tok, tok) for v in VARIANTS] == sizes:
                return tok
        return None

    def add_input(self, kind, dims, layout="c", special=0):
        """A new argument; returns its name."""
        name = f"x{len(self.prog.inputs) + 1}"
        while any(i.name == name for i in self.prog.inputs):
            name = f"x{int(name[1:]) + 1}"
        self.prog.inputs.append(Input(name, kind, tuple(dims), {v: layout for v in VARIANTS}, special))
        self.rebuild()
        return name

    def alias_input(self):
        """A view of an existing argument as another argument (kept only if valid in every variant)."""
        src = self.rng.choice([i.name for i in self.prog.inputs if i.kind not in ("alias", "scalar")])
        expr = self.rng.choice(["{}", "{}.t()", "{}[1:]", "{}.view(-1)", "{}[0]", "{}[..., ::2]", "{}.unsqueeze(0)"])
        name = self.add_input("alias", (src, expr))
        if not all(isinstance(e.get(name), torch.Tensor) for e in self.envs.values()):
            self.prog.inputs.pop()
            self.rebuild()

    def scalar_input(self):
        """A Python float argument, another value each call: the op table's scalars use it at times."""
        self.add_input("scalar", (), "c", self.rng.choice([0, 0, 1]))

    def scalar_inputs(self):
        return [i.name for i in self.prog.inputs if i.kind == "scalar"]

    def random_input(self):
        r = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
        dims = tuple(self.rng.choice(SYMBOLS + SYMBOLS + (1, 2, 3)) for _ in range(r))
        special = self.rng.choice([0, 0, 0, 1, 2, 4])
        name = self.add_input(weighted(self.rng, KINDS), dims, weighted(self.rng, LAYOUTS), special)
        other = self.rng.choice([k for k in LAYOUTS if k != self.prog.inputs[-1].layouts["A"]])
        self.prog.inputs[-1].layouts["L"] = other
        self.rebuild()
        return name


def _small_tensor(value):
    return isinstance(value, torch.Tensor) and value.numel() <= MAX_NUMEL


def _is_var(name):
    return name[:1] in "xv" and name[1:].isdigit()


def _mentions(code, name):
    import re
    return re.search(rf"\b{name}\b", code) is not None


def _sizes(rng):
    """Per-variant values of the size symbols: B changes at least one; L is A."""
    a = {s: rng.choice(SIZE_POOL[1:] if rng.random() < 0.9 else SIZE_POOL) for s in SYMBOLS}
    b = dict(a)
    while b == a:
        b = {s: rng.choice(SIZE_POOL[1:]) if rng.random() < 0.6 else a[s] for s in SYMBOLS}
    return {"A": a, "B": b, "L": dict(a)}


def generate(seed, n_stmts=None, triton=False, float_args=False, grad=False):
    """A random program, valid in eager for the inputs of every variant (most of the time for others).
    float_args: the program also takes a Python float, another value each call, that scalar operands and
    the float_arg ops read (a symbolic graph input once it has changed); off, a seed's program is what it
    always was. grad: a program of the gradient mode (Program.grad): statements are checked with floating
    inputs requiring grad, and only values eager can backpropagate from are returned."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # eager's own warnings about candidate statements
        return _generate(seed, n_stmts, triton, float_args, grad)


def _generate(seed, n_stmts, triton, float_args=False, grad=False):
    g = Gen(seed, triton, grad)
    g.prog.sizes = _sizes(g.rng)
    for _ in range(g.rng.choice([1, 2, 2, 3])):
        g.random_input()
    if g.rng.random() < 0.1:
        g.alias_input()
    if float_args:
        g.scalar_input()
    while any(v.numel() > MAX_NUMEL for n in g.tensors() for v in g.values(n)):   # too big: start over
        g.prog.inputs.clear()
        g.prog.sizes = _sizes(g.rng)
        g.random_input()
    target = n_stmts or g.rng.randint(2, 10)
    for _ in range(target * 25):
        if len(g.prog.stmts) >= target:
            break
        n_inputs = len(g.prog.inputs)
        stmt = ops.choose(g.rng, float_args)(g)
        if stmt is None or not g.accept(stmt):
            if len(g.prog.inputs) > n_inputs:      # weights made for a candidate not taken
                del g.prog.inputs[n_inputs:]
                g.rebuild()
    g.prog.returns = [n for n in _returns(g) if not grad or g.differentiable(n)]
    g.prog.calls = _calls(g.rng)
    _add_third_sizes(g.prog, seed)
    return g.prog


def _add_third_sizes(prog, seed):
    """Variant C (see program.py) and a last call with it. Its own random stream, so that the rest of a
    seed's program is what it was without it."""
    rng = random.Random(seed * 7919 + 17)
    a, b = prog.sizes["A"], prog.sizes["B"]
    c = {}
    for s, v in b.items():
        pool = [n for n in SIZE_POOL if n > 1 and n not in (a[s], v)]
        c[s] = rng.choice(pool) if a[s] != v else v
    prog.sizes["C"] = c
    for inp in prog.inputs:
        inp.layouts["C"] = inp.layouts["B"]
    prog.calls.append(("C", rng.randrange(1000)))


def _returns(g):
    """Every value nothing reads later (up to 4), one more at random, sometimes an argument."""
    defined = [n for s in g.prog.stmts for n in s.defs if n in g.tensors()]
    read = {n for s in g.prog.stmts for n in s.uses}
    sinks = [n for n in defined if n not in read][-4:]
    chosen = sinks + g.rng.sample(defined, min(len(defined), g.rng.choice([0, 1])))
    if g.rng.random() < 0.15:
        chosen.append(g.rng.choice(g.prog.arg_names()))
    return list(dict.fromkeys(chosen))


def _calls(rng):
    """Same shapes twice, then a new variant (a recompile), sometimes back to A."""
    seeds = [rng.randrange(1000) for _ in range(4)]
    plan = [("A", seeds[0]), ("A", seeds[1]), (rng.choice("BBL"), seeds[2])]
    if rng.random() < 0.3:
        plan.append(("A", seeds[3]))
    return plan
