"""Python objects around tensors: namedtuples (collections and typing), dataclasses, user classes with
methods, properties, staticmethods, classmethods, inheritance and super(), and user objects as inputs.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import collections
import dataclasses
import typing

import pytest
import torch

from .harness import Cases, r

cases = Cases()


def two():
    return r(3), r(3)


Pair = collections.namedtuple("Pair", ["first", "second"])


class Output(typing.NamedTuple):
    logits: torch.Tensor
    loss: typing.Optional[torch.Tensor] = None
    n: int = 0


@dataclasses.dataclass
class State:
    hidden: torch.Tensor
    step: int = 0
    tags: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Config:
    width: int = 3
    use_bias: bool = True
    act: str = "relu"


class Scaler:
    factor = 2  # class attribute

    def __init__(self, bias):
        self.bias = bias
        self._calls = 0

    def apply(self, x):
        self._calls += 1
        return x * self.factor + self.bias

    @property
    def double_bias(self):
        return self.bias * 2

    @staticmethod
    def clip(x):
        return x.clamp(-1, 1)

    @classmethod
    def make(cls, bias):
        return cls(bias)


class ShiftScaler(Scaler):
    factor = 3

    def __init__(self, bias, shift):
        super().__init__(bias)
        self.shift = shift

    def apply(self, x):
        return super().apply(x) + self.shift


class Base:
    def __init__(self):
        self.log = []

    def forward(self, x):
        self.log.append("base")
        return x + 1


class Middle(Base):
    def forward(self, x):
        self.log.append("middle")
        return super().forward(x) * 2


class Leaf(Middle):
    def forward(self, x):
        return Base.forward(self, x) + super().forward(x)


# ------------------------------------------------------------------------------------ namedtuples

@cases.add(two)
def namedtuple_build_return(x, y):
    p = Pair(x + y, second=x * y)
    return p, p.first - p[1], p._replace(first=x)


@cases.add(lambda: (Pair(r(3), r(3)),))
def namedtuple_input(p):
    a, b = p
    return Pair(a * 2, p.second + b), len(p), Pair._fields


@cases.add(two)
def typing_namedtuple(x, y):
    out = Output(logits=x @ y.unsqueeze(1))
    with_loss = Output(x, (x - y).pow(2).mean(), 3)
    return out, with_loss, out.loss is None, with_loss._asdict()


@cases.add(lambda: (Output(r(3), r(3), 2),))
def typing_namedtuple_input(o):
    return o.logits * o.n + o.loss, isinstance(o, tuple)


# ------------------------------------------------------------------------------------ dataclasses

@cases.add(two)
def dataclass_created_in_frame(x, y):
    s = State(hidden=x)
    s.hidden = s.hidden + y
    s.step += 1
    s.tags.append("a")
    return s, s.hidden * s.step


@cases.add(lambda: (r(3),))
def dataclass_frozen_config(x):
    cfg = Config(width=4)
    y = x * cfg.width
    if cfg.use_bias:
        y = y + 1
    return torch.relu(y) if cfg.act == "relu" else y, dataclasses.replace(cfg, act="gelu")


@cases.add(lambda: (State(r(3), step=2, tags=["t"]),))
def dataclass_input_read_and_mutate(s):
    s.step = s.step + 1
    s.tags.append("seen")
    return s.hidden * s.step, dataclasses.fields(s)[0].name, dataclasses.is_dataclass(s)


# ------------------------------------------------------------------------------------ user classes

@cases.add(two)
def class_methods_and_properties(x, y):
    s = Scaler(y)
    return s.apply(x), s.double_bias, Scaler.clip(x), s.clip(y), Scaler.make(1).apply(x), s._calls


@cases.add(two)
def inheritance_super(x, y):
    s = ShiftScaler(y, 5)
    return s.apply(x), s.factor, isinstance(s, Scaler), type(s).__name__


@cases.add(lambda: (r(3),))
def multilevel_super(x):
    leaf = Leaf()
    return leaf.forward(x), leaf.log


@cases.add(lambda: (Scaler(r(3)), r(3)))
def user_object_input(s, x):
    return s.apply(x) + s.bias, s.double_bias


@cases.add(lambda: (ShiftScaler(r(3), 2), r(3)))
def user_object_input_subclass(s, x):
    return s.apply(x) * s.shift, s.factor


class Counter:
    def __init__(self):
        self.n = 0
        self.history = []


@cases.add(lambda: (Counter(), r(3)))
def user_object_input_mutated(c, x):
    c.n += 1
    c.history.append(c.n)
    c.last = x * 2
    return x + c.n


class WithDunder:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return WithDunder(self.t + other.t)

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.t * i

    def __call__(self, x):
        return self.t * x

    def __contains__(self, k):
        return k == "t"


@cases.add(two)
def user_class_dunders(x, y):
    a, b = WithDunder(x), WithDunder(y)
    c = a + b
    return c.t, len(c), c[2], c(x), "t" in c, "u" in c


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


@cases.add(two)
def slotted_class(x, y):
    s = Slotted(x, y)
    s.a = s.a * 2
    return s.a + s.b


@cases.add(lambda: (r(3),))
def class_defined_elsewhere_attrs(x):
    return x * Scaler.factor + ShiftScaler.factor, Scaler.__name__, ShiftScaler.__mro__[1] is Scaler


@pytest.mark.parametrize("case", cases.params())
def test_objects(case):
    case.run()
