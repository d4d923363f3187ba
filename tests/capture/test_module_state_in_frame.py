"""Modules changed or built inside a compiled forward: a ModuleList/ModuleDict the frame appends to,
extends, inserts into, updates or pops from is read as changed (len, indexing, iteration: a graph break
after the change); a module built in the frame is built as often as in eager, and draws the same random
numbers (a trial build at trace time leaves torch's generator where it was; one with parameters
breaks). Compiled against an eager deep copy, same seeds.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import copy

import pytest
import torch
import torch.nn as nn

import graphjit


class Appending(nn.Module):
    def __init__(self, change):
        super().__init__()
        self.change = change
        self.ml = nn.ModuleList([nn.Linear(4, 4)])
        self.md = nn.ModuleDict({"a": nn.Linear(4, 4)})
        self.extra = nn.Linear(4, 4)

    def forward(self, x):
        if self.change == "append":
            self.ml.append(self.extra)
        elif self.change == "extend":
            self.ml.extend([self.extra])
        elif self.change == "insert":
            self.ml.insert(0, self.extra)
        elif self.change == "update":
            self.md.update({"b": self.extra})
        elif self.change == "pop" and "a" in self.md:
            self.md.pop("a")
        for layer in self.ml:
            x = layer(x)
        return x * (len(self.md) + len(self.ml)) + self.ml[0](x), list(self.md.keys())


@pytest.mark.parametrize("change", ["append", "extend", "insert", "update", "pop"])
def test_containers_changed_in_the_frame_are_read_as_changed(change):
    torch.manual_seed(0)
    eager = Appending(change)
    compiled_model = copy.deepcopy(eager)
    compiled = graphjit.compile(compiled_model)
    x = torch.randn(2, 4)
    for _ in range(2):
        expected, got = eager(x), compiled(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        assert len(compiled_model.ml) == len(eager.ml) and list(compiled_model.md) == list(eager.md)


def builds_linear(x):
    lin = nn.Linear(4, 4)
    return lin(x), lin.weight, nn.ReLU()(x)


def test_a_module_built_in_the_frame_draws_as_eager():
    graphjit.reset()
    compiled = graphjit.compile(builds_linear)
    x = torch.randn(2, 4)
    for seed in (0, 1, 0):
        torch.manual_seed(seed)
        expected = builds_linear(x) + (torch.rand(3),)      # and where the generator is after the call
        torch.manual_seed(seed)
        got = compiled(x) + (torch.rand(3),)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
