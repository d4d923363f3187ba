"""Guards on class attributes reached through descriptors: each case compiles a function (backend
"eager"), changes the class or the instance between calls, and compares against plain Python.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import torch

import graphjit
from graphjit.testing import assert_same


def _same(f, g, x):
    assert_same(g(x), f(x))


def test_python_descriptor_replaced_on_class():
    class D:
        def __get__(self, obj, typ): return 1

    class D2:
        def __get__(self, obj, typ): return 7

    class E:
        d = D()

    e = E()

    def f(x): return x + e.d
    g = graphjit.compile(f, backend="eager")
    x = torch.zeros(1)
    _same(f, g, x)
    E.d = D2()
    _same(f, g, x)
    E.d = D()          # another object of the first type
    _same(f, g, x)


def test_python_descriptor_inherited_then_overridden_in_subclass():
    class D:
        def __init__(self, v): self.v = v
        def __get__(self, obj, typ): return self.v

    class Base:
        d = D(1)

    class E(Base):
        pass

    e = E()

    def f(x): return x + e.d
    g = graphjit.compile(f, backend="eager")
    x = torch.zeros(1)
    _same(f, g, x)
    E.d = D(5)
    _same(f, g, x)
    del E.d
    Base.d = D(3)
    _same(f, g, x)


def test_non_data_descriptor_shadowed_by_instance():
    class D:
        def __get__(self, obj, typ): return 1

    class E:
        d = D()

    e = E()

    def f(x): return x + e.d
    g = graphjit.compile(f, backend="eager")
    x = torch.zeros(1)
    _same(f, g, x)
    e.__dict__["d"] = 9
    _same(f, g, x)
    del e.__dict__["d"]
    _same(f, g, x)


def test_classmethod_replaced_on_class():
    class C:
        @classmethod
        def c(cls): return 1

    inst = C()

    def via_class(x): return x + C.c()
    def via_inst(x): return x + inst.c()
    f1 = graphjit.compile(via_class, backend="eager")
    f2 = graphjit.compile(via_inst, backend="eager")
    x = torch.zeros(1)
    _same(via_class, f1, x)
    _same(via_inst, f2, x)
    C.c = classmethod(lambda cls: 5)
    _same(via_class, f1, x)
    _same(via_inst, f2, x)


def test_classmethod_shadowed_by_instance():
    class C:
        @classmethod
        def c(cls): return 1

    inst = C()

    def f(x): return x + inst.c()
    g = graphjit.compile(f, backend="eager")
    x = torch.zeros(1)
    _same(f, g, x)
    inst.c = lambda: 10
    _same(f, g, x)


# ------------------------------------------------------------------ outside objects aliased later

def _check_alias(f, make):
    """make(share) -> args; compiled vs Python, first with distinct objects, then with aliased ones."""
    g = graphjit.compile(f, backend="eager")
    for share in (False, True, False):
        a, b = make(share), make(share)
        ra, rb = f(*a), g(*b)
        assert torch.equal(ra, rb), (share, ra, rb)
        assert repr(a[:-1]) == repr(b[:-1])


class _O:
    def __init__(self, v): self.v = v

    def __repr__(self): return f"O({self.v})"


def test_lists_aliased_later():
    def f(a, b, x):
        a.append(1)
        return x + len(b)

    def make(share):
        l1 = [0]
        return l1, (l1 if share else [0]), torch.ones(2)
    _check_alias(f, make)


def test_dicts_aliased_later():
    def f(a, b, x):
        a["k"] = 5
        return x + b["k"]

    def make(share):
        d = {"k": 1}
        return d, (d if share else {"k": 1}), torch.ones(2)
    _check_alias(f, make)


def test_user_objects_aliased_later():
    def f(a, b, x):
        a.v = 5
        return x + b.v

    def make(share):
        o = _O(1)
        return o, (o if share else _O(1)), torch.ones(2)
    _check_alias(f, make)


def test_three_lists_two_aliased_later():
    def f(a, b, c, x):
        a.append(1)
        c.append(2)
        return x + len(b) * 10 + len(c)

    def make(share):
        l1 = [0]
        return l1, [0], (l1 if share else [0]), torch.ones(2)
    _check_alias(f, make)
