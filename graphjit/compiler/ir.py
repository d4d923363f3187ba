"""graphjit's loop-level IR: buffers, and the pointwise/reduction nodes that compute them.

A node's body is a Python function of a loop index that calls `ops.load`, `ops.add`, `ops.exp` ... on
whatever `ops` handler is installed. The same body runs under different handlers: RecordingOps collects
what it reads and how much work it does, the printer below renders it, codegen/cpp.py prints C++.

    >>> x = InputBuffer("arg0", Layout.contiguous([4, 8], torch.float32), position=0)
    >>> y = Pointwise((sympy.Integer(4), sympy.Integer(8)), torch.float32, torch.device("cpu"),
    ...               lambda idx: ops.add(ops.sin(full_view(x).load(idx)), ops.constant(1.0, torch.float32)))
    >>> print(format_body(y.inner_fn, y.sizes))        # doctest: +NORMALIZE_WHITESPACE
    (x0, x1):
        tmp0 = load(arg0, 8*x0 + x1)
        tmp1 = sin(tmp0)
        tmp2 = constant(1.0, float32)
        tmp3 = add(tmp1, tmp2)
        -> tmp3

Sizes, strides and index expressions are sympy expressions (plain integers today, symbols later).
Views (permute, expand, slice, reshape ...) never copy: on a materialized buffer they are a StorageView
(new sizes/strides/offset over the same buffer); on a lazy value they rewrite the index its loader gets.
"""
import contextlib
import dataclasses
import functools
import itertools
import math
from typing import Callable

import sympy
import torch

# ---------------------------------------------------------------------------------------------------------
# Index math
# ---------------------------------------------------------------------------------------------------------


def index_symbol(name):
    """A loop variable: an integer >= 0."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def as_expr(value):
    """value as a sympy expression: an int, a sympy expression, or a SymInt (its expression over the
    ShapeEnv's size symbols, with the replacements the ShapeEnv has learned applied)."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, torch.SymInt):
        node = value.node
        env = node.shape_env
        if env is None:
            return _from_torch(node.expr)
        expr = env.replace(node.expr)
        if not (expr.is_Integer or expr.is_Symbol):
            if expr not in _known_ones:
                _known_ones[expr] = _known(env, sympy.Eq(expr, 1))
            if _known_ones[expr]:
                return sympy.Integer(1)     # s // 3 where the trace guarded it to be 1: a plain 1 to the IR
        return _from_torch(expr, env)
    return sympy.Integer(value)


def _known(env, cond):
    """Whether the ShapeEnv already knows cond to hold (from its ranges and guards), adding no guard."""
    try:
        known = env._maybe_evaluate_static(cond, axioms=tuple(env.get_axioms()))
    except Exception:      # noqa: BLE001 -- a private API: unknown is the safe answer
        return False
    return known is not None and bool(known)


def _from_torch(expr, env=None):
    """A ShapeEnv expression in graphjit's index functions: torch's FloorDiv and ModularIndexing become
    ours where their operands are proven non-negative (C's truncating division is the floor there); a Max
    or Min whose winner `env` proves from its ranges and guards (the contiguous stride Max(1, n) of a dim
    padded to a multiple of 8) becomes that argument; anything else but sums, products and powers of
    symbols and integers is StaticOnly."""
    def convert(e):
        if e.is_Symbol or e.is_Integer:
            return e
        if type(e).__name__ in ("Max", "Min") and env is not None:
            return convert(_proven_extreme(env, e))
        args = [convert(a) for a in e.args]
        name = type(e).__name__
        if isinstance(e, (sympy.Add, sympy.Mul)) or (isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0):
            return e.func(*args)
        if name in ("FloorDiv", "CleanDiv", "ModularIndexing", "Mod", "PythonMod") and \
                not all(_nonnegative(a, env) for a in args):
            # ours print as C's truncating / and %, the floor only for non-negative operands (a roll by an
            # int symbol larger than its dim: (n - s) % n)
            raise StaticOnly(f"size expression {expr}: {name} of an operand not proven non-negative")
        if name in ("FloorDiv", "CleanDiv") and len(args) == 2:
            return FloorDiv(*args)
        if name == "ModularIndexing" and len(args) == 3:
            return Mod(FloorDiv(args[0], args[1]), args[2])
        if name in ("Mod", "PythonMod") and len(args) == 2:
            return Mod(*args)
        raise StaticOnly(f"size expression {expr} ({name})")
    return convert(expr)


def _nonnegative(e, env):
    """Whether e >= 0, by its symbols' assumptions (sizes are) or, failing those, env's ranges and guards."""
    if e.is_nonnegative:
        return True
    return env is not None and _known(env, sympy.Ge(e, 0))


def _proven_extreme(env, e):
    """The argument of a Max (Min) that env proves at least (at most) every other one. Where none is
    proven, the one that wins for the example sizes, with guards that it wins (MPT's slice
    `bias[:, max(0, n_max - n):]`: the graph serves the sizes for which that argument is the winner, and
    other sizes get an entry of their own); StaticOnly where the ShapeEnv cannot guard on it."""
    is_max = type(e).__name__ == "Max"
    bigger = sympy.Ge if is_max else sympy.Le
    for candidate in e.args:
        if all(other is candidate or _known(env, bigger(candidate, other)) for other in e.args):
            return candidate
    try:
        values = example_values(env)
        hints = [int(a.xreplace(values)) for a in e.args]
        winner = e.args[hints.index(max(hints) if is_max else min(hints))]
        for other in e.args:
            if other is not winner and not env.evaluate_expr(bigger(winner, other)):
                raise ValueError(f"the ShapeEnv refuted {bigger(winner, other)}")
    except Exception as err:    # noqa: BLE001 -- a symbol without an example value, a ShapeEnv refusal
        raise StaticOnly(f"size expression {e}: no argument of the {type(e).__name__} is proven the winner "
                         f"({type(err).__name__}: {err})") from err
    return winner


class StaticOnly(Exception):
    """A graph with size symbols asks something of its sizes that this compiler answers only for concrete
    ones (an unrolled loop over a dim, a stack array of a dim's length). The caller compiles the graph
    per set of concrete sizes instead (backends/dynamic.PerSize)."""


@dataclasses.dataclass(frozen=True)
class SizeFloat:
    """A float computed from size symbols (attention's 1/sqrt(head size)): an extern call's argument,
    which the wrapper computes per call. Kernels never see one (lowerings refuse it). `steps`, where known:
    the graph's own operations that compute it (lowering.float_steps), which the wrapper replays in their
    order; sympy's expression rewrites them (0.05 * (1 + c) as 0.05*c + 0.05), and Python's floats then
    round otherwise than eager's."""
    expr: sympy.Expr
    steps: tuple = dataclasses.field(default=None, compare=False)


_shape_envs = []        # the ShapeEnv whose symbols the sizes of the graph being compiled are expressions of


@contextlib.contextmanager
def sizes_of(shape_env):
    """Compiles inside run with sizes over shape_env's symbols (None: all sizes concrete)."""
    _shape_envs.append(shape_env)
    saved = dict(_ones), dict(_known_ones)
    _ones.clear()
    _known_ones.clear()
    try:
        yield
    finally:
        _shape_envs.pop()
        for cache, before in zip((_ones, _known_ones), saved):
            cache.clear()
            cache.update(before)


def size_symbols(expr):
    """The size symbols (not loop variables) expr depends on."""
    return {s for s in sympy.sympify(expr).free_symbols if not _is_loop_var(s)}


def _is_loop_var(symbol):
    return symbol.name[:1] in "xr" or symbol.name.startswith("ind")


def is_static(expr):
    return not size_symbols(expr)


def static_int(expr, what):
    """expr's value where it is a plain integer; StaticOnly (saying `what` needs it) where it has symbols."""
    expr = as_expr(expr)
    if expr.is_Integer:
        return int(expr)
    raise StaticOnly(f"{what} needs a concrete size, got {expr}")


def size_hint(expr):
    """The value of a size expression for the example inputs the graph is compiled with: for heuristics
    (how many threads, which block size), never for what the code computes."""
    expr = as_expr(expr)
    if expr.is_Integer:
        return int(expr)
    env = _shape_envs[-1] if _shape_envs else None
    if env is None:
        raise StaticOnly(f"no sizes known for {expr}")
    return int(expr.xreplace(example_values(env)))


def example_values(env):
    """symbol -> its value for the example inputs, in a ShapeEnv (backed_var_to_val on newer torch)."""
    values = getattr(env, "backed_var_to_val", None)
    return values if values is not None else env.var_to_val


def guard_bool(cond):
    """Whether a condition on sizes holds: structurally, or else as the ShapeEnv answers for the example
    inputs, recording a guard so that the compiled graph only runs on sizes for which it holds."""
    cond = sympy.sympify(cond)
    if cond is sympy.true or cond is sympy.false:
        return bool(cond)
    env = _shape_envs[-1] if _shape_envs else None
    if env is None:
        raise StaticOnly(f"cannot decide {cond}")
    return bool(env.evaluate_expr(_to_torch(cond)))


def _to_torch(expr):
    """expr with graphjit's FloorDiv and Mod as torch's (what the ShapeEnv reasons about)."""
    from torch.utils._sympy import functions
    return expr.replace(lambda e: isinstance(e, (FloorDiv, Mod)),
                        lambda e: (functions.FloorDiv if isinstance(e, FloorDiv) else functions.Mod)(*e.args))


_ones = {}        # size expression -> whether it is 1, decided for the graph being compiled
_known_ones = {}  # torch size expression -> whether the ShapeEnv already knew it to be 1


def is_one(size):
    """Whether a size is 1: an integer as it is; an expression of size symbols as the ShapeEnv knows it
    (s // 3 may be 1 for the sizes a graph was traced with: broadcasting in the trace guarded it so)."""
    size = as_expr(size)
    if size.is_Integer:
        return size == 1
    if size not in _ones:
        _ones[size] = guard_bool(sympy.Eq(size, 1))
    return _ones[size]


def sym_min(a, b):
    a, b = as_expr(a), as_expr(b)
    return a if guard_bool(sympy.Le(a, b)) else b


def sym_max(a, b):
    a, b = as_expr(a), as_expr(b)
    return a if guard_bool(sympy.Ge(a, b)) else b


def _divisible(term, divisor):
    coeff, _ = term.as_coeff_Mul()
    return coeff.is_Integer and divisor.is_Integer and int(coeff) % int(divisor) == 0


def _split_multiples(base, divisor):
    """(exact, rest) with base == sum(exact) + rest, every exact term a multiple of divisor, and rest
    non-negative wherever base is: an integer constant c splits into d*(c // d) and c % d (Python's rule,
    in [0, d)), and no split is made if a kept term has a negative coefficient. So `rest % d` and
    `rest / d` printed as C's or Triton's truncating operators are the floor ones. None: nothing to split."""
    if not divisor.is_Integer or int(divisor) <= 0:
        return None
    d = int(divisor)
    exact, kept = [], []
    for t in sympy.Add.make_args(base):
        if t.is_Integer:
            q, r = divmod(int(t), d)
            if q:
                exact.append(sympy.Integer(q * d))
            if r:
                kept.append(sympy.Integer(r))
        elif _divisible(t, divisor):
            exact.append(t)
        else:
            kept.append(t)
    if not exact or any(t.as_coeff_Mul()[0] < 0 for t in kept):
        return None
    return exact, sympy.Add(*kept)


class FloorDiv(sympy.Function):
    """floor(base / divisor) on non-negative integers; prints as C's `/`."""
    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        split = _split_multiples(base, divisor)
        if split is None:
            return None
        exact, rest = split
        # (d*a + b) // d == a + b // d; b stays non-negative, so C's truncating `/` is the floor
        return sympy.Add(*[t / divisor for t in exact]) + (FloorDiv(rest, divisor) if rest != 0 else 0)


class Mod(sympy.Function):
    """base % divisor on non-negative integers; prints as `%`. graphjit's own rather than sympy.Mod, whose
    evaluation proves facts about its arguments through sympy's assumption system: milliseconds per
    construction, and reshape chains build thousands. The rules here are structural:
    (d*a + b) % d == b % d, (e % (k*d)) % d == e % d, and constants fold."""
    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) % int(divisor))
        if not divisor.is_Integer:
            return None
        if isinstance(base, Mod) and base.args[1].is_Integer and int(base.args[1]) % int(divisor) == 0:
            return Mod(base.args[0], divisor)
        split = _split_multiples(base, divisor)
        if split is None:
            return None
        return Mod(split[1], divisor)


def format_index(e, floordiv):
    """A sympy index expression (non-negative integers) as C or Python source; `floordiv` is the
    language's integer division ("/" in C, "//" in Python: they agree on non-negative operands)."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return e.name
    if isinstance(e, sympy.Add):     # terms bind tighter than +: no parentheses needed
        return " + ".join(format_index(a, floordiv) for a in e.as_ordered_terms())
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            raise NotImplementedError(f"non-integer index expression {e}")
        factors = [_paren_index(f, floordiv) for f in sympy.Mul.make_args(rest)]
        return "*".join(([str(int(coeff))] if coeff != 1 else []) + factors)
    if isinstance(e, FloorDiv):
        return f"{_paren_index(e.args[0], floordiv)} {floordiv} {_paren_index(e.args[1], floordiv)}"
    if isinstance(e, (Mod, sympy.Mod)):
        return f"{_paren_index(e.args[0], floordiv)} % {_paren_index(e.args[1], floordiv)}"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return "*".join([_paren_index(e.base, floordiv)] * int(e.exp))
    raise NotImplementedError(f"cannot print index expression {e} ({type(e).__name__})")


def _paren_index(e, floordiv):
    text = format_index(e, floordiv)
    return text if (e.is_Atom or text.isidentifier()) else f"({text})"


def simplify_index(expr):
    return sympy.expand(as_expr(expr))


def value_range(expr, ranges):
    """(lo, hi) bounds of an index expression, given loop variable sizes {symbol: size}; None if unknown."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Symbol:
        size = ranges.get(expr)
        return (0, int(size) - 1) if size is not None and sympy.sympify(size).is_Integer else None
    if isinstance(expr, sympy.Add):
        bounds = [value_range(a, ranges) for a in expr.args]
        if any(b is None for b in bounds):
            return None
        return sum(b[0] for b in bounds), sum(b[1] for b in bounds)
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if isinstance(rest, sympy.Mul):     # a product of variables (a loop variable times a size symbol)
            return None
        inner = value_range(rest, ranges)
        if inner is None or not coeff.is_Integer:
            return None
        lo, hi = int(coeff) * inner[0], int(coeff) * inner[1]
        return min(lo, hi), max(lo, hi)
    if isinstance(expr, FloorDiv) and expr.args[1].is_Integer:
        inner = value_range(expr.args[0], ranges)
        d = int(expr.args[1])
        return None if inner is None else (inner[0] // d, inner[1] // d)
    if isinstance(expr, (Mod, sympy.Mod)) and expr.args[1].is_Integer:
        return 0, int(expr.args[1]) - 1
    return None


def simplify_with_ranges(expr, ranges):
    """Simplifies FloorDiv and Mod using the loop variables' sizes: with 0 <= r < a,
    (a*q + r) // (a*k) == q // k and (a*q + r) % (a*m) == a*(q % m) + r; and k*(e // k) + e % k == e.
    This undoes the index arithmetic of reshaping (merging then splitting dims) when the dims line up."""
    expr = sympy.sympify(expr)
    if expr.is_Atom or not ranges:
        return expr
    args = [simplify_with_ranges(a, ranges) for a in expr.args]
    if isinstance(expr, FloorDiv):
        return _simplify_floordiv(args[0], args[1], ranges)
    if isinstance(expr, (Mod, sympy.Mod)):
        return _simplify_mod(args[0], args[1], ranges)
    out = expr.func(*args)
    return _recombine(sympy.expand(out)) if isinstance(out, sympy.Add) else out


def _split_by_factor(base, a, ranges):
    """(sum of terms divisible by a, divided by a; the rest) if the rest lies in [0, a), else None."""
    big, rest = [], []
    for term in sympy.Add.make_args(sympy.expand(base)):
        (big if _divisible(term, sympy.Integer(a)) else rest).append(term)
    bounds = value_range(sympy.Add(*rest), ranges)
    if bounds is None or bounds[0] < 0 or bounds[1] >= a:
        return None
    return sympy.expand(sympy.Add(*big) / a), sympy.Add(*rest)


def _factors(base, d):
    """Candidate a (> 1, dividing d) for _split_by_factor, largest first."""
    cands = {d}
    for term in sympy.Add.make_args(sympy.expand(base)):
        coeff, _ = term.as_coeff_Mul()
        if coeff.is_Integer:
            cands.add(math.gcd(int(coeff), d))
    return sorted((c for c in cands if c > 1), reverse=True)


def _simplify_floordiv(base, divisor, ranges):
    if not divisor.is_Integer or int(divisor) <= 0:
        return FloorDiv(base, divisor)
    d = int(divisor)
    for a in _factors(base, d):
        split = _split_by_factor(base, a, ranges)
        if split is not None:
            quotient, _ = split
            if a == d:
                return quotient
            return _simplify_floordiv(quotient, sympy.Integer(d // a), ranges)
    return FloorDiv(base, divisor)


def _simplify_mod(base, modulus, ranges):
    if not modulus.is_Integer or int(modulus) <= 0:
        return Mod(base, modulus)
    m = int(modulus)
    terms = [t for t in sympy.Add.make_args(sympy.expand(base)) if not _divisible(t, modulus)]
    reduced = sympy.Add(*terms)
    bounds = value_range(reduced, ranges)
    if bounds is not None and bounds[0] >= 0:
        if bounds[1] < m:
            return reduced
        base = reduced
    # else the multiples of m stay: a Mod is printed as C's %, which is Python's only for a base >= 0 (the
    # base handed in is; without its multiples, (6 - s) % 6 became (-s) % 6, an offset below 0)
    for a in _factors(base, m):
        if a == m:
            continue
        split = _split_by_factor(base, a, ranges)
        if split is not None:
            quotient, rest = split
            return a * _simplify_mod(quotient, sympy.Integer(m // a), ranges) + rest
    return Mod(base, modulus)


def _recombine(expr):
    """c*k*FloorDiv(e, k) + c*Mod(e, k) -> c*e, inside a sum."""
    terms = list(sympy.Add.make_args(expr))
    for term in list(terms):
        coeff, rest = term.as_coeff_Mul()
        if not isinstance(rest, FloorDiv) or not rest.args[1].is_Integer or term not in terms:
            continue
        e, k = rest.args
        if coeff % k != 0:
            continue
        partner = (coeff / k) * Mod(e, k)
        if partner in terms:
            terms.remove(term)
            terms.remove(partner)
            terms.append((coeff / k) * e)
    return sympy.expand(sympy.Add(*terms))


def contiguous_strides(sizes):
    strides, acc = [], sympy.Integer(1)
    for size in reversed(sizes):
        strides.append(acc)
        acc = acc * (size if size != 0 else 1)
    return tuple(reversed(strides))


def linear_index(index, strides, offset=0):
    return simplify_index(sum((i * s for i, s in zip(index, strides)), as_expr(offset)))


def product(sizes):
    return sympy.Mul(*sizes) if sizes else sympy.Integer(1)


# ---------------------------------------------------------------------------------------------------------
# ops: the define-by-run interface
# ---------------------------------------------------------------------------------------------------------

# Pointwise math every handler understands: name -> number of value operands. A body may also call
# load, store, constant, index_expr, to_dtype, where, masked and indirect_indexing (see RecordingOps).
POINTWISE_OPS = {
    **dict.fromkeys(["neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin",
                     "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "trunc", "round", "sign",
                     "reciprocal", "logical_not", "bitwise_not", "isnan", "isinf", "square", "relu"], 1),
    **dict.fromkeys(["add", "sub", "mul", "truediv", "floordiv", "truncdiv", "remainder", "pow", "maximum",
                     "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                     "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "atan2"], 2),
}

# Ops whose result is bool whatever their operands' dtype; every other op computes in its operands' dtype
# (a lowering casts the operands to one dtype first), with torch's semantics: int8 arithmetic wraps at 8
# bits, bool + bool is a logical or. Codegens whose languages promote (C++'s int promotion, Triton's i1
# adds) restore those semantics from op_dtype.
# ops.rand(seed, offset): a float32 uniform in [0, 1) from Philox4x32-10 (Random123's counter-based generator)
# keyed by the int64 seed, counter (offset low word, offset high word, 0, 0); the first output word's top 24
# bits times 2**-24. A function of (seed, offset) alone, so a value recomputed in another kernel, or by another
# backend, is the same number (codegen/cpp.py's gj_rand, codegen/triton.py's). RAND_COST: what one costs in
# the op counts the fusion policy weighs (ten rounds of two 32-bit multiplies and some xors).
RAND_COST = 16

BOOL_RESULT_OPS = frozenset(["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                             "logical_not", "isnan", "isinf"])


def op_dtype(name, operand_dtypes):
    """The dtype of ops.<name>'s result over operands of these dtypes; None if one of them is unknown."""
    if name in BOOL_RESULT_OPS:
        return torch.bool
    if not operand_dtypes or None in operand_dtypes:
        return None
    return functools.reduce(torch.promote_types, operand_dtypes)


_handlers = []


class _Ops:
    """`ops.exp(x)` calls `exp` on the handler installed when it runs (so `ops.exp` can be passed around)."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            return getattr(_handlers[-1], name)(*args, **kwargs)
        call.__name__ = name
        return call


ops = _Ops()


@contextlib.contextmanager
def use_ops(handler):
    _handlers.append(handler)
    try:
        yield handler
    finally:
        _handlers.pop()


class RecordingOps:
    """Runs a body without computing anything: records loads, stores, index expressions and op counts.

    Values are strings naming the op that produced them, so the trace reads like the printer's.
    """

    def __init__(self, ranges=None):
        self.ranges = ranges or {}  # loop variable -> size, to simplify indices with
        self.reads = []            # (buffer name, index expr)
        self.guarded = []          # reads inside ops.masked: their index may be out of range when masked off
        self.writes = []           # (buffer name, index expr)
        self.index_exprs = []      # exprs of ops.index_expr
        self.op_counts = {}
        self._indirect = itertools.count()
        self._masked = 0

    def _count(self, name):
        self.op_counts[name] = self.op_counts.get(name, 0) + 1
        return name

    def load(self, name, index):
        self.reads.append((name, simplify_with_ranges(index, self.ranges)))
        self.guarded.append(self._masked > 0)
        return self._count("load")

    def store(self, name, index, value):
        self.writes.append((name, simplify_with_ranges(index, self.ranges)))

    def constant(self, value, dtype):
        return "constant"

    def index_expr(self, expr, dtype):
        self.index_exprs.append(simplify_with_ranges(expr, self.ranges))
        return self._count("index_expr")

    def to_dtype(self, x, dtype):
        return self._count("to_dtype")

    def where(self, cond, a, b):
        return self._count("where")

    def masked(self, mask, body, other, dtype):
        self._masked += 1
        try:
            body()
        finally:
            self._masked -= 1
        return self._count("masked")

    def indirect_indexing(self, value, size, check=True, wrap=True):
        return index_symbol(f"ind{next(self._indirect)}")

    def rand(self, seed, offset):
        self.op_counts["rand"] = self.op_counts.get("rand", 0) + RAND_COST
        return "rand"

    def __getattr__(self, name):
        if name in POINTWISE_OPS:
            return lambda *args: self._count(name)
        raise AttributeError(f"ops.{name} is not an op of graphjit's IR")

    @property
    def op_count(self):
        return sum(self.op_counts.values())


class PrintingOps:
    """Renders a body as numbered lines `tmpN = op(args)`: the readable form of IR nodes."""

    def __init__(self, ranges=None):
        self.ranges = ranges or {}
        self.lines = []
        self._ids = itertools.count()
        self._indirect = itertools.count()

    def _emit(self, text):
        name = f"tmp{next(self._ids)}"
        self.lines.append(f"{name} = {text}")
        return name

    def load(self, name, index):
        return self._emit(f"load({name}, {simplify_with_ranges(index, self.ranges)})")

    def store(self, name, index, value):
        self.lines.append(f"store({name}, {simplify_with_ranges(index, self.ranges)}, {value})")

    def constant(self, value, dtype):
        return self._emit(f"constant({value!r}, {dtype_name(dtype)})")

    def index_expr(self, expr, dtype):
        return self._emit(f"index_expr({expr}, {dtype_name(dtype)})")

    def to_dtype(self, x, dtype):
        return self._emit(f"to_dtype({x}, {dtype_name(dtype)})")

    def where(self, cond, a, b):
        return self._emit(f"where({cond}, {a}, {b})")

    def masked(self, mask, body, other, dtype):
        outer, self.lines = self.lines, []
        result = body()
        inner, self.lines = self.lines, outer
        self.lines.append(f"masked({mask}, other={other!r}):")
        self.lines += ["    " + line for line in inner] + [f"    -> {result}"]
        return self._emit(f"masked_result({result})")

    def indirect_indexing(self, value, size, check=True, wrap=True):
        sym = index_symbol(f"ind{next(self._indirect)}")
        self.lines.append(f"{sym} = indirect_indexing({value}, size={size}{'' if wrap else ', wrap=False'})")
        return sym

    def rand(self, seed, offset):
        return self._emit(f"rand({seed}, {offset})")

    def __getattr__(self, name):
        if name in POINTWISE_OPS:
            return lambda *args: self._emit(f"{name}({', '.join(map(str, args))})")
        raise AttributeError(f"ops.{name} is not an op of graphjit's IR")


def int_of(value, dtype):
    """An integer dtype's element made from a Python number: a float converts as eager's cast of a float64
    scalar does (truncated; a NaN, an infinity or a value beyond the type's range gives what the CPU's cast
    gives, x86: the lowest value), not through Python's int(), which raises or keeps every digit (1e20 into
    int64 wrapped to 7766279631452241920 in the C++ literal). On the CPU whatever the default device: eager
    converts the scalar on the host for every device (a CUDA device's own cast saturates instead)."""
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64, device="cpu").to(dtype).item()
    return int(value)


def wrap_int(value, dtype):
    """value as the integer dtype holds it: eager casts a Python scalar to the tensor's dtype (-3 with a
    uint8 tensor is 253, 256 with an int8 one is 0)."""
    info = torch.iinfo(dtype)
    return (int(value) - info.min) % (info.max - info.min + 1) + info.min


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def loop_vars(prefix, sizes):
    return [index_symbol(f"{prefix}{i}") for i in range(len(sizes))]


def format_body(fn, sizes, reduction_sizes=None):
    """The body of a node, printed with loop variables x0.. (and r0.. for a reduction's inner loop)."""
    index = loop_vars("x", sizes)
    args = [index]
    header = ", ".join(map(str, index))
    ranges = dict(zip(index, sizes))
    if reduction_sizes is not None:
        rindex = loop_vars("r", reduction_sizes)
        args.append(rindex)
        header += " | " + ", ".join(map(str, rindex))
        ranges.update(zip(rindex, reduction_sizes))
    with use_ops(PrintingOps(ranges)) as printer:
        result = fn(*args)
    return "\n".join([f"({header}):"] + ["    " + line for line in printer.lines] + [f"    -> {result}"])


def record(fn, *args, ranges=None):
    """Runs a body under RecordingOps (indices simplified with `ranges`) and returns the recorder."""
    with use_ops(RecordingOps(ranges)) as recorder:
        recorder.result = fn(*args)
    return recorder


# ---------------------------------------------------------------------------------------------------------
# Buffers: named, materialized tensors
# ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    """Sizes and strides (sympy, in elements, relative to the buffer's data pointer), dtype and device."""
    sizes: tuple
    strides: tuple
    dtype: torch.dtype
    device: torch.device = torch.device("cpu")

    @staticmethod
    def contiguous(sizes, dtype, device=torch.device("cpu")):
        sizes = tuple(as_expr(s) for s in sizes)
        return Layout(sizes, contiguous_strides(sizes), dtype, device)

    @staticmethod
    def of(tensor):
        return Layout(tuple(as_expr(s) for s in tensor.shape), tuple(as_expr(s) for s in tensor.stride()),
                      tensor.dtype, tensor.device)

    def storage_size(self):
        """Elements spanned from the data pointer: 1 + the largest offset (0 for an empty tensor)."""
        if any(s == 0 for s in self.sizes):
            return sympy.Integer(0)
        return 1 + sum(((n - 1) * st for n, st in zip(self.sizes, self.strides)), sympy.Integer(0))

    def __str__(self):
        sizes = ", ".join(map(str, self.sizes))
        strides = ", ".join(map(str, self.strides))
        return f"{dtype_name(self.dtype)}[{sizes}] strides [{strides}]"


class Buffer:
    """A tensor that exists in memory while the graph runs. Subclasses say where its values come from."""

    def __init__(self, name, layout):
        self.name = name
        self.layout = layout

    @property
    def sizes(self):
        return self.layout.sizes

    @property
    def dtype(self):
        return self.layout.dtype

    @property
    def device(self):
        return self.layout.device

    def __repr__(self):
        return f"{type(self).__name__}({self.name}: {self.layout})"


class InputBuffer(Buffer):
    """A graph input (position into the compiled function's arguments) or a constant tensor (value)."""

    def __init__(self, name, layout, position=None, value=None):
        super().__init__(name, layout)
        self.position = position
        self.value = value


class ComputedBuffer(Buffer):
    """A buffer whose elements a Pointwise or Reduction node computes."""

    def __init__(self, name, layout, data):
        super().__init__(name, layout)
        self.data = data

    def store_body(self):
        """The node's body completed with the store into this buffer, as a function of its loop vars."""
        data, layout, name = self.data, self.layout, self.name
        if isinstance(data, Pointwise):
            def body(index):
                ops.store(name, linear_index(index, layout.strides), data.inner_fn(index))
            return body
        raise TypeError("a reduction's store happens after its loop; see Reduction")


class ExternKernel:
    """A call of an ATen op on real tensors (mm, convolution, attention, and every op without a lowering).

    args/kwargs are the op's arguments with each tensor replaced by a StorageView; outputs are
    ExternOutput buffers, one per tensor in the op's result (path: indices into the result).
    """

    def __init__(self, name, op, args, kwargs, reason):
        self.name = name
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.reason = reason      # why it is an extern call: "extern op" or the missing lowering
        self.outputs = []

    def inputs(self):
        views = []
        torch.utils._pytree.tree_map(lambda a: views.append(a) if isinstance(a, StorageView) else None,
                                     (self.args, self.kwargs))
        return views

    def __repr__(self):
        return f"ExternKernel({self.name} = {self.op})"


class ExternOutput(Buffer):
    def __init__(self, name, layout, kernel, path):
        super().__init__(name, layout)
        self.kernel = kernel
        self.path = path


# ---------------------------------------------------------------------------------------------------------
# Values: what a lowering takes and returns
# ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Pointwise:
    """A lazy value: element `index` is `inner_fn(index)`. Inlined into readers until realized."""
    sizes: tuple
    dtype: torch.dtype
    device: torch.device
    inner_fn: Callable

    view_base = None      # (lazy base, view function): see _reindexed
    realized = None       # the StorageView this value was computed into, once it is
    node = None           # the fx node whose value this is (lowering.realize lays a viewed base out as it)

    def make_loader(self):
        if self.realized is not None:     # computed into a buffer: readers load it
            return self.realized.make_loader()
        return self.inner_fn

    def __str__(self):
        return f"pointwise {dtype_name(self.dtype)}[{', '.join(map(str, self.sizes))}] " + \
            format_body(self.inner_fn, self.sizes)


@dataclasses.dataclass(eq=False)
class Reduction:
    """out[index] = reduce over rindex of inner_fn(index, rindex); reduction_type: sum, max or min.

    Accumulates in acc_dtype (float32 for 16-bit floats); the result is cast to dtype.
    """
    sizes: tuple
    reduction_sizes: tuple
    reduction_type: str
    dtype: torch.dtype
    acc_dtype: torch.dtype
    device: torch.device
    inner_fn: Callable

    def __str__(self):
        return (f"reduction {self.reduction_type} {dtype_name(self.dtype)}[{', '.join(map(str, self.sizes))}] "
                f"over [{', '.join(map(str, self.reduction_sizes))}] "
                + format_body(self.inner_fn, self.sizes, self.reduction_sizes))


@dataclasses.dataclass(eq=False)
class StorageView:
    """A strided window onto a buffer: element i is at buffer.data + offset + sum(i_d * strides_d)."""
    buffer: Buffer
    sizes: tuple
    strides: tuple
    offset: sympy.Expr = sympy.Integer(0)

    @property
    def dtype(self):
        return self.buffer.dtype

    @property
    def device(self):
        return self.buffer.device

    def is_full(self):
        layout = self.buffer.layout
        return self.sizes == layout.sizes and self.strides == layout.strides and self.offset == 0

    def load(self, index):
        return ops.load(self.buffer.name, linear_index(index, self.strides, self.offset))

    def make_loader(self):
        return self.load

    def __str__(self):
        if self.is_full():
            return self.buffer.name
        return (f"{self.buffer.name}.view([{', '.join(map(str, self.sizes))}], "
                f"strides=[{', '.join(map(str, self.strides))}], offset={self.offset})")


def full_view(buffer):
    return StorageView(buffer, buffer.layout.sizes, buffer.layout.strides, sympy.Integer(0))


def is_value(x):
    return isinstance(x, (Pointwise, StorageView))


# ---------------------------------------------------------------------------------------------------------
# Views: index rewrites, never copies
# ---------------------------------------------------------------------------------------------------------


def _reindexed(x, sizes, reindex, view=None):
    """A lazy view of x: element `index` of the result is element `reindex(index)` of x.

    `view` redoes the view on a StorageView: when a lazy x is viewed without changing how many elements
    are computed (permute, reshape, expand ...), realizing the result realizes x in its own shape and
    views it, as eager would, instead of computing x through the rewritten index.

    A view without elements loads nothing: its index arithmetic may divide by a zero-size dim."""
    if any(s == 0 for s in sizes):
        return Pointwise(tuple(sizes), x.dtype, x.device, lambda index: ops.constant(0, x.dtype))
    loader = x.make_loader()
    out = Pointwise(tuple(sizes), x.dtype, x.device, lambda index: loader(reindex(index)))
    if view is not None and isinstance(x, Pointwise):
        out.view_base = (x, view)
    return out


def view_permute(x, dims):
    dims = [d % len(x.sizes) for d in dims]
    sizes = tuple(x.sizes[d] for d in dims)
    if isinstance(x, StorageView):
        return StorageView(x.buffer, sizes, tuple(x.strides[d] for d in dims), x.offset)

    def reindex(index):
        out = [None] * len(dims)
        for i, d in enumerate(dims):
            out[d] = index[i]
        return out
    return _reindexed(x, sizes, reindex, lambda base: view_permute(base, dims))


def view_expand(x, sizes):
    sizes = [as_expr(s) for s in sizes]
    lead = len(sizes) - len(x.sizes)
    sizes = tuple(x.sizes[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    if isinstance(x, StorageView):
        strides = [sympy.Integer(0)] * lead
        for i, (old, st) in enumerate(zip(x.sizes, x.strides)):
            strides.append(sympy.Integer(0) if is_one(old) and not old == sizes[lead + i] else st)
        return StorageView(x.buffer, sizes, tuple(strides), x.offset)
    return _reindexed(x, sizes, lambda index: broadcast_index(index, x.sizes, sizes),
                      lambda base: view_expand(base, sizes))


def broadcast_index(index, from_sizes, to_sizes):
    """Index into a tensor of from_sizes, broadcast (numpy rules) to to_sizes, given an index of to_sizes."""
    lead = len(to_sizes) - len(from_sizes)
    return [sympy.Integer(0) if is_one(s) else index[lead + i] for i, s in enumerate(from_sizes)]


def view_slice(x, dim, start, end, step):
    dim = dim % len(x.sizes)
    size = x.sizes[dim]
    start, end = _clamp_slice(start, end, size)
    if is_static(size) and is_static(start) and is_static(end):
        length = as_expr(max(0, -(-(int(end) - int(start)) // step)))
    elif step == 1:
        length = sym_max(end - start, 0)
    else:
        raise StaticOnly(f"a slice with step {step} of a dim of size {size}")
    sizes = tuple(length if d == dim else s for d, s in enumerate(x.sizes))
    if isinstance(x, StorageView):
        strides = tuple(st * step if d == dim else st for d, st in enumerate(x.strides))
        return StorageView(x.buffer, sizes, strides, x.offset + start * x.strides[dim])

    def reindex(index):
        return [i * step + start if d == dim else i for d, i in enumerate(index)]
    return _reindexed(x, sizes, reindex)


def _clamp_slice(start, end, size):
    """ATen's bounds of a slice: negative ends count from the back, then both are clamped to [0, size].
    Size expressions are compared through guard_bool (their signs and order guarded)."""
    start = sympy.Integer(0) if start is None else as_expr(start)
    end = size if end is None else as_expr(end)
    start = start + size if guard_bool(sympy.Lt(start, 0)) else start
    end = end + size if guard_bool(sympy.Lt(end, 0)) else end
    return sym_min(sym_max(start, 0), size), sym_min(sym_max(end, 0), size)


def view_select(x, dim, index):
    dim = dim % len(x.sizes)
    index = as_expr(index)
    index = index + x.sizes[dim] if guard_bool(sympy.Lt(index, 0)) else index
    sliced = view_slice(x, dim, index, index + 1, 1)
    return view_squeeze(sliced, [dim])


def view_unsqueeze(x, dim):
    dim = dim % (len(x.sizes) + 1)
    sizes = x.sizes[:dim] + (sympy.Integer(1),) + x.sizes[dim:]
    if isinstance(x, StorageView):
        stride = x.strides[dim] * x.sizes[dim] if dim < len(x.sizes) else sympy.Integer(1)
        return StorageView(x.buffer, sizes, x.strides[:dim] + (stride,) + x.strides[dim:], x.offset)
    return _reindexed(x, sizes, lambda index: list(index[:dim]) + list(index[dim + 1:]),
                      lambda base: view_unsqueeze(base, dim))


def view_squeeze(x, dims):
    dims = {d % len(x.sizes) for d in dims if is_one(x.sizes[d % len(x.sizes)])} if x.sizes else set()
    keep = [d for d in range(len(x.sizes)) if d not in dims]
    sizes = tuple(x.sizes[d] for d in keep)
    if isinstance(x, StorageView):
        return StorageView(x.buffer, sizes, tuple(x.strides[d] for d in keep), x.offset)

    def reindex(index):
        out = [sympy.Integer(0)] * len(x.sizes)
        for i, d in enumerate(keep):
            out[d] = index[i]
        return out
    return _reindexed(x, sizes, reindex, lambda base: view_squeeze(base, list(dims)))


def view_as_strided(x, sizes, strides, offset):
    """A StorageView of a materialized x (caller realizes x first)."""
    assert isinstance(x, StorageView)
    return StorageView(x.buffer, tuple(map(as_expr, sizes)), tuple(map(as_expr, strides)), as_expr(offset))


def infer_reshape(old_numel, sizes):
    sizes = [as_expr(s) for s in sizes]
    if -1 in sizes:
        known = product([s for s in sizes if s != -1])
        if known == 0:
            inferred = sympy.Integer(0)
        elif known.is_Integer and old_numel.is_Integer:
            inferred = sympy.Integer(int(old_numel) // int(known))
        else:
            inferred = sympy.cancel(old_numel / known)
            if not sympy.fraction(inferred)[1] == 1:
                raise StaticOnly(f"reshape of {old_numel} elements into {sizes}")
            inferred = sympy.expand(inferred)
        sizes[sizes.index(-1)] = inferred
    return tuple(sizes)


def view_reshape(x, sizes):
    sizes = infer_reshape(product(x.sizes), sizes)
    if tuple(sizes) == tuple(x.sizes):
        return x
    if len(sizes) == len(x.sizes) and all(_same(as_expr(a), as_expr(b)) for a, b in zip(sizes, x.sizes)):
        return x
    if isinstance(x, StorageView):
        strides = _reshape_strides(x.sizes, x.strides, sizes)
        if strides is not None:
            return StorageView(x.buffer, sizes, strides, x.offset)
    return _reindexed(x, sizes, _reshape_reindexer(x.sizes, sizes), lambda base: view_reshape(base, sizes))


def _reshape_strides(old_sizes, old_strides, new_sizes):
    """Strides of a view with new_sizes over the same memory, or None if no strided view exists
    (torch's computeStride: each block of old dims that is contiguous in memory is re-split). With size
    symbols, a block boundary is where strides are not provably contiguous, and a block's new dims must
    multiply to its old ones exactly (the size hints only choose where to look)."""
    # a size the ShapeEnv knows is 1 (s // 3 guarded so while tracing) is 1 here, so blocks match exactly
    old = [(sympy.Integer(1) if is_one(s) else as_expr(s), as_expr(st)) for s, st in zip(old_sizes, old_strides)]
    new = [sympy.Integer(1) if is_one(s) else as_expr(s) for s in new_sizes]
    if any(s == 0 for s in new) or not old:
        return contiguous_strides(new_sizes)
    new_strides = [None] * len(new)
    view_d = len(new) - 1
    chunk_base_stride = old[-1][1] if old else sympy.Integer(1)
    tensor_numel, view_numel = sympy.Integer(1), sympy.Integer(1)
    for tensor_d in range(len(old) - 1, -1, -1):
        tensor_numel = tensor_numel * old[tensor_d][0]
        if tensor_d == 0 or (not is_one(old[tensor_d - 1][0]) and
                             not _same(old[tensor_d - 1][1], tensor_numel * chunk_base_stride)):
            while view_d >= 0 and (size_hint(view_numel) < size_hint(tensor_numel) or is_one(new[view_d])):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel = view_numel * new[view_d]
                view_d -= 1
            if not _same(view_numel, tensor_numel):
                return None
            if tensor_d > 0:
                chunk_base_stride = old[tensor_d - 1][1]
                tensor_numel, view_numel = sympy.Integer(1), sympy.Integer(1)
    if view_d != -1:
        return None
    return tuple(simplify_index(s) for s in new_strides)


def _same(a, b):
    """Whether two size expressions are equal for all sizes the graph runs with: for all values of their
    symbols, or as the ShapeEnv already knows from the trace's guards (a reshape to the reversed shape of
    a [2, w] tensor guarded w == 2), adding no guard."""
    if sympy.expand(a - b) == 0:
        return True
    env = _shape_envs[-1] if _shape_envs else None
    return env is not None and _known(env, _to_torch(sympy.Eq(a, b)))


def _reshape_reindexer(old_sizes, new_sizes):
    """index into new_sizes -> index into old_sizes, through the row-major flat position. Memoized per
    index: every pass over the IR (recording, fusion, printing) reruns a body with the same loop
    variables, and building the floor/mod chains costs sympy far more than the lookup."""
    new_strides = contiguous_strides(new_sizes)
    old_strides = contiguous_strides(old_sizes)
    memo = {}

    def reindex(index):
        key = tuple(index)
        if key not in memo:
            flat = linear_index(index, new_strides)
            memo[key] = [_split_flat(flat, size, stride, d > 0)
                         for d, (size, stride) in enumerate(zip(old_sizes, old_strides))]
        return list(memo[key])
    return reindex


def _split_flat(flat, size, stride, wrap):
    """The position along a dim of `size` and row-major `stride` of flat position `flat`."""
    if is_one(size):
        return sympy.Integer(0)
    value = FloorDiv(flat, stride)
    return Mod(value, size) if wrap else value


# ---------------------------------------------------------------------------------------------------------
# The graph of buffers
# ---------------------------------------------------------------------------------------------------------


class LoopGraph:
    """What lowering produces: inputs, then computed buffers and extern calls in execution order, outputs.

    outputs: one entry per graph output, a StorageView (into any buffer) or a Python constant.
    """

    def __init__(self):
        self.inputs = []           # InputBuffer, in argument order (constants have position None)
        self.nodes = []            # ComputedBuffer | ExternKernel, in execution order
        self.outputs = []
        self.output_nodes = []     # per output: (fx node name, whether a placeholder, whether a view of its
        #                            first argument), None for a constant
        self.fallbacks = []        # (op name, reason) of every extern call made for a missing lowering
        self.size_inputs = []      # (position, symbol) of the int inputs that are size symbols
        self.unread_inputs = []    # positions of number inputs the graph does not read (a per-size copy's)
        self.autograd = False      # a half of a training graph (facts.GraphFacts.autograd)
        self.random_seeds = {}     # device -> the extern call drawing its random ops' seeds (one output each)
        self._names = itertools.count()

    def new_name(self, prefix="buf"):
        return f"{prefix}{next(self._names)}"

    def size_symbols(self):
        """Every size symbol the graph's sizes, strides and int inputs are expressions of."""
        found = {symbol for _, symbol in self.size_inputs if isinstance(symbol, sympy.Symbol)}
        for buf in self.buffers():
            for e in (*buf.layout.sizes, *buf.layout.strides):
                found |= size_symbols(e)
        return found

    def buffers(self):
        found = list(self.inputs)
        for node in self.nodes:
            found += node.outputs if isinstance(node, ExternKernel) else [node]
        return found

    def __str__(self):
        lines = []
        for buf in self.inputs:
            kind = f"input {buf.position}" if buf.position is not None else "constant"
            lines.append(f"{buf.name}: {buf.layout}  ({kind})")
        for node in self.nodes:
            if isinstance(node, ExternKernel):
                outs = ", ".join(f"{o.name}: {o.layout}" for o in node.outputs) or "(no tensor outputs)"
                args = ", ".join(map(str, node.args))
                lines.append(f"{outs} = extern {node.op}({args})  # {node.reason}")
            else:
                lines.append(f"{node.name}: {node.layout} = {node.data}")
        lines.append("return " + ", ".join(map(str, self.outputs)))
        return "\n".join(lines)

    def verify(self):
        """Checks the IR: every load reads a buffer defined before it, within the buffer's bounds, using
        only loop variables; sizes are sympy; dtypes supported. Raises AssertionError naming the node."""
        defined = {b.name: b for b in self.inputs}
        for node in self.nodes:
            if isinstance(node, ExternKernel):
                for view in node.inputs():
                    assert view.buffer.name in defined, f"{node.name} reads {view.buffer.name} before it exists"
                for out in node.outputs:
                    defined[out.name] = out
                continue
            assert all(isinstance(s, sympy.Expr) for s in node.layout.sizes + node.layout.strides), node
            data = node.data
            index = loop_vars("x", data.sizes)
            args = [index] + ([loop_vars("r", data.reduction_sizes)] if isinstance(data, Reduction) else [])
            sizes = dict(zip(index, data.sizes))
            if isinstance(data, Reduction):
                sizes.update(zip(args[1], data.reduction_sizes))
            rec = record(data.inner_fn, *args, ranges=sizes)
            for (name, expr), guarded in zip(rec.reads, rec.guarded):
                assert name in defined, f"{node.name} reads {name} before it is computed"
                if not guarded:
                    _check_bounds(node.name, defined[name], expr, sizes)
            defined[node.name] = node
        for out in self.outputs:
            if isinstance(out, StorageView):
                assert out.buffer.name in defined, f"output {out.buffer.name} is never computed"


def _check_bounds(node_name, buffer, expr, sizes):
    """For an affine index (non-negative coefficients of loop vars), its largest value fits the buffer."""
    expr = sympy.expand(expr)
    if not expr.free_symbols <= set(sizes) or not expr.is_polynomial(*sizes):
        return
    top = expr.xreplace({v: s - 1 for v, s in sizes.items()})
    if any(s == 0 for s in sizes.values()):
        return
    # expanded, a polynomial is a sum of coefficient * monomial: non-negative coefficients make it grow
    # with every loop variable, so its largest value is at the loops' last positions
    poly_ok = all(c >= 0 for c in expr.as_coefficients_dict().values())
    limit = buffer.layout.storage_size()
    if poly_ok and top.is_Integer and limit.is_Integer:
        assert int(top) < int(limit), \
            f"{node_name} reads {buffer.name} at offset up to {top}, beyond its {limit} elements"



def reduction_identity(reduction_type, acc_dtype):
    """What a reduction over no elements gives, and where its accumulator starts: 0 for a sum; for max
    (min) the lowest (highest) value of acc_dtype (eager raises for max/min over nothing, so only internal
    reductions, emptied by a zero-size input, return it)."""
    if reduction_type == "sum":
        return 0
    if acc_dtype == torch.bool:
        return reduction_type == "min"
    if acc_dtype.is_floating_point:
        return float("-inf") if reduction_type == "max" else float("inf")
    info = torch.iinfo(acc_dtype)
    return info.min if reduction_type == "max" else info.max
