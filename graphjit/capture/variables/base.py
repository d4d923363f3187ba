"""The Variable protocol, Python constants, and the NULL marker of call sites."""
import operator

from ...exc import Unsupported
from ..guards import lit


def unsupported(reason, hint=None):
    raise Unsupported(reason, hint=hint)


class NotConstant(Exception):
    pass


import inspect as _inspect
import types as _types

# Values computed at trace time from other constants and used read-only (results of inspect.signature ...)
import torch as _torch
OPAQUE_CONSTANT_TYPES = (_inspect.Signature, _inspect.Parameter, _types.MappingProxyType, _types.CodeType,
                         _torch.finfo, _torch.iinfo)


class Variable:
    """A value during symbolic interpretation.

    `source` is set when the value was read from outside the frame (see sources.py): guards and graph
    inputs are written on it, and it is how the value is reconstructed in the entry function.
    Subclasses override the operations they support; the defaults say "unsupported" with a reason.
    """
    source = None

    def python_type(self):
        unsupported(f"type() of {self}")

    def as_python_constant(self):
        raise NotConstant(self)

    def is_constant(self):
        try:
            self.as_python_constant()
            return True
        except NotConstant:
            return False

    def getattr(self, tx, name):
        if callable(getattr(self, "method_" + name, None)):
            return MethodOf(self, name)
        if name == "__class__":
            from .objects import ClassVariable
            return ClassVariable(self.python_type())
        unsupported(f"attribute {name!r} of {self}")

    def setattr(self, tx, name, value):
        unsupported(f"setting attribute {name!r} on {self}")

    def call(self, tx, args, kwargs):
        unsupported(f"calling {self}")

    def call_method(self, tx, name, args, kwargs):
        return self.getattr(tx, name).call(tx, args, kwargs)

    def unpack(self, tx):
        """The items of an iteration over this value, as a list of Variables."""
        unsupported(f"iterating over {self}")

    def truth(self, tx):
        try:
            return bool(self.as_python_constant())
        except NotConstant:
            unsupported(f"truth value of {self}")

    def reconstruct(self, cg):
        """A Python expression that rebuilds this value in the entry function."""
        if self.source is not None:
            return self.source.expr()
        try:
            return cg.const(self.as_python_constant())
        except NotConstant:
            unsupported(f"returning {self} from a compiled frame")

    def __repr__(self):
        return f"{type(self).__name__}()"


# The type of `obj.name` by the kind of class attribute it binds: a C method, a slot wrapper, a function
_BOUND_TYPES = {_types.MethodDescriptorType: _types.BuiltinMethodType,
                _types.WrapperDescriptorType: _types.MethodWrapperType,
                _types.FunctionType: _types.MethodType}


class MethodOf(Variable):
    """`obj.name` for a method the Variable implements itself (`method_<name>`), before the call.

    Its type and the attributes every bound method has (`__name__`, `__self__`) come from the attribute
    type(obj) binds, where a library class defines it (a user class's may be replaced)."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def python_type(self):
        return _BOUND_TYPES[type(self._class_attribute())]

    def getattr(self, tx, name):
        if name == "__self__":
            return self.obj
        if name == "__name__":
            return ConstantVariable(self._class_attribute().__name__)
        return super().getattr(tx, name)

    def _class_attribute(self):
        """The method type(obj) defines under this name, or refused."""
        from .dunders import is_library_class, lookup
        klass, attr = lookup(self.obj.python_type(), self.name)
        if type(attr) not in _BOUND_TYPES or not is_library_class(klass):
            unsupported(f"type() of {self}: not a C method, slot wrapper or function of a library class")
        return attr

    def reconstruct(self, cg):
        return f"{cg.expr(self.obj)}.{self.name}"

    def __repr__(self):
        return f"{self.obj!r}.{self.name}"


class NullVariable(Variable):
    """The NULL slot CPython pushes beside a callable."""

    def __repr__(self):
        return "NULL"


NULL = NullVariable()

_SAFE_CONSTANT_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis),
                        type(NotImplemented), range, slice)


class ConstantVariable(Variable):
    """A Python value known at trace time: numbers, strings, None, dtypes, devices, types ..."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def getattr(self, tx, name):
        from .builder import wrap_constant_result
        from .builtins import AttributeMissing
        raised = tx.raised.get(id(self.value))
        if raised is not None and name == "__traceback__":
            return TracebackVariable()      # never None once raised; passed along (ExitStack's callbacks)
        if raised is not None and (name == "with_traceback" or
                                   name == "__context__" and raised[1] and not tx.caller_handles_none()):
            unsupported(f"{name} of {type(self.value).__name__} raised in the frame "
                        f"({'the caller' if name == '__context__' else 'CPython'} makes it)")
        cls = type(self.value)
        if isinstance(self.value, BaseException) and cls.__module__ != "builtins" and \
                name not in getattr(self.value, "__dict__", {}):
            # a user exception class's own data attribute (`code = 3`): guarded, it may be reassigned
            from ..sources import AttrSource, ObjectSource
            from .builder import wrap
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is None or owner.__module__ != "builtins":
                source = AttrSource(ObjectSource(cls), name)
                if owner is None:
                    tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (ObjectSource(cls),))
                    raise AttributeMissing(f"{cls.__name__!r} object has no attribute {name!r}")
                return wrap(tx, getattr(cls, name), source)
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise AttributeMissing(str(e)) from e
        if callable(attr) and getattr(attr, "__self__", None) is self.value and not isinstance(self.value, type):
            return MethodOf(self, name)      # e.g. "abc".upper: folded when called on constants
        if isinstance(attr, OPAQUE_CONSTANT_TYPES):
            var = ConstantVariable(attr)
            # a Signature's parameters: a read-only view of an OrderedDict only the Signature holds, so its
            # keys view can never change either (the names come from the code object, which the function's
            # variable guards; values and items hold defaults, which nothing guards: they stay opaque)
            var.frozen_mapping = isinstance(self.value, _inspect.Signature) and name == "parameters"
            return var
        return wrap_constant_result(tx, attr)

    frozen_mapping = False
    interned = False        # a str sys.intern returned: the interned table's object for its value

    def setattr(self, tx, name, value):
        if name == "__traceback__" and id(self.value) in tx.raised and isinstance(value, TracebackVariable):
            return      # a raised exception's traceback is not modelled: reading it is refused
        if name == "args" and id(self.value) in tx.raised and value.is_constant():
            # an exception raised in the trace is the trace's own object (`e.args = (msg,) + e.args[1:]`)
            self.value.args = value.as_python_constant()
            return
        if name == "__context__" and id(self.value) in tx.raised and self.source is None and value.is_constant() \
                and isinstance(value.as_python_constant(), (BaseException, type(None))):
            # the chain ExitStack.__exit__ restores after its re-raise: trace-known from now on
            self.value.__context__ = value.as_python_constant()
            tx.raised[id(self.value)] = (self.value, False)
            return
        super().setattr(tx, name, value)

    def call_method(self, tx, name, args, kwargs):
        from .builder import wrap_constant_result
        if self.frozen_mapping and name == "keys" and not args and not kwargs:
            return ConstantVariable(getattr(self.value, name)())   # iterated, tested and measured as a constant
        if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()):
            method = getattr(self.value, name)
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            return wrap_constant_result(tx, method(*cargs, **ckw))
        if name == "join" and type(self.value) in (str, bytes) and len(args) == 1 and not kwargs:
            # CPython's join makes a list of the iterable first (a generator runs to its end), then joins
            items = args[0].unpack(tx)
            if all(v.is_constant() for v in items):
                return wrap_constant_result(tx, self.value.join([v.as_python_constant() for v in items]))
        attr = self.getattr(tx, name)
        if isinstance(attr, MethodOf) and attr.obj is self:
            # its own method, which only runs on constants ("ab"[obj] with a user __index__)
            unsupported(f"{type(self.value).__name__}.{name}() with arguments that are not constants")
        return attr.call(tx, args, kwargs)

    def unpack(self, tx):
        try:
            items = list(self.value)
        except TypeError as e:
            if type(self.value).__module__ == "builtins":
                from ...exc import UserError
                raise UserError(e) from None        # `for v in 5`: CPython's TypeError, which code may catch
            unsupported(f"iterating over {type(self.value).__name__}")
        return [ConstantVariable(v) for v in items]

    def truth(self, tx):
        return bool(self.value)

    def __repr__(self):
        return f"Const({self.value!r})"


class TracebackVariable(Variable):
    """The traceback of an exception raised while tracing (what __exit__ receives): a traceback object,
    never None, whose contents CPython makes; any other use is refused."""

    def python_type(self):
        return _types.TracebackType

    def __repr__(self):
        return "<traceback>"


BINARY_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_, "|": operator.or_,
    "^": operator.xor,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "<<=": operator.ilshift, ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior,
    "^=": operator.ixor,
}

COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
    ">=": operator.ge,
}
