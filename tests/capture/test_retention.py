"""What compiled code keeps alive: nothing of a call's own. Objects a frame makes (a dataclass or a user
object holding result tensors, a list, a dict), the tensors in them and the call's inputs are freed once the
caller drops them, after the compiling call as after a cached one, with and without a graph break. A
compiled function that held the first call's objects would pin activations (HF's DynamicCache of K/V
tensors) for the life of the model."""
import dataclasses
import gc
import weakref

import pytest
import torch

import graphjit


@dataclasses.dataclass
class Out:
    hidden: torch.Tensor
    cache: dict


class Holder:
    def __init__(self, t):
        self.t = t
        self.items = [t * 2]


def makes_objects(x):
    h = Holder(x.sin())
    return Out(hidden=h.t + 1, cache={"k": h.items[0], "holder": h})


def makes_objects_with_break(x):
    h = Holder(x.sin())
    print("", end="")                           # a graph break: the rest runs in a resume function
    return Out(hidden=h.t + 1, cache={"k": h.items[0], "holder": h})


def _refs(out):
    return [weakref.ref(t) for t in (out.hidden, out.cache["k"], out.cache["holder"].t)] + \
        [weakref.ref(out.cache["holder"])]


@pytest.mark.parametrize("fn", [makes_objects, makes_objects_with_break])
@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_objects_made_in_the_frame_are_freed_with_the_result(fn, backend):
    graphjit.reset()
    compiled = graphjit.compile(fn, backend=backend)
    for call in range(3):                       # the compiling call, then cached ones
        x = torch.randn(4, 5)
        out = compiled(x)
        expected = fn(x)
        torch.testing.assert_close(out.hidden, expected.hidden)
        torch.testing.assert_close(out.cache["k"], expected.cache["k"])
        refs, x_ref = _refs(out), weakref.ref(x)
        del out, x, expected
        gc.collect()
        alive = [r() for r in refs if r() is not None]
        assert not alive, f"call {call}: compiled code keeps {[type(a).__name__ for a in alive]} alive"
        assert x_ref() is None, f"call {call}: compiled code keeps the input alive"


def _calls_at_a_break(x, fn):
    print("", end="")                           # a graph break: fn is called from the resume function
    return fn(x) + 1


def _scaler(table):
    def scale(x):
        print("", end="")                       # a break inside: the call of scale runs at a break
        return x * table[0]
    return scale


class _Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        print("", end="")
        return self.fc(x)


def test_functions_and_modules_called_at_a_break_are_freed():
    """A closure or a module called at a graph break (compiled as a frame of its own) is freed with what it
    holds once the caller drops it and the entries guarding it are reset: their compiled versions live on
    the function (a cycle), and a module's wrapper is made per call (a table keyed by the function, holding
    values that hold it, kept every one of them, and the tensors in their closures)."""
    compiled = graphjit.compile(_calls_at_a_break)
    refs = []
    for i in range(3):
        table = torch.full((1000,), float(i))
        scale, module = _scaler(table), _Printing()
        compiled(torch.ones(3), scale)
        compiled(torch.ones(3), module)
        refs += [weakref.ref(table), weakref.ref(module.fc.weight)]
        del table, scale, module
    graphjit.reset()
    gc.collect()
    assert not [r for r in refs if r() is not None]


def test_a_function_decorated_after_being_called_at_a_break_runs_its_decorator():
    """functools.wraps copies the wrapped function's __dict__ onto the wrapper, the compiled versions of the
    wrapped function among it: the wrapper is compiled as itself, its own code runs."""
    import functools

    def inner(x):
        return x * 2
    compiled = graphjit.compile(_calls_at_a_break)
    compiled(torch.ones(2), inner)
    calls = []

    @functools.wraps(inner)
    def wrapper(x):
        calls.append(1)
        return inner(x) * 10
    assert torch.equal(compiled(torch.ones(2), wrapper), torch.full((2,), 21.0)) and calls == [1]


def test_closures_and_classes_named_by_guards_are_freed_after_reset():
    """Objects sources name (sources.REFS) are held weakly: a closure read from a dict and a class made at
    run time are freed once dropped and the entries naming them reset."""
    handlers, refs = {}, []

    def apply(x):
        return handlers["scale"](x) + 1
    compiled = graphjit.compile(apply)
    for i in range(3):
        table = torch.full((1000,), float(i))
        handlers["scale"] = lambda x, table=table: x * table[0]
        kind = type(f"Kind{i}", (), {})
        compiled(torch.ones(2))
        refs += [weakref.ref(table), weakref.ref(kind)]
        del table, kind
    handlers.clear()
    graphjit.reset()
    gc.collect()
    assert not [r for r in refs if r() is not None]
