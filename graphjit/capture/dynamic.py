"""Dynamic shapes in capture: which sizes and ints a trace makes symbolic, and the guards on them.

Symbolic values are torch's own: a ShapeEnv behind the trace's FakeTensorMode gives a dynamic dim a
size symbol (a SymInt), shape arithmetic and views on fake tensors carry it, and a Python decision on
it (`if n > 4`, `range(n)`) records a guard in the ShapeEnv. At the end of a trace `shape_guards`
turns those into guard templates over our sources, checked by the entry with the other guards.

Policy (`compile(dynamic=...)`), per frame and per source:
- None (automatic): the first trace is static; a later trace makes symbolic each tensor dim whose size
  differs from what an earlier trace of the frame saw at the same source, and each int or float
  (argument, attribute, global, a value a graph break hands to its resume function) whose value differs.
- True: every dim of every tensor input (not parameters or buffers) and every int and float argument is
  symbolic.
- False: nothing is.
`mark_dynamic(t, dim)` makes a dim symbolic from the first trace (a trace that has to specialize it
breaks, saying where), `maybe_mark_dynamic` the same but a specialization just guards on the value,
`mark_static` keeps a dim static.
Dims of size 0 or 1 stay static (torch's 0/1 specialization), so size-1 broadcasting stays decidable.
"""
import dataclasses
import functools
import math
import re

import torch

from .. import logs

MARK_DYNAMIC = "_graphjit_dynamic_dims"        # {dim: (min, max)}: mark_dynamic
MAYBE_DYNAMIC = "_graphjit_maybe_dynamic_dims"  # {dim}: maybe_mark_dynamic
MARK_STATIC = "_graphjit_static_dims"           # {dim}: mark_static


def _dims(t, dim):
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"dim {d} is out of range for a tensor of {t.dim()} dims")
    return [d % t.dim() for d in dims]


def mark_dynamic(t, dim, min=None, max=None):
    """Make `t`'s dim(s) symbolic from the first compile: one graph for every size (within [min, max]).
    A trace that has to specialize such a dim to one value is refused, with the reason."""
    marks = dict(getattr(t, MARK_DYNAMIC, {}))
    for d in _dims(t, dim):
        marks[d] = (min, max)
    setattr(t, MARK_DYNAMIC, marks)


def maybe_mark_dynamic(t, dim):
    """Like mark_dynamic, but a trace that specializes the dim just guards on its value."""
    setattr(t, MAYBE_DYNAMIC, set(getattr(t, MAYBE_DYNAMIC, ())) | set(_dims(t, dim)))


def mark_static(t, dim=None):
    """Keep `t`'s dim(s) (all of them when dim is None) static whatever the policy says."""
    dims = range(t.dim()) if dim is None else _dims(t, dim)
    setattr(t, MARK_STATIC, set(getattr(t, MARK_STATIC, ())) | set(dims))


def _user_marks(t):
    """(dims marked dynamic, dims marked maybe-dynamic, dims marked static), torch's marks included
    (`torch._dynamo.mark_dynamic` sets `_dynamo_dynamic_indices`)."""
    strict = set(getattr(t, MARK_DYNAMIC, {})) | set(getattr(t, "_dynamo_dynamic_indices", ()))
    maybe = set(getattr(t, MAYBE_DYNAMIC, ())) | set(getattr(t, "_dynamo_weak_dynamic_indices", ()))
    static = set(getattr(t, MARK_STATIC, ())) | set(getattr(t, "_dynamo_static_indices", ()))
    return strict - static, maybe - static, static


def _is_argument(source):
    """Whether source is a frame argument, or an item of one (not an attribute, global or closure)."""
    from .sources import AttrSource, LocalSource
    while not isinstance(source, LocalSource):
        if isinstance(source, AttrSource) or getattr(source, "base", None) is None:
            return False
        source = source.base
    return True


class DynamicPolicy:
    """One frame's policy state: what earlier traces saw at each source (see the module docstring)."""

    def __init__(self, mode=None):
        self.mode = mode
        self.sizes_seen = {}      # source expr -> sizes of the tensor there in the last trace
        self.changed_dims = {}    # source expr -> dims whose size changed between traces
        self.ints_seen = {}       # source expr -> the int (or float) there in the last trace
        self.changed_ints = set()
        self.changed_floats = set()

    def tensor_dims(self, source, t, static_input=False):
        """The dims of tensor `t` (read at `source`) this trace makes symbolic."""
        key = source.expr()
        shape = tuple(t.shape)
        before = self.sizes_seen.get(key)
        self.sizes_seen[key] = shape
        if before is not None and len(before) == len(shape):
            changed = {d for d, (a, b) in enumerate(zip(before, shape)) if a != b}
            new = changed - self.changed_dims.get(key, set())
            if new and self.mode is None:
                logs.log("dynamic", f"{key}: dims {sorted(new)} become dynamic (sizes {before} then {shape})")
            self.changed_dims.setdefault(key, set()).update(changed)
        if self.mode is False:
            return set()
        strict, maybe, static = _user_marks(t)
        if static_input:
            return set()
        if self.mode is True:
            dims = set(range(t.dim()))
        else:
            dims = set(self.changed_dims.get(key, ()))
        return (dims | strict | maybe) - static

    def int_is_dynamic(self, source, value):
        """Whether the int `value` read at `source` becomes a symbolic graph input in this trace."""
        # dynamic=True: ints the frame is called with (arguments, items of argument containers); an int read
        # from an attribute or a global (a module's normalized_shape, padding, head count) stays a constant
        # until it changes, as torch.compile keeps nn.Module ints static: made symbolic, it would be
        # specialized again by the first size it meets (a weight's)
        return self._number_is_dynamic(source, value, self.changed_ints, "int")

    def float_is_dynamic(self, source, value):
        """Whether the float `value` read at `source` becomes a symbolic graph input (a SymFloat) in this
        trace: as an int does (int_is_dynamic), except NaN, the infinities and the zeros, which are never
        a symbol's value: the ShapeEnv's reasoning assumes a finite real (a symbol traced at inf lost the
        guard of a branch on it), and its guard `s == 0.0` would admit -0.0. Such a value is a constant,
        guarded as one (a zero with its sign)."""
        if value != value or value in (0.0, math.inf, -math.inf):
            self.ints_seen[source.expr()] = value
            return False
        return self._number_is_dynamic(source, value, self.changed_floats, "float")

    def _number_is_dynamic(self, source, value, changed, kind):
        key = source.expr()
        before = self.ints_seen.get(key)
        self.ints_seen[key] = value
        if before is not None and before != value and before == before and key not in changed:
            changed.add(key)
            if self.mode is None:
                logs.log("dynamic", f"{key}: the {kind} becomes a symbolic input ({before} then {value})")
        if self.mode is False:
            return False
        return key in changed or (self.mode is True and _is_argument(source))

    def describe(self):
        """What became dynamic, for logs and the recompile-limit warning."""
        parts = [f"{k} dims {sorted(v)}" for k, v in self.changed_dims.items()]
        parts += [f"int {k}" for k in sorted(self.changed_ints)]
        parts += [f"float {k}" for k in sorted(self.changed_floats)]
        return ", ".join(parts) or "nothing"


# ------------------------------------------------------------------------------------------------ guards

@functools.lru_cache(maxsize=None)
def _source_class():
    from torch._guards import GuardSource, Source

    @dataclasses.dataclass(frozen=True)
    class SymbolSource(Source):
        """Stands for input number `index` of a trace in ShapeEnv's guard expressions."""
        index: int

        @property
        def name(self):
            return f"__gj_symsrc{self.index}__"

        @property
        def guard_source(self):
            return GuardSource.LOCAL

    return SymbolSource


def torch_source(index):
    return _source_class()(index)


_TOKEN = re.compile(r"__gj_symsrc(\d+)__")
FINITE = "math.isfinite({0})"           # the guard on each symbolic float input
NOT_NAN = "not math.isnan({0})"         # the ShapeEnv's own guard on one


def shape_guards(shape_env, inputs):
    """[(template, sources, reason)]: the ShapeEnv's guards over `inputs` ([(fake tensor or SymInt,
    source, its symbolic context or None)], each made with torch_source(its position)) as GuardSet
    templates ({0}, {1} ... for the sources). Raises torch's ConstraintViolationError where a dim marked
    with mark_dynamic was specialized."""
    if not inputs:
        return []
    values = [v for v, _, _ in inputs]
    contexts = [c if c is not None else _plain_context(v) for v, _, c in inputs]
    # ignore_static=False: a dim that was symbolic when its input was wrapped but that the trace then
    # specialized (`x.reshape(2, 3)`) is guarded here; the tensor's own guard left it unchecked
    try:
        exprs = shape_env.produce_guards(values, [torch_source(i) for i in range(len(inputs))],
                                         source_ref=lambda s: s.name, ignore_static=False,
                                         input_contexts=contexts)
    except Exception as e:    # noqa: BLE001 -- torch's message, with our sources' names in it
        raise ValueError(_TOKEN.sub(lambda m: inputs[int(m.group(1))][1].expr(), str(e))) from e
    out = []
    for value, source, _ in inputs:
        if isinstance(value, torch.SymFloat):
            # the ShapeEnv reasons about its float symbols as finite reals (Eq(s, oo) is False, s - s is 0)
            # and guards only `not isnan(s)`: an infinity must not reach the entry either
            out.append((FINITE, (source,), f"{source.expr()} is finite"))
    for expr in exprs:
        used = []

        def slot(m):
            i = int(m.group(1))
            if i not in used:
                used.append(i)
            return "{" + str(used.index(i)) + "}"
        template = _TOKEN.sub(slot, expr.replace("{", "{{").replace("}", "}}"))
        sources = tuple(inputs[i][1] for i in used)
        reason = _TOKEN.sub(lambda m: inputs[int(m.group(1))][1].expr(), expr)
        out.append((template, sources, reason))
    return out


def _plain_context(value):
    """The context produce_guards assumes for an input made without one (an int: none at all)."""
    if not isinstance(value, torch.Tensor):
        return None
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
    return StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * value.dim(),
                                    dynamic_strides=[DimDynamic.INFER_STRIDE] * value.dim(),
                                    constraint_sizes=[None] * value.dim(), constraint_strides=[None] * value.dim())


def guard_namespace():
    """Names ShapeEnv's Python guard expressions may call (Max, Min, FloorDiv printed as Python ...)."""
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP
    return dict(SYMPY_INTERP)


def symbolic_context(t, dims, marks):
    """The StatelessSymbolicContext making `dims` of `t` symbolic (with mark_dynamic's bounds)."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext, StrictMinMaxConstraint
    from torch.utils._sympy.value_ranges import ValueRanges
    import sympy
    sizes, constraints = [], []
    for d in range(t.dim()):
        sizes.append(DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC)
        if d in marks:
            lo, hi = marks[d]
            constraints.append(StrictMinMaxConstraint(
                warn_only=False,
                vr=ValueRanges(lower=2 if lo is None else lo, upper=sympy.oo if hi is None else hi)))
        else:
            constraints.append(None)
    return StatelessSymbolicContext(dynamic_sizes=sizes, dynamic_strides=[DimDynamic.INFER_STRIDE] * t.dim(),
                                    constraint_sizes=constraints, constraint_strides=[None] * t.dim())
