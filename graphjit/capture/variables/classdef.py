"""Class statements inside traced code: `class P: ...` builds the class while tracing, once per translation.

CPython runs a class statement as `__build_class__(body, name, *bases)`: the body function fills a
namespace, then the metaclass makes the class. Each call of the real function makes a new class; the
compiled entry uses the one class built while tracing. That is indistinguishable from eager only when
(1) building the class has no effect besides the class: the body (checked instruction by instruction, see
_check_body) only defines functions, binds constants and applies the builtin decorators staticmethod,
classmethod and property (and a property's setter/getter/deleter); the metaclass is `type` or ABCMeta; no
base defines __init_subclass__; (2) the class holds no mutable state: the namespace binds no list, dict or
set made by the body (the class is never assigned to either: ClassVariable has no setattr); (3) neither the
class, nor an instance of it, nor a function of its namespace leaves the frame: `frame_objects` names them,
and ReturnCodegen refuses to rebuild them, with the root-frame index of the class statement, so the frame
breaks there instead (the class is made in CPython on every call). Bodies whose functions close over the
enclosing frame's variables are not built here: the statement is a graph break, as before.
"""
import abc
import builtins
import types

from ..sources import ObjectSource
from .base import unsupported

# what a class body may call: the builtin method decorators (their results wrap a function, nothing else)
_DECORATORS = (staticmethod, classmethod, property)
_PROPERTY_METHODS = ("setter", "getter", "deleter")
_METACLASSES = (type, abc.ABCMeta)

# kinds of values on the simulated stack
# (_KWMAP: a dict of constants, a function's keyword defaults; bound to a name it is mutable state)
_NULL, _CONST, _FUNC, _CELL, _MUTABLE, _TUPLE, _KWMAP = "null", "const", "func", "cell", "mutable", "tuple", "kwmap"
_PROPERTY = "property"      # a property made by the body: the one value whose .setter/.getter/.deleter it may read


def build_class(tx, body, name, *bases, **kwargs):
    from .builder import wrap
    from .functions import NestedFunctionVariable
    from .objects import ClassVariable
    if not isinstance(body, NestedFunctionVariable):
        unsupported("__build_class__ of a function not made by a class statement")
    code = body.code
    if code.co_freevars:
        unsupported(f"class {code.co_name} uses variables of the enclosing function "
                    f"({', '.join(code.co_freevars)})", hint="the class statement is a graph break")
    from .builtins import BuiltinVariable
    if kwargs or not name.is_constant() or not all(
            isinstance(b, ClassVariable) or isinstance(b, BuiltinVariable) and isinstance(b.fn, type) for b in bases):
        unsupported(f"class {code.co_name} with a metaclass, keywords or bases only known while tracing")
    real_bases = tuple(b.as_python_constant() for b in bases)      # a builtin base (tuple, dict) is a BuiltinVariable
    for base in real_bases:
        if not isinstance(base, type) or type(base) not in _METACLASSES:
            unsupported(f"class {code.co_name}: base {getattr(base, '__name__', base)} has the metaclass "
                        f"{type(base).__name__}")
        if getattr(base.__init_subclass__, "__func__", None) is not None:
            unsupported(f"class {code.co_name}: base {base.__name__} defines __init_subclass__")
    globals_ = body.f_globals
    loaded = _check_body(code, globals_)
    for n in sorted(loaded):                      # the globals the body read: guarded as any global read
        if n in globals_:
            wrap(tx, globals_[n], tx.global_source(globals_, n))
    cls = builtins.__build_class__(types.FunctionType(code, globals_, code.co_name), name.as_python_constant(),
                                   *real_bases)
    tx.keepalive.append(cls)
    index = tx.root_frame.ip - 1
    tx.frame_objects[id(cls)] = index
    for value in vars(cls).values():
        for fn in _functions_of(value):
            tx.frame_objects[id(fn)] = index
    return ClassVariable(cls, ObjectSource(cls))


def _functions_of(value):
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    return [value] if isinstance(value, types.FunctionType) else []


def _check_body(code, globals_):
    """Simulate the body's stack over the normalized instructions; refuse anything but the forms the
    module docstring lists. Returns the global names the body reads."""
    from .. import bytecode
    stack, stored, loaded = [], {}, set()       # stored: name -> the kind of value bound

    def refuse(what):
        unsupported(f"class {code.co_name}: its body {what}", hint="the class statement is a graph break")

    for inst in bytecode.read(code):
        op, arg = inst.opname, inst.argval
        if op in ("NOP", "RESUME", "MAKE_CELL", "COPY_FREE_VARS"):
            continue
        if op == "SETUP_ANNOTATIONS":
            stored["__annotations__"] = (_MUTABLE,)
            continue
        if op in ("LOAD_NAME", "LOAD_GLOBAL"):
            if arg in stored:
                stack.append(("local", arg, stored[arg]))
                continue
            if arg in globals_:
                value = globals_[arg]
            elif hasattr(builtins, arg):
                value = getattr(builtins, arg)
            else:
                refuse(f"reads the undefined name {arg!r}")
            if hasattr(type(value), "__set_name__"):      # type.__new__ would call it: an effect
                refuse(f"reads {arg!r}, whose type defines __set_name__")
            loaded.add(arg)
            stack.append((_CONST, value))
        elif op == "LOAD_CONST":
            stack.append((_CONST, arg))
        elif op == "STORE_NAME":
            kind = stack.pop()
            if kind[0] in (_MUTABLE, _KWMAP):
                refuse(f"binds {arg!r} to a new mutable object (shared by every call once compiled)")
            stored[arg] = kind
        elif op == "STORE_SUBSCR":             # `x: int` stores into the body's __annotations__
            _key, target, _value = stack.pop(), stack.pop(), stack.pop()
            if target[:2] != ("local", "__annotations__"):
                refuse("assigns an item")
        elif op == "MAKE_FUNCTION":
            stack.pop()
            stack.append((_FUNC,))
        elif op == "SET_FUNCTION_ATTRIBUTE":
            fn, value = stack.pop(), stack.pop()
            if value[0] == _MUTABLE and arg in (1, 2):
                refuse("gives a function a new mutable default (shared by every call once compiled)")
            stack.append(fn)
        elif op == "LOAD_CLOSURE":
            if arg not in code.co_cellvars:
                refuse(f"reads the enclosing function's cell {arg!r}")
            stack.append((_CELL,))
        elif op in ("BUILD_TUPLE", "BUILD_CONST_KEY_MAP"):
            count = arg + (op == "BUILD_CONST_KEY_MAP")
            items = [stack.pop() for _ in range(count)]
            immutable = all(k[0] in (_CONST, _CELL, _TUPLE) for k in items)
            stack.append((_MUTABLE,) if not immutable else (_TUPLE,) if op == "BUILD_TUPLE" else (_KWMAP,))
        elif op in ("BUILD_LIST", "BUILD_MAP", "BUILD_SET"):
            del stack[len(stack) - (2 * arg if op == "BUILD_MAP" else arg):]
            stack.append((_MUTABLE,))
        elif op == "LOAD_ATTR":
            target = stack.pop()
            if target[0] != "local" or target[2] != (_PROPERTY,) or arg not in _PROPERTY_METHODS:
                refuse(f"reads the attribute {arg!r}")
            stack.append(("decorator",))
        elif op == "PUSH_NULL":
            stack.append((_NULL,))
        elif op == "CALL":
            del stack[len(stack) - arg:]
            first, second = stack.pop(), stack.pop()
            callee = second if first[0] == _NULL else first if second[0] == _NULL else second
            if not (callee[0] == "decorator" or callee[0] == _CONST and any(callee[1] is d for d in _DECORATORS)):
                refuse("calls something other than staticmethod, classmethod or property")
            if first[0] != _NULL and second[0] != _NULL and first[0] != _FUNC:
                refuse("decorates something other than a function")
            # property(f) and a property's setter(f) make a property; staticmethod/classmethod wrappers
            makes_property = callee[0] == "decorator" or callee[1] is property
            stack.append((_PROPERTY,) if makes_property else (_CONST, None))
        elif op == "COPY":
            stack.append(stack[-arg])
        elif op == "POP_TOP":
            stack.pop()
        elif op == "RETURN_VALUE":
            return loaded
        else:
            refuse(f"runs {op}")
    return loaded
