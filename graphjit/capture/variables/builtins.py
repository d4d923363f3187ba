"""Builtins, the math and operator modules, and the generic binary/compare/unary operations.

One table maps each builtin to its handler; pure functions applied to constants are simply evaluated.
"""
import builtins
import collections
import inspect
import functools
import math
import operator
import sys
import typing
import types

import torch

from ...exc import Unsupported, UserError
from . import symbolic
from .base import Variable, ConstantVariable, NotConstant, unsupported, BINARY_OPS, COMPARE_OPS
from .containers import (BaseListVariable, TupleVariable, ListVariable, DictVariable, SetVariable,
                         ListIteratorLike, IteratorVariable, SliceVariable, SizeVariable, NamedTupleVariable)
from . import containers
from .tensor import TensorVariable, record
from . import dunders
from . import numpyvars


class AttributeMissing(UserError):
    """The attribute really does not exist (getattr with a default / hasattr / except may catch it)."""

    def __init__(self, message):
        super().__init__(AttributeError(message))


def constants(*vars_):
    return [v.as_python_constant() for v in vars_]


def all_constant(args, kwargs=None):
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in (kwargs or {}).values())


def values_equal(tx, a, b):
    """PyObject_RichCompareBool(a, b, Py_EQ): the same object is equal to itself, else `a == b`."""
    if dunders.known_same(tx, a, b):
        return True
    return compare_op(tx, "==", a, b).truth(tx)


# ---- binary / compare / unary ----

def _is_tensor(v):
    return isinstance(v, TensorVariable)


def binary_op(tx, op, a, b):
    result, a, b = numpyvars.intercept(tx, op, a, b)
    if result is not None:
        return result
    names = dunders.binary_names(op)
    if dunders.takes_part(a, names) or dunders.takes_part(b, names):
        return dunders.binary(tx, op, a, b, lambda o, x, y: _builtin_binary(tx, o, x, y))
    return _builtin_binary(tx, op, a, b)


# a tensor's augmented assignment -> the in-place method it calls (a result type the tensor can't hold raises)
_INPLACE_METHODS = {"+=": "add_", "-=": "sub_", "*=": "mul_", "/=": "div_", "//=": "floor_divide_",
                    "%=": "remainder_", "**=": "pow_", "&=": "bitwise_and_", "|=": "bitwise_or_",
                    "^=": "bitwise_xor_"}


def _builtin_binary(tx, op, a, b):
    fn = BINARY_OPS[op]
    result = containers.set_binary_op(tx, op, a, b)      # sets and set-like dict views
    if result is not None:
        return result
    inplace = op.endswith("=")
    if symbolic.takes_part(a, b):
        return symbolic.apply(tx, BINARY_OPS[op.rstrip("=")], [a, b])
    if _is_tensor(a) or _is_tensor(b):
        if inplace and _is_tensor(a):
            if op in _INPLACE_METHODS:
                from .tensor import _refuse_uncastable_inplace
                _refuse_uncastable_inplace(_INPLACE_METHODS[op], a.fake, b)
            return record(tx, "call_function", fn, [a, b], {}, mutates=True)
        # `n = 0; n += tensor`: Python falls back to the out-of-place operator on a non-tensor
        return record(tx, "call_function", BINARY_OPS[op.rstrip("=")], [a, b], {})
    if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        return _fold(tx, fn, a.value, b.value)
    if isinstance(a, BaseListVariable) and op in ("+", "+="):
        if isinstance(a, ListVariable) and inplace:
            return a.method___iadd__(tx, b)
        return _concatenate(tx, a, b)
    if isinstance(a, ListVariable) and op == "*=" and b.is_constant():
        return a.method___imul__(tx, b)
    if isinstance(a, BaseListVariable) and op in ("*", "*=") and b.is_constant():
        return a.new(a.items * b.as_python_constant())
    if isinstance(b, BaseListVariable) and op == "*" and a.is_constant():
        return b.new(b.items * a.as_python_constant())
    if isinstance(a, ConstantVariable) and isinstance(b, BaseListVariable) and op in ("+", "+=") and \
            type(a.value) in (tuple, list):
        # `acc = (); acc += (t,)`: a constant tuple has no __iadd__, so += is +
        return _concatenate(tx, a, b)
    if isinstance(a, DictVariable) and op in ("|", "|="):
        if inplace:
            a.method_update(tx, b)
            return a
        merged = a.method_copy(tx)
        merged.merge(tx, b)
        return merged
    if all_constant([a, b]):
        return _fold(tx, fn, a.as_python_constant(), b.as_python_constant())
    unsupported(f"operator {op} on {a} and {b}")


def _concatenate(tx, a, b):
    """list + list, tuple + tuple (a namedtuple or torch.Size on the left keeps its own rule)."""
    ta, tb = dunders.type_of(a), dunders.type_of(b)
    base = list if issubclass(ta, list) else tuple
    if tb is None or not issubclass(tb, base):
        if ta is torch.Size:            # torch.Size.__add__'s own words
            raise UserError(TypeError(f"can only concatenate tuple (not {tb.__name__ if tb else b}) to torch.Size"))
        name = "torch.Size" if tb is torch.Size else tb.__name__ if tb else b      # the C type's tp_name
        raise UserError(TypeError(f'can only concatenate {base.__name__} (not "{name}") to {base.__name__}'))
    if ta is tuple and tb is torch.Size:
        # torch.Size overrides __radd__ and subclasses tuple: CPython asks it first, and it makes a Size
        return containers.SizeVariable([*a.unpack(tx), *b.unpack(tx)])
    if isinstance(a, ConstantVariable):
        symbolic_items = isinstance(b, BaseListVariable) and any(
            isinstance(v, symbolic.SymNodeVariable) for v in b.items)
        if type(a.value) not in (tuple, list, torch.Size) or not isinstance(b, BaseListVariable) or (
                not symbolic_items and b.is_constant()):
            return wrap_result(tx, a.value + b.as_python_constant())
        # `(1,) + x.shape[1:]` with symbolic sizes, `() + (tensor,)`: the items stay what they are
        # (as_python_constant would specialize a size, and has no value for a tensor)
        items = [wrap_result(tx, v) for v in a.value] + list(b.unpack(tx))
        cls = {tuple: TupleVariable, list: ListVariable, torch.Size: containers.SizeVariable}[type(a.value)]
        return cls(items)
    if isinstance(a, NamedTupleVariable):
        return TupleVariable(a.items + b.unpack(tx))
    return a.new(a.items + b.unpack(tx))


def _fold(tx, fn, *values):
    try:
        return wrap_result(tx, fn(*values))
    except Exception as e:
        if all(map(_builtin_value, values)):
            # CPython's own error for these values (1 / 0, int("a"), "a" < 1): the code may catch it
            raise UserError(e) from None
        raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e


def _builtin_value(value):
    """A value of builtin types all through (no user dunder can run when an operator meets it)."""
    if type(value).__module__ != "builtins":
        return False
    if type(value) in (tuple, list, set, frozenset):
        return all(map(_builtin_value, value))
    if type(value) is dict:
        return all(map(_builtin_value, value)) and all(map(_builtin_value, value.values()))
    return True


def wrap_result(tx, value):
    from .builder import wrap_constant_result
    return wrap_constant_result(tx, value)


def compare_op(tx, op, a, b):
    result, a, b = numpyvars.intercept(tx, op, a, b)
    if result is not None:
        return result
    name = dunders.COMPARE_DUNDERS[op]
    reflected = dunders.COMPARE_DUNDERS[dunders.SWAPPED[op]]
    if dunders.takes_part(a, (name, reflected)) or dunders.takes_part(b, (name, reflected)):
        return dunders.compare(tx, op, a, b, lambda o, x, y: _builtin_compare(tx, o, x, y))
    return _builtin_compare(tx, op, a, b)


def _builtin_compare(tx, op, a, b):
    fn = COMPARE_OPS[op]
    result = containers.container_compare(tx, op, a, b)  # sets and set-like dict views
    if result is not None:
        return result
    if symbolic.takes_part(a, b):
        return symbolic.apply(tx, fn, [a, b])
    if _is_tensor(a) or _is_tensor(b):
        if (a.is_constant() and a.as_python_constant() is None) or (b.is_constant() and b.as_python_constant() is None):
            return ConstantVariable(op == "!=")
        return record(tx, "call_function", fn, [a, b], {})
    if not (_holds_symbolic(a) or _holds_symbolic(b)) and all_constant([a, b]):
        return _fold(tx, fn, a.as_python_constant(), b.as_python_constant())
    if op in ("==", "!="):
        a, b = _as_container(tx, a), _as_container(tx, b)
    if op in ("==", "!=") and isinstance(a, (BaseListVariable, DictVariable)) and \
            isinstance(b, (BaseListVariable, DictVariable)):
        return ConstantVariable(_containers_equal(tx, a, b) == (op == "=="))
    if op in ("==", "!="):
        ta, tb = dunders.type_of(a), dunders.type_of(b)
        if ta is None or tb is None or not _equality_is_identity(ta) or not _equality_is_identity(tb):
            unsupported(f"comparison {op} between {a} and {b}")
        return ConstantVariable(dunders.same_object(tx, a, b) == (op == "=="))
    unsupported(f"comparison {op} between {a} and {b}")


def _holds_symbolic(var):
    """Whether a list, tuple or dict holds a symbolic number (a size): compared item by item, not folded
    as a constant, which would guard the size's value (nn.RNN's check of hx.size() against a tuple)."""
    if isinstance(var, symbolic.SymNodeVariable):
        return True
    if isinstance(var, BaseListVariable):
        return any(_holds_symbolic(v) for v in var.items)
    if isinstance(var, DictVariable):
        return any(_holds_symbolic(v) for v in var.items.values())
    return False


def _as_container(tx, var):
    """A constant tuple, list or dict (a LOAD_CONST, a folded value) as the container Variable holding it."""
    if isinstance(var, ConstantVariable) and type(var.value) in (tuple, list, dict):
        return wrap_result(tx, var.value)
    return var


def _containers_equal(tx, a, b):
    """== of two lists, two tuples (subclasses included) or two dicts, item by item."""
    ta, tb = dunders.type_of(a), dunders.type_of(b)
    ka = next((k for k in (list, tuple, dict) if issubclass(ta, k)), None)
    if ka is None or type(a).__name__ == "ListIteratorLike" or type(b).__name__ == "ListIteratorLike":
        unsupported(f"comparing {a} and {b}")
    if not issubclass(tb, ka):
        return False                # list == tuple, tuple == dict: both sides NotImplemented, then identity
    if ka is dict:
        ordered = issubclass(ta, collections.OrderedDict) and issubclass(tb, collections.OrderedDict)
        keys_equal = list(a.items) == list(b.items) if ordered else a.items.keys() == b.items.keys()
        return keys_equal and all(values_equal(tx, a.items[k], b.items[k]) for k in a.items)
    return len(a.items) == len(b.items) and all(values_equal(tx, x, y) for x, y in zip(a.items, b.items))


def _equality_is_identity(cls):
    """Classes whose == is object's (functions, modules, classes, iterators ...)."""
    return getattr(cls, "__eq__", None) is object.__eq__ or cls is type


def is_op(tx, a, b, invert):
    if all(isinstance(v, ConstantVariable) and v.interned for v in (a, b)):
        # the interned table holds one str per value: two interned strings are one object exactly
        # where they are equal
        return ConstantVariable((a.value == b.value) != invert)
    return ConstantVariable(dunders.same_object(tx, a, b) != invert)


def contains_op(tx, item, container, invert):
    if isinstance(container, TensorVariable):
        unsupported("`in` on a tensor", hint="use (tensor == value).any()")
    if isinstance(container, ConstantVariable) and item.is_constant():
        return ConstantVariable((item.as_python_constant() in container.value) != invert)
    if hasattr(container, "method___contains__"):
        result = container.method___contains__(tx, item)
        return ConstantVariable(result.value != invert)
    if hasattr(container, "has_dunder") and container.has_dunder("__contains__"):
        return ConstantVariable(container.call_dunder(tx, "__contains__", [item]).truth(tx) != invert)
    # an iterator is consumed up to the item found, as CPython's
    found = any(values_equal(tx, v, item) for v in containers.iterate(tx, container))
    return ConstantVariable(found != invert)


UNARY_OPS = {"UNARY_NEGATIVE": operator.neg, "UNARY_POSITIVE": operator.pos, "UNARY_INVERT": operator.invert}


def unary_op(tx, opname, value):
    if opname == "UNARY_NOT":
        return ConstantVariable(not value.truth(tx))
    fn = UNARY_OPS[opname]
    array = numpyvars.unary(tx, opname, value)
    if array is not None:
        return array
    if numpyvars.is_scalar(getattr(value, "value", None)):
        return numpyvars.fold(tx, fn, [value], {}, f"{opname} of a NumPy scalar")
    if dunders.takes_part(value, (dunders.UNARY_DUNDERS[opname][0],)):
        return dunders.unary(tx, opname, value)
    if _is_tensor(value):
        return record(tx, "call_function", fn, [value], {})
    if symbolic.takes_part(value) and fn is not operator.invert:
        return symbolic.apply(tx, fn, [value])
    if value.is_constant():
        return _fold(tx, fn, value.as_python_constant())
    unsupported(f"{opname} on {value}")


def getitem(tx, obj, index):
    if _is_tensor(obj):
        selected = _select_by_symbolic_ints(tx, obj, index)
        if selected is not None:
            return selected
        return record(tx, "call_function", operator.getitem, [obj, index], {})
    if isinstance(obj, (BaseListVariable, DictVariable)):
        return obj.getitem(tx, index)
    if hasattr(obj, "getitem"):
        return obj.getitem(tx, index)
    if isinstance(obj, ConstantVariable) and index.is_constant():
        return _fold(tx, operator.getitem, obj.value, index.as_python_constant())
    if _is_generic_class(obj) and index.is_constant():
        # `Box[torch.Tensor]` of a typing.Generic class (PEP 695 classes are too): typing's alias, made now
        from .builder import wrap_constant_result
        return wrap_constant_result(tx, obj.as_python_constant()[index.as_python_constant()])
    return obj.call_method(tx, "__getitem__", [index], {})


def _select_by_symbolic_ints(tx, tensor, index):
    """x[i], x[:, i] or x[i, j] with a symbolic int among the items (an int argument or .item() that changes
    between calls, a size minus one) and otherwise only ints and full slices: recorded as selects, which keep
    i symbolic. Tensor.__getitem__ reads i through __index__, which specializes it: a graph per value. None
    for any other index."""
    items = index.items if isinstance(index, TupleVariable) else [index]
    if not any(_symbolic_int(item) for item in items):
        return None
    steps, dim = [], 0
    for item in items:
        if _symbolic_int(item) or (isinstance(item, ConstantVariable) and type(item.value) is int):
            steps.append((dim, item))          # a select removes the dim: the next item indexes this position
        elif _full_slice(item):
            dim += 1
        else:
            return None
    out = tensor
    for dim, item in steps:
        out = record(tx, "call_function", torch.select, [out, ConstantVariable(dim), item], {})
    return out


def _symbolic_int(value):
    return isinstance(value, symbolic.SymNodeVariable) and isinstance(value.sym, torch.SymInt)


def _full_slice(value):
    if isinstance(value, containers.SliceVariable):
        return all(isinstance(p, ConstantVariable) and p.value is None for p in value.parts)
    return isinstance(value, ConstantVariable) and value.value == slice(None)


def _is_generic_class(obj):
    """A class whose subscript is typing.Generic's __class_getitem__ or a classmethod of types.GenericAlias
    (collections.abc.Sequence's, os.PathLike's), with no metaclass __getitem__: the alias is made now."""
    try:
        cls = obj.as_python_constant()
    except Exception:   # noqa: BLE001 -- not a constant: not a class
        return False
    if not isinstance(cls, type) or hasattr(type(cls), "__getitem__"):
        return False
    owner = next((k for k in cls.__mro__ if "__class_getitem__" in vars(k)), None)
    if owner is None:
        return False
    method = vars(owner)["__class_getitem__"]
    return owner is typing.Generic or (isinstance(method, classmethod) and method.__func__ is types.GenericAlias)


def length(tx, obj):
    if _is_tensor(obj):
        if obj.fake.dim() == 0:
            unsupported("len() of a 0-d tensor")
        return symbolic.size_items(tx, obj, obj.fake.shape[:1])[0]
    if isinstance(obj, ConstantVariable):
        return _fold(tx, len, obj.value)
    if isinstance(obj, (BaseListVariable, DictVariable)):
        return ConstantVariable(len(obj.items))
    if hasattr(obj, "length"):      # user objects: type(obj).__len__, its result checked as CPython does
        return obj.length(tx)
    return obj.call_method(tx, "__len__", [], {})


def sorted_items(tx, items, key=None, reverse=None):
    keyed = [(key.call(tx, [v], {}) if key is not None and not (key.is_constant() and key.as_python_constant() is None) else v)
             for v in items]
    try:
        keys = [k.as_python_constant() for k in keyed]
    except NotConstant:
        unsupported("sorting values that aren't constants")
    order = sorted(range(len(items)), key=lambda i: keys[i],
                   reverse=bool(reverse.as_python_constant()) if reverse is not None else False)
    return [items[i] for i in order]


# ---- the builtin table ----

def _iterate(tx, value):
    return value.unpack(tx)


def b_len(tx, obj):
    return length(tx, obj)


def b_isinstance(tx, obj, classes):
    from .objects import guard_mro
    cls = _class_operand(tx, classes)
    guard_mro(tx, obj.python_type())
    return ConstantVariable(_is_instance(obj, cls))


# typing's unsubscripted aliases of collections' ABCs (typing.Mapping, typing.List, typing.Callable):
# isinstance and issubclass check against their __origin__ (subscripted ones raise TypeError in Python)
_TYPING_ALIAS = getattr(typing, "_SpecialGenericAlias", ())


def _class_operand(tx, classes):
    """isinstance's or issubclass's second argument as a Python class or tuple of them."""
    from .containers import TupleVariable
    if isinstance(classes, TupleVariable):
        return tuple(_class_operand(tx, c) for c in classes.items)
    value = getattr(classes, "value", None)
    if isinstance(value, _TYPING_ALIAS) and isinstance(value.__origin__, type):
        if classes.source is not None:
            tx.guards.add_id(classes.source, value)
        return value.__origin__
    if isinstance(value, _UNIONS) and all(isinstance(c, type) for c in value.__args__):
        # `int | str`, `Optional[int]`: isinstance checks against its members, as against a tuple of them
        if classes.source is not None:
            tx.guards.add_id(classes.source, value)
        return value.__args__
    return classes.as_python_constant()


_UNIONS = (types.UnionType, type(typing.Union[int, str]))


def _is_instance(obj, cls):
    if isinstance(cls, tuple):
        return any(_is_instance(obj, c) for c in cls)
    typ = obj.python_type()
    try:
        return issubclass(typ, cls)
    except TypeError:
        pass
    # a class whose instance check raises whatever the instance (a TypedDict: the program sees the
    # TypeError, as huggingface_hub's Union validation catches it), or that reads the instance (a Protocol
    # with data members)
    if typing.is_typeddict(cls):
        try:
            isinstance(None, cls)
        except TypeError as e:
            raise UserError(e) from None
    if not obj.is_constant():
        unsupported(f"isinstance() of {obj} with {cls.__qualname__}, whose check reads the instance "
                    "(a Protocol with data members)", hint="it runs in CPython at a graph break")
    try:
        return isinstance(obj.as_python_constant(), cls)
    except TypeError as e:
        raise UserError(e) from None


def b_length_hint(tx, obj, default=None):
    """operator.length_hint as CPython's: len() where the type has one; an iterator of a constant (range,
    str, tuple) is a real iterator advanced with the trace, so its own hint is exact; a builtin type with
    neither __len__ nor __length_hint__ (object()) gives the default. Others are refused."""
    from .containers import ConstantIteratorVariable
    from .objects import _HEAPTYPE
    fallback = 0 if default is None else default.as_python_constant()
    if isinstance(obj, (BaseListVariable, DictVariable)):
        return length(tx, obj)
    if isinstance(obj, (ConstantVariable, ConstantIteratorVariable)):
        real = obj.value if isinstance(obj, ConstantVariable) else obj.real
        return _fold(tx, operator.length_hint, real, fallback)
    typ = getattr(obj, "python_type", lambda: None)()
    if (isinstance(typ, type) and not typ.__flags__ & _HEAPTYPE and not hasattr(typ, "__len__")
            and not hasattr(typ, "__length_hint__") and type(fallback) is int):
        return ConstantVariable(fallback)
    unsupported(f"operator.length_hint() of {obj}")


def b_issubclass(tx, a, b):
    from .objects import guard_mro
    guard_mro(tx, a.as_python_constant())
    try:
        return ConstantVariable(issubclass(a.as_python_constant(), _class_operand(tx, b)))
    except TypeError as e:      # the program sees it: a TypedDict, a non-class first argument
        raise UserError(e) from None


def b_getattr(tx, obj, name, default=None):
    name = name.as_python_constant()
    if default is None:
        return obj.getattr(tx, name)
    try:
        return obj.getattr(tx, name)
    except AttributeMissing:
        return default


def b_hasattr(tx, obj, name):
    try:
        obj.getattr(tx, name.as_python_constant())
        return ConstantVariable(True)
    except AttributeMissing:
        return ConstantVariable(False)


def b_setattr(tx, obj, name, value):
    obj.setattr(tx, name.as_python_constant(), value)
    return ConstantVariable(None)


def b_delattr(tx, obj, name):
    if not hasattr(obj, "delattr"):
        unsupported(f"delattr() on {obj}")
    obj.delattr(tx, name.as_python_constant())
    return ConstantVariable(None)


def b_range(tx, *args):
    return ConstantVariable(range(*constants(*args)))


def b_enumerate(tx, iterable, start=None):
    begin = start.as_python_constant() if start is not None else 0
    return containers.EnumerateVariable(containers.make_iterator(tx, iterable), begin)


def b_zip(tx, *iterables, strict=None):
    strict = strict is not None and bool(strict.as_python_constant())
    return containers.ZipVariable([containers.make_iterator(tx, it) for it in iterables], strict)


def b_map(tx, fn, *iterables):
    if not iterables:
        raise UserError(TypeError("map() must have at least two arguments."))
    return containers.MapVariable(fn, [containers.make_iterator(tx, it) for it in iterables])


def b_filter(tx, fn, iterable):
    return containers.FilterVariable(fn, containers.make_iterator(tx, iterable))


def _min_max(name):
    real = min if name == "min" else max
    op = "<" if name == "min" else ">"

    def handler(tx, *args, key=None, default=None):
        if key is not None and key.is_constant() and key.as_python_constant() is None:
            key = None
        if not args or len(args) > 1 and default is not None:
            try:                    # CPython's TypeError for the call's shape (no argument, or a default
                real(*[0] * len(args), **({"default": 0} if default is not None else {}))  # with several)
            except TypeError as e:
                raise UserError(e) from None
        if len(args) > 1 and key is None and symbolic.takes_part(*args) and \
                len({a.python_type() for a in args}) == 1:
            # torch.sym_min / sym_max; of an int and a float CPython returns the winner as it is (either
            # type), where sym_min's result is a float: compared one by one below
            return symbolic.apply(tx, real, list(args))
        # one iterable: each item is pulled, its key computed and compared with the best so far (by its
        # __lt__ for min, __gt__ for max) before the next is pulled, as CPython's min_max does
        items = containers.iterate(tx, args[0]) if len(args) == 1 else iter(args)
        best = best_key = None
        for v in items:
            if _is_tensor(v) and key is None:
                unsupported(f"{name}() over tensors compares their values", hint="use torch.maximum / torch.max")
            k = key.call(tx, [v], {}) if key is not None else v
            if best is None or compare_op(tx, op, k, best_key).truth(tx):
                best, best_key = v, k
        if best is None:
            if default is not None:
                return default
            try:
                real([])
            except ValueError as e:
                raise UserError(e)
        return best
    return handler


def b_sum(tx, iterable, start=None):
    total = start if start is not None else ConstantVariable(0)
    for v in containers.iterate(tx, iterable):
        total = binary_op(tx, "+", total, v)
    return total


def b_any(tx, iterable):
    """Stops pulling at the first true item, as CPython's."""
    return ConstantVariable(any(v.truth(tx) for v in containers.iterate(tx, iterable)))


def b_all(tx, iterable):
    return ConstantVariable(all(v.truth(tx) for v in containers.iterate(tx, iterable)))


def b_sorted(tx, iterable, key=None, reverse=None):
    return ListVariable(sorted_items(tx, list(containers.iterate(tx, iterable)), key, reverse))


def b_reversed(tx, seq):
    result = containers.make_reversed(tx, seq)
    if result is not None:
        return result
    if _is_tensor(seq):            # Tensor.__reversed__: the tensor flipped along dim 0
        return seq if seq.fake.dim() == 0 else record(tx, "call_method", "flip", [seq, ConstantVariable(0)], {})
    from .objects import NNModuleVariable
    if isinstance(seq, NNModuleVariable):   # ModuleList / Sequential: __len__ and __getitem__
        return IteratorVariable(list(reversed(seq.unpack(tx))))
    unsupported(f"reversed() of {seq}")


def b_abs(tx, value):
    if _is_tensor(value):
        return record(tx, "call_function", torch.abs, [value], {})
    if symbolic.takes_part(value):
        return symbolic.apply(tx, abs, [value])
    return value.call_method(tx, "__abs__", [], {}) if not value.is_constant() else _fold(tx, abs, value.value)


def _scalar_conversion(fn):
    def handler(tx, *args, **kwargs):
        if args and _is_tensor(args[0]):
            unsupported(f"{fn.__name__}() of a tensor needs its value", hint="keep the value as a tensor")
        if fn in (int, float) and len(args) == 1 and not kwargs and symbolic.takes_part(args[0]):
            return symbolic.apply(tx, fn, args)
        if fn is divmod and len(args) == 2 and not kwargs and symbolic.takes_part(*args) and \
                all(a.python_type() in (int, bool) for a in args):
            # divmod(n, k) of ints is (n // k, n % k): both stay symbolic (a float's is fmod-based)
            return TupleVariable([symbolic.apply(tx, operator.floordiv, args), symbolic.apply(tx, operator.mod, args)])
        if all_constant(args, kwargs):
            return _fold(tx, lambda *a: fn(*a, **{k: v.as_python_constant() for k, v in kwargs.items()}),
                         *constants(*args))
        unsupported(f"{fn.__name__}() of {args}")
    return handler


def b_bool(tx, value=None):
    return ConstantVariable(False if value is None else value.truth(tx))


def b_tuple(tx, iterable=None):
    return TupleVariable(list(containers.iterate(tx, iterable)) if iterable is not None else [])


def b_list(tx, iterable=None):
    return ListVariable(list(containers.iterate(tx, iterable)) if iterable is not None else [])


def b_dict(tx, mapping=None, **kwargs):
    result = DictVariable({})
    if mapping is not None:
        result.merge(tx, mapping)
    for k, v in kwargs.items():
        result.store(tx, ConstantVariable(k), v)
    return result


def b_set(tx, iterable=None):
    result = SetVariable()
    if iterable is not None:
        containers.set_operation(tx, "update", result, iterable)
    return result


def b_iter(tx, iterable, sentinel=None):
    if sentinel is not None:
        return containers.CallableIteratorVariable(iterable, sentinel)
    return containers.make_iterator(tx, iterable)


def b_next(tx, iterator, default=None):
    if not hasattr(iterator, "next"):
        unsupported(f"next() on {iterator}")
    value = iterator.next(tx)
    if value is None:
        if default is None:
            stop = getattr(iterator, "stop_iteration", None)
            raise stop() if stop is not None else UserError(StopIteration())
        return default
    return value


def b_type(tx, obj):
    from .objects import ClassVariable
    return ClassVariable(obj.python_type())


def b_callable(tx, obj):
    """callable(obj): whether type(obj) defines __call__ (even as None, as CPython's slot test does)."""
    if isinstance(obj, ConstantVariable):
        return ConstantVariable(callable(obj.value))
    from .base import MethodOf
    if isinstance(obj, MethodOf):
        return ConstantVariable(True)
    cls = dunders.type_of(obj)
    if cls is None:
        unsupported(f"callable() of {obj}")
    return ConstantVariable(dunders.lookup(cls, "__call__")[1] is not dunders.MISSING)


def b_hash(tx, obj):
    if dunders.takes_part(obj, ("__hash__",)):
        return dunders.hash_of(tx, obj)
    if obj.is_constant():
        return _fold(tx, hash, obj.as_python_constant())
    unsupported(f"hash() of {obj}")


def b_id(tx, obj):
    unsupported("id() of a value: the number differs from run to run (and for objects made in the frame)",
                hint="compare objects with `is` instead")


def b_slice(tx, *args):
    parts = list(args) + [ConstantVariable(None)] * (3 - len(args))
    if len(args) == 1:
        parts = [ConstantVariable(None), args[0], ConstantVariable(None)]
    return SliceVariable(*parts)


def b_super(tx, *args):
    from .objects import SuperVariable
    if args:
        return SuperVariable(args[0].as_python_constant(), args[1])
    cls, obj = tx.current_frame.zero_arg_super(tx)
    return SuperVariable(cls, obj)


def b_print(tx, *args, **kwargs):
    unsupported("print() writes to stdout: a side effect outside the graph",
                hint="it runs in CPython at a graph break; remove it to capture one graph")


def b_object_setattr(tx, obj, name, value):
    if hasattr(obj, "raw_setattr"):
        obj.raw_setattr(tx, name.as_python_constant(), value)
        return ConstantVariable(None)
    return b_setattr(tx, obj, name, value)


def real_value(var):
    """The real Python object behind a Variable, where one exists (constants, functions, modules ...)."""
    from .functions import UserFunctionVariable, BoundMethodVariable
    if isinstance(var, BoundMethodVariable):
        import types
        return types.MethodType(real_value(var.fn), real_value(var.obj))
    if isinstance(var, UserFunctionVariable):
        return var.fn
    for attr in ("value", "module", "cls", "fn"):
        value = getattr(var, attr, None)
        if value is not None:
            return value
    return var.as_python_constant()


def _introspection(fn):
    """inspect.signature() and friends: evaluated on the real objects; the result is an opaque constant.
    A function read from outside the frame is guarded on the objects a signature is made of (its code,
    defaults and keyword defaults: `f.__defaults__ = None` makes every parameter required)."""
    def handler(tx, *args, **kwargs):
        try:
            real_args = [real_value(a) for a in args]
            real_kwargs = {k: real_value(v) for k, v in kwargs.items()}
        except NotConstant:
            unsupported(f"{fn.__name__}() of a value only known while tracing")
        for var, value in zip(args, real_args):
            _guard_signature_parts(tx, var, value)
        return ConstantVariable(fn(*real_args, **real_kwargs))
    return handler


def _guard_signature_parts(tx, var, value):
    source = getattr(var, "source", None)
    function = getattr(value, "__func__", value)
    if source is None or not isinstance(function, types.FunctionType):
        return
    path = "{0}.__func__" if function is not value else "{0}"
    for attr in ("__code__", "__defaults__", "__kwdefaults__"):
        held = tx.guards.obj([getattr(function, attr)])       # in a list: equal tuples are not shared
        tx.guards.add(1, f"{path}.{attr} is {held}[0]", f"{source.expr()}'s {attr} is the one seen while tracing",
                      (source,))


BUILTIN_HANDLERS = {
    len: b_len, isinstance: b_isinstance, issubclass: b_issubclass, getattr: b_getattr,
    hasattr: b_hasattr, setattr: b_setattr, delattr: b_delattr, range: b_range, enumerate: b_enumerate, zip: b_zip,
    map: b_map, filter: b_filter, min: _min_max("min"), max: _min_max("max"), sum: b_sum, any: b_any,
    all: b_all, sorted: b_sorted, reversed: b_reversed, abs: b_abs, bool: b_bool, tuple: b_tuple,
    list: b_list, dict: b_dict, set: b_set, iter: b_iter, next: b_next, type: b_type,
    callable: b_callable, hash: b_hash, id: b_id, slice: b_slice, super: b_super, print: b_print,
    int: _scalar_conversion(int), float: _scalar_conversion(float), str: _scalar_conversion(str),
    round: _scalar_conversion(round), divmod: _scalar_conversion(divmod), pow: _scalar_conversion(pow),
    repr: _scalar_conversion(repr), format: _scalar_conversion(format), chr: _scalar_conversion(chr),
    ord: _scalar_conversion(ord), frozenset: _scalar_conversion(frozenset),
    complex: _scalar_conversion(complex), bytes: _scalar_conversion(bytes),
    object.__setattr__: b_object_setattr, operator.length_hint: b_length_hint,
}
def _copy_var(tx, var, deep, memo):
    """copy.copy / copy.deepcopy over Variables: a new object made in the frame, whose attributes come
    from the original's (read through its source, so guarded like any other read)."""
    from .objects import UserObjectVariable, _class_lookup, _MISSING
    key = id(var)
    if key in memo:
        return memo[key]
    item = (lambda v: _copy_var(tx, v, deep, memo)) if deep else (lambda v: v)
    if isinstance(var, ConstantVariable) and (type(var.value) in (int, float, bool, str, bytes, complex, type(None))
                                            or isinstance(var.value, (torch.dtype, torch.device, type))):
        result = var
    elif isinstance(var, TupleVariable) and type(var) is TupleVariable:
        result = TupleVariable([item(v) for v in var.items])
    elif isinstance(var, ListVariable):
        result = ListVariable([item(v) for v in var.items])
    elif isinstance(var, DictVariable) and not isinstance(var, SetVariable):
        result = DictVariable({k: item(v) for k, v in var.items.items()}, python_cls=var.python_cls)
        result.key_vars = dict(var.key_vars)
    elif isinstance(var, UserObjectVariable) and var.is_new and var._dict_part is None:
        result = UserObjectVariable(cls=var.cls)
        memo[key] = result
        result.attrs = {name: item(v) for name, v in var.attrs.items()}
    elif isinstance(var, UserObjectVariable) and not var.is_new and not issubclass(var.cls, dict):
        cls = var.cls
        custom = [n for n in ("__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__",
                              "__setstate__") if _class_lookup(cls, n) not in (_MISSING, _class_lookup(object, n))]
        if custom or hasattr(cls, "__slots__") or not hasattr(var.value, "__dict__"):
            unsupported(f"copying a {cls.__name__} (defines {custom or '__slots__'})")
        result = UserObjectVariable(cls=cls)
        memo[key] = result
        for name in list(vars(var.value)):
            result.attrs[name] = item(var.getattr(tx, name))
    else:
        unsupported(f"{'deep' if deep else ''}copy of {var}")
    memo[key] = result
    return result


def _build_class(tx, *args, **kwargs):
    from .classdef import build_class
    return build_class(tx, *args, **kwargs)


BUILTIN_HANDLERS[builtins.__build_class__] = _build_class


def _handled_exception(tx):
    """The exception sys.exception() gives: one a handler of the trace is handling, or None where the
    caller handles none either."""
    from ..interpreter import CALLERS_EXCEPTION
    exc = tx.handled_exception()
    if exc is CALLERS_EXCEPTION and tx.caller_handles_none():
        return None
    if exc is CALLERS_EXCEPTION:
        unsupported("sys.exception() outside the frame's own handlers (the caller's exception)")
    return exc


def _exc_info(tx):
    from .base import TracebackVariable
    from .builder import wrap
    exc = _handled_exception(tx)
    if exc is None:
        return TupleVariable([ConstantVariable(None)] * 3)
    return TupleVariable([wrap(tx, type(exc), None), ConstantVariable(exc), TracebackVariable()])


def b_intern(tx, string):
    """sys.intern(s): the one str of the interned table equal to s, known to be it (see is_op)."""
    if not string.is_constant():
        unsupported(f"sys.intern() of {string}, which is not a constant")
    result = _fold(tx, sys.intern, string.as_python_constant())
    result.interned = True
    return result


BUILTIN_HANDLERS[sys.intern] = b_intern
BUILTIN_HANDLERS[sys.exception] = lambda tx: ConstantVariable(_handled_exception(tx))
BUILTIN_HANDLERS[sys.exc_info] = _exc_info
BUILTIN_HANDLERS[__import__("copy").deepcopy] = lambda tx, x, memo=None: _copy_var(tx, x, True, {})
BUILTIN_HANDLERS[__import__("copy").copy] = lambda tx, x: _copy_var(tx, x, False, {})

for _fn in (inspect.signature, inspect.getfullargspec, inspect.isclass, inspect.isfunction, inspect.ismethod,
            inspect.iscoroutinefunction, inspect.isgeneratorfunction, inspect.getmodule, inspect.unwrap):
    BUILTIN_HANDLERS[_fn] = _introspection(_fn)

# operator module functions on Variables, by the interpreter's own generic operations
for _sym, _fn in BINARY_OPS.items():
    BUILTIN_HANDLERS.setdefault(_fn, (lambda sym: lambda tx, a, b: binary_op(tx, sym, a, b))(_sym))
for _sym, _fn in COMPARE_OPS.items():
    BUILTIN_HANDLERS[_fn] = (lambda sym: lambda tx, a, b: compare_op(tx, sym, a, b))(_sym)
BUILTIN_HANDLERS.update({
    operator.getitem: getitem,
    operator.neg: lambda tx, a: unary_op(tx, "UNARY_NEGATIVE", a),
    operator.pos: lambda tx, a: unary_op(tx, "UNARY_POSITIVE", a),
    operator.invert: lambda tx, a: unary_op(tx, "UNARY_INVERT", a),
    operator.not_: lambda tx, a: ConstantVariable(not a.truth(tx)),
    operator.truth: lambda tx, a: ConstantVariable(a.truth(tx)),
    operator.is_: lambda tx, a, b: is_op(tx, a, b, False),
    operator.is_not: lambda tx, a, b: is_op(tx, a, b, True),
    operator.contains: lambda tx, a, b: contains_op(tx, b, a, False),
    operator.index: lambda tx, a: ConstantVariable(operator.index(a.as_python_constant())),
    operator.setitem: lambda tx, a, k, v: a.call_method(tx, "__setitem__", [k, v], {}),
    operator.delitem: lambda tx, a, k: a.call_method(tx, "__delitem__", [k], {}),
})
# math functions with a symbolic form in torch: function -> (torch's symbolic function, the bounds of the
# arguments for which CPython returns a value, each (comparison, bound)). Outside them CPython raises
# (math.cos(inf), math.acos(2)): the trace guards the argument inside and folds it otherwise.
_INF = float("inf")
_SYMBOLIC_MATH = {
    math.sqrt: (torch._sym_sqrt, ((">=", 0),)),
    math.cos: (torch._sym_cos, ((">", -_INF), ("<", _INF))),
    math.sin: (torch._sym_sin, ((">", -_INF), ("<", _INF))),
    math.tan: (torch._sym_tan, ((">", -_INF), ("<", _INF))),
    math.tanh: (torch._sym_tanh, ()),
    math.atan: (torch._sym_atan, ()),
    math.asin: (torch._sym_asin, ((">=", -1), ("<=", 1))),
    math.acos: (torch._sym_acos, ((">=", -1), ("<=", 1))),
    math.log2: (torch._sym_log2, ((">", 0),)),
}
for _fn in (math.floor, math.ceil, math.trunc, *_SYMBOLIC_MATH):
    BUILTIN_HANDLERS[_fn] = (lambda fn: lambda tx, a: _math_function(tx, fn, a))(_fn)


def _math_function(tx, fn, value):
    """math.floor/ceil/trunc, and sqrt, cos, sin ... (_SYMBOLIC_MATH): symbolic on a symbolic number (a
    SymInt or SymFloat result, no guard on its value; the others guard that their argument is one for which
    CPython returns a value: a cosine learning-rate schedule over a step counter is one graph), else
    folded."""
    if symbolic.takes_part(value):
        if fn not in _SYMBOLIC_MATH:
            return symbolic.apply(tx, fn, [value])
        sym_fn, bounds = _SYMBOLIC_MATH[fn]
        if all(compare_op(tx, op, value, ConstantVariable(bound)).truth(tx) for op, bound in bounds):
            return symbolic.apply(tx, sym_fn, [value])
    return _fold(tx, fn, value.as_python_constant())

# builtins that read their caller's frame (without arguments, for vars and dir): no graph break runs them
FRAME_READERS = {locals, vars, dir, globals, eval, exec, sys._getframe, breakpoint}
if hasattr(sys, "_getframemodulename"):
    FRAME_READERS.add(sys._getframemodulename)

# pure functions evaluated directly when every argument is a constant
PURE_ON_CONSTANTS = {getattr(math, n) for n in dir(math) if callable(getattr(math, n))}
PURE_ON_CONSTANTS |= {v for v in vars(operator).values() if callable(v)} - {operator.setitem, operator.delitem,
                                                                            operator.iadd, operator.iconcat}
PURE_ON_CONSTANTS |= {len, isinstance, issubclass, min, max, abs, round, divmod, pow, int, float, str, bool,
                      repr, format, chr, ord, hash, sorted, tuple, frozenset, complex, sys.intern}
# constructors and tables that builtin types offer as attributes (`str.maketrans`), read by BuiltinVariable
_PURE_TYPE_ATTRS = {(str, "maketrans"), (bytes, "maketrans"), (bytes, "fromhex"), (int, "from_bytes")}
PURE_ON_CONSTANTS |= {getattr(cls, name) for cls, name in _PURE_TYPE_ATTRS}


class BuiltinVariable(Variable):
    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def call(self, tx, args, kwargs):
        handler = BUILTIN_HANDLERS.get(self.fn)
        if isinstance(self.fn, (operator.itemgetter, operator.attrgetter)):
            return self._call_getter(tx, args)
        if isinstance(self.fn, operator.methodcaller):
            ctor, rargs = self.fn.__reduce__()[:2]
            if isinstance(ctor, functools.partial):   # methodcaller with keywords
                name, margs, mkw = ctor.args[0], rargs, ctor.keywords
            else:
                name, *margs = rargs
                mkw = {}
            from .builder import wrap_constant_result
            return args[0].call_method(tx, name, [wrap_constant_result(tx, a) for a in margs],
                                       {k: wrap_constant_result(tx, v) for k, v in (mkw or {}).items()})
        if handler is not None:
            try:
                return handler(tx, *args, **kwargs)
            except TypeError as e:
                if "argument" not in str(e):
                    raise
                raise Unsupported(f"{self.fn.__name__}() called with unsupported arguments: {e}") from e
        if numpyvars.is_ufunc(self.fn) or numpyvars.is_function(self.fn):
            return numpyvars.call_function(tx, self.fn, args, kwargs)
        if self.fn in PURE_ON_CONSTANTS and all_constant(args, kwargs):
            return _fold(tx, lambda *a: self.fn(*a, **{k: v.as_python_constant() for k, v in kwargs.items()}),
                         *constants(*args))
        if self.fn in PURE_ON_CONSTANTS and any(_is_tensor(a) for a in args):
            unsupported(f"{self.name()}() on a tensor needs its value", hint="use the torch equivalent")
        if self.fn in FRAME_READERS and not (self.fn in (vars, dir) and args):
            # run at a graph break, it would read graphjit's frame (its locals, globals, code)
            raise Unsupported(f"{self.name()}() reads the frame that calls it", hint="the frame runs eagerly",
                              no_break=f"{self.name()}() reads the calling frame")
        unsupported(f"builtin {self.name()}() with arguments {args}")

    def getattr(self, tx, name):
        if numpyvars.is_ufunc(self.fn):
            return numpyvars.ufunc_attribute(tx, self.fn, name)
        if self.fn is dict and name == "fromkeys":
            return _DictFromKeys()
        if (self.fn, name) in _PURE_TYPE_ATTRS:
            return BuiltinVariable(getattr(self.fn, name))
        if name == "__getitem__" and isinstance(self.fn, type) and hasattr(self.fn, "__class_getitem__"):
            return _GenericAlias(self.fn)          # `list[int]` in an annotation evaluated at def time
        if name in ("__name__", "__qualname__", "__module__") and type(self.fn) in (type, types.BuiltinFunctionType):
            return ConstantVariable(getattr(self.fn, name))     # read-only on builtin types and functions
        return super().getattr(tx, name)

    def _call_getter(self, tx, args):
        (obj,) = args
        fn = self.fn
        keys = fn.__reduce__()[1]
        if isinstance(fn, operator.itemgetter):
            items = [getitem(tx, obj, ConstantVariable(k)) for k in keys]
        else:
            items = []
            for path in keys:
                value = obj
                for part in path.split("."):
                    value = value.getattr(tx, part)
                items.append(value)
        return items[0] if len(items) == 1 else TupleVariable(items)

    def name(self):
        return getattr(self.fn, "__name__", repr(self.fn))

    def __repr__(self):
        return f"Builtin({self.name()})"


class _GenericAlias(Variable):
    """cls[args] of a builtin class (list[Any], dict[str, int]): the typing alias, built now from constants."""

    def __init__(self, cls):
        self.cls = cls

    def call(self, tx, args, kwargs):
        from .builder import wrap_constant_result
        if kwargs or len(args) != 1 or not args[0].is_constant():
            unsupported(f"{self.cls.__name__}[...] of values that are not constants")
        return wrap_constant_result(tx, self.cls[args[0].as_python_constant()])


class _DictFromKeys(Variable):
    """dict.fromkeys(iterable, value=None): a dict made in the frame, every key mapped to the one value."""

    def python_type(self):
        return types.BuiltinMethodType

    def call(self, tx, args, kwargs):
        from .builder import is_constant_key
        if kwargs or not 1 <= len(args) <= 2:
            unsupported("dict.fromkeys() with these arguments")
        value = args[1] if len(args) == 2 else ConstantVariable(None)
        iterator = containers.make_iterator(tx, args[0])
        items = {}
        while (key := iterator.next(tx)) is not None:
            if not key.is_constant() or not is_constant_key(key.as_python_constant()):
                unsupported(f"dict.fromkeys() with a key that is not a constant: {key}")
            items[key.as_python_constant()] = value
        return DictVariable(items)


class SlotMethodVariable(Variable):
    """A C-level method found on a class (e.g. `object.__init__`, `dict.__getitem__`), bound to obj."""

    def __init__(self, obj, name, descriptor):
        self.obj, self.name, self.descriptor = obj, name, descriptor

    def reconstruct(self, cg):
        """The method bound again (on the stack at a graph break that calls it: an outside deque's append)."""
        return f"{cg.obj(types.MethodType)}({cg.obj(self.descriptor)}, {cg.expr(self.obj)})"

    def call(self, tx, args, kwargs):
        owner = getattr(self.descriptor, "__objclass__", object)
        if owner in (dict, collections.OrderedDict) and hasattr(self.obj, "call_dict_method"):
            return self.obj.call_dict_method(tx, self.name, args, kwargs)
        if owner is collections.defaultdict and self.name == "__init__" and getattr(self.obj, "is_new", False):
            # defaultdict(factory, ...) made in the frame: the factory is its default_factory member
            factory = args[0] if args else ConstantVariable(None)
            self.obj.attrs["default_factory"] = factory
            return self.obj.call_dict_method(tx, "__init__", list(args[1:]), kwargs)
        if self.name == "__init__" and owner is object:
            return ConstantVariable(None)
        if self.name == "__setattr__":
            name, value = args
            if hasattr(self.obj, "raw_setattr"):
                self.obj.raw_setattr(tx, name.as_python_constant(), value)
                return ConstantVariable(None)
            return b_setattr(tx, self.obj, *args)
        if self.name == "__getattribute__" and hasattr(self.obj, "raw_getattr"):
            return self.obj.raw_getattr(tx, args[0].as_python_constant())
        if self.name in ("__getattribute__", "__getattr__"):
            return self.obj.getattr(tx, args[0].as_python_constant())
        unsupported(f"C method {owner.__name__}.{self.name} on {self.obj}")
