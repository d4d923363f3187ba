"""Python that transformers' models use, found by building many of them from small configs: custom ops
through torch.ops namespaces, torch._dynamo.assume_constant_result probes, dict.fromkeys, the truth of a
submodule, `acc = (); acc += (t,)`, and guard descriptions of objects that make up attributes. Each case
runs compiled (fullgraph) against eager.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import functools
import sys
import types
import typing

import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.capture.guards import _short
from graphjit.testing import CompileCounter, assert_same, check, check_module
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


def module_probe(x):
    y = x + 1 if "gjtest_probe_module" in sys.modules else x - 1
    math_module = sys.modules.get("math")
    return y * math_module.pi, sys.modules["torch"] is torch


def test_sys_modules_membership_and_lookups():
    """Each name is guarded on its own (the whole dict's keys change when the compile imports modules:
    the fresh entry's guards failed on its own call)."""
    counter = CompileCounter()
    compiled = graphjit.compile(module_probe, backend=counter, fullgraph=True)
    x = r(3)
    sys.modules.pop("gjtest_probe_module", None)
    assert_same(compiled(x), module_probe(x))
    sys.modules["gjtest_probe_module"] = types.ModuleType("gjtest_probe_module")
    try:
        assert_same(compiled(x), module_probe(x))
    finally:
        del sys.modules["gjtest_probe_module"]
    assert_same(compiled(x), module_probe(x))
    assert counter.frame_count == 2


STATE = {"compiles": 0}


def reads_state(x):
    return x * STATE["compiles"]


def test_fresh_entry_whose_guards_fail_runs_eagerly():
    """A backend that changes what the guards check (here a counter the frame reads) leaves the fresh
    entry unable to run its own call: the call runs eagerly instead of raising (the suite's strict mode
    raises, to catch guards the trace got wrong)."""
    def counting_backend(gm, example_inputs):
        STATE["compiles"] += 1
        return gm.forward
    x = r(3)
    with graphjit.config.patch(strict_fresh_guards=True), pytest.raises(AssertionError, match="fresh entry"):
        graphjit.compile(reads_state, backend=counting_backend)(x)
    graphjit.reset()
    compiled = graphjit.compile(reads_state, backend=counting_backend)
    with graphjit.config.patch(strict_fresh_guards=False):
        for _ in range(3):
            assert_same(compiled(x), x * STATE["compiles"])


@functools.lru_cache
def cached_probe():
    PROBES.append(2)
    return 5


cached_probe.__wrapped__._dynamo_marked_constant = True     # what transformers' version probes carry


def uses_cached_probe(x):
    return x * cached_probe() if cached_probe() > 2 else x


def test_assumed_constant_under_an_lru_cache():
    check(uses_cached_probe, lambda: (r(3),), graphs=1)


def annotated_helper(x):
    def helper(node, leaves: list[typing.Any]) -> dict[str, int]:     # aliases evaluated at def time
        return node * len(leaves)
    return helper(x + 1, [1, 2])


def test_builtin_generic_aliases_in_annotations():
    check(annotated_helper, lambda: (r(3),), graphs=1)
