"""Functions and closures (inlined), bound methods, functools.partial, and cells."""
import functools
import inspect
import os
import sysconfig
import types

from ...exc import Unsupported, UserError
from .. import polyfills
from ..sources import AttrSource, ItemSource, ObjectSource
from .base import Variable, ConstantVariable, NotConstant, unsupported
from .containers import TupleVariable, DictVariable
from ..guards import lit

CO_VARARGS, CO_VARKEYWORDS, CO_GENERATOR = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS, inspect.CO_GENERATOR
CO_COROUTINE, CO_ASYNC_GENERATOR = inspect.CO_COROUTINE, inspect.CO_ASYNC_GENERATOR


def bind_arguments(code, name, args, kwargs, defaults, kwdefaults):
    """Python's own argument binding, over Variables: returns {local name: Variable}."""
    nargs, nposonly, nkwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    names = code.co_varnames
    positional, kwonly = names[:nargs], names[nargs:nargs + nkwonly]
    has_varargs, has_varkw = code.co_flags & CO_VARARGS, code.co_flags & CO_VARKEYWORDS
    bound = {}
    if len(args) > nargs and not has_varargs:
        unsupported(f"{name}() takes {nargs} positional arguments but {len(args)} were given")
    for pname, value in zip(positional, args):
        bound[pname] = value
    extra_kw = {}
    for key, value in kwargs.items():
        if key in positional[nposonly:] or key in kwonly:
            if key in bound:
                unsupported(f"{name}() got multiple values for argument {key!r}")
            bound[key] = value
        elif has_varkw:
            extra_kw[key] = value
        else:
            unsupported(f"{name}() got an unexpected keyword argument {key!r}")
    ndefaults = len(defaults)
    for i, pname in enumerate(positional):
        if pname not in bound:
            j = i - (nargs - ndefaults)
            if j < 0:
                unsupported(f"{name}() missing required argument {pname!r}")
            bound[pname] = defaults[j]
    for pname in kwonly:
        if pname not in bound:
            if pname not in kwdefaults:
                unsupported(f"{name}() missing required keyword-only argument {pname!r}")
            bound[pname] = kwdefaults[pname]
    index = nargs + nkwonly
    if has_varargs:
        bound[names[index]] = TupleVariable(args[nargs:])
        index += 1
    if has_varkw:
        bound[names[index]] = DictVariable(extra_kw)
    return bound


class CellVariable(Variable):
    """A closure cell. In-frame cells hold a Variable; cells of real functions read through a source."""
    EMPTY = object()

    def __init__(self, contents=EMPTY, real_cell=None, source=None):
        self.contents = contents
        self.real_cell = real_cell
        self.source = source

    def load(self, tx):
        if self.contents is CellVariable.EMPTY and self.real_cell is not None:
            from .builder import wrap
            try:
                value = self.real_cell.cell_contents
            except ValueError:
                unsupported("reading an empty closure cell")
            src = AttrSource(self.source, "cell_contents") if self.source is not None else None
            self.contents = wrap(tx, value, src)
        if self.contents is CellVariable.EMPTY:
            unsupported("reading a free variable before assignment")
        return self.contents

    def store(self, tx, value):
        if self.real_cell is not None:
            if self.source is None:
                unsupported("assigning to a nonlocal variable of a function with no source")
            tx.side_effects.store_cell(self, value)
        self.contents = value


STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
# Standard-library modules whose Python code is plain data manipulation: inlined like user code.
_INLINED_STDLIB = {"functools", "contextlib", "dataclasses", "collections", "enum", "typing", "abc",
                   "operator", "itertools", "_collections_abc", "types", "inspect", "copyreg", "numbers",
                   "reprlib", "keyword", "string", "unittest"}


def skipped_library(code):
    """Library code that is not traced into (I/O, logging, threads, time ...): calling it is a graph break."""
    filename = code.co_filename
    if "site-packages" in filename:
        return None
    for root in STDLIB_DIRS:
        if filename.startswith(root + os.sep):
            module = os.path.splitext(os.path.relpath(filename, root))[0].split(os.sep)[0]
            return None if module in _INLINED_STDLIB else module
    return None


class BaseFunctionVariable(Variable):
    """Shared by real functions and functions made in the frame: inlined on call."""

    def call(self, tx, args, kwargs):
        code = self.get_code()
        library = skipped_library(code)
        if library is not None:
            unsupported(f"call to {code.co_qualname}() from the standard library module {library!r}",
                        hint="it runs in CPython at a graph break; move it out of the compiled function "
                             "to capture one graph")
        if code.co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR):
            unsupported(f"calling async function {code.co_name}")
        self.guard_code(tx)
        bound = bind_arguments(code, code.co_name, list(args), dict(kwargs),
                               self.get_defaults(tx), self.get_kwdefaults(tx))
        return tx.inline_call(code, self.get_globals(), self.get_closure(tx), bound,
                              generator=bool(code.co_flags & CO_GENERATOR))

    def guard_code(self, tx):
        """The code inlined is the function's code next call too (a function made in the frame: always)."""

    def getattr(self, tx, name):
        if name == "__get__":
            return _GetMethod(self)
        unsupported(f"attribute {name!r} of {self}")


class _GetMethod(Variable):
    def __init__(self, fn):
        self.fn = fn

    def call(self, tx, args, kwargs):
        return BoundMethodVariable(self.fn, args[0])


class UserFunctionVariable(BaseFunctionVariable):
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

    def get_function_like(self):
        return self.fn

    def get_code(self):
        return self.fn.__code__

    def guard_code(self, tx):
        """`fn.__code__ = other` keeps the function object (its identity guards still pass): guard the
        code, on the function object itself, once per function whichever way it was reached. Functions
        of the standard library and torch are taken not to be rewritten, as their classes are, and so are
        graphjit's own polyfills."""
        if dunders.is_library_class(self.fn) or self.fn.__module__ == polyfills.__name__:
            return
        code = self.fn.__code__
        tx.guards.add(1, f"{{0}} is {tx.guards.obj(code)}", f"{code.co_qualname}.__code__ is still "
                      f"{code.co_filename}:{code.co_firstlineno}", (AttrSource(ObjectSource(self.fn), "__code__"),))

    def get_globals(self):
        return self.fn.__globals__

    def read_source(self):
        """Where the function's attributes are read on every call: its own source, else the function
        object itself (a method found on a class, a function reached through a constant)."""
        return self.source if self.source is not None else ObjectSource(self.fn)

    def get_defaults(self, tx):
        return UsedDefaults(tx, self.fn.__defaults__, AttrSource(self.read_source(), "__defaults__"))

    def get_kwdefaults(self, tx):
        return UsedDefaults(tx, self.fn.__kwdefaults__, AttrSource(self.read_source(), "__kwdefaults__"))

    def getattr(self, tx, name):
        """fn.<name>: the function's attributes (special ones and its __dict__) read through a source,
        so a later `fn.__doc__ = ...` or `fn.flag = ...` fails the guard instead of being missed."""
        from .builder import wrap
        from .builtins import AttributeMissing
        if name == "__get__":
            return _GetMethod(self)
        src = self.read_source()
        if name == "__code__":
            tx.guards.add_id(AttrSource(src, name), self.fn.__code__)
            return ConstantVariable(self.fn.__code__)
        try:
            value = getattr(self.fn, name)
        except AttributeError as e:
            tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (src,))
            raise AttributeMissing(str(e))
        if name in ("__globals__", "__builtins__"):
            unsupported(f"reading {name} of a function (a module's whole namespace)")
        return wrap(tx, value, AttrSource(src, name))

    def get_closure(self, tx):
        cells = self.fn.__closure__ or ()
        src = AttrSource(self.read_source(), "__closure__")
        return [tx.closure_cell(c, ItemSource(src, i)) for i, c in enumerate(cells)]

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)

    def __repr__(self):
        return f"Function({self.fn.__qualname__})"


class LruCachedFunctionVariable(UserFunctionVariable):
    """The function under a functools.lru_cache wrapper, traced in its place. Eager runs its body only on
    a cache miss, so a call that records an effect outside itself (a store into a global, an outside
    container or object, a deferred logging call) breaks instead of replaying it every call. Rebuilt (at
    a break, or returned) as the wrapper itself."""

    def __init__(self, wrapper, source=None):
        super().__init__(wrapper.__wrapped__, None)
        self.wrapper = wrapper
        self.wrapper_source = source

    def reconstruct(self, cg):
        return self.wrapper_source.expr() if self.wrapper_source is not None else cg.obj(self.wrapper)

    def call(self, tx, args, kwargs):
        before = tx.side_effects.recorded()
        result = super().call(tx, args, kwargs)
        if tx.side_effects.recorded() != before:
            unsupported(f"{self.fn.__qualname__} is lru_cache'd and has effects outside itself, which run "
                        "only on a cache miss")
        self._check_cached(args, kwargs, result)
        return result

    def _check_cached(self, args, kwargs, result):
        """A constant result must be the one the cache gives: a value cached before the state its body
        reads changed is what eager returns (the body's guards retrace when that state changes)."""
        if not (result.is_constant() and all(a.is_constant() for a in args) and
                all(v.is_constant() for v in kwargs.values())):
            return
        traced = result.as_python_constant()
        try:
            cached = self.wrapper(*[a.as_python_constant() for a in args],
                                  **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:      # noqa: BLE001 -- whatever it is, the traced result can't be trusted
            unsupported(f"calling lru_cache'd {self.fn.__qualname__} raised {type(e).__name__}: {e}")
        if cached is not traced and (type(cached) is not type(traced) or cached != traced):
            unsupported(f"lru_cache'd {self.fn.__qualname__} returns {cached!r}, cached from an earlier "
                        f"state; its body gives {traced!r} now")


class NestedFunctionVariable(BaseFunctionVariable):
    """A function made by MAKE_FUNCTION during the trace (closures, lambdas, inner defs)."""

    def __init__(self, code, f_globals):
        self.code = code
        self.f_globals = f_globals
        self.defaults = None       # TupleVariable
        self.kwdefaults = None     # DictVariable
        self.closure = None        # TupleVariable of CellVariables
        self.annotations = None
        self.attrs = {}            # the function's __dict__ (functools.wraps's __wrapped__, user flags)
        self.special = {}          # __name__, __qualname__, __doc__, __module__ ... assigned during the trace

    def python_type(self):
        return types.FunctionType

    def get_function_like(self):
        return self.code

    def get_code(self):
        return self.code

    def get_globals(self):
        return self.f_globals

    def get_defaults(self, tx):
        return self.defaults.unpack(tx) if self.defaults is not None else []

    def get_kwdefaults(self, tx):
        if self.kwdefaults is None:
            return {}
        if isinstance(self.kwdefaults, ConstantVariable):
            return {k: ConstantVariable(v) for k, v in self.kwdefaults.value.items()}
        return dict(self.kwdefaults.items)

    def get_closure(self, tx):
        return self.closure.unpack(tx) if self.closure is not None else []

    def getattr(self, tx, name):
        if name in self.special:
            return self.special[name]
        reader = _NESTED_READERS.get(name)
        if reader is not None:
            return reader(self)
        if name in self.attrs:
            return self.attrs[name]
        if name in ("__globals__", "__builtins__", "__closure__"):
            unsupported(f"reading {name} of a function made in the frame")
        if name == "__get__":
            return _GetMethod(self)
        if hasattr(types.FunctionType, name):
            unsupported(f"attribute {name!r} of a function made in the frame")
        from .builtins import AttributeMissing
        raise AttributeMissing(f"'function' object has no attribute {name!r}")

    def dict_view(self):
        view = DictVariable({})
        view.items = self.attrs        # the function's own __dict__: writes through it are its attributes
        return view

    def reconstruct(self, cg):
        """A function made in the frame, rebuilt in the entry from its code, globals and defaults (a class
        statement's body at a break, a returned inner function). Those closing over cells, or given
        attributes or annotations in the frame, are not rebuilt."""
        if self.closure is not None or self.attrs or self.special or self.annotations is not None:
            unsupported(f"returning {self} from a compiled frame (it closes over cells or was changed)")
        defaults = cg.expr(self.defaults) if self.defaults is not None else "None"
        make = f"{cg.obj(types.FunctionType)}({cg.obj(self.code)}, {cg.obj(self.f_globals)}, " \
               f"{self.code.co_name!r}, {defaults})"
        if self.kwdefaults is None:
            return make
        return f"{cg.obj(_with_kwdefaults)}({make}, {cg.expr(self.kwdefaults)})"

    def setattr(self, tx, name, value):
        """Stores as CPython's function setters do: type checks, read-only attributes, else __dict__."""
        if name in ("__globals__", "__builtins__", "__closure__"):
            raise UserError(AttributeError("readonly attribute"))
        if name in ("__code__", "__dict__"):
            unsupported(f"assigning {name} of a function made in the frame")
        writer = _NESTED_WRITERS.get(name)
        if writer is not None:
            writer(self, tx, value)
        elif name in _NESTED_READERS:
            self.special[name] = value
        else:
            self.attrs[name] = value

    def delattr(self, tx, name):
        if name not in self.attrs or name in _NESTED_READERS:
            unsupported(f"deleting {name!r} of a function made in the frame")
        del self.attrs[name]

    def __repr__(self):
        return f"NestedFunction({self.code.co_qualname})"


def _code_doc(code):
    """The __doc__ CPython gives a function made from `code` (its docstring or None), asked of CPython."""
    cells = tuple(types.CellType() for _ in code.co_freevars)
    return types.FunctionType(code, {}, None, None, cells).__doc__


def _type_checked(name, types_, message):
    def write(fn, tx, value):
        if not value.is_constant() or not isinstance(value.as_python_constant(), types_):
            if value.is_constant():
                raise UserError(TypeError(message))
            unsupported(f"assigning {name} of a function made in the frame to {value}")
        fn.special[name] = value
    return write


def _write_defaults(fn, tx, value):
    if not (isinstance(value, TupleVariable) and type(value) is TupleVariable or value.is_constant() and
            isinstance(value.as_python_constant(), (tuple, type(None)))):
        unsupported(f"assigning __defaults__ of a function made in the frame to {value}")
    fn.defaults = None if value.is_constant() and value.as_python_constant() is None else value


def _write_kwdefaults(fn, tx, value):
    if value.is_constant() and value.as_python_constant() is None:
        fn.kwdefaults = None
    elif isinstance(value, DictVariable) and value.python_type() is dict:
        fn.kwdefaults = value
    else:
        unsupported(f"assigning __kwdefaults__ of a function made in the frame to {value}")


# A function's special attributes: how each is read when never assigned, and the checked setters.
_NESTED_READERS = {
    "__name__": lambda f: ConstantVariable(f.code.co_name),
    "__qualname__": lambda f: ConstantVariable(f.code.co_qualname),
    "__module__": lambda f: ConstantVariable(f.f_globals.get("__name__")),
    "__doc__": lambda f: ConstantVariable(_code_doc(f.code)),
    "__code__": lambda f: ConstantVariable(f.code),
    "__defaults__": lambda f: f.defaults if f.defaults is not None else ConstantVariable(None),
    "__kwdefaults__": lambda f: f.kwdefaults if f.kwdefaults is not None else ConstantVariable(None),
    "__annotations__": lambda f: f.annotations if f.annotations is not None else f.special.setdefault(
        "__annotations__", DictVariable({})),
    "__type_params__": lambda f: TupleVariable([]),
    "__dict__": lambda f: f.dict_view(),
}
_NESTED_WRITERS = {
    "__name__": _type_checked("__name__", str, "__name__ must be set to a string object"),
    "__qualname__": _type_checked("__qualname__", str, "__qualname__ must be set to a string object"),
    "__defaults__": _write_defaults,
    "__kwdefaults__": _write_kwdefaults,
}


class UsedDefaults:
    """A real function's __defaults__ (a tuple) or __kwdefaults__ (a dict), as argument binding reads
    it: only the values a call uses are wrapped (guarded through `source`, tensors becoming graph inputs),
    and the container is guarded on its type and length / keys on first use, so positions stay right
    when it is replaced later."""

    def __init__(self, tx, values, source):
        self.tx, self.values, self.source = tx, values if values is not None else (), source
        self.guarded = False

    def __len__(self):
        return len(self.values)

    def __contains__(self, key):
        return key in self.values

    def __getitem__(self, key):
        from .builder import wrap, _all_immutable
        guards = self.tx.guards
        if not self.guarded:
            self.guarded = True
            guards.add_type(self.source, type(self.values))
            if type(self.values) is tuple:
                guards.add_len(self.source, len(self.values))
                if _all_immutable(self.values):
                    guards.note_immutable(self.source, self.values)
            else:
                guards.add_keys(self.source, tuple(self.values))
        return wrap(self.tx, self.values[key], ItemSource(self.source, key))


class BoundMethodVariable(Variable):
    def __init__(self, fn, obj, source=None, value=None):
        self.fn = fn
        self.obj = obj
        self.source = source
        self.value = value        # the real method object, when one was read from outside

    @classmethod
    def create(cls, tx, value, source):
        from .builder import wrap
        fn = wrap(tx, value.__func__, AttrSource(source, "__func__") if source is not None else None)
        obj = wrap(tx, value.__self__, AttrSource(source, "__self__") if source is not None else None)
        return cls(fn, obj, source, value)

    def python_type(self):
        return types.MethodType

    def call(self, tx, args, kwargs):
        return self.fn.call(tx, [self.obj, *args], kwargs)

    def getattr(self, tx, name):
        if name == "__self__":
            return self.obj
        if name == "__func__":
            return self.fn
        return self.fn.getattr(tx, name)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.expr()
        return f"{cg.obj(types.MethodType)}({cg.expr(self.fn)}, {cg.expr(self.obj)})"

    def __repr__(self):
        return f"BoundMethod({self.fn!r}, {self.obj!r})"


class PartialVariable(Variable):
    def __init__(self, func, args, keywords, source=None, value=None):
        self.func, self.args, self.keywords, self.source = func, list(args), dict(keywords), source
        self.value = value              # the partial object itself, for one from outside the frame
        self.keywords_read = None       # its .keywords dict, once the frame read it
        self.opaque = False             # func, args and keywords unknown (see classes._partial)

    def python_type(self):
        return functools.partial

    @classmethod
    def create(cls, tx, value, source):
        from .builder import wrap
        src = (lambda a: AttrSource(source, a)) if source is not None else (lambda a: None)
        func = wrap(tx, value.func, src("func"))
        args = [wrap(tx, v, ItemSource(src("args"), i) if source else None) for i, v in enumerate(value.args)]
        kws = {k: wrap(tx, v, ItemSource(src("keywords"), k) if source else None)
               for k, v in value.keywords.items()}
        return cls(func, args, kws, source, value)

    def call(self, tx, args, kwargs):
        keywords = self.keywords
        if self.keywords_read is not None and self.keywords_read.mutated:
            if self.value is not None:
                unsupported("calling a functools.partial whose .keywords dict the frame changed")
            keywords = dict(self.keywords_read.items)     # made in the frame: its dict as it is now
        return self.func.call(tx, [*self.args, *args], {**keywords, **kwargs})

    def getattr(self, tx, name):
        """partial's attributes: func, args (a tuple); keywords, the partial's own dict, of a partial from
        outside the frame only (read through its source, so writes to it are replayed on the real dict;
        a call after such a write is refused, since the call would use the keywords as traced)."""
        from .containers import TupleVariable
        if self.opaque and name in ("func", "args", "keywords"):
            unsupported(f"partial.{name} of a partial over a partial from outside the frame")
        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(list(self.args))
        if name == "keywords" and self.source is not None and self.value is not None:
            from .builder import wrap
            self.keywords_read = wrap(tx, self.value.keywords, AttrSource(self.source, "keywords"))
            return self.keywords_read
        if name == "keywords" and self.value is None:       # a partial made in the frame: its own dict
            from .containers import DictVariable
            if self.keywords_read is None:
                self.keywords_read = DictVariable(self.keywords)
            return self.keywords_read
        return super().getattr(tx, name)


class DescriptorVariable(Variable):
    """A bare staticmethod/classmethod object (e.g. read from a class __dict__)."""

    def __init__(self, value, source=None):
        self.value, self.source = value, source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def python_type(self):
        return type(self.value)

    def call(self, tx, args, kwargs):
        from .builder import wrap
        return wrap(tx, self.value.__func__, None).call(tx, args, kwargs)


class DisabledFunctionVariable(Variable):
    def __init__(self, fn, source=None):
        self.fn, self.source = fn, source

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def call(self, tx, args, kwargs):
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        unsupported(f"call to {name}, which is marked graphjit.disable",
                    hint="graphjit.disable functions always run in CPython")


class AutogradEngineCallVariable(DisabledFunctionVariable):
    """torch.autograd.grad and torch.autograd.backward: they run autograd's engine, which a graph does not
    record, so the call runs in CPython at a graph break (as Tensor.backward does)."""

    # position of create_graph among each function's parameters
    CREATE_GRAPH = {"grad": 4, "backward": 3}

    def call(self, tx, args, kwargs):
        name = self.fn.__name__
        refuse_autograd_call(f"torch.autograd.{name}()", args, kwargs, self.CREATE_GRAPH.get(name))


def refuse_autograd_call(what, args, kwargs, create_graph_at):
    """Breaks the graph at a call that runs autograd's engine. Where it asks for create_graph=True, the
    break says so (Unsupported.differentiated_again): the graph before it then runs as captured, whose
    backward is differentiable, as a compiled backward is not."""
    flag = kwargs.get("create_graph")
    if flag is None and create_graph_at is not None and len(args) > create_graph_at:
        flag = args[create_graph_at]
    error = Unsupported(f"{what} runs autograd's engine, which a graph does not record",
                        hint="it runs in CPython at a graph break")
    try:
        error.differentiated_again = flag is not None and bool(flag.as_python_constant())
    except NotConstant:
        error.differentiated_again = True     # decided at run time: the graph must allow it
    raise error


class IntrinsicVariable(Variable):
    """polyfills.made_by and polyfills.refuse, called by a pure-Python equivalent of a C function: what
    only the trace knows (which function made a generator), and a refusal with the equivalent's reason."""

    def __init__(self, fn, source=None):
        self.fn = fn

    @classmethod
    def create(cls, tx, value, source):
        return cls(value)

    def call(self, tx, args, kwargs):
        from ..interpreter import GeneratorVariable
        if self.fn is polyfills.refuse:
            unsupported(args[0].as_python_constant(), hint="the call runs in CPython")
        iterator, function = args
        return ConstantVariable(isinstance(iterator, GeneratorVariable) and
                                iterator.frame.code is function.fn.__code__)


class CheckpointVariable(Variable):
    """torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, **kwargs): fn is traced inline (its
    values are what checkpoint returns: it only changes what autograd keeps, and its backward replays the
    RNG state, so the values are those of one draw), and the graph nodes it makes are tagged for
    recomputation (node.meta "recompute" and "ac_graph_id", as torch.compile's tags): AOTAutograd copies
    the tags onto the ATen nodes they trace to, and its min-cut partitioner recomputes them in the
    backward instead of saving them. Random ops are left untagged (their results are saved, so a
    recomputation never draws again). The reentrant form (an autograd.Function; no gradient reaches the
    parameters inside when no input requires grad) and a custom context_fn run at a graph break."""
    OPTIONS = ("use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state", "early_stop")
    regions = 0

    def __init__(self, fn, source=None):
        self.fn, self.source = fn, source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)

    def call(self, tx, args, kwargs):
        from torch.utils.checkpoint import CheckpointPolicy, noop_context_fn
        options = {k: v for k, v in kwargs.items() if k in self.OPTIONS}
        kwargs = {k: v for k, v in kwargs.items() if k not in self.OPTIONS}
        constant = {k: v.as_python_constant() if isinstance(v, ConstantVariable) else v for k, v in options.items()}
        if constant.get("use_reentrant", None) is not False:
            unsupported("torch.utils.checkpoint with use_reentrant other than False",
                        hint="pass use_reentrant=False (torch's recommended form) to capture the checkpointed "
                             "function")
        if constant.get("context_fn", noop_context_fn) is not noop_context_fn or constant.get("debug", False):
            unsupported("torch.utils.checkpoint with a context_fn or debug=True")
        if not args:
            unsupported("torch.utils.checkpoint without a function")
        graph = tx.graph.graph
        before = set(graph.nodes)
        result = args[0].call(tx, list(args[1:]), kwargs)
        CheckpointVariable.regions += 1
        from ...ops import is_random_name
        for node in graph.nodes:
            if node in before or node.op not in ("call_function", "call_method", "call_module"):
                continue
            name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
            if is_random_name(name):
                continue
            node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
            node.meta["ac_graph_id"] = CheckpointVariable.regions
        return result


class CompiledWrapperVariable(Variable):
    """A graphjit.compile'd function called from traced code: trace the original function inline."""

    def __init__(self, wrapper, source=None):
        self.wrapper, self.source = wrapper, source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def call(self, tx, args, kwargs):
        from .builder import wrap
        fn = self.wrapper._graphjit_compiled_fn
        src = AttrSource(self.source, "_graphjit_compiled_fn") if self.source is not None else None
        return wrap(tx, fn, src).call(tx, args, kwargs)


def _with_kwdefaults(fn, kwdefaults):
    fn.__kwdefaults__ = kwdefaults
    return fn


class AssumedConstantVariable(Variable):
    """A function marked torch._dynamo.assume_constant_result: called now, with constant arguments, and its
    result taken as a constant of the trace (the mark is the user's promise that it never changes)."""

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def call(self, tx, args, kwargs):
        from .builder import wrap_constant_result
        try:
            positional = [a.as_python_constant() for a in args]
            keywords = {k: v.as_python_constant() for k, v in kwargs.items()}
        except Exception:
            unsupported(f"{getattr(self.fn, '__qualname__', self.fn)} (assume_constant_result) called with "
                        "arguments that are not constants")
        return wrap_constant_result(tx, self.fn(*positional, **keywords))

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)


# bound at the end (dunders imports this module): read at call time, without an import statement on each
# function call traced
from . import dunders  # noqa: E402
