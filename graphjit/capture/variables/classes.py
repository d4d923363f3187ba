"""Calling a class in traced code: builtin types, namedtuples, torch context managers, and user classes
(a new object whose __init__ is inlined; dataclasses included, since their __init__ is Python code)."""
import collections
import enum
import functools
import types

import torch

from . import numpyvars
from .base import ConstantVariable, unsupported
from .builtins import BUILTIN_HANDLERS, BuiltinVariable, all_constant, constants, _fold
from .containers import NamedTupleVariable, SizeVariable, DictVariable, SliceVariable
from .objects import UserObjectVariable, ClassVariable, _class_lookup, _MISSING
from .torchvars import make_context_manager


def construct(tx, class_var, args, kwargs):
    from .objects import guard_mro
    cls = class_var.cls
    guard_mro(tx, cls)          # the new object's lookups follow cls's MRO
    for check, handler in _CONSTRUCTORS:
        if check(cls):
            result = handler(tx, cls, list(args), dict(kwargs))
            if result is not None:
                return result
    unsupported(f"creating an instance of {getattr(cls, '__qualname__', cls)}")


def _builtin(tx, cls, args, kwargs):
    return BuiltinVariable(cls).call(tx, args, kwargs)


# Tuple behaviour NamedTupleVariable implements itself (operators and == go through dunder dispatch):
# a namedtuple class whose own code defines one of these is refused, not silently given tuple's.
_TUPLE_PROTOCOL = ("__len__", "__iter__", "__getitem__", "__contains__", "__bool__", "__hash__",
                   "__reversed__", "__getattribute__", "__setattr__", "index", "count")
# What the generated namedtuple class defines itself: a subclass redefining one is not modelled.
_NAMEDTUPLE_MACHINERY = ("__new__", "__init__", "_make", "_replace", "_asdict", "_fields")


def check_namedtuple_class(cls):
    """Refuse a namedtuple class that overrides behaviour NamedTupleVariable models as tuple's."""
    if not hasattr(cls, "_fields"):
        return                      # torch.return_types structseqs: C types
    generated = next(k for k in cls.__mro__ if "_fields" in k.__dict__)
    for klass in cls.__mro__[:cls.__mro__.index(tuple)]:
        names = _TUPLE_PROTOCOL + (_NAMEDTUPLE_MACHINERY if klass is not generated and
                                   cls.__mro__.index(klass) < cls.__mro__.index(generated) else ())
        for name in names:
            if name in klass.__dict__:
                unsupported(f"namedtuple {cls.__qualname__} overrides {name} (in {klass.__qualname__})")


def _namedtuple(tx, cls, args, kwargs):
    check_namedtuple_class(cls)
    fields = cls._fields
    values = list(args) + [None] * (len(fields) - len(args))
    defaults = getattr(cls, "_field_defaults", {})
    for i, name in enumerate(fields):
        if name in kwargs:
            values[i] = kwargs[name]
        elif values[i] is None:
            if name not in defaults:
                unsupported(f"{cls.__name__}() missing argument {name!r}")
            from .builder import wrap_constant_result
            values[i] = wrap_constant_result(tx, defaults[name])
    return NamedTupleVariable(values, cls)


def _size(tx, cls, args, kwargs):
    items = args[0].unpack(tx) if args else []
    return SizeVariable(items)


def _ordered_dict(tx, cls, args, kwargs):
    result = BuiltinVariable(dict).call(tx, args, kwargs)
    result.python_cls = cls
    return result


def _torch_class(tx, cls, args, kwargs):
    ctx = make_context_manager(tx, cls, args, kwargs)
    if ctx is not None:
        return ctx
    if cls in (torch.finfo, torch.iinfo) and all_constant(args, kwargs):
        return ConstantVariable(cls(*constants(*args)))     # read-only numeric facts about a dtype
    if all_constant(args, kwargs) and cls in (torch.device, torch.Generator.__class__):
        return _fold(tx, lambda *a: cls(*a, **{k: v.as_python_constant() for k, v in kwargs.items()}),
                     *constants(*args))
    return None


def _module_in_frame(tx, cls, args, kwargs):
    """nn.ReLU() and other modules without parameters or buffers, from constant arguments (transformers'
    ACT2FN makes its activations anew on each lookup): built now, once, and used as a constant (it behaves
    the same on every call; an __init__ with effects outside the module runs once). The trial build keeps
    torch's CPU generator where it was: a module with parameters (nn.Linear) draws its initial weights from
    it, then breaks, and eager builds it again."""
    if not all_constant(args, kwargs):
        unsupported(f"creating {cls.__name__} inside a compiled frame from non-constant arguments")
    state = torch.random.get_rng_state()
    try:
        module = cls(*constants(*args), **{k: v.as_python_constant() for k, v in kwargs.items()})
        drew = not torch.equal(state, torch.random.get_rng_state())
    finally:
        torch.random.set_rng_state(state)
    if drew or any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        unsupported(f"creating {cls.__name__} (a module with parameters) inside a compiled frame",
                    hint="create the module once outside the compiled function")
    from ..sources import ObjectSource
    from .objects import NNModuleVariable
    tx.keepalive.append(module)
    return NNModuleVariable(module, ObjectSource(module))


def _user_class(tx, cls, args, kwargs):
    if issubclass(cls, torch.nn.Module):
        return _module_in_frame(tx, cls, args, kwargs)
    if issubclass(cls, BaseException):
        if all_constant(args, kwargs):
            return ConstantVariable(new_exception(cls, constants(*args), {k: v.as_python_constant()
                                                                          for k, v in kwargs.items()}))
        unsupported(f"creating exception {cls.__name__} from non-constant arguments")
    for base in cls.__mro__[1:-1]:
        if base.__module__ == "builtins" and base is not dict:
            unsupported(f"{cls.__name__} subclasses builtin {base.__name__}")
    if _class_lookup(type(cls), "__call__") is not type.__call__:
        unsupported(f"creating a {cls.__name__}: its metaclass {type(cls).__name__} defines __call__")
    new = _class_lookup(cls, "__new__")
    if new in (dict.__new__, collections.OrderedDict.__new__):
        new = object.__new__
    if new is not _MISSING and new is not object.__new__ and not isinstance(new, staticmethod):
        unsupported(f"{cls.__name__} defines __new__")
    if isinstance(new, staticmethod) and new.__func__ is not object.__new__:
        unsupported(f"{cls.__name__} defines __new__")
    if getattr(cls, "__abstractmethods__", None):
        try:
            object.__new__(cls)         # raises the TypeError naming the abstract methods
        except TypeError as e:
            from ...exc import UserError
            raise UserError(e) from None
    obj = UserObjectVariable(cls=cls)
    init = obj.class_attribute(tx, "__init__")
    init.call(tx, args, kwargs)
    return obj


def new_exception(cls, args=(), kwargs=None):
    """An exception made in the frame, built now: only where its class runs builtin __new__ and __init__
    (a user's may have effects, which each call repeats in eager)."""
    for klass in cls.__mro__:
        if klass.__module__ != "builtins" and ("__init__" in vars(klass) or "__new__" in vars(klass)):
            unsupported(f"creating exception {cls.__name__}: {klass.__name__} defines __init__ or __new__")
        if klass.__module__ != "builtins":
            # the exception is a constant of the trace, whose methods (__str__ too) would run once, unguarded
            code = [name for name, value in vars(klass).items() if name not in ("__dict__", "__weakref__") and
                    (callable(value) and not isinstance(value, type) or hasattr(type(value), "__get__"))]
            if code:
                unsupported(f"creating exception {cls.__name__}: {klass.__name__} defines {code[0]}")
    return cls(*args, **(kwargs or {}))


def _method(tx, cls, args, kwargs):
    """types.MethodType(function, instance): the function bound as a method of the instance."""
    from .functions import BoundMethodVariable
    if len(args) != 2 or kwargs:
        return None
    func, obj = args
    if obj.is_constant() and obj.as_python_constant() is None:
        from ...exc import UserError
        raise UserError(TypeError("instance must not be None"))
    return BoundMethodVariable(func, obj)


def _deque(tx, cls, args, kwargs):
    from .containers import DequeVariable
    iterable = args[0] if args else kwargs.get("iterable")
    maxlen = args[1] if len(args) > 1 else kwargs.get("maxlen")
    maxlen = None if maxlen is None else maxlen.as_python_constant()
    if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
        from ...exc import UserError
        raise UserError(ValueError("maxlen must be non-negative") if isinstance(maxlen, int)
                        else TypeError("an integer is required"))
    return DequeVariable([] if iterable is None else iterable.unpack(tx), maxlen)


def _partial(tx, cls, args, kwargs):
    from .functions import PartialVariable
    inner = args[0]
    if isinstance(inner, PartialVariable) and inner.value is None:
        # partial(partial(f, a), b) is partial(f, a, b): functools' constructor flattens a partial without
        # an instance dict (one made in the frame has none)
        keywords = inner.keywords if inner.keywords_read is None else dict(inner.keywords_read.items)
        return PartialVariable(inner.func, [*inner.args, *args[1:]], {**keywords, **kwargs})
    made = PartialVariable(inner, args[1:], kwargs)
    # an outside partial is flattened only if it has no instance dict, which can't be read without making it
    made.opaque = isinstance(inner, PartialVariable)
    return made


def _fold_constructor(tx, cls, args, kwargs):
    """C classes with only constant arguments (operator.itemgetter('a'), exceptions ...): build them now."""
    if not all_constant(args, kwargs):
        return None
    from .builder import wrap
    value = cls(*constants(*args), **{k: v.as_python_constant() for k, v in kwargs.items()})
    return wrap(tx, value, None)


_ENUM_MISSING = {enum.Enum._missing_.__func__, enum.Flag._missing_.__func__}


def _enum_member(tx, cls, args, kwargs):
    """Color(1): the member with that value, looked up now (members are constants; enum's own _missing_
    only: a user's may do anything)."""
    missing = getattr(cls._missing_, "__func__", None)
    if len(args) != 1 or kwargs or not all_constant(args, kwargs) or missing not in _ENUM_MISSING:
        unsupported(f"calling the enum {cls.__name__} with these arguments")
    from ...exc import UserError
    try:
        return ConstantVariable(cls(args[0].as_python_constant()))
    except ValueError as e:
        raise UserError(e) from None


def _numpy_scalar(tx, cls, args, kwargs):
    """np.float32(x), np.dtype(x) on constants: run now (numpyvars.fold_call)."""
    folded = numpyvars.fold_call(tx, cls, args, kwargs)
    if folded is None:
        unsupported(f"numpy.{cls.__name__}() of a value only known while tracing")
    return folded


_CONSTRUCTORS = [
    (lambda c: getattr(c, "__module__", None) in ("operator", "builtins") and issubclass(c, BaseException)
     if isinstance(c, type) else False, lambda tx, c, a, k: ConstantVariable(c(*constants(*a)))),
    (lambda c: getattr(c, "__module__", None) == "operator", _fold_constructor),
    (lambda c: c is functools.partial, _partial),
    (lambda c: c is types.MethodType, _method),
    (lambda c: c in BUILTIN_HANDLERS, _builtin),
    (lambda c: c is torch.Size, _size),
    (lambda c: isinstance(c, type) and issubclass(c, tuple) and hasattr(c, "_fields"), _namedtuple),
    (lambda c: c is collections.OrderedDict, _ordered_dict),
    (lambda c: c is collections.deque, _deque),
    (lambda c: isinstance(c, enum.EnumMeta) and bool(c.__members__), _enum_member),
    (lambda c: getattr(c, "__module__", "").startswith("torch"), _torch_class),
    (numpyvars.is_scalar_type, _numpy_scalar),
    (numpyvars.is_dtype_class, _numpy_scalar),          # np.dtype("int32"): a constant
    (lambda c: isinstance(c, type) and c.__module__ != "builtins", _user_class),
]
