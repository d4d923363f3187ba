"""The symbolic interpreter: runs a frame's normalized instructions over Variables.

One handler per instruction, in a table. Calls to Python functions are inlined (a new FrameState run by
the same loop); tensor operations become graph nodes; everything else is evaluated at trace time, with a
guard on each outside value it depended on. Anything it can't handle raises Unsupported, carrying the
user's file:line, and the frame runs eagerly.

A FrameState holds everything CPython's frame would (stack, locals, cells, instruction pointer), so the
interpreter can stop at any instruction with its live state: that is what graph breaks build on.
"""
import builtins
import dis
import functools
import inspect
import random
import sys
import threading
import types

import torch

from .. import config
from ..ops import autocast_state
from ..exc import Unsupported, UserError
from . import bytecode, polyfills
from .dynamic import DynamicPolicy
from .graph import OutputGraph
from .guards import GuardSet
from .side_effects import SideEffects
from .sources import LocalSource, GlobalSource, ItemSource, ObjectSource, ClosureSource, DrawSource
from .variables.base import Variable, ConstantVariable, NULL, NullVariable, NotConstant, TracebackVariable, unsupported
from .variables.builder import wrap
from .variables.builtins import (binary_op, compare_op, is_op, contains_op, unary_op, getitem, length,
                                 BuiltinVariable)
from .variables.containers import (TupleVariable, ListVariable, DictVariable, SetVariable, SliceVariable,
                                   IteratorVariable, BaseListVariable, make_iterator)
from .variables.functions import CellVariable, NestedFunctionVariable
from .variables.objects import SuperVariable, PythonModuleVariable
from .variables.symbolic import DRAWS, SymNodeVariable, is_symbolic, keep_unspecialized
from .variables.torchvars import WithExitVariable


@functools.lru_cache(maxsize=4096)
def instructions_of(code):
    return bytecode.read(code)


class LazyLocal(Variable):
    """An argument of the traced function not read yet: wrapped (guards and all) at its first read. One the
    frame does not read before its return or a graph break passes through by its source and guards
    nothing, so a value only a later part of the function uses does not recompile this part (a resume
    function receives every live local)."""

    def __init__(self, value, source):
        self._value, self.source = value, source

    def realize(self, tx):
        return wrap(tx, self._value, self.source)

    def __repr__(self):
        return f"LazyLocal({self.source.expr()})"


def _realized(tx, value):
    return value.realize(tx) if type(value) is LazyLocal else value


class FrameState:
    def __init__(self, code, f_globals, local_vars, cells, parent=None, generator=False):
        self.code = code
        self.instructions = instructions_of(code)
        self.f_globals = f_globals
        self.f_builtins = f_globals.get("__builtins__", builtins)
        if isinstance(self.f_builtins, type(builtins)):
            self.f_builtins = self.f_builtins.__dict__
        self.locals = local_vars
        self.cells = cells
        self.stack = []
        self.ip = 0
        self.parent = parent
        self.is_generator = generator
        self.current = None
        self.exc_value = None        # a generator's own handled exception (CPython's gi_exc_state)
        self.open_handlers = 0       # except/finally/with-exit handlers running in this frame now

    def push(self, value):
        self.stack.append(value)

    def load_local(self, tx, name):
        """The local `name` (KeyError where unbound), wrapped at its first read."""
        value = self.locals[name]
        if type(value) is LazyLocal:
            value = self.locals[name] = value.realize(tx)
        return value

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def push_callable(self, fn):
        """Push a callable with its NULL slot, in the order this Python version's CALL expects."""
        if bytecode.NULL_BEFORE_CALLABLE:
            self.stack.extend([NULL, fn])
        else:
            self.stack.extend([fn, NULL])

    def zero_arg_super(self, tx):
        cell = self.cells.get("__class__")
        if cell is None or self.code.co_argcount == 0:
            unsupported("super() without arguments outside a method")
        first = self.code.co_varnames[0]
        obj = self.cells[first].contents if first in self.cells else self.load_local(tx, first)
        return cell.load(tx).as_python_constant(), obj

    def location(self):
        line = self.current.lineno if self.current is not None else self.code.co_firstlineno
        return self.code.co_filename, line


class _Return:
    def __init__(self, value):
        self.value = value


class _Yield(_Return):
    pass


class _CallersException:
    """The exception the caller of the compiled frame is handling, if any: not known while tracing."""

    def __repr__(self):
        return "<the caller's exception>"


CALLERS_EXCEPTION = _CallersException()


class _Caller(threading.local):
    """What the call being translated found of its caller's state: `exception`, sys.exception() where the
    compiled function was called (frame.FrameCache.miss sets it), CALLERS_EXCEPTION outside a translation;
    `function_modes` (ops.function_modes()) and `dispatch_modes` (how many), the torch modes around the
    call, which the entry guards (the compile runs without them)."""
    exception = CALLERS_EXCEPTION
    function_modes = ()
    dispatch_modes = 0


CALLER = _Caller()


class BreakPoint:
    """The trace stopped before instruction `index` of the root frame; `frame` holds the live state."""

    def __init__(self, frame, index):
        self.frame = frame
        self.index = index


@functools.lru_cache(maxsize=4096)
def exception_table_of(code):
    return bytecode.exception_table(code)


@functools.lru_cache(maxsize=4096)
def _handlers_at(code, index):
    """(the except clauses an exception raised at instruction `index` meets, each as the global names its
    type test loads, or None where it may catch anything (a bare except, a test that is not such names, a
    finally block that can end without re-raising, a handler of another shape); how many with-blocks'
    exits it passes). A plain finally block and compiler-made cleanup re-raise: it passes on to the next
    handler out."""
    instrs = instructions_of(code)
    entries = exception_table_of(code)
    clauses, withs = [], 0
    for target in bytecode.handler_targets(instrs, entries, index):
        if instrs[target].opname == "PUSH_EXC_INFO" and instrs[target + 1].opname == "WITH_EXCEPT_START":
            withs += 1
        elif instrs[target].opname == "PUSH_EXC_INFO":
            # the body up to its cleanup (a finally block's branches each end in a re-raise inside it);
            # further where no re-raise ends it there (a return inside finally)
            body_end = max(next((e.end for e in entries if e.start <= target + 1 < e.end), len(instrs)),
                           _first(instrs, target + 1, ("RERAISE",), len(instrs) - 1) + 1)
            clauses += _except_clauses(instrs, target + 1, body_end)
    return tuple(clauses), withs


_TEST_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF",
                         "LOAD_CONST", "BUILD_TUPLE", "PUSH_NULL", "LOAD_METHOD"})


def _except_clauses(instrs, start, end):
    """The clauses of the handler whose body is instrs[start:end] (after PUSH_EXC_INFO, up to its cleanup),
    as _handlers_at gives them: a chain of type tests followed test to test through their jumps (not
    through the clauses' bodies), or a finally block, passed over where it only re-raises."""
    j = start
    if not any(ins.opname in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH") for ins in instrs[start:end]):
        # a finally block: passes the exception on unless it can return, pop the exception or jump out of
        # its body (`break`); its own branches (an if in it, each ending in a re-raise) stay inside
        if any(ins.opname in ("RETURN_VALUE", "POP_EXCEPT") or
               ins.target is not None and not start <= ins.target < end for ins in instrs[start:end]):
            return [None]
        return []
    clauses = []
    while True:
        k = j
        while k < len(instrs) and instrs[k].opname in _TEST_LOADS:
            k += 1
        if k >= len(instrs) or instrs[k].opname not in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH") or \
                k + 1 >= len(instrs) or instrs[k + 1].opname != "POP_JUMP_IF_FALSE" or instrs[k + 1].target is None:
            return clauses + [None]          # a bare clause, or a handler of another shape
        clauses.append(_exception_names(instrs, k))
        j = instrs[k + 1].target             # the next clause's test, or the re-raise when none matched
        if instrs[j].opname == "RERAISE":
            return clauses


def _first(instrs, start, opnames, default):
    return next((k for k in range(start, len(instrs)) if instrs[k].opname in opnames), default)


def _exception_names(instrs, check):
    """The global names the type test before instruction `check` loads (`except E`, `except (A, B)`), or
    None."""
    before = instrs[check - 1]
    if before.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        return (before.argval,)
    if before.opname == "BUILD_TUPLE" and check - 1 - before.argval >= 0:
        loads = instrs[check - 1 - before.argval:check - 1]
        if all(ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") for ins in loads):
            return tuple(ins.argval for ins in loads)
    return None


def _python_exit(value):
    """The code of a with-block's exit that is a Python method `__exit__` (a user's context manager), else
    None."""
    fn = getattr(getattr(value, "fn", None), "fn", None)
    code = getattr(fn, "__code__", None)
    return code if code is not None and code.co_name == "__exit__" else None


def _exit_may_suppress(value):
    """Whether a with-block's exit may return a true value, which suppresses the exception: not torch's
    managers', nor a Python __exit__ that returns None on every path (contextlib.nullcontext's)."""
    if isinstance(value, WithExitVariable):
        return False
    return not _returns_none_only(_python_exit(value))


@functools.lru_cache(maxsize=1024)
def _returns_none_only(code):
    instrs = bytecode.read(code)
    return all(i > 0 and instrs[i - 1].opname == "LOAD_CONST" and instrs[i - 1].argval is None
               for i, ins in enumerate(instrs) if ins.opname == "RETURN_VALUE")


# what a graph's own checks raise at run time (an index out of range, a device assert)
_GRAPH_ERRORS = (IndexError, RuntimeError)


def _clause_catches(names, frame):
    """Whether an except clause testing `names` (see _handlers_at) may catch one of _GRAPH_ERRORS."""
    if names is None:
        return True
    for name in names:
        cls = frame.f_globals.get(name, frame.f_builtins.get(name))
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) or \
                any(issubclass(error, cls) for error in _GRAPH_ERRORS):
            return True
    return False


class GeneratorVariable(Variable):
    """A generator made in the trace: its frame is resumed on each next(), so code after a yield runs
    when the consumer asks for the next value, exactly as in CPython."""

    def __init__(self, frame):
        self.frame = frame
        self.started = False
        self.done = False
        self.raised = False                # finished by an exception

    def python_type(self):
        import types
        return types.GeneratorType

    def next(self, tx):
        if self.done:
            if self.raised and self.is_polyfill():
                unsupported(f"{self.frame.code.co_qualname.lstrip('_')} pulled again after an exception left "
                            "it: the C iterator it stands for would pull its source again")
            self.return_value = None       # only the call that finishes the generator carries it
            return None
        if self.started:
            self.frame.push(ConstantVariable(None))   # the value of the `yield` expression
        return self._resume(tx)

    def _resume(self, tx, thrown=None):
        """Run the frame to its next yield (its value) or its end (None); an exception leaving the frame
        finishes the generator, as in CPython."""
        if thrown is not None and self.frame.instructions[self.frame.ip - 2].opname == "SEND":
            kind, outcome = self._throw_into_sub_iterator(tx, thrown)
            if kind == "yielded":
                return outcome
            if kind == "returned":
                self._leave_yield_from(outcome)
                thrown = None
            else:
                thrown = outcome
        if thrown is not None:
            self.frame.push(ConstantVariable(None))    # CPython pushes the value "sent" with a throw too
        self.started = True
        try:
            result = tx.run_frame(self.frame, thrown)
        except UserError as e:
            self.done = self.raised = True
            error = stop_iteration_error(tx, e.exc)      # 3.11 (3.12+ made it in the frame)
            if error is e.exc:
                raise
            raised = UserError(error)
            raised.context_set = True
            raise raised from None
        if isinstance(result, _Yield):
            return result.value
        self.done = True
        self.return_value = result.value
        return None

    def _throw_into_sub_iterator(self, tx, thrown):
        """generator.throw() (or close()) while paused in `yield from`, as CPython's _gen_throw: GeneratorExit
        closes the sub-iterator, then is thrown here (or the error its close raised is); another exception
        goes to the sub-iterator's throw(), and what it does decides: ("yielded", value) it yielded,
        ("returned", value) it finished (the `yield from` gives value), ("thrown", error) raise error at
        the `yield from`. A sub-iterator without throw/close (a C iterator) is left alone."""
        sub = self.frame.stack[-1]
        name = "close" if isinstance(thrown.exc, GeneratorExit) else "throw"
        if not _has_generator_method(sub, name):
            return "thrown", thrown
        if name == "close":
            try:
                sub.close(tx)
            except UserError as e:
                return "thrown", e
            return "thrown", thrown
        try:
            return "yielded", sub.throw(tx, thrown.exc)
        except UserError as e:
            if isinstance(e.exc, StopIteration) and sub.done:
                return "returned", getattr(sub, "return_value", None) or ConstantVariable(None)
            return "thrown", e

    def _leave_yield_from(self, value):
        """Continue after the `yield from` the frame is paused in, with `value` as its result (what SEND does
        when the sub-iterator ends)."""
        frame = self.frame
        send = frame.instructions[frame.ip - 2]
        frame.push(value)
        if frame.instructions[send.target].opname != "END_SEND":
            del frame.stack[-2]
        frame.ip = send.target

    def is_polyfill(self):
        """Made by a pure-Python equivalent of a C iterator (polyfills.py), which has no generator methods."""
        return self.frame.code.co_filename == polyfills.__file__

    def stop_iteration(self):
        """The StopIteration a finished generator's __next__ raises: it carries the return value."""
        value = getattr(self, "return_value", None)
        if value is None or value.is_constant() and value.as_python_constant() is None:
            return UserError(StopIteration())
        if not value.is_constant():
            unsupported(f"generator {self.frame.code.co_qualname} returns {value} through StopIteration")
        return UserError(StopIteration(value.as_python_constant()))

    def throw(self, tx, exc):
        """generator.throw(exc): exc raised at the paused yield; the next value yielded, else StopIteration
        or the exception that leaves the frame."""
        if not self.started or self.done:
            self.done = True
            raise UserError(exc)
        value = self._resume(tx, UserError(exc))
        if value is None:
            raise self.stop_iteration()
        return value

    def close(self, tx):
        """generator.close(): GeneratorExit raised at the paused yield, so its finally and with-exits run."""
        if not self.started or self.done:
            self.done = True
            return
        try:
            value = self._resume(tx, UserError(GeneratorExit()))
        except UserError as e:
            if isinstance(e.exc, (GeneratorExit, StopIteration)):
                return
            raise
        if value is not None:
            raise UserError(RuntimeError("generator ignored GeneratorExit"))
        if sys.version_info >= (3, 13):
            return getattr(self, "return_value", None)

    def unpack(self, tx):
        items = []
        while (value := self.next(tx)) is not None:
            items.append(value)
        return items

    def call_method(self, tx, name, args, kwargs):
        if name == "close" and not args and not kwargs:
            return self.close(tx) or ConstantVariable(None)
        if name == "throw" and 1 <= len(args) <= 3 and not kwargs:
            return self.throw(tx, _thrown(args))
        if name == "__next__":
            value = self.next(tx)
            if value is None:
                raise self.stop_iteration()
            return value
        if name == "__iter__":
            return self
        unsupported(f"generator.{name}()")

    def getattr(self, tx, name):
        from .variables.base import MethodOf
        if self.is_polyfill() and name not in ("__next__", "__iter__"):
            unsupported(f"{name} of the iterator {self.frame.code.co_qualname.lstrip('_')} stands for (a C "
                        "iterator, not a generator)")
        return MethodOf(self, name)


_HEAPTYPE = 1 << 9      # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type())


def _has_generator_method(iterator, name):
    """Whether a `yield from`'s sub-iterator has throw() or close(): a generator the trace made does; a
    C iterator (a list's, map, a polyfilled itertools object) doesn't; anything else is refused."""
    if isinstance(iterator, GeneratorVariable):
        return not iterator.is_polyfill()
    cls = iterator.python_type()
    if cls.__flags__ & _HEAPTYPE or hasattr(cls, name):
        unsupported(f"throwing into a `yield from` over a {cls.__name__}, which has its own {name}()")
    return False


def bind_by_code(fn, args, kwargs):
    """fn's arguments bound to its code's own parameters, defaults applied: the generated entry's
    parameters, whatever __signature__ a decorator set on fn."""
    plain = types.FunctionType(fn.__code__, fn.__globals__, fn.__code__.co_name, fn.__defaults__, fn.__closure__)
    plain.__kwdefaults__ = fn.__kwdefaults__
    bound = inspect.signature(plain).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound


class Tracer:
    """One capture of one frame: the graph, the guards, and the stack of frames being interpreted."""

    def __init__(self, fn, stop_at=None, defer_logging=True, policy=None, draws=True, keep_floats=True):
        self.fn = fn
        # values drawn from `random` by the entry before the graph (randomvars.py); None: each draw breaks
        self.draws = [] if draws else None
        # floats that change between calls stay symbolic where the trace needs the number, a graph break
        # there (symbolic.keep_unspecialized); False: they specialize, guarded on their value
        self.keep_floats = keep_floats
        self._draw_generator = None
        self.policy = policy if policy is not None else DynamicPolicy(False)   # which sizes are symbolic
        self.defer_logging = defer_logging   # logger calls with constant arguments run after the graph
        self.stop_at = stop_at      # root-frame instruction index to stop before (graph breaks)
        self.root_frame = None
        self.graph = OutputGraph()
        self.guards = GuardSet()
        self.tensor_vars = {}       # id(real tensor) -> TensorVariable (aliasing)
        self.object_vars = {}       # id(real mutable object) -> its Variable, so mutations are shared
        self.numpy_arrays = {}      # id(array) -> its Variable: NumPy arrays made while tracing (numpyvars.py)
        self.distinct_sources = {}  # type -> sources of distinct mutable outside objects (builder._guard_distinct)
        self.side_effects = SideEffects()
        self.keepalive = []
        # id -> root-frame instruction index: classes built while tracing and their functions, which may
        # not leave the frame (codegen refuses them; the frame breaks at that instruction instead)
        self.frame_objects = {}
        self.frames = []
        self.instruction_count = 0
        self.cleanups = []
        self._real_cells = {}
        self._hooks_guarded = False
        self.root_globals = fn.__globals__
        # the exception being handled (sys.exception()) outside generators: the caller's, unknown while
        # tracing, until a handler in the trace runs
        self.exc_value = CALLERS_EXCEPTION
        self.default_device = None      # the caller's default device (torch.set_default_device), if set
        self.callers_exception = CALLER.exception
        # id -> (exception raised while tracing, whether its __context__ is the caller's exception)
        self.raised = {}
        self.generators = []           # generators made while tracing

    # ---- values drawn from random (randomvars.py) ----
    def draw_generator(self):
        """The copy of random's generator the trace draws example values from, made at the first draw
        (no draw has happened in CPython since the trace began)."""
        if self._draw_generator is None:
            self._draw_generator = random.Random()
            self._draw_generator.setstate(random.getstate())
        return self._draw_generator

    def add_draw(self, method, args, kwargs, value):
        """A symbolic graph input for a value the entry draws, as method(*args, **kwargs), before its graph."""
        source = DrawSource(len(self.draws))
        self.draws.append((method, args, kwargs))
        node, sym = (self.graph.add_int_input if type(value) is int else self.graph.add_float_input)(source, value)
        if not is_symbolic(sym):
            unsupported(f"random.{method.__name__}() gave {value!r}, which the trace can't keep symbolic")
        keep_unspecialized(sym, "a value drawn from random", DRAWS)
        return SymNodeVariable(node, sym, source)

    # ---- entry ----
    def trace(self, args, kwargs):
        """Interpret the root frame with the real arguments; returns the Variable it returns."""
        self._guard_global_state()
        fn = self.fn
        code = fn.__code__
        bound = bind_by_code(fn, args, kwargs)
        local_vars = {name: LazyLocal(value, LocalSource(name)) for name, value in bound.arguments.items()}
        if code.co_flags & inspect.CO_VARKEYWORDS:
            # **kwargs is a new dict made by the call: the frame may mutate it freely
            varkw = code.co_varnames[code.co_argcount + code.co_kwonlyargcount +
                                     bool(code.co_flags & inspect.CO_VARARGS)]
            local_vars[varkw] = local_vars[varkw].realize(self)
            local_vars[varkw].source = None
        cells = {}
        for name in code.co_cellvars:
            cells[name] = CellVariable(_realized(self, local_vars.pop(name))) if name in local_vars else CellVariable()
        for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ())):
            cells[name] = CellVariable(real_cell=cell, source=ClosureSource(i, name))
        frame = FrameState(code, fn.__globals__, local_vars, cells)
        self.root_frame = frame
        self.grad_modes = (torch.is_grad_enabled(), None)     # (at the start, where the traced code ends)
        try:
            result = self.run_frame(frame)
            self._refuse_generators_left_in_handlers()
            if isinstance(result, BreakPoint):
                return result
            if isinstance(result, _Yield):
                unsupported("compiling a generator function")
            return result.value
        finally:
            self.grad_modes = (self.grad_modes[0], torch.is_grad_enabled())
            self.run_cleanups()

    def error_would_be_handled(self):
        """Whether an error a graph raises at run time (_GRAPH_ERRORS) for the instruction running now would
        reach a handler of the traced code (an except clause whose type it may match, or a with-block whose
        __exit__ is the code's own and may suppress it) in any frame of the trace. The graph runs after the
        trace: an op that raises in it on its tensors' values escapes every handler, so such ops are not
        recorded there."""
        for frame in self.frames:
            if not exception_table_of(frame.code) or frame.code.co_filename == polyfills.__file__:
                continue
            clauses, withs = _handlers_at(frame.code, frame.ip - 1)
            if any(_clause_catches(names, frame) for names in clauses):
                return True
            exits = [v for v in frame.stack if isinstance(v, WithExitVariable) or _python_exit(v) is not None]
            if withs > len(exits) or any(_exit_may_suppress(v) for v in exits):
                return True
        return False

    def _refuse_generators_left_in_handlers(self):
        """A generator paused inside a try or with block runs its finally or __exit__ when it is closed
        (collected, in CPython, when its last reference goes), which the trace does not model."""
        from .resume import enclosing_handler_kinds
        for gen in self.generators:
            frame = gen.frame
            if gen.started and not gen.done and \
                    {"try", "with"} & set(enclosing_handler_kinds(frame.code, frame.ip - 1)):
                unsupported(f"generator {frame.code.co_qualname} left paused inside a try or with block "
                            "(closing it runs its handler)")

    def _guard_global_state(self):
        g = self.guards
        modes, dispatch = CALLER.function_modes, CALLER.dispatch_modes
        if dispatch or any(kind != "device" for kind, _ in modes):
            names = [name for kind, name in modes if kind != "device"] + (["a TorchDispatchMode"] if dispatch else [])
            reason = f"called under {', '.join(names)}: torch modes are not captured"
            raise Unsupported(reason, no_break=reason,
                              hint="the call runs in CPython, under the modes, as in eager")
        g.add_state("not __gj_dispatch_modes()", "no TorchDispatchMode is active")
        if modes:
            g.add_state(f"__gj_function_modes() == {modes!r}", f"the default device is {modes[-1][1]}")
            self.default_device = torch.device(modes[-1][1])
        else:
            g.add_state("not __gj_function_mode_count()", "no TorchFunctionMode (default device) is active")
        g.add_state(f"__gj_torch.is_grad_enabled() is {torch.is_grad_enabled()}",
                    f"grad mode is {'on' if torch.is_grad_enabled() else 'off'}")
        g.add_state(f"__gj_torch.get_default_dtype() is {g.obj(torch.get_default_dtype())}",
                    f"default dtype is {torch.get_default_dtype()}")
        state = autocast_state()
        # no autocast: one C call (timeit, Python 3.11: 107 ns against the Python function's 163 ns)
        g.add_state("not __gj_any_autocast()" if state is None else f"__gj_autocast_state() == {state!r}",
                    f"autocast state is {state}")

    def guard_no_global_module_hooks(self):
        if self._hooks_guarded:
            return
        self._hooks_guarded = True
        if global_module_hooks_present():
            unsupported("global nn.Module hooks are registered")
        # the dicts read in place (timeit, Python 3.11: 47 ns against 331 ns for a call of the function)
        self.guards.add_state("not (" + " or ".join(f"__gj_nn_module.{name}" for name in GLOBAL_MODULE_HOOKS) + ")",
                              "no global nn.Module hooks")

    # ---- global state during the trace ----
    def set_grad_mode(self, mode):
        previous = torch.is_grad_enabled()
        if mode != previous:
            # Only a change goes into the graph: the trace runs in the mode the graph will run in (the entry
            # guards it), so setting the current mode again (torch.no_grad() under inference, as
            # transformers' rotary embeddings do) is a no-op, and compilers refuse graphs that change modes.
            self.graph.create_node("call_function", torch._C._set_grad_enabled, [mode], {}, None)
        torch._C._set_grad_enabled(mode)
        if not any(getattr(c, "_grad_restore", False) for c in self.cleanups):
            restore = lambda: torch._C._set_grad_enabled(previous)
            restore._grad_restore = True
            self.cleanups.append(restore)

    def push_cleanup(self, fn):
        self.cleanups.append(fn)

    def pop_cleanup(self, fn):
        if fn in self.cleanups:
            self.cleanups.remove(fn)

    def run_cleanups(self):
        while self.cleanups:
            self.cleanups.pop()()

    # ---- frames ----
    @property
    def current_frame(self):
        return self.frames[-1]

    def closure_cell(self, real_cell, source):
        key = id(real_cell)
        if key not in self._real_cells:
            self._real_cells[key] = CellVariable(real_cell=real_cell, source=source)
            self.keepalive.append(real_cell)
        return self._real_cells[key]

    def inline_call(self, code, f_globals, closure, bound, generator=False):
        if len(self.frames) >= config.max_inline_depth:
            unsupported(f"call depth above {config.max_inline_depth} (recursion?)")
        cells = {}
        for name in code.co_cellvars:
            cells[name] = CellVariable(bound.pop(name)) if name in bound else CellVariable()
        for name, cell in zip(code.co_freevars, closure):
            cells[name] = cell
        frame = FrameState(code, f_globals, bound, cells, parent=self.current_frame, generator=generator)
        if generator:
            self.generators.append(GeneratorVariable(frame))
            return self.generators[-1]
        return self.run_frame(frame).value

    def run_frame(self, frame, thrown=None):
        """Run until RETURN_VALUE (returns _Return) or, in a generator, YIELD_VALUE (returns _Yield).
        `thrown`: a UserError raised at the instruction before frame.ip (generator.throw at its yield)."""
        self.frames.append(frame)
        try:
            instructions = frame.instructions
            if thrown is not None:
                self.set_context(thrown)
                if not self.deliver_exception(frame, thrown):
                    raise thrown
            while True:
                if frame.ip == self.stop_at and frame is self.root_frame:
                    return BreakPoint(frame, frame.ip)
                inst = instructions[frame.ip]
                frame.current = inst
                frame.ip += 1
                self.instruction_count += 1
                if self.instruction_count > config.max_instructions:
                    unsupported(f"more than {config.max_instructions} instructions interpreted")
                handler = HANDLERS.get(inst.opname)
                if handler is None:
                    unsupported(f"instruction {inst.opname} is not supported yet")
                try:
                    result = handler(self, frame, inst)
                except UserError as e:
                    self.set_context(e)
                    if not self.deliver_exception(frame, e):
                        raise
                    continue
                if result is not None:
                    return result
        except Unsupported as e:
            self._locate(e, frame)
            raise
        except (NotConstant, KeyError, IndexError, TypeError, AttributeError, ValueError,
                AssertionError, NotImplementedError, RuntimeError) as e:
            # a handler that can't model its operands: a break at the instruction, as an Unsupported is
            filename, lineno = frame.location()
            error = Unsupported(f"graphjit could not interpret {frame.current.opname}: "
                                f"{type(e).__name__}: {e}", filename=filename, lineno=lineno)
            self._locate(error, frame)
            raise error from e
        finally:
            self.frames.pop()

    def _locate(self, error, frame):
        """Note on an Unsupported leaving `frame` where it happened: the user's stack, innermost first, and
        in the root frame the instruction a graph break stops at."""
        if error.filename is None:
            error.filename, error.lineno = frame.location()
        if not hasattr(error, "user_stack"):
            error.user_stack = []
        error.user_stack.append(frame.location())
        if frame is self.root_frame and getattr(error, "root_index", None) is None:
            error.root_index = frame.ip - 1
            error.in_handler = frame.open_handlers > 0

    # ---- the exception being handled (sys.exception(), __context__ of a new one) ----
    def exception_owner(self):
        """Where the handled exception is kept now: the innermost running generator, else the tracer."""
        return next((fr for fr in reversed(self.frames) if fr.is_generator), self)

    def handled_exception(self):
        """sys.exception() at this point: a generator's own, else its caller's (CALLERS_EXCEPTION where
        only the caller of the compiled frame can be handling one)."""
        return next((fr.exc_value for fr in reversed(self.frames) if fr.is_generator and fr.exc_value is not None),
                    self.exc_value)

    def caller_handles_none(self):
        """Whether the caller of the compiled frame handles no exception (sys.exception() is None there):
        True, guarded, where the call being translated found none; False where that is not known."""
        if self.callers_exception is not None:
            return False
        self.guards.add_state("__gj_sys.exception() is None", "the caller is handling no exception")
        return True

    def set_context(self, error):
        """A new raise sets the exception's __context__ to the one being handled, as CPython does."""
        if getattr(error, "context_set", False):
            return
        error.context_set = True
        exc, context = error.exc, self.handled_exception()
        self.raised[id(exc)] = (exc, context is CALLERS_EXCEPTION)
        if context is not None and context is not CALLERS_EXCEPTION and context is not exc:
            link = context
            while link is not None:        # CPython cuts a cycle exc -> ... -> exc
                if link.__context__ is exc:
                    link.__context__ = None
                    break
                link = link.__context__
            exc.__context__ = context

    def deliver_exception(self, frame, error):
        """Jump to the frame's handler for the instruction that raised, as CPython's exception table says."""
        index = frame.ip - 1
        for entry in exception_table_of(frame.code):
            if entry.start <= index < entry.end:
                del frame.stack[entry.depth:]
                if entry.lasti:
                    frame.push(ConstantVariable(index))
                frame.push(ConstantVariable(error.exc))
                frame.ip = entry.target
                return True
        return False

    # ---- helpers used by handlers ----
    def load_global(self, frame, name):
        if frame.f_globals is self.root_globals:
            pending = self.side_effects.pending_global(name)
            if pending is not None:
                return pending
        if frame.f_globals is vars(polyfills) and name in frame.f_globals:
            return wrap(self, frame.f_globals[name], None)     # graphjit's own, never replaced: no guard
        if name in frame.f_globals:
            return wrap(self, frame.f_globals[name], self.global_source(frame.f_globals, name))
        if name in frame.f_builtins:
            value = frame.f_builtins[name]
            self.guards.add_builtin(frame.f_globals, frame.f_builtins, name, value)
            return wrap(self, value, None)
        unsupported(f"NameError: name {name!r} is not defined")

    def global_source(self, f_globals, name):
        """Where the global `name` of a function with these globals is read (and guarded)."""
        return GlobalSource(name) if f_globals is self.root_globals else ItemSource(ObjectSource(f_globals), name)

    def call(self, fn, args, kwargs):
        return fn.call(self, list(args), dict(kwargs))


# ---- instruction handlers ----

HANDLERS = {}


def handles(*names):
    def register(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


@handles("LOAD_FAST")
def _load_fast(tx, f, inst):
    try:
        f.push(f.load_local(tx, inst.argval))
    except KeyError:
        unsupported(f"UnboundLocalError: local variable {inst.argval!r} referenced before assignment")


@handles("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(tx, f, inst):
    # PEP 709 comprehensions save the outer binding first; for a cell variable that is the cell itself
    if inst.argval in f.cells:
        f.push(f.cells.pop(inst.argval))
    else:
        f.push(_realized(tx, f.locals.pop(inst.argval, NULL)))


@handles("STORE_FAST")
def _store_fast(tx, f, inst):
    value = f.pop()
    if isinstance(value, CellVariable) and _is_cell_name(f.code, inst.argval):
        f.cells[inst.argval] = value          # restoring a saved cell after an inlined comprehension
        f.locals.pop(inst.argval, None)       # (whose variable of the same name held plain values)
    elif value is NULL:
        f.locals.pop(inst.argval, None)
        if _is_cell_name(f.code, inst.argval):
            f.cells.pop(inst.argval, None)
    else:
        f.locals[inst.argval] = value


def _is_cell_name(code, name):
    return name in code.co_cellvars or name in code.co_freevars


@handles("MAKE_CELL")
def _make_cell(tx, f, inst):
    name = inst.argval
    if name in f.locals:
        f.cells[name] = CellVariable(_realized(tx, f.locals.pop(name)))
    else:
        f.cells[name] = CellVariable()


@handles("DELETE_FAST")
def _delete_fast(tx, f, inst):
    f.locals.pop(inst.argval, None)


@handles("LOAD_CLOSURE")
def _load_closure(tx, f, inst):
    # The reader spells a LOAD_FAST of a cell or free variable's name LOAD_CLOSURE (3.13 builds closure
    # tuples so). Inside a PEP 709 comprehension whose variable has that name, the cell was set aside by
    # LOAD_FAST_AND_CLEAR and the name holds a plain value: that is what LOAD_FAST reads.
    name = inst.argval
    if name not in f.cells and name in f.locals:
        f.push(f.load_local(tx, name))
    else:
        f.push(f.cells[name])


@handles("LOAD_DEREF")
def _load_deref(tx, f, inst):
    f.push(f.cells[inst.argval].load(tx))


@handles("STORE_DEREF")
def _store_deref(tx, f, inst):
    f.cells[inst.argval].store(tx, f.pop())


@handles("LOAD_CONST")
def _load_const(tx, f, inst):
    f.push(ConstantVariable(inst.argval))


@handles("LOAD_GLOBAL")
def _load_global(tx, f, inst):
    f.push(tx.load_global(f, inst.argval))


@handles("LOAD_ATTR")
def _load_attr(tx, f, inst):
    f.push(f.pop().getattr(tx, inst.argval))


@handles("LOAD_METHOD")
def _load_method(tx, f, inst):
    obj = f.pop()
    f.push_callable(obj.getattr(tx, inst.argval))


@handles("LOAD_SUPER_ATTR")
def _load_super_attr(tx, f, inst):
    name, is_method, _two_arg = inst.argval
    obj, cls, _super = f.pop(), f.pop(), f.pop()
    attr = SuperVariable(cls.as_python_constant(), obj).getattr(tx, name)
    if is_method:
        f.push_callable(attr)
    else:
        f.push(attr)


@handles("STORE_ATTR")
def _store_attr(tx, f, inst):
    obj = f.pop()
    value = f.pop()
    obj.setattr(tx, inst.argval, value)


@handles("DELETE_ATTR")
def _delete_attr(tx, f, inst):
    obj = f.pop()
    if not hasattr(obj, "delattr"):
        unsupported(f"deleting attribute {inst.argval!r} of {obj}")
    obj.delattr(tx, inst.argval)


@handles("STORE_GLOBAL")
def _store_global(tx, f, inst):
    if f.f_globals is not tx.root_globals:
        unsupported(f"assigning global {inst.argval!r} of another module")
    tx.side_effects.store_global(inst.argval, f.pop())


@handles("PUSH_NULL")
def _push_null(tx, f, inst):
    f.push(NULL)


@handles("POP_TOP")
def _pop_top(tx, f, inst):
    f.pop()


@handles("COPY")
def _copy(tx, f, inst):
    f.push(f.stack[-inst.argval])


@handles("SWAP")
def _swap(tx, f, inst):
    n = inst.argval
    f.stack[-1], f.stack[-n] = f.stack[-n], f.stack[-1]


def _callee(f, args):
    """Pop the two slots below the arguments: [NULL, fn], [fn, NULL] or [method, self]."""
    first, second = f.popn(2)
    if first is NULL:
        return second, args
    if second is NULL:
        return first, args
    return first, [second, *args]


@handles("CALL")
def _call(tx, f, inst):
    args = f.popn(inst.argval)
    fn, args = _callee(f, args)
    f.push(tx.call(fn, args, {}))


@handles("CALL_KW")
def _call_kw(tx, f, inst):
    names = f.pop().as_python_constant()
    values = f.popn(inst.argval)
    split = len(values) - len(names)
    fn, args = _callee(f, values[:split])
    f.push(tx.call(fn, args, dict(zip(names, values[split:]))))


@handles("CALL_FUNCTION_EX")
def _call_function_ex(tx, f, inst):
    kwargs = f.pop() if inst.argval else None
    args = f.pop()
    fn, extra = _callee(f, [])
    kw = {}
    if kwargs is not None:
        if not isinstance(kwargs, DictVariable):
            unsupported(f"**{kwargs}")
        kw = {k.as_python_constant() if isinstance(k, Variable) else k: v for k, v in kwargs.items.items()}
    f.push(tx.call(fn, [*extra, *args.unpack(tx)], kw))


@handles("RETURN_VALUE")
def _return_value(tx, f, inst):
    return _Return(f.pop())


@handles("BINARY_OP")
def _binary_op(tx, f, inst):
    b = f.pop()
    a = f.pop()
    f.push(binary_op(tx, inst.argval, a, b))


@handles("BINARY_SUBSCR")
def _binary_subscr(tx, f, inst):
    index = f.pop()
    obj = f.pop()
    f.push(getitem(tx, obj, index))


@handles("STORE_SUBSCR")
def _store_subscr(tx, f, inst):
    key, obj, value = f.pop(), f.pop(), f.pop()
    obj.call_method(tx, "__setitem__", [key, value], {})


@handles("DELETE_SUBSCR")
def _delete_subscr(tx, f, inst):
    key, obj = f.pop(), f.pop()
    obj.call_method(tx, "__delitem__", [key], {})


@handles("BUILD_SLICE")
def _build_slice(tx, f, inst):
    parts = f.popn(inst.argval)
    if len(parts) == 2:
        parts.append(ConstantVariable(None))
    f.push(SliceVariable(*parts))


@handles("COMPARE_OP")
def _compare_op(tx, f, inst):
    b, a = f.pop(), f.pop()
    f.push(compare_op(tx, inst.argval, a, b))


@handles("IS_OP")
def _is_op(tx, f, inst):
    b, a = f.pop(), f.pop()
    f.push(is_op(tx, a, b, bool(inst.argval)))


@handles("CONTAINS_OP")
def _contains_op(tx, f, inst):
    container, item = f.pop(), f.pop()
    f.push(contains_op(tx, item, container, bool(inst.argval)))


@handles("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "UNARY_NOT")
def _unary(tx, f, inst):
    f.push(unary_op(tx, inst.opname, f.pop()))


@handles("LIST_TO_TUPLE")
def _list_to_tuple(tx, f, inst):
    f.push(TupleVariable(f.pop().unpack(tx)))


@handles("BUILD_TUPLE")
def _build_tuple(tx, f, inst):
    f.push(TupleVariable(f.popn(inst.argval)))


@handles("BUILD_LIST")
def _build_list(tx, f, inst):
    f.push(ListVariable(f.popn(inst.argval)))


@handles("BUILD_SET")
def _build_set(tx, f, inst):
    result = SetVariable([])
    result.method_update(tx, TupleVariable(f.popn(inst.argval)))
    f.push(result)


@handles("BUILD_MAP")
def _build_map(tx, f, inst):
    flat = f.popn(2 * inst.argval)
    result = DictVariable({})
    for k, v in zip(flat[::2], flat[1::2]):
        result.method___setitem__(tx, k, v)
    f.push(result)


@handles("BUILD_CONST_KEY_MAP")
def _build_const_key_map(tx, f, inst):
    keys = f.pop().as_python_constant()
    values = f.popn(inst.argval)
    f.push(DictVariable(dict(zip(keys, values))))


@handles("BUILD_STRING")
def _build_string(tx, f, inst):
    parts = f.popn(inst.argval)
    f.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))


# LIST_APPEND, LIST_EXTEND, DICT_UPDATE and DICT_MERGE go through the containers' tracked mutations: the
# list or dict being built is a real object passed in where a graph break fell inside its display
# (`[*a.tolist(), *b]`, `{**d, "k": x.item()}`), whose later items are side effects the entry replays.

@handles("LIST_APPEND")
def _list_append(tx, f, inst):
    value = f.pop()
    f.stack[-inst.argval].method_append(tx, value)


@handles("SET_ADD")
def _set_add(tx, f, inst):
    value = f.pop()
    f.stack[-inst.argval].method_add(tx, value)


@handles("MAP_ADD")
def _map_add(tx, f, inst):
    value = f.pop()
    key = f.pop()
    f.stack[-inst.argval].method___setitem__(tx, key, value)


@handles("LIST_EXTEND")
def _list_extend(tx, f, inst):
    values = f.pop()
    f.stack[-inst.argval].method_extend(tx, values)


@handles("SET_UPDATE")
def _set_update(tx, f, inst):
    values = f.pop()
    f.stack[-inst.argval].method_update(tx, values)


@handles("DICT_UPDATE", "DICT_MERGE")
def _dict_update(tx, f, inst):
    other = f.pop()
    target = f.stack[-inst.argval]
    if inst.opname == "DICT_MERGE" and isinstance(other, DictVariable):
        dup = set(target.items) & set(other.items)
        if dup:
            unsupported(f"got multiple values for keyword argument {sorted(dup)[0]!r}")
    target._check_mutable(tx)
    target.merge(tx, other)


@handles("UNPACK_SEQUENCE")
def _unpack_sequence(tx, f, inst):
    items = f.pop().unpack(tx)
    if len(items) != inst.argval:
        unsupported(f"ValueError: expected {inst.argval} values to unpack, got {len(items)}")
    f.stack.extend(reversed(items))


@handles("UNPACK_EX")
def _unpack_ex(tx, f, inst):
    before, after = inst.argval
    items = f.pop().unpack(tx)
    if len(items) < before + after:
        unsupported("ValueError: not enough values to unpack")
    middle = ListVariable(items[before:len(items) - after])
    result = items[:before] + [middle] + items[len(items) - after:]
    f.stack.extend(reversed(result))


@handles("GET_ITER")
def _get_iter(tx, f, inst):
    f.push(make_iterator(tx, f.pop()))


@handles("FOR_ITER")
def _for_iter(tx, f, inst):
    iterator = f.stack[-1]
    if not hasattr(iterator, "next"):
        unsupported(f"FOR_ITER over {iterator}")
    value = iterator.next(tx)
    if value is None:
        f.pop()
        f.ip = inst.target
    else:
        f.push(value)


@handles("GET_LEN")
def _get_len(tx, f, inst):
    f.push(length(tx, f.stack[-1]))


@handles("JUMP")
def _jump(tx, f, inst):
    f.ip = inst.target


def _truth_jump(jump_if):
    def handler(tx, f, inst):
        if f.pop().truth(tx) == jump_if:
            f.ip = inst.target
    return handler


def _none_jump(jump_if_none):
    def handler(tx, f, inst):
        value = f.pop()
        is_none = isinstance(value, ConstantVariable) and value.value is None
        if is_none == jump_if_none:
            f.ip = inst.target
    return handler


def _or_pop(jump_if):
    def handler(tx, f, inst):
        if f.stack[-1].truth(tx) == jump_if:
            f.ip = inst.target
        else:
            f.pop()
    return handler


HANDLERS.update({
    "POP_JUMP_IF_TRUE": _truth_jump(True), "POP_JUMP_IF_FALSE": _truth_jump(False),
    "POP_JUMP_IF_NONE": _none_jump(True), "POP_JUMP_IF_NOT_NONE": _none_jump(False),
    "JUMP_IF_TRUE_OR_POP": _or_pop(True), "JUMP_IF_FALSE_OR_POP": _or_pop(False),
})


@handles("MAKE_FUNCTION")
def _make_function(tx, f, inst):
    code = f.pop().as_python_constant()
    f.push(NestedFunctionVariable(code, f.f_globals))


_FUNCTION_ATTRS = {8: "closure", 4: "annotations", 2: "kwdefaults", 1: "defaults"}


@handles("SET_FUNCTION_ATTRIBUTE")
def _set_function_attribute(tx, f, inst):
    fn = f.pop()
    value = f.pop()
    setattr(fn, _FUNCTION_ATTRS[inst.argval], value)
    f.push(fn)


_CONVERSIONS = {"str": str, "repr": repr, "ascii": ascii, None: lambda v: v}


@handles("CONVERT_VALUE")
def _convert_value(tx, f, inst):
    value = f.pop()
    f.push(ConstantVariable(_CONVERSIONS[inst.argval](_format_operand(value))))


@handles("FORMAT_VALUE")
def _format_value(tx, f, inst):
    conversion, has_spec = inst.argval
    spec = f.pop().as_python_constant() if has_spec else ""
    value = _format_operand(f.pop())
    f.push(ConstantVariable(format(_CONVERSIONS[conversion](value), spec)))


def _format_operand(value):
    try:
        return value.as_python_constant()
    except NotConstant:
        unsupported(f"formatting {value} into a string", hint="f-strings are captured on constants only")


@handles("BEFORE_WITH")
def _before_with(tx, f, inst):
    ctx = f.pop()
    if hasattr(ctx, "enter") and hasattr(ctx, "exit"):
        result = ctx.enter(tx)
        f.push(WithExitVariable(ctx))
        f.push(result)
        return
    exit_fn = ctx.getattr(tx, "__exit__")
    result = ctx.getattr(tx, "__enter__").call(tx, [], {})
    f.push(exit_fn)
    f.push(result)


@handles("RETURN_GENERATOR")
def _return_generator(tx, f, inst):
    if not f.is_generator:
        unsupported("generator frame outside a generator call")
    f.push(ConstantVariable(None))


@handles("YIELD_VALUE")
def _yield_value(tx, f, inst):
    if not f.is_generator:
        unsupported("yield outside an inlined generator")
    return _Yield(f.pop())


@handles("GET_YIELD_FROM_ITER")
def _get_yield_from_iter(tx, f, inst):
    f.push(make_iterator(tx, f.pop()))


@handles("SEND")
def _send(tx, f, inst):
    """`yield from`: forward the next value of the sub-iterator, or jump out with its return value."""
    f.pop()                                  # the value sent in: always None while tracing
    iterator = f.stack[-1]
    value = iterator.next(tx)
    if value is not None:
        f.push(value)
        return
    f.push(getattr(iterator, "return_value", None) or ConstantVariable(None))
    if f.instructions[inst.target].opname != "END_SEND":
        del f.stack[-2]                      # no END_SEND after the loop: SEND pops the iterator itself
    f.ip = inst.target


@handles("END_SEND")
def _end_send(tx, f, inst):
    del f.stack[-2]


@handles("MATCH_SEQUENCE")
def _match_sequence(tx, f, inst):
    subject = f.stack[-1]
    typ = subject.python_type()
    is_seq = issubclass(typ, (list, tuple)) or typ.__name__ in ("range", "deque") or \
        (issubclass(typ, __import__("collections.abc").abc.Sequence) and not issubclass(typ, (str, bytes, bytearray)))
    f.push(ConstantVariable(bool(is_seq) and not issubclass(typ, (str, bytes, bytearray))))


@handles("MATCH_MAPPING")
def _match_mapping(tx, f, inst):
    import collections.abc
    f.push(ConstantVariable(issubclass(f.stack[-1].python_type(), collections.abc.Mapping)))


@handles("MATCH_KEYS")
def _match_keys(tx, f, inst):
    keys = f.stack[-1].as_python_constant()
    subject = f.stack[-2]
    values = []
    for k in keys:
        found = contains_op(tx, ConstantVariable(k), subject, False).as_python_constant()
        if not found:
            f.push(ConstantVariable(None))
            return
        values.append(getitem(tx, subject, ConstantVariable(k)))
    f.push(TupleVariable(values))


@handles("IMPORT_NAME")
def _import_name(tx, f, inst):
    fromlist, level = f.pop().as_python_constant(), f.pop().as_python_constant()
    try:
        module = __import__(inst.argval, f.f_globals, None, fromlist, level)
    except ImportError as e:
        # whether it fails again depends on the import system's state (sys.path, finders): not guarded
        unsupported(f"import of {inst.argval!r} failed: {e}")
    f.push(PythonModuleVariable(module))


@handles("IMPORT_FROM")
def _import_from(tx, f, inst):
    from .variables.builtins import AttributeMissing
    module = f.stack[-1]
    try:
        f.push(module.getattr(tx, inst.argval))
    except AttributeMissing:
        if not isinstance(module, PythonModuleVariable) or not isinstance(module.value.__name__, str):
            raise
        full = f"{module.value.__name__}.{inst.argval}"
        # CPython falls back to sys.modules[full] before raising its ImportError
        tx.guards.add_state(f"{full!r} not in __gj_sys.modules", f"module {full} is not imported")
        raise UserError(_import_from_error(module.value, inst.argval)) from None


def _import_from_error(module, name):
    """The ImportError CPython's IMPORT_FROM raises for `from module import name` (its message names the
    module's file, or a circular import)."""
    namespace = {"__builtins__": {"__import__": lambda *args: module}}
    try:
        exec(f"from _ import {name}", namespace)
    except ImportError as e:
        e.__traceback__ = None
        return e
    unsupported(f"from {module.__name__} import {name}: found in sys.modules")


@handles("RAISE_VARARGS")
def _raise(tx, f, inst):
    if inst.argval == 0:
        value = tx.handled_exception()
        if value is None or value is CALLERS_EXCEPTION and tx.caller_handles_none():
            raise UserError(RuntimeError("No active exception to reraise"))
        if value is CALLERS_EXCEPTION:
            unsupported("bare `raise` outside an except block of the frame (the caller's exception)")
        error = UserError(value)
        error.context_set = True         # a re-raise keeps the exception's context
        raise error
    cause = _exception_value(f.pop(), "raise ... from") if inst.argval == 2 else False
    value = _exception_value(f.pop(), "raise")
    if value is None:
        raise UserError(TypeError("exceptions must derive from BaseException"))
    if cause is not False:
        value.__cause__ = cause          # sets __suppress_context__ too
    raise UserError(value)


def _thrown(args):
    """The exception of generator.throw(exc) or throw(type, value[, traceback])."""
    value = args[1].as_python_constant() if len(args) > 1 and args[1].is_constant() else None
    if len(args) > 1 and not isinstance(value, BaseException):
        if value is not None or not args[1].is_constant():
            unsupported(f"generator.throw() with the value {args[1]}")
    exc = value if isinstance(value, BaseException) else _exception_value(args[0], "generator.throw()")
    if exc is None:
        unsupported("generator.throw(None)")
    return exc


def _exception_value(var, what):
    """The exception (an instance; a class is instantiated, as `raise` does) a `raise` statement names."""
    try:
        value = var.as_python_constant()
    except NotConstant:
        unsupported(f"{what} {var}")
    if isinstance(value, type) and issubclass(value, BaseException):
        from .variables.classes import new_exception
        value = new_exception(value)
    if value is not None and not isinstance(value, BaseException):
        unsupported(f"{what} a non-exception {value!r}")
    return value


@handles("LOAD_BUILD_CLASS")
def _load_build_class(tx, f, inst):
    # a class statement: __build_class__ builds the class while tracing where that keeps eager's meaning
    # (variables/classdef.py); otherwise the call is a graph break and the class is made in CPython
    import builtins
    from .variables.builder import wrap
    f.push(wrap(tx, builtins.__build_class__, None))


@handles("LOAD_ASSERTION_ERROR")
def _assertion(tx, f, inst):
    f.push(wrap(tx, AssertionError, None))     # as the builtin name would load it


@handles("PUSH_EXC_INFO")
def _push_exc_info(tx, f, inst):
    exc = f.pop()
    owner = tx.exception_owner()
    f.push(ConstantVariable(owner.exc_value))    # the previously handled exception, restored by POP_EXCEPT
    owner.exc_value = exc.as_python_constant()
    f.open_handlers += 1
    f.push(exc)


@handles("POP_EXCEPT")
def _pop_except(tx, f, inst):
    tx.exception_owner().exc_value = f.pop().as_python_constant()
    f.open_handlers -= 1


@handles("CHECK_EXC_MATCH")
def _check_exc_match(tx, f, inst):
    types_ = f.pop().as_python_constant()
    exc = f.stack[-1].as_python_constant()
    f.push(ConstantVariable(exception_matches(exc, types_)))


def exception_matches(exc, types_):
    """`except types_` catching exc, as CPython's PyErr_GivenExceptionMatches: by the class's MRO (a
    metaclass __instancecheck__ or __subclasscheck__ is not asked)."""
    for t in types_ if isinstance(types_, tuple) else (types_,):
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise UserError(TypeError("catching classes that do not inherit from BaseException is not allowed"))
    return any(t in type(exc).__mro__ for t in (types_ if isinstance(types_, tuple) else (types_,)))


@handles("RERAISE")
def _reraise(tx, f, inst):
    exc = f.pop()           # the lasti below it (RERAISE 1, 2) stays: the handler's unwind cuts the stack
    error = UserError(exc.as_python_constant())
    error.context_set = True             # re-raised: its context stays
    raise error


@handles("WITH_EXCEPT_START")
def _with_except_start(tx, f, inst):
    exc = f.stack[-1].as_python_constant()
    exit_fn = f.stack[-4]
    f.push(exit_fn.call(tx, [ConstantVariable(type(exc)), ConstantVariable(exc), TracebackVariable()], {}))


@handles("CLEANUP_THROW")
def _cleanup_throw(tx, f, inst):
    """3.12+: an exception thrown into a generator at a `yield from`: StopIteration ends the `yield from`
    with its value, anything else is raised on."""
    exc = f.pop().as_python_constant()
    del f.stack[-2:]                     # the last value sent and the sub-iterator
    if not isinstance(exc, StopIteration):
        error = UserError(exc)
        error.context_set = True
        raise error
    f.push(ConstantVariable(None))
    f.push(ConstantVariable(exc.value))


@handles("CALL_INTRINSIC_1")
def _intrinsic(tx, f, inst):
    if inst.argval != "INTRINSIC_STOPITERATION_ERROR":
        unsupported(f"{inst.argval}")
    # a generator's outermost handler (3.12+): a StopIteration leaving it becomes a RuntimeError
    f.push(ConstantVariable(stop_iteration_error(tx, f.pop().as_python_constant())))


def stop_iteration_error(tx, exc):
    """The exception a generator raises for `exc` leaving its frame (PEP 479): a StopIteration becomes
    RuntimeError("generator raised StopIteration"), caused by it."""
    if not isinstance(exc, StopIteration):
        return exc
    error = RuntimeError("generator raised StopIteration")
    error.__cause__ = error.__context__ = exc
    tx.raised[id(error)] = (error, False)
    return error


@handles("NOP")
def _nop(tx, f, inst):
    pass


# torch.nn.modules.module's dicts of hooks every module runs
GLOBAL_MODULE_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                       "_global_backward_pre_hooks")


def global_module_hooks_present():
    from torch.nn.modules import module as m
    return any(getattr(m, name) for name in GLOBAL_MODULE_HOOKS)
