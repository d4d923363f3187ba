"""Read a code object into the normalized instruction stream (see the package docstring).

`read(code)` walks `dis.get_instructions(code)` once. Each original instruction expands, through the
`_EXPAND` table, into zero or more normalized (opname, argval, jump offset) triples; jump offsets become
indices into the normalized list at the end. A jump to a dropped instruction lands on the next kept one.
"""

from __future__ import annotations

import bisect
import dataclasses
import dis
import sys
import types
from typing import Any, Callable, Iterable

PY = sys.version_info[:2]
if not (3, 11) <= PY <= (3, 13):
    raise ImportError(f"graphjit.capture.bytecode supports Python 3.11-3.13, not {PY[0]}.{PY[1]}")

PY_VERSION_TAG = f"{PY[0]}.{PY[1]}"

# Call-site stack layout: 3.11/3.12 [NULL, callable, args...]; 3.13 [callable, NULL, args...].
# A LOAD_METHOD pushes [method, self] on every version (or the NULL/attr pair in the version's order).
NULL_BEFORE_CALLABLE = PY < (3, 13)


@dataclasses.dataclass
class Instruction:
    """One normalized instruction. `target` is an index into the same list (jumps, FOR_ITER, SEND...).

    >>> Instruction("LOAD_FAST", "x", lineno=12)
      12 LOAD_FAST x
    """

    opname: str
    argval: Any = None
    lineno: int | None = None
    offset: int | None = None  # byte offset of the original instruction it came from
    target: int | None = None
    is_jump_target: bool = False

    def __repr__(self) -> str:
        line = "--" if self.lineno is None else self.lineno
        arg = " " + _argrepr(self) if _shows_arg(self) else ""
        jump = "" if self.target is None else f" -> {self.target}"
        return f"{line:>4} {self.opname}{arg}{jump}"


@dataclasses.dataclass(frozen=True)
class ExceptionEntry:
    """Instructions [start, end) are protected by the handler at `target` (indices into the list).

    On an exception the stack is cut to `depth` items, then (if `lasti`) the offset of the raising
    instruction is pushed, then the exception.
    """

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


def _shows_arg(instr: Instruction) -> bool:
    return instr.argval is not None or instr.opname == "LOAD_CONST"


def _argrepr(instr: Instruction) -> str:
    return repr(instr.argval) if instr.opname == "LOAD_CONST" else str(instr.argval)


def format_instructions(instrs: Iterable[Instruction], entries: Iterable[ExceptionEntry] = ()) -> str:
    """A dis-like listing: index, line, '>>' on jump targets, opname, argval, '-> target'."""
    lines = []
    for i, ins in enumerate(instrs):
        mark = ">>" if ins.is_jump_target else "  "
        line = "" if ins.lineno is None else ins.lineno
        arg = _argrepr(ins) if _shows_arg(ins) else ""
        jump = "" if ins.target is None else f"-> {ins.target}"
        lines.append(f"{i:>4} {line:>5} {mark} {ins.opname:<24}{arg} {jump}".rstrip())
    for e in entries:
        lasti = " lasti" if e.lasti else ""
        lines.append(f"  except [{e.start}, {e.end}) -> {e.target} depth {e.depth}{lasti}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Expansion table: original dis opname -> function(reader, dis instruction) -> list of
# (opname, argval) or (opname, argval, jump_offset). Names absent from the table pass through with
# dis's argval (and their jump offset, if they jump).

_CONVERSIONS = (None, "str", "repr", "ascii")  # FORMAT_VALUE flags & 3, CONVERT_VALUE oparg
_JUMP_OPCODES = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_JUMP_RENAMES = {  # jump opnames not listed (POP_JUMP_IF_*, SEND, ...) keep theirs
    "JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP", "JUMP_BACKWARD_NO_INTERRUPT": "JUMP", "JUMP_ABSOLUTE": "JUMP",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
}
_DROPPED = frozenset({"RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PRECALL", "COPY_FREE_VARS"})
_TESTS_TRUTH = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT"})  # 3.13: need a bool
_COMPARE_TO_BOOL_BIT = 16 if PY >= (3, 13) else 0  # 3.13: COMPARE_OP fused with a following TO_BOOL
_INTRINSIC_RENAMES = {"INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE": "LIST_TO_TUPLE"}
# 3.12 moved the LOAD_ATTR "method" flag into bit 0 of the oparg (3.11 had LOAD_METHOD).
_LOAD_ATTR_HAS_METHOD_BIT = PY >= (3, 12)


class _Reader:
    def __init__(self, code: types.CodeType):
        self.code = code
        self.cells = frozenset(code.co_cellvars) | frozenset(code.co_freevars)
        self.pending_kw_names = False  # saw KW_NAMES, the next CALL becomes CALL_KW
        self.in_prologue = True  # before the first RESUME: MAKE_CELL / COPY_FREE_VARS are frame setup
        self.for_iter_exit: dict[int, int] = {}  # FOR_ITER offset -> offset after its exit cleanup
        self.cleanup: set[int] = set()  # offsets of END_FOR (+ 3.13 POP_TOP) skipped by a FOR_ITER
        self.next_opname: dict[int, str] = {}  # offset -> opname of the next instruction that executes

    def load_fast(self, name: str) -> tuple[str, str]:
        # 3.13 builds closure tuples with LOAD_FAST of the cell; it pushes the cell itself.
        return ("LOAD_CLOSURE" if name in self.cells else "LOAD_FAST", name)


def _load_global(r: _Reader, ins: dis.Instruction) -> list:
    load = ("LOAD_GLOBAL", ins.argval)
    if not ins.arg & 1:
        return [load]
    return [("PUSH_NULL", None), load] if NULL_BEFORE_CALLABLE else [load, ("PUSH_NULL", None)]


def _load_attr(r: _Reader, ins: dis.Instruction) -> list:
    is_method = _LOAD_ATTR_HAS_METHOD_BIT and ins.arg & 1
    return [("LOAD_METHOD" if is_method else "LOAD_ATTR", ins.argval)]


def _to_bool(r: _Reader, ins: dis.Instruction) -> list:
    # 3.13 puts TO_BOOL before every truth test; the normalized tests take any value. A TO_BOOL whose
    # result is a value (`not not x`) is bool(x), spelled as on 3.11/3.12.
    return [] if r.next_opname[ins.offset] in _TESTS_TRUTH else [("UNARY_NOT", None), ("UNARY_NOT", None)]


def _compare_op(r: _Reader, ins: dis.Instruction) -> list:
    compare = ("COMPARE_OP", ins.argval)  # dis's argval has no mask or bool() bits
    if ins.arg & _COMPARE_TO_BOOL_BIT and r.next_opname[ins.offset] not in _TESTS_TRUTH:
        return [compare] + _to_bool(r, ins)
    return [compare]


def _kw_names(r: _Reader, ins: dis.Instruction) -> list:
    r.pending_kw_names = True
    return [("LOAD_CONST", r.code.co_consts[ins.arg])]


def _call(r: _Reader, ins: dis.Instruction) -> list:
    kw, r.pending_kw_names = r.pending_kw_names, False
    return [("CALL_KW" if kw else "CALL", ins.arg)]


def _make_function(r: _Reader, ins: dis.Instruction) -> list:
    # 3.11/3.12 flags pop (from the top) code, closure, annotations, kwdefaults, defaults; the 3.13
    # form sets them one by one in that order, each SET_FUNCTION_ATTRIBUTE taking the next value below.
    flags = ins.arg or 0
    return [("MAKE_FUNCTION", None)] + [("SET_FUNCTION_ATTRIBUTE", f) for f in (8, 4, 2, 1) if flags & f]


def _intrinsic(r: _Reader, ins: dis.Instruction) -> list:
    name = _INTRINSIC_RENAMES.get(ins.argrepr)
    return [(name, None)] if name else [(ins.opname, ins.argrepr)]


def _make_cell(r: _Reader, ins: dis.Instruction) -> list:
    # In the prologue the interpreter builds cells itself; later (PEP 709 inlined comprehensions
    # whose variable is captured) MAKE_CELL creates a fresh cell mid-function and must be kept.
    return [] if r.in_prologue else [("MAKE_CELL", ins.argval)]


def _cleanup_or_keep(r: _Reader, ins: dis.Instruction) -> list:
    return [] if ins.offset in r.cleanup else [(ins.opname, ins.argval)]


def _for_iter(r: _Reader, ins: dis.Instruction) -> list:
    return [("FOR_ITER", None, r.for_iter_exit[ins.offset])]


_EXPAND: dict[str, Callable[[_Reader, dis.Instruction], list]] = {
    "LOAD_FAST": lambda r, i: [r.load_fast(i.argval)],
    "LOAD_FAST_CHECK": lambda r, i: [r.load_fast(i.argval)],
    "LOAD_FAST_LOAD_FAST": lambda r, i: [r.load_fast(n) for n in i.argval],
    "STORE_FAST_LOAD_FAST": lambda r, i: [("STORE_FAST", i.argval[0]), r.load_fast(i.argval[1])],
    "STORE_FAST_STORE_FAST": lambda r, i: [("STORE_FAST", n) for n in i.argval],  # TOS goes to argval[0]
    "LOAD_CLASSDEREF": lambda r, i: [("LOAD_DEREF", i.argval)],
    "RETURN_CONST": lambda r, i: [("LOAD_CONST", i.argval), ("RETURN_VALUE", None)],
    "LOAD_GLOBAL": _load_global,
    "LOAD_ATTR": _load_attr,
    "LOAD_SUPER_ATTR": lambda r, i: [("LOAD_SUPER_ATTR", (i.argval, bool(i.arg & 1), bool(i.arg & 2)))],
    "KW_NAMES": _kw_names,
    "CALL": _call,
    "CALL_FUNCTION_EX": lambda r, i: [("CALL_FUNCTION_EX", bool(i.arg & 1))],
    "BINARY_OP": lambda r, i: [("BINARY_OP", i.argrepr)],
    "BINARY_SLICE": lambda r, i: [("BUILD_SLICE", 2), ("BINARY_SUBSCR", None)],
    "STORE_SLICE": lambda r, i: [("BUILD_SLICE", 2), ("STORE_SUBSCR", None)],
    "COMPARE_OP": _compare_op,
    "TO_BOOL": _to_bool,
    "IS_OP": lambda r, i: [("IS_OP", bool(i.arg))],
    "CONTAINS_OP": lambda r, i: [("CONTAINS_OP", bool(i.arg))],
    "CALL_INTRINSIC_1": _intrinsic,
    "CALL_INTRINSIC_2": _intrinsic,
    "UNPACK_EX": lambda r, i: [("UNPACK_EX", (i.arg & 0xFF, i.arg >> 8))],
    "MAKE_FUNCTION": _make_function,
    "SET_FUNCTION_ATTRIBUTE": lambda r, i: [("SET_FUNCTION_ATTRIBUTE", i.arg)],
    "FORMAT_VALUE": lambda r, i: [("FORMAT_VALUE", (_CONVERSIONS[i.arg & 3], bool(i.arg & 4)))],
    "CONVERT_VALUE": lambda r, i: [("CONVERT_VALUE", _CONVERSIONS[i.arg])],
    "FORMAT_SIMPLE": lambda r, i: [("FORMAT_VALUE", (None, False))],
    "FORMAT_WITH_SPEC": lambda r, i: [("FORMAT_VALUE", (None, True))],
    "MAKE_CELL": _make_cell,
    "END_FOR": _cleanup_or_keep,
    "POP_TOP": _cleanup_or_keep,
    "FOR_ITER": _for_iter,
}


def _expand(r: _Reader, ins: dis.Instruction) -> list:
    if ins.opname in _DROPPED:
        return []
    if ins.opname in _EXPAND:
        return _EXPAND[ins.opname](r, ins)
    if ins.opcode in _JUMP_OPCODES:
        return [(_JUMP_RENAMES.get(ins.opname, ins.opname), None, ins.argval)]
    return [(ins.opname, ins.argval)]


def _find_for_iter_exits(r: _Reader, raw: list[dis.Instruction]) -> None:
    """FOR_ITER's normalized target skips the loop-exit cleanup that the exhausted FOR_ITER jumps
    over in 3.12 (END_FOR) and 3.13 (END_FOR, POP_TOP). 3.11 has no cleanup."""
    index_of = {ins.offset: k for k, ins in enumerate(raw)}
    for ins in raw:
        if ins.opname != "FOR_ITER":
            continue
        k = index_of[ins.argval]
        if raw[k].opname == "END_FOR":
            skip = 2 if PY >= (3, 13) else 1
            r.cleanup.update(raw[k + j].offset for j in range(skip))
            k += skip
        r.for_iter_exit[ins.offset] = raw[k].offset


def _find_next_opnames(r: _Reader, raw: list[dis.Instruction]) -> None:
    following = None
    for ins in reversed(raw):
        r.next_opname[ins.offset] = following
        if ins.opname not in ("EXTENDED_ARG", "NOP", "CACHE"):
            following = ins.opname


def read(code: types.CodeType) -> list[Instruction]:
    """The normalized instruction stream of `code` (see the package docstring for the vocabulary)."""
    raw = list(dis.get_instructions(code))
    r = _Reader(code)
    _find_for_iter_exits(r, raw)
    _find_next_opnames(r, raw)
    out: list[Instruction] = []
    jumps: list[tuple[Instruction, int]] = []
    for ins in raw:
        lineno = ins.positions.lineno if ins.positions else None
        for opname, argval, *jump in _expand(r, ins):
            out.append(Instruction(opname, argval, lineno, ins.offset))
            if jump:
                jumps.append((out[-1], jump[0]))
        if ins.opname == "RESUME":
            r.in_prologue = False
    index_at = _index_mapper(out)
    for instr, offset in jumps:
        instr.target = index_at(offset)
        out[instr.target].is_jump_target = True
    for entry in _exception_entries(code, index_at):
        out[entry.target].is_jump_target = True
    return out


def exception_table(code: types.CodeType) -> list[ExceptionEntry]:
    """The exception table of `code`, start/end (exclusive)/target as indices into `read(code)`."""
    return _exception_entries(code, _index_mapper(read(code)))


def handler_targets(instrs: list[Instruction], entries: list[ExceptionEntry], index: int):
    """The handlers an exception raised at instruction `index` reaches, innermost first, as indices of their
    first instructions: each found in the exception table (`entries`, of the code `instrs` was read from),
    the next one out from the handler's first RERAISE (a handler that re-raises passes the exception on);
    the walk ends where no entry covers it."""
    seen, position = set(), index
    while True:
        entry = next((e for e in entries if e.start <= position < e.end), None)
        if entry is None or entry in seen:
            return
        seen.add(entry)
        yield entry.target
        position = next((j for j in range(entry.target, len(instrs)) if instrs[j].opname == "RERAISE"), None)
        if position is None:
            return


def _index_mapper(instrs: list[Instruction]) -> Callable[[int], int]:
    """Byte offset -> index of the first normalized instruction at or after it (offsets are sorted)."""
    offsets = [ins.offset for ins in instrs]
    return lambda offset: bisect.bisect_left(offsets, offset)


def _exception_entries(code: types.CodeType, index_at: Callable[[int], int]) -> list[ExceptionEntry]:
    entries = []
    for e in dis._parse_exception_table(code):  # byte offsets, end exclusive
        start, end = index_at(e.start), index_at(e.end)
        if start < end:
            entries.append(ExceptionEntry(start, end, index_at(e.target), e.depth, bool(e.lasti)))
    return entries
