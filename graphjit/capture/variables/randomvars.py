"""Values drawn from Python's `random` module inside a compiled frame: drawn by the entry, before its
graph runs, and fed to the graph as symbolic inputs, so a call to `random.random()` is neither a graph
break nor a constant of the graph.

While tracing, a draw (`random.random()`, `random.randint(1, 10)`, `random.choice([1, 2, 3])` ... with
constant arguments, on the module's own generator) is made on a copy of the generator, taken from
random's state when the trace began: the copy gives the example value (the SymInt's or SymFloat's hint)
and the real generator is left as it was. The entry makes the same calls on the real generator, in the
trace's order, before the graph: the values and the state random is left in are eager's.

A drawn value may not decide anything the entry checks in advance: a branch on it, an index, a call that
needs the number itself (each specializes its symbol) would need a guard on a value that only exists
after the guards ran. `SymNodeVariable` refuses such a use where it happens (symbolic.check_unspecialized:
a graph break there, with the draws before it in the graph's entry); a specialization made inside torch
is found when the trace ends (`unguarded`), and the frame is traced again (symbolic.Respecialize) with
each draw a graph break.
"""
import math
import random
import types

from .. import dynamic
from .base import Variable, unsupported
from .symbolic import DRAWS, Respecialize

# the generator's methods that give one float / one int for constant arguments
FLOAT_DRAWS = frozenset(("random", "uniform", "triangular", "gauss", "normalvariate", "lognormvariate",
                         "expovariate", "vonmisesvariate", "gammavariate", "betavariate", "paretovariate",
                         "weibullvariate"))
INT_DRAWS = frozenset(("randint", "randrange", "getrandbits"))
_INT_LIMIT = 2 ** 62        # a SymInt is an int64: larger draws run in CPython at a graph break
_ARGUMENT_LIMIT = 1e100     # arguments within it can't make a draw overflow to inf or NaN


_BOUND_METHODS = (types.MethodType, types.BuiltinMethodType)


def is_draw(value):
    """Whether `value` is a method of random's module-level generator that draws one number (asked of
    every object capture wraps: the type test comes first)."""
    if type(value) not in _BOUND_METHODS or value.__self__ is not random._inst or \
            type(random._inst) is not random.Random:
        return False
    name = getattr(value, "__name__", None)
    if name not in FLOAT_DRAWS and name not in INT_DRAWS and name != "choice":
        return False
    func = getattr(value, "__func__", None)
    return func is None or func is getattr(random.Random, name, None)


class DrawFunctionVariable(Variable):
    """`random.random`, `random.randint` ...: calling it records a draw (see the module docstring)."""

    def __init__(self, method, source):
        self.method, self.source = method, source

    def python_type(self):
        return type(self.method)

    def as_python_constant(self):
        return self.method

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.method)

    def call(self, tx, args, kwargs):
        name = self.method.__name__
        if tx.draws is None:
            unsupported(f"random.{name}(): a value it drew was used where the trace needs the number itself "
                        "(a branch, an index, a size), so each draw runs in CPython",
                        hint="keep the drawn value in tensor arithmetic, or draw it outside the compiled function")
        try:
            positional = [a.as_python_constant() for a in args]
            keywords = {k: v.as_python_constant() for k, v in kwargs.items()}
        except Exception:   # noqa: BLE001 -- any argument that is not a plain constant
            unsupported(f"random.{name}() with arguments that are not constants")
        kind = _result_kind(name, positional, keywords)
        if kind is None:
            unsupported(f"random.{name}() with these arguments gives a value that is not one int or float")
        try:
            value = getattr(tx.draw_generator(), name)(*positional, **keywords)
        except Exception as e:   # noqa: BLE001 -- eager raises it: at a graph break, CPython does
            unsupported(f"random.{name}() raised {type(e).__name__}: {e}")
        if type(value) is not kind or (kind is int and abs(value) >= _INT_LIMIT) or \
                (kind is float and not math.isfinite(value)):
            unsupported(f"random.{name}() gave {value!r}, which is not a symbolic graph input")
        return tx.add_draw(self.method, tuple(positional), keywords, value)


def _result_kind(name, args, kwargs):
    """int or float: the type every draw of `name` with these arguments gives; None if it may vary."""
    numbers = [v for v in (*args, *kwargs.values()) if type(v) in (int, float)]
    if not all(math.isfinite(v) and abs(v) <= _ARGUMENT_LIMIT for v in numbers):
        return None
    if name in FLOAT_DRAWS:
        return float
    if name in INT_DRAWS:
        if name == "getrandbits" and not (args and type(args[0]) is int and args[0] <= 62):
            return None
        return int
    seq = args[0] if args else kwargs.get("seq")
    if not isinstance(seq, (list, tuple, range)) or not seq:
        return None
    kinds = {type(v) for v in seq}
    return kinds.pop() if len(kinds) == 1 and kinds <= {int, float} else None


def drawing_function(draws):
    """The entry's `__gj_draws()`: the trace's draws on the real generator, in order."""
    calls = tuple(draws)

    def __gj_draws():
        return [method(*args, **kwargs) for method, args, kwargs in calls]
    return __gj_draws


def draw_line(count):
    """The entry's first statement: `__gj_draw0, __gj_draw1, = __gj_draws()`."""
    return "".join(f"__gj_draw{i}, " for i in range(count)) + "= __gj_draws()"


def unguarded(tracer, shape_guards):
    """shape_guards without the checks that a drawn float is finite (no draw gives NaN or an infinity: the
    arguments are finite and bounded, _result_kind); raises Respecialize if any other guard of the trace
    reads a drawn value."""
    from ..sources import DrawSource

    def drawn(source):
        while source is not None:
            if isinstance(source, DrawSource):
                return True
            source = getattr(source, "base", None)
        return False
    kept = [g for g in shape_guards if not (g[0] in (dynamic.FINITE, dynamic.NOT_NAN) and drawn(g[1][0]))]
    if any(drawn(s) for _, sources, _ in kept for s in sources) or \
            any(drawn(s) for g in tracer.guards.guards.values() for s in g.sources):
        raise Respecialize(DRAWS)
    return kept
