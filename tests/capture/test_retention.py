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
