"""Assemble normalized instructions back into a code object for the running Python.

The inverse of `reader.read`: each normalized instruction is lowered, through the `_LOWER` table, to
the running version's instructions of the `bytecode` package (PyPI), which encodes arguments, jumps,
the exception table, the line table and the stack size. Things `read` dropped come back here:
the prologue (COPY_FREE_VARS, MAKE_CELL, RESUME), RESUME after each YIELD_VALUE, TO_BOOL (3.13,
before POP_JUMP_IF_TRUE/FALSE and UNARY_NOT),
PRECALL (3.11), and the END_FOR cleanup that 3.12+ FOR_ITER targets.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Callable, Sequence

import bytecode as bc
from bytecode import BinaryOp, CellVar, Compare, FreeVar, Instr, Intrinsic1Op, Intrinsic2Op, Label

from .reader import _CONVERSIONS, PY, ExceptionEntry, Instruction

_BINARY_OPS = {symbol: BinaryOp(k) for k, (_, symbol) in enumerate(dis._nb_ops)}
_COMPARE = {"<": Compare.LT, "<=": Compare.LE, "==": Compare.EQ, "!=": Compare.NE, ">": Compare.GT, ">=": Compare.GE}
_NEGATE = {"TRUE": "FALSE", "FALSE": "TRUE", "NONE": "NOT_NONE", "NOT_NONE": "NONE"}
_NO_FALLTHROUGH = frozenset({"JUMP", "RETURN_VALUE", "RAISE_VARARGS", "RERAISE"})
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_LOCAL_OPS = frozenset({"LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_FAST_AND_CLEAR"})
_CELL_OPS = frozenset({"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "MAKE_CELL", "LOAD_FROM_DICT_OR_DEREF"})


class AssemblyError(ValueError):
    """The instruction stream can't be expressed on this Python version; the message says why."""


def assemble(
    instrs: Sequence[Instruction],
    *,
    template: types.CodeType,
    exception_entries: Sequence[ExceptionEntry],
    argcount: int | None = None,
    posonlyargcount: int | None = None,
    kwonlyargcount: int | None = None,
    varnames: Sequence[str] | None = None,
    cellvars: Sequence[str] | None = None,
    freevars: Sequence[str] | None = None,
    flags: int | None = None,
    name: str | None = None,
    qualname: str | None = None,
    filename: str | None = None,
    firstlineno: int | None = None,
) -> types.CodeType:
    """A code object running `instrs` (normalized, targets are indices into `instrs`).

    Every code attribute not given is taken from `template`. `varnames` only needs the argument names
    (the first argcount + kwonlyargcount + *args + **kwargs); other locals are found in `instrs`.
    `exception_entries` is required (use `exception_table(template)` when instrs == read(template)).
    """
    code = bc.Bytecode()
    code.argcount = template.co_argcount if argcount is None else argcount
    code.posonlyargcount = template.co_posonlyargcount if posonlyargcount is None else posonlyargcount
    code.kwonlyargcount = template.co_kwonlyargcount if kwonlyargcount is None else kwonlyargcount
    code.flags = template.co_flags if flags is None else flags
    nargs = code.argcount + code.kwonlyargcount + bool(code.flags & inspect.CO_VARARGS)
    nargs += bool(code.flags & inspect.CO_VARKEYWORDS)
    code.argnames = list(template.co_varnames if varnames is None else varnames)[:nargs]
    code.cellvars = list(template.co_cellvars if cellvars is None else cellvars)
    code.freevars = list(template.co_freevars if freevars is None else freevars)
    code.name = name or template.co_name
    code.qualname = qualname or template.co_qualname
    code.filename = filename or template.co_filename
    code.first_lineno = template.co_firstlineno if firstlineno is None else firstlineno
    if template.co_consts and (template.co_consts[0] is None or isinstance(template.co_consts[0], str)):
        code.docstring = template.co_consts[0]
    code.extend(_Lowering(list(instrs), list(exception_entries), code).run())
    return code.to_code(compute_exception_stack_depths=False)


class _Lowering:
    def __init__(self, instrs: list[Instruction], entries: list[ExceptionEntry], code: bc.Bytecode):
        self.instrs, self.entries, self.code = instrs, sorted(entries, key=lambda e: e.start), code
        self.cells = frozenset(code.cellvars)
        self.labels = [Label() for _ in instrs]
        self.for_exits: dict[int, Label] = {}  # FOR_ITER target index -> label of its END_FOR (3.12+)
        if PY >= (3, 12):
            self.for_exits = {x.target: Label() for x in instrs if x.opname == "FOR_ITER"}
        self.unsafe_locals = self._possibly_unbound_locals()
        self._check_entries()
        self.starting = {e.start: e for e in self.entries}  # entries never overlap: one per index
        self.ending = {e.end: e for e in self.entries}
        self.boundaries = set(self.starting) | set(self.ending)
        self.boundaries |= {x.target for x in instrs if x.target is not None} | {e.target for e in self.entries}
        self.boundaries |= set(self.for_exits)
        self.out: list = []

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> list:
        self._prologue()
        resume_at = 2 if self.instrs and self.instrs[0].opname == "RETURN_GENERATOR" else 0
        try_begin = None
        i = 0
        while i < len(self.instrs):
            ins = self.instrs[i]
            if i in self.ending:
                self.out.append(bc.TryEnd(try_begin))
            self._for_exit(i)
            if i == resume_at:
                self.emit("RESUME", 0, self.code.first_lineno)
            self.out.append(self.labels[i])
            if i in self.starting:
                e = self.starting[i]
                try_begin = bc.TryBegin(self.labels[e.target], e.lasti, e.depth)
                self.out.append(try_begin)
            if i > 0 and self.instrs[i - 1].opname == "YIELD_VALUE":
                self.emit("RESUME", self._resume_kind(i), ins.lineno)
            lower = _LOWER.get(ins.opname, _lower_default)
            i += lower(self, i, ins) or 1
        if len(self.instrs) in self.ending:
            self.out.append(bc.TryEnd(try_begin))
        return self.out

    def emit(self, opname: str, arg=bc.UNSET, lineno: int | None = None) -> None:
        self.out.append(Instr(opname, arg, lineno=lineno))

    def _prologue(self) -> None:
        if self.code.freevars:
            self.emit("COPY_FREE_VARS", len(self.code.freevars))
        for name in self.code.cellvars:
            self.emit("MAKE_CELL", CellVar(name))

    def _for_exit(self, i: int) -> None:
        """3.12+: FOR_ITER jumps to END_FOR (and 3.13's POP_TOP); exhausted, it skips them, but the
        specialized generator path executes them, so they must sit right before the loop exit."""
        if i not in self.for_exits:
            return
        lineno = self.instrs[i - 1].lineno
        if self.instrs[i - 1].opname not in _NO_FALLTHROUGH:
            self.emit("JUMP_FORWARD", self.labels[i], lineno)
        self.out.append(self.for_exits[i])
        self.emit("END_FOR", lineno=lineno)
        if PY >= (3, 13):
            self.emit("POP_TOP", lineno=lineno)

    def _resume_kind(self, i: int) -> int:
        """RESUME oparg after a yield: 2 (yield from) / 3 (await) inside a SEND loop, else 1.
        3.13's "exception depth 1" bit is left off: gen.close() then always throws GeneratorExit into
        the frame, which is correct, only slower than skipping it when no handler can see it."""
        ins = self.instrs[i]
        in_send_loop = ins.opname == "JUMP" and self.instrs[ins.target].opname == "SEND"
        if not in_send_loop:
            return 1
        return 3 if self.code.flags & _ASYNC_FLAGS else 2

    def fusable(self, j: int) -> bool:
        """Can instruction j be merged into the one before it (nothing jumps to it or starts there)?"""
        return j < len(self.instrs) and j not in self.boundaries

    # -- argument helpers --------------------------------------------------------------------

    def cell(self, name: str) -> CellVar | FreeVar:
        return CellVar(name) if name in self.cells else FreeVar(name)

    def _possibly_unbound_locals(self) -> frozenset[str]:
        """Locals that LOAD_FAST must check on 3.12+ (LOAD_FAST_CHECK): all but arguments never
        deleted or cleared."""
        cleared = {x.argval for x in self.instrs if x.opname in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR")}
        return frozenset(x.argval for x in self.instrs if x.opname == "LOAD_FAST") - (
            set(self.code.argnames) - cleared
        )

    def _check_entries(self) -> None:
        for a, b in zip(self.entries, self.entries[1:]):
            if b.start < a.end:
                raise AssemblyError(f"exception entries overlap: {a} and {b}")
        for e in self.entries:
            if not 0 <= e.start < e.end <= len(self.instrs) or not 0 <= e.target < len(self.instrs):
                raise AssemblyError(f"exception entry out of range: {e}")

    def jump(self, i: int, opname: str, target: int) -> None:
        self.emit(opname, self.labels[target], self.instrs[i].lineno)

    def cond_jump(self, i: int, cond: str, target: int) -> None:
        """POP_JUMP_IF_<cond>, any direction (3.12+ only have forward conditional jumps)."""
        lineno = self.instrs[i].lineno
        if PY >= (3, 13) and cond in ("TRUE", "FALSE"):
            self.emit("TO_BOOL", lineno=lineno)
        forward = target > i
        if PY < (3, 12):
            direction = "FORWARD" if forward else "BACKWARD"
            self.emit(f"POP_JUMP_{direction}_IF_{cond}", self.labels[target], lineno)
        elif forward:
            self.emit(f"POP_JUMP_IF_{cond}", self.labels[target], lineno)
        else:
            skip = Label()
            self.emit(f"POP_JUMP_IF_{_NEGATE[cond]}", skip, lineno)
            self.emit("JUMP_BACKWARD", self.labels[target], lineno)
            self.out.append(skip)


# ---------------------------------------------------------------------------------------------
# Lowering table: normalized opname -> function(lowering, index, instruction) that emits the version's
# instructions and returns how many normalized instructions it consumed (None means 1).

Lower = Callable[[_Lowering, int, Instruction], "int | None"]


def _lower_default(s: _Lowering, i: int, ins: Instruction) -> None:
    if ins.target is not None:
        return s.jump(i, ins.opname, ins.target)
    if ins.opname in _LOCAL_OPS:
        return s.emit(ins.opname, ins.argval, ins.lineno)
    if ins.opname in _CELL_OPS:
        return s.emit(ins.opname, s.cell(ins.argval), ins.lineno)
    arg = bc.UNSET if ins.argval is None else ins.argval
    s.emit(ins.opname, arg, ins.lineno)


def _simple(opname: str, arg: Callable[[Instruction], object] = lambda ins: bc.UNSET) -> Lower:
    return lambda s, i, ins: s.emit(opname, arg(ins), ins.lineno)


def _load_fast(s: _Lowering, i: int, ins: Instruction) -> None:
    checked = PY >= (3, 12) and ins.argval in s.unsafe_locals
    s.emit("LOAD_FAST_CHECK" if checked else "LOAD_FAST", ins.argval, ins.lineno)


def _load_deref(s: _Lowering, i: int, ins: Instruction) -> None:
    # 3.11 class bodies read free variables with LOAD_CLASSDEREF (class namespace first), which read()
    # folded into LOAD_DEREF; a class body is the only unoptimized code with free variables.
    in_class_body = not s.code.flags & inspect.CO_OPTIMIZED and ins.argval in s.code.freevars
    opname = "LOAD_CLASSDEREF" if PY < (3, 12) and in_class_body else "LOAD_DEREF"
    s.emit(opname, s.cell(ins.argval), ins.lineno)


def _load_closure(s: _Lowering, i: int, ins: Instruction) -> None:
    s.emit("LOAD_FAST" if PY >= (3, 13) else "LOAD_CLOSURE", s.cell(ins.argval), ins.lineno)


def _push_null(s: _Lowering, i: int, ins: Instruction) -> int | None:
    nxt = i + 1
    if PY < (3, 13) and s.fusable(nxt) and s.instrs[nxt].opname == "LOAD_GLOBAL":
        s.emit("LOAD_GLOBAL", (True, s.instrs[nxt].argval), ins.lineno)
        return 2
    s.emit("PUSH_NULL", lineno=ins.lineno)
    return None


def _load_global(s: _Lowering, i: int, ins: Instruction) -> int | None:
    nxt = i + 1
    if PY >= (3, 13) and s.fusable(nxt) and s.instrs[nxt].opname == "PUSH_NULL":
        s.emit("LOAD_GLOBAL", (True, ins.argval), ins.lineno)
        return 2
    s.emit("LOAD_GLOBAL", (False, ins.argval), ins.lineno)
    return None


def _load_attr(method: bool) -> Lower:
    if PY < (3, 12):
        return _simple("LOAD_METHOD" if method else "LOAD_ATTR", lambda ins: ins.argval)
    return _simple("LOAD_ATTR", lambda ins: (method, ins.argval))


def _load_const(s: _Lowering, i: int, ins: Instruction) -> int | None:
    nxt = i + 1
    if PY < (3, 13) and s.fusable(nxt) and s.instrs[nxt].opname == "CALL_KW":
        s.emit("KW_NAMES", ins.argval, ins.lineno)
        _call(s, nxt, s.instrs[nxt])
        return 2
    s.emit("LOAD_CONST", ins.argval, ins.lineno)
    return None


def _call(s: _Lowering, i: int, ins: Instruction) -> None:
    if PY < (3, 12):
        s.emit("PRECALL", ins.argval, ins.lineno)
    s.emit("CALL", ins.argval, ins.lineno)


def _call_kw(s: _Lowering, i: int, ins: Instruction) -> None:
    if PY < (3, 13):
        raise AssemblyError(f"CALL_KW at {i} must directly follow the LOAD_CONST of its names tuple")
    s.emit("CALL_KW", ins.argval, ins.lineno)


def _make_function(s: _Lowering, i: int, ins: Instruction) -> int | None:
    if PY >= (3, 13):
        return s.emit("MAKE_FUNCTION", lineno=ins.lineno)
    flags, j = [], i + 1
    while s.fusable(j) and s.instrs[j].opname == "SET_FUNCTION_ATTRIBUTE":
        flags.append(s.instrs[j].argval)
        j += 1
    if flags != sorted(flags, reverse=True):
        raise AssemblyError(f"SET_FUNCTION_ATTRIBUTE after {i} must come highest flag first: {flags}")
    s.emit("MAKE_FUNCTION", sum(flags), ins.lineno)
    return j - i


def _set_function_attribute(s: _Lowering, i: int, ins: Instruction) -> None:
    if PY < (3, 13):
        raise AssemblyError(f"SET_FUNCTION_ATTRIBUTE at {i} must directly follow MAKE_FUNCTION")
    s.emit("SET_FUNCTION_ATTRIBUTE", ins.argval, ins.lineno)


def _format_value(s: _Lowering, i: int, ins: Instruction) -> None:
    conversion, has_spec = ins.argval
    code = _CONVERSIONS.index(conversion)
    if PY < (3, 13):
        return s.emit("FORMAT_VALUE", code | (4 if has_spec else 0), ins.lineno)
    if code and has_spec:  # convert the value under the spec
        s.emit("SWAP", 2, ins.lineno)
        s.emit("CONVERT_VALUE", code, ins.lineno)
        s.emit("SWAP", 2, ins.lineno)
    elif code:
        s.emit("CONVERT_VALUE", code, ins.lineno)
    s.emit("FORMAT_WITH_SPEC" if has_spec else "FORMAT_SIMPLE", lineno=ins.lineno)


def _convert_value(s: _Lowering, i: int, ins: Instruction) -> None:
    code = _CONVERSIONS.index(ins.argval)
    # 3.11/3.12: format(repr(x), '') is repr(x), so a spec-less FORMAT_VALUE converts.
    s.emit("CONVERT_VALUE" if PY >= (3, 13) else "FORMAT_VALUE", code, ins.lineno)


def _intrinsic1(name: str) -> Lower:
    if PY < (3, 12):
        return _simple(name.removeprefix("INTRINSIC_"))
    return _simple("CALL_INTRINSIC_1", lambda ins: Intrinsic1Op[name])


def _jump(s: _Lowering, i: int, ins: Instruction) -> None:
    if ins.target > i:
        return s.jump(i, "JUMP_FORWARD", ins.target)
    to_send = s.instrs[ins.target].opname == "SEND"  # the yield-from loop must not check interrupts
    s.jump(i, "JUMP_BACKWARD_NO_INTERRUPT" if to_send else "JUMP_BACKWARD", ins.target)


def _unary_not(s: _Lowering, i: int, ins: Instruction) -> None:
    if PY >= (3, 13):  # 3.13's UNARY_NOT takes an exact bool
        s.emit("TO_BOOL", lineno=ins.lineno)
    s.emit("UNARY_NOT", lineno=ins.lineno)


def _pop_jump(cond: str) -> Lower:
    return lambda s, i, ins: s.cond_jump(i, cond, ins.target)


def _jump_or_pop(cond: str) -> Lower:
    def lower(s: _Lowering, i: int, ins: Instruction) -> None:
        if PY < (3, 12) and ins.target > i:
            return s.jump(i, f"JUMP_IF_{cond}_OR_POP", ins.target)
        s.emit("COPY", 1, ins.lineno)
        s.cond_jump(i, cond, ins.target)
        s.emit("POP_TOP", lineno=ins.lineno)

    return lower


def _for_iter(s: _Lowering, i: int, ins: Instruction) -> None:
    s.emit("FOR_ITER", s.for_exits.get(ins.target, s.labels[ins.target]), ins.lineno)


_LOWER: dict[str, Lower] = {
    "LOAD_FAST": _load_fast,
    "LOAD_CLOSURE": _load_closure,
    "LOAD_DEREF": _load_deref,
    "PUSH_NULL": _push_null,
    "LOAD_GLOBAL": _load_global,
    "LOAD_ATTR": _load_attr(method=False),
    "LOAD_METHOD": _load_attr(method=True),
    "LOAD_SUPER_ATTR": _simple("LOAD_SUPER_ATTR", lambda ins: (ins.argval[1], ins.argval[2], ins.argval[0])),
    "LOAD_CONST": _load_const,
    "CALL": _call,
    "CALL_KW": _call_kw,
    "CALL_FUNCTION_EX": _simple("CALL_FUNCTION_EX", lambda ins: int(ins.argval)),
    "BINARY_OP": _simple("BINARY_OP", lambda ins: _BINARY_OPS[ins.argval]),
    "COMPARE_OP": _simple("COMPARE_OP", lambda ins: _COMPARE[ins.argval]),
    "IS_OP": _simple("IS_OP", lambda ins: int(ins.argval)),
    "CONTAINS_OP": _simple("CONTAINS_OP", lambda ins: int(ins.argval)),
    "UNARY_POSITIVE": _intrinsic1("INTRINSIC_UNARY_POSITIVE"),
    "LIST_TO_TUPLE": _intrinsic1("INTRINSIC_LIST_TO_TUPLE"),
    "CALL_INTRINSIC_1": _simple("CALL_INTRINSIC_1", lambda ins: Intrinsic1Op[ins.argval]),
    "CALL_INTRINSIC_2": _simple("CALL_INTRINSIC_2", lambda ins: Intrinsic2Op[ins.argval]),
    "UNARY_NOT": _unary_not,
    "UNPACK_EX": _simple("UNPACK_EX", lambda ins: ins.argval[0] | ins.argval[1] << 8),
    "MAKE_FUNCTION": _make_function,
    "SET_FUNCTION_ATTRIBUTE": _set_function_attribute,
    "FORMAT_VALUE": _format_value,
    "CONVERT_VALUE": _convert_value,
    "JUMP": _jump,
    "POP_JUMP_IF_TRUE": _pop_jump("TRUE"),
    "POP_JUMP_IF_FALSE": _pop_jump("FALSE"),
    "POP_JUMP_IF_NONE": _pop_jump("NONE"),
    "POP_JUMP_IF_NOT_NONE": _pop_jump("NOT_NONE"),
    "JUMP_IF_TRUE_OR_POP": _jump_or_pop("TRUE"),
    "JUMP_IF_FALSE_OR_POP": _jump_or_pop("FALSE"),
    "FOR_ITER": _for_iter,
}
