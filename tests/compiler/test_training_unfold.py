"""Training graphs whose outputs' elements share memory (compiler/training._check_tangent_layouts).

An unfold with a step smaller than its size returns windows that share elements: strides (1, 1) for
`x.unfold(0, 2, 1)` of a 1-D x. AOTAutograd traces the gradient coming into the backward (the tangent) in
its output's strides (torch >= 2.13), and copies the incoming gradient into a tensor of those strides,
which keeps one of the values each shared element receives: grad fuzz 15003709, 15003834 and 15002272 got
wrong gradients. Such a graph's tangents are traced dense (in their outputs' memory format)."""
import math

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.testing import CompileCounter


def _gradients(fn, inputs, weights):
    """fn's outputs and the gradients of sum(out * weight) for its inputs: a distinct gradient for each
    window element, so that a lost one shows."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outs = fn(*leaves)
    loss = sum((o.float() * w).sum() for o, w in zip(outs, weights))
    return outs, torch.autograd.grad(loss, leaves)


def _check(fn, make_inputs, calls=2, dynamic=None):
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(fn, backend=counter, dynamic=dynamic)
    for call in range(calls):
        inputs = make_inputs(call)
        with torch.no_grad():
            shapes = [o.shape for o in fn(*inputs)]
        weights = [torch.arange(math.prod(s), dtype=torch.float32).reshape(s) % 7 - 3 for s in shapes]
        want_outs, want = _gradients(fn, inputs, weights)
        outs, got = _gradients(compiled, inputs, weights)
        for a, b in zip(outs, want_outs):
            torch.testing.assert_close(a, b, equal_nan=True)
            assert a.shape == b.shape and a.stride() == b.stride(), (a.stride(), b.stride())
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, equal_nan=True)
    assert not counter.ran_as_captured()


def test_unfold_windows_sharing_elements_get_each_gradient():
    """grad fuzz 15003709: a cat, a quotient, an unfold of the middle dim by windows of 2, step 1."""
    def f(x):
        v = -3 / torch.cat((x, x, x), dim=-3)
        return (v.unfold(-2, 2, 1),)

    _check(f, lambda call: (torch.randn(1 + call, 3 + call, 3) * 2 + 0.1,))


def test_unfold_of_a_flattened_view_gets_each_gradient():
    """grad fuzz 15003834: a 1-D unfold (strides (1, 1)) of a reshaped log_softmax of a view of an input."""
    def f(x, y):
        v = x[1:].log_softmax(0)
        v = torch.addcdiv(v, v, y, value=2)
        return (v.reshape(-1).unfold(0, 2, 1),)

    _check(f, lambda call: (torch.randn(2 + 2 * call, 2, 1), torch.rand(1, 1) + 0.5))


def test_bfloat16_unfold_beside_another_output_gets_each_gradient():
    """grad fuzz 15002272: a bfloat16 unfold of a hardtanh, and another output of the same tensor."""
    def f(x):
        v = F.hardtanh(x.to(torch.bfloat16), -1.5, 2.0)
        return v.unfold(0, 2, 1), (v * 0.5).erfinv()

    _check(f, lambda call: (torch.randn(11 + call) * 2,))


@pytest.mark.parametrize("size,step", [(3, 1), (3, 2), (2, 2)])
def test_views_of_unfold_windows_get_each_gradient(size, step):
    """Windows overlapping (step < size) or not, returned through a transpose, and beside an output whose
    strides are dense."""
    def f(x):
        w = (x * 2).unfold(1, size, step)
        return w.transpose(0, 1), x.sin()

    _check(f, lambda call: (torch.randn(4, 7 + call),))


def test_expanded_output_gets_the_sum_of_its_gradients():
    """An output with a stride-0 dim (AOTAutograd traces its tangent dense by itself)."""
    def f(x):
        return ((x * 3).unsqueeze(1).expand(-1, 4, -1),)

    _check(f, lambda call: (torch.randn(3, 2 + call),))


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("unfold", [lambda v: v.unfold(-1, 2, 7), lambda v: v.unfold(-1, v.shape[-1], 1),
                                    lambda v: v.t().unfold(0, v.shape[1], 3)], ids=["step", "whole", "t"])
def test_a_one_window_unfold_has_eager_strides(unfold, dynamic):
    """One window: the windows dim has size 1 and eager's stride step * stride (`x.unfold(-1, 2, 7)` of a
    [3, 4] x: (4, 7, 1)). AOTAutograd returns an output that alone views an intermediate as
    `_unsafe_view(o, o.shape)`, which gave that dim the next dim's extent ((4, 2, 1)); the output gets
    eager's strides back, on static and symbolic sizes."""
    def f(x):
        return (unfold(x * 2), x.sum())

    _check(f, lambda call: (torch.randn(3 + call, 4 + call),), calls=3, dynamic=dynamic)
