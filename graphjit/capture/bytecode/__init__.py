"""CPython 3.11 / 3.12 / 3.13 bytecode, read into one normalized vocabulary and assembled back.

The only place in graphjit that branches on `sys.version_info`. Everything else sees this vocabulary:

    instrs = read(code)                  # list[Instruction]: opname, argval, lineno, offset, target, ...
    entries = exception_table(code)      # list[ExceptionEntry]: [start, end) -> target, depth, lasti
    print(format_instructions(instrs, entries))
    code2 = assemble(instrs, template=code, exception_entries=entries)

`target` (jumps, FOR_ITER, SEND, ...) and exception entries are indices into the list. A jump to an
instruction that normalization dropped goes to the next kept one. `offset` is the byte offset of the
original instruction an instruction came from (expansions share it).

Normalized vocabulary (argval in parentheses; anything not listed passes through with dis's opname
and argval, e.g. BEFORE_WITH, PUSH_EXC_INFO, RERAISE, RAISE_VARARGS, YIELD_VALUE, SEND, IMPORT_NAME):

  dropped          RESUME NOP CACHE EXTENDED_ARG PRECALL COPY_FREE_VARS, MAKE_CELL before the first
                   RESUME (frame setup), END_FOR (+ 3.13's POP_TOP) after a loop (see FOR_ITER).
                   3.13's TO_BOOL (and COMPARE_OP's bool() bit) before POP_JUMP_IF_TRUE/FALSE and
                   UNARY_NOT: these test truthiness themselves. Elsewhere (`not not x`) TO_BOOL
                   becomes UNARY_NOT UNARY_NOT, as 3.11/3.12 spell bool(x).
  locals           LOAD_FAST STORE_FAST DELETE_FAST LOAD_FAST_AND_CLEAR (name). LOAD_FAST_CHECK and
                   the 3.13 pairs LOAD_FAST_LOAD_FAST / STORE_FAST_LOAD_FAST / STORE_FAST_STORE_FAST
                   are split (in execution order). On a cell variable (PEP 709 comprehensions only),
                   LOAD_FAST_AND_CLEAR / STORE_FAST save and restore the cell object itself, and a
                   MAKE_CELL (name) inside the function gives the variable a fresh cell.
  cells            LOAD_CLOSURE (name: push the cell itself; 3.13's LOAD_FAST of a cell becomes this),
                   LOAD_DEREF STORE_DEREF DELETE_DEREF (name); LOAD_CLASSDEREF -> LOAD_DEREF.
  constants        LOAD_CONST (value); RETURN_CONST -> LOAD_CONST + RETURN_VALUE.
  globals, names   LOAD_GLOBAL (name) with its NULL bit as a separate PUSH_NULL, placed before it on
                   3.11/3.12 and after it on 3.13 (see NULL_BEFORE_CALLABLE). LOAD_NAME STORE_NAME
                   STORE_GLOBAL DELETE_GLOBAL (name).
  attributes       LOAD_ATTR (name) pushes 1. LOAD_METHOD (name) pushes 2: [method, self] or, if
                   not a method, [NULL, attr] (3.11/3.12) / [attr, NULL] (3.13). STORE_ATTR
                   DELETE_ATTR (name). LOAD_SUPER_ATTR ((name, is_method, two_arg)), 3.12+.
  calls            CALL (argc). CALL_KW (argc, keyword args included) after LOAD_CONST (names tuple);
                   3.11/3.12's KW_NAMES (PRECALL) CALL become these. CALL_FUNCTION_EX (has kwargs
                   dict: bool). Call-site stack: [NULL, callable, args] on 3.11/3.12,
                   [callable, NULL, args] on 3.13, or [method, self, args] on all.
  stack            POP_TOP PUSH_NULL COPY SWAP (n).
  operators        BINARY_OP (symbol: '+', '//', '@', '+=' ...). BINARY_SUBSCR STORE_SUBSCR
                   DELETE_SUBSCR; BINARY_SLICE / STORE_SLICE -> BUILD_SLICE 2 + BINARY/STORE_SUBSCR.
                   COMPARE_OP ('<' '<=' '==' '!=' '>' '>='). IS_OP, CONTAINS_OP (invert: bool).
                   UNARY_NEGATIVE UNARY_NOT UNARY_INVERT UNARY_POSITIVE LIST_TO_TUPLE (3.12+ intrinsics
                   renamed); other intrinsics: CALL_INTRINSIC_1/2 (name, e.g. 'INTRINSIC_IMPORT_STAR').
  containers       BUILD_TUPLE BUILD_LIST BUILD_SET BUILD_MAP BUILD_CONST_KEY_MAP BUILD_STRING
                   BUILD_SLICE (n). LIST_APPEND SET_ADD MAP_ADD LIST_EXTEND SET_UPDATE DICT_UPDATE
                   DICT_MERGE (i). UNPACK_SEQUENCE (n). UNPACK_EX ((count_before, count_after)).
  iteration        GET_ITER. FOR_ITER -> target: if the iterator (TOS) is exhausted, pop it and jump
                   to target (past the version's END_FOR cleanup), else push the next value.
  jumps            JUMP (any unconditional jump). POP_JUMP_IF_TRUE/FALSE/NONE/NOT_NONE (pop TOS).
                   JUMP_IF_TRUE_OR_POP / JUMP_IF_FALSE_OR_POP (3.11 only).
  functions        MAKE_FUNCTION (pops code, pushes function), then SET_FUNCTION_ATTRIBUTE (flag:
                   8 closure, 4 annotations, 2 kwdefaults, 1 defaults), highest flag first, each
                   popping the function and the value below it and pushing the function.
  f-strings        FORMAT_VALUE ((conversion, has_spec)): conversion None/'str'/'repr'/'ascii'
                   (3.11/3.12; the value is under the spec). 3.13: CONVERT_VALUE (conversion), then
                   FORMAT_VALUE ((None, has_spec)).
"""

from .assembler import AssemblyError, assemble
from .reader import (
    NULL_BEFORE_CALLABLE,
    PY_VERSION_TAG,
    ExceptionEntry,
    Instruction,
    exception_table,
    format_instructions,
    handler_targets,
    read,
)

__all__ = [
    "NULL_BEFORE_CALLABLE",
    "PY_VERSION_TAG",
    "AssemblyError",
    "ExceptionEntry",
    "Instruction",
    "assemble",
    "exception_table",
    "format_instructions",
    "handler_targets",
    "read",
]
