"""NumPy scalars and NumPy's pure functions on constants.

A NumPy scalar (np.float32(2.0), np.int64(3), np.bool_(True): immutable values) read from outside the
frame is a constant, guarded by type and value; one made while tracing is a constant too. NumPy's
ufuncs (np.sqrt, np.log, np.maximum ...) and scalar types (np.float32(x)) called with constant arguments
run while tracing, with NumPy's own rules, when they give a scalar (an array is mutable: refused). A
scalar meeting a tensor in an arithmetic or comparison operator is its Python value, as torch reads it
(torch treats NumPy scalars as Python numbers: `t * np.float64(2)` keeps t's dtype). Arrays, and NumPy
calls on tensors, are not captured (a graph break). numpy is never imported here: without it loaded,
no value can be a NumPy object.
"""
import sys

import torch

from .base import ConstantVariable, unsupported

# ops that read a NumPy scalar as a 0-d array, keeping its dtype (torch.tensor(np.float64(2)) is float64,
# torch.tensor(2.0) float32): one isn't captured; every other op reads it as a Python number (a Scalar)
_ARRAY_READERS = (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, "new_tensor")


def _np():
    return sys.modules.get("numpy")


def is_scalar(value):
    np = _np()
    return np is not None and isinstance(value, (np.bool_, np.number))


def is_scalar_type(value):
    np = _np()
    return np is not None and isinstance(value, type) and issubclass(value, (np.bool_, np.number))


def is_ufunc(value):
    np = _np()
    return np is not None and isinstance(value, np.ufunc)


def guard_scalar(tx, source, value):
    from ..guards import CONSTANT
    tx.guards.add_type(source, type(value))
    if value == value:
        tx.guards.add(CONSTANT, f"{{0}} == {tx.guards.obj(value)}", f"{source.expr()} == {value!r}", (source,))
    else:   # NaN: equal to nothing
        tx.guards.add(CONSTANT, "{0} != {0}", f"{source.expr()} is nan", (source,))


def fold_call(tx, fn, args, kwargs):
    """fn (a ufunc or a NumPy scalar type) on constant arguments, run now; None if it can't be."""
    from .builtins import all_constant, constants
    if not all_constant(args, kwargs) or {"out", "where"} & set(kwargs):
        return None
    try:
        value = fn(*constants(*args), **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Exception as e:   # noqa: BLE001 -- NumPy raises it in eager too: the frame runs eagerly
        unsupported(f"numpy {getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}")
    if not (is_scalar(value) or type(value) in (int, float, bool, complex)):
        unsupported(f"numpy {getattr(fn, '__name__', fn)} made a {type(value).__name__} "
                    "(NumPy arrays are not captured)")
    return ConstantVariable(value)


def check_op_args(target, args, kwargs):
    """Refuse an op that reads a NumPy scalar argument as an array (see _ARRAY_READERS)."""
    if _np() is None or not any(target is t or target == t for t in _ARRAY_READERS):
        return
    stack = [*args, *kwargs.values()]
    while stack:
        var = stack.pop()
        if isinstance(var, ConstantVariable) and is_scalar(var.value):
            unsupported(f"{getattr(target, '__name__', target)}() of a NumPy scalar (read as a 0-d array)")
        stack += getattr(var, "items", None) if isinstance(getattr(var, "items", None), list) else []


def plain(value):
    """value with each NumPy scalar in it (through tuples and lists) as its Python number."""
    if _np() is None:
        return value
    if is_scalar(value):
        return value.item()
    if type(value) in (tuple, list):
        return type(value)(plain(v) for v in value)
    return value


def as_python(var):
    """A NumPy scalar constant meeting a tensor: the Python number torch reads it as."""
    if isinstance(var, ConstantVariable) and is_scalar(var.value):
        return ConstantVariable(var.value.item())
    return var


def operands(tx, op, a, b):
    """A binary or comparison operator with a NumPy scalar operand: (a, b), or the folded result of two
    constants (NumPy's own arithmetic); with a tensor, the scalar as its Python number. None where neither
    operand is a NumPy scalar."""
    if not (is_scalar(getattr(a, "value", None)) or is_scalar(getattr(b, "value", None))):
        return None
    if a.is_constant() and b.is_constant():
        from .builtins import _fold
        from .base import BINARY_OPS, COMPARE_OPS
        return _fold(tx, BINARY_OPS.get(op) or COMPARE_OPS[op], a.as_python_constant(), b.as_python_constant())
    from .builtins import _is_tensor
    if _is_tensor(a) or _is_tensor(b):
        return as_python(a), as_python(b)
    unsupported(f"a NumPy scalar {op} {b if is_scalar(getattr(a, 'value', None)) else a}")
