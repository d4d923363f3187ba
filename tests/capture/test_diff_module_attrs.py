"""Attributes of torch's and the standard library's modules read in the frame (F.gelu, torch.sigmoid,
math.sqrt, torch.nn.functional.gelu, torch.special.expit) are guarded by identity: replacing one after a
compile (monkeypatching) recompiles and the result follows the new function, as eager's does; putting the
original back runs the first entry again.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import gelu

from graphjit.capture.guards import GuardSet
from graphjit.testing import check_steps, Step
from .harness import r


def _through_alias(x):
    return F.gelu(x) + F.gelu(x * 2)


def _torch_function(x):
    return torch.sigmoid(x) * 2


def _folded_math(x):
    return x * math.sqrt(2.0) + math.pi


def _attribute_chain(x):
    return torch.nn.functional.gelu(x) - torch.special.expit(x)


def _imported_inside(x):
    from torch.nn.functional import gelu as inner
    return inner(x) + 1


def _tripled(t):
    return t * 3


def _replaced(module, name, value):
    return lambda: setattr(module, name, value)


CASES = [
    (_through_alias, F, "gelu", _tripled),
    (_torch_function, torch, "sigmoid", _tripled),
    (_folded_math, math, "sqrt", lambda v: 10.0),
    (_folded_math, math, "pi", 3.0),
    (_attribute_chain, torch.nn.functional, "gelu", _tripled),
    (_attribute_chain, torch.special, "expit", torch.tanh),
    (_attribute_chain, torch, "special", torch.linalg),      # a module in the chain replaced
    (_imported_inside, torch.nn.functional, "gelu", _tripled),
]


@pytest.mark.parametrize("fn, module, name, replacement", CASES,
                         ids=[f"{c[0].__name__}-{c[1].__name__}.{c[2]}" for c in CASES])
def test_replaced_module_attribute_is_followed(fn, module, name, replacement):
    original = getattr(module, name)
    if replacement is torch.linalg:          # torch.linalg has no expit: a module of the same shape
        replacement = type(module)("fake_special")
        replacement.expit = _tripled
    try:
        check_steps(fn, [
            Step(lambda: (r(4),), graphs=1),
            Step(lambda: (r(4),), before=_replaced(module, name, replacement), graphs=2),
            Step(lambda: (r(4),), graphs=2),
            Step(lambda: (r(4),), before=_replaced(module, name, original), graphs=2),
        ])
    finally:
        setattr(module, name, original)


def _global_imported_name(x):
    return gelu(x) * 2


def test_a_name_imported_into_globals_keeps_its_function():
    """`from torch.nn.functional import gelu` binds the function in the module's globals: replacing
    F.gelu afterwards changes nothing there (eager keeps calling the bound one), and no recompile."""
    original = F.gelu
    try:
        check_steps(_global_imported_name, [
            Step(lambda: (r(4),), graphs=1),
            Step(lambda: (r(4),), before=_replaced(F, "gelu", _tripled), graphs=1),
        ])
    finally:
        F.gelu = original


def test_the_global_binding_itself_is_guarded():
    original = globals()["gelu"]
    try:
        check_steps(_global_imported_name, [
            Step(lambda: (r(4),), graphs=1),
            Step(lambda: (r(4),), before=lambda: globals().__setitem__("gelu", _tripled), graphs=2),
        ])
    finally:
        globals()["gelu"] = original


def test_one_guard_per_module_attribute():
    guards = GuardSet()
    for _ in range(3):
        guards.add_module_attr(F, "gelu", F.gelu)
    guards.add_module_attr(torch, "sigmoid", torch.sigmoid)
    assert [g.reason for g in guards.ordered()] == ["torch.nn.functional.gelu is gelu",
                                                    "torch.sigmoid is _VariableFunctionsClass.sigmoid"]


def _uses_builtins(x):
    return x * len([1, 2]) + abs(-3)


def test_a_replaced_builtin_is_followed():
    import builtins
    original = builtins.abs
    try:
        check_steps(_uses_builtins, [
            Step(lambda: (r(4),), graphs=1),
            Step(lambda: (r(4),), before=_replaced(builtins, "abs", lambda v: 10), graphs=2),
            Step(lambda: (r(4),), before=_replaced(builtins, "abs", original), graphs=2),
        ])
    finally:
        builtins.abs = original


def test_a_global_shadowing_a_builtin_is_followed():
    try:
        check_steps(_uses_builtins, [
            Step(lambda: (r(4),), graphs=1),
            Step(lambda: (r(4),), before=lambda: globals().__setitem__("abs", lambda v: 7), graphs=2),
        ])
    finally:
        globals().pop("abs", None)


def test_an_attribute_a_module_getattr_makes_anew_on_each_read():
    """Guarded by the maker (the module's __getattr__, the name still absent), not by identity: the
    entry's guards pass on the next call instead of failing on a new object every time."""
    import types
    module = types.ModuleType("torch._graphjit_test_lazy")
    module.__getattr__ = lambda name: (name, object())
    guards = GuardSet()
    guards.add_module_attr(module, "thing", module.thing)
    (guard,) = guards.ordered()
    namespace = dict(guards.objects)
    assert eval(guard.expr, namespace)
    module.thing = 1
    assert not eval(guard.expr, namespace)

    class Subclass(types.ModuleType):
        def method(self):
            return 1
    module = Subclass("torch._graphjit_test_subclass")
    guards = GuardSet()
    guards.add_module_attr(module, "method", module.method)      # a new bound method on each read
    (guard,) = guards.ordered()
    assert eval(guard.expr, dict(guards.objects))
