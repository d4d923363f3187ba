"""Several graph breaks in one frame, each with values on the stack: `a = x + x.sum().item()` breaks with
`x` still on the stack under the call. The resume function takes the stack items and the locals as its
parameters, and is itself compiled: its entry binds the values it hands to the next resume function while
its own parameters are still being read, so a value of one break must never stand in for another's
(`x1` read where `x2` was meant shows up as a shape mismatch, or as a silently wrong result when the shapes
agree).

Each case runs eagerly and compiled on fresh arguments over several calls and compares outputs and
mutated arguments. The arguments have different shapes so that a mixed-up value cannot go unnoticed.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch

import graphjit
from .harness import Cases, r
from .test_breaks_support import check_break


@graphjit.disable
def host_double(v):
    return v * 2                              # runs in CPython: each call is a graph break


cases = Cases()


@cases.add(lambda: (r(1, 2, 2, 2), r(2, 3)), graphs=None)
def two_items_with_operand_on_stack(x1, x2):
    v2 = x2 + x2.float().mean().nan_to_num().item()
    v3 = x1 + x1.float().mean().nan_to_num().item()
    v6 = v2.masked_fill(v2 > 0, 0.5)
    return v6.lt(x2), v3


@cases.add(lambda: (r(4), r(2, 3), r(3, 1)), graphs=None)
def three_items_with_operand_on_stack(x, y, z):
    a = x + x.sum().item()
    b = y * y.amax().item()
    c = z - z.mean().item()
    return a + x, b + y, c + z, (x.sum() + y.sum() + z.sum()).item()


@cases.add(lambda: (r(2, 3), r(3, 2)), graphs=2)
def disabled_calls_with_operand_on_stack(x, y):
    a = x + host_double(x)
    b = y + host_double(y)
    return a - x, b - y, x.sum() - y.sum()


@cases.add(lambda: (r(2, 3), r(3, 2)), graphs=2)
def disabled_calls_inside_call_arguments(x, y):
    a = torch.cat([x, host_double(x)])
    b = torch.cat([y, host_double(y)], dim=1)
    return a, b, x.t() @ y.t()


@cases.add(lambda: (r(2, 3), r(2, 3)), graphs=2)
def disabled_calls_same_shapes(x, y):
    a = x + host_double(x)                    # a mixed-up x and y would give a wrong value, not an error
    b = y + host_double(y)
    return a, b, x * 10 + y


@cases.add(lambda: (r(3), r(2, 2), []), graphs=None)
def items_appended_to_a_list_argument(x, y, log):
    log.append(x.sum().item())
    log.append(y.sum().item())
    return x + log[0], y + log[1], len(log)


@cases.add(lambda: (r(3), r(2, 2)), graphs=None)
def item_then_branch_on_other_tensor(x, y):
    a = x + x.sum().item()
    if y.sum() > 0:
        return a, y + y.max().item()
    return y - y.min().item(), a


@cases.add(lambda: (r(3), r(2, 2), r(4, 1)), graphs=None)
def same_expression_on_three_tensors(x, y, z):
    outs = []
    outs.append(x + x.abs().mean().item())
    outs.append(y + y.abs().mean().item())
    outs.append(z + z.abs().mean().item())
    return outs, x, y, z


@cases.add(lambda: (r(3), r(2, 2)), graphs=None)
def items_inside_no_grad_block(x, y):
    with torch.no_grad():
        a = x + x.sum().item()
        b = y + y.sum().item()
    return a * 2, b * 2, x.sum() + y.sum()


@cases.add(lambda: (r(2, 3), r(3), r(2)), graphs=None)
def items_as_call_arguments_with_keywords(x, y, z):
    a = torch.clamp(x, min=y.min().item(), max=y.max().item())
    b = torch.full_like(z, z.mean().item()) + y.sum()
    return a, b, torch.cat([x.flatten(), y, z])


@pytest.mark.parametrize("case", cases.params())
def test_values_on_the_stack_across_breaks(case):
    check_break(case.fn, case.make_args, **case.options)
