"""torch.autograd.Function subclasses called in a compiled frame.

`MyFunction.apply(...)` becomes one node of the graph: the backend traces its forward, autograd (or
AOTAutograd's joint trace) uses its backward. A forward that does more than compute tensors (Python
stores, writes to its inputs, `.item()`, printing) breaks instead, with results still eager's. Each case
checks outputs, gradients and the optimizer step against an eager copy, through graphjit's compiler and
run as captured.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import check, check_training
from .harness import r

CALLS = []


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, grad):
        a, = ctx.saved_tensors
        return 2 * a * grad


class ScaledTanh(torch.autograd.Function):
    """Non-tensor arguments, two outputs, needs_input_grad, and a backward that is not the true one (so a
    backend that differentiated the forward itself would give other gradients)."""

    @staticmethod
    def forward(ctx, a, b, scale):
        ctx.scale = scale
        ctx.save_for_backward(a, b)
        return torch.tanh(a) * scale, a + b

    @staticmethod
    def backward(ctx, grad_t, grad_s):
        a, b = ctx.saved_tensors
        grad_a = grad_t * ctx.scale * 0.5 + grad_s if ctx.needs_input_grad[0] else None
        grad_b = grad_s * 3 if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(a):
        return torch.round(a * 4) / 4

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


class Counting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        CALLS.append(1)                      # a Python effect: the call breaks
        return a * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        a.mul_(2)
        ctx.mark_dirty(a)
        return a

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DataDependent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2 if a.sum().item() > 0 else a * 3

    @staticmethod
    def backward(ctx, grad):
        return grad


class Block(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(4, 4)
        self.other = nn.Parameter(torch.randn(4))

    def forward(self, x):
        h = self.lin(x)
        if self.kind == "square":
            return Square.apply(h).sum(-1)
        if self.kind == "scaled":
            t, s = ScaledTanh.apply(h, self.other.expand_as(h), 1.5)
            return t * s
        if self.kind == "straight":
            return StraightThrough.apply(h) * self.other
        if self.kind == "counting":
            return Counting.apply(h) + 1
        if self.kind == "data_dependent":
            return DataDependent.apply(h) + 1
        raise ValueError(self.kind)


@pytest.mark.parametrize("backend", [None, "graphjit"])
@pytest.mark.parametrize("kind", ["square", "scaled", "straight"])
def test_training_through_autograd_function(kind, backend):
    check_training(lambda: Block(kind), lambda: (r(3, 4),), graphs=1, backend=backend, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["square", "scaled", "straight"])
def test_inference_through_autograd_function(kind):
    def f(x, w):
        with torch.no_grad():
            if kind == "square":
                return Square.apply(x) + w
            if kind == "scaled":
                return ScaledTanh.apply(x, w, 2.0)
            return StraightThrough.apply(x * w)
    check(f, lambda: (r(3, 4), r(4)), graphs=1, backend="graphjit")


@pytest.mark.parametrize("kind", ["counting", "data_dependent"])
def test_forward_with_effects_breaks(kind):
    CALLS.clear()
    check_training(lambda: Block(kind), lambda: (r(3, 4),), graphs=None, compile_kwargs={"fullgraph": False},
                   atol=1e-6)
    if kind == "counting":
        assert len(CALLS) == 6, CALLS        # 3 eager steps, 3 compiled: none while tracing
    explained = graphjit.explain(Block(kind))(r(3, 4))
    assert explained.graph_break_count >= 1


def test_in_place_forward_breaks():
    def f(x):
        y = x * 1
        return InPlace.apply(y) + 1, y
    check(f, lambda: (r(3),), graphs=None, compile_kwargs={"fullgraph": False})
    explained = graphjit.explain(f)(r(3))
    assert any("mark_dirty" in e.reason for e in explained.break_reasons), explained.break_reasons


SCALE = 2.0
OFFSETS = {"shift": 1.0}


def _shift():
    return OFFSETS["shift"]


class ScaleByGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * SCALE

    @staticmethod
    def backward(ctx, g):
        return g * SCALE


class ShiftByHelper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + _shift()

    @staticmethod
    def backward(ctx, g):
        return g


BACKWARD_SCALES = [1.0, 3.0, 5.0]


class BackwardReadsAList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g * BACKWARD_SCALES[0]


class BackwardCounts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.n = 1
        return x * 1

    @staticmethod
    def backward(ctx, g):
        ctx.n += 1
        return g * ctx.n


def test_globals_read_by_forward_and_backward_are_guarded():
    """They are traced once: a global (or one a helper reads) rebound after the compile recompiles."""
    global SCALE
    fn = lambda x: ScaleByGlobal.apply(x) + 1          # noqa: E731
    compiled = graphjit.compile(fn)
    for scale in (2.0, 3.0, 3.0):
        SCALE = scale
        x, y = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
        torch.testing.assert_close(compiled(x), fn(y))
        compiled(x).sum().backward()
        fn(y).sum().backward()
        torch.testing.assert_close(x.grad, y.grad)
    SCALE = 2.0
    # a helper of forward reads a dict, which could change in place: the Function runs eagerly
    fn = lambda x: ShiftByHelper.apply(x) * 2          # noqa: E731
    compiled = graphjit.compile(fn)
    for shift in (1.0, 4.0):
        OFFSETS["shift"] = shift
        torch.testing.assert_close(compiled(torch.ones(3)), fn(torch.ones(3)))


@pytest.mark.parametrize("function", [BackwardReadsAList, BackwardCounts])
def test_a_backward_with_state_runs_eagerly_each_time(function):
    """A backward reading a list the program changes, or storing on ctx, must run each time as eager's."""
    fn = lambda x: function.apply(x) * 2               # noqa: E731
    compiled = graphjit.compile(fn)
    grads = []
    for run in (fn, compiled):
        x = torch.ones(3, requires_grad=True)
        out = run(x).sum()
        for scale in (1.0, 3.0):
            BACKWARD_SCALES[0] = scale
            out.backward(retain_graph=True)
        grads.append(x.grad.clone())
    BACKWARD_SCALES[0] = 1.0
    torch.testing.assert_close(grads[1], grads[0])
