"""torch.inference_mode() blocks inside a compiled function. The tensors a block makes are inference tensors
(is_inference(), no in-place update outside the mode); a graph's outputs are made in its caller's mode, so
a block that switches the mode runs in CPython (the frame eagerly, the functions it calls compiled), and a
block that keeps the caller's mode is captured, guarded by that mode."""
import pytest
import torch

import graphjit


def _block(x, w):
    a = x @ w
    with torch.inference_mode():
        y = a.relu() * 2
        z = y.sum()
    return a.sigmoid() + 1, y, z, y.is_inference()


def _inner(x):
    return x.tanh() * 3


@torch.inference_mode()
def _decorated(x):
    return _inner(x) + 1


def _calls_decorated(x):
    y = _decorated(x)
    return y, y.is_inference()


def _describe(result):
    return [(t.is_inference(), t.requires_grad) if isinstance(t, torch.Tensor) else t for t in result]


@pytest.mark.parametrize("fn,make", [
    (_block, lambda: (torch.randn(3, 4, requires_grad=True), torch.randn(4, 4))),
    (_calls_decorated, lambda: (torch.randn(5),)),
], ids=["block", "decorated callee"])
@pytest.mark.parametrize("caller_mode", [False, True], ids=["outside", "under inference_mode"])
def test_results_are_inference_tensors_as_in_eager(fn, make, caller_mode):
    graphjit.reset()
    compiled = graphjit.compile(fn)
    for _ in range(3):
        args = make()
        with torch.inference_mode(caller_mode):
            expected, got = fn(*args), compiled(*args)
        assert _describe(got) == _describe(expected)
        for g, e in zip(got, expected):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(g, e)


def test_an_in_place_update_of_the_blocks_tensor_outside_the_mode_raises_as_in_eager():
    graphjit.reset()
    args = (torch.randn(3, 4), torch.randn(4, 4))
    y = graphjit.compile(_block)(*args)[1]
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        y.add_(1)


def test_a_block_in_the_callers_mode_is_captured_and_guarded_by_it():
    graphjit.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    compiled = graphjit.compile(_block, backend=backend)
    args = (torch.randn(3, 4), torch.randn(4, 4))
    with torch.inference_mode():
        got = compiled(*args)
    assert len(graphs) == 1 and got[3] is True and got[1].is_inference()
    got = compiled(*args)              # outside the mode: the guard fails, the frame runs in CPython
    assert len(graphs) == 1 and got[3] is True and not got[0].is_inference()
