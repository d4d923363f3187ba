"""torch's C helpers that change process state (functorch's nesting levels, saved-tensor hooks, forward AD's
dual levels) are never called while tracing: each call runs in CPython, once per call as in eager, and the
process is left as eager leaves it."""
import copy

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import graphjit
from graphjit.testing import CompileCounter


def _inner(x):
    return (x.sin() * x).sum()


def _process_state():
    return torch._C._functorch.maybe_current_level(), torch._C._autograd._saved_tensors_hooks_is_enabled()


@pytest.mark.parametrize("transform", ["grad", "vjp"])
def test_torch_func_inside_a_compiled_function_leaves_no_state_behind(transform):
    def f(x):
        if transform == "grad":
            return torch.func.grad(_inner)(x) * 3
        out, pullback = torch.func.vjp(torch.sin, x)
        return pullback(torch.ones_like(out))[0] * 3
    before = _process_state()
    compiled = graphjit.compile(f, backend=CompileCounter())
    for _ in range(2):
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), f(x))
        assert _process_state() == before
    # later tensors are plain tensors, and a later transform returns one
    copy.deepcopy(torch.randn(3))
    assert type(torch.func.grad(lambda t: (t * t).sum())(torch.ones(2))) is torch.Tensor


def test_forward_ad_dual_level_inside_a_compiled_function():
    def f(x, t):
        with fwAD.dual_level():
            out = fwAD.make_dual(x, t).sin()
            return fwAD.unpack_dual(out).primal, fwAD.unpack_dual(out).tangent
    compiled = graphjit.compile(f, backend=CompileCounter())
    for _ in range(2):
        x, t = torch.randn(4), torch.randn(4)
        for got, expected in zip(compiled(x, t), f(x, t)):
            torch.testing.assert_close(got, expected)


def test_saved_tensors_hooks_inside_a_compiled_function_run_at_each_call():
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t.to(torch.bfloat16)

    def unpack(t):
        return t.to(torch.float32)

    def f(x):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return (x.sin() * x).exp().sum()

    compiled = graphjit.compile(f, backend=CompileCounter())
    for _ in range(2):
        x = torch.randn(6, requires_grad=True)
        packed.clear()
        expected_grad, = torch.autograd.grad(f(x), x)
        eager_packs = len(packed)
        packed.clear()
        got_grad, = torch.autograd.grad(compiled(x), x)
        assert len(packed) == eager_packs > 0
        torch.testing.assert_close(got_grad, expected_grad)


def test_disable_saved_tensors_hooks_inside_a_compiled_function_raises_as_eager():
    def f(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                return x.sin()
    compiled = graphjit.compile(f, backend=CompileCounter())
    with pytest.raises(RuntimeError, match="no hooks here"):
        f(torch.randn(3))
    with pytest.raises(RuntimeError, match="no hooks here"):
        compiled(torch.randn(3))
