"""Guards: the assumptions a trace made, compiled into one Python check per cache entry.

Each guard is a boolean Python expression over sources (see sources.py) plus the objects it compares
against, which live in the check function's namespace. Guards are ordered cheapest first: global state,
identities and types, then constants, then tensor metadata. The check runs on every call, so its cost is
graphjit's per-call overhead.

    >>> g = GuardSet()
    >>> g.add_type(LocalSource("x"), int); g.add_equals(LocalSource("x"), 3)
    >>> g.expressions()
    ['type(x) is __gj_o0', 'x == 3']
"""
import dataclasses

import torch

from .sources import ItemSource, Source

# Cost classes: lower runs first.
STATE, IDENTITY, TYPE, CONSTANT, LENGTH, TENSOR = range(6)

_REPR_SAFE = (int, float, str, bool, type(None), bytes)

_ABSENT = object()


def same_constant(a, b):
    """Whether a and b are equal and of the same types all the way down: == takes 1, 1.0 and True for one
    another, 0.0 for -0.0, and range(0, 3, 2) for range(0, 4, 2) (ranges compare their elements), where a
    trace that reads their type, sign or bounds would differ. Floats: same value and sign (NaN: NaN). A
    set and a frozenset compare by their members."""
    if type(a) is not type(b) and not (type(a) in (set, frozenset) and type(b) in (set, frozenset)):
        return False
    if type(a) is float:
        return a == b and str(a)[0] == str(b)[0] or a != a and b != b
    if type(a) is complex:
        return str(a) == str(b)
    if type(a) is tuple:
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    if type(a) in (frozenset, set):
        if a != b:
            return False
        members = list(b)
        return all(any(x == y and same_constant(x, y) for y in members) for x in a)
    if type(a) is range:
        return (a.start, a.stop, a.step) == (b.start, b.stop, b.step)
    if type(a) is slice:
        return all(same_constant(x, y) for x, y in ((a.start, b.start), (a.stop, b.stop), (a.step, b.step)))
    return a == b


def _needs_same_constant(value):
    """Whether == may take another value for `value` (see same_constant)."""
    if type(value) in (str, bytes, type(None)):
        return False
    if type(value) is tuple:
        return any(_needs_same_constant(v) for v in value)
    return True


def lit(value):
    """repr(value) for a guard template: braces doubled, so that the template's format() keeps a string's
    own braces ("{0}" in a user's string is text, not a source)."""
    return repr(value).replace("{", "{{").replace("}", "}}")


@dataclasses.dataclass(frozen=True)
class Guard:
    cost: int
    template: str      # the check, as Python source with {0}, {1} ... standing for the sources' values
    sources: tuple     # the Sources the check reads
    reason: str        # human readable, e.g. "x.shape == (2, 3)"
    tensor: bool = False   # one of add_tensor's checks: the entry may run them all as one batched check

    @property
    def expr(self):
        return self.template.format(*(s.expr() for s in self.sources))

    @property
    def depth(self):
        return max((s.depth() for s in self.sources), default=-1)


class GuardSet:
    def __init__(self):
        self.guards = {}          # (template, sources) -> Guard (dedup, insertion order)
        self.objects = {}         # namespace name -> object referenced by guard expressions
        self._object_names = {}   # id(obj) -> name
        self.tensors = {}         # Source -> the example tensor add_tensor guarded (for batched checks)
        # Source -> (object, its instance dict at the first read, {attribute names read, whose values are
        # immutable}) for objects whose class has a Python __getattribute__ (transformers' configs): see
        # snapshot_guards()
        self.snapshots = {}
        # Source -> (tuple of immutable scalars read there while tracing, its namespace name): the entry
        # checks `value is that tuple` first and runs the guards on it and its items only when it is not
        self.immutable = {}
        self._roots = {}          # Source -> immutable_root(source), while self.immutable is unchanged
        self.key_sets = {}        # Source -> keys of a dict checked as a set (add_key_set)

    def note_immutable(self, source, value):
        """Tracing read the tuple `value` (ints, floats, strings ... all the way down) at `source`: a
        conv's stride, padding and dilation. The same object there next time means the same contents."""
        name = f"__gj_o{len(self.objects)}"
        self.objects[name] = value      # this very object, not an equal one (obj() shares equal tuples)
        self.immutable[source] = (value, name)
        self._roots.clear()

    def immutable_root(self, source):
        """The shallowest source in source's chain (itself included) holding a noted immutable tuple
        (memoized per source until the next note_immutable: the entry asks for every guard's source, and
        those share long chains of bases)."""
        if not self.immutable:
            return None
        roots = self._roots
        found = roots.get(source, _ABSENT)
        if found is _ABSENT:
            base = getattr(source, "base", None)
            found = self.immutable_root(base) if base is not None else None
            if found is None and source in self.immutable:
                found = source
            roots[source] = found
        return found

    def obj(self, value) -> str:
        """A name under which `value` is visible to the check function (equal tuples share one)."""
        # equal tuples of the same types (repr tells (1,) from (1.0,), (True,) and (0.0,) from (-0.0,))
        key = ("tuple", repr(value)) if type(value) is tuple and _hashable(value) else id(value)
        if key not in self._object_names:
            name = f"__gj_o{len(self.objects)}"
            self._object_names[key] = name
            self.objects[name] = value
        return self._object_names[key]

    def add(self, cost, template, reason=None, sources=(), tensor=False):
        key = (template, tuple(sources))
        if key not in self.guards:
            guard = Guard(cost, template, tuple(sources), reason, tensor)
            if reason is None:
                guard = dataclasses.replace(guard, reason=guard.expr)
            self.guards[key] = guard

    def discard(self, template, sources=()):
        """Drop a guard that a stronger one added later makes redundant."""
        self.guards.pop((template, tuple(sources)), None)

    def add_type(self, source: Source, typ):
        self.add(TYPE, f"type({{0}}) is {self.obj(typ)}", f"type({source.expr()}) is {typ.__qualname__}",
                 (source,))

    def add_id(self, source: Source, value):
        self.add(IDENTITY, f"{{0}} is {self.obj(value)}", f"{source.expr()} is {_short(value)}", (source,))

    def add_same_tuple(self, source: Source, value):
        """`{0} is value` for a tuple: this very object (obj() would share it with an equal tuple)."""
        name = self.same_object(value)
        self.add(IDENTITY, f"{{0}} is {name}", f"{source.expr()} is the tuple seen while tracing", (source,))

    def add_module_attr(self, module, name, value):
        """`module.name is value`, for an attribute read from a module without a source (torch's and the
        standard library's: F.gelu, torch.special.expit, math.sqrt). Replacing it (monkeypatching) is a
        miss. One guard per (module, name), however often the frame reads it: an identity test on the
        entry of the module's __dict__ (a module's __dict__ is never replaced), ~25 ns; an attribute the
        dict doesn't hold (a module __getattr__, a class attribute of a module subclass) is read with
        getattr, or, where each read makes a new object, checked to be made the same way."""
        namespace = module.__dict__
        label = f"{getattr(module, '__name__', module)}.{name}"
        if namespace.get(name, _ABSENT) is value:
            template = self._entry_is(namespace, name, value)
        elif getattr(module, name, _ABSENT) is value:
            template = f"getattr({self.obj(module)}, {name!r}) is {self.same_object(value)}"
        else:   # a new object on each read (a module __getattr__, a method of a module subclass): made the
            # same way, by the module's own __getattr__ or its class, while the dict doesn't hold the name
            maker = self._entry_is(namespace, "__getattr__", namespace["__getattr__"]) \
                if "__getattr__" in namespace else f"type({self.obj(module)}) is {self.obj(type(module))}"
            self.add(IDENTITY, f"{lit(name)} not in {self.obj(namespace)} and {maker}",
                     f"{label} is made anew on each read, the same way")
            return
        self.add(IDENTITY, template, f"{label} is {_short(value)}")

    def add_builtin(self, f_globals, f_builtins, name, value):
        """A builtin read by LOAD_GLOBAL: still not shadowed by a global of that name, and the same object
        in the builtins (`builtins.len = ...` is a miss)."""
        self.add(IDENTITY, f"{lit(name)} not in {self.obj(f_globals)} and {self._entry_is(f_builtins, name, value)}",
                 f"builtin {name} is {_short(value)}, not shadowed by a global")

    def _entry_is(self, namespace, name, value):
        return f"{self.obj(namespace)}[{name!r}] is {self.same_object(value)}"

    def same_object(self, value) -> str:
        """A name for this very object (obj() lets equal tuples share one)."""
        if type(value) is not tuple:
            return self.obj(value)
        key = ("same", id(value))
        if key not in self._object_names:
            self._object_names[key] = f"__gj_o{len(self.objects)}"
            self.objects[self._object_names[key]] = value
        return self._object_names[key]

    def add_equals(self, source: Source, value):
        if value is None or isinstance(value, bool):
            self.add(IDENTITY, f"{{0}} is {lit(value)}", None, (source,))
            return
        self.add_type(source, type(value))
        self.add_zero_sign(source, value)
        if isinstance(value, _REPR_SAFE) and not (isinstance(value, float) and value != value):
            self.add(CONSTANT, f"{{0}} == {lit(value)}", None, (source,))
        elif isinstance(value, float):  # NaN: equal to nothing, itself included
            self.add(CONSTANT, "{0} != {0}", f"{source.expr()} is nan", (source,))
        elif type(value) in (range, slice, tuple, frozenset):
            self.add(CONSTANT, f"{self.obj(same_constant)}({{0}}, {self.obj(value)})",
                     f"{source.expr()} == {value!r}", (source,))
        else:
            self.add(CONSTANT, f"{{0}} == {self.obj(value)}", f"{source.expr()} == {value!r}", (source,))

    def add_zero_sign(self, source: Source, value):
        """A float zero's sign too: -0.0 == 0.0, but 1 / -0.0 is -inf."""
        if isinstance(value, complex) and (value.real == 0 or value.imag == 0):
            self.add(CONSTANT, f"str({{0}}) == {lit(str(value))}", f"{source.expr()} is {value!r}", (source,))
        elif isinstance(value, float) and value == 0 or type(value).__module__ == "numpy" and \
                getattr(value, "dtype", None) is not None and value.dtype.kind == "f" and value == 0:
            negative = str(value).startswith("-")
            self.add(CONSTANT, f"str({{0}}).startswith('-') is {negative}", f"{source.expr()} is {value!r}",
                     (source,))

    def add_len(self, source: Source, n):
        self.add(LENGTH, f"len({{0}}) == {n}", None, (source,))

    def add_keys(self, source: Source, keys):
        """The dict at `source` has these keys, in this order; keys other than strings of the same types
        too (same_constant: a dict keyed 1.0 or True is not one keyed 1)."""
        keys = tuple(keys)
        if _needs_same_constant(keys):
            self.add(LENGTH, f"{self.obj(same_constant)}(tuple({{0}}), {self.obj(keys)})",
                     f"tuple({source.expr()}) == {keys!r}", (source,))
        else:
            self.add(LENGTH, f"tuple({{0}}) == {self.obj(keys)}", f"tuple({source.expr()}) == {keys!r}",
                     (source,))

    def add_key_set(self, source: Source, keys):
        """The dict at `source` has exactly these keys, in any order (membership: which of a module's
        _parameters, _buffers and _modules holds a name). Checked as `len(d) == n`, 4x cheaper than
        comparing the keys: the entry reads each key it loads anyway (a missing one raises, which is a
        miss), and add_membership_guards adds an `in` check for the keys it doesn't read."""
        self.key_sets.setdefault(source, set()).update(keys)
        self.add(LENGTH, f"len({{0}}) == {len(keys)}", f"{source.expr()} has the keys {sorted(keys)}", (source,))

    def add_membership_guards(self, input_sources=(), skipped=()):
        """For add_key_set's dicts: an `in` check of each key that neither a guard nor a graph input reads
        through on every call (those reads fail on a missing key, which is a miss). Guards in `skipped`
        (not emitted: covered by a snapshot) read nothing; a guard under an immutable root reads only the
        root's chain (its own check runs only when the root's identity test fails). Dicts whose keys an
        ordered add_keys guard compares need none. Run once, when the entry is built."""
        read, starts = set(), list(input_sources)
        for g in list(self.guards.values()):
            if g in skipped:
                continue
            root = self.immutable_root(g.sources[0]) if len(g.sources) == 1 else None
            starts += [root] if root is not None else list(g.sources)
        for source in starts:
            while source is not None and source not in read:
                read.add(source)
                source = getattr(source, "base", None)
        ordered = {g.sources[0] for g in self.guards.values() if g.template.startswith("tuple(") and g.sources}
        for source, keys in self.key_sets.items():
            if source in ordered:
                continue
            for key in sorted(keys, key=repr):
                if ItemSource(source, key) not in read:
                    self.add(LENGTH, f"{lit(key)} in {{0}}", None, (source,))

    def add_tensor(self, source: Source, t: torch.Tensor, fake=None):
        """type, dtype, device, shape, stride and requires_grad of a tensor graph input. Sizes and strides
        that are symbolic in `fake` (dynamic dims) are left to the ShapeEnv's guards."""
        e = source.expr()
        sizes, strides = _static_or_none(fake.shape if fake is not None else t.shape), \
            _static_or_none(fake.stride() if fake is not None else t.stride())
        self.tensors[source] = (t, sizes, strides)
        self.add(TYPE, f"type({{0}}) is {self.obj(type(t))}", f"type({e}) is {type(t).__name__}", (source,),
                 tensor=True)
        checks = [
            (f"{{0}}.dtype is {self.obj(t.dtype)}", f"{e}.dtype is {t.dtype}"),
            (f"{{0}}.device == {self.obj(t.device)}", f"{e}.device == {t.device}"),
            (f"{{0}}.requires_grad is {t.requires_grad!r}", None),
            (f"{{0}}.is_neg() is {t.is_neg()!r} and {{0}}.is_conj() is {t.is_conj()!r}", None),   # dispatch keys
        ]
        if None not in sizes:
            checks.append((f"{{0}}.shape == {tuple(t.shape)!r}", f"{e}.shape == {tuple(t.shape)}"))
        else:
            checks.append((f"{{0}}.dim() == {t.dim()}", None))
            checks += [(f"{{0}}.size({d}) == {s}", None) for d, s in enumerate(sizes) if s is not None]
        if None not in strides:
            checks.append((f"{{0}}.stride() == {t.stride()!r}", f"{e}.stride() == {t.stride()}"))
        else:
            checks += [(f"{{0}}.stride({d}) == {s}", None) for d, s in enumerate(strides) if s is not None]
        for template, reason in checks:
            self.add(TENSOR, template, reason, (source,), tensor=True)

    def add_state(self, expr, reason):
        self.add(STATE, expr.replace("{", "{{").replace("}", "}}"), reason)

    def note_attribute(self, base: Source, obj, name, value):
        """Tracing read `obj.name` (== value) through obj's Python __getattribute__. The instance dict is
        copied at the first such read: the state the trace saw, whatever changes before the entry is built
        (another thread, a backend)."""
        if base not in self.snapshots:
            self.snapshots[base] = (obj, _instance_dict_copy(obj), set())
        if _immutable(value):
            self.snapshots[base][2].add(name)

    def snapshot_guards(self):
        """[(base source, snapshot dict, {name: value}, guards it covers)]. An attribute read through a
        Python __getattribute__ costs ~1 us per guard per call (a GPT-2 config: ~70 reads). When the
        object's instance dict equals the snapshot taken while tracing (one C-level dict comparison; one
        that no longer equals it when the entry is built is not used) and holds the very objects the trace
        read under the names it read (`==` alone would pass 1 for True, 1.0 for 1, -0.0 for 0.0), a lookup
        returns what it returned while tracing, so the guards on the immutable values of attributes stored
        in that dict, and the guards that an attribute is missing, need not run; where it doesn't, the
        entry runs them (this assumes the class's own attributes don't change between calls, and that its
        __getattribute__ reads the instance dict's other values only through their equality)."""
        checks = []
        for base, (obj, snapshot, names) in self.snapshots.items():
            try:
                if snapshot is None or object.__getattribute__(obj, "__dict__") != snapshot:
                    continue
            except Exception:   # noqa: BLE001 -- values that don't compare
                continue
            covered, read = [], {}
            for guard in self.guards.values():
                (source,) = guard.sources if len(guard.sources) == 1 else (None,)
                if source == base and guard.template.startswith("not hasattr("):
                    covered.append(guard)
                elif getattr(source, "base", None) == base and getattr(source, "attr", None) in names and \
                        source.attr in snapshot:
                    # only names stored in the instance dict: an alias resolved by __getattribute__
                    # (attribute_map) or a class attribute keeps its own guard
                    covered.append(guard)
                    read[source.attr] = snapshot[source.attr]
            checks.append((base, snapshot, read, covered))
        return checks

    def batched_tensor_check(self):
        """(checker, sources): one C++ check of every guarded tensor's type, dtype, device, shape, strides
        and requires_grad (torch's own TensorGuards, as torch.compile uses), ~70 ns a tensor instead of
        ~700 for the six Python checks; it also compares dispatch keys, which only makes it stricter.
        None where this torch lacks it; the entry then runs the Python checks."""
        if not self.tensors:
            return None
        try:
            from torch._C._dynamo.guards import TensorGuards
            sources = list(self.tensors)
            tensors = [self.tensors[s][0] for s in sources]
            checker = TensorGuards(*tensors, dynamic_dims_sizes=[list(self.tensors[s][1]) for s in sources],
                                   dynamic_dims_strides=[list(self.tensors[s][2]) for s in sources])
            if not checker.check(*tensors):
                return None
        except Exception:   # noqa: BLE001 -- a private API: any surprise means the plain checks
            return None
        return checker, sources

    def ordered(self):
        """Global state first; then shallower sources before deeper ones (a parent's type is checked
        before its attributes are read), cheapest first within a depth."""
        return sorted(self.guards.values(), key=GuardSet.order_key)

    @staticmethod
    def order_key(guard):
        return guard.cost != STATE, guard.depth, guard.cost

    def expressions(self):
        return [g.expr for g in self.ordered()]

    def __len__(self):
        return len(self.guards)


def _static_or_none(values):
    """Each size or stride as an int, or None where it is symbolic."""
    return tuple(None if isinstance(v, torch.SymInt) else int(v) for v in values)


def _instance_dict_copy(obj):
    """A copy of obj's instance dict, or None where it has no plain one or its values don't compare."""
    try:
        d = object.__getattribute__(obj, "__dict__")
        snapshot = dict(d)
        return snapshot if type(d) is dict and d == snapshot else None
    except Exception:   # noqa: BLE001
        return None


def _hashable(value):
    try:
        hash(value)
        return True
    except TypeError:
        return False


def _immutable(value):
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return type(value) in _REPR_SAFE or isinstance(value, (torch.dtype, torch.device))


def _short(value):
    try:      # objects that make up any attribute (torch.classes namespaces) may raise on the lookup
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    except Exception:
        name = None
    return name if isinstance(name, str) and name else f"<{type(value).__name__} at {id(value):#x}>"
