"""Python semantics of objects in captured code: identity and equality, user dunder methods (binary
operators, reflection, comparisons, bool/len/hash/contains/iter), the descriptor protocol on stores,
defaults read at call time, and function attributes. Each case runs compiled (fullgraph, backend counting
graphs) against plain Python; cases capture must refuse assert Unsupported under fullgraph and the same
result as Python without it.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import abc
import contextlib
import io
import collections
import dataclasses
import functools

import pytest
import torch

from graphjit import config
from graphjit.exc import Unsupported
from graphjit.testing import check, check_raises, check_steps, Step
from .harness import Cases, assert_refused, gj, r

cases = Cases()


def one():
    return (r(3),)


# ------------------------------------------------------------------------------------ classes used

class Plain:
    pass


class Val:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        if not isinstance(other, Val):
            return NotImplemented
        return self.v == other.v

    __hash__ = None


class NeOnly:
    def __ne__(self, other):
        return "ne"


class Base:
    def __eq__(self, other):
        return "base eq"

    def __add__(self, other):
        return "base add"

    def __radd__(self, other):
        return "base radd"


class Sub(Base):
    def __eq__(self, other):
        return "sub eq"

    def __radd__(self, other):
        return "sub radd"


class SubNoOverride(Base):
    pass


class Ordered:
    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return NotImplemented

    def __gt__(self, other):
        return ("gt", self.v, other.v)


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(self.t + other.t)
        return NotImplemented

    def __radd__(self, other):
        return Vec(self.t + other)

    def __mul__(self, k):
        return Vec(self.t * k)

    def __rmul__(self, k):
        return Vec(self.t * (k + 1))

    def __neg__(self):
        return Vec(-self.t)


class Acc:
    def __init__(self):
        self.items = []

    def __iadd__(self, other):
        self.items.append(other)
        return self


class NoIAdd:
    def __init__(self, n):
        self.n = n

    def __add__(self, other):
        return NoIAdd(self.n + other)


class RightOnly:
    def __radd__(self, other):
        return ("radd", other)

    def __rsub__(self, other):
        return NotImplemented


class Pt(collections.namedtuple("Pt", "x y")):
    __slots__ = ()

    def __add__(self, other):
        return Pt(self.x + other[0], self.y + other[1])


class PtR(collections.namedtuple("PtR", "x y")):
    __slots__ = ()

    def __radd__(self, other):
        return ("radd", len(other))


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class BadBool:
    def __bool__(self):
        return 1


class NegLen:
    def __len__(self):
        return -1


class Bag:
    def __init__(self, items):
        self.items = items

    def __contains__(self, x):
        return x in self.items

    def __iter__(self):
        return iter(self.items)


class Never:
    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


class Hashed:
    def __init__(self, h):
        self.h = h

    def __hash__(self):
        return self.h


class Callme:
    def __call__(self, x):
        return x * 3


class CallNone:
    __call__ = None


# ------------------------------------------------------------------------------------ identity, ==

@cases.add(one)
def new_objects_are_distinct(x):
    a, b = Plain(), Plain()
    c = a
    return x + 1, a == b, a is b, a != b, a is c, a == c, a is not b, callable(a)


@cases.add(one)
def eq_dunder_inlined(x):
    a, b, c = Val(1), Val(1), Val(2)
    return x + 1, a == b, a != b, a == c, a != c, a == 1, 1 == a, a != 1, None == a


@cases.add(one)
def ne_without_eq(x):
    a = NeOnly()
    return x + 1, a != 1, a == a, a == NeOnly()


@cases.add(one)
def reflected_comparison_subclass_first(x):
    return x + 1, Base() == Sub(), Sub() == Base(), Base() == SubNoOverride(), Base() == Base()


@cases.add(one)
def lt_not_implemented_reflects_to_gt(x):
    return x + 1, Ordered(1) < Ordered(2)


@cases.add(one)
def contains_uses_identity_first(x):
    n = Never()
    return x + 1, n in [n], n in [Never()], [n].count(n), n == n, [n].index(n)


@cases.add(one)
def containers_of_objects_compare(x):
    a = Val(1)
    return x + 1, [a, 2] == [Val(1), 2], (a,) == (Val(2),), {"k": a} == {"k": Val(1)}, [1] == (1,), {1: 2} == {1}


@cases.add(one)
def callable_follows_the_type(x):
    def inner():
        return 1
    return (x + 1, callable(Plain()), callable(Callme()), callable(CallNone()), callable(inner),
            callable(lambda: 0), callable(Plain), callable([]), callable(x), callable(Callme().__call__))


@cases.add(lambda: (Plain(), Plain(), r(3)))
def outside_objects_identity(a, b, x):
    return x + 1, a is b, a == b, a != b


@cases.add(lambda: (r(3), torch.nn.Parameter(torch.randn(3))))
def the_class_of_a_tensor_input(x, w):
    """type()/__class__ of a parameter input is Parameter (a library checks isinstance(p, nn.Parameter));
    the type of a tensor made from it is Tensor. Logging helpers read x.__class__.__name__."""
    y = w * 2
    return (x + y, type(w).__name__, w.__class__.__name__, x.__class__.__name__, type(y).__name__,
            isinstance(w, torch.nn.Parameter), isinstance(x, torch.nn.Parameter), isinstance(y, torch.nn.Parameter),
            w.__class__ is torch.nn.Parameter, x.__class__ is torch.Tensor, isinstance(w, x.__class__),
            type(w.detach()) is torch.Tensor)


def test_the_class_of_a_tensor_input_is_guarded():
    """The same code called with a Tensor where it saw a Parameter: the type guard recompiles."""
    def fn(x):
        return x * 2, isinstance(x, torch.nn.Parameter), type(x).__name__

    compiled = gj.compile(fn, fullgraph=True, backend="eager")
    p, t = torch.nn.Parameter(torch.randn(3)), torch.randn(3)
    for v in (p, t, p):
        got, want = compiled(v), fn(v)
        assert torch.equal(got[0], want[0]) and got[1:] == want[1:], (got, want)


def test_outside_identity_guarded():
    """`a is b` of two inputs: the relation is guarded, so aliasing on a later call recompiles."""
    o1, o2 = Plain(), Plain()

    def fn(a, b, x):
        return x + 1, a is b, a == b
    check_steps(fn, [Step(lambda: (o1, o2, r(3)), graphs=1), Step(lambda: (o1, o1, r(3)), graphs=2),
                     Step(lambda: (o2, o1, r(3)), graphs=2)])


@cases.add(one)
def bool_and_len_dunders(x):
    out = []
    for obj in (Sized(0), Sized(2), Plain()):
        out.append(bool(obj))
        if obj:
            x = x + 1
    return x + 1, out, len(Sized(3)), not Sized(0)


@cases.add(one)
def bool_dunder_must_return_bool(x):
    try:
        bool(BadBool())
        ok = True
    except TypeError:
        ok = False
    try:
        len(NegLen())
        neg = True
    except ValueError:
        neg = False
    return x + 1, ok, neg


@cases.add(one)
def len_uses_the_class_not_the_instance(x):
    s = Sized(2)
    s.__len__ = lambda: 7
    return x + 1, len(s), s.__len__()


@cases.add(one)
def contains_and_iter_dunders(x):
    b = Bag([1, 2, 3])
    total = 0
    for v in b:
        total += v
    return x * total, 2 in b, 5 in b, 5 not in b, list(b)


@cases.add(one)
def hash_dunder(x):
    return x + 1, hash(Hashed(5)), hash(Hashed(2 ** 62)), hash(Hashed(-1)), hash(Hashed(2 ** 70)), hash((1, "a"))


@cases.add(one)
def unhashable_object_raises_in_frame(x):
    try:
        hash(Val(1))
        caught = False
    except TypeError:
        caught = True
    return x + 1, caught


# ------------------------------------------------------------------------------------ binary dunders

@cases.add(one)
def user_add_and_reflected(x):
    v = Vec(x)
    return (v + Vec(x)).t, (1 + v).t, (v * 2).t, (2 * v).t, (-v).t, (x + v).t


@cases.add(one)
def reflected_subclass_first(x):
    return x + 1, Base() + Sub(), Base() + SubNoOverride(), Sub() + Base(), 1 + Base()


@cases.add(one)
def inplace_dunders(x):
    a = Acc()
    before = a
    a += x
    a += 2
    n = NoIAdd(1)
    first = n
    n += 5
    return x + 1, a.items, a is before, n.n, n is first, first.n


@cases.add(one)
def right_operand_only(x):
    r1 = 3 + RightOnly()
    lst = [1]
    lst += RightOnly()
    return x + 1, r1, lst


@cases.add(one)
def namedtuple_subclass_dunders(x):
    p = Pt(1, 2)
    q = PtR(1, 2)
    return x + 1, p + (10, 20), (10, 20) + p, p + p, (7,) + q, q + (7,), p == (1, 2), p * 2


@cases.add(lambda: (Pt(r(3), r(3)),))
def namedtuple_subclass_input(p):
    s = p + (1, 2)
    return s.x, s.y, type(s).__name__


@cases.add(one)
def unsupported_operands_raise_type_error(x):
    caught = []
    for fn in (lambda: Plain() + 1, lambda: 1 - RightOnly(), lambda: Ordered(1) >= Ordered(2),
               lambda: [1] + (2,), lambda: (1,) + [2], lambda: Acc() + Acc(), lambda: -Plain()):
        try:
            fn()
            caught.append(None)
        except TypeError as e:
            caught.append(str(e))
    return x + 1, caught


# ------------------------------------------------------------------------------------ stores

class Prop:
    def __init__(self):
        self._v = 1

    @property
    def ro(self):
        return self._v

    @property
    def rw(self):
        return self._v

    @rw.setter
    def rw(self, value):
        self._v = value * 10


@dataclasses.dataclass
class Shadowed:
    a: int = 1

    @property
    def double(self):
        return self.a * 2


class Slotted:
    __slots__ = ("a",)

    def __init__(self):
        self.a = 1


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int = 1


class Logged:
    def __init__(self):
        object.__setattr__(self, "count", 0)

    def __setattr__(self, name, value):
        object.__setattr__(self, "count", self.count + 1)
        object.__setattr__(self, name, value)


class Positive:
    """A data descriptor written in Python: validates, stores in the instance dict under another name."""

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        if value < 0:
            raise ValueError("negative")
        setattr(obj, self.name, value)


class Guarded:
    size = Positive()

    def __init__(self, n):
        self.size = n


def _try_store(obj, name, value):
    try:
        setattr(obj, name, value)
        return "stored"
    except AttributeError as e:
        return str(e)


@cases.add(one)
def property_without_setter_raises(x):
    p = Prop()
    p.rw = 2
    return x * p.rw, _try_store(p, "ro", 3), p.ro, _try_store(Shadowed(), "double", 3)


@cases.add(lambda: (Prop(), Shadowed(), r(3)))
def property_stores_on_inputs(p, s, x):
    p.rw = 3
    return x + 1, _try_store(p, "ro", 5), _try_store(s, "double", 1), p.rw, p.ro


@cases.add(one)
def slots_in_frame(x):
    s = Slotted()
    out = [s.a, _try_store(s, "b", 2)]
    del s.a
    try:
        s.a
    except AttributeError as e:
        out.append(str(e))
    return x + 1, out


class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self):
        ...

    def double(self):
        return 2 * self.area()


class Square(Shape):
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side ** 2


@cases.add(one)
def abstract_class_instantiation_raises(x):
    try:
        Shape()
        message = None
    except TypeError as e:
        message = str(e)
    return x * Square(3).double(), message


@cases.add(one)
def frozen_dataclass_in_frame(x):
    f = Frozen(2)
    try:
        f.a = 3
        out = "stored"
    except dataclasses.FrozenInstanceError as e:
        out = str(e)
    return x * f.a, out


@cases.add(lambda: (Frozen(4), r(3)))
def frozen_dataclass_input(f, x):
    try:
        f.a = 3
        out = "stored"
    except dataclasses.FrozenInstanceError as e:
        out = str(e)
    return x * f.a, out


@cases.add(lambda: (Logged(), r(3)))
def own_setattr_on_input_runs_once(o, x):
    o.a = 1
    o.b = x * 2
    return x + o.count


@cases.add(one)
def own_setattr_in_frame(x):
    o = Logged()
    o.a = 1
    o.a = 2
    return x + 1, o.count, o.a


@cases.add(one)
def python_data_descriptor(x):
    g = Guarded(3)
    g.size = 4
    try:
        g.size = -1
        err = None
    except ValueError as e:
        err = str(e)
    return x * g.size, err, g.__dict__


@cases.add(one)
def instance_dict_writes(x):
    p = Plain()
    p.__dict__["k"] = 5
    p.j = 1
    d = p.__dict__
    return x * p.k, sorted(d), "j" in p.__dict__


# ------------------------------------------------------------------------------------ defaults

def _scale(x, k=2.0):
    return x * k


def _kw_scale(x, *, k=2.0):
    return x * k


def _top(x, b=torch.ones(3)):
    return x + b


def test_top_level_default_replaced():
    original = _top.__defaults__

    def swap():
        _top.__defaults__ = (torch.full((3,), 5.0),)
    try:
        check_steps(_top, [Step(one, graphs=1), Step(one, before=swap, graphs=2), Step(one, graphs=2)])
    finally:
        _top.__defaults__ = original


def test_top_level_default_tensor_mutated_in_place():
    b = torch.ones(3)

    def fn(x, b=b):
        return x + b
    check_steps(fn, [Step(one, graphs=1), Step(one, before=lambda: b.add_(1), graphs=1)])


def test_same_code_different_defaults():
    def make(d):
        def fn(x, b=d):
            return x + b
        return fn
    gj.reset()
    f1 = gj.compile(make(1.0), backend="eager")
    f2 = gj.compile(make(2.0), backend="eager")
    x = torch.zeros(2)
    for _ in range(2):
        assert f1(x).tolist() == [1.0, 1.0]
        assert f2(x).tolist() == [2.0, 2.0]


_W = torch.randn(3)


def test_a_function_made_anew_with_the_same_default_objects_reuses_its_entry():
    """`lambda t, w=W, s=scale: ...` made on every call has a new __defaults__ tuple of the same objects:
    the entry made for the first serves the others (it compiled each until the recompile limit); other
    objects still get their own entry, and the recompile log says the defaults differ."""
    from graphjit.testing import CompileCounter

    def make(scale):
        return lambda t, w=_W, s=scale: t * w + s
    gj.reset()
    counter = CompileCounter()
    for _ in range(4):
        x = torch.randn(3)
        assert torch.equal(gj.compile(make(2), backend=counter)(x), x * _W + 2)
    assert counter.frame_count == 1
    x = torch.randn(3)
    assert torch.equal(gj.compile(make(3), backend=counter)(x), x * _W + 3)
    assert counter.frame_count == 2
    buffer = io.StringIO()
    with config.patch(logs="recompiles"), contextlib.redirect_stderr(buffer):
        gj.compile(make(4), backend=counter)(x)
    assert "__defaults__ holds other objects" in buffer.getvalue()


def _calls_scale(x):
    return _scale(x) + _kw_scale(x)


def test_inlined_callee_defaults_replaced():
    saved = _scale.__defaults__, _kw_scale.__kwdefaults__

    def swap():
        _scale.__defaults__ = (3.0,)

    def swap_kw():
        _kw_scale.__kwdefaults__ = {"k": torch.full((3,), 4.0)}

    def mutate_kw():
        _kw_scale.__kwdefaults__["k"] = -1.0
    try:
        check_steps(_calls_scale, [Step(one, graphs=1), Step(one, before=swap, graphs=2),
                                   Step(one, before=swap_kw, graphs=3), Step(one, graphs=3),
                                   Step(one, before=mutate_kw, graphs=4)])
    finally:
        _scale.__defaults__, _kw_scale.__kwdefaults__ = saved


class WithMethod:
    def helper(self, x, k=2):
        return x * k

    def run(self, x):
        return self.helper(x)


def test_method_default_replaced():
    saved = WithMethod.helper.__defaults__
    obj = WithMethod()

    def swap():
        WithMethod.helper.__defaults__ = (5,)
    try:
        check_steps(lambda x: obj.run(x), [Step(one, graphs=1), Step(one, before=swap, graphs=2)])
    finally:
        WithMethod.helper.__defaults__ = saved


def test_mutable_default_of_callee_accumulates():
    """`def g(v, acc=[])`: the default list is the function's own, mutated across calls."""
    def make():
        def g(v, acc=[]):
            acc.append(v)
            return len(acc)

        def fn(x):
            return x * g(1)
        return fn, g
    eager, eager_g = make()
    compiled_fn, compiled_g = make()
    gj.reset()
    compiled = gj.compile(compiled_fn, backend="eager", fullgraph=True)
    for _ in range(3):
        x = r(3)
        assert torch.equal(compiled(x), eager(x))
    assert compiled_g.__defaults__[0] == eager_g.__defaults__[0]


@cases.add(one)
def nested_function_defaults_assigned(x):
    def inner(a, b=1):
        return a * b
    first = inner(x)
    inner.__defaults__ = (3,)
    return first, inner(x), inner.__defaults__


# ------------------------------------------------------------------------------------ function attributes

@cases.add(one)
def wraps_in_frame(x):
    def inner(v):
        "doc of inner"
        return v + 1
    inner.tag = "t"

    @functools.wraps(inner)
    def wrapper(v):
        return inner(v) * 2
    return (wrapper(x), wrapper.__doc__, wrapper.__name__, wrapper.__qualname__, wrapper.__module__,
            wrapper.__wrapped__ is inner, wrapper.tag, sorted(wrapper.__dict__))


@cases.add(one)
def nested_function_attributes(x):
    def inner():
        return 1

    def documented():
        "has a doc"
        return 2
    inner.flag = 3
    inner.__dict__["other"] = 4
    inner.__doc__ = "set"
    try:
        inner.__name__ = 5
        err = None
    except TypeError as e:
        err = str(e)
    return (x + 1, inner.flag, inner.other, inner.__doc__, documented.__doc__, err, inner.__name__,
            inner.__module__, hasattr(inner, "missing"), getattr(inner, "flag", None))


def _documented():
    "the doc"


def test_real_function_attributes_guarded():
    saved = _documented.__doc__

    def fn(x):
        return x + 1, _documented.__doc__, getattr(_documented, "flag", None)

    def set_doc():
        _documented.__doc__ = "changed"

    def set_flag():
        _documented.flag = 1
    try:
        check_steps(fn, [Step(one, graphs=1), Step(one, before=set_doc, graphs=2),
                         Step(one, before=set_flag, graphs=3)])
    finally:
        _documented.__doc__ = saved
        _documented.__dict__.pop("flag", None)


# ------------------------------------------------------------------------------------ refusals

class TupleSub(tuple):
    def __add__(self, other):
        return "custom"


class SelfIter:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        if self.i > 3:
            raise StopIteration
        return self.i


class LenPt(collections.namedtuple("LenPt", "x y")):
    def __len__(self):
        return 5


def _tuple_subclass(x):
    return x + 1, TupleSub((1,)) + (2,)


def _user_iterator(x):
    return x + 1, [v for v in SelfIter()]


def _id_of(x):
    p = Plain()
    return x + 1, id(p) == id(p)


def _identity_of_equal_tuples(x):
    return x + 1, (1, 2) is (1, 2)


def _hash_of_plain(x):
    p, q = Plain(), Plain()
    return x + 1, hash(p) == hash(q)


def _namedtuple_overriding_len(x):
    return x + 1, len(LenPt(1, 2))


def _torch_function_object(x):
    class TF:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return "tf"
    return x == TF()


class Stamping(type):
    def __call__(cls, *args, **kwargs):
        made = super().__call__(*args, **kwargs)
        made.stamped = True
        return made


class Stamped(metaclass=Stamping):
    def __init__(self, v):
        self.v = v


def _metaclass_defining_call(x):
    s = Stamped(2)
    return x * s.v, getattr(s, "stamped", False)


REFUSED = [_tuple_subclass, _user_iterator, _id_of, _identity_of_equal_tuples, _hash_of_plain,
           _namedtuple_overriding_len, _torch_function_object, _metaclass_defining_call]


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__.lstrip("_"))
def test_refused(fn):
    assert_refused(fn, r(3))
    x = r(3)
    expected = fn(x.clone())
    actual = gj.compile(fn, backend="eager")(x.clone())
    assert repr(actual) == repr(expected)


@pytest.mark.parametrize("fn", [lambda x: Ordered(1) <= Ordered(2), lambda x: [1] + (2,)],
                         ids=["no_le", "list_plus_tuple"])
def test_type_errors(fn):
    check_raises(fn, one)


@pytest.mark.parametrize("case", cases.params())
def test_semantics(case):
    case.run()


# ------------------------------------------------------------------------------------ class attributes

class Greeter:
    scale = 2

    def f(self):
        return 1


class Block(torch.nn.Module):
    def helper(self, x):
        return x + 1

    def forward(self, x):
        return self.helper(x)


def test_method_replaced_on_class_or_shadowed_on_instance():
    """A method read from the class is guarded (per class), and so is its absence from the instance dict."""
    saved = Greeter.f
    k1, k2 = Greeter(), Greeter()

    def fn(x, k):
        return x + k.f() + k.scale

    def shadow():
        k2.f = lambda: 5

    def replace():
        Greeter.f = lambda self: 7
    try:
        check_steps(fn, [Step(lambda: (r(3), k1), graphs=1), Step(lambda: (r(3), k2), before=shadow, graphs=2),
                         Step(lambda: (r(3), k1), before=replace, graphs=3)])
    finally:
        Greeter.f = saved


def test_module_methods_replaced():
    saved = Block.helper, Block.forward
    m = Block()

    def new_helper(self, x):
        return x * 100

    def own_forward(x):
        return x - 1
    try:
        gj.reset()
        compiled = gj.compile(m, backend="eager")
        x = r(3)
        assert torch.equal(compiled(x), m(x))
        Block.helper = new_helper
        assert torch.equal(compiled(x), m(x))
        m.forward = own_forward        # the instance's own forward, shared by the compiled wrapper's __dict__
        assert torch.equal(compiled.forward(x), m(x))
        del m.forward
        outer = torch.nn.Sequential(m)
        compiled_outer = gj.compile(outer, backend="eager")
        assert torch.equal(compiled_outer(x), outer(x))
        m.forward = own_forward        # now an inlined submodule's forward: the guard must see it
        assert torch.equal(compiled_outer(x), outer(x))
    finally:
        Block.helper, Block.forward = saved
        m.__dict__.pop("forward", None)


class OwnCall(torch.nn.Module):
    def __call__(self, x):
        return x * 5

    def forward(self, x):
        return x


class CheckpointingLayer(torch.nn.Module):
    """transformers' GradientCheckpointingLayer (up to 5.17): a __call__ of its own around nn.Module's."""
    active = False

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def __call__(self, *args, **kwargs):
        if self.active and self.training:
            kwargs["scale"] = 0.5
        return super().__call__(*args, **kwargs)

    def forward(self, x, scale=1.0):
        return self.lin(x) * scale


def test_module_overriding_call_runs_its_call():
    outer = torch.nn.Sequential(OwnCall())
    gj.reset()
    x = r(3)
    assert torch.equal(gj.compile(outer, backend="eager", fullgraph=True)(x), outer(x))   # x * 5, not forward


def test_module_call_wrapping_super_call_is_captured_whole():
    layers = torch.nn.Sequential(CheckpointingLayer(), CheckpointingLayer())

    def activate():
        CheckpointingLayer.active = True
    try:
        check_steps(layers, [Step(one, graphs=1), Step(one, graphs=1),
                             Step(one, before=activate, graphs=2)])          # the class flag is guarded
    finally:
        CheckpointingLayer.active = False
    hooked = CheckpointingLayer()
    seen = []
    hooked.register_forward_hook(lambda m, a, out: seen.append(1))
    x = r(3)
    gj.reset()
    torch.testing.assert_close(gj.compile(torch.nn.Sequential(hooked), backend="eager")(x), hooked(x))
    assert len(seen) == 2                   # eager's call and the compiled one: the hook ran once each


class Limits:
    LIMIT = 2

    @staticmethod
    def clamp(v):
        return min(v, 10)


def _reads_class_attributes(x):
    obj = Limits()
    return x * obj.LIMIT + type(obj).LIMIT + Limits.clamp(3) + obj.__class__.clamp(20), hasattr(obj, "extra")


def test_class_attributes_read_through_new_objects_guarded():
    saved = Limits.LIMIT, Limits.__dict__["clamp"]

    def change():
        Limits.LIMIT = 5
        Limits.clamp = staticmethod(lambda v: -v)

    def add():
        Limits.extra = 1
    try:
        check_steps(_reads_class_attributes, [Step(one, graphs=1), Step(one, before=change, graphs=2),
                                              Step(one, before=add, graphs=3)])
    finally:
        Limits.LIMIT, Limits.clamp = saved
        if "extra" in Limits.__dict__:
            del Limits.extra


class ComputedConfig:
    """As transformers' configs: a Python __getattribute__, and properties that build a new list or dict on
    every read (JambaConfig.layer_types)."""

    def __init__(self):
        self.kinds = 2

    def __getattribute__(self, name):
        return super().__getattribute__(name)

    @property
    def layer_types(self):
        return ["mamba", "attention"][:self.kinds]

    @property
    def sizes(self):
        return {"a": 1, "b": self.kinds}

    @property
    def weights(self):
        return [torch.ones(2) * self.kinds]


def _computed_lists(x, cfg):
    a = cfg.layer_types
    b = cfg.layer_types
    a.append("x")
    d = cfg.sizes
    d["c"] = 3
    return x + len(a) + len(b) + sum(d.values()), a, b, a is b, d


def test_a_property_computing_a_new_list_through_getattribute_is_a_fresh_object_each_read():
    """Each read of such a property is a new list: the compiled frame mutates and returns its own copies,
    and a fresh entry's guards pass on its own call (they compared one read to another: every call missed)."""
    check(_computed_lists, lambda: (r(3), ComputedConfig()), graphs=1)


def test_the_computed_list_changing_recompiles():
    def fewer():
        ComputedConfig.__init__ = lambda self: setattr(self, "kinds", 1)
    saved = ComputedConfig.__init__
    try:
        check_steps(_computed_lists, [Step(lambda: (r(3), ComputedConfig()), graphs=1),
                                      Step(lambda: (r(3), ComputedConfig()), before=fewer, graphs=2)])
    finally:
        ComputedConfig.__init__ = saved


def _computed_tensors(x, cfg):
    w = cfg.weights
    w.append(x)
    return sum(w), len(w)


def test_a_property_computing_a_new_list_of_tensors_breaks_with_its_reason():
    import graphjit
    with pytest.raises(Unsupported, match="computed on every read"):
        graphjit.compile(_computed_tensors, backend="eager", fullgraph=True)(r(2), ComputedConfig())
    check(_computed_tensors, lambda: (r(2), ComputedConfig()), graphs=None)


class _Index:
    def __index__(self):
        return 1


def _string_indexed_by_an_object(x):
    return x + 1, "ab"[_Index()]


def test_a_constants_method_on_an_object_argument_is_refused_with_its_reason():
    """"ab"[obj] calls str.__getitem__, which runs only on constants: refused by name (it recursed through
    the constant's method lookup until Python's recursion limit), and eager runs the frame."""
    from graphjit.exc import Unsupported
    gj.reset()
    with pytest.raises(Unsupported, match="str.__getitem__"):
        gj.compile(_string_indexed_by_an_object, backend="eager", fullgraph=True)(torch.ones(2))
    assert gj.compile(_string_indexed_by_an_object, backend="eager")(torch.ones(2))[1] == "b"
    gj.reset()


_T = __import__("typing").TypeVar("_T")


class GenericBox(__import__("typing").Generic[_T]):
    def __init__(self, v):
        self.v = v


def generic_subscript(x):
    box = GenericBox[torch.Tensor](x * 2)
    return box.v + 1, box.__orig_class__ is GenericBox[torch.Tensor], list[int]


def test_subscripting_a_generic_class_is_captured():
    """`Box[T]` of a typing.Generic class is typing's alias, made at trace time: captured in one graph
    (it sent the frame to CPython), the instance carries its __orig_class__ as in eager."""
    from graphjit.testing import CompileCounter
    counter = CompileCounter()
    compiled = gj.compile(generic_subscript, backend=counter, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        got, want = compiled(x), generic_subscript(x)
        assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    assert counter.frame_count == 1


def abc_subscripts(x):
    import collections.abc
    kind = collections.abc.Sequence[torch.Tensor] | collections.abc.Sequence[int]
    return x.sin(), kind, collections.abc.Mapping[str, int]


def test_subscripting_an_abc_class_and_unions_of_aliases_are_captured():
    """collections.abc.Sequence[T] (a classmethod of types.GenericAlias) and `|` of two such aliases (torch's
    autograd.grad writes one in a typing.cast) are made at trace time: one graph, no break (the subscript
    raised a TypeError inside the trace, and broke the graph)."""
    from graphjit.testing import CompileCounter
    counter = CompileCounter()
    compiled = gj.compile(abc_subscripts, backend=counter, fullgraph=True)
    x = torch.randn(3)
    got, want = compiled(x), abc_subscripts(x)
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    assert counter.frame_count == 1
