"""Mutations of Python state made during a captured region, replayed after the graph runs.

Reads during the trace see the pending values; the entry function applies the final values after the
graph call, in the order they were first made. If the graph raises, nothing has been applied yet, so a
failure never leaves state half-applied. Every value and target an effect needs is read before the first
effect is applied: a Variable read through a source (`d['k']`, `box.a`) stands for what was there when the
frame started, which an earlier effect may replace (`setattr(box, 'a', d['k']); d['k'] = u`).

    self.calls += 1          ->  setattr(self, 'calls', 4)            (attribute store on an input object)
    cfg_list.append(t)       ->  cfg_list[:] = [..., __gj_out[0]]     (outside list mutated in place)
    global STEP; STEP += 1   ->  __gj_G['STEP'] = 8
"""
import ast
import re

from .variables.base import unsupported

_DELETED = object()      # the attribute existed when the frame started (guarded); the frame deleted it
_DISCARDED = object()    # the frame stored the attribute, then deleted it: absent after the frame, either way


class SideEffects:
    def __init__(self):
        # (id(obj), name) -> (obj_var, value_var or _DELETED or _DISCARDED, raw, removed first): raw stores
        # are object.__setattr__'s (a class's own __setattr__ already ran in the trace), replayed without
        # it; a store after a delete in the frame replays that delete first (_DELETED or _DISCARDED, else
        # None), so the attribute goes to the end of the instance dict as in CPython
        self.attr_stores = {}
        self.global_stores = {}      # name -> value_var
        self.cell_stores = {}        # id(cell) -> (cell_var, value_var)
        self.mutated = {}            # id(var) -> container Variable with a source, mutated in place
        self.deferred_calls = []     # (callable Variable, args, kwargs): logging calls run after the graph
        self.keepalive = []
        self._events = 0             # effects recorded so far: orders attribute stores and deferred calls
        self._store_span = {}        # (id(obj), name) -> (real obj, first event, last event) of its stores
        self._call_events = []       # the event count at each deferred call

    # ---- attributes of objects that came from outside ----
    def store_attr(self, obj_var, real_obj, name, value, raw=False):
        self.keepalive.append(real_obj)
        key = (id(real_obj), name)
        self._events += 1
        first = self._store_span.get(key, (None, self._events))[1]
        self._store_span[key] = (real_obj, first, self._events)
        prior = self.attr_stores.get(key)
        removed = None if prior is None else prior[1] if _is_delete(prior[1]) else prior[3]
        if prior is not None and _is_delete(prior[1]):
            del self.attr_stores[key]      # replayed in the order CPython re-adds it to the instance dict
        self.attr_stores[key] = (obj_var, value, raw, removed)

    def delete_attr(self, obj_var, real_obj, name, raw=False):
        """Record `del obj.name`. The caller has checked that the attribute exists: stored earlier in the
        frame (attr_present says so), or present on the real object and guarded so."""
        self.keepalive.append(real_obj)
        self._events += 1
        stored = self.attr_present(real_obj, name)
        self.attr_stores[(id(real_obj), name)] = (obj_var, _DISCARDED if stored else _DELETED, raw, None)

    def pending_attr(self, real_obj, name):
        """(found, value Variable) for an attribute stored earlier in the trace."""
        hit = self.attr_stores.get((id(real_obj), name))
        if hit is None:
            return False, None
        if _is_delete(hit[1]):
            from .variables.builtins import AttributeMissing
            raise AttributeMissing(f"attribute {name!r} was deleted")
        return True, hit[1]

    def has_attr_stores(self, real_obj):
        """Whether the trace stored or deleted any attribute of real_obj."""
        return any(key[0] == id(real_obj) for key in self.attr_stores)

    def attr_present(self, real_obj, name):
        """None where the frame neither stored nor deleted obj.name; else whether it holds a value now."""
        hit = self.attr_stores.get((id(real_obj), name))
        return None if hit is None else not _is_delete(hit[1])

    # ---- globals and closure cells ----
    def store_global(self, name, value):
        self._events += 1
        self.global_stores[name] = value

    def pending_global(self, name):
        return self.global_stores.get(name)

    def store_cell(self, cell_var, value):
        self._events += 1
        self.cell_stores[id(cell_var)] = (cell_var, value)

    # ---- containers read from outside, mutated in place ----
    def mark_mutated(self, container_var):
        if container_var.source is None:
            return
        self._events += 1
        self.mutated[id(container_var)] = container_var

    def defer_call(self, fn, args, kwargs):
        self._call_events.append(self._events)
        self.deferred_calls.append((fn, args, kwargs))

    def drop_restored_stores(self, guards):
        """Drop the attribute stores that put back the constant the attribute held when the frame started
        (`self.compiling = True ... self.compiling = False`, a context variable's set and reset), guarding
        that value, when no deferred call ran between the first and the last of them: the object after the
        frame and at each deferred call is as it was. Only plain instance attributes (no data descriptor, no
        custom __setattr__) of objects with a source."""
        from .sources import AttrSource
        restored = []
        for key, (obj_var, value, raw, removed) in self.attr_stores.items():
            real, first, last = self._store_span.get(key, (None, 0, 0))
            name = key[1]
            if (real is None or removed is not None or _is_delete(value) or not value.is_constant()
                    or getattr(obj_var, "source", None) is None or not _plain_attribute(real, name, raw)):
                continue
            before = vars(real).get(name, _DELETED)
            if before is _DELETED or not _same_constant(before, value.as_python_constant()):
                continue
            restored.append((key, obj_var, name, before, first, last))
        if not restored:
            return
        start, end = min(r[4] for r in restored), max(r[5] for r in restored)
        if any(start <= e < end for e in self._call_events):
            return
        for key, obj_var, name, before, _, _ in restored:
            guards.add_equals(AttrSource(obj_var.source, name), before)
            del self.attr_stores[key]

    def recorded(self):
        """A count of what has been recorded so far: it changes with every new effect."""
        return self._events, len(self.deferred_calls)

    def only_deferred_calls(self):
        return not (self.attr_stores or self.global_stores or self.cell_stores or self.mutated)

    def is_empty(self):
        return not (self.attr_stores or self.global_stores or self.cell_stores or self.mutated or
                    self.deferred_calls)

    # ---- codegen ----
    def replay_lines(self, cg):
        """Python lines applying every effect, values reconstructed through `cg` (tensors -> outputs):
        first the reads (every value and target, bound to temps), then the writes."""
        read = _Reads(cg)
        writes = []
        for var in self.mutated.values():
            writes += _container_writes(var, read)
        for (_, name), (obj_var, value, raw, removed) in self.attr_stores.items():
            target = read(obj_var.reconstruct(cg))
            if removed is not None:
                writes.append(_attr_write(target, name, removed, raw, read))
            writes.append(_attr_write(target, name, value, raw, read))
        for name, value in self.global_stores.items():
            writes.append(f"__gj_G[{name!r}] = {read.expr(value)}")
        for cell_var, value in self.cell_stores.values():
            writes.append(f"{read(cell_var.source.expr())}.cell_contents = {read.expr(value)}")
        for fn, args, kwargs in self.deferred_calls:
            arguments = [read.expr(a) for a in args] + [f"{k}={read.expr(v)}" for k, v in kwargs.items()]
            writes.append(f"{read.expr(fn)}({', '.join(arguments)})")
        return read.lines + writes


class _Reads:
    """Binds each expression an effect reads to a temp (`__gj_r0 = d['k']`), to run before any write.
    Names (parameters, temps, graph outputs) and literals are left as they are: no effect rebinds them."""

    def __init__(self, cg):
        self.cg = cg
        self.lines = []

    def __call__(self, text):
        if _STABLE.fullmatch(text) or _is_literal(text):
            return text
        name = f"__gj_r{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return name

    def expr(self, var):
        return self(self.cg.expr(var))


_STABLE = re.compile(r"[A-Za-z_]\w*|__gj_out\[\d+\]")


def _is_literal(text):
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _container_writes(var, read):
    """Lines giving a mutated outside container its final contents."""
    target = read(var.source.expr())
    if hasattr(var, "replay_lines"):              # a set: its own operations, in order
        return var.replay_lines(target, read)
    if var.python_type() in (list,):
        return [f"{target}[:] = [{', '.join(read.expr(v) for v in var.items)}]"]
    if issubclass(var.python_type(), dict):
        items = ", ".join(f"{read.expr(var.key_var(k))}: {read.expr(v)}" for k, v in var.items.items())
        contents = read(f"{{{items}}}")
        return [f"{target}.clear()", f"{target}.update({contents})"]
    unsupported(f"replaying a mutation of {var}")


def _plain_attribute(obj, name, raw):
    """Whether obj.name lives in obj's instance dict, read and written without any class code."""
    import inspect
    cls = type(obj)
    if not isinstance(getattr(obj, "__dict__", None), dict) or name not in vars(obj):
        return False
    if not raw and cls.__setattr__ is not object.__setattr__:
        return False
    if cls.__getattribute__ is not object.__getattribute__:
        return False
    descriptor = inspect.getattr_static(cls, name, None)
    return not hasattr(type(descriptor), "__set__") and not hasattr(type(descriptor), "__delete__")


def _same_constant(a, b):
    """a and b are the same constant: one type, equal, and the same repr (-0.0 is not 0.0)."""
    return type(a) is type(b) and (a is b or (type(a) in (int, str, bool, float, bytes, type(None))
                                                and a == b and repr(a) == repr(b)))


def _is_delete(value):
    return value is _DELETED or value is _DISCARDED


def _attr_write(target, name, value, raw, read):
    delete = "object.__delattr__" if raw else "delattr"
    if value is _DELETED:
        return f"{delete}({target}, {name!r})"
    if value is _DISCARDED:
        return f"__gj_discard_attr({delete}, {target}, {name!r})"
    return f"{'object.__setattr__' if raw else 'setattr'}({target}, {name!r}, {read.expr(value)})"


def discard_attr(delete, obj, name):
    """`delete(obj, name)` for an attribute the frame stored, then deleted: it may not have existed
    before the frame, and is absent after it. object.__delattr__ and nn.Module.__delattr__ (the two
    `delete`s) raise AttributeError only for an absent attribute."""
    try:
        delete(obj, name)
    except AttributeError:
        pass
