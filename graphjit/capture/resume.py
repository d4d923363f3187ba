"""Graph breaks: resume functions that continue a frame in the middle of its bytecode.

A resume function for (code, index) takes the live stack items and locals of the frame as arguments,
pushes the stack items back, and jumps to `index` in an otherwise unchanged copy of the code:

    def f(x):                          resume at the instruction after `print(...)` returns:
        y = x.sin()                        def __gj_resume_f_3(__gj_stack0, x, y):
        print("hi")          ->                LOAD_FAST __gj_stack0 ; JUMP -> (POP_TOP after the call)
        return y.cos()                         ... the rest of f's bytecode, unchanged ...

The resume function is itself compiled through graphjit (its own cache entries and guards), so the rest
of the frame is captured too. Resume functions are cached per (code, index, stack layout, locals).
"""
import dataclasses
import inspect
import types

from . import bytecode
from .bytecode import Instruction, ExceptionEntry

_CACHE = {}
_ORIGIN = {}   # resume code -> (the original code, how far its instructions are shifted)

# A NULL slot on the stack is not a value: it is re-pushed by the prologue instead of passed.
NULL_SLOT = None


@dataclasses.dataclass(frozen=True)
class Reentered:
    """A stack slot whose parameter `name` the prologue replaces by `name.enter()`: a context manager's
    with-exit, for a block the break left (torchvars.ReenterAutocast)."""
    name: str

    def __str__(self):
        return self.name


def resume_function(code, index, stack_layout, local_names, f_globals, closure, leading=0):
    """A Python function continuing `code` at normalized instruction `index`.

    stack_layout: one entry per stack slot: NULL_SLOT or the parameter name that carries it.
    local_names:  locals passed as parameters: the first `leading` of them before the stack parameters
                  (the method's first parameter, which zero-argument super() reads as the frame's first
                  local), the others after them.
    """
    if code in _ORIGIN:          # a break inside a resume function: resume the original code instead
        code, shift = _ORIGIN[code]
        index -= shift
    key = (code, index, tuple(stack_layout), tuple(local_names), leading)
    resume_code = _CACHE.get(key)
    if resume_code is None:
        resume_code, shift = _resume_code(code, index, stack_layout, local_names, leading)
        _ORIGIN[resume_code] = (code, shift)
        _CACHE[key] = resume_code
    # the code is shared; entries call it through CompiledFunction.call_in with their own call's cells
    return types.FunctionType(resume_code, f_globals, resume_code.co_name, None, closure)


def _resume_code(code, index, stack_layout, local_names, leading=0):
    instrs = bytecode.read(code)
    entries = bytecode.exception_table(code)
    lineno = instrs[index].lineno
    prologue = []
    for slot in stack_layout:
        if slot is NULL_SLOT:
            prologue.append(Instruction("PUSH_NULL", None, lineno))
        elif isinstance(slot, Reentered):       # the with-exit of a block open at the break: slot.enter()
            prologue += [Instruction("LOAD_FAST", slot.name, lineno), Instruction("LOAD_METHOD", "enter", lineno),
                         Instruction("CALL", 0, lineno)]
        else:
            prologue.append(Instruction("LOAD_FAST", slot, lineno))
    shift = len(prologue) + 1
    prologue.append(Instruction("JUMP", None, lineno, target=index + shift))
    body = [_shifted(ins, shift) for ins in instrs]
    # a region the prologue jumps into is split there: the assembler computes a handler's stack depth from
    # a region's start it reaches, and the part before the jump target is dead code
    target = index + shift
    shifted_entries = []
    for e in entries:
        start, end = e.start + shift, e.end + shift
        pieces = [(start, target), (target, end)] if start < target < end else [(start, end)]
        shifted_entries += [ExceptionEntry(a, b, e.target + shift, e.depth, e.lasti) for a, b in pieces]
    params = list(local_names[:leading]) + [str(slot) for slot in stack_layout if slot is not NULL_SLOT] + \
        list(local_names[leading:])
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    name = f"__gj_resume_{code.co_name}_at_{lineno}"
    resume_code = bytecode.assemble(prologue + body, template=code, exception_entries=shifted_entries,
                                    argcount=len(params), posonlyargcount=0, kwonlyargcount=0,
                                    varnames=params, flags=flags, name=name,
                                    qualname=f"{code.co_qualname}.<resume at line {lineno}>")
    return resume_code, shift


def original_code(code):
    """The user's code object that `code` (a resume function's, or that code itself) continues."""
    return _ORIGIN[code][0] if code in _ORIGIN else code


def super_self(code):
    """The name of the parameter that zero-argument super() reads in frames of `code` (its first local,
    where the function has a `__class__` cell: it is a method using super() or __class__), else None."""
    if "__class__" in code.co_freevars and code.co_argcount + code.co_kwonlyargcount > 0:
        return code.co_varnames[0]
    return None


def _shifted(ins, shift):
    return Instruction(ins.opname, ins.argval, ins.lineno, ins.offset,
                       None if ins.target is None else ins.target + shift, ins.is_jump_target)


_JUMPS = ("JUMP", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")


def in_loop(code, index):
    """Is instruction `index` inside a loop body (some later instruction jumps back to or before it)? A
    with-block's exit handler is not a loop: on 3.12+ the path where __exit__ suppresses the exception
    jumps back to the code after the block, which precedes the handler."""
    instrs = bytecode.read(code)
    exit_paths = _with_exit_paths(code, instrs)
    return any(ins.target is not None and j > index >= ins.target and j not in exit_paths
               for j, ins in enumerate(instrs) if ins.opname in _JUMPS)


_NO_FALLTHROUGH = ("JUMP", "RETURN_VALUE", "RERAISE", "RAISE_VARARGS")


def _successors(instrs, i):
    ins = instrs[i]
    after = [] if ins.opname in _NO_FALLTHROUGH or i + 1 >= len(instrs) else [i + 1]
    return after + ([ins.target] if ins.target is not None else [])


def _reach(instrs, starts, stop=frozenset()):
    seen, todo = set(), [s for s in starts if s not in stop]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo += [k for k in _successors(instrs, i) if k not in stop and k not in seen]
    return seen


def _with_exit_paths(code, instrs):
    """Instructions only a with-block's exit handler reaches (not the code it returns to). The code every
    other handler reaches (an `except` block, which may hold a loop's back-edge) is ordinary code."""
    entries = bytecode.exception_table(code)
    is_with = [e.target + 1 < len(instrs) and instrs[e.target + 1].opname == "WITH_EXCEPT_START" for e in entries]
    handlers = [e.target for e, w in zip(entries, is_with) if w]
    if not handlers:
        return frozenset()
    normal = frozenset(_reach(instrs, [0] + [e.target for e, w in zip(entries, is_with) if not w]))
    return _reach(instrs, handlers, stop=normal)


def original_code(code):
    return _ORIGIN.get(code, (code, 0))[0]


def enclosing_handler_kinds(code, index):
    """Kinds of the exception handlers an exception raised at `index` passes through, innermost first:
    'with' (a with-block's __exit__), 'try' (a user's except/finally), 'cleanup' (compiler-made)."""
    instrs = bytecode.read(code)
    kinds = []
    for target in bytecode.handler_targets(instrs, bytecode.exception_table(code), index):
        kinds.append(_handler_kind(instrs, target))
        if kinds[-1] == "try":
            break
    return kinds


def _handler_kind(instrs, target):
    if instrs[target].opname != "PUSH_EXC_INFO":
        return "cleanup"
    return "with" if instrs[target + 1].opname == "WITH_EXCEPT_START" else "try"


def clear():
    _CACHE.clear()
    _ORIGIN.clear()
