"""Graphs that write to their inputs (x.add_(1), x[i] = v, a view's mul_) and read them afterwards:
functionalization writes the new value back last, and the compiled graph must read the old value where
the program did. Through the frontend, compiled vs eager, on the C++ codegen and (where Triton is
installed) the Triton interpreter; the caller's tensors must end up as eager leaves them."""
import pytest
import torch

import graphjit
from graphjit.compiler.codegen import triton as triton_codegen


def add_then_use(x, y):
    x.add_(1)
    return x * y


def use_then_add(x, y):
    z = x * y
    x.add_(1)
    return z + x


def setitem_then_sum(x, y):
    x[0] = y[1:].sum()
    return x.sum(0) + x[0]


def view_mul(x, y):
    x[:, 1].mul_(y[0])
    return x.exp() + 1


def two_inputs(x, y):
    x.sub_(y)
    y.mul_(2)
    return x + y


CASES = [add_then_use, use_then_add, setitem_then_sum, view_mul, two_inputs]
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not triton_codegen.triton_available(),
                                                                      reason="Triton is not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mutated_inputs_match_eager(fn, backend, dtype, monkeypatch):
    monkeypatch.setattr(triton_codegen, "triton_cpu", int(backend == "triton"))
    compiled = graphjit.compile(fn, backend="graphjit")
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.randn(6, 5, generator=gen).to(dtype)
        y = torch.randn(5, generator=gen).to(dtype)
        ex, ey = x.clone(), y.clone()
        got, want = compiled(x, y), fn(ex, ey)
        tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(got, want, **tol)
        torch.testing.assert_close(x, ex, **tol)
        torch.testing.assert_close(y, ey, **tol)
