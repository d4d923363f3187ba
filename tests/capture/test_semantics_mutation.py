"""Python state a captured frame reads and mutates: attributes of objects, classes and modules from
outside, outside dicts and lists. Each case runs compiled (backend="eager", fullgraph unless it needs a
break) against plain Python over several calls, with the state changed between calls, and compares the
results, the arguments, and the outside state both leave behind.

  * the side effects' replay reads every value and target before it applies the first effect: a value
    the frame read through a source (`d['k']`, `box.a`) is what was there when the frame started, which
    an earlier effect may replace;
  * an attribute stored, then deleted, in the frame may not have existed before it; a deleted attribute
    that the frame did not store must exist when the frame starts (guarded);
  * a missing attribute the frame looked up (`getattr(cls, name, default)`) is guarded to stay missing,
    on classes, Python modules, nn.Modules, unset slots and through super();
  * special attributes changed between calls keep the objects' identities: `C.__bases__ = ...` (a new
    MRO), `C.__name__ = ...`, `fn.__code__ = ...` (an inlined function, or the compiled one itself);
    assigning them inside the frame is a graph break.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import sys
import types

import pytest
import torch

from graphjit.exc import Unsupported
from graphjit.testing import assert_same, clone_tree, Step
from .harness import gj, r

_ABSENT = "<absent>"


def _read(state):
    return [clone_tree(getattr(obj, name, _ABSENT)) for obj, name in state]


def _write(state, values):
    for (obj, name), value in zip(state, values):
        if value is _ABSENT:
            if hasattr(obj, name):
                delattr(obj, name)
        else:
            setattr(obj, name, value)


def check_calls(fn, steps, state=(), fullgraph=True):
    """Compile `fn` once; for each Step: its `before`, then `fn` plain and compiled, each from the same
    outside `state` ([(object, attribute name)], restored in between) on independent copies of the
    arguments. Outputs, arguments after the call and the state left behind must match."""
    gj.reset()
    compiled = gj.compile(fn, backend="eager", fullgraph=fullgraph)
    for i, step in enumerate(steps):
        if step.before is not None:
            step.before()
        torch.manual_seed(i)
        args = tuple(step.make_args())
        plain_args, compiled_args = clone_tree(args), clone_tree(args)
        start = _read(state)
        expected = fn(*plain_args)
        expected_state = _read(state)
        _write(state, start)
        actual = compiled(*compiled_args)
        where = f"step {i}"
        assert_same(actual, expected, where=f"{where}: output")
        assert_same(compiled_args, plain_args, where=f"{where}: arguments after the call")
        assert_same(_read(state), expected_state, where=f"{where}: outside state after the call")
    return compiled


class Box:
    def __init__(self, t, k=2):
        self.t = t
        self.k = k


def box(**attrs):
    b = Box(r(3))
    for name, value in attrs.items():
        setattr(b, name, value)
    return b


# --------------------------------------------------------------- effects read their values first

def setattr_from_dict_then_store(t, u, d, b):
    v = d["k1"] if "k1" in d else u
    setattr(b, "z", v)
    d["k1"] = u
    return v * 2


def test_attribute_keeps_the_dict_value_read_before_the_dict_store():
    check_calls(setattr_from_dict_then_store, [Step(lambda: (r(3), r(3), {"k0": r(3), "k1": r(3)}, box()))] * 3 +
                [Step(lambda: (r(3), r(3), {"k0": r(3)}, box()))])


def del_read_key_then_append(t, d, lst):
    v = d["k1"] if "k1" in d else t
    if "k1" in d:
        del d["k1"]
    lst.append(v)
    return t + 1


def test_list_keeps_the_value_of_a_key_deleted_later():
    check_calls(del_read_key_then_append, [Step(lambda: (r(3), {"k0": r(3), "k1": r(3)}, [])),
                                            Step(lambda: (r(3), {"k1": r(3)}, [r(3)])),
                                            Step(lambda: (r(3), {"k0": r(3)}, []))])


def swap_attributes(b, t):
    old = b.t
    b.t = b.k
    b.k = old
    return t + 1


def test_attributes_swapped_through_a_local():
    check_calls(swap_attributes, [Step(lambda: (box(), r(3)))] * 3)


def store_then_overwrite_source(b, d, t):
    b.saved = d["a"]
    b.first = b.t
    d["a"] = t
    b.t = t * 2
    return t + 1


def test_values_read_before_their_sources_are_overwritten():
    check_calls(store_then_overwrite_source, [Step(lambda: (box(), {"a": r(3)}, r(3)))] * 3)


def replace_inner_list_then_mutate_it(d, t):
    inner = d["inner"]
    d["inner"] = [t]
    inner.append(t)
    return t + 1


def test_inner_list_replaced_in_its_dict_then_mutated():
    """The list the frame appends to is the one `d['inner']` held when the frame started."""
    inner = []

    def args():
        inner[:] = [r(2)]
        return {"inner": inner, "other": 1}, r(2)
    check_calls(replace_inner_list_then_mutate_it, [Step(args)] * 3)


_G_VALUE = None
_G_DICT = {"a": torch.zeros(2)}


def global_takes_a_dict_value_then_replaced(t):
    global _G_VALUE
    _G_VALUE = _G_DICT["a"]
    _G_DICT["a"] = t
    return t + 1


def test_global_keeps_the_dict_value_read_before_the_dict_store():
    module = sys.modules[global_takes_a_dict_value_then_replaced.__module__]
    check_calls(global_takes_a_dict_value_then_replaced, [Step(lambda: (r(2),))] * 3,
                state=[(module, "_G_VALUE"), (module, "_G_DICT")])


# --------------------------------------------------------------- deleting attributes

def set_then_delete(b, n):
    b.extra = n
    if hasattr(b, "extra"):
        del b.extra
    return n + 1


def test_attribute_set_then_deleted_whether_or_not_it_existed():
    check_calls(set_then_delete, [Step(lambda: (box(), 1)), Step(lambda: (box(extra=5), 1)),
                                  Step(lambda: (box(), 1))])


def delete_existing(b, t):
    del b.extra
    return t + 1


def test_deleted_attribute_must_exist_when_the_frame_starts():
    """The second object lacks the attribute: the entry misses, the trace meets CPython's error, and (even
    with fullgraph) the frame runs in CPython, which raises it as eager does."""
    compiled = check_calls(delete_existing, [Step(lambda: (box(extra=1), r(3)))] * 2)
    b = box()
    with pytest.raises(AttributeError, match="'Box' object has no attribute 'extra'"):
        compiled(b, r(3))
    assert not hasattr(b, "extra")


def delete_then_append(b, lst, t):
    del b.extra
    lst.append(1)
    return t + 1


def test_deleting_a_missing_attribute_raises_before_later_effects():
    """Without fullgraph the second call runs eagerly: the AttributeError comes before the append."""
    compiled = gj.compile(delete_then_append, backend="eager")
    lst = []
    assert torch.equal(compiled(box(extra=1), lst, torch.zeros(3)), torch.ones(3))
    with pytest.raises(AttributeError, match="extra"):
        compiled(box(), lst, torch.zeros(3))
    assert lst == [1]


def delete_then_store(b, t):
    del b.t
    b.t = t
    b.k = 3
    del b.k
    b.extra = 1
    b.k = 4
    return t + 1


def test_attribute_deleted_then_stored_moves_to_the_end_of_the_instance_dict():
    compiled = gj.compile(delete_then_store, backend="eager", fullgraph=True)
    for _ in range(3):
        plain_box, compiled_box, t = box(), box(), r(3)
        delete_then_store(plain_box, t)
        compiled(compiled_box, t)
        assert list(vars(compiled_box)) == list(vars(plain_box)) == ["t", "extra", "k"]
        assert compiled_box.t is t and compiled_box.k == 4


class Slotted:
    __slots__ = ("a", "b")


def slotted(**attrs):
    s = Slotted()
    for name, value in attrs.items():
        setattr(s, name, value)
    return s


def slots_set_and_deleted(s, t):
    s.a = t
    del s.a
    del s.b
    return t + getattr(s, "a", 3)


def test_slots_set_then_deleted_and_deleted():
    check_calls(slots_set_and_deleted, [Step(lambda: (slotted(b=1), r(3))), Step(lambda: (slotted(a=1, b=2), r(3))),
                                        Step(lambda: (slotted(b=1), r(3)))])


class Scratch(torch.nn.Module):
    def forward(self, x):
        self.tmp = x
        del self.tmp
        del self.old
        return x + 1


def test_module_attribute_set_then_deleted():
    m = Scratch()
    compiled = gj.compile(m, backend="eager", fullgraph=True)
    for _ in range(2):
        m.old = 1
        x = r(3)
        assert torch.equal(compiled(x), x + 1)
        assert not hasattr(m, "tmp") and not hasattr(m, "old")


# --------------------------------------------------------------- missing attributes stay missing

class Shared:
    pass


def class_attribute_with_default(b, t):
    return t + getattr(Shared, "shared", 0), getattr(type(b), "flag", 1)


def test_missing_class_attribute_is_guarded():
    def set_shared():
        Shared.shared = 5

    def set_flag():
        Box.flag = 7
    state = [(Shared, "shared"), (Box, "flag")]
    try:
        check_calls(class_attribute_with_default, [Step(lambda: (box(), r(3))), Step(lambda: (box(), r(3)), before=set_shared),
                                                   Step(lambda: (box(), r(3)), before=set_flag)], state=state)
    finally:
        _write(state, [_ABSENT, _ABSENT])


def class_store_in_frame(b, n):
    v = getattr(Shared, "counter", 0) + n
    Shared.counter = n
    b.extra = v
    return v


def test_class_attribute_the_frame_writes_is_guarded():
    """`Shared.counter = n` is a graph break: the part before it must not keep the first call's read."""
    state = [(Shared, "counter")]
    _write(state, [_ABSENT])
    try:
        check_calls(class_store_in_frame, [Step(lambda: (box(), 2))] * 3, state=state, fullgraph=False)
    finally:
        _write(state, [_ABSENT])


_MOD = types.ModuleType("_mutation_test_module")


def module_attribute_with_default(t):
    return t + getattr(_MOD, "k", 1)


def test_missing_module_attribute_is_guarded():
    state = [(_MOD, "k")]
    check_calls(module_attribute_with_default, [Step(lambda: (r(3),)),
                                                Step(lambda: (r(3),), before=lambda: setattr(_MOD, "k", 7)),
                                                Step(lambda: (r(3),), before=lambda: delattr(_MOD, "k"))], state=state)


class Flagged(torch.nn.Module):
    def forward(self, x):
        return x + getattr(self, "flag", 0)


def test_missing_nn_module_attribute_is_guarded():
    m = Flagged()
    compiled = gj.compile(m, backend="eager", fullgraph=True)
    x = r(3)
    assert torch.equal(compiled(x), x)
    m.flag = 5
    assert torch.equal(compiled(x), x + 5)


def unset_slot_with_default(s, t):
    return t + getattr(s, "a", 2)


def test_unset_slot_is_guarded():
    check_calls(unset_slot_with_default, [Step(lambda: (slotted(), r(3))), Step(lambda: (slotted(a=9), r(3))),
                                          Step(lambda: (slotted(), r(3)))])


class Parent:
    def value(self):
        return 1


class Child(Parent):
    def value(self):
        return getattr(super(), "extra", lambda: 3)()


def super_attribute_with_default(c, t):
    return t + c.value()


def test_missing_attribute_through_super_is_guarded():
    state = [(Parent, "extra")]
    try:
        check_calls(super_attribute_with_default,
                    [Step(lambda: (Child(), r(3))),
                     Step(lambda: (Child(), r(3)), before=lambda: setattr(Parent, "extra", lambda self: 11))],
                    state=state)
    finally:
        _write(state, [_ABSENT])


# --------------------------------------------------------------- special attributes: __bases__, __code__

class Left:
    k = 1

    @classmethod
    def which(cls):
        return 1


class Right:
    k = 2

    @classmethod
    def which(cls):
        return 2


class Rebased(Left):
    pass


class RebasedChild(Rebased):
    pass


def rebase(bases):
    return lambda: setattr(Rebased, "__bases__", bases)


def isinstance_of_a_base(o, t):
    return t + isinstance(o, Right) + 2 * issubclass(type(o), Left) + 4 * issubclass(RebasedChild, Right)


def classmethod_through_the_mro(t):
    return t + Rebased.which() + RebasedChild.which()


@pytest.mark.parametrize("fn", [isinstance_of_a_base, classmethod_through_the_mro])
def test_class_rebased_between_calls(fn):
    """`C.__bases__ = ...` keeps C's identity but gives it (and its subclasses) a new MRO."""
    args = (lambda: (RebasedChild(), r(3))) if fn is isinstance_of_a_base else (lambda: (r(3),))
    state = [(Rebased, "__bases__")]
    try:
        check_calls(fn, [Step(args), Step(args, before=rebase((Right,))), Step(args, before=rebase((Left,))),
                         Step(args, before=rebase((Right, Left)))], state=state)
    finally:
        Rebased.__bases__ = (Left,)


def rebase_in_frame(t):
    a = Rebased.k
    Rebased.__bases__ = (Right,)
    return t + a + Rebased.k


def test_class_rebased_in_the_frame_is_a_graph_break():
    with pytest.raises(Unsupported, match="__bases__"):
        gj.compile(rebase_in_frame, backend="eager", fullgraph=True)(r(3))
    Rebased.__bases__ = (Left,)
    try:
        check_calls(rebase_in_frame, [Step(lambda: (r(3),), before=rebase((Left,)))] * 3,
                    state=[(Rebased, "__bases__")], fullgraph=False)
    finally:
        Rebased.__bases__ = (Left,)


def class_name(o, t):
    return t + (type(o).__name__ == "Rebased")


def test_class_renamed_between_calls():
    try:
        check_calls(class_name, [Step(lambda: (Rebased(), r(3))),
                                 Step(lambda: (Rebased(), r(3)), before=lambda: setattr(Rebased, "__name__", "Other"))],
                    state=[(Rebased, "__name__")])
    finally:
        Rebased.__name__ = "Rebased"


def _plus_one(t):
    return t + 1


def _plus_two(t):
    return t + 2


_PLUS_ONE_CODE = _plus_one.__code__


def calls_plus_one(t):
    return _plus_one(t) * 2


def _swap_code(fn, code):
    return lambda: setattr(fn, "__code__", code)


@pytest.mark.parametrize("fn", [calls_plus_one, _plus_one])
def test_function_code_replaced_between_calls(fn):
    """An inlined function's __code__ (or the compiled function's own) replaced keeps the function object."""
    state = [(_plus_one, "__code__")]
    try:
        check_calls(fn, [Step(lambda: (r(3),)), Step(lambda: (r(3),), before=_swap_code(_plus_one, _plus_two.__code__)),
                         Step(lambda: (r(3),), before=_swap_code(_plus_one, _PLUS_ONE_CODE))], state=state)
    finally:
        _plus_one.__code__ = _PLUS_ONE_CODE


def code_replaced_in_frame(t):
    a = _plus_one(t)
    _plus_one.__code__ = _plus_two.__code__
    return a + _plus_one(t)


def test_function_code_replaced_in_the_frame_is_a_graph_break():
    with pytest.raises(Unsupported, match="__code__"):
        gj.compile(code_replaced_in_frame, backend="eager", fullgraph=True)(r(3))
    _plus_one.__code__ = _PLUS_ONE_CODE
    try:
        check_calls(code_replaced_in_frame, [Step(lambda: (r(3),), before=_swap_code(_plus_one, _PLUS_ONE_CODE))] * 3,
                    state=[(_plus_one, "__code__")], fullgraph=False)
    finally:
        _plus_one.__code__ = _PLUS_ONE_CODE


# --------------------------------------------------------------- closures of functions from outside

def _class_logging_to(log):
    class Logged:
        def __enter__(self):
            log.append("enter")
            return 2

        def __exit__(self, *exc):
            log.append("exit")

        @property
        def size(self):
            log.append("size")
            return len(log)
    return Logged


CLOSURE_LOG = []
Logged = _class_logging_to(CLOSURE_LOG)


def methods_append_to_their_closures_list(t):
    o = Logged()
    with o as k:
        t = t * k
    return t + o.size


def test_methods_found_on_a_class_mutate_lists_in_their_closures():
    """A method reached through its class has no source of its own: its closure cells are read through
    the function object, so the list in a cell is the outside list and its appends are replayed."""
    gj.reset()
    compiled = gj.compile(methods_append_to_their_closures_list, backend="eager", fullgraph=True)
    for _ in range(3):
        t = r(3)
        CLOSURE_LOG.clear()
        expected = methods_append_to_their_closures_list(t)
        expected_log = list(CLOSURE_LOG)
        CLOSURE_LOG.clear()
        assert_same(compiled(t), expected)
        assert CLOSURE_LOG == expected_log


def _repeat_in_place(x, lst, lst2, lst3):
    import collections
    import operator
    lst *= 2
    operator.imul(lst2, 3)
    lst3 *= 0
    local = [x, 1]
    alias = local
    local *= 2
    q = collections.deque([1, 2], maxlen=3)
    q_alias = q
    q *= 2
    return x + 1, len(alias), list(q_alias)


def test_list_and_deque_repeated_in_place():
    """`lst *= n` and operator.imul repeat the list itself: an argument list, an alias of a local list and
    a bounded deque (which keeps its last maxlen items) all see it (a new list was made instead)."""
    compiled = gj.compile(_repeat_in_place, backend="eager", fullgraph=True)
    for n in range(2):
        args = [torch.randn(2), [n, torch.zeros(2)], [5], [1, 2]]
        mine = clone_tree(args)
        expected = _repeat_in_place(*args)
        got = compiled(*mine)
        assert_same(got, expected)
        assert_same(mine, args)


def _append_to_history(x, history):
    y = x.sin() * 2
    history.append(y)
    return y + sum(history), len(history)


def test_appending_to_an_outside_deque_breaks_the_graph_only_there():
    """deque.append on a bounded deque from outside: the call runs in CPython at a graph break (its bound
    method rebuilt in the entry), the rest is captured (the whole frame ran eagerly), and the deque drops
    its oldest item as in eager."""
    import collections
    from graphjit.testing import CompileCounter
    counter = CompileCounter()
    compiled = gj.compile(_append_to_history, backend=counter)
    eager_history, history = collections.deque(maxlen=3), collections.deque(maxlen=3)
    for _ in range(5):
        x = torch.randn(4)
        assert_same(compiled(x, history), _append_to_history(x, eager_history))
        assert_same(list(history), list(eager_history))
    assert counter.frame_count >= 1
