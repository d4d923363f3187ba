"""Tuples, lists, torch.Size, namedtuples, dicts, dict views, sets, slices and iterators.

Containers model CPython's exactly or refuse:
  * dict views (`d.keys()`, `d.values()`, `d.items()`) are live: they hold the dict's Variable and read it
    on every use, so a view taken before a mutation sees it.
  * iterators are lazy: `next()` pulls exactly one element from what they iterate (CPython's tp_iternext),
    so a function mapped over a list runs only for the elements asked for; an iterator over a list sees
    appends; an iterator over a dict or set raises RuntimeError when its size changed; an exhausted
    iterator stays exhausted. An iterator returned from the frame is rebuilt as the same kind of object
    in the same state (`map(f, <list_iterator at 1>)`), or refused where that is not possible.
  * dict keys and set members are Python constants, or identity keys of values hashed by identity
    (tensors, objects whose class keeps object's __hash__ and __eq__); a set keeps a real Python set of
    those keys, built by the same operations in the same order, so its iteration order is CPython's.
"""
import collections
import operator

import torch

from ...exc import UserError
from .base import Variable, ConstantVariable, NotConstant, MethodOf, unsupported
from ..sources import ItemSource


# ---------------------------------------------------------------------------------------- keys

def constant_key(tx, var):
    """The Python key standing for `var` as a dict key or set member: its value for a constant, a tuple
    of keys for a tuple, an identity key for a value hashed by identity."""
    try:
        return var.as_python_constant()
    except NotConstant:
        pass
    if type(var) is TupleVariable:
        return tuple(constant_key(tx, v) for v in var.items)
    hashable = getattr(var, "identity_key", None)
    if hashable is not None and _hashed_by_identity(var):
        return hashable()
    unsupported(f"{var} used as a dict key or set member (its hash is not known while tracing)")


def _hashed_by_identity(var):
    """Hash and == are identity: torch.Tensor (hash is id), or a class that keeps object's."""
    cls = var.python_type()
    if issubclass(cls, torch.Tensor):
        return cls.__hash__ is torch.Tensor.__hash__
    return cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__


def same_or_equal(tx, a, b):
    """PyObject_RichCompareBool(a, b, Py_EQ): identity first, then `a == b` (list `in`, index, count)."""
    from .builtins import values_equal
    return a is b or values_equal(tx, a, b)


class KeyTable:
    """The Variables of the non-constant keys of a dict or set, by their identity key."""

    def __init__(self, key_vars=None):
        self.key_vars = dict(key_vars or {})

    def note(self, k, var):
        if not var.is_constant():
            self.key_vars[k] = var

    def var(self, k):
        return self.key_vars.get(k) or ConstantVariable(k)


_ORDERED_ONLY = {"move_to_end"}       # OrderedDict's methods that dict lacks


def raise_key_error(key):
    """KeyError(key) as the frame's own exception (its argument is the key object itself)."""
    if not key.is_constant():
        unsupported(f"KeyError of {key} (the exception would hold the object)")
    raise UserError(KeyError(key.as_python_constant()))


# ---------------------------------------------------------------------------------------- sequences

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

    def make_iterator(self, tx):
        return SequenceIteratorVariable(self)

    def make_reversed(self, tx):
        return SequenceIteratorVariable(self, reverse=True)

    def truth(self, tx):
        return bool(self.items)

    def getitem(self, tx, index):
        idx = index.as_python_constant()
        if isinstance(idx, slice):
            return self.new(self.items[idx])
        try:
            return self.items[idx]
        except IndexError:
            kind = "tuple" if issubclass(self.python_type(), tuple) else "list"
            raise UserError(IndexError(f"{kind} index out of range")) from None

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

    def method___iter__(self, tx):
        return self.make_iterator(tx)

    def method___contains__(self, tx, value):
        return ConstantVariable(any(same_or_equal(tx, v, value) for v in list(self.items)))

    def method_index(self, tx, value):
        for i, v in enumerate(list(self.items)):
            if same_or_equal(tx, v, value):
                return ConstantVariable(i)
        if not value.is_constant():
            unsupported(f"{self.python_cls.__name__}.index() of a value not in it (the ValueError shows its repr)")
        message = f"{value.as_python_constant()!r} is not in list" if self.python_cls is list else \
            "tuple.index(x): x not in tuple"
        raise UserError(ValueError(message))

    def method_count(self, tx, value):
        return ConstantVariable(sum(same_or_equal(tx, v, value) for v in list(self.items)))

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
    python_cls = torch.Size

    def new(self, items):
        return SizeVariable(items)

    def method_numel(self, tx):
        from . import symbolic
        n = ConstantVariable(1)
        for v in self.items:
            if symbolic.takes_part(n, v):       # a symbolic size: the product stays symbolic
                n = symbolic.apply(tx, operator.mul, [n, v])
            else:
                n = ConstantVariable(n.as_python_constant() * v.as_python_constant())
        return n

    def reconstruct(self, cg):
        return f"{cg.obj(self.python_cls)}([{', '.join(cg.expr(v) for v in self.items)}])"


class NamedTupleVariable(TupleVariable):
    """A namedtuple or a torch.return_types structseq."""

    def __init__(self, items, cls, source=None, original=None):
        super().__init__(items, source)
        self.python_cls = cls
        # the real value it was wrapped from: a structseq that refuses new instances (sys.version_info,
        # sys.float_info) is that object as a constant
        self.original = original

    def fields(self):
        fields = getattr(self.python_cls, "_fields", None)
        if fields is None:
            fields = getattr(self.python_cls, "__match_args__", ())
        return tuple(fields)

    def as_python_constant(self):
        values = [v.as_python_constant() for v in self.items]
        if self.original is not None:
            return self.original
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

    def __init__(self, items, source=None):
        super().__init__(items, source)
        # the length of the real list when the entry starts (the entry rebuilds iterators before it replays
        # the list's mutations); a list made in the frame is built with its final items
        self.entry_length = len(self.items) if source is not None else None

    def length_when_rebuilt(self):
        return self.entry_length if self.source is not None else len(self.items)

    def _check_mutable(self, tx):
        tx.side_effects.mark_mutated(self)

    def method_append(self, tx, value):
        self._check_mutable(tx)
        self.items.append(value)
        return ConstantVariable(None)

    def method_extend(self, tx, values):
        """CPython copies an exact list or tuple first; any other iterable is pulled one item at a time,
        each appended before the next is pulled (a map over this very list sees the appends)."""
        self._check_mutable(tx)
        if type(values) in (ListVariable, TupleVariable, OutsideListVariable):
            self.items.extend(values.unpack(tx))
            return ConstantVariable(None)
        from ... import config
        iterator = make_iterator(tx, values)
        while (value := iterator.next(tx)) is not None:
            self.items.append(value)
            if len(self.items) > config.max_instructions:    # xs.extend(iter(xs)) never ends in CPython either
                unsupported(f"list.extend() grew a list past {config.max_instructions} items")
        return ConstantVariable(None)

    def method_insert(self, tx, index, value):
        self._check_mutable(tx)
        self.items.insert(index.as_python_constant(), value)
        return ConstantVariable(None)

    def method_pop(self, tx, index=None):
        self._check_mutable(tx)
        try:
            return self.items.pop(-1 if index is None else index.as_python_constant())
        except IndexError as e:
            raise UserError(e)

    def method_remove(self, tx, value):
        self._check_mutable(tx)
        for i, v in enumerate(list(self.items)):
            if same_or_equal(tx, v, value):
                del self.items[i]
                return ConstantVariable(None)
        raise UserError(ValueError("list.remove(x): x not in list"))

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

    def method___imul__(self, tx, count):
        """`lst *= n` (operator.imul, a deque's too): in place, the items n times, none for n <= 0, as a
        clear or an extend (a bounded deque's extend drops from the left, as CPython's repeat does)."""
        n = count.as_python_constant()
        if not isinstance(n, int):
            raise UserError(TypeError(f"can't multiply sequence by non-int of type '{type(n).__name__}'"))
        if n <= 0:
            self.method_clear(tx)
        elif n > 1:
            self.method_extend(tx, TupleVariable(list(self.unpack(tx)) * (n - 1)))
        return self

    def reconstruct(self, cg):
        if self.source is not None:   # mutations (if any) are replayed on the real list first
            return self.source.expr()
        return super().reconstruct(cg)


class OutsideListVariable(ListVariable):
    """A list read from outside the frame whose items are wrapped (each guarded, the length too) only when
    the trace reads them. Until then, append() and extend() with known items only record what they add,
    and the entry replays them as one `extend` on the real list: a function that logs into a global or
    an attribute list (`LOG.append(x)`, transformers' output-capturing hooks) is not guarded on its
    length, which grows every call."""

    def __init__(self, tx, value, source):
        self.source = source
        self._tx, self._value = tx, value
        self._items = None
        self.appended = []

    @property
    def items(self):
        if self._items is None:
            self._realize()
        return self._items

    @items.setter
    def items(self, items):
        if self._items is None:
            self._realize()
        self._items = items

    @property
    def realized(self):
        return self._items is not None

    def _realize(self):
        from .builder import wrap
        tx, value = self._tx, self._value
        tx.guards.add_len(self.source, len(value))
        self.entry_length = len(value)
        self._items = [wrap(tx, v, ItemSource(self.source, i)) for i, v in enumerate(value)] + self.appended
        self.appended = []

    def new(self, items):
        return ListVariable(items)

    def getitem(self, tx, index):
        item = self._item_at_symbol(tx, index)
        return item if item is not None else super().getitem(tx, index)

    def _item_at_symbol(self, tx, index):
        """The item at a symbolic int read from a source (an input int the dynamic policy made symbolic),
        read through `list[<the index's source>]` and guarded there, with the index guarded in range: the
        entry serves every index, not only this one. None where that does not apply: the list changed in
        the frame, or the index is an expression, not an input."""
        from .symbolic import SymNodeVariable
        from ..sources import IndexedItemSource
        if self.realized or self.appended or not isinstance(index, SymNodeVariable) or index.source is None \
                or not isinstance(index.sym, torch.SymInt) or not getattr(index.sym.node.expr, "is_Symbol", False):
            return None
        at = index.sym.node.hint
        n = len(self._value)
        if not isinstance(at, int) or not 0 <= at < n:
            return None
        # the ShapeEnv guards the index's range; the length is guarded as len() would
        if not (bool(index.sym >= 0) and bool(index.sym < n)):
            return None
        tx.guards.add_len(self.source, n)
        from .builder import wrap
        return wrap(tx, self._value[at], IndexedItemSource(self.source, index.source))

    def method___len__(self, tx):
        if self.realized:
            return super().method___len__(tx)
        tx.guards.add_len(self.source, len(self._value))       # the length, not every item
        return ConstantVariable(len(self._value) + len(self.appended))

    def method_append(self, tx, value):
        if self.realized:
            return super().method_append(tx, value)
        self._check_mutable(tx)
        self.appended.append(value)
        return ConstantVariable(None)

    def method_extend(self, tx, values):
        if self.realized or values is self or values.python_type() not in (list, tuple) or \
                isinstance(values, DequeVariable):
            return super().method_extend(tx, values)
        self._check_mutable(tx)
        self.appended.extend(values.unpack(tx))
        return ConstantVariable(None)

    def replay_lines(self, target, read):
        if self.realized:
            return [f"{target}[:] = [{', '.join(read.expr(v) for v in self.items)}]"]
        return [f"{target}.extend([{', '.join(read.expr(v) for v in self.appended)}])"]


class DequeVariable(ListVariable):
    """A collections.deque made in the frame: its items and maxlen (a full bounded deque drops from the
    other end). Iterated over a snapshot, refused if it changes meanwhile (CPython raises); rebuilt as a
    deque when it escapes. A deque from outside the frame is not modelled."""
    python_cls = collections.deque

    def __init__(self, items, maxlen=None):
        super().__init__([], None)
        self.maxlen = maxlen
        self.version = 0
        for item in items:
            self._push(item, left=False)

    def _push(self, value, left):
        self.version += 1
        if self.maxlen == 0:
            return
        if self.maxlen is not None and len(self.items) == self.maxlen:
            if left:
                self.items.pop()
            else:
                self.items.pop(0)
        if left:
            self.items.insert(0, value)
        else:
            self.items.append(value)

    def new(self, items):
        return DequeVariable(items, self.maxlen)

    def getitem(self, tx, index):
        if isinstance(index.as_python_constant(), slice):
            raise UserError(TypeError("sequence index must be integer, not 'slice'"))
        return super().getitem(tx, index)

    def getattr(self, tx, name):
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "sort" or name == "__setitem__" and isinstance(args[0].as_python_constant(), slice):
            unsupported(f"deque has no {name} of these arguments")
        self.version += name in ("insert", "remove", "clear", "reverse", "__setitem__", "__delitem__")
        return super().call_method(tx, name, args, kwargs)

    def method_append(self, tx, value):
        self._check_mutable(tx)
        self._push(value, left=False)
        return ConstantVariable(None)

    def method_appendleft(self, tx, value):
        self._check_mutable(tx)
        self._push(value, left=True)
        return ConstantVariable(None)

    def method_extend(self, tx, values):
        self._check_mutable(tx)
        for value in values.unpack(tx):
            self._push(value, left=False)
        return ConstantVariable(None)

    def method_extendleft(self, tx, values):
        self._check_mutable(tx)
        for value in values.unpack(tx):
            self._push(value, left=True)
        return ConstantVariable(None)

    def method_pop(self, tx):
        self._check_mutable(tx)
        if not self.items:
            raise UserError(IndexError("pop from an empty deque"))
        self.version += 1
        return self.items.pop()

    def method_popleft(self, tx):
        self._check_mutable(tx)
        if not self.items:
            raise UserError(IndexError("pop from an empty deque"))
        self.version += 1
        return self.items.pop(0)

    def method_rotate(self, tx, n=None):
        self._check_mutable(tx)
        k = 1 if n is None else n.as_python_constant()
        if self.items:
            k %= len(self.items)
            self.items[:] = self.items[-k:] + self.items[:-k] if k else self.items
        self.version += 1
        return ConstantVariable(None)

    def method_insert(self, tx, index, value):
        if self.maxlen is not None and len(self.items) >= self.maxlen:
            raise UserError(IndexError("deque already at its maximum size"))
        return super().method_insert(tx, index, value)

    def method_copy(self, tx):
        return DequeVariable(self.items, self.maxlen)

    def method___iadd__(self, tx, other):
        self.method_extend(tx, other)
        return self

    def make_iterator(self, tx):
        return _DequeIterator(self)

    def make_reversed(self, tx):
        return _DequeIterator(self, reverse=True)

    def reconstruct(self, cg):
        inner = ", ".join(cg.expr(v) for v in self.items)
        return f"{cg.obj(collections.deque)}([{inner}], {self.maxlen!r})"


class ListIteratorLike(BaseListVariable):
    """A read-only sequence made in the frame that is none of Python's own containers (an nn.ModuleDict's
    keys()/values()/items()): iterable, len, in. Iterated as a snapshot; not rebuilt when it escapes."""

    def __init__(self, items, kind="list_iterator", origin=None):
        super().__init__(items)
        self.kind = kind
        self.origin = origin

    def make_iterator(self, tx):
        return IteratorVariable(self.items)

    def make_reversed(self, tx):
        return IteratorVariable(self.items[::-1])

    def reconstruct(self, cg):
        unsupported(f"returning a {self.kind} view made while tracing")


# ---------------------------------------------------------------------------------------- dicts

class DictVariable(Variable):
    """A dict with constant (or identity-hashed) keys. `items` maps the Python key to a Variable, in
    insertion order, which is CPython's dict order. `version` counts insertions of new keys and removals
    (what makes an iteration over the dict invalid); `mutated` is set by any write."""

    def __init__(self, items, source=None, python_cls=dict):
        self.items = dict(items)
        self.source = source
        self.python_cls = python_cls
        self.keys_table = KeyTable()
        self.version = 0
        self.mutated = False

    @property
    def key_vars(self):
        return self.keys_table.key_vars

    @key_vars.setter
    def key_vars(self, value):
        self.keys_table = KeyTable(value)

    def python_type(self):
        return self.python_cls

    def as_python_constant(self):
        if self.key_vars:
            raise NotConstant(self)
        return self.python_cls((k, v.as_python_constant()) for k, v in self.items.items())

    def key_var(self, k):
        return self.keys_table.var(k)

    def unpack(self, tx):
        return [self.key_var(k) for k in self.items]

    def make_iterator(self, tx):
        return DictIteratorVariable(self, "keys")

    def make_reversed(self, tx):
        return DictIteratorVariable(self, "keys", reverse=True)

    def view_item(self, kind, k):
        """What an iteration of kind keys/values/items yields for key k."""
        if kind == "keys":
            return self.key_var(k)
        if kind == "values":
            return self.items[k]
        return TupleVariable([self.key_var(k), self.items[k]])

    def truth(self, tx):
        return bool(self.items)

    def _check_mutable(self, tx):
        self.mutated = True
        tx.side_effects.mark_mutated(self)

    # every change of the key set goes through these two
    def store(self, tx, key, value):
        k = constant_key(tx, key)
        if k not in self.items:
            self.version += 1
            self.keys_table.note(k, key)
        self.items[k] = value
        return k

    def remove(self, k):
        self.version += 1
        del self.items[k]
        self.key_vars.pop(k, None)

    def getitem(self, tx, key):
        k = constant_key(tx, key)
        if k not in self.items:
            raise_key_error(key)
        return self.items[k]

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, "method_" + name, None)
        if handler is None:
            unsupported(f"method {name!r} of {self.python_cls.__name__}")
        return handler(tx, *args, **kwargs)

    def method___getitem__(self, tx, key):
        return self.getitem(tx, key)

    def method___len__(self, tx):
        return ConstantVariable(len(self.items))

    def method___contains__(self, tx, key):
        return ConstantVariable(constant_key(tx, key) in self.items)

    def method___iter__(self, tx):
        return self.make_iterator(tx)

    def method_get(self, tx, key, default=None):
        k = constant_key(tx, key)
        if k in self.items:
            return self.items[k]
        return default if default is not None else ConstantVariable(None)

    def method_keys(self, tx):
        return DictViewVariable(self, "keys")

    def method_values(self, tx):
        return DictViewVariable(self, "values")

    def method_items(self, tx):
        return DictViewVariable(self, "items")

    def method___setitem__(self, tx, key, value):
        self._check_mutable(tx)
        self.store(tx, key, value)
        return ConstantVariable(None)

    def method___delitem__(self, tx, key):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        if k not in self.items:
            raise_key_error(key)
        self.remove(k)
        return ConstantVariable(None)

    def getattr(self, tx, name):
        if name in _ORDERED_ONLY and not issubclass(self.python_cls, collections.OrderedDict):
            from .builtins import AttributeMissing
            raise AttributeMissing(f"'{self.python_cls.__name__}' object has no attribute '{name}'")
        return super().getattr(tx, name)

    def method_popitem(self, tx, last=None):
        """dict: the last item; OrderedDict: the last, or with last=False the first."""
        ordered = issubclass(self.python_cls, collections.OrderedDict)
        if last is not None and not ordered:
            raise UserError(TypeError("dict.popitem() takes no arguments (1 given)"))
        if not self.items:
            raise UserError(KeyError("dictionary is empty" if ordered else "popitem(): dictionary is empty"))
        self._check_mutable(tx)
        k = next(reversed(self.items)) if last is None or last.truth(tx) else next(iter(self.items))
        pair = TupleVariable([self.key_var(k), self.items[k]])
        self.remove(k)
        return pair

    def method_move_to_end(self, tx, key, last=None):
        k = constant_key(tx, key)
        if k not in self.items:
            raise_key_error(key)
        self._check_mutable(tx)
        self.version += 1               # an OrderedDict iterated while it moves raises, as CPython's
        value = self.items.pop(k)
        if last is None or last.truth(tx):
            self.items[k] = value
        else:
            self.items = {k: value, **self.items}
        return ConstantVariable(None)

    def method_setdefault(self, tx, key, default=None):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        if k not in self.items:
            self.store(tx, key, default if default is not None else ConstantVariable(None))
        return self.items[k]

    def method_pop(self, tx, key, default=None):
        self._check_mutable(tx)
        k = constant_key(tx, key)
        if k in self.items:
            value = self.items[k]
            self.remove(k)
            return value
        if default is None:
            raise_key_error(key)
        return default

    def method_update(self, tx, other=None, **kwargs):
        self._check_mutable(tx)
        if other is not None:
            self.merge(tx, other)
        for k, v in kwargs.items():
            self.store(tx, ConstantVariable(k), v)
        return ConstantVariable(None)

    def _merge_mapping(self, tx, other):
        """CPython's merge from a mapping that is not a dict (a ChainMap, a user Mapping): iterate its
        keys(), reading each other[key] and storing it before the next key is pulled."""
        from .builtins import getitem
        keys = make_iterator(tx, other.getattr(tx, "keys").call(tx, [], {}))
        while (key := keys.next(tx)) is not None:
            self.store(tx, key, getitem(tx, other, key))

    def merge(self, tx, other):
        """dict.update(other): a mapping's items, or (key, value) pairs pulled one at a time."""
        if isinstance(other, ConstantVariable) and isinstance(other.value, dict):
            for k, v in other.value.items():
                self.store(tx, ConstantVariable(k), ConstantVariable(v))
        elif isinstance(other, DictVariable):
            for k, v in list(other.items.items()):
                self.store(tx, other.key_var(k), v)
        elif hasattr(other, "dict_part") and issubclass(other.python_type(), dict) and \
                getattr(other.python_type(), "__iter__", None) is dict.__iter__:
            # a dict subclass that keeps dict's iteration (defaultdict, Counter): CPython copies its items
            self.merge(tx, other.dict_part(tx))
        else:
            if not isinstance(other, (BaseListVariable, DictViewVariable, IteratorVariable)) and \
                    hasattr(other.python_type(), "keys"):
                self._merge_mapping(tx, other)
                return
            iterator = make_iterator(tx, other)
            index = 0
            while (pair := iterator.next(tx)) is not None:
                try:
                    parts = pair.unpack(tx)
                except UserError as e:
                    if not isinstance(e.exc, TypeError):
                        raise
                    raise UserError(TypeError(f"cannot convert dictionary update sequence element #{index} to a "
                                              "sequence")) from None
                if len(parts) != 2:
                    raise UserError(ValueError(f"dictionary update sequence element #{index} has length "
                                               f"{len(parts)}; 2 is required"))
                self.store(tx, parts[0], parts[1])
                index += 1

    def method_copy(self, tx):
        copy = DictVariable(self.items, python_cls=self.python_cls)
        copy.key_vars = self.key_vars
        return copy

    def method_clear(self, tx):
        self._check_mutable(tx)
        if self.items:
            self.version += 1
        self.items.clear()
        self.key_vars.clear()
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


_VIEW_KINDS = ("keys", "values", "items")


class DictViewVariable(Variable):
    """d.keys(), d.values() or d.items(): a live view of the DictVariable, read on every use. Keys and
    items views are set-like (&, |, -, ^, comparisons, isdisjoint), computed on real Python objects
    standing for the operands."""
    built_once = True

    def __init__(self, dict_var, kind):
        self.dict = dict_var
        self.kind = kind

    def python_type(self):
        return type(getattr(self.dict.python_cls(), self.kind)())

    def unpack(self, tx):
        return [self.dict.view_item(self.kind, k) for k in list(self.dict.items)]

    def make_iterator(self, tx):
        return DictIteratorVariable(self.dict, self.kind)

    def make_reversed(self, tx):
        return DictIteratorVariable(self.dict, self.kind, reverse=True)

    def truth(self, tx):
        return bool(self.dict.items)

    def is_set_like(self):
        return self.kind != "values"

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, "method_" + name, None)
        if handler is None:
            unsupported(f"method {name!r} of dict_{self.kind}")
        return handler(tx, *args, **kwargs)

    def method___len__(self, tx):
        return ConstantVariable(len(self.dict.items))

    def method___iter__(self, tx):
        return self.make_iterator(tx)

    def method___reversed__(self, tx):
        return self.make_reversed(tx)

    def method___contains__(self, tx, value):
        d = self.dict
        if self.kind == "keys":
            return d.method___contains__(tx, value)
        if self.kind == "values":
            return ConstantVariable(any(same_or_equal(tx, v, value) for v in list(d.items.values())))
        if not isinstance(value, TupleVariable) or len(value.items) != 2:
            return ConstantVariable(False)
        k = constant_key(tx, value.items[0])
        return ConstantVariable(k in d.items and same_or_equal(tx, d.items[k], value.items[1]))

    def method_isdisjoint(self, tx, other):
        if not self.is_set_like():
            unsupported("isdisjoint of dict_values")
        return _set_result(tx, lambda view, o: view.isdisjoint(o), [self, _as_operand(tx, other)])

    def real_value(self, tx):
        """An equivalent real view (on a dict of the same keys, in the same order), for set operations."""
        d = self.dict
        if self.kind == "keys":
            return dict.fromkeys(d.items).keys()
        if self.kind == "items":
            return {k: constant_key(tx, v) for k, v in d.items.items()}.items()
        unsupported("set operation on dict_values")

    def reconstruct(self, cg):
        return f"{cg.expr(self.dict)}.{self.kind}()"

    def __repr__(self):
        return f"dict_{self.kind}({self.dict!r})"


# ---------------------------------------------------------------------------------------- sets

class SetVariable(Variable):
    """A set: `members` is a real Python set of keys (see constant_key), built by the same operations in
    the same order as the program's set, so membership and len are CPython's, and so is the iteration
    order while `order_known`: every member a constant, built in the frame from sets of known order.
    A member hashed by identity (a tensor) hashes differently here than in CPython, which can move the
    others; a set read from outside is a copy of the real one, whose hash table may differ.

    A set read from outside (source) iterates in its real order (guarded) until the frame mutates it; its
    mutations (add, discard, remove, clear) are replayed on the real set, in order."""
    python_cls = set

    def __init__(self, members=(), source=None, order=None):
        self.source = source
        self.members = set(members)
        self.keys_table = KeyTable()
        self.version = 0
        self.mutated = False
        self.order_known = source is None and not self.members
        # while order_known: the real operations that built `members`, as functions set -> set, so the
        # entry can build a new set with the same hash-table layout (a literal of the members may differ)
        self.steps = []
        self.replay = []             # (method name, argument Variable or None): mutations of a set from outside
        self.entry_order = order     # a set from outside: its real iteration order when read

    def builder(self):
        """A function building a new real set laid out as `members` is now (while order_known)."""
        steps = list(self.steps)

        def build():
            result = set()
            for step in steps:
                result = step(result)
            return result
        return build

    def apply(self, method, *arg_builders):
        """members.method(*args), recorded as a step."""
        def step(target):
            method(target, *(b() for b in arg_builders))
            return target
        self.steps.append(step)
        return step(self.members)

    @property
    def key_vars(self):
        return self.keys_table.key_vars

    @property
    def items(self):
        """Membership as a dict (what generic code reads: len, keys)."""
        return dict.fromkeys(self.members, ConstantVariable(None))

    def python_type(self):
        return set

    def as_python_constant(self):
        if self.key_vars or self.source is not None or not self.order_known:
            raise NotConstant(self)
        return set(self.members)

    def members_in_order(self, tx):
        """The members as CPython iterates them (refused where that order is not known)."""
        if self.key_vars:
            unsupported("iterating a set of tensors or objects: its order depends on their ids")
        if self.source is not None and not self.mutated:
            order = tuple(self.entry_order)
            tx.guards.add(4, f"tuple({{0}}) == {tx.guards.obj(order)}",
                          f"{self.source.expr()} iterates as {order!r}", (self.source,))
            return [ConstantVariable(k) for k in order]
        if not self.order_known:
            unsupported("iterating a set whose order is its hash table's, which tracing does not reproduce "
                        "(it held tensors or objects, or comes from a set from outside the frame)")
        return [ConstantVariable(k) for k in self.members]

    def unpack(self, tx):
        return self.members_in_order(tx)

    def make_iterator(self, tx):
        return SetIteratorVariable(self, self.members_in_order(tx))

    def truth(self, tx):
        return bool(self.members)

    def getitem(self, tx, index):
        raise UserError(TypeError("'set' object is not subscriptable"))

    def real_value(self, tx):
        return self.members

    def exact(self):
        """Whether `members` is laid out as the program's set (set operations on it give CPython's order)."""
        return self.order_known and not self.key_vars

    def call_method(self, tx, name, args, kwargs):
        if name in _SET_OPERATIONS:
            return set_operation(tx, name, self, *args)
        handler = getattr(self, "method_" + name, None)
        if handler is None or kwargs:
            unsupported(f"method {name!r} of set")
        return handler(tx, *args)

    def getattr(self, tx, name):
        if name in _SET_OPERATIONS:
            return MethodOf(self, name)
        return super().getattr(tx, name)

    def mutate(self, tx, name, arg=None):
        self.mutated = True
        self.version += 1
        if self.source is not None:
            if name not in ("add", "discard", "clear"):
                unsupported(f"set.{name}() on a set from outside the frame (only add, discard, remove and "
                            "clear are replayed)")
            self.replay.append((name, arg))
            tx.side_effects.mark_mutated(self)

    def method___len__(self, tx):
        return ConstantVariable(len(self.members))

    def method___contains__(self, tx, value):
        return ConstantVariable(constant_key(tx, value) in self.members)

    def method___iter__(self, tx):
        return self.make_iterator(tx)

    def method_add(self, tx, value):
        k = constant_key(tx, value)
        if k not in self.members:
            self.mutate(tx, "add", value)
            self.apply(set.add, lambda: k)
            if not value.is_constant():
                self.keys_table.note(k, value)
                self.order_known = False
        return ConstantVariable(None)

    def method_discard(self, tx, value):
        k = constant_key(tx, value)
        if k in self.members:
            self.mutate(tx, "discard", value)
            self.apply(set.discard, lambda: k)
            self.key_vars.pop(k, None)
        return ConstantVariable(None)

    def method_remove(self, tx, value):
        if constant_key(tx, value) not in self.members:
            raise_key_error(value)
        return self.method_discard(tx, value)

    def method_clear(self, tx):
        if self.members:
            self.mutate(tx, "clear")
        self.apply(set.clear)
        self.key_vars.clear()
        return ConstantVariable(None)

    def method_pop(self, tx):
        if not self.order_known:
            unsupported("set.pop() of a set whose hash table tracing does not reproduce (which member it "
                        "returns depends on it)")
        if not self.members:
            raise UserError(KeyError("pop from an empty set"))
        self.mutate(tx, "pop")
        popped = []
        self.apply(lambda target: popped.append(target.pop()))
        return ConstantVariable(popped[0])

    def method_copy(self, tx):
        return _set_result(tx, set, [self])

    def method_update(self, tx, *others):
        return set_operation(tx, "update", self, *others)

    def replay_lines(self, target, read):
        """This set's operations on the real one at `target`; `read` binds their operands beforehand."""
        return [f"{target}.{name}({read.expr(arg) if arg is not None else ''})" for name, arg in self.replay]

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.expr()
        if self.key_vars:        # tensors or objects: CPython's order depends on their ids anyway
            return "{" + ", ".join(cg.expr(self.keys_table.var(k)) for k in self.members) + "}"
        if not self.order_known:
            unsupported("returning a set whose hash-table layout tracing does not reproduce (it held tensors "
                        "or objects, or was computed from a set from outside the frame)")
        return f"{cg.obj(self.builder())}()"

    def __repr__(self):
        return f"set({self.members!r})"


# name -> (the method on real sets, whether it mutates the first operand)
_SET_OPERATIONS = {
    "union": (set.union, False), "intersection": (set.intersection, False),
    "difference": (set.difference, False), "symmetric_difference": (set.symmetric_difference, False),
    "issubset": (set.issubset, False), "issuperset": (set.issuperset, False),
    "isdisjoint": (set.isdisjoint, False),
    "update": (set.update, True), "intersection_update": (set.intersection_update, True),
    "difference_update": (set.difference_update, True),
    "symmetric_difference_update": (set.symmetric_difference_update, True),
}
_SET_BINARY = {"|": operator.or_, "&": operator.and_, "-": operator.sub, "^": operator.xor}
_SET_INPLACE = {"|=": "update", "&=": "intersection_update", "-=": "difference_update",
                "^=": "symmetric_difference_update"}


def is_set_like(var):
    return isinstance(var, SetVariable) or isinstance(var, DictViewVariable) and var.is_set_like() or \
        isinstance(var, ConstantVariable) and isinstance(var.value, (set, frozenset))


def real_operand(tx, var):
    """A real Python object equivalent to `var` for a set operation: a set's real members, a view on a
    dict of the same keys, a constant itself, a list of the keys an iterable yields (pulled now)."""
    if hasattr(var, "real_value"):
        return var.real_value(tx)
    if isinstance(var, ConstantVariable):
        return var.value
    if isinstance(var, DictVariable):
        return dict.fromkeys(var.items)
    return [constant_key(tx, v) for v in iterate(tx, var)]


def operand_builder(tx, var):
    """A function building a new real object equivalent to `var` now (see SetVariable.steps)."""
    if isinstance(var, SetVariable):
        if var.order_known:
            return var.builder()
        members = set(var.members)
        return lambda: set(members)
    if isinstance(var, ConstantVariable):
        value = var.value
        return lambda: value
    real = real_operand(tx, var)
    if isinstance(var, DictViewVariable):
        snapshot = dict(real.mapping)
        return lambda: getattr(dict(snapshot), var.kind)()
    if isinstance(var, DictVariable):
        keys = list(real)
        return lambda: dict.fromkeys(keys)
    snapshot = list(real)
    return lambda: list(snapshot)


def _operand_vars(tx, var):
    """The Variables of the identity keys an operand may contribute to a result, by key."""
    if isinstance(var, (SetVariable, DictVariable)):
        return var.key_vars
    if isinstance(var, DictViewVariable):
        table = dict(var.dict.key_vars)
        if var.kind == "items":
            for k, v in var.dict.items.items():
                if k in var.dict.key_vars or not v.is_constant():
                    table[(k, constant_key(tx, v))] = TupleVariable([var.dict.key_var(k), v])
        return table
    if isinstance(var, BaseListVariable):
        return {constant_key(tx, v): v for v in var.items if not v.is_constant()}
    return {}


def _exact(tx, var):
    """Whether an operand's real stand-in gives CPython's hash-table layout (see SetVariable)."""
    if isinstance(var, SetVariable):
        return var.exact()
    return not _operand_vars(tx, var)


def _as_operand(tx, var):
    """Sets, dicts, views, constants and sequences stand for themselves; other iterables (iterators,
    generators ...) are pulled now, into a tuple of what they yield."""
    if isinstance(var, (SetVariable, DictVariable, DictViewVariable, ConstantVariable, BaseListVariable)):
        return var
    return TupleVariable(list(iterate(tx, var)))


def set_operation(tx, name, target, *others):
    """A set method (union, update, issubset ...) run on real sets standing for the operands."""
    method, mutates = _SET_OPERATIONS[name]
    others = [_as_operand(tx, o) for o in others]
    if not mutates:
        return _set_result(tx, method, [target, *others])
    target.mutate(tx, name)
    builders = [operand_builder(tx, o) for o in others]
    try:
        target.apply(method, *builders)
    except TypeError as e:
        target.steps.pop()
        raise UserError(e)
    for operand in others:
        for k, var in _operand_vars(tx, operand).items():
            if k in target.members:
                target.keys_table.key_vars.setdefault(k, var)
    for k in [k for k in target.key_vars if k not in target.members]:
        del target.key_vars[k]
    target.order_known = target.order_known and all(_exact(tx, o) for o in others)
    return ConstantVariable(None)


def _set_result(tx, fn, operands):
    """fn(*operands) on real stand-ins of the operands: a bool, a frozenset, or a new set."""
    try:
        result = fn(*(real_operand(tx, o) for o in operands))
    except TypeError as e:
        raise UserError(e)
    if isinstance(result, bool):
        return ConstantVariable(result)
    if type(result) is frozenset:
        if any(_operand_vars(tx, o) for o in operands):
            unsupported("a frozenset of tensors or objects")
        return ConstantVariable(result)
    new = SetVariable()
    new.members = result
    for operand in operands:
        for k, var in _operand_vars(tx, operand).items():
            if k in result:
                new.keys_table.key_vars.setdefault(k, var)
    new.order_known = all(_exact(tx, o) for o in operands)
    if new.order_known:
        builders = [operand_builder(tx, o) for o in operands]
        new.steps = [lambda _: fn(*(b() for b in builders))]
    return new


def set_binary_op(tx, op, a, b):
    """`a op b` where an operand is a set or a set-like dict view; None when neither is."""
    if not (is_set_like(a) or is_set_like(b)):
        return None
    if op in _SET_INPLACE and isinstance(a, SetVariable) and not isinstance(b, DictViewVariable):
        # set.__ior__ takes sets only; with a dict view, Python falls back to `a | b`, a new set
        if not is_set_like(b):
            raise UserError(TypeError(f"unsupported operand type(s) for {op}: 'set' and "
                                      f"'{b.python_type().__name__}'"))
        set_operation(tx, _SET_INPLACE[op], a, b)
        return a
    fn = _SET_BINARY.get(op.rstrip("="))
    if fn is None:
        return None
    if isinstance(a, DictViewVariable) or isinstance(b, DictViewVariable):   # views take any iterable
        a, b = _as_operand(tx, a), _as_operand(tx, b)
    return _set_result(tx, fn, [a, b])


# ---------------------------------------------------------------------------------------- comparisons

def container_compare(tx, op, a, b):
    """`a op b` between sets and set-like dict views (None for other operands), on real sets standing
    for them."""
    if op in ("==", "!=", "<", "<=", ">", ">=") and is_set_like(a) and is_set_like(b):
        from .base import COMPARE_OPS
        return ConstantVariable(COMPARE_OPS[op](real_operand(tx, a), real_operand(tx, b)))
    return None


# ---------------------------------------------------------------------------------------- iterators

def make_iterator(tx, value):
    """iter(value): an iterator is its own; containers give their live iterators; an immutable constant a
    real iterator; anything else (tensors, modules ...) an iterator over the items it unpacks to now."""
    if hasattr(value, "next"):
        return value
    maker = getattr(value, "make_iterator", None)
    if maker is not None:
        return maker(tx)
    if isinstance(value, ConstantVariable) and type(value.value) in _IMMUTABLE_ITERABLES:
        return ConstantIteratorVariable(value.value)
    return IteratorVariable(value.unpack(tx))


def make_reversed(tx, value):
    """reversed(value), for the types whose __reversed__ this module models."""
    maker = getattr(value, "make_reversed", None)
    if maker is not None:
        return maker(tx)
    if isinstance(value, ConstantVariable) and type(value.value) in _IMMUTABLE_ITERABLES and \
            type(value.value) is not frozenset:
        return ConstantIteratorVariable(value.value, reverse=True)
    return None


def iterate(tx, value):
    """The items of an iteration over `value`, pulled one at a time (a Python generator of Variables)."""
    iterator = make_iterator(tx, value)
    while (item := iterator.next(tx)) is not None:
        yield item


_IMMUTABLE_ITERABLES = (range, str, bytes, tuple, frozenset)


def _iter_at(seq, index):
    it = iter(seq)
    it.__setstate__(index)
    return it


def _reversed_at(seq, index):
    it = reversed(seq)
    it.__setstate__(index)
    return it


def _exhausted(it):
    for _ in it:
        pass
    return it


def _advanced(it, n):
    for _ in range(n):
        next(it)
    return it


def _pull_or_stop(tx, fn, args):
    """Call fn; a StopIteration it raises ends the iteration that called it (None), as in CPython."""
    try:
        return fn.call(tx, args, {})
    except UserError as e:
        if isinstance(e.exc, StopIteration):
            return None
        raise


class IteratorVariable(Variable):
    """An iterator made in the frame. `next(tx)` pulls exactly one element: a Variable, or None when the
    iterator is exhausted (a StopIteration). This base class iterates a list of items fixed when it was
    made (modules' children, a tensor's rows, user objects): it is used inside the frame only. Its
    subclasses model CPython's own iterator types and are rebuilt in their state when they escape."""
    built_once = True      # the entry rebuilds it once: every reference is the same iterator

    def __init__(self, items):
        self.items = list(items)
        self.index = 0

    def python_type(self):
        unsupported("type() of an iterator over a snapshot")

    def next(self, tx):
        if self.index >= len(self.items):
            return None
        value = self.items[self.index]
        self.index += 1
        return value

    def truth(self, tx):
        return True

    def unpack(self, tx):
        items = []
        while (value := self.next(tx)) is not None:
            items.append(value)
        return items

    def method___iter__(self, tx):
        return self

    def method___next__(self, tx):
        value = self.next(tx)
        if value is None:
            raise UserError(StopIteration())
        return value

    def reconstruct(self, cg):
        unsupported(f"returning {self} from a compiled frame (it can't be rebuilt in the same state)")

    def __repr__(self):
        return f"iterator({self.items[self.index:]!r})"


class _DequeIterator(IteratorVariable):
    """iter(deque) inside the frame: its items as they are, refused if the deque changes while it runs."""

    def __init__(self, deque, reverse=False):
        super().__init__(deque.items[::-1] if reverse else deque.items)
        self.deque, self.version = deque, deque.version

    def next(self, tx):
        if self.deque.version != self.version:
            unsupported("a deque changed while it was iterated (CPython raises RuntimeError)")
        return super().next(tx)


class SequenceIteratorVariable(IteratorVariable):
    """iter() or reversed() of a list or tuple: a position in the live sequence (a list iterator sees
    the appends made while it runs); once it runs past the end it is exhausted for good."""

    def __init__(self, seq, reverse=False):
        self.seq = seq
        self.reverse = reverse
        self.index = len(seq.items) - 1 if reverse else 0
        is_list = isinstance(seq, ListVariable)
        self.cls = {(True, False): type(iter([])), (False, False): type(iter(())),
                    (True, True): type(reversed([])), (False, True): reversed}[(is_list, reverse)]

    def python_type(self):
        return self.cls

    def next(self, tx):
        if self.seq is None:
            return None
        items = self.seq.items
        if 0 <= self.index < len(items):
            value = items[self.index]
            self.index += -1 if self.reverse else 1
            return value
        self.seq = None
        return None

    def reconstruct(self, cg):
        empty = "[]" if self.cls in (type(iter([])), type(reversed([]))) else "()"
        make = "reversed" if self.reverse else "iter"
        if self.seq is None:
            return f"{cg.obj(_exhausted)}({make}({empty}))"
        length = self.seq.length_when_rebuilt() if isinstance(self.seq, ListVariable) else len(self.seq.items)
        if self.index > length - self.reverse:
            unsupported("returning a list iterator positioned past the end of its (shrunk) list")
        helper = _reversed_at if self.reverse else _iter_at
        return f"{cg.obj(helper)}({cg.expr(self.seq)}, {self.index})"

    def __repr__(self):
        return f"{self.cls.__name__}({self.seq!r} at {self.index})"


class ConstantIteratorVariable(IteratorVariable):
    """iter() or reversed() of an immutable constant (range, str, bytes, tuple, frozenset): a real iterator,
    advanced while tracing; rebuilt as the same kind of iterator advanced as far."""

    def __init__(self, value, reverse=False):
        self.value = value
        self.reverse = reverse
        self.real = reversed(value) if reverse else iter(value)
        self.produced = 0

    def python_type(self):
        return type(self.real)

    def next(self, tx):
        from .builder import wrap_constant_result
        try:
            value = next(self.real)
        except StopIteration:
            return None
        self.produced += 1
        return wrap_constant_result(tx, value)

    def reconstruct(self, cg):
        make = "reversed" if self.reverse else "iter"
        return f"{cg.obj(_advanced)}({make}({cg.const(self.value)}), {self.produced})"

    def __repr__(self):
        return f"{type(self.real).__name__}({self.value!r} after {self.produced})"


# size-change message, same-size key change message (None: refused) per container class
_CHANGED_DURING_ITERATION = {
    dict: ("dictionary changed size during iteration", None),
    collections.OrderedDict: ("OrderedDict changed size during iteration", "OrderedDict mutated during iteration"),
    set: ("Set changed size during iteration", None),
}


class DictIteratorVariable(IteratorVariable):
    """An iterator over a dict's keys, values or items (or reversed): the keys as they were when it was
    made, read live for values. If the dict's size changed, next() raises RuntimeError (and keeps raising,
    as CPython's); a change of keys at the same size is refused (CPython's order then depends on its
    hash table)."""

    def __init__(self, dict_var, kind, reverse=False):
        self.dict = dict_var
        self.kind = kind
        self.reverse = reverse
        self.keys = list(dict_var.items)[::-1] if reverse else list(dict_var.items)
        self.size = len(dict_var.items)
        self.version = dict_var.version
        self.produced = 0
        self.state = "live"          # live, exhausted, broken (raised RuntimeError)
        view = getattr(dict_var.python_cls(), kind)()
        self.cls = type(reversed(view) if reverse else iter(view))

    def python_type(self):
        return self.cls

    def _check_unchanged(self, d):
        size_message, keys_message = _CHANGED_DURING_ITERATION.get(d.python_cls, (None, None))
        if self.state == "broken" or len(d.items) != self.size:
            if size_message is None:
                unsupported(f"{d.python_cls.__name__} changed size during an iteration over it")
            self.state = "broken"
            raise UserError(RuntimeError(size_message))
        if d.version != self.version:
            if keys_message is None:
                unsupported(f"the keys of a {d.python_cls.__name__} changed during an iteration over it "
                            "(its size did not): CPython's order then depends on its hash table")
            self.state = "exhausted"
            raise UserError(RuntimeError(keys_message))

    def next(self, tx):
        if self.state == "exhausted":
            return None
        self._check_unchanged(self.dict)
        if self.produced >= len(self.keys):
            self.state = "exhausted"
            return None
        k = self.keys[self.produced]
        self.produced += 1
        return self.dict.view_item(self.kind, k)

    def reconstruct(self, cg):
        make = "reversed" if self.reverse else "iter"
        if self.state == "exhausted":
            return f"{cg.obj(_exhausted)}({make}({cg.obj(self.dict.python_cls)}().{self.kind}()))"
        d = self.dict
        if self.state == "broken" or len(d.items) != self.size or d.version != self.version:
            unsupported(f"returning an iterator over a {d.python_cls.__name__} changed since it was made")
        if d.source is not None and d.mutated:
            unsupported(f"returning an iterator over a {d.python_cls.__name__} from outside the frame that the "
                        "frame mutated")
        return f"{cg.obj(_advanced)}({make}({cg.expr(d)}.{self.kind}()), {self.produced})"

    def __repr__(self):
        return f"{self.cls.__name__}({self.dict!r} after {self.produced})"


class SetIteratorVariable(DictIteratorVariable):
    """An iterator over a set: its members in CPython's order when it was made."""

    def __init__(self, set_var, members):
        self.dict = set_var
        self.kind = "keys"
        self.reverse = False
        self.members = members
        self.keys = list(range(len(members)))
        self.size = len(set_var.members)
        self.version = set_var.version
        self.produced = 0
        self.state = "live"
        self.cls = type(iter(set()))

    def next(self, tx):
        if self.state == "exhausted":
            return None
        s = self.dict
        if self.state == "broken" or len(s.members) != self.size:
            self.state = "broken"
            raise UserError(RuntimeError("Set changed size during iteration"))
        if s.version != self.version:
            unsupported("a set's members changed during an iteration over it (its size did not): CPython's "
                        "order then depends on its hash table")
        if self.produced >= len(self.members):
            self.state = "exhausted"
            return None
        self.produced += 1
        return self.members[self.produced - 1]

    def reconstruct(self, cg):
        s = self.dict
        if self.state == "exhausted":
            return f"{cg.obj(_exhausted)}(iter(set()))"
        if self.state == "broken" or len(s.members) != self.size or s.version != self.version:
            unsupported("returning an iterator over a set changed since it was made")
        return f"{cg.obj(_advanced)}(iter({cg.expr(s)}), {self.produced})"


class MapVariable(IteratorVariable):
    """map(fn, *iterables): each next() pulls one item from each iterator, in order, stopping at the first
    exhausted one, then calls fn. Holds no state of its own, like CPython's."""

    def __init__(self, fn, iterators):
        self.fn = fn
        self.iterators = iterators

    def python_type(self):
        return map

    def next(self, tx):
        args = []
        for iterator in self.iterators:
            value = iterator.next(tx)
            if value is None:
                return None
            args.append(value)
        return _pull_or_stop(tx, self.fn, args)

    def reconstruct(self, cg):
        return f"map({', '.join(cg.expr(v) for v in [self.fn, *self.iterators])})"

    def __repr__(self):
        return f"map({self.fn!r}, {self.iterators!r})"


class FilterVariable(IteratorVariable):
    """filter(fn, iterable): pulls until an item passes fn (or is true, for fn None)."""

    def __init__(self, fn, iterator):
        self.fn = fn
        self.iterator = iterator

    def python_type(self):
        return filter

    def next(self, tx):
        keep_true = self.fn.is_constant() and self.fn.as_python_constant() in (None, bool)
        while (value := self.iterator.next(tx)) is not None:
            verdict = value if keep_true else _pull_or_stop(tx, self.fn, [value])
            if verdict is None:
                return None
            if verdict.truth(tx):
                return value
        return None

    def reconstruct(self, cg):
        return f"filter({cg.expr(self.fn)}, {cg.expr(self.iterator)})"

    def __repr__(self):
        return f"filter({self.fn!r}, {self.iterator!r})"


class ZipVariable(IteratorVariable):
    """zip(*iterables, strict=...): pulls from each iterator in order and stops at the first exhausted one
    (later ones are not pulled); strict=True then checks the others, raising CPython's ValueError."""

    def __init__(self, iterators, strict=False):
        self.iterators = iterators
        self.strict = strict

    def python_type(self):
        return zip

    def next(self, tx):
        if not self.iterators:
            return None
        row = []
        for i, iterator in enumerate(self.iterators):
            value = iterator.next(tx)
            if value is None:
                if self.strict:
                    self._check_lengths(tx, i)
                return None
            row.append(value)
        return TupleVariable(row)

    def _check_lengths(self, tx, i):
        def plural(n):
            return " " if n == 1 else "s 1-"
        if i:
            raise UserError(ValueError(f"zip() argument {i + 1} is shorter than argument{plural(i)}{i}"))
        for j in range(1, len(self.iterators)):
            if self.iterators[j].next(tx) is not None:
                raise UserError(ValueError(f"zip() argument {j + 1} is longer than argument{plural(j)}{j}"))

    def reconstruct(self, cg):
        strict = ", strict=True" if self.strict else ""
        return f"zip({', '.join(cg.expr(v) for v in self.iterators)}{strict})"

    def __repr__(self):
        return f"zip({self.iterators!r})"


class EnumerateVariable(IteratorVariable):
    """enumerate(iterable, start): (count, item), the count advancing only when an item comes."""

    def __init__(self, iterator, count=0):
        self.iterator = iterator
        self.count = count

    def python_type(self):
        return enumerate

    def next(self, tx):
        value = self.iterator.next(tx)
        if value is None:
            return None
        self.count += 1
        return TupleVariable([ConstantVariable(self.count - 1), value])

    def reconstruct(self, cg):
        return f"enumerate({cg.expr(self.iterator)}, {self.count})"

    def __repr__(self):
        return f"enumerate({self.iterator!r}, {self.count})"


class CallableIteratorVariable(IteratorVariable):
    """iter(fn, sentinel): calls fn until `sentinel == result` (identity first); then exhausted for good."""

    def __init__(self, fn, sentinel):
        self.fn = fn
        self.sentinel = sentinel
        self.done = False

    def python_type(self):
        return type(iter(int, 0))

    def next(self, tx):
        if self.done:
            return None
        value = _pull_or_stop(tx, self.fn, [])
        if value is None or same_or_equal(tx, self.sentinel, value):
            self.done = True
            return None
        return value

    def reconstruct(self, cg):
        if self.done:
            unsupported("returning an exhausted callable_iterator")
        return f"iter({cg.expr(self.fn)}, {cg.expr(self.sentinel)})"

    def __repr__(self):
        return f"callable_iterator({self.fn!r}, {self.sentinel!r})"


class SliceVariable(Variable):
    def __init__(self, start, stop, step):
        self.parts = (start, stop, step)

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*(p.as_python_constant() for p in self.parts))

    def getattr(self, tx, name):
        if name in ("start", "stop", "step"):
            return self.parts[("start", "stop", "step").index(name)]
        return super().getattr(tx, name)

    def __repr__(self):
        return f"slice{self.parts!r}"
