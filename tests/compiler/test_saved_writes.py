"""In-place writes, after a compiled training graph, into values its backward saved (compiler/training.py,
"In-place writes into saved values"): eager's node of each op checks what it saved only when its own
backward runs, so a write into an output or input raises only at a backward that reads the old value.
Against eager: gradients where eager computes them, the error where eager raises, over several calls."""
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter


def median_var(x, w):
    m = x.median().abs()          # an output var's backward saves
    return m, m.var(-1, correction=0), x * w, (x * 2).sin()


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, generator=g, requires_grad=True), torch.randn(5, generator=g)]


def _run(fn, write, loss_of, raises, calls=3):
    """fn eager and compiled; after each call write(outs, inputs) writes in place, then loss_of(outs)
    backpropagates: the same error as eager's where it raises, else the same gradients."""
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(fn, backend=counter)
    for call in range(calls):
        grads = []
        for f in (fn, compiled):
            inputs = _inputs(call)
            outs = f(*inputs)
            write(outs, inputs)
            if raises:
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    loss_of(outs).backward()
                continue
            loss_of(outs).backward()
            grads.append(inputs[0].grad)
        if not raises:
            torch.testing.assert_close(grads[1], grads[0])
    assert counter.frame_count == 1
    return counter


def _write_output(outs, inputs):
    outs[0].mul_(2)


def _write_input(outs, inputs):
    inputs[1].add_(1)


def test_an_output_the_backward_saved_written_then_a_loss_on_other_outputs():
    _run(median_var, _write_output, lambda outs: outs[2].sum() + outs[3].sum(), raises=False)


def test_an_output_the_backward_saved_written_then_a_loss_through_the_write():
    # the written output's own gradient flows through mul_ (which saved nothing of the old value)
    _run(median_var, _write_output, lambda outs: outs[0] + outs[3].sum(), raises=False)


def test_an_output_the_backward_saved_written_then_a_loss_reading_it():
    _run(median_var, _write_output, lambda outs: outs[1] + outs[3].sum(), raises=True)


def test_an_input_the_backward_saved_written_then_a_loss_on_other_outputs():
    _run(median_var, _write_input, lambda outs: outs[1] + outs[3].sum(), raises=False)


def test_an_input_the_backward_saved_written_then_a_loss_reading_it():
    _run(median_var, _write_input, lambda outs: outs[2].sum(), raises=True)


def test_a_write_after_the_backward_ran_is_not_checked_again():
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(median_var, backend=counter)
    for f in (median_var, compiled):
        x, w = _inputs(0)
        outs = f(x, w)
        outs[1].backward(retain_graph=True)
        outs[0].mul_(2)
        (outs[2].sum() + outs[3].sum()).backward()
        assert x.grad is not None
    assert counter.frame_count == 1


def test_a_graph_break_then_a_write_into_a_saved_output():
    # fuzz grad 12700945: the write is in the second graph, the loss on other outputs
    def fn(x, y):
        m = x.median().abs()
        v = m.var(-1, correction=0)
        print("", end="")            # a graph break
        m.copy_(m.flip(0))
        return y * 2, m.sgn(), v.shape

    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(fn, backend=counter)
    for call in range(3):
        grads = []
        for f in (fn, compiled):
            x, y = _inputs(call)[0], torch.randn(3, requires_grad=True)
            outs = f(x, y)
            (outs[0].sum() + outs[1]).backward()
            grads.append((x.grad, y.grad))
        for eager, ours in zip(*grads):
            assert (eager is None) == (ours is None)
            torch.testing.assert_close(ours, eager)
    assert counter.frame_count == 2
