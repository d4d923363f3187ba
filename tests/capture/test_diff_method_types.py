"""A bound method read without being called (`x.tolist`, `[].append`, `"ab".upper`): its type, isinstance
with collections.abc.Callable or typing.Callable, callable(), and the attributes every bound method has
(`__name__`, `__self__`, `__class__`), as eager's, inside one graph. Each case runs compiled against eager
(results, graph count) and against torch.compile with a counting backend: graphjit's graph count is at or
under torch.compile's. A method bound some other way than the three kinds modelled is a graph break.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import collections.abc as cabc
import types
import typing

import pytest
import torch

from graphjit.testing import check

from .harness import Cases, gj, r
from .test_diff_stdlib_classes import assert_at_most_torch, r3

cases = Cases()


@cases.add(r3)
def callable_checks_of_tensor_methods(x):
    return (x * isinstance(x.tolist, cabc.Callable), isinstance(x.sum, typing.Callable), callable(x.tolist),
            isinstance(x.view, cabc.Hashable))


@cases.add(r3)
def types_of_tensor_methods(x):
    # a C method, a Python function of torch.Tensor, a slot wrapper
    return x + 1, type(x.tolist), type(x.split), type(x.__getitem__), type(x.sum) is types.BuiltinMethodType


@cases.add(r3)
def attributes_of_tensor_methods(x):
    y = x * 2
    # __abs__'s own name is "abs", split's is a Python function's
    return (y * (y.sum.__self__ is y) + (x.sum.__self__ is y), x.sum.__name__, x.__abs__.__name__,
            x.split.__name__, x.tolist.__class__, x.sum is None)


@cases.add(lambda: (torch.nn.Parameter(r(3)),))
def method_types_of_a_parameter(p):
    return p * 2, type(p.sum), type(p.split), p.sum.__self__ is p


@cases.add(r3)
def methods_of_containers_and_constants(x):
    items = [x]
    return (x * isinstance(items.append, cabc.Callable), type(items.append), "ab".upper.__name__,
            type("ab".upper), items.append.__self__ is items)


@pytest.mark.parametrize("case", cases.params())
def test_method_type(case):
    counter = case.run()
    assert_at_most_torch(counter, case.fn, case.make_args, case.options.get("calls", 4))


def type_of_a_bound_classmethod(x):
    y = x + 1
    return y * 2, type(y.__torch_function__)


def test_a_method_bound_another_way_is_a_graph_break():
    """A classmethod of torch.Tensor binds to the class, not the tensor: its type is not modelled, and
    type() of it runs in CPython at a graph break, the graph before it kept."""
    counter = check(type_of_a_bound_classmethod, r3, graphs="first", compile_kwargs={})
    assert counter.frame_count == 1
    reasons = gj.explain(type_of_a_bound_classmethod)(r(3)).break_reasons
    assert [b.reason for b in reasons] == ["type() of Tensor(add: (3,) torch.float32).__torch_function__: "
                                           "not a C method, slot wrapper or function of a library class"]
