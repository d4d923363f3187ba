"""NumPy scalars, NumPy on constants, and NumPy arrays over traced tensors.

A NumPy scalar (np.float32(2.0), np.int64(3), np.bool_(True): immutable values) read from outside the
frame is a constant, guarded by type and value; one made while tracing is a constant too. A scalar
meeting a tensor in an arithmetic or comparison operator is its Python value, as torch reads it (torch
treats NumPy scalars as Python numbers: `t * np.float64(2)` keeps t's dtype).

NumPy called on constants only (numbers, strings, dtypes, tuples and lists of them, and arrays made this
way) runs while tracing, with NumPy's own rules: a scalar result is a constant, an array result an
`ArrayConstantVariable` over the real array, which the trace owns (see "NumPy arrays made while tracing"
below). NumPy calls on arrays over tensors (`x.numpy()`, array arguments) are graph nodes running
torch._numpy (see "NumPy arrays over traced tensors"). numpy is never imported here: without it loaded,
no value can be a NumPy object.
"""
import operator
import sys

import torch

from ... import config
from .base import BINARY_OPS, COMPARE_OPS, ConstantVariable, Variable, unsupported
from .containers import ListVariable

# ops that read a NumPy scalar as a 0-d array, keeping its dtype (torch.tensor(np.float64(2)) is float64,
# torch.tensor(2.0) float32): torch.tensor(scalar) is a constant tensor (scalar_tensor), the others aren't
# captured; every other op reads it as a Python number (a Scalar)
_ARRAY_READERS = (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, "new_tensor")


def _np():
    return sys.modules.get("numpy")


def is_scalar(value):
    np = _np()
    return np is not None and isinstance(value, (np.bool_, np.number))


def is_scalar_type(value):
    np = _np()
    return np is not None and isinstance(value, type) and issubclass(value, (np.bool_, np.number))


def is_dtype_class(value):
    np = _np()
    return np is not None and value is np.dtype


_UFUNC_METHODS = ("reduce", "accumulate", "reduceat", "outer", "at")


def is_function(value):
    """A function of NumPy's namespace that is not a ufunc or a type (np.sum, np.concatenate ...), or a
    ufunc's method (np.add.reduce)."""
    np = _np()
    if np is None or isinstance(value, (type, np.ufunc)) or not callable(value):
        return False
    if isinstance(getattr(value, "__self__", None), np.ufunc):
        return getattr(value, "__name__", None) in _UFUNC_METHODS
    module = getattr(value, "__module__", None) or ""
    return module == "numpy" or module.startswith("numpy.")


def is_ufunc(value):
    np = _np()
    return np is not None and isinstance(value, np.ufunc)


def ufunc_attribute(tx, ufunc, name):
    """np.add.reduce (a method, called as NumPy functions are), np.add.identity, np.add.nin (constants)."""
    from .builder import wrap_constant_result
    from .builtins import AttributeMissing, BuiltinVariable
    try:
        attr = getattr(ufunc, name)
    except AttributeError as e:
        raise AttributeMissing(str(e)) from e
    if name in _UFUNC_METHODS:
        return BuiltinVariable(attr)
    if callable(attr):
        unsupported(f"ufunc.{name} of numpy.{ufunc.__name__}")
    return wrap_constant_result(tx, attr)


def guard_scalar(tx, source, value):
    from ..guards import CONSTANT
    tx.guards.add_type(source, type(value))
    tx.guards.add_zero_sign(source, value)
    if value == value:
        tx.guards.add(CONSTANT, f"{{0}} == {tx.guards.obj(value)}", f"{source.expr()} == {value!r}", (source,))
    else:   # NaN: equal to nothing
        tx.guards.add(CONSTANT, "{0} != {0}", f"{source.expr()} is nan", (source,))


def fold_call(tx, fn, args, kwargs):
    """fn (a ufunc or a NumPy scalar type) on constants and arrays made while tracing, run now; None where
    an argument is neither (an array over a tensor, a tensor ...)."""
    refusal = _not_run_while_tracing(fn)
    if refusal is not None:
        unsupported(refusal)
    if not foldable(args, kwargs):
        return None
    return fold(tx, fn, args, kwargs, f"numpy.{getattr(fn, '__name__', fn)}()")


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
    array = constant_operator(tx, op, a, b)
    if array is None:
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
    operand is a NumPy scalar. Two constants one of which is a NumPy dtype: folded too (`a.dtype == np.int64`)."""
    np = _np()
    dtype = np is not None and any(isinstance(v, ConstantVariable) and isinstance(v.value, np.dtype) for v in (a, b))
    if not (is_scalar(getattr(a, "value", None)) or is_scalar(getattr(b, "value", None)) or dtype):
        return None
    if dtype and not (a.is_constant() and b.is_constant()):
        return None
    if a.is_constant() and b.is_constant():
        return fold(tx, BINARY_OPS.get(op) or COMPARE_OPS[op], [a, b], {}, f"{op} on NumPy constants")
    from .builtins import _is_tensor
    if _is_tensor(a) or _is_tensor(b):
        return as_python(a), as_python(b)
    unsupported(f"a NumPy scalar {op} {b if is_scalar(getattr(a, 'value', None)) else a}")


# ---- NumPy arrays made while tracing ----
#
# `np.array(lengths) // block`, `np.zeros((n, m), dtype=np.int32)`, `np.stack(rows)`: NumPy called on
# constants only runs while tracing, on real arrays the trace owns (an ArrayConstantVariable each, one per
# array object: tx.numpy_arrays). What eager does to such an array, the trace does to its own: views share
# memory with their base, writes (`a[i] = v`, `a += 1`, `out=`, in-place methods) reach every view, `is`
# is NumPy's own identity, and iteration reads each item when the loop gets to it. No guard is needed: the
# arguments are constants, guarded where they came from. What NumPy gives back must again be a number, a
# dtype, None, a tuple or list of these, or an array of numbers or booleans (no strings or objects).
#
# Not run while tracing (each a graph break, so CPython runs it): numpy.random (the global generator's
# state) and every other NumPy module but linalg and fft; NumPy's error, print and buffer settings, files
# (_NOT_FOLDED); ufuncs NumPy's namespace does not name (np.frompyfunc's run Python code); and a call that
# warns or meets a floating-point error (run under np.errstate(all="raise") with warnings as errors: eager
# would warn on every call, or raise under the caller's error state).
#
# Where such an array goes: `torch.tensor(a, ...)` is a constant tensor in the graph (torch.tensor of
# a.tolist() with a's dtype: a copy, as eager's); returned, stored outside the frame or live at a graph
# break, the entry rebuilds it on every call as a copy of its value at the end of the trace (eager makes a
# new array on every call); a view (a copy would not share its base's memory) or a read-only array can't
# be, and the instruction that made it is a graph break instead (ArrayConstantVariable.root_index).
# Meeting an array over a tensor (an operator, a NumPy function, an index), it is lifted into the graph as
# a constant tensor of its value at that point (_lift: a graph node reads it there, as eager's call
# would), refused where NumPy's result would be a view of it; written from one (`a[i] = x.numpy()`), it
# is not modelled. torch.from_numpy, torch.as_tensor and torch.asarray of it (the tensor would share the
# array's memory), and it meeting a tensor (NumPy then computes with the tensor's data), are graph breaks.

# NumPy functions whose results or effects reach beyond their arguments: global settings, files, output
_NOT_FOLDED = frozenset({
    "seterr", "geterr", "seterrcall", "geterrcall", "setbufsize", "getbufsize", "set_printoptions",
    "get_printoptions", "printoptions", "array2string", "array_repr", "array_str", "save", "savez",
    "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt", "fromfile", "fromregex", "info",
    "show_config", "show_runtime", "fromfunction", "apply_along_axis", "apply_over_axes", "piecewise",
    "frompyfunc", "from_dlpack", "test",
})
_FOLDED_MODULES = ("numpy", "numpy.linalg", "numpy.fft")
_METHODS_NOT_FOLDED = frozenset({"tofile", "dump"})     # they write files
_ATTRIBUTES_NOT_FOLDED = frozenset({"ctypes", "data", "flat", "flags", "__array_interface__",
                                    "__array_struct__"})


def _not_run_while_tracing(fn):
    """Why NumPy's fn may not run while tracing, or None."""
    np = _np()
    name = getattr(fn, "__name__", None)
    module = getattr(fn, "__module__", None) or ""
    if isinstance(getattr(fn, "__self__", None), np.ufunc) and name in _UFUNC_METHODS:
        return _not_run_while_tracing(fn.__self__)
    if isinstance(fn, np.ufunc):
        return None if getattr(np, name or "", None) is fn else \
            f"the ufunc {name} (not one of NumPy's own: it may run Python code)"
    if module.startswith("numpy.random"):
        return f"numpy.random.{name}() draws from NumPy's global random state (it runs in CPython)"
    if is_scalar_type(fn) or fn is np.dtype:
        return None
    if module not in _FOLDED_MODULES or not isinstance(name, str) or name.startswith("_") or \
            getattr(sys.modules.get(module), name, None) is not fn:
        return f"{module}.{name}() (only the functions of numpy, numpy.linalg and numpy.fft run while tracing)"
    if name in _NOT_FOLDED:
        return f"numpy.{name}() reads or changes state beyond its arguments (settings, files, output)"
    return None


class _NotFoldable(Exception):
    pass


def _allowed_constant(value):
    np = _np()
    if type(value) in (int, float, bool, complex, str, type(None), type(Ellipsis)) or is_scalar(value) or \
            isinstance(value, np.dtype):
        return True
    if type(value) is slice:
        return all(_allowed_constant(p) for p in (value.start, value.stop, value.step))
    if type(value) in (tuple, range):
        return all(map(_allowed_constant, value)) if type(value) is tuple else True
    return value in (int, float, bool, complex) or is_scalar_type(value)


def _value(var):
    """The Python value NumPy is called with for var: arrays made while tracing as themselves, lists and
    tuples as new ones, constants of the kinds _allowed_constant names; else _NotFoldable."""
    from .containers import BaseListVariable
    from .symbolic import SymNodeVariable
    if isinstance(var, ArrayConstantVariable):
        return var.value
    if isinstance(var, SymNodeVariable):
        raise _NotFoldable(var)      # a symbolic size: specializing it would recompile for every size
    if isinstance(var, BaseListVariable) and var.python_cls in (list, tuple, torch.Size):
        values = [_value(v) for v in var.items]
        return values if var.python_cls is list else tuple(values)
    try:
        value = var.as_python_constant()
    except Exception:   # noqa: BLE001 -- NotConstant, or a Variable with no constant form
        raise _NotFoldable(var) from None
    if not _allowed_constant(value):
        raise _NotFoldable(var)
    return value


def foldable(args, kwargs):
    """Whether NumPy can run now on these arguments (see _value)."""
    try:
        for var in [*args, *kwargs.values()]:
            _value(var)
    except _NotFoldable:
        return False
    return True


def fold(tx, fn, args, kwargs, what):
    """fn run now on the arguments' values (see _value); its result as Variables (see wrap_made)."""
    import warnings
    np = _np()
    try:
        values = [_value(a) for a in args]
        kw = {k: _value(v) for k, v in kwargs.items()}
    except _NotFoldable as e:
        unsupported(f"{what} with {e.args[0]} (a NumPy array made while tracing meets only constants "
                    "and other such arrays)")
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            result = fn(*values, **kw)
        except Exception as e:   # noqa: BLE001 -- eager raises or warns there: CPython runs it
            unsupported(f"{what} raised {type(e).__name__} while tracing: {e}")
    return wrap_made(tx, result, what)


def wrap_made(tx, value, what):
    """A value NumPy gave while tracing: arrays as ArrayConstantVariables (one per array object), numbers,
    dtypes and None as constants, tuples and lists item by item; anything else refused."""
    from .containers import ListVariable, TupleVariable
    np = _np()
    if type(value) is np.ndarray:
        var = tx.numpy_arrays.get(id(value))
        if var is None:
            if value.dtype.kind not in "biufc":
                unsupported(f"{what} made a NumPy array of {value.dtype} (only arrays of numbers and booleans "
                            "are made while tracing)")
            var = tx.numpy_arrays[id(value)] = ArrayConstantVariable(value, tx.root_frame.ip - 1,
                                                                     tx.frames[-1].location())
        return var
    if is_scalar(value) or type(value) in (int, float, bool, complex, type(None)) or isinstance(value, np.dtype):
        return ConstantVariable(value)
    if type(value) in (tuple, list):
        items = [wrap_made(tx, v, what) for v in value]
        return TupleVariable(items) if type(value) is tuple else ListVariable(items)
    unsupported(f"{what} gave a {type(value).__module__}.{type(value).__qualname__} (not made while tracing)")


class ArrayConstantVariable(Variable):
    """A NumPy array NumPy made while tracing from constants (see above): `value` is the real array, owned
    by the trace (tx.numpy_arrays holds its one Variable); `root_index`: the root frame's instruction that
    made it, where the frame breaks instead when the array can't leave the frame as a copy; `where`: the
    (file, line) of the code that made it."""
    built_once = True          # rebuilt once per entry call: every reference is the same array

    def __init__(self, value, root_index, where):
        self.value = value
        self.root_index = root_index
        self.where = where

    def python_type(self):
        return type(self.value)

    def getattr(self, tx, name):
        from .builtins import AttributeMissing
        if name == "__class__":
            return super().getattr(tx, name)
        if name in _ATTRIBUTES_NOT_FOLDED:
            unsupported(f"ndarray.{name} of an array made while tracing (not modelled)")
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise AttributeMissing(str(e)) from e
        if callable(attr) and getattr(attr, "__self__", None) is self.value:
            from .base import MethodOf
            return MethodOf(self, name)
        return wrap_made(tx, attr, f"ndarray.{name}")

    def setattr(self, tx, name, value):
        if name != "shape":
            unsupported(f"setting ndarray.{name} of an array made while tracing")
        fold(tx, setattr, [self, ConstantVariable(name), value], {}, "setting ndarray.shape")

    def call_method(self, tx, name, args, kwargs):
        if name in _METHODS_NOT_FOLDED:
            unsupported(f"ndarray.{name}() writes a file")
        if involved(args, kwargs):      # with an array over a tensor: a graph node, this array lifted (_lift)
            if name in _IN_PLACE_METHODS or name.startswith("__i") and name.endswith("__"):
                unsupported(f"ndarray.{name}() writes an array made while tracing from an array over a tensor")
            return call(tx, "." + name, [self, *args], kwargs)
        try:
            method = getattr(self.value, name)
        except AttributeError:
            return super().call_method(tx, name, args, kwargs)
        return fold(tx, method, args, kwargs, f"ndarray.{name}()")

    def method___contains__(self, tx, item):
        return fold(tx, operator.contains, [self, item], {}, "`in` a NumPy array")

    def getitem(self, tx, index):
        if involved([index], {}):
            return call(tx, ".__getitem__", [self, index], {})
        return fold(tx, operator.getitem, [self, index], {}, "indexing a NumPy array")

    def truth(self, tx):
        return fold(tx, bool, [self], {}, "the truth value of a NumPy array").value

    def make_iterator(self, tx):
        if self.value.ndim == 0:
            unsupported("iterating over a 0-d NumPy array (eager raises TypeError)")
        return _ArrayIterator(self)

    def unpack(self, tx):
        return list(containers_iterate(tx, self))

    def reconstruct(self, cg):
        # only an array that owns its memory: a copy of a view would not share its base's memory (which the
        # frame may hand out too), and two arrays that own their memory never share it
        array = self.value
        snapshot = array.copy(order="K")
        if array.base is not None or not array.flags.owndata:
            self._refuse("a NumPy array made while tracing, a view of another array, leaves the frame (a copy "
                         "would not share its memory)")
        if not array.flags.writeable:
            self._refuse("a read-only NumPy array made while tracing leaves the frame")
        if snapshot.strides != array.strides:
            self._refuse("a NumPy array made while tracing leaves the frame with a layout a copy does not keep")
        return f"{cg.obj(snapshot)}.copy(order='K')"

    def _refuse(self, reason):
        from ...exc import Unsupported
        error = Unsupported(reason, hint="the instruction that made it is a graph break")
        error.root_index = self.root_index
        error.filename, error.lineno = self.where
        raise error

    def __repr__(self):
        return f"ndarray({self.value.dtype}{list(self.value.shape)}, made while tracing)"


def containers_iterate(tx, var):
    from .containers import iterate
    return iterate(tx, var)


class _ArrayIterator(Variable):
    """iter(a) of an array made while tracing: a[i] read when the loop gets to it, as NumPy's iterator."""

    def __init__(self, array):
        self.array = array
        self.index = 0

    def python_type(self):
        return type(iter(self.array.value))

    def next(self, tx):
        if self.index >= len(self.array.value):
            return None
        self.index += 1
        return self.array.getitem(tx, ConstantVariable(self.index - 1))

    def __repr__(self):
        return f"iter({self.array!r})"


def constant_operator(tx, op, a, b):
    """A binary or comparison operator with an array made while tracing (None without one), run now."""
    if not (isinstance(a, ArrayConstantVariable) or isinstance(b, ArrayConstantVariable)):
        return None
    if isinstance(a, NdarrayVariable) or isinstance(b, NdarrayVariable):
        return None                 # a graph node (binary_operator), the constant lifted into the graph
    if op.endswith("=") and op not in ("==", "!=", "<=", ">=") and isinstance(a, ListVariable):
        unsupported(f"{op} of a list and a NumPy array")
    return fold(tx, BINARY_OPS.get(op) or COMPARE_OPS[op], [a, b], {}, f"{op} on a NumPy array")


def constant_tensor(tx, fn, value, what, args, kwargs, converted_from=None):
    """torch.tensor(a, dtype=, device=, requires_grad=, pin_memory=) of `value`, a NumPy array only the trace
    holds (`what` names it): a constant tensor in the graph, torch.tensor of value.tolist() in its dtype (or
    torch.empty of its shape), which is what torch.tensor makes of the array."""
    from .builder import wrap_constant_result
    from .containers import TupleVariable
    from .tensor import record
    np = _np()
    name = getattr(fn, "__name__", fn)
    if fn is not torch.tensor:
        unsupported(f"{name}() of {what} (the tensor would share its memory)")
    if len(args) > 1 or set(kwargs) - {"dtype", "device", "requires_grad", "pin_memory"}:
        unsupported(f"{name}() of {what}, with more arguments")
    if value.size > config.numpy_constant_limit:
        unsupported(f"{name}() of {what} of {value.size} elements (more than config.numpy_constant_limit, "
                    f"{config.numpy_constant_limit}, written into the graph)")
    try:
        dtype = torch.from_numpy(np.empty(0, dtype=value.dtype)).dtype
    except (TypeError, ValueError):
        unsupported(f"{name}() of a NumPy {value.dtype} value (no torch dtype)")
    given = kwargs.get("dtype")
    if given is None or given.is_constant() and given.as_python_constant() is None:
        kwargs = {**kwargs, "dtype": ConstantVariable(dtype)}
    if value.size == 0:      # a.tolist() keeps no shape past the first zero
        shape = TupleVariable([ConstantVariable(int(n)) for n in value.shape])
        return record(tx, "call_function", torch.empty, [shape], kwargs)
    target = kwargs["dtype"].as_python_constant() if kwargs["dtype"].is_constant() else None
    if not isinstance(target, torch.dtype):
        unsupported(f"{name}() of {what} with a dtype= that is not a torch dtype")
    # torch converts the array's values to dtype= in one rounding (int64 -> float32); the values of
    # value.tolist() are Python ints and floats, which torch.tensor would round twice (through a double):
    # the conversion runs here, as eager's, and the graph holds its exact results
    # converted_from: what eager's torch.tensor was given, where that is not the array itself (a NumPy
    # scalar, which it reads as a Python number when dtype= is given: int64 -> double -> float32)
    source = value if converted_from is None else converted_from
    values = value.tolist() if target == dtype else torch.tensor(source, dtype=target).tolist()
    return record(tx, "call_function", torch.tensor, [wrap_constant_result(tx, values)], kwargs)


def scalar_tensor(tx, fn, args, kwargs):
    """torch.tensor(np_scalar, ...): torch reads a NumPy scalar as a 0-d array of its dtype
    (torch.tensor(np.float64(2)) is float64): a constant tensor, as of that array."""
    scalar = args[0].as_python_constant()
    return constant_tensor(tx, fn, _np().asarray(scalar), f"a NumPy {type(scalar).__name__}", args, kwargs,
                           converted_from=scalar)


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

    def __init__(self, tensor, scalar=None, source=None, constant=None):
        self.tensor = tensor
        self.scalar = scalar
        self.source = source
        self.constant = constant        # a lifted array made while tracing: its value when lifted (_lift)
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
    if isinstance(var, NdarrayVariable) and var.constant is not None:
        return var.constant.copy()      # a lifted constant: its own values
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
    _guard_error_settings(tx, name)
    args = [_lift(tx, a) for a in args]
    kwargs = {k: _lift(tx, v) for k, v in kwargs.items()}
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


def _guard_error_settings(tx, name):
    """torch._numpy neither warns nor raises on floating-point errors: a call recorded in a graph runs as
    under np.errstate(all="ignore"). Under settings that raise (or call or log), it is a graph break, so
    NumPy raises as in eager; under "warn" or "ignore" it is recorded, and the entry is guarded on
    np.geterr() being what it was, so a later np.seterr(all="raise") traces again. (Under "warn" the
    warning eager gives is not given: README, "What doesn't yet".)"""
    np = _np()
    settings = np.geterr()
    if any(mode not in ("ignore", "warn") for mode in settings.values()):
        unsupported(f"numpy {name.lstrip('.:')}() of an array over a tensor under floating-point error settings "
                    f"that act ({settings}): the graph would neither raise nor call")
    tx.guards.add_state(f"{tx.guards.obj(np.geterr)}() == {settings!r}", f"numpy.geterr() == {settings}")


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
    for var, value in _pairs([*args, *kwargs.values()], [*np_args, *np_kwargs.values()]):
        if getattr(var, "constant", None) is not None and \
                any(np.shares_memory(r, value) for r in _arrays(expected) if isinstance(r, np.ndarray)):
            unsupported(f"numpy {name.lstrip('.:')}() would give a view of a NumPy array made while tracing")
    return expected, got


def _pairs(variables, values):
    """(Variable, its probe value) for each argument, through lists and tuples."""
    from .containers import BaseListVariable
    for var, value in zip(variables, values):
        if isinstance(var, BaseListVariable) and type(value) in (list, tuple):
            yield from _pairs(var.items, value)
        else:
            yield var, value


def _lift(tx, var):
    """An array made while tracing as an argument of a graph node: an NdarrayVariable over a constant tensor
    of its value now (the node reads it now, as eager's call would; a result sharing its memory is refused
    in _check), through lists and tuples; any other Variable as it is."""
    from .containers import BaseListVariable, ListVariable, TupleVariable
    if isinstance(var, ArrayConstantVariable):
        tensor = constant_tensor(tx, torch.tensor, var.value, "a NumPy array made while tracing", [var], {})
        return NdarrayVariable(tensor, constant=var.value.copy())
    if isinstance(var, BaseListVariable) and var.python_cls in (list, tuple) and \
            any(isinstance(v, ArrayConstantVariable) for v in _flat_vars(var.items)):
        items = [_lift(tx, v) for v in var.items]
        return ListVariable(items) if var.python_cls is list else TupleVariable(items)
    return var


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
    array's memory; torch.tensor(array), with a dtype and a device or not: a copy."""
    from .tensor import record
    array = args[0]
    if isinstance(array, ArrayConstantVariable):
        return constant_tensor(tx, fn, array.value, "a NumPy array made while tracing", args, kwargs)
    if fn is torch.tensor and len(args) == 1 and kwargs and set(kwargs) <= {"dtype", "device"}:
        # eager's torch.tensor(array, dtype=, device=): the array's tensor `.to(device, dtype, copy=True)`
        return record(tx, "call_method", "to", [array.tensor], {**kwargs, "copy": ConstantVariable(True)})
    if len(args) > 1 or kwargs:
        unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy array with more arguments")
    if array.scalar and fn is not torch.tensor:
        unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy scalar")
    if fn in (torch.from_numpy, torch.as_tensor, torch.asarray):
        return record(tx, "call_function", torch.ops.aten.alias.default, [array.tensor], {})
    if fn is torch.tensor:
        return record(tx, "call_function", torch.clone, [array.tensor], {})
    unsupported(f"{getattr(fn, '__name__', fn)}() of a NumPy array")


def call_function(tx, fn, args, kwargs):
    """A NumPy function or ufunc: a graph node on arrays over tensors, run now on constants (fold_call)."""
    result = function_call(tx, fn, args, kwargs)
    if result is None:
        result = fold_call(tx, fn, args, kwargs)
    if result is None:
        unsupported(f"numpy.{getattr(fn, '__name__', fn)}() on values that are neither constants nor arrays "
                    "over tensors", hint="use the torch function of the same name")
    return result


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
    if not (isinstance(a, NdarrayVariable) or isinstance(b, NdarrayVariable)):
        return None
    if isinstance(a, tensor.TensorVariable) or isinstance(b, tensor.TensorVariable):
        unsupported(f"a tensor {op} a NumPy array")
    if op.endswith("=") and op not in ("==", "!=", "<=", ">="):
        unsupported(f"{op} on a NumPy array (in place)")
    if op in dunders.COMPARE_DUNDERS:
        forward, reflected = dunders.COMPARE_DUNDERS[op], dunders.COMPARE_DUNDERS[dunders.SWAPPED[op]]
    else:
        forward, reflected = dunders.binary_names(op)[:2]
    a, b = _lift(tx, a), _lift(tx, b)
    if isinstance(a, NdarrayVariable):
        return call(tx, "." + forward, [a, b], {})
    return call(tx, "." + reflected, [b, a], {})


def unary(tx, opname, value):
    names = {"UNARY_NEGATIVE": "__neg__", "UNARY_POSITIVE": "__pos__", "UNARY_INVERT": "__invert__"}
    if isinstance(value, ArrayConstantVariable) and opname in names:
        return value.call_method(tx, names[opname], [], {})
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


# sibling modules bound at the end (they import this one): read at call time, without an import statement on
# each operator
from . import dunders, tensor  # noqa: E402
