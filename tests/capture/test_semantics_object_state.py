"""Object state the frame changes and then reads: an instance attribute deleted (its class attribute shows
through), an instance dict written through `obj.__dict__`/`vars(obj)`, a class-level list or dict reached
through an instance made in the frame or `type(obj)` (changes applied to the class's object, contents
guarded), and an exception made in the frame (one object, whichever variables hold it across a graph
break). Each compiled run is compared with eager on fresh objects: results and the objects' state after.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import torch

import graphjit


class Shadowed:
    b = 3

    def __init__(self):
        self.b = 10
        self.c = 1


class ShadowedWithGetattr(Shadowed):
    def __getattr__(self, name):
        return "fallback:" + name


def delete_then_read(obj, x):
    del obj.b
    del obj.c
    return x + 1, hasattr(obj, "b"), getattr(obj, "b", "missing"), obj.b, hasattr(obj, "c"), getattr(obj, "c", "m")


def write_dict_then_read(obj, x):
    obj.__dict__["b"] = 9
    return x + obj.b


def update_vars_then_read(obj, x):
    vars(obj).update(b=7, d=2)
    return x + obj.b + obj.d


def pop_dict_then_read(obj, x):
    obj.__dict__.pop("b")
    return x + obj.b


class Registry:
    shared = []
    table = {"scale": 2}

    def add(self, value):
        self.shared.append(value)

    def scale(self):
        return self.table["scale"]


def append_through_new_instance(x):
    Registry().add("item")
    return x + len(Registry.shared)


def append_through_type(obj, x):
    type(obj).shared.append("via type")
    return x * Registry().scale()


def _same(got, expected):
    assert type(got) is type(expected)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    elif isinstance(expected, tuple):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)
    else:
        assert got == expected


def _run_both(fn, make, calls=3):
    graphjit.reset()
    compiled = graphjit.compile(fn)
    for _ in range(calls):
        eager_args, compiled_args = make(), make()
        _same(compiled(*compiled_args), fn(*eager_args))
        for e, c in zip(eager_args, compiled_args):
            if not isinstance(e, torch.Tensor):
                assert vars(c) == vars(e)


def test_a_deleted_instance_attribute_shows_the_class_attribute():
    for cls in (Shadowed, ShadowedWithGetattr):
        _run_both(delete_then_read, lambda: (cls(), torch.ones(2)))


def test_writes_through_the_instance_dict_are_read_back():
    for fn in (write_dict_then_read, update_vars_then_read, pop_dict_then_read):
        _run_both(fn, lambda: (Shadowed(), torch.zeros(2)))


def test_a_class_level_list_changed_through_an_instance_made_in_the_frame():
    graphjit.reset()
    compiled = graphjit.compile(append_through_new_instance)
    for _ in range(3):
        Registry.shared = []
        expected = append_through_new_instance(torch.zeros(1)), list(Registry.shared)
        Registry.shared = []
        got = compiled(torch.zeros(1)), list(Registry.shared)
        _same(got, expected)
        assert got[1] == ["item"]


def test_a_class_level_dict_read_through_an_instance_made_in_the_frame_is_guarded_by_its_contents():
    graphjit.reset()
    compiled = graphjit.compile(append_through_type)
    for scale in (2, 5, 5):
        Registry.table["scale"] = scale
        Registry.shared = []
        expected = append_through_type(Registry(), torch.ones(2)), list(Registry.shared)
        Registry.shared = []
        got = compiled(Registry(), torch.ones(2)), list(Registry.shared)
        _same(got, expected)
    Registry.table["scale"] = 2


def set_attribute_of_a_new_exception(x):
    e = ValueError("x")
    e.extra = 5
    return x + e.extra, e.extra


def exception_held_twice_across_a_break(x):
    e = ValueError("x")
    holder = [e]
    print("graph break")
    return x + 1, holder[0] is e


def test_an_exception_made_in_the_frame_stays_one_object():
    for fn in (set_attribute_of_a_new_exception, exception_held_twice_across_a_break):
        _run_both(fn, lambda: (torch.ones(2),))


class Plain:
    def __init__(self):
        self.a = 1


class Buffered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv", torch.ones(3), persistent=False)


def read_instance_dict(obj, x):
    d = obj.__dict__
    return x + d["a"] + d.get("b", 10) + ("a" in d) + ("b" not in d), obj.__dict__.get("c")


def store_then_read_instance_dict(obj, x):
    obj.b = 5
    del obj.a
    return x + obj.__dict__["b"] + ("a" in obj.__dict__) + obj.__dict__.get("a", 100)


def register_buffer_in_frame(module, x):
    module.register_buffer("inv", x * 2, persistent=False)
    return module.inv + 1


def test_an_instance_dict_read_in_the_frame_is_captured_and_guarded():
    from graphjit.testing import CompileCounter
    graphjit.reset()
    counter = CompileCounter()
    compiled = graphjit.compile(read_instance_dict, backend=counter)
    for add_b in (False, False, True, True):
        eager_obj, compiled_obj = Plain(), Plain()
        if add_b:          # a key the first trace found missing: the membership guard fails, it traces again
            eager_obj.b = compiled_obj.b = 3
        _same(compiled(compiled_obj, torch.ones(2)), read_instance_dict(eager_obj, torch.ones(2)))
    assert counter.frame_count == 2, counter
    for fn in (read_instance_dict, store_then_read_instance_dict):
        assert graphjit.explain(fn)(Plain(), torch.ones(2)).graph_break_count == 0
    _run_both(store_then_read_instance_dict, lambda: (Plain(), torch.ones(2)))


def test_register_buffer_in_the_frame_is_one_graph():
    from graphjit.testing import CompileCounter
    graphjit.reset()
    counter = CompileCounter()
    compiled = graphjit.compile(register_buffer_in_frame, backend=counter)
    for _ in range(3):
        x = torch.randn(3)
        eager_m, compiled_m = Buffered(), Buffered()
        _same(compiled(compiled_m, x), register_buffer_in_frame(eager_m, x))
        _same(compiled_m.inv, eager_m.inv)
        assert "inv" not in compiled_m.state_dict()
    assert counter.frame_count == 1, counter


class Slotted:
    __slots__ = ("s", "__dict__")


def store_into_a_slot_then_read_instance_dict(obj, x):
    obj.s = 5
    d = obj.__dict__
    return x + 1, "s" in d, d.get("s", "absent")


class WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.ones(2))
        self.register_buffer("b", torch.zeros(2))

    def forward(self, x):
        self.q = self.p          # lands in _parameters, not the instance dict
        self.b = x * 2           # an existing buffer: lands in _buffers
        d = self.__dict__
        return x + 1, "q" in d, "b" in d, d.get("b", "absent")


def test_an_instance_dict_view_sees_only_stores_that_reach_the_dict():
    graphjit.reset()
    compiled = graphjit.compile(store_into_a_slot_then_read_instance_dict)
    for _ in range(2):
        _same(compiled(Slotted(), torch.ones(2)), store_into_a_slot_then_read_instance_dict(Slotted(), torch.ones(2)))
    eager_m, compiled_m = WithBuffer(), WithBuffer()
    compiled_forward = graphjit.compile(compiled_m)
    for _ in range(2):
        got, want = compiled_forward(torch.ones(2)), eager_m(torch.ones(2))
        _same(got[1:3], want[1:3])
        assert got[3] == want[3] == "absent"
        torch.testing.assert_close(got[0], want[0])


class ReadsBuffersAfterAssigning(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(2))

    def forward(self, x):
        self.b = x * 2                 # Module.__setattr__ puts it in _buffers
        return self._buffers["b"] + 1, self.b + 0


def test_a_buffer_assigned_in_the_frame_is_what_buffers_holds():
    graphjit.reset()
    eager_m, compiled_m = ReadsBuffersAfterAssigning(), ReadsBuffersAfterAssigning()
    compiled = graphjit.compile(compiled_m)
    for _ in range(2):
        x = torch.randn(2)
        _same(compiled(x), eager_m(x))
        _same(compiled_m.b, eager_m.b)
