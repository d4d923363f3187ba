"""Access paths of values that came from outside the frame.

A source knows how to read its value again as a Python expression in the generated entry function, whose
parameters are the original function's parameters (so a local `x` is read as `x`), whose globals dict is
`__gj_G`, and whose closure cells are `__gj_closure`. Guards are written on sources; graph inputs are read
through them on every call.

    >>> AttrSource(LocalSource("self"), "eps").expr()
    'self.eps'
"""
import dataclasses
import itertools
import keyword
import re
import weakref


@dataclasses.dataclass(frozen=True)
class Source:
    def expr(self) -> str:
        """The Python expression reading this source (computed once: sources are immutable)."""
        cached = self.__dict__.get("_expr")
        if cached is None:
            base = getattr(self, "base", None)
            cached = self.expr_on(base.expr()) if base is not None else self.leaf_expr()
            object.__setattr__(self, "_expr", cached)
        return cached

    def expr_on(self, base_text: str) -> str:
        """This source's expression with its base's value available as `base_text`."""
        raise NotImplementedError

    def leaf_expr(self) -> str:
        raise NotImplementedError

    def depth(self) -> int:
        """How many links the chain from this source down to its leaf has (a leaf: 0)."""
        base = getattr(self, "base", None)
        return 0 if base is None else base.depth() + 1

    def __str__(self):
        return self.expr()


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    name: str

    def leaf_expr(self):
        return self.name


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    name: str

    def leaf_expr(self):
        return f"__gj_G[{self.name!r}]"


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """Cell `index` of the compiled function's own closure (its value is `.cell_contents`)."""
    index: int
    name: str

    def leaf_expr(self):
        return f"__gj_closure[{self.index}]"


# Objects that sources refer to directly (e.g. the globals dict of a module whose function was inlined),
# by name. Names are numbered in the order objects are first named (not by id), so a program that compiles
# the same frames in the same order generates the same sources in every process (code_cache.py keys on
# the text). REFS holds a weak reference to each object that takes one (a function, a class, a module),
# else the object: an entry keeps what its own source names (refs_in), so a dropped closure or class is
# freed, and a name whose object died is not reused for another object at the same id.
REFS = {}
_REF_NAMES = {}
_REF_NUMBERS = itertools.count()
_REF_NAME = re.compile(r"__gj_ref\d+")


class _Strong:
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj


def ref_name(obj):
    """The name sources use for obj (given the first time it is named)."""
    name = _REF_NAMES.get(id(obj))
    if name is not None and REFS[name]() is obj:
        return name
    name = _REF_NAMES[id(obj)] = f"__gj_ref{next(_REF_NUMBERS)}"
    try:
        REFS[name] = weakref.ref(obj, lambda ref, name=name, key=id(obj): _forget_ref(ref, name, key))
    except TypeError:
        REFS[name] = _Strong(obj)
    return name


def _forget_ref(ref, name, key):
    """A named object died: its name goes, and its id's entry unless the id names another object since."""
    del REFS[name]
    if _REF_NAMES.get(key) == name:
        del _REF_NAMES[key]


def refs_in(*texts):
    """{name: object} for the objects the source texts name."""
    out = {}
    for text in texts:
        for name in _REF_NAME.findall(text):
            if name not in out and name in REFS:
                out[name] = REFS[name]()
    return out



@dataclasses.dataclass(frozen=True, eq=False)
class ObjectSource(Source):
    obj: object

    def leaf_expr(self):
        return ref_name(self.obj)

    def __eq__(self, other):
        return isinstance(other, ObjectSource) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def expr_on(self, base_text):
        if not self.attr.isidentifier() or keyword.iskeyword(self.attr):     # getattr(o, "a b")
            return f"getattr({base_text}, {self.attr!r})"
        return f"{base_text}.{self.attr}"


@dataclasses.dataclass(frozen=True)
class ItemSource(Source):
    """base[key] for a constant key (int, str, or any value with a faithful repr)."""
    base: Source
    key: object

    def expr_on(self, base_text):
        return f"{base_text}[{key_text(self.key)}]"


@dataclasses.dataclass(frozen=True)
class IndexedItemSource(Source):
    """base[index] where the index is itself read from a source: a list item read at a symbolic int (a
    block's `layer_idx` into a KV cache's list of layers), so one entry serves every index its guards admit."""
    base: Source
    index: Source

    def expr_on(self, base_text):
        return f"{base_text}[{self.index.expr()}]"

    def depth(self):
        return max(self.base.depth(), self.index.depth()) + 1


@dataclasses.dataclass(frozen=True)
class DictItemSource(Source):
    """dict.__getitem__(base, key): an item of a dict subclass, bypassing its own __getitem__."""
    base: Source
    key: object

    def expr_on(self, base_text):
        return f"dict.__getitem__({base_text}, {key_text(self.key)})"


@dataclasses.dataclass(frozen=True)
class TypeSource(Source):
    base: Source

    def expr_on(self, base_text):
        return f"type({base_text})"


@dataclasses.dataclass(frozen=True)
class WeakRefSource(Source):
    """The object a weak reference read from outside refers to: `base()`."""
    base: Source

    def expr_on(self, base_text):
        return f"{base_text}()"


@dataclasses.dataclass(frozen=True)
class DrawSource(Source):
    """Value number `index` the entry drew from `random` before its graph ran (variables/randomvars.py)."""
    index: int

    def leaf_expr(self):
        return f"__gj_draw{self.index}"


@dataclasses.dataclass(frozen=True)
class TensorOfArraySource(Source):
    """The tensor over a NumPy array's memory (`torch.from_numpy`): an array argument as a graph input."""
    base: Source

    def expr_on(self, base_text):
        return f"__gj_torch.from_numpy({base_text})"


def _once(cls, method, slot):
    """cls.<method>() computed once per source and kept in the instance's `slot` (sources are immutable): a
    source's hash and depth walk its whole chain of bases, and capture hashes sources in every guard and
    placeholder lookup and orders guards by depth."""
    compute = getattr(cls, method)

    def once(self):
        cached = self.__dict__.get(slot)
        if cached is None:
            cached = compute(self)
            object.__setattr__(self, slot, cached)
        return cached
    setattr(cls, method, once)


for _cls in (LocalSource, GlobalSource, ClosureSource, AttrSource, ItemSource, IndexedItemSource, DictItemSource,
             TypeSource, WeakRefSource):
    _once(_cls, "__hash__", "_hash")
for _cls in (AttrSource, ItemSource, IndexedItemSource, DictItemSource, TypeSource, TensorOfArraySource,
             WeakRefSource):
    _once(_cls, "depth", "_depth")


_LITERALS = (str, int, float, bool, type(None), bytes)


def key_text(key):
    """A key as Python source: its repr for literals, else a reference to the key object itself."""
    if type(key) in _LITERALS and not (type(key) is float and key != key):
        return repr(key)
    if type(key) is tuple and all(type(k) in _LITERALS for k in key):
        return repr(key)
    return ObjectSource(key).leaf_expr()


def module_attr_source(base: Source, owner_dict: str, name: str) -> Source:
    """`m._parameters['w']` instead of `m.w`: a dict read instead of nn.Module.__getattr__ (much faster)."""
    return ItemSource(AttrSource(base, owner_dict), name)
