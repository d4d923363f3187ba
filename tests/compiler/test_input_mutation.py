"""Graphs that write to their inputs (x.add_(1), x[i] = v, a view's mul_) and read them afterwards:
functionalization writes the new value back last, and the compiled graph must read the old value where
the program did. Through the frontend, compiled vs eager, on the C++ codegen and (where Triton is
installed) the Triton interpreter; the caller's tensors must end up as eager leaves them."""
import pytest
import torch

import graphjit
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config


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


def positional_inplace(x, y):
    # relu's inplace flag passed positionally: the torch-level graph shows no write, the ATen trace does
    h = torch.nn.functional.relu(x, True)
    return h * y + x


CASES = [add_then_use, use_then_add, setitem_then_sum, view_mul, two_inputs, positional_inplace]
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not triton_codegen.triton_available(),
                                                                      reason="Triton is not installed"))]


def _graph(write_positionally):
    """x, y -> relu(x) * y + x as the frontend records it: F.relu called with its inplace flag (False, or
    True passed positionally, which no torch-level check sees)."""
    import operator
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    h = g.call_function(torch.nn.functional.relu, (x, write_positionally))
    g.output(g.call_function(operator.add, (g.call_function(operator.mul, (h, y)), x)))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_decompose_skips_functionalization_only_for_graphs_that_write_nothing(monkeypatch):
    """A graph with no write is traced once, without functionalization; one whose write the torch-level
    check can't see (a positional inplace flag) is traced again, functionalized, and stays right."""
    from graphjit.compiler import decompose
    traces = []
    real = decompose.make_fx

    def counting(fn, **kwargs):
        traces.append(fn)
        return real(fn, **kwargs)
    monkeypatch.setattr(decompose, "make_fx", counting)
    for write, expected in [(False, 1), (True, 2)]:
        traces.clear()
        gm = _graph(write)
        x, y = torch.randn(6, 5), torch.randn(5)
        traced = decompose.decompose(gm, [x, y])
        assert len(traces) == expected
        assert isinstance(traces[-1], torch.fx.GraphModule) == (not write)    # functionalized: a wrapper
        ex, gx = x.clone(), x.clone()
        torch.testing.assert_close(traced(gx, y), torch.relu(ex) * y + (ex.relu_() if write else ex))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mutated_inputs_match_eager(fn, backend, dtype, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", int(backend == "triton"))
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
