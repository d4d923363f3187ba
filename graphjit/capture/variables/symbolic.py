"""Symbolic Python numbers: a size of a dynamic dim, an int that changes between calls, and what is
computed from them (SymInt / SymFloat / SymBool of the trace's ShapeEnv, see capture/dynamic.py).

Arithmetic and comparisons stay symbolic and become graph nodes, so `x.view(n, -1)` or `torch.arange(n)`
work for every n. Anything else the program does with the value (an index into a list, `range(n)`, a
branch, a call we don't model) makes it a constant: the ShapeEnv records a guard that the value is what
it was while tracing (or that the branch goes the same way), so the entry never runs for a value the
trace didn't assume.
"""
import math

import torch

from .base import ConstantVariable, Variable
from ...exc import Unsupported

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_NUMBERS = (int, float, bool)

# Python int/float functions that have symbolic versions in torch
_SYM_FUNCTIONS = {min: torch.sym_min, max: torch.sym_max, int: torch.sym_int, float: torch.sym_float,
                  math.floor: math.floor, math.ceil: math.ceil}


_PYTHON_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


DRAWS, FLOATS = "draws", "floats"      # the kinds of kept-unspecialized values (keep_unspecialized)


class Respecialize(BaseException):   # passes through the internal-error handlers, as frame's retries do
    """A trace used a value of kind `kind` (DRAWS or FLOATS) kept unspecialized as a plain number where no
    graph break can be made: trace the frame again without keeping that kind (draws from random become
    graph breaks; floats specialize with a guard on their value)."""

    def __init__(self, kind):
        super().__init__(kind)
        self.kind = kind


_UNSPECIALIZED = "_graphjit_unspecialized"    # ShapeEnv attribute: {symbol: (what it is, kind)}


def keep_unspecialized(sym, what, kind):
    """Make a use of `sym` (and of what is computed from it) as a plain number a graph break where it
    happens (check_unspecialized) instead of a guard on its value. For values no guard can check (kind
    DRAWS: drawn from random after the guards ran; a branch on one breaks too) or that change between
    calls (kind FLOATS: a float on its first recompile), where a guard on the value would fail next call;
    a branch on such a float guards a relation (`s > 1`), which the next value may well pass."""
    env = sym.node.shape_env
    if getattr(env, _UNSPECIALIZED, None) is None:
        setattr(env, _UNSPECIALIZED, {})
    for symbol in sym.node.expr.free_symbols:
        getattr(env, _UNSPECIALIZED)[symbol] = (what, kind)


def unspecialized_symbols(shape_env):
    return getattr(shape_env, _UNSPECIALIZED, None) or {}


def check_unspecialized(sym, use, branch=False):
    """Refuse `use` (the number itself; with branch=True, a branch on it) of a value computed from a
    kept-unspecialized symbol."""
    kept = unspecialized_symbols(sym.node.shape_env)
    if not kept:
        return
    hit = [kept[s] for s in sym.node.expr.free_symbols if s in kept and not (branch and kept[s][1] == FLOATS)]
    if hit:
        what, kind = hit[0]
        error = Unsupported(f"{use} of {what}",
                            hint="a guard on the value could not hold (or be checked) on the next call: the "
                                 "frame breaks here, and CPython does what the value decides")
        error.respecialize = kind      # where no break can be made here, the frame is traced again (frame.py)
        raise error


def specialize(value):
    """A SymInt/SymFloat/SymBool as the plain number it is while tracing; the ShapeEnv guards that it
    stays so."""
    return _PYTHON_TYPES[type(value)](value)


def is_symbolic(value):
    return isinstance(value, SYM_TYPES) and not _is_constant_sym(value)


def _is_constant_sym(value):
    node = value.node
    return node.is_constant() if hasattr(node, "is_constant") else False


class SymNodeVariable(Variable):
    """A symbolic number: the graph node computing it and its SymInt/SymFloat/SymBool value."""

    def __init__(self, node, sym, source=None):
        self.node = node
        self.sym = sym
        self.source = source

    def python_type(self):
        return _PYTHON_TYPES[type(self.sym)]

    def as_python_constant(self):
        """The value while tracing; the ShapeEnv guards that it stays so (the value specializes)."""
        check_unspecialized(self.sym, "the number itself")
        return specialize(self.sym)

    def truth(self, tx):
        check_unspecialized(self.sym, "a branch on the truth", branch=True)
        return bool(self.sym)

    def getattr(self, tx, name):
        return ConstantVariable(self.as_python_constant()).getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        return ConstantVariable(self.as_python_constant()).call_method(tx, name, args, kwargs)

    def unpack(self, tx):
        return ConstantVariable(self.as_python_constant()).unpack(tx)

    def reconstruct(self, cg):
        return cg.tensor(self)          # a graph output (an input read again where it is one)

    def __repr__(self):
        return f"Sym({self.sym})"


def wrap_sym(tx, value, make_node):
    """A SymNodeVariable for `value` if it is symbolic (its node made by make_node() on demand), else a
    ConstantVariable of the plain number."""
    if isinstance(value, SYM_TYPES):
        if _is_constant_sym(value):
            return ConstantVariable(value.node.pytype(value))
        return SymNodeVariable(make_node(), value)
    return ConstantVariable(value)


def size_items(tx, tensor, sizes):
    """Variables for a tensor's sizes: symbolic ones read with aten.sym_size (one node per dim)."""
    return [wrap_sym(tx, s, lambda d=d, s=s: tx.graph.create_node(
                "call_function", torch.ops.aten.sym_size.int, [tensor.node, d], {}, s))
            for d, s in enumerate(sizes)]


def numel_of(tx, tensor):
    n = tensor.fake.numel()
    return wrap_sym(tx, n, lambda: tx.graph.create_node(
        "call_function", torch.ops.aten.sym_numel.default, [tensor.node], {}, n))


def takes_part(*values):
    return any(isinstance(v, SymNodeVariable) for v in values) and \
        all(isinstance(v, SymNodeVariable) or
            (isinstance(v, ConstantVariable) and type(v.value) in _NUMBERS) for v in values)


def _operand(v):
    return (v.node, v.sym) if isinstance(v, SymNodeVariable) else (v.value, v.value)


def apply(tx, fn, args):
    """fn(*args) on symbolic/constant numbers, recorded as one graph node when the result is symbolic."""
    nodes, values = zip(*(_operand(a) for a in args))
    target = _SYM_FUNCTIONS.get(fn, fn)
    try:
        result = target(*values)
    except Exception as e:
        from ...exc import Unsupported
        raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e
    return wrap_sym(tx, result, lambda: tx.graph.create_node("call_function", target, list(nodes), {}, result))
