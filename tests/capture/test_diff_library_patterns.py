"""Python that transformers' models use, found by building many of them from small configs: custom ops
through torch.ops namespaces, torch._dynamo.assume_constant_result probes, dict.fromkeys, the truth of a
submodule, `acc = (); acc += (t,)`, and guard descriptions of objects that make up attributes. Each case
runs compiled (fullgraph) against eager.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.capture.guards import _short
from graphjit.testing import CompileCounter, check, check_module
from .harness import r

torch.library.define("gjtest_patterns::scaled", "(Tensor x, float k) -> Tensor")


@torch.library.impl("gjtest_patterns::scaled", "default")
def _scaled(x, k):
    return x * k + 1


@torch.library.register_fake("gjtest_patterns::scaled")
def _scaled_fake(x, k):
    return torch.empty_like(x)


PROBES = []


@torch._dynamo.assume_constant_result
def library_version():
    PROBES.append(1)
    return 3


def custom_op_and_probe(x):
    return torch.ops.gjtest_patterns.scaled(x, 2.0) * library_version()


def test_custom_op_through_its_namespace_and_an_assumed_constant():
    counter = check(custom_op_and_probe, lambda: (r(3),), graphs=1)
    assert any("scaled" in str(n.target) for gm in counter.graphs for n in gm.graph.nodes)


def from_keys(x):
    states = dict.fromkeys(range(3))
    flags = dict.fromkeys(("a", "b"), 1.5)
    states[1] = x * flags["b"]
    return states[1], len(states), list(flags), states[0] is None


def test_dict_fromkeys():
    check(from_keys, lambda: (r(3),), graphs=1)


def collects_into_a_tuple(x):
    outputs = ()
    for k in range(3):
        outputs += (x * k,)
    return outputs


def test_tuple_accumulated_from_an_empty_constant():
    check(collects_into_a_tuple, lambda: (r(2),), graphs=1)


class Sized(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def __len__(self):
        return self.n

    def forward(self, x):
        return x


class Truthy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.maybe = None
        self.empty = nn.ModuleList()
        self.full = nn.Sequential(nn.ReLU())
        self.none_sized = Sized(0)

    def forward(self, x):
        if self.lin:                     # a module without __bool__/__len__ is true
            x = self.lin(x)
        if self.maybe:
            x = x * 100
        if self.empty:                   # an empty container is false
            x = x * 100
        if self.full:
            x = self.full(x)
        if not self.none_sized:          # a user __len__
            x = x + 1
        return x


def test_truth_of_submodules():
    check_module(Truthy, lambda: (r(2, 3),), graphs=1, compile_kwargs={"fullgraph": True})


class MadeUpAttributes:
    """Like torch.classes' namespaces: any attribute lookup makes one up, and some raise."""

    def __getattr__(self, name):
        raise RuntimeError(f"Tried to instantiate class '{name}'")


def test_guard_descriptions_of_objects_that_raise_on_lookup():
    assert _short(MadeUpAttributes()).startswith("<MadeUpAttributes at ")
