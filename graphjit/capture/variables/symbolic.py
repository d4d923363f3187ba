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

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_NUMBERS = (int, float, bool)

# Python int/float functions that have symbolic versions in torch
_SYM_FUNCTIONS = {min: torch.sym_min, max: torch.sym_max, int: torch.sym_int, float: torch.sym_float,
                  math.floor: math.floor, math.ceil: math.ceil}


_PYTHON_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


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
        return specialize(self.sym)

    def truth(self, tx):
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
