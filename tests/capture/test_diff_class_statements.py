"""`class` statements inside compiled functions: built while tracing where that keeps eager's meaning
(graphjit/capture/variables/classdef.py), otherwise a graph break; never a class shared between calls
where eager makes a new one each call.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import abc

import torch

import graphjit
from graphjit.testing import check

SCALE = 2.0
REGISTRY = []
ESCAPED = []


def r3():
    return (torch.randn(3),)


class Base:
    def describe(self):
        return 10


class Registered:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        REGISTRY.append(cls.__name__)


def test_a_class_with_init_and_methods_is_one_graph():
    def fn(x):
        class Point:
            """a point"""
            dims: int = 3

            def __init__(self, v, w=(1, 2), *, z=5):
                self.v = v
                self.z = z

            def norm(self):
                return (self.v * self.v).sum().sqrt() + self.z + self.dims

        p = Point(x.sin())
        return p.norm() * 2, Point.__name__, Point.__doc__, isinstance(p, Point)
    check(fn, r3, graphs=1)


def test_decorators_super_and_bases():
    def fn(x):
        class Shape(Base, abc.ABC):
            def __init__(self, v):
                self._v = v

            @staticmethod
            def twice(t):
                return t * 2

            @classmethod
            def name(cls):
                return cls.__name__

            @property
            def v(self):
                return self._v

            @v.setter
            def v(self, value):
                self._v = value + 1

            def describe(self):
                return super().describe() + 1

        s = Shape(x)
        s.v = s.v * 3
        return Shape.twice(s.v) + s.describe(), s.name(), type(s).__mro__[1] is Base
    check(fn, r3, graphs=1)


def test_a_class_attribute_from_a_global_follows_the_global():
    global SCALE

    def fn(x):
        class Scaled:
            factor = SCALE
        return x * Scaled.factor

    compiled = graphjit.compile(fn, backend="eager")
    x = torch.randn(3)
    try:
        assert torch.equal(compiled(x), fn(x))
        SCALE = 5.0
        assert torch.equal(compiled(x), x * 5.0)
    finally:
        SCALE = 2.0


def test_a_class_that_leaves_the_frame_is_a_new_class_each_call():
    def ret_cls(x):
        y = x + 1

        class P:
            pass
        return P, y * 2

    def ret_instance(x):
        y = x + 1

        class P:
            def __init__(self, v):
                self.v = v
        return P(y), y * 2

    def ret_method(x):
        y = x + 1

        class P:
            def m(self):
                return 1
        return P.m, y * 2

    def stored(x):
        y = x + 1

        class P:
            pass
        ESCAPED.append(P)
        return y * 2

    x = torch.randn(3)
    for fn, pick in ((ret_cls, lambda r: r[0]), (ret_instance, lambda r: type(r[0])),
                     (ret_method, lambda r: r[0]), (stored, lambda r: ESCAPED[-1])):
        compiled = graphjit.compile(fn, backend="eager")
        first = compiled(x)
        a = pick(first)
        second = compiled(x)
        b = pick(second)
        assert a is not b, fn.__name__
        assert torch.equal(first[1] if isinstance(first, tuple) else first, (x + 1) * 2)
        if fn is ret_instance:
            assert torch.equal(first[0].v, x + 1)
    ESCAPED.clear()


def test_class_state_starts_fresh_on_every_call():
    def counter(x):
        class C:
            n = 0

            @classmethod
            def bump(cls):
                cls.n += 1
                return cls.n
        C.bump()
        return x + C.bump()

    def listed(x):
        class C:
            items = []
        C.items.append(1)
        return x + len(C.items)

    def defaulted(x):
        class C:
            def add(self, v, acc=[]):
                acc.append(v)
                return len(acc)
        return x + C().add(1)

    for fn in (counter, listed, defaulted):
        check(fn, r3, graphs=None)


def test_class_bodies_with_effects_or_outside_variables_run_on_every_call():
    calls = []

    def closes_over(x):
        k = 3

        class C:
            def get(self):
                return k
        return x * C().get()

    def registers(x):
        class Child(Registered):
            pass
        return x + 1

    def logs(x):
        class C:
            calls.append(1)
        return x + len(calls)

    check(closes_over, r3, graphs=None)
    before = len(REGISTRY)
    compiled = graphjit.compile(registers, backend="eager")
    for _ in range(3):
        compiled(torch.randn(3))
    assert len(REGISTRY) == before + 3
    compiled = graphjit.compile(logs, backend="eager")
    x = torch.randn(3)
    assert torch.equal(compiled(x), x + 1) and torch.equal(compiled(x), x + 2)


def test_explain_counts_a_captured_class_statement():
    def fn(x):
        y = x.cos()

        class Box:
            def __init__(self, v):
                self.v = v
        return Box(y).v + 1
    out = graphjit.explain(fn, torch.randn(3))
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons


class _CountsSetName:
    calls = 0

    def __set_name__(self, owner, name):
        type(self).calls += 1


class _Decorates:
    calls = 0

    def setter(self, fn):
        type(self).calls += 1
        return fn


SET_NAME = _CountsSetName()
DECORATES = _Decorates()


def test_a_class_inside_a_constant_is_a_new_class_each_call():
    def fn(x):
        class P:
            pass
        return x + 1, {P}, KeyError(P), slice(P, None), frozenset([P])

    compiled = graphjit.compile(fn, backend="eager")
    first, second = compiled(torch.ones(1)), compiled(torch.ones(1))
    assert next(iter(first[1])) is not next(iter(second[1]))
    assert first[2].args[0] is not second[2].args[0] and first[3].start is not second[3].start
    assert next(iter(first[4])) is not next(iter(second[4]))


def test_class_bodies_whose_building_has_effects_run_on_every_call():
    def fn(x):
        class P:
            d = SET_NAME                    # type.__new__ calls its __set_name__

            @DECORATES.setter               # a .setter that is not a property's
            def m(self):
                return 1
        return x + 1

    _CountsSetName.calls = _Decorates.calls = 0
    compiled = graphjit.compile(fn, backend="eager")
    for _ in range(3):
        compiled(torch.ones(1))
    assert (_CountsSetName.calls, _Decorates.calls) == (3, 3)


def test_a_class_with_a_builtin_base():
    def defines(x):
        class Pair(tuple):
            def total(self):
                return self[0] + self[1]
        return x + 1

    def uses(x):
        class Pair(tuple):
            def total(self):
                return self[0] + self[1]
        return Pair((x, x * 2)).total()        # a tuple subclass's instance: a graph break, eager's result

    check(defines, r3, graphs=1)
    check(uses, r3, graphs=None)


def test_exceptions_made_in_the_frame_are_new_objects_each_call():
    def plain(x):
        return x + 1, ValueError("a")

    def own_class(x):
        class E(Exception):
            pass
        return x + 1, E("a")

    for fn in (plain, own_class):
        compiled = graphjit.compile(fn, backend="eager")
        first, second = compiled(torch.ones(1))[1], compiled(torch.ones(1))[1]
        assert first is not second and first.args == second.args == ("a",)
        assert (type(first) is type(second)) == (fn is plain)
