"""Backward through some of a compiled graph's outputs (compiler/training.py, "Gradients of outputs the
loss does not reach"): autograd gives the other outputs no gradient, and eager runs none of the backward
from them. Against eager: the gradients of inputs and parameters (None where eager leaves None), with a
partial derivative that is inf on the unreached path, over several calls and several subsets of outputs."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.testing import CompileCounter


def _grads(tensors):
    return [None if t.grad is None else t.grad.clone() for t in tensors]


def _same_grads(eager, compiled):
    assert len(eager) == len(compiled)
    for k, (e, c) in enumerate(zip(eager, compiled)):
        assert (e is None) == (c is None), f"gradient {k}: eager {e}, compiled {c}"
        if e is not None:
            # exp(1000 * tanh(..)) turns an ulp of difference in tanh (the matmul's summation order) into
            # up to 1000 ulp: compared within 1e-4
            torch.testing.assert_close(c, e, equal_nan=True, rtol=1e-4, atol=1e-5, msg=f"gradient {k}")


def _run_both(fn, make_inputs, pick, calls=3, backend="graphjit"):
    """fn eager and compiled on fresh inputs per call; the loss is the sum of the outputs pick(outs)
    selects; the gradients of every input compared. Returns the compiled function's counter."""
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter)
    for call in range(calls):
        seed = 1000 + call
        results = []
        for f in (fn, compiled):
            torch.manual_seed(seed)
            inputs = make_inputs()
            outs = f(*inputs)
            loss = sum(o.sum() for o in pick(outs, call))
            loss.backward()
            results.append(_grads(inputs))
        _same_grads(*results)
    return counter


def exp_beside_sum(x, y):
    return x.sum(), (x * 1000).exp(), y * 3


def _xy():
    return [torch.tensor([1.0, 2.0, -3.0], requires_grad=True), torch.randn(4, requires_grad=True)]


def test_an_unreached_output_with_an_infinite_derivative_adds_no_nan():
    counter = _run_both(exp_beside_sum, _xy, lambda outs, call: outs[:1])
    assert counter.frame_count == 1


def test_an_input_reaching_only_unreached_outputs_keeps_no_gradient():
    # y reaches only the third output: eager leaves y.grad None (an optimizer then skips y)
    _run_both(exp_beside_sum, _xy, lambda outs, call: outs[:1])


def test_each_call_a_different_set_of_outputs():
    subsets = [(0,), (2,), (0, 1), (0, 2), (1,), (0, 1, 2)]
    counter = _run_both(exp_beside_sum, _xy, lambda outs, call: [outs[k] for k in subsets[call]],
                        calls=len(subsets))
    assert counter.frame_count == 1


def split_parts(x, w):
    h = torch.tanh(x @ w)
    a, b, c = h.split([2, 3, 1], dim=-1)
    return a * 2, (b * 1000).exp(), c


def _xw():
    return [torch.randn(4, 5, requires_grad=True), torch.randn(5, 6, requires_grad=True)]


@pytest.mark.parametrize("subset", [(0,), (1,), (2,), (0, 2)])
def test_parts_of_a_split(subset):
    # the gradient of the split's input is a cat of its parts' gradients: a missing part is zeros there,
    # never 0 * exp(1000)
    _run_both(split_parts, _xw, lambda outs, call: [outs[k] for k in subset])


def view_of_an_intermediate(x):
    y = x.sin() * 3
    return y.view(-1), (y * 1000).exp()


def test_an_output_that_views_an_intermediate():
    make = lambda: [torch.randn(3, 4, requires_grad=True)]
    _run_both(view_of_an_intermediate, make, lambda outs, call: outs[call % 2: call % 2 + 1], calls=4)


def views_of_two_intermediates(x, w):
    return (x * w).view(-1), torch.exp(w * 1000).view(1, -1)


def _x_and_w():
    return [torch.randn(3), torch.ones(3, requires_grad=True)]


def test_outputs_that_all_view_intermediates():
    # every output a view: AOTAutograd makes each again as a tensor of its own, which is none of the
    # tensors the forward returned; the unreached one still adds no 0 * inf
    _run_both(views_of_two_intermediates, _x_and_w, lambda outs, call: outs[:1])


def input_passed_through(x, y):
    return x, y * 2, (y * 500).exp()


def test_an_input_returned_as_an_output():
    # x comes from another AOTAutograd graph (torch.compile's), of two outputs: its autograd node is that
    # graph's, which must keep filling the gradient of its unreached output with zeros
    other = torch.compile(lambda b: (b * 1, b * 2), backend="aot_eager")

    def make():
        base = torch.randn(3, requires_grad=True)
        return [other(base)[0], torch.randn(3, requires_grad=True)]

    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(input_passed_through, backend=counter)
    for f in (input_passed_through, compiled):
        torch.manual_seed(0)
        x, y = make()
        x.retain_grad()
        out = f(x, y)
        (out[0].sum() + out[1].sum()).backward()
        if f is input_passed_through:
            want = (x.grad.clone(), y.grad.clone())
        else:
            torch.testing.assert_close((x.grad, y.grad), want)


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 16)
        self.head_a, self.head_b = torch.nn.Linear(16, 3), torch.nn.Linear(16, 5)

    def forward(self, x):
        h = F.gelu(self.body(x))
        return self.head_a(h), self.head_b(h)


def test_a_model_trained_through_one_of_two_heads():
    # AdamW skips parameters whose .grad is None; zeros there would still decay head_b's weights
    torch.manual_seed(0)
    eager = TwoHeads()
    model = TwoHeads()
    model.load_state_dict(eager.state_dict())
    compiled = graphjit.compile(model)
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5) for m in (eager, model)]
    for step in range(3):
        x = torch.randn(4, 8)
        for m, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            a, b = m(x)
            F.cross_entropy(a, torch.arange(4) % 3).backward()
            opt.step()
        assert model.head_b.weight.grad is None
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)


def test_autograd_grad_of_one_output():
    compiled = graphjit.compile(exp_beside_sum)
    for f in (exp_beside_sum, compiled):
        x, y = _xy()
        outs = f(x, y)
        gx, gy = torch.autograd.grad(outs[0], (x, y), allow_unused=True)
        assert gy is None
        torch.testing.assert_close(gx, torch.ones(3))


def test_explicit_zero_gradients_are_computed_as_eager_does():
    # a zero gradient the caller passes is a gradient: 0 * inf is NaN in eager, and so compiled
    compiled = graphjit.compile(exp_beside_sum)
    results = []
    for f in (exp_beside_sum, compiled):
        x, y = _xy()
        outs = f(x, y)
        torch.autograd.backward(outs, [torch.ones(()), torch.zeros(3), torch.zeros(4)])
        results.append(_grads([x, y]))
    _same_grads(*results)
    assert results[0][0].isnan().any()


def test_backward_twice_through_different_outputs():
    compiled = graphjit.compile(exp_beside_sum)
    results = []
    for f in (exp_beside_sum, compiled):
        x, y = _xy()
        outs = f(x, y)
        outs[2].sum().backward(retain_graph=True)
        first = _grads([x, y])
        outs[0].backward()
        results.append(first + _grads([x, y]))
    _same_grads(*results)


def sgn_beside_exp(x):
    return x.sgn(), (x * 1000).exp()


def test_an_output_of_zero_derivative_reached_alone():
    # sgn's gradient is zero: the backward never reads its tangent, yet eager's x.grad is zeros, not None
    counter = _run_both(sgn_beside_exp, lambda: [torch.randn(5, requires_grad=True)],
                        lambda outs, call: outs[:1])
    assert counter.frame_count == 1


def sgn_of_addcdiv_beside_exp(x):
    v = torch.addcdiv(x, x, x, value=2)
    return v.sgn(), (v * 1000).exp()


def test_a_zero_gradient_meets_an_infinity_in_the_formula_it_reaches():
    # the loss reaches sgn only: eager hands sgn's zero gradient to addcdiv's formula, which multiplies it
    # by x / x**2, NaN at x = -inf; exp's formula, unreached, does not run (0 * exp(1000 x) would be NaN
    # everywhere x is large)
    def make():
        x = torch.randn(6)
        x[2] = float("-inf")
        return [x.requires_grad_()]
    counter = _run_both(sgn_of_addcdiv_beside_exp, make, lambda outs, call: outs[:1])
    assert counter.frame_count == 1
    x = make()[0]
    grad, = torch.autograd.grad(sgn_of_addcdiv_beside_exp(x)[0].sum(), x)
    assert grad.isnan().tolist() == [False, False, True, False, False, False]     # eager's, which it matches


def logcumsumexp_beside(x, y):
    return x.logcumsumexp(0), y * 2


def test_an_unreached_gradient_that_is_not_linear_node_by_node():
    # logcumsumexp's gradient takes the log of the incoming gradient's positive and negative parts, adds
    # x and exponentiates: none of it runs when its output is unreached (x.grad stays None)
    def make():
        return [torch.tensor([1.0, float("inf"), -2.0, 3.0], requires_grad=True), torch.randn(3, requires_grad=True)]
    _run_both(logcumsumexp_beside, make, lambda outs, call: [outs[1]] if call % 2 == 0 else [outs[0]], calls=4)


def copysign_beside_softmin(x, y):
    return F.softmin(y * 2, 0), torch.copysign(x, y)


def test_a_zero_gradient_a_reached_output_makes_is_kept():
    # the loss reaches copysign only: eager's y.grad is copysign's zero gradient for `other`, a tensor
    # (y's path through the unreached softmin adds nothing), not None
    _run_both(copysign_beside_softmin, lambda: [torch.randn(5, requires_grad=True),
                                                torch.randn(5, requires_grad=True)], lambda outs, call: outs[1:])
