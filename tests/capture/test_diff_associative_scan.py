"""torch._higher_order_ops.associative_scan in compiled code: traced as a left fold over the scan dim
(polyfills.associative_scan), one graph, eager's values up to rounding (torch's scan is tree-shaped), and
eager's errors for arguments it refuses.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

from graphjit.testing import check, check_raises


def add(a, b):
    return a + b


def linear_recurrence(left, right):          # transformers' Mamba: h_t = a_t * h_{t-1} + b_t
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def cumsum(x):
    return associative_scan(add, x, dim=1, combine_mode="generic")


def recurrence(a, b):
    return associative_scan(linear_recurrence, (a.sigmoid(), b), dim=2, combine_mode="generic")[1]


def reversed_max(x):
    return associative_scan(torch.maximum, x, dim=0, reverse=True, combine_mode="generic")


@pytest.mark.parametrize("fn, make", [
    (cumsum, lambda: (torch.randn(3, 7),)),
    (recurrence, lambda: (torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4))),
    (reversed_max, lambda: (torch.randn(5, 3),)),
])
def test_associative_scan_is_one_graph(fn, make):
    check(fn, make, graphs=1, atol=1e-5, rtol=1e-5)


def test_pointwise_mode_on_the_cpu_does_as_eager():
    """torch refuses it on some versions and runs it on others; compiled does the same as eager."""
    def fn(x):
        return associative_scan(add, x, dim=0, combine_mode="pointwise")
    try:
        fn(torch.randn(4))
    except ValueError:
        check_raises(fn, lambda: (torch.randn(4),))
    else:
        check(fn, lambda: (torch.randn(4),), graphs=None, atol=1e-5, rtol=1e-5)
