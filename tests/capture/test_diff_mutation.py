"""Mutation of the arguments: in-place tensor ops on inputs, copy_ into an output buffer, setitem on an
input. The harness compares the arguments after every call, and checks that an output which is an argument
in eager is the same argument object compiled.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch

from .harness import Cases, r

cases = Cases()


@cases.add(lambda: (r(3, 4),))
def add_inplace_input(x):
    x.add_(1)
    return x * 2


@cases.add(lambda: (r(3, 4), r(3, 4)))
def mul_inplace_input(x, y):
    x.mul_(y)
    return x + y


@cases.add(lambda: (r(3, 4), r(3, 4)))
def return_mutated_input(x, y):
    x.add_(y)
    return x


@cases.add(lambda: (torch.empty(3, 4), r(3, 4), r(3, 4)))
def copy_into_out(out, x, y):
    out.copy_(x @ y.t() @ x)
    return out


@cases.add(lambda: (r(3, 4), r(4)))
def setitem_input(x, y):
    x[0] = y
    x[1:, :2] *= 3
    return x.sum()


@cases.add(lambda: (r(3, 4), r(3, 4)))
def mutate_both_inputs(x, y):
    x.sub_(y)
    y.div_(2)
    return x + y


@cases.add(lambda: (r(5),))
def mutate_then_read_input(x):
    before = x.clone()
    x.mul_(-1)
    x.clamp_(min=0)
    return before, x + before


@cases.add(lambda: ([r(3), r(3)],))
def mutate_tensor_in_list_input(xs):
    xs[0].add_(xs[1])
    return xs[1] * 2


@cases.add(lambda: (r(4, 4),))
def mutate_input_through_view(x):
    v = x[1:3]
    v.fill_(0.5)
    return x.sum(1)


@cases.add(lambda: (r(3, 4), torch.zeros(3, dtype=torch.long)))
def mutate_int_input(x, count):
    count += x.argmax(1)
    return count * 2


@cases.add(lambda: (r(3, 4),))
def inplace_returns_self(x):
    y = x.relu_()
    return y, x


def _aliased():
    t = r(3)
    return t, t


@cases.add(_aliased)
def aliased_inputs_mutation(x, y):
    x.add_(1)      # y is x: the second read must see the update
    return y * 2, x is y


@cases.add(lambda: (r(6),))
def mutate_view_of_input(x):
    x[2:4].mul_(10)
    x.view(2, 3)[0].zero_()
    return x.sum()


@pytest.mark.parametrize("case", cases.params())
def test_mutation(case):
    case.run()
