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

from .base import ConstantVariable, Variable, unsupported

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


def is_function(value):
    """A function of NumPy's namespace that is not a ufunc or a type (np.sum, np.concatenate ...)."""
    np = _np()
    if np is None or isinstance(value, (type, np.ufunc)) or not callable(value):
        return False
    module = getattr(value, "__module__", None) or ""
    return module == "numpy" or module.startswith("numpy.")


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


# ---- NumPy arrays over traced tensors ----
#
# `x.numpy()` of a traced CPU tensor is an NdarrayVariable over the same graph value (the array shares the
# tensor's memory, as in eager). NumPy functions, ufuncs, methods, operators and indexing on such arrays
# are recorded as one graph node each, `tnp_call(name, ...)`, which runs torch._numpy's implementation
# (torch ops; the compiler's make_fx traces through it). torch._numpy follows NumPy but not everywhere
# (an int array divided by an int is float32 there, float64 in NumPy), so every call is checked while
# tracing against NumPy itself: the real NumPy function runs on stand-ins of the same dtypes and shapes
# (read-only broadcasts of ones), and a result of another type, dtype or shape is refused (a graph
# break). That NumPy run also says whether NumPy gives a scalar (np.float32 ...) or an array: a scalar
# that leaves the frame is rebuilt as one (`arr[()]`). In-place operations on arrays, arrays from outside
# the frame and symbolic shapes are not captured. `torch.from_numpy(arr)` (and torch.as_tensor) is a new
# tensor over the array's memory (an alias of the graph value).


def tnp_call(name, *args, **kwargs):
    """Graph node target: torch._numpy's `name` (a function; `.name` a method of the first argument,
    `:name` an attribute of it) on the tensors as torch._numpy arrays; tensors out."""
    import torch._numpy as tnp

    def to_tnp(v):
        if isinstance(v, torch.Tensor):
            return tnp.ndarray(v)
        if type(v) in (list, tuple):
            return type(v)(to_tnp(x) for x in v)
        return v

    def to_torch(v):
        if isinstance(v, tnp.ndarray):
            return v.tensor
        if type(v) in (list, tuple):
            return type(v)(to_torch(x) for x in v)
        return v

    return to_torch(_invoke(tnp, name, to_tnp(args), {k: to_tnp(v) for k, v in kwargs.items()}))


def _invoke(module, name, args, kwargs):
    """`name` of `module` called, `.name` a method of args[0] called, `:name` an attribute of args[0]."""
    if name.startswith(":"):
        return getattr(args[0], name[1:])
    if name.startswith("."):
        return getattr(args[0], name[1:])(*args[1:], **kwargs)
    return getattr(module, name)(*args, **kwargs)


class NdarrayVariable(Variable):
    """A NumPy array whose data is the graph value `tensor` (a TensorVariable); `scalar`: NumPy gives a
    scalar here (the tensor is 0-d)."""

    def __init__(self, tensor, scalar=False):
        self.tensor = tensor
        self.scalar = scalar

    def python_type(self):
        np = _np()
        return type(np.float64(0)) if self.scalar else np.ndarray

    def _stand_in(self):
        np = _np()
        fake = self.tensor.fake
        if any(not isinstance(s, int) for s in fake.shape):
            unsupported("NumPy on an array of symbolic shape")
        dtype = np.dtype(torch.empty((), dtype=fake.dtype).numpy().dtype)
        value = np.broadcast_to(np.ones((), dtype=dtype), tuple(fake.shape))
        return value[()] if self.scalar else value

    def getattr(self, tx, name):
        from .base import MethodOf
        from .containers import TupleVariable
        fake = self.tensor.fake
        if name == "shape":
            return TupleVariable([ConstantVariable(int(s)) for s in fake.shape])
        if name in ("ndim", "size", "itemsize", "nbytes"):
            return ConstantVariable(getattr(self._stand_in(), name))
        if name == "dtype":
            return ConstantVariable(self._stand_in().dtype)
        if name in ("T", "real", "imag", "mT"):
            return call(tx, ":" + name, [self], {})
        return MethodOf(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__" and not self.scalar and self.tensor.fake.dim():
            return ConstantVariable(int(self.tensor.fake.shape[0]))
        if name in ("tolist", "item", "tobytes", "__array__", "__bool__", "__int__", "__float__", "__index__"):
            unsupported(f"ndarray.{name}() needs the array's data")
        if name in _IN_PLACE_METHODS or name.startswith("__i") and name.endswith("__"):
            unsupported(f"ndarray.{name}() writes the array in place (not captured)")
        return call(tx, "." + name, [self, *args], kwargs)

    def truth(self, tx):
        unsupported("branching on a NumPy array's value (data-dependent control flow)")

    def unpack(self, tx):
        n = self.tensor.fake.shape[0] if self.tensor.fake.dim() else None
        if not isinstance(n, int):
            unsupported("iterating over a 0-d or symbolic NumPy array")
        return [call(tx, ".__getitem__", [self, ConstantVariable(i)], {}) for i in range(n)]

    def getitem(self, tx, index):
        return call(tx, ".__getitem__", [self, index], {})

    def reconstruct(self, cg):
        text = f"{cg.tensor(self.tensor)}.numpy()"
        return f"{text}[()]" if self.scalar else text

    def __repr__(self):
        return f"ndarray({self.tensor!r}{', scalar' if self.scalar else ''})"


_INTEGER_ZERO_DIVISIONS = {"floor_divide", "floordiv", "remainder", "mod", "fmod", "divmod"}
_IN_PLACE_METHODS = {"fill", "sort", "resize", "put", "itemset", "setfield", "partition", "__setitem__"}


def involved(args, kwargs):
    return any(isinstance(v, NdarrayVariable) for v in _flat([*args, *kwargs.values()]))


def _flat(values):
    from .containers import BaseListVariable
    out = []
    for v in values:
        if isinstance(v, BaseListVariable):
            out += _flat(v.items)
        else:
            out.append(v)
    return out


def _real(var):
    """The stand-in or constant NumPy's own call gets for `var`."""
    from .containers import BaseListVariable
    if isinstance(var, NdarrayVariable):
        return var._stand_in()
    if isinstance(var, BaseListVariable):
        return (list if var.python_cls is list else tuple)(_real(v) for v in var.items)
    if var.is_constant():
        return var.as_python_constant()
    unsupported(f"NumPy call with {var} (only arrays from tensors and constants are captured)")


def _node_arg(var):
    from .containers import BaseListVariable, TupleVariable, ListVariable
    if isinstance(var, NdarrayVariable):
        return var.tensor
    value = var.as_python_constant() if var.is_constant() else None
    if isinstance(value, _np().dtype) or is_scalar_type(value):
        return ConstantVariable(_np().dtype(value).name)     # a dtype by name: torch._numpy reads it
    if isinstance(var, BaseListVariable):
        items = [_node_arg(v) for v in var.items]
        return ListVariable(items) if var.python_cls is list else TupleVariable(items)
    return var


def call(tx, name, args, kwargs):
    """Record `tnp_call(name, ...)` after checking NumPy's own result on stand-ins (see above)."""
    import warnings
    np = _np()
    from .tensor import TensorVariable, record
    if {"out", "where"} & set(kwargs):
        unsupported(f"numpy {name.lstrip('.:')}() with out= or where= (writes in place)")
    if name.lstrip(".:_").rstrip("_").lstrip("r") in _INTEGER_ZERO_DIVISIONS and any(
            isinstance(a, NdarrayVariable) and not (a.tensor.fake.is_floating_point() or a.tensor.fake.is_complex())
            for a in args):
        # NumPy gives 0 (and a warning) for an integer divided by zero, torch raises
        unsupported(f"numpy {name.lstrip('.:')}() of integer arrays")
    real_args = [_real(a) for a in args]
    real_kwargs = {k: _real(v) for k, v in kwargs.items()}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = _invoke(np, name, real_args, real_kwargs)
        except Exception as e:   # noqa: BLE001 -- NumPy raises: the frame runs it eagerly and raises there
            unsupported(f"numpy {name.lstrip('.:')}() raised {type(e).__name__}: {e}")
    node_args = [_node_arg(a) for a in args]
    result = record(tx, "call_function", tnp_call, [ConstantVariable(name), *node_args],
                    {k: _node_arg(v) for k, v in kwargs.items()})
    if not isinstance(result, TensorVariable):
        unsupported(f"numpy {name.lstrip('.:')}() gave {result} (only array results are captured)")
    scalar = isinstance(expected, np.generic)
    if not (scalar or isinstance(expected, np.ndarray)):
        unsupported(f"numpy {name.lstrip('.:')}() gives a {type(expected).__name__}")
    got = result.fake
    want_dtype = expected.dtype
    got_dtype = torch.empty((), dtype=got.dtype).numpy().dtype
    if got_dtype != want_dtype or tuple(got.shape) != tuple(np.shape(expected)):
        unsupported(f"numpy {name.lstrip('.:')}(): torch._numpy gives {got_dtype}{tuple(got.shape)}, NumPy "
                    f"{want_dtype}{tuple(np.shape(expected))}")
    return NdarrayVariable(result, scalar)


def from_tensor(tx, tensor):
    """`tensor.numpy()`: the array over the tensor's memory."""
    fake = tensor.fake
    if fake.device.type != "cpu" or fake.requires_grad or fake.is_conj() or fake.is_neg():
        unsupported("Tensor.numpy() of a tensor eager refuses (not on the CPU, requiring grad, or a "
                    "conjugate/negative view)")
    try:
        torch.empty((), dtype=fake.dtype).numpy()
    except TypeError:
        unsupported(f"Tensor.numpy() of {fake.dtype} (no NumPy dtype)")
    return NdarrayVariable(tensor)


def to_torch(tx, fn, args, kwargs):
    """torch.from_numpy(array), torch.as_tensor(array), torch.asarray(array): a new tensor over the
    array's memory; torch.tensor(array): a copy."""
    from .tensor import record
    array = args[0]
    if len(args) > 1 or kwargs:
        unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy array with more arguments")
    if array.scalar and fn is not torch.tensor:
        unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy scalar")
    if fn in (torch.from_numpy, torch.as_tensor, torch.asarray):
        return record(tx, "call_function", torch.ops.aten.alias.default, [array.tensor], {})
    if fn is torch.tensor:
        return record(tx, "call_function", torch.clone, [array.tensor], {})
    unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy array")


def function_call(tx, fn, args, kwargs):
    """A NumPy function or ufunc called with arrays from tensors (None where no argument is one)."""
    if not involved(args, kwargs):
        return None
    np = _np()
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or getattr(np, name, None) is not fn:
        unsupported(f"numpy function {name or fn} (only functions of the numpy namespace are captured)")
    return call(tx, name, args, kwargs)


def binary_operator(tx, op, a, b):
    """A binary or comparison operator with an array operand, as NumPy dispatches it (None without)."""
    from .dunders import binary_names, COMPARE_DUNDERS, SWAPPED
    from .tensor import TensorVariable
    if not (isinstance(a, NdarrayVariable) or isinstance(b, NdarrayVariable)):
        return None
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        unsupported(f"a tensor {op} a NumPy array")
    if op.endswith("=") and op not in ("==", "!=", "<=", ">="):
        unsupported(f"{op} on a NumPy array (in place)")
    if op in COMPARE_DUNDERS:
        forward, reflected = COMPARE_DUNDERS[op], COMPARE_DUNDERS[SWAPPED[op]]
    else:
        forward, reflected = binary_names(op)[:2]
    if isinstance(a, NdarrayVariable):
        return call(tx, "." + forward, [a, b], {})
    return call(tx, "." + reflected, [b, a], {})


def unary(tx, opname, value):
    names = {"UNARY_NEGATIVE": "__neg__", "UNARY_POSITIVE": "__pos__", "UNARY_INVERT": "__invert__"}
    if not isinstance(value, NdarrayVariable) or opname not in names:
        return None
    return call(tx, "." + names[opname], [value], {})


def is_array(value):
    np = _np()
    return np is not None and type(value) is np.ndarray


def wrap_array(tx, value, source):
    """An array read from outside the frame: the graph input `torch.from_numpy(array)`, guarded as any
    tensor input, plus the array's flags; None for arrays torch.from_numpy refuses or warns about."""
    from ..sources import TensorOfArraySource
    from .builder import wrap_tensor
    if not value.flags.writeable or any(s < 0 for s in value.strides) or not value.dtype.isnative:
        return None
    try:
        tensor = torch.from_numpy(value)
    except (TypeError, ValueError):
        return None
    tx.guards.add_type(source, type(value))
    tx.guards.add(3, "{0}.flags.writeable", None, (source,))
    tx.keepalive.append(tensor)
    return NdarrayVariable(wrap_tensor(tx, tensor, TensorOfArraySource(source)))
