"""Names that stand for more than one thing in a frame.

- PEP 709 (3.12+) inlines comprehensions: a comprehension variable named like a free or cell variable of
  the function is a plain value inside the comprehension, the cell before and after it. The reader spells
  LOAD_FAST of such a name as LOAD_CLOSURE (3.13 builds closures so); inside the comprehension it must
  read the value, not the cell.
- Zero-argument super() reads the frame's first local. After a graph break the resume function's first
  parameter must be the method's first parameter (`self`), not a stack slot.

On 3.11 the comprehension cases run as nested frames; they are checked there too.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import torch

import graphjit
from graphjit.testing import CompileCounter


def check(fn, make_args, calls=3, backend="eager", graphs=None):
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter)
    for call in range(calls):
        torch.manual_seed(call)
        args = make_args()
        torch.manual_seed(call)
        eager_args = make_args()
        got, want = compiled(*args), fn(*eager_args)
        torch.testing.assert_close(got, want)
    if graphs is not None:
        assert counter.frame_count == graphs, counter.frame_count
    return counter


def _free_shadow():
    k = torch.ones(2)

    def f(a):
        kinds = [isinstance(k, torch.Tensor) for k in (a, a * 3)]
        sums = [k + a for k in (a, a * 3)]
        return kinds, sums, k
    return f


def test_a_comprehension_variable_named_like_a_free_variable_reads_its_values():
    check(_free_shadow(), lambda: (torch.randn(2),), graphs=1)


def cell_shadow(x, y):
    k = y
    zs = [k * 2 for k in (x, y)]
    g = lambda: k + 1         # noqa: E731 -- k is a cell variable of this frame
    return zs, g()


def test_a_comprehension_variable_named_like_a_cell_variable_is_captured():
    counter = check(cell_shadow, lambda: (torch.randn(4), torch.randn(4)), graphs=1)
    assert counter.op_count == 3


def nested_closure_in_comprehension(x):
    k = x * 2
    fs = [(lambda: k + 1) for k in (x, x + 1)]
    return [f() for f in fs], k


def test_a_closure_over_the_comprehension_variable_of_a_cell_name():
    check(nested_closure_in_comprehension, lambda: (torch.randn(3),))


class Base(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, other=None):
        return x * self.scale


class Child(Base):
    def forward(self, x, other=None):
        pair = (other, print("break", end="\r"))      # `other` is on the stack at the break
        y = super().forward(x) + 1
        print("again", end="\r")
        s = super()                                 # a super object made after a break (3.12+ too)
        return s.forward(y) + pair[0].scale


def test_zero_argument_super_after_a_graph_break_binds_self():
    m, other = Child(2.0), Child(10.0)
    for backend in ("eager", "graphjit"):
        graphjit.reset()
        check(lambda x: m(x, other), lambda: (torch.randn(3),), backend=backend)
        check(graphjit.compile(m, backend=backend), lambda: (torch.randn(3), other), backend="eager")


class CellSelf(Base):
    def forward(self, x, other=None):
        get = lambda: self.scale          # noqa: E731 -- `self` is a cell variable
        print("break", end="\r")
        return super().forward(x) + get()


def test_zero_argument_super_after_a_break_where_self_is_a_cell():
    m = CellSelf(3.0)
    check(lambda x: m(x), lambda: (torch.randn(3),))
