"""Tuples, lists, torch.Size, namedtuples, dicts, sets, slices and iterators."""
import collections

from .base import Variable, ConstantVariable, NotConstant, unsupported


def constant_key(tx, var):
    """A dict key or set member must be a Python constant at trace time."""
    try:
        return var.as_python_constant()
    except NotConstant:
        pass
    hashable = getattr(var, "identity_key", None)
    if hashable is not None:
        return hashable()
    unsupported(f"{var} used as a dict key or set member")


class BaseListVariable(Variable):
    python_cls = list
    mutable = False

    def __init__(self, items, source=None):
        self.items = list(items)
        self.source = source

    def python_type(self):
        return self.python_cls

    def as_python_constant(self):
        return self.python_cls(v.as_python_constant() for v in self.items)

    def unpack(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def getitem(self, tx, index):
        from .builder import wrap_constant_result
        idx = index.as_python_constant()
        if isinstance(idx, slice):
            return self.new(self.items[idx])
        try:
            return self.items[idx]
        except IndexError as e:
            from ...exc import UserError
            raise UserError(e)

    def new(self, items):
        """A value of the same kind, built in the frame (no source)."""
        return type(self)(items) if type(self) is not NamedTupleVariable else TupleVariable(items)

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, "method_" + name, None)
        if handler is None:
            unsupported(f"method {name!r} of {self.python_cls.__name__}")
        return handler(tx, *args, **kwargs)

    def method___getitem__(self, tx, index):
        return self.getitem(tx, index)

    def method___len__(self, tx):
        return ConstantVariable(len(self.items))

    def method___contains__(self, tx, value):
        from .builtins import values_equal
        return ConstantVariable(any(values_equal(tx, v, value) for v in self.items))

    def method_index(self, tx, value):
        from .builtins import values_equal
        for i, v in enumerate(self.items):
            if values_equal(tx, v, value):
                return ConstantVariable(i)
        unsupported(f"{value} not in {self}")

    def method_count(self, tx, value):
        from .builtins import values_equal
        return ConstantVariable(sum(values_equal(tx, v, value) for v in self.items))

    def reconstruct(self, cg):
        if self.source is not None and not self.mutable:
            return self.source.expr()
        inner = ", ".join(cg.expr(v) for v in self.items)
        if self.python_cls is tuple:
            return f"({inner},)" if len(self.items) == 1 else f"({inner})"
        return f"[{inner}]"

    def __repr__(self):
        return f"{self.python_cls.__name__}({self.items!r})"


class TupleVariable(BaseListVariable):
    python_cls = tuple


class SizeVariable(TupleVariable):
    """torch.Size: its items are Variables (constants today, symbolic sizes later)."""
    import torch as _torch
    python_cls = _torch.Size

    def new(self, items):
        return SizeVariable(items)

    def method_numel(self, tx):
        n = 1
        for v in self.items:
            n *= v.as_python_constant()
        return ConstantVariable(n)

    def reconstruct(self, cg):
        return f"{cg.obj(self.python_cls)}([{', '.join(cg.expr(v) for v in self.items)}])"


class NamedTupleVariable(TupleVariable):
    """A namedtuple or a torch.return_types structseq."""

    def __init__(self, items, cls, source=None):
        super().__init__(items, source)
        self.python_cls = cls

    def fields(self):
        fields = getattr(self.python_cls, "_fields", None)
        if fields is None:
            fields = getattr(self.python_cls, "__match_args__", ())
        return tuple(fields)

    def as_python_constant(self):
        values = [v.as_python_constant() for v in self.items]
        if hasattr(self.python_cls, "_make"):
            return self.python_cls._make(values)
        return self.python_cls(values)

    def getattr(self, tx, name):
        fields = self.fields()
        if name in fields:
            return self.items[fields.index(name)]
        if name == "_fields":
            return ConstantVariable(fields)
        if name in ("_replace", "_asdict", "index", "count"):
            from .base import MethodOf
            return MethodOf(self, name)
        from .builder import wrap_class_attribute
        return wrap_class_attribute(tx, self, self.python_cls, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "_asdict":
            return DictVariable({k: v for k, v in zip(self.fields(), self.items)})
        if name == "_replace":
            items = list(self.items)
            for k, v in kwargs.items():
                items[self.fields().index(k)] = v
            return NamedTupleVariable(items, self.python_cls)
        if hasattr(BaseListVariable, "method_" + name):
            return super().call_method(tx, name, args, kwargs)
        return self.getattr(tx, name).call(tx, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.expr()
        inner = ", ".join(cg.expr(v) for v in self.items)
        if hasattr(self.python_cls, "_make"):
            return f"{cg.obj(self.python_cls)}({inner})"
        return f"{cg.obj(self.python_cls)}(({inner},))"


class ListVariable(BaseListVariable):
    python_cls = list
    mutable = True

    def _check_mutable(self, tx):
        tx.side_effects.mark_mutated(self)

    def method_append(self, tx, value):
        self._check_mutable(tx)
        self.items.append(value)
        return ConstantVariable(None)

    def method_extend(self, tx, values):
        self._check_mutable(tx)
        self.items.extend(values.unpack(tx))
        return ConstantVariable(None)

    def method_insert(self, tx, index, value):
        self._check_mutable(tx)
        self.items.insert(index.as_python_constant(), value)
        return ConstantVariable(None)

    def method_pop(self, tx, index=None):
        self._check_mutable(tx)
        return self.items.pop(-1 if index is None else index.as_python_constant())

    def method_remove(self, tx, value):
        self._check_mutable(tx)
        self.items.pop(self.method_index(tx, value).value)
        return ConstantVariable(None)

    def method_clear(self, tx):
        self._check_mutable(tx)
        self.items.clear()
        return ConstantVariable(None)

    def method_reverse(self, tx):
        self._check_mutable(tx)
        self.items.reverse()
        return ConstantVariable(None)

    def method_copy(self, tx):
        return ListVariable(self.items)

    def method_sort(self, tx, key=None, reverse=None):
        self._check_mutable(tx)
        from .builtins import sorted_items
        self.items[:] = sorted_items(tx, self.items, key, reverse)
        return ConstantVariable(None)

    def method___setitem__(self, tx, index, value):
        self._check_mutable(tx)
        idx = index.as_python_constant()
        if isinstance(idx, slice):
            self.items[idx] = value.unpack(tx)
        else:
            self.items[idx] = value
        return ConstantVariable(None)

    def method___delitem__(self, tx, index):
        self._check_mutable(tx)
        del self.items[index.as_python_constant()]
        return ConstantVariable(None)

    def method___iadd__(self, tx, other):
        self.method_extend(tx, other)
        return self

    def reconstruct(self, cg):
        if self.source is not None:   # mutations (if any) are replayed on the real list first
            return self.source.expr()
        return super().reconstruct(cg)


class DictVariable(Variable):
    """A dict with constant keys. `items` maps the Python key to a Variable, in insertion order."""

    def __init__(self, items, source=None, python_cls=dict):
        self.items = dict(items)
        self.source = source
        self.python_cls = python_cls
        self.key_vars = {}   # key -> Variable of the key (when keys aren't plain constants)

    def python_type(self):
        return self.python_cls

    def as_python_constant(self):
        return self.python_cls((k, v.as_python_constant()) for k, v in self.items.items())

    def key_var(self, k):
        return self.key_vars.get(k) or ConstantVariable(k)

    def unpack(self, tx):
        return [self.key_var(k) for k in self.items]

    def truth(self, tx):
        return bool(self.items)

    def _check_mutable(self, tx):
        tx.side_effects.mark_mutated(self)

    def getitem(self, tx, key):
        k = constant_key(tx, key)
        if k not in self.items:
            from ...exc import UserError
            raise UserError(KeyError(k))
        return self.items[k]

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, "method_" + name, None)
        if handler is None:
            unsupported(f"method {name!r} of dict")
        return handler(tx, *args, **kwargs)

    def method___getitem__(self, tx, key):
        return self.getitem(tx, key)

    def method___len__(self, tx):
        return ConstantVariable(len(self.items))

    def method___contains__(self, tx, key):
        return ConstantVariable(constant_key(tx, key) in self.items)

    def method_get(self, tx, key, default=None):
        k = constant_key(tx, key)
        if k in self.items:
            return self.items[k]
        return default if default is not None else ConstantVariable(None)

    def method_keys(self, tx):
        return ListIteratorLike(self.unpack(tx), "dict_keys", self)

    def method_values(self, tx):
        return ListIteratorLike(list(self.items.values()), "dict_values", self)

    def method_items(self, tx):
        return ListIteratorLike([TupleVariable([self.key_var(k), v]) for k, v in self.items.items()],
                                "dict_items", self)

    def method___setitem__(self, tx, key, value):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        self.items[k] = value
        self.key_vars[k] = key
        return ConstantVariable(None)

    def method___delitem__(self, tx, key):
        self._check_mutable(tx)
        del self.items[constant_key(tx, key)]
        return ConstantVariable(None)

    def method_setdefault(self, tx, key, default=None):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        if k not in self.items:
            self.items[k] = default if default is not None else ConstantVariable(None)
        return self.items[k]

    def method_pop(self, tx, key, default=None):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        if k in self.items:
            return self.items.pop(k)
        if default is None:
            unsupported(f"KeyError: {k!r}")
        return default

    def method_update(self, tx, other=None, **kwargs):
        self._check_mutable(tx)
        if other is not None:
            self.merge(tx, other)
        for k, v in kwargs.items():
            self.items[k] = v
        return ConstantVariable(None)

    def merge(self, tx, other):
        if isinstance(other, ConstantVariable) and isinstance(other.value, dict):
            for k, v in other.value.items():
                self.items[k] = ConstantVariable(v)
        elif isinstance(other, DictVariable):
            self.items.update(other.items)
            self.key_vars.update(other.key_vars)
        else:
            for pair in other.unpack(tx):
                k, v = pair.unpack(tx)
                self.items[constant_key(tx, k)] = v

    def method_copy(self, tx):
        return DictVariable(self.items, python_cls=self.python_cls)

    def method_clear(self, tx):
        self._check_mutable(tx)
        self.items.clear()
        return ConstantVariable(None)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.expr()
        inner = ", ".join(f"{cg.expr(self.key_var(k))}: {cg.expr(v)}" for k, v in self.items.items())
        if self.python_cls is dict:
            return "{" + inner + "}"
        return f"{cg.obj(self.python_cls)}({{{inner}}})"

    def __repr__(self):
        return f"dict({self.items!r})"


class SetVariable(DictVariable):
    """A set of constants: a dict whose values are unused."""

    def __init__(self, members, source=None):
        super().__init__({m: ConstantVariable(None) for m in members}, source, python_cls=set)

    def as_python_constant(self):
        return set(self.items)

    def method_add(self, tx, value):
        self._check_mutable(tx)
        self.items[constant_key(tx, value)] = ConstantVariable(None)
        return ConstantVariable(None)

    def method_discard(self, tx, value):
        self._check_mutable(tx)
        self.items.pop(constant_key(tx, value), None)
        return ConstantVariable(None)

    def method_update(self, tx, *others):
        self._check_mutable(tx)
        for other in others:
            for v in other.unpack(tx):
                self.items[constant_key(tx, v)] = ConstantVariable(None)
        return ConstantVariable(None)

    def reconstruct(self, cg):
        if not self.items:
            return "set()"
        return "{" + ", ".join(cg.const(k) for k in self.items) + "}"


class ListIteratorLike(BaseListVariable):
    """dict views and other read-only sequences made in the frame (iterable, len, in)."""

    def __init__(self, items, kind="list_iterator", origin=None):
        super().__init__(items)
        self.kind = kind
        self.origin = origin      # the DictVariable a dict view belongs to

    def reconstruct(self, cg):
        if self.origin is not None and self.kind in ("dict_keys", "dict_values", "dict_items"):
            return f"{cg.expr(self.origin)}.{self.kind[5:]}()"
        return f"({', '.join(cg.expr(v) for v in self.items)},)"


class IteratorVariable(Variable):
    """The result of GET_ITER / iter(): items are produced at trace time, one per FOR_ITER."""

    def __init__(self, items):
        self.items = list(items)
        self.index = 0

    def next(self, tx):
        if self.index >= len(self.items):
            return None
        value = self.items[self.index]
        self.index += 1
        return value

    def unpack(self, tx):
        rest = self.items[self.index:]
        self.index = len(self.items)
        return rest

    def reconstruct(self, cg):
        """The remaining items, as a real iterator (built once: see ReturnCodegen.expr)."""
        return f"iter([{', '.join(cg.expr(v) for v in self.items[self.index:])}])"

    def __repr__(self):
        return f"iterator({self.items[self.index:]!r})"


class SliceVariable(Variable):
    def __init__(self, start, stop, step):
        self.parts = (start, stop, step)

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*(p.as_python_constant() for p in self.parts))

    def __repr__(self):
        return f"slice{self.parts!r}"
