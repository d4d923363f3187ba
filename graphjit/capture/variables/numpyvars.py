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
    tx.guards.add_zero_sign(source, value)
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


def _read_as_number(value):
    """Whether torch reads this NumPy scalar as its Python number (`.item()`): floats, and integers in
    int64's range. Not np.bool_ (read as a float), complex scalars (the imaginary part dropped), or a uint64
    past int64 (torch refuses it and NumPy's reflected operator makes an array)."""
    np = _np()
    return isinstance(value, np.floating) or isinstance(value, np.integer) and -2 ** 63 <= int(value) < 2 ** 63


def plain(value):
    """value with each NumPy scalar in it (through tuples and lists) as its Python number."""
    if _np() is None:
        return value
    if is_scalar(value):
        if not _read_as_number(value):
            unsupported(f"a NumPy {type(value).__name__} scalar given to a torch operation")
        return value.item()
    if type(value) in (tuple, list):
        return type(value)(plain(v) for v in value)
    return value


def as_python(var):
    """A NumPy scalar constant meeting a tensor: the Python number torch reads it as."""
    if isinstance(var, ConstantVariable) and is_scalar(var.value):
        if not _read_as_number(var.value):
            unsupported(f"a NumPy {type(var.value).__name__} scalar meeting a tensor")
        return ConstantVariable(var.value.item())
    return var


def intercept(tx, op, a, b):
    """A binary or comparison operator where NumPy takes part: (its result, a, b) with the result None
    where the operator goes on as usual, with a and b (a NumPy scalar meeting a tensor as its number)."""
    array = binary_operator(tx, op, a, b)
    if array is not None:
        return array, a, b
    numpy = operands(tx, op, a, b)
    if isinstance(numpy, Variable):
        return numpy, a, b
    return (None, a, b) if numpy is None else (None, *numpy)


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
# tensor's memory, as in eager); an array argument is the graph input `torch.from_numpy(arg)`. NumPy
# functions, ufuncs, methods, operators and indexing on such arrays are recorded as one graph node each,
# `tnp_call(name, ...)`, which runs torch._numpy's implementation (torch ops; the compiler's make_fx traces
# through it). torch._numpy follows NumPy but not everywhere (an int array divided by an int is float32
# there, float64 in NumPy; cbrt of a negative number is NaN there; a reversed slice is a copy there, a view
# in NumPy), so every call is checked while tracing: NumPy and torch._numpy both run on probe arrays of the
# arguments' dtypes and shapes (signs, a signed zero, repeats, NaN, infinities), and a call whose results
# differ in type, dtype, shape, values, raising, or sharing memory with an argument is refused (a graph
# break). Values of other inputs may still differ where the two differ on values the probes don't have.
# NumPy's run also says whether NumPy gives a scalar (np.float32 ...) or an array: a scalar that leaves the
# frame is rebuilt as one (`arr[()]`). In-place operations and symbolic shapes are not captured.
# `torch.from_numpy(arr)` (and torch.as_tensor) is a new tensor over the array's memory (an alias).


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
    """A NumPy array whose data is the graph value `tensor` (a TensorVariable). `scalar`: the NumPy scalar
    type NumPy gives here instead of an array (the tensor is 0-d), else None. `source`: where an array
    from outside the frame was read (it leaves the frame as that very object)."""

    def __init__(self, tensor, scalar=None, source=None):
        self.tensor = tensor
        self.scalar = scalar
        self.source = source
        self.built_once = scalar is None       # one ndarray object wherever the frame's result holds it

    def python_type(self):
        return self.scalar or _np().ndarray

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
        if self.source is not None:
            return self.source.expr()
        text = f"{cg.tensor(self.tensor)}.numpy()"
        return f"{text}[()]" if self.scalar else text

    def __repr__(self):
        return f"ndarray({self.tensor!r}{', scalar' if self.scalar else ''})"


_SORTS = {"argsort", "sort", "partition", "argpartition", "lexsort"}


def _is_float16(var):
    value = var.as_python_constant() if var.is_constant() else None
    return (isinstance(value, _np().dtype) or is_scalar_type(value)) and _np().dtype(value) == _np().float16


_INTEGER_ZERO_DIVISIONS = {"floor_divide", "floordiv", "remainder", "mod", "fmod", "divmod"}
def _operation(name):
    """`.__rmod__` -> 'mod', `.remainder` -> 'remainder': the operation a call's name performs."""
    bare = name.lstrip(".:").strip("_")
    return bare[1:] if bare.startswith("r") and bare[1:] in _INTEGER_ZERO_DIVISIONS else bare


_IN_PLACE_METHODS = {"fill", "sort", "resize", "put", "itemset", "setfield", "partition", "__setitem__"}


def involved(args, kwargs):
    return any(isinstance(v, NdarrayVariable) for v in _flat_vars([*args, *kwargs.values()]))


# Probe values the check runs NumPy and torch._numpy on: signs, a signed zero, non-integers, repeats (ties
# for sorts), NaN and infinities; each array argument gets them in its own rotation.
_FLOAT_PROBE = (0.5, -1.5, 2.0, -0.0, 3.25, -2.5, float("nan"), 1.0, float("inf"), -8.0, 0.0, 2.0,
                float("-inf"), 7.0, -1.0, 0.5)
_INT_PROBE = (1, -2, 3, 0, -5, 2, 7, -1, 1, 4)


def _probe_runs(arrays):
    """Runs of the check: one where every array argument holds every probe value; else one per rotation."""
    small = any(a.scalar or a.tensor.fake.numel() < len(_FLOAT_PROBE) for a in arrays)
    return range(len(_FLOAT_PROBE)) if small else range(1)


def _flat_vars(values):
    from .containers import BaseListVariable
    out = []
    for v in values:
        out += _flat_vars(v.items) if isinstance(v, BaseListVariable) else [v]
    return out


def _probe(var, k):
    """A real, writeable NumPy value of var's dtype and shape (a scalar for a scalar) holding probe values
    from rotation k, for the check's runs; constants as they are."""
    from .containers import BaseListVariable
    np = _np()
    if isinstance(var, NdarrayVariable):
        stand_in = var._stand_in()
        dtype, shape = stand_in.dtype, np.shape(stand_in)
        if dtype.kind == "b":
            base = np.array([v > 0 for v in _INT_PROBE])
        elif dtype.kind in "iu":
            base = np.array(_INT_PROBE).astype(dtype)
        elif dtype.kind == "c":
            base = np.array(_FLOAT_PROBE) + 1j * np.roll(np.array(_FLOAT_PROBE), 3)
        else:
            base = np.array(_FLOAT_PROBE)
        base = np.roll(base, k).astype(dtype)
        value = np.resize(base, shape) if shape else base[:1].reshape(())
        return value[()] if var.scalar else value
    if isinstance(var, BaseListVariable):
        return (list if var.python_cls is list else tuple)(_probe(v, k + 3 * i) for i, v in enumerate(var.items))
    if var.is_constant():
        return var.as_python_constant()
    unsupported(f"NumPy call with {var} (only arrays from tensors and constants are captured)")


def _as_torch(value):
    """A probe value for torch._numpy's run: arrays as tensors over copies of them."""
    np = _np()
    if isinstance(value, (np.ndarray, np.generic)):
        return torch.from_numpy(np.array(value, copy=True).reshape(np.shape(value)))
    if type(value) in (list, tuple):
        return type(value)(_as_torch(v) for v in value)
    return value


def _arrays(value):
    if type(value) in (list, tuple):
        return [a for v in value for a in _arrays(v)]
    return [value] if isinstance(value, (torch.Tensor, _np().ndarray)) else []


def _same_results(expected, got, np_args, torch_args):
    """What NumPy gave against what torch._numpy gave on the same probe values: None if they agree in
    type, dtype, shape, values (NaN equal to NaN, floats to 1e-5) and in which arguments the result shares
    memory with; else what differs."""
    np = _np()
    got_np = got.numpy() if isinstance(got, torch.Tensor) else None
    if got_np is None:
        return f"torch._numpy gives a {type(got).__name__}"
    if not isinstance(expected, (np.ndarray, np.generic)):
        return f"NumPy gives a {type(expected).__name__}"
    if got_np.dtype != expected.dtype or got_np.shape != np.shape(expected):
        return f"torch._numpy gives {got_np.dtype}{got_np.shape}, NumPy {expected.dtype}{np.shape(expected)}"
    exact = expected.dtype.kind not in "fc"
    equal = np.array_equal(got_np, expected) if exact else \
        np.allclose(got_np, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    if not equal:
        return "torch._numpy's values differ from NumPy's on probe values"
    if not exact and not np.array_equal(np.signbit(got_np) | np.isnan(got_np), np.signbit(expected) | np.isnan(expected)):
        return "torch._numpy's zeros differ in sign from NumPy's"
    if isinstance(expected, np.ndarray) and not expected.flags.writeable:
        return "NumPy gives a read-only array (a broadcast or diagonal view)"
    if isinstance(expected, np.ndarray):
        for a, t in zip(_arrays(np_args), _arrays(torch_args)):
            shares = np.shares_memory(expected, a)
            if shares != (got.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()):
                return "the result shares memory with an argument in one and not the other"
    return None


def _node_arg(var):
    from .containers import BaseListVariable, TupleVariable, ListVariable
    if isinstance(var, NdarrayVariable):
        return var.tensor
    value = var.as_python_constant() if var.is_constant() else None
    if isinstance(value, _np().dtype) or is_scalar_type(value):
        return ConstantVariable(_dtype_names(value))
    if isinstance(var, BaseListVariable):
        items = [_node_arg(v) for v in var.items]
        return ListVariable(items) if var.python_cls is list else TupleVariable(items)
    return var


def call(tx, name, args, kwargs):
    """Record `tnp_call(name, ...)` once NumPy and torch._numpy agree on probe values (see above)."""
    np = _np()
    from .tensor import TensorVariable, record
    if {"out", "where"} & set(kwargs):
        unsupported(f"numpy {name.lstrip('.:')}() with out= or where= (writes in place)")
    if _operation(name) in _INTEGER_ZERO_DIVISIONS and any(
            isinstance(a, NdarrayVariable) and not (a.tensor.fake.is_floating_point() or a.tensor.fake.is_complex())
            for a in args):
        # NumPy gives 0 (and a warning) for an integer divided by zero, torch raises
        unsupported(f"numpy {name.lstrip('.:')}() of integer arrays")
    arrays = [a for a in _flat_vars([*args, *kwargs.values()]) if isinstance(a, NdarrayVariable)]
    if any(a.tensor.fake.dtype == torch.float16 for a in arrays) or any(_is_float16(v) for v in kwargs.values()):
        # NumPy computes float16 sums, products and squares in float16, torch accumulates in float32
        unsupported(f"numpy {name.lstrip('.:')}() of float16 arrays")
    if name.lstrip(".:") in _SORTS and kwargs.get("kind", ConstantVariable(None)).as_python_constant() not in \
            ("stable", "mergesort"):
        # NumPy's default sort is not stable, and which equal elements it swaps depends on the length
        unsupported(f"numpy {name.lstrip('.:')}() without kind='stable' (the order of ties is NumPy's own)")
    for rotation in _probe_runs(arrays):
        expected, got = _check(name, args, kwargs, rotation)
    node_args = [_node_arg(a) for a in args]
    result = record(tx, "call_function", tnp_call, [ConstantVariable(name), *node_args],
                    {k: _node_arg(v) for k, v in kwargs.items()})
    if not isinstance(result, TensorVariable) or result.fake.dtype != got.dtype or \
            tuple(result.fake.shape) != tuple(got.shape):
        unsupported(f"numpy {name.lstrip('.:')}() gave {result} while tracing")
    if isinstance(expected, np.generic):        # a NumPy scalar is a copy; torch._numpy's 0-d may be a view
        result = record(tx, "call_function", torch.clone, [result], {})
        return NdarrayVariable(result, type(expected))
    return NdarrayVariable(result)


def _check(name, args, kwargs, rotation):
    """NumPy's and torch._numpy's results on probe values (rotation: which probe value comes first);
    refused where they differ."""
    import warnings
    np = _np()
    np_args = [_probe(a, rotation + 3 * k) for k, a in enumerate(args)]
    np_kwargs = {k: _probe(v, rotation + 3 * (len(args) + i)) for i, (k, v) in enumerate(kwargs.items())}
    torch_args = [_as_torch(a) for a in np_args]
    torch_kwargs = {k: _as_torch(v) for k, v in np_kwargs.items()}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = _invoke(np, name, np_args, np_kwargs)
        except Exception as e:   # noqa: BLE001 -- NumPy raises: the frame runs it eagerly and raises there
            unsupported(f"numpy {name.lstrip('.:')}() raised {type(e).__name__} on probe values: {e}")
        try:
            got = tnp_call(name, *[_dtype_names(a) for a in torch_args],
                           **{k: _dtype_names(v) for k, v in torch_kwargs.items()})
        except Exception as e:   # noqa: BLE001 -- torch._numpy raises where NumPy does not
            unsupported(f"numpy {name.lstrip('.:')}(): torch._numpy raised {type(e).__name__} where NumPy "
                        f"did not: {e}")
    differs = _same_results(expected, got, np_args, torch_args)
    if differs is not None:
        unsupported(f"numpy {name.lstrip('.:')}(): {differs}")
    return expected, got


def _dtype_names(value):
    """A NumPy dtype or scalar type as its name, which torch._numpy reads (as the graph node holds it)."""
    np = _np()
    if isinstance(value, np.dtype) or is_scalar_type(value):
        return np.dtype(value).name
    if type(value) in (list, tuple):
        return type(value)(_dtype_names(v) for v in value)
    return value


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
    return NdarrayVariable(wrap_tensor(tx, tensor, TensorOfArraySource(source)), source=source)
