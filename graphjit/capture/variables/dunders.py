"""Python's operator protocols where user classes take part: identity (`is`), rich comparisons and
binary operators dispatched to dunder methods in CPython's order, and hash() of objects.

    class V:
        def __init__(self, x): self.x = x
        def __add__(self, o): return V(self.x + o.x)

`V(a) + V(b)` inlines V.__add__. `1 + V(a)` tries int.__add__ (NotImplemented for a V), then V.__radd__
(missing here: a TypeError, as in Python). A right operand whose type is a proper subclass of the left's
and overrides the reflected method goes first. `==` falls back to identity when both sides return
NotImplemented. Where a builtin type's own method would meet a user object in a way not modelled here
(str % obj, a tensor and an object with __torch_function__ ...), the operation is refused with the reason.
"""
import sys
import types

import torch

from ...exc import Unsupported, UserError
from .base import ConstantVariable, unsupported

MISSING = object()      # an attribute no class on the MRO defines

BINARY_STEMS = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod",
                "**": "pow", "@": "matmul", "<<": "lshift", ">>": "rshift", "&": "and", "|": "or", "^": "xor"}
COMPARE_DUNDERS = {"<": "__lt__", "<=": "__le__", "==": "__eq__", "!=": "__ne__", ">": "__gt__", ">=": "__ge__"}
SWAPPED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}

# Constants whose identity is CPython's choice: two equal ints or strings may or may not be one object.
_VALUE_TYPES = (int, float, complex, str, bytes, tuple, frozenset, range, slice, torch.device)
_C_METHOD_TYPES = (types.WrapperDescriptorType, types.MethodDescriptorType, types.BuiltinFunctionType)
_SMALL_INTS = range(-5, 257)     # CPython's cached ints: equal ones are always the same object
# Builtin types whose number methods return NotImplemented for a tuple (tuples and strings have none:
# they concatenate after both sides decline; str % tuple formats, and is refused before this is asked)
_NO_NUMBER_METHOD_FOR_TUPLES = (int, float, complex, bool, str, bytes, tuple, frozenset, type(None))


# ---- class lookups ----

def lookup(cls, name):
    """(defining class, attribute) of `name` on cls's MRO, or (None, MISSING)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, MISSING


def is_library_class(klass):
    """Builtins, the standard library and torch (a class, or a function by its __module__): their
    dunders are modelled by the Variable families."""
    return is_library_name(getattr(klass, "__module__", None) or "")


def is_library_name(module_name):
    """Whether a module of this name is builtins', the standard library's or torch's."""
    root = module_name.split(".")[0]
    return root in ("builtins", "torch") or root in sys.stdlib_module_names


def user_defines(cls, name):
    """Whether a user class (not a library one) on cls's MRO is where `name` is found."""
    klass, attr = lookup(cls, name)
    return attr is not MISSING and not is_library_class(klass)


def type_of(var):
    try:
        return var.python_type()
    except Unsupported:
        return None


def _is_object(var):
    return isinstance(var, (objects.UserObjectVariable, objects.NNModuleVariable))


def _is_tensor(var):
    return isinstance(var, tensor.TensorVariable)


def takes_part(var, names):
    """Whether `var` makes an operator go through dunder dispatch: a user object, or a value whose class
    (a namedtuple subclass, an enum ...) defines one of `names` in user code."""
    if _is_object(var):
        return True
    if _is_tensor(var):
        return False
    cls = type_of(var)
    return cls is not None and any(user_defines(cls, n) for n in names)


def is_not_implemented(var):
    return isinstance(var, ConstantVariable) and var.value is NotImplemented


def _ni():
    return ConstantVariable(NotImplemented)


def _name(var):
    cls = type_of(var)
    return cls.__name__ if cls is not None else type(var).__name__


# ---- identity ----

def _identity(var):
    """What `is` compares: ("object", o) for a value existing outside the trace, ("node", n) for a tensor,
    ("var", var) for an object made in the frame or a mutable container (one Variable per object), or
    None where CPython may or may not share the object (equal ints, strings, tuples)."""
    if isinstance(var, ConstantVariable):
        return None if type(var.value) in _VALUE_TYPES else ("object", var.value)
    if _is_tensor(var):
        return ("node", var.node)
    if isinstance(var, objects.UserObjectVariable):
        return ("var", var) if var.is_new else ("object", var.value)
    if isinstance(var, objects.NNModuleVariable):
        return ("object", var.module)
    if isinstance(var, functions.BoundMethodVariable):
        return ("object", var.value) if var.value is not None else ("var", var)
    if isinstance(var, (containers.ListVariable, containers.DictVariable, containers.SetVariable,
                        containers.DictViewVariable, containers.IteratorVariable, containers.ListIteratorLike,
                        functions.NestedFunctionVariable, numpyvars.ArrayConstantVariable)):
        return ("var", var)
    if isinstance(var, (containers.BaseListVariable, symbolic.SymNodeVariable)):
        return None         # (a symbolic number is an int, float or bool: read as a constant, it would specialize)
    try:
        value = var.as_python_constant()
    except Exception:
        return ("var", var) if type(var).__name__ in ("GeneratorVariable", "SuperVariable") else None
    return None if type(value) in _VALUE_TYPES else ("object", value)


def _type_guarded(var):
    """A value read from outside whose guards check only its type: which object it is may change."""
    return var.source is not None and isinstance(var, (objects.UserObjectVariable, objects.NNModuleVariable,
                                                       containers.ListVariable, containers.DictVariable,
                                                       containers.SetVariable, functions.BoundMethodVariable)) or \
        _is_tensor(var)


def _guard_relation(tx, a, b, same):
    """`a is b` decided while tracing: the relation must hold on later calls too."""
    if not (_type_guarded(a) or _type_guarded(b)):
        return                  # constants, functions, classes: guarded by value or identity already
    if not same and type_of(a) is not type_of(b):
        return                  # their type guards keep them apart
    op = "is" if same else "is not"
    if a.source is not None and b.source is not None:
        if a.source != b.source:
            tx.guards.add(1, f"{{0}} {op} {{1}}", None, (a.source, b.source))
    elif a.source is not None or b.source is not None:
        sourced, other = (a, b) if a.source is not None else (b, a)
        key = _identity(other)
        if key[0] == "object":      # a value baked into the trace
            tx.guards.add(1, f"{{0}} {op} {tx.guards.obj(key[1])}", None, (sourced.source,))


def _same_constant(a, b):
    """`is` between two constants of one value type (ints, strings ...), or None where CPython decides."""
    try:
        equal = a.value == b.value
    except Exception:
        return None
    if equal is not True and equal is not False:
        return None
    if not equal:
        return None if isinstance(a.value, float) else False     # NaN != NaN yet may be one object
    if type(a.value) is int and a.value in _SMALL_INTS:
        return True
    return None


def same_object(tx, a, b):
    """Python's `a is b` over Variables (guarded where the answer depends on the inputs), or refuse."""
    if a is b:
        return True
    ka, kb = _identity(a), _identity(b)
    if ka is None or kb is None:
        ta, tb = type_of(a), type_of(b)
        if ta is not None and tb is not None and ta is not tb:
            return False
        if isinstance(a, symbolic.SymNodeVariable) or isinstance(b, symbolic.SymNodeVariable):
            # two numbers of one type: their values, specialized, as CPython's small ints
            a, b = (ConstantVariable(v.as_python_constant()) for v in (a, b))
        if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
            same = _same_constant(a, b)
            if same is not None:
                return same
        unsupported(f"`is` between two {_name(a)} values: whether CPython shares such objects is not modelled",
                    hint="compare with == instead")
    if ka[0] != kb[0]:
        return False
    same = ka[1] is kb[1]
    if ka[0] != "node" or not same:
        _guard_relation(tx, a, b, same)
    return same


def known_same(tx, a, b):
    """The identity shortcut of `in`, list.index/count and container ==: True where a and b are one object
    (guarded like `is`), False where that is unknown or not so."""
    if a is b:
        return True
    ka, kb = _identity(a), _identity(b)
    if ka is None or kb is None:
        if any(isinstance(v, ConstantVariable) and isinstance(v.value, float) and v.value != v.value
               for v in (a, b)):
            unsupported("`in` / == with a NaN: whether it is the same float object is not modelled")
        return False
    return ka[0] == kb[0] and same_object(tx, a, b)


# ---- one side of an operator ----

def _bound(tx, var, cls, name):
    from .builder import wrap_class_attribute
    from .objects import guard_class_attribute
    guard_class_attribute(tx, cls, name)
    return wrap_class_attribute(tx, var, cls, name)


def call_side(tx, var, name, other):
    """type(var).<name>(var, other): a user method inlined, object's default, or a builtin's method."""
    if _is_tensor(var):
        return _tensor_side(tx, var, name, other)
    cls = type_of(var)
    if cls is None:
        unsupported(f"{name} of {var}")
    klass, attr = lookup(cls, name)
    if attr is MISSING:
        return _ni()
    if attr is None:
        unsupported(f"{cls.__name__}.{name} is None")
    if not is_library_class(klass):
        return _bound(tx, var, cls, name).call(tx, [other], {})
    if klass is object:
        return _object_side(tx, var, name, other)
    return _builtin_side(tx, var, cls, name, other)


def _object_side(tx, var, name, other):
    """object's own rich comparisons: __eq__ is identity, __ne__ negates type(var).__eq__."""
    if name == "__eq__":
        return ConstantVariable(True) if same_object(tx, var, other) else _ni()
    if name == "__ne__":
        result = call_side(tx, var, "__eq__", other)
        return result if is_not_implemented(result) else ConstantVariable(not result.truth(tx))
    return _ni()


def _foreign(var, other):
    """`other` is a user object unrelated to var's builtin type: builtin methods return NotImplemented."""
    if not _is_object(other):
        return False
    base = type_of(var)
    return base is None or not issubclass(type_of(other), base)


def _builtin_side(tx, var, cls, name, other):
    """A library type's own method: bound and called for a user object (a dict subclass's dict methods,
    a collections.abc mixin's); for a builtin value, NotImplemented against an unrelated user object
    (what every C type's operator does), or None: the caller runs the builtin operation itself."""
    if _is_object(var):
        return _bound(tx, var, cls, name).call(tx, [other], {})
    attr = lookup(cls, name)[1]
    if not isinstance(attr, _C_METHOD_TYPES):
        unsupported(f"{cls.__name__}.{name} (library Python code) with a {_name(other)} operand")
    if name in ("__mod__", "__rmod__") and isinstance(var, ConstantVariable) and \
            isinstance(var.value, (str, bytes)):
        unsupported(f"{type(var.value).__name__} % {_name(other)}: formatting with a user object")
    if _foreign(var, other):
        return _ni()
    return None


def _tensor_side(tx, var, name, other):
    cls = type_of(other)
    if cls is not None and hasattr(cls, "__torch_function__") and not issubclass(cls, torch.Tensor):
        unsupported(f"{cls.__name__} defines __torch_function__: the tensor operator {name} dispatches to it")
    if cls is not None and issubclass(cls, (int, float, complex)):
        # Tensor's operators take any int/float/complex subclass as the number it is, whatever its own
        # (reflected) dunders say: eager's result, at a graph break
        unsupported(f"Tensor.{name} with a {cls.__name__} operand (a subclass of {cls.__mro__[1].__name__})",
                    hint="the operation runs in CPython, as in eager")
    if _is_object(other):
        return _ni()
    unsupported(f"Tensor.{name} with a {_name(other)} operand")


# ---- rich comparisons ----

def compare(tx, op, a, b, builtin):
    """a <op> b (op in < <= == != > >=) in CPython's order; `builtin(op, x, y)` is the builtin types'
    own comparison, used when a builtin side meets a value it handles (a tuple and a namedtuple)."""
    ta, tb = type_of(a), type_of(b)
    reflected_first = ta is not None and tb is not None and ta is not tb and issubclass(tb, ta)
    order = [(b, SWAPPED[op], a), (a, op, b)] if reflected_first else [(a, op, b), (b, SWAPPED[op], a)]
    for x, o, y in order:
        result = call_side(tx, x, COMPARE_DUNDERS[o], y)
        if result is None:
            result = builtin(o, x, y)
        if not is_not_implemented(result):
            return result
    if op in ("==", "!="):
        return ConstantVariable(same_object(tx, a, b) == (op == "=="))
    raise UserError(TypeError(f"'{op}' not supported between instances of {_name(a)!r} and {_name(b)!r}"))


# ---- binary operators ----

def binary_names(op):
    """The dunders a binary operator may call: forward, reflected, in place."""
    stem = BINARY_STEMS[op[:-1] if op.endswith("=") else op]
    return f"__{stem}__", f"__r{stem}__", f"__i{stem}__"


def _overrides(sub, base, name):
    return lookup(sub, name)[1] is not lookup(base, name)[1]


def binary(tx, op, a, b, builtin):
    """a <op> b (op in BINARY_OPS, in-place forms included) in CPython's order; `builtin(op, a, b)` is the
    builtin types' own operation (sequence concatenation and repetition, numbers), the last resort."""
    forward, reflected, inplace = binary_names(op)
    if op.endswith("="):
        result = _inplace_side(tx, a, inplace, b)
        if not is_not_implemented(result):
            return result
    result = _number_protocol(tx, a, b, forward, reflected)
    if not is_not_implemented(result):
        return result
    if _sequence(a) or _sequence(b):
        if _is_object(a) or _is_object(b) or _is_tensor(a) or _is_tensor(b):
            unsupported(f"sequence {op} with a {_name(b if _sequence(a) else a)} operand "
                        "(CPython's concatenation / repetition after NotImplemented)")
        return builtin(op, a, b)
    raise UserError(TypeError(f"unsupported operand type(s) for {op}: {_name(a)!r} and {_name(b)!r}"))


def _inplace_side(tx, a, name, b):
    if _is_tensor(a):
        return _tensor_side(tx, a, name, b)
    cls = type_of(a)
    klass, attr = lookup(cls, name) if cls is not None else (None, MISSING)
    if attr is MISSING or (is_library_class(klass) and not _is_object(a)):
        return _ni()            # a builtin's in-place method (list +=) runs in the builtin fallback
    return call_side(tx, a, name, b)


def _number_protocol(tx, a, b, forward, reflected):
    ta, tb = type_of(a), type_of(b)
    same_type = ta is not None and ta is tb
    first_reflected = ta is not None and tb is not None and not same_type and issubclass(tb, ta) and \
        _overrides(tb, ta, reflected)
    if first_reflected:
        result = _number_side(tx, b, reflected, a)
        if not is_not_implemented(result):
            return result
    result = _number_side(tx, a, forward, b)
    if not is_not_implemented(result) or same_type or first_reflected:
        return result
    return _number_side(tx, b, reflected, a)


def _number_side(tx, var, name, other):
    result = call_side(tx, var, name, other)
    if result is None:
        # a builtin's own number method with a value it may accept (a tuple and a namedtuple): tuples,
        # lists and strings have none (they concatenate later); numbers, dicts and sets: not modelled
        from .containers import BaseListVariable
        if isinstance(var, BaseListVariable) or isinstance(var, ConstantVariable) and \
                type(var.value) in _NO_NUMBER_METHOD_FOR_TUPLES and isinstance(other, BaseListVariable):
            return _ni()
        unsupported(f"{_name(var)}.{name} with a {_name(other)} operand")
    return result


def _sequence(var):
    from .containers import BaseListVariable
    return isinstance(var, BaseListVariable) or isinstance(var, ConstantVariable) and \
        isinstance(var.value, (str, bytes, tuple, list))


# ---- unary operators and hash ----

UNARY_DUNDERS = {"UNARY_NEGATIVE": ("__neg__", "-"), "UNARY_POSITIVE": ("__pos__", "+"),
                 "UNARY_INVERT": ("__invert__", "~")}


def unary(tx, opname, value):
    name, symbol = UNARY_DUNDERS[opname]
    cls = type_of(value)
    klass, attr = lookup(cls, name)
    if attr is MISSING:
        raise UserError(TypeError(f"bad operand type for unary {symbol}: {cls.__name__!r}"))
    if attr is None or is_library_class(klass):
        unsupported(f"unary {symbol} of a {cls.__name__} ({klass.__name__ if klass else ''}.{name})")
    return _bound(tx, value, cls, name).call(tx, [], {})


def hash_of(tx, var):
    """hash(obj) for a user object: its __hash__ inlined; object's default (identity) is refused."""
    cls = type_of(var)
    klass, attr = lookup(cls, "__hash__")
    if attr is None:
        raise UserError(TypeError(f"unhashable type: {cls.__name__!r}"))
    if attr is MISSING or is_library_class(klass):
        unsupported(f"hash() of a {cls.__name__} (its identity or a builtin's hash, different each run)")
    result = _bound(tx, var, cls, "__hash__").call(tx, [], {})
    if not (isinstance(result, ConstantVariable) and isinstance(result.value, int)):
        if result.is_constant():
            raise UserError(TypeError("__hash__ method should return an integer"))
        unsupported(f"{cls.__name__}.__hash__ returned {result}")
    h = result.value
    h = h if -2 ** 63 <= h < 2 ** 63 else hash(h)   # CPython: an int that overflows is hashed again
    return ConstantVariable(-2 if h == -1 else int(h))


# sibling modules, bound once they are all importable (they import this one): their classes are read at
# call time, without an import statement on each of capture's many calls
from . import containers, functions, numpyvars, objects, symbolic, tensor  # noqa: E402
