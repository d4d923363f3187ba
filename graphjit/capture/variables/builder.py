"""wrap(): a real Python value read from `source` -> the Variable that stands for it, plus its guards.

The type of the value picks the family (a table of checks, first match wins); the guard installed is the
weakest one that keeps the trace valid: tensors by metadata, constants by value, functions and Python
modules by identity, nn.Modules and user objects by type (so identical blocks share one compiled entry).
"""
import builtins
import collections
import dataclasses
import enum
import functools
import inspect
import math
import os
import operator
import sys
import types

import torch

from .. import guards as guards_mod
from ..sources import AttrSource, ItemSource, module_attr_source
from . import numpyvars, randomvars
from .base import Variable, ConstantVariable, unsupported
from .containers import (TupleVariable, ListVariable, DictVariable, SetVariable, SizeVariable,
                         NamedTupleVariable, OutsideListVariable)
from .tensor import TensorMethodVariable, TensorVariable
from .symbolic import FLOATS, SymNodeVariable, SYM_TYPES, keep_unspecialized, specialize

_CONSTANT_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), type(NotImplemented))
_TORCH_CONSTANT_TYPES = (torch.dtype, torch.device, torch.layout, torch.memory_format)
# subscripted builtin and collections.abc classes (list[int], Sequence[T]) and their unions: immutable
_TYPE_ALIASES = (types.GenericAlias, types.UnionType)

# Python modules whose attributes never change: reading torch.cat or math.pi needs no guard.
_FROZEN_MODULE_PREFIXES = ("torch", "math", "operator", "functools", "itertools", "collections", "typing",
                           "builtins", "dataclasses", "numbers", "enum", "abc", "inspect", "types",
                           "warnings", "logging", "copy", "contextlib", "transformers.utils")


def is_frozen_module(module):
    name = getattr(module, "__name__", "")
    return any(name == p or name.startswith(p + ".") for p in _FROZEN_MODULE_PREFIXES)


def is_namedtuple_class(cls):
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def is_structseq_class(cls):
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "n_sequence_fields")


def wrap(tx, value, source):
    """The Variable for `value` read from `source` (guards added to tx.guards)."""
    if isinstance(value, torch.Tensor):
        return wrap_tensor(tx, value, source)
    if type(value) in _CONSTANT_TYPES or isinstance(value, _TORCH_CONSTANT_TYPES):
        return _wrap_uncached(tx, value, source)
    # one Variable per mutable object, so a mutation made through one path is seen through all
    known = tx.object_vars.get(id(value))
    if known is not None and source is not None:
        if known.source is not None and known.source != source:
            tx.guards.add(2, "{0} is {1}", None, (source, known.source))
        return known
    var = _wrap_uncached(tx, value, source)
    if source is not None and isinstance(value, (list, dict, set, torch.nn.Module)) or \
            type(var).__name__ == "UserObjectVariable" and source is not None:
        tx.object_vars[id(value)] = var
        tx.keepalive.append(value)
        if not isinstance(value, torch.nn.Module):
            _guard_distinct(tx, value, source)
    return var


def _guard_distinct(tx, value, source):
    """Mutable objects from outside (lists, dicts, sets, user objects) that were distinct objects while
    tracing must be distinct next call too: the trace keeps one Variable per object, so a store through one
    and a read through another would miss each other if they became the same object. One guard per type
    (objects of different types can't be the same; their types are guarded): `{0} is not {1}` for two,
    `len({id({0}), id({1}), ...}) == n` for more, replaced as the group grows."""
    group = tx.distinct_sources.setdefault(type(value), [])
    old = _distinct_template(len(group))
    if old is not None:
        tx.guards.discard(old, group)
    group.append(source)
    new = _distinct_template(len(group))
    if new is not None:
        tx.guards.add(2, new, f"{', '.join(s.expr() for s in group)} are distinct objects", tuple(group))


def _distinct_template(n):
    if n < 2:
        return None
    if n == 2:
        return "{0} is not {1}"
    return "len({{" + ", ".join(f"id({{{i}}})" for i in range(n)) + f"}}}}) == {n}"


_INT64 = (-2 ** 63, 2 ** 63 - 1)


def _wrap_uncached(tx, value, source):
    if value is sys.modules and source is not None:
        tx.guards.add_id(source, value)
        return objects.SysModulesVariable(source)
    if value is os.environ and source is not None:
        tx.guards.add_id(source, value)
        return objects.EnvironVariable(source)
    if randomvars.is_draw(value):
        if source is not None:
            tx.guards.add_id(source, value)
        return randomvars.DrawFunctionVariable(value, source)
    if type(value) is int and source is not None and _INT64[0] <= value <= _INT64[1] and \
            tx.policy.int_is_dynamic(source, value):
        # a symbolic int reaches kernels as an int64: one outside that range is a constant (eager's
        # OverflowError, or its uint64 path, then happen as in eager)
        tx.guards.add_type(source, int)
        tx.guards.add(guards_mod.CONSTANT, f"{_INT64[0]} <= {{0}} <= {_INT64[1]}", f"{source.expr()} fits in int64",
                      (source,))
        node, sym = tx.graph.add_int_input(source, value)
        return SymNodeVariable(node, sym, source)
    if type(value) is float and source is not None and tx.policy.float_is_dynamic(source, value):
        tx.guards.add_type(source, float)
        node, sym = tx.graph.add_float_input(source, value)
        if tx.keep_floats:
            keep_unspecialized(sym, f"the float {source.expr()}, which changes between calls", FLOATS)
        return SymNodeVariable(node, sym, source)
    if type(value) in _CONSTANT_TYPES:
        if source is not None:
            tx.guards.add_equals(source, value)
            if type(value) in (int, float, str):
                # the same object there next call (a module's eps, a config's size) skips the type and
                # value checks: one identity test instead of three operations
                tx.guards.note_immutable(source, value)
        return ConstantVariable(value, source)
    if isinstance(value, _TORCH_CONSTANT_TYPES):
        if source is not None:
            tx.guards.add_equals(source, value)
        return ConstantVariable(value, source)
    if numpyvars.is_scalar(value):
        if source is not None:
            numpyvars.guard_scalar(tx, source, value)
        return ConstantVariable(value, source)
    if source is not None and numpyvars.is_array(value):
        array = numpyvars.wrap_array(tx, value, source)
        if array is not None:
            return array
    if isinstance(value, torch.Size):
        if source is not None:
            tx.guards.add_equals(source, value)
        return SizeVariable([ConstantVariable(v) for v in value], source)
    if isinstance(value, (tuple, list)):
        return wrap_sequence(tx, value, source)
    if type(value) in (dict, collections.OrderedDict):
        return wrap_dict(tx, value, source)
    if type(value) in (set, frozenset):
        if source is not None:
            tx.guards.add_type(source, type(value))
            frozen = frozenset(value)                           # a copy: the caller may mutate its set
            same = tx.guards.obj(guards_mod.same_constant)      # {1.0} == {1} == {True}
            tx.guards.add(3, f"{same}({{0}}, {tx.guards.obj(frozen)})",
                          f"{source.expr()} == {set(value)!r}", (source,))
        if type(value) is set and all(is_constant_key(k) for k in value):
            return _wrap_set(value, source)
        return ConstantVariable(value, source)
    if isinstance(value, (range, slice)):
        if source is not None:
            tx.guards.add_equals(source, value)
        return ConstantVariable(value, source)
    if isinstance(value, enum.Enum):
        if source is not None:
            tx.guards.add_id(source, value)
        return ConstantVariable(value, source)
    if isinstance(value, torch.nn.Module):
        if source is not None:
            tx.guards.add_type(source, type(value))
            objects.guard_mro(tx, type(value))
        return objects.NNModuleVariable(value, source)
    return wrap_callable_or_object(tx, value, source)


def _wrap_set(value, source):
    """A set of constants: a SetVariable (mutations modelled; see containers.SetVariable). Iterated in the
    real set's order when it has a source; a set computed while tracing has a hash table we don't know."""
    var = SetVariable(value, source, order=tuple(value))
    var.order_known = source is None and not value
    return var


def _plain_parameter_class(cls):
    """A Parameter subclass that computes as a Parameter: its __torch_function__ and __torch_dispatch__ are
    Parameter's (a quantization wrapper overriding them is a tensor subclass graphjit does not trace)."""
    return cls.__torch_function__ is torch.nn.Parameter.__torch_function__ and \
        cls.__torch_dispatch__ is torch.Tensor.__torch_dispatch__


def wrap_tensor(tx, value, source):
    if source is None:
        unsupported("a tensor constant created outside the graph (no source to read it from)")
    known = tx.tensor_vars.get(id(value))
    if known is not None:
        if known.source != source:
            tx.guards.add(2, "{0} is {1}", None, (source, known.source))
        return known
    if type(value) not in (torch.Tensor, torch.nn.Parameter, torch.nn.parameter.Buffer) and \
            not (isinstance(value, torch.nn.Parameter) and _plain_parameter_class(type(value))):
        unsupported(f"tensor subclass {type(value).__name__}")
    if value.is_sparse or value.layout != torch.strided:
        unsupported(f"tensor with layout {value.layout}")
    dims = tx.policy.tensor_dims(source, value, static_input=frame._is_parameter_or_buffer(value, source))
    node, fake = tx.graph.add_input(source, value, dims)
    tx.guards.add_tensor(source, value, fake)
    var = TensorVariable(node, fake, source, cls=type(value), real=value)
    tx.tensor_vars[id(value)] = var
    tx.keepalive.append(value)
    return var


def wrap_sequence(tx, value, source):
    cls = type(value)
    if cls is list and source is not None:
        tx.guards.add_type(source, cls)
        return OutsideListVariable(tx, value, source)
    if source is not None:
        tx.guards.add_type(source, cls)
        tx.guards.add_len(source, len(value))
        if cls is tuple and _all_immutable(value):
            tx.guards.note_immutable(source, value)
    items = [wrap(tx, v, ItemSource(source, i) if source is not None else None) for i, v in enumerate(value)]
    if cls is tuple:
        return TupleVariable(items, source)
    if cls is list:
        return ListVariable(items, source)
    if is_namedtuple_class(cls) or is_structseq_class(cls):
        from .classes import check_namedtuple_class
        check_namedtuple_class(cls)
        return NamedTupleVariable(items, cls, source, original=value if is_structseq_class(cls) else None)
    unsupported(f"sequence of type {cls.__name__}")


def _all_immutable(value):
    """A tuple of ints, floats, bools, strings, None and such tuples: nothing in it can change."""
    return all(type(v) in (int, float, bool, str, type(None)) or (type(v) is tuple and _all_immutable(v))
               for v in value)


def is_constant_key(k):
    """Keys compared by value or identity that never change: numbers, strings, enums, classes, typing forms."""
    if type(k) in (str, int, bool, float, type(None), bytes) or isinstance(k, (enum.Enum, type)):
        return True
    if type(k) is tuple:
        return all(is_constant_key(v) for v in k)
    if type(k) is torch.Size:       # a per-shape cache's key (equal to, and hashed as, the tuple of its sizes)
        return all(type(v) is int for v in k)
    return type(k).__module__ == "typing"


def wrap_dict(tx, value, source):
    keys = list(value.keys())
    for k in keys:
        if not is_constant_key(k):
            unsupported(f"dict with key of type {type(k).__name__}")
    if source is not None:
        tx.guards.add_type(source, type(value))
        tx.guards.add_keys(source, keys)
    items = {k: wrap(tx, v, ItemSource(source, k) if source is not None else None) for k, v in value.items()}
    return DictVariable(items, source, python_cls=type(value))


def wrap_callable_or_object(tx, value, source):
    for check, make, guard in _CALLABLE_TABLE:
        if check(value):
            if source is not None and guard == "id":
                tx.guards.add_id(source, value)
            elif source is not None and guard == "type":
                tx.guards.add_type(source, type(value))
            return make(tx, value, source)
    # any other Python object: attributes read through its source, guarded by type (and its type's MRO)
    if source is not None:
        tx.guards.add_type(source, type(value))
        objects.guard_mro(tx, type(value))
    return objects.UserObjectVariable(value, source)


def _is_torch_op(value):
    return torchvars.is_torch_op(value)


def _make(name):
    mod, cls = name.split(".")

    def make(tx, value, source):
        return getattr(_SIBLINGS[mod], cls).create(tx, value, source)
    return make


def _marked(attr):
    return lambda v: getattr(v, attr, False) is True if callable(v) else False


def _tensor_method(tx, value, source):
    tensor = wrap(tx, value.__self__, AttrSource(source, "__self__") if source is not None else None)
    return TensorMethodVariable(tensor, value.__name__)


def _is_handled_builtin(v):
    try:
        return v in bvars.BUILTIN_HANDLERS
    except TypeError:
        return False


def _polyfill(tx, value, source):
    return functions.UserFunctionVariable(polyfills.polyfill_of(value), None)


def _lru_cached(tx, value, source):
    """A functools.lru_cache/cache wrapper: its function, traced (as torch.compile does). The cache is not
    consulted or filled by the compiled code: the same results for the pure functions it is meant for; a
    call with effects outside itself (which eager runs only on a cache miss) breaks."""
    if getattr(value.__wrapped__, "_dynamo_marked_constant", False) is True:
        return _assumed_constant(tx, value, source)      # transformers marks the function under the cache
    return functions.LruCachedFunctionVariable(value, source)


def _is_compiled_function(value):
    """What graphjit.compile returned for a function (not any object that makes up attributes on demand, as
    torch.ops namespaces do)."""
    return isinstance(value, frame.CompiledFunction)


def _assumed_constant(tx, value, source):
    """A function marked with torch._dynamo.assume_constant_result (transformers' install and version
    probes): called while tracing, its result used as a constant, as torch.compile does."""
    return functions.AssumedConstantVariable(value, source)


def _is_checkpoint(value):
    """torch.utils.checkpoint.checkpoint (where that module is loaded)."""
    module = sys.modules.get("torch.utils.checkpoint")
    return module is not None and value is getattr(module, "checkpoint", None)


def _has_polyfill(value):
    return polyfills.polyfill_of(value) is not None


_CALLABLE_TABLE = [
    # (check, factory, guard)
    # C functions with a traced pure-Python equivalent (polyfills.py): itertools, functools.reduce ...
    (_has_polyfill, _polyfill, "id"),
    (lambda v: any(v is f for f in polyfills.INTRINSICS), _make("functions.IntrinsicVariable"), None),
    (_is_handled_builtin, _make("builtins.BuiltinVariable"), "id"),
    (numpyvars.is_ufunc, _make("builtins.BuiltinVariable"), "id"),     # folded on constants, else a break
    (lambda v: callable(v) and getattr(v, "_dynamo_marked_constant", False) is True, _assumed_constant, "id"),
    (lambda v: isinstance(v, functools._lru_cache_wrapper) and isinstance(getattr(v, "__wrapped__", None),
                                                                          types.FunctionType),
     _lru_cached, "id"),
    (lambda v: isinstance(v, types.BuiltinMethodType) and isinstance(getattr(v, "__self__", None), torch.Tensor),
     _tensor_method, None),
    (_is_compiled_function, _make("functions.CompiledWrapperVariable"), "id"),
    (_is_checkpoint, _make("functions.CheckpointVariable"), "id"),
    (lambda v: v is torch.autograd.grad or v is torch.autograd.backward, _make("functions.AutogradEngineCallVariable"),
     "id"),
    (_marked("_graphjit_disable"), _make("functions.DisabledFunctionVariable"), "id"),
    (_marked("_graphjit_allow_in_graph"), _make("torchvars.TorchOpVariable"), "id"),
    (lambda v: isinstance(v, types.ModuleType), _make("objects.PythonModuleVariable"), "id"),
    (lambda v: v is super, _make("builtins.BuiltinVariable"), "id"),
    (_is_torch_op, _make("torchvars.TorchOpVariable"), "id"),
    (numpyvars.is_function, _make("builtins.BuiltinVariable"), "id"),     # captured on arrays over tensors
    (lambda v: isinstance(v, types.FunctionType), _make("functions.UserFunctionVariable"), "id"),
    (lambda v: isinstance(v, types.MethodType), _make("functions.BoundMethodVariable"), None),
    (lambda v: isinstance(v, functools.partial), _make("functions.PartialVariable"), "type"),
    (lambda v: isinstance(v, types.BuiltinFunctionType) and
     (getattr(v, "__self__", None) is None or isinstance(v.__self__, types.ModuleType)) or
     isinstance(v, (operator.itemgetter, operator.attrgetter, operator.methodcaller)),
     _make("builtins.BuiltinVariable"), "id"),
    (lambda v: isinstance(v, type), _make("objects.ClassVariable"), "id"),
    (lambda v: isinstance(v, (torch.no_grad, torch.enable_grad)),
     lambda tx, v, s: torchvars.wrap_context_object(tx, v, s),
     "type"),
    (lambda v: isinstance(v, (staticmethod, classmethod)), _make("functions.DescriptorVariable"), None),
    (lambda v: isinstance(v, torchvars.ReenterAutocast), _make("torchvars.ReenterVariable"), None),
    (lambda v: isinstance(v, torchvars.RestoreGradMode),
     lambda tx, v, s: torchvars.wrap_restore_grad_mode(tx, v, s), None),
]


def wrap_fake_result(tx, node, example):
    """The result of a graph node: a tensor, or a tuple/structseq of tensors (one getitem node each)."""
    if isinstance(example, torch.Tensor):
        return TensorVariable(node, example)
    if isinstance(example, (tuple, list)):
        items = []
        for i, item in enumerate(example):
            if isinstance(item, torch.Tensor):
                getitem = tx.graph.create_node("call_function", operator.getitem, [node, i], {}, item)
                items.append(TensorVariable(getitem, item))
            else:
                items.append(wrap_constant_result(tx, item))
        cls = type(example)
        if cls is tuple:
            return TupleVariable(items)
        if cls is list:
            return ListVariable(items)
        return NamedTupleVariable(items, cls)
    return wrap_constant_result(tx, example)


def wrap_constant_result(tx, value):
    """A value computed at trace time from constants: no source, no guard."""
    if isinstance(value, SYM_TYPES):        # a size reached some other way than an op: specialized
        return ConstantVariable(specialize(value))
    if isinstance(value, torch.Tensor):
        unsupported("a tensor computed outside the graph")
    if type(value) in _CONSTANT_TYPES or isinstance(value, _TORCH_CONSTANT_TYPES) or numpyvars.is_scalar(value):
        return ConstantVariable(value)
    if isinstance(value, BaseException):     # one made in the frame, read from another (its __cause__)
        return ConstantVariable(value)
    if isinstance(value, _TYPE_ALIASES):      # Sequence[torch.Tensor] | Sequence[int] in a typing.cast
        return ConstantVariable(value)
    if isinstance(value, torch.Size):
        return SizeVariable([ConstantVariable(v) for v in value])
    if type(value) is tuple:
        return TupleVariable([wrap_constant_result(tx, v) for v in value])
    if type(value) is list:
        return ListVariable([wrap_constant_result(tx, v) for v in value])
    if type(value) is dict:
        return DictVariable({k: wrap_constant_result(tx, v) for k, v in value.items()})
    if is_namedtuple_class(type(value)) or is_structseq_class(type(value)):
        return NamedTupleVariable([wrap_constant_result(tx, v) for v in value], type(value),
                                  original=value if is_structseq_class(type(value)) else None)
    return wrap(tx, value, None)


def wrap_class_attribute(tx, obj_var, cls, name, source=None):
    """Look `name` up on `cls`'s MRO, binding functions and properties to `obj_var`."""
    UserFunctionVariable, BoundMethodVariable = functions.UserFunctionVariable, functions.BoundMethodVariable
    attr = dunders.lookup(cls, name)[1]
    if attr is dunders.MISSING:
        unsupported(f"{cls.__name__} has no attribute {name!r}")
    if isinstance(attr, staticmethod):
        return wrap(tx, attr.__func__, None)
    if isinstance(attr, classmethod):
        return BoundMethodVariable(wrap(tx, attr.__func__, None), wrap(tx, cls, None))
    if isinstance(attr, property):
        if attr.fget is None:
            unsupported(f"property {name!r} has no getter")
        return wrap(tx, attr.fget, None).call(tx, [obj_var], {})
    if isinstance(attr, functools.cached_property):
        return objects.cached_property_get(tx, obj_var, cls, name, attr)
    if isinstance(attr, functools._lru_cache_wrapper) and isinstance(getattr(attr, "__wrapped__", None),
                                                                     types.FunctionType):
        return BoundMethodVariable(functions.LruCachedFunctionVariable(attr, None), obj_var)
    if isinstance(attr, types.FunctionType):
        return BoundMethodVariable(UserFunctionVariable(attr), obj_var)
    if isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
        return bvars.SlotMethodVariable(obj_var, name, attr)
    if isinstance(attr, types.MemberDescriptorType):      # __slots__ attributes
        real = getattr(obj_var, "value", None)
        if real is None or getattr(obj_var, "is_new", False):
            unsupported(f"slot attribute {name!r} of an object made in the frame")
        try:
            value = attr.__get__(real, cls)
        except AttributeError as e:
            objects.guard_slot(tx, obj_var.source, name, attr, False)
            raise bvars.AttributeMissing(str(e))
        return wrap(tx, value, source)
    if hasattr(attr, "__get__") and not isinstance(attr, (int, float, str, tuple, type)):
        unsupported(f"descriptor {name!r} of type {type(attr).__name__}")
    return wrap(tx, attr, source)


# sibling modules, bound once they are all importable (they import this one): read at call time, without an
# import statement on each of the many objects capture wraps
from . import builtins as bvars, dunders, functions, objects, torchvars  # noqa: E402
from .. import polyfills  # noqa: E402
# frame is still loading when this module loads (it imports capture first): bound as a module, read at call time
from .. import frame  # noqa: E402
_SIBLINGS = {"functions": functions, "objects": objects, "torchvars": torchvars, "builtins": bvars}
