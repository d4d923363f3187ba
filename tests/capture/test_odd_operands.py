"""Operands whose Python class says one thing and torch does another.

- Tensor's operators take an int/float/complex subclass as the number it is: the subclass's own
  (reflected) dunders never run in eager, so they must not run compiled either.
- A Parameter subclass that overrides __torch_function__ (quantization wrappers do) computes through its
  override: it is a tensor subclass, not a plain parameter to trace.
- An op that makes a quantized tensor (quantize_per_tensor) runs in CPython: fake tensors give it as a
  float tensor.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import pytest
import torch

import graphjit


class MyInt(int):
    def __radd__(self, other):
        return "radd"

    def __eq__(self, other):
        return "eq"

    __hash__ = int.__hash__


class MyFloat(float):
    def __rsub__(self, other):
        return "rsub"


class MyComplex(complex):
    def __rmul__(self, other):
        return "rmul"


def add(a, b):
    return a + b


def equal(a, b):
    return a == b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


@pytest.mark.parametrize("fn,make_other,make_x", [
    (add, lambda: MyInt(2), lambda: torch.arange(3.0)),
    (equal, lambda: MyInt(1), lambda: torch.arange(3.0)),
    (sub, lambda: MyFloat(1.5), lambda: torch.arange(3.0)),
    (mul, lambda: MyComplex(1 + 1j), lambda: torch.arange(3.0).to(torch.complex64)),
], ids=["radd", "eq", "rsub", "rmul"])
def test_number_subclasses_are_numbers_to_tensor_operators(fn, make_other, make_x):
    compiled = graphjit.compile(fn)
    for _ in range(2):
        got, want = compiled(make_x(), make_other()), fn(make_x(), make_other())
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want)


class Shifted(torch.nn.Parameter):
    """Adds 100 to the results of mul: its own __torch_function__."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out + 100 if func is torch.Tensor.mul or func is torch.Tensor.__mul__ else out


class Plain(torch.nn.Parameter):
    pass


def times(x, p):
    return x * p


def test_a_parameter_subclass_with_its_own_torch_function_computes_through_it():
    p = Shifted(torch.ones(3))
    x = torch.ones(3)
    want = times(x, p)
    assert torch.equal(graphjit.compile(times)(x, p), want)

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = Shifted(torch.ones(3))

        def forward(self, x):
            return x * self.p
    holder = Holder()
    assert torch.equal(graphjit.compile(holder)(x), holder(x))


def test_a_plain_parameter_subclass_is_still_captured():
    from graphjit.testing import CompileCounter
    counter = CompileCounter()
    p = Plain(torch.randn(3))
    x = torch.randn(3)
    assert torch.equal(graphjit.compile(times, backend=counter)(x, p), times(x, p))
    assert counter.frame_count == 1 and counter.op_count == 1


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_making_a_quantized_tensor_runs_in_cpython():
    def f(a):
        q = torch.quantize_per_tensor(a, 0.1, 0, torch.qint8)
        return q.dequantize() * 2, q.int_repr()

    compiled = graphjit.compile(f)
    for _ in range(2):
        x = torch.randn(4)
        got, want = compiled(x), f(x)
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
