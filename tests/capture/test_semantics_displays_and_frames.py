"""Python semantics around graph breaks, checked against eager on several calls: a list or dict display whose
building a graph break interrupts keeps the items added after it; builtins that read their caller's frame
(locals, vars, dir, globals, eval, exec, sys._getframe) see the user's frame; a break inside a comprehension
(a function of its own on 3.11); a class's __getattr__ runs as often as in eager and its answer stays
compiled; a call whose arguments do not bind raises eager's TypeError, naming the function.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import sys

import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, assert_same


def _same_over_calls(fn, make_args, calls=3):
    compiled = graphjit.compile(fn)
    for _ in range(calls):
        assert_same(compiled(*make_args()), fn(*make_args()))


def list_extended_across_a_break(x):
    return [*x.tolist(), *x.tolist()]


def dict_merged_across_a_break(x):
    base = {"a": 1}
    return {**base, "b": x.sum().item(), "c": 3}


def long_list_with_a_break(x):
    # more than 30 items: CPython builds the display with BUILD_LIST and LIST_APPEND
    return [print(end="") or 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
            21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, x * 2]


@pytest.mark.parametrize("fn", [list_extended_across_a_break, dict_merged_across_a_break,
                                long_list_with_a_break])
def test_a_display_interrupted_by_a_graph_break_keeps_its_later_items(fn):
    _same_over_calls(fn, lambda: (torch.ones(2),))


def reads_locals(x):
    a = 5
    return x + a, sorted(locals())


def evaluates(x):
    scale = 3
    return eval("x * scale")


def reads_vars_and_dir(x):
    b = 2
    return x * b, sorted(vars()), sorted(dir())


def reads_globals(x):
    return x + 1, globals()["__name__"]


def reads_its_frame(x):
    return x + 1, sys._getframe().f_code.co_name


@pytest.mark.parametrize("fn", [reads_locals, evaluates, reads_vars_and_dir, reads_globals, reads_its_frame])
def test_builtins_that_read_the_calling_frame_see_the_users_frame(fn):
    _same_over_calls(fn, lambda: (torch.ones(2),))


def comprehension_with_a_break(x):
    return [t.sum().item() for t in x.unbind(0)]


def dict_comprehension_with_a_break(x):
    return x + len({i: print(end="") for i in range(2)})


@pytest.mark.parametrize("fn", [comprehension_with_a_break, dict_comprehension_with_a_break])
def test_a_graph_break_inside_a_comprehension(fn):
    _same_over_calls(fn, lambda: (torch.ones(3, 2),))


class _Lazy:
    def __init__(self):
        self.log = []

    def __getattr__(self, name):
        self.log.append(name)
        return len(name)


def _reads_a_computed_attribute(x, obj):
    return x * obj.hello


def test_a_classes_getattr_runs_once_a_call_and_stays_compiled():
    counter = CompileCounter()
    compiled = graphjit.compile(_reads_a_computed_attribute, backend=counter)
    eager_obj, compiled_obj = _Lazy(), _Lazy()
    for _ in range(3):
        assert_same(compiled(torch.ones(2), compiled_obj), _reads_a_computed_attribute(torch.ones(2), eager_obj))
    assert compiled_obj.log == eager_obj.log == ["hello"] * 3
    assert counter.frame_count == 1


def _two_arguments(a, b):
    return a + b


def _calls_with_too_few(x):
    try:
        return _two_arguments(x)
    except TypeError as e:
        return str(e)


def _calls_with_an_unknown_keyword(x):
    return _two_arguments(x, c=1)


@pytest.mark.parametrize("fn", [_calls_with_too_few, _calls_with_an_unknown_keyword, _two_arguments])
def test_a_call_whose_arguments_do_not_bind_raises_eagers_type_error(fn):
    compiled = graphjit.compile(fn)
    for _ in range(2):
        outcomes = []
        for f in (fn, compiled):
            try:
                outcomes.append(f(torch.ones(1)))
            except TypeError as e:
                outcomes.append(str(e))
        assert outcomes[0] == outcomes[1]
