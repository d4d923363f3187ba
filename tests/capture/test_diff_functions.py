"""Calls: module-level helpers (inlined), nested functions and closures, nonlocal writes, lambdas, default,
*args/**kwargs and keyword-only arguments, functools.partial, recursion of constant depth, wrapping
decorators, and a graphjit-compiled function called from inside another compiled function.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import functools
import types

import pytest
import torch

from graphjit.testing import check
from .harness import Cases, gj, r

cases = Cases()


def two():
    return r(3), r(3)


# helpers called from the cases below ----------------------------------------------------------------

def helper_scale(x, k=2):
    return x * k


def helper_chain(x):
    return helper_scale(x, 3) + helper_scale(x)


def helper_varargs(*xs, scale=1.0, **named):
    total = sum(xs)
    for name in sorted(named):
        total = total + named[name]
    return total * scale


def helper_kwonly(x, *, bias, scale=2):
    return x * scale + bias


def helper_recursive(x, depth):
    if depth == 0:
        return x
    return helper_recursive(x.sin(), depth - 1) + depth


def helper_multi_return(x):
    return x.min(), x.max(), x.mean()


def wrap_double(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


def with_offset(offset):
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(x):
            return fn(x + offset)
        return wrapper
    return decorator


@wrap_double
def decorated_helper(x):
    return x + 1


# cases ----------------------------------------------------------------------------------------------

@cases.add(lambda: (r(3),))
def call_module_level_helper(x):
    return helper_scale(x), helper_scale(x, 5), helper_chain(x)


@cases.add(lambda: (r(3),))
def call_multi_return(x):
    lo, hi, mean = helper_multi_return(x)
    return (x - lo) / (hi - lo + 1) + mean


@cases.add(two)
def nested_function(x, y):
    def inner(a):
        return a * y + x
    return inner(x) + inner(y)


@cases.add(lambda: (r(3),))
def closure_nonlocal_write(x):
    count = 0
    acc = x

    def step(k):
        nonlocal count, acc
        count += 1
        acc = acc * k

    step(2)
    step(3)
    return acc, count


@cases.add(lambda: (r(3),))
def closure_returned_and_called(x):
    def make_adder(n):
        def add(t):
            return t + n
        return add

    add3, add5 = make_adder(3), make_adder(5)
    return add3(x) * add5(x)


@cases.add(lambda: (r(3),))
def closure_over_loop_variable(x):
    fns = [lambda t, i=i: t * i for i in range(3)]
    late = [lambda t: t + j for j in range(2)]  # late binding: both see j == 1
    return [f(x) for f in fns], [g(x) for g in late]


@cases.add(two)
def lambdas(x, y):
    sq = lambda t: t * t  # noqa: E731
    combine = lambda a, b=2: a * b + 1  # noqa: E731
    return sq(x) + combine(y) + combine(x, b=3)


@cases.add(lambda: (r(3),))
def default_args(x):
    def f(a, b=10, c=None):
        return a + b if c is None else a + b + c
    return f(x), f(x, 1), f(x, c=x), f(x, c=2, b=3)


@cases.add(lambda: (r(3), r(3), r(3)))
def star_args_kwargs(x, y, z):
    args = (x, y)
    kwargs = {"b": z}
    return helper_varargs(*args, z), helper_varargs(x, scale=2.0, **kwargs), helper_varargs(x, y, a=z, c=x)


@cases.add(two)
def keyword_only_args(x, y):
    return helper_kwonly(x, bias=y), helper_kwonly(x, scale=0.5, bias=1)


def _kw_fn(x, *rest, key=3, **kw):
    return x * key + len(rest) + len(kw)


@cases.add(lambda: (r(3),), kwargs_factory=lambda: {"key": 4, "extra": 1})
def outer_with_kwargs(x, **kwargs):
    return _kw_fn(x, 1, 2, **kwargs)


@cases.add(lambda: (r(3),), kwargs_factory=lambda: {"scale": 2.5, "bias": torch.ones(3)})
def keyword_args_from_caller(x, *, scale, bias=None):
    return x * scale + (0 if bias is None else bias)


@cases.add(two)
def functools_partial(x, y):
    add_y = functools.partial(torch.add, y)
    scale3 = functools.partial(helper_scale, k=3)
    kw = functools.partial(helper_kwonly, bias=y)
    return add_y(x), scale3(x), kw(x, scale=1)


@cases.add(lambda: (r(3),))
def recursion_constant_depth(x):
    return helper_recursive(x, 4)


@cases.add(lambda: (r(3),))
def recursion_local_factorial(x):
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)
    return x * fact(5)


@cases.add(lambda: (r(3),))
def decorator_functools_wraps(x):
    return decorated_helper(x), decorated_helper.__name__ == "decorated_helper"


@cases.add(lambda: (r(3),))
def decorator_defined_in_frame(x):
    @with_offset(10)
    def g(t):
        return t * 2

    @wrap_double
    def h(t):
        return t - 1

    return g(x) + h(x)


@cases.add(lambda: (r(3),))
def function_attributes(x):
    return x * len(helper_scale.__name__) + helper_scale.__defaults__[0]


@cases.add(lambda: (r(3),))
def map_over_function_list(x):
    ops = [torch.sin, torch.cos, helper_chain, lambda t: t ** 2]
    out = x
    for op in ops:
        out = op(out)
    return out


def _make_closure_case(scale):
    offset = torch.arange(3.0)

    def closure_from_factory(x):
        return x * scale + offset  # reads a captured int and a captured tensor
    return closure_from_factory


cases.add_fn(_make_closure_case(4), lambda: (r(3),), name="closure_from_factory")

class _Holder:
    def __init__(self, k):
        self.k = k


def _scale(self, x):
    return x * self.k


_HELD = _Holder(3)


@cases.add(lambda: (r(3),))
def method_type_binds_a_function(x):
    h = _Holder(2)
    m = types.MethodType(_scale, h)
    _HELD.bound = types.MethodType(_scale, _HELD)
    try:
        types.MethodType(_scale, None)
    except TypeError as e:
        error = str(e)
    return m(x) + _HELD.bound(x), m.__self__ is h, m.__func__ is _scale, m.__name__, error



@pytest.mark.parametrize("case", cases.params())
def test_functions(case):
    case.run()


# a compiled function called from another compiled function -----------------------------------------

def _inner(x):
    return x.relu() * 2


def test_compiled_inside_compiled():
    inner = gj.compile(_inner, backend="eager")

    def outer(x):
        return inner(x + 1) - 1

    check(outer, lambda: (r(4),))


def test_disabled_inside_compiled_runs_eagerly():
    """graphjit.disable'd code runs in CPython: results right, graph count not asserted."""
    inner = gj.disable(_inner)

    def outer(x):
        return inner(x + 1) - 1

    check(outer, lambda: (r(4),), graphs=None)


def test_allow_in_graph():
    def opaque(x):
        return x.cos() + 1

    allowed = gj.allow_in_graph(opaque) or opaque

    def outer(x):
        return allowed(x * 2) * 3

    check(outer, lambda: (r(4),))
