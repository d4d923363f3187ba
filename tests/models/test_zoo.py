"""Real models capture whole: every entry of the zoo (tests/models/zoo.py: transformers architectures from small
random configs, a ResNet-style CNN and a ViT in plain torch), compiled with fullgraph=True, gives one graph and
no graph break, and matches eager (outputs, arguments, and the state_dict: BatchNorm's running statistics in
train mode). Train-mode entries also match eager's gradients, captured and through graphjit's compiler.

The entries are ZOO's and, of the wider zoo (zoo.WIDE), the few of zoo.WIDE_SAMPLE; GRAPHJIT_FULL_ZOO=1 runs every
entry of WIDE (zoo.selected()).

An entry that graphjit can't capture yet is an xfail(strict=True) whose reason is the Unsupported error and
where it happens (tests/models/gaps.py). Fix the gap, and the test XPASSes, which fails: remove the entry
from GAPS.
"""
import pytest
import torch

import graphjit as gj
from graphjit.testing import CompileCounter

from graphjit.backends.registry import graphjit_backend
from graphjit.testing import assert_same, check_module, check_training, clone_tree
from .gaps import (BACKWARD_GAPS, EXPECTED_GRAPHS, GAPS, ONE_GRAPH_GAPS, WRONG_WITH_BREAKS, params,
                  skip_if_missing)
from .zoo import FULL, build, selected
from ..conftest import runs_here

ATOL = RTOL = 1e-5
TESTED = selected()


# --------------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("name", params(TESTED, ONE_GRAPH_GAPS))
def test_one_graph_no_breaks(name):
    """explain() on a fresh model: one graph, no break (the breaks' reasons are the failure message)."""
    skip_if_missing(name)
    model, inputs = build(FULL[name])
    explained = gj.explain(model)(**inputs)
    reasons = [f"{e.reason} at {e.filename}:{e.lineno}" for e in explained.break_reasons]
    assert explained.graph_break_count == 0, "\n".join(reasons)
    assert explained.graph_count == 1, str(explained)


@pytest.mark.parametrize("name", params(TESTED, GAPS))
def test_matches_eager_fullgraph(name):
    """fullgraph=True, 4 calls with fresh inputs of the same shapes: outputs, arguments (a passed-in cache is
    mutated) and state_dicts equal to eager's; one graph in all (no recompile; see EXPECTED_GRAPHS)."""
    skip_if_missing(name)
    spec = FULL[name]
    check_module(spec.factory, lambda: (), kwargs_factory=spec.inputs, graphs=EXPECTED_GRAPHS.get(name, 1),
                 compile_kwargs={"fullgraph": True}, atol=ATOL, rtol=RTOL)


TRAIN = [name for name in TESTED if FULL[name].train]


def _scalar(out):
    """The loss if the model returned one, else the sum of its first tensor output."""
    loss = out.get("loss") if isinstance(out, dict) else None
    if loss is not None:
        return loss
    first = out if isinstance(out, torch.Tensor) else next(v for v in out.values() if isinstance(v, torch.Tensor))
    return first.sum()


@pytest.mark.parametrize("name", params(TRAIN, {**GAPS, **BACKWARD_GAPS}))
def test_train_gradients_match_eager(name):
    """Train mode: the compiled forward's loss backpropagates to the same parameter gradients as eager's."""
    skip_if_missing(name)
    spec = FULL[name]
    eager, inputs = build(spec)
    model = clone_tree(eager)
    compiled = gj.compile(model, backend=CompileCounter(), fullgraph=True)
    expected = _scalar(eager(**clone_tree(inputs)))
    actual = _scalar(compiled(**clone_tree(inputs)))
    expected.backward()
    actual.backward()
    assert_same(actual, expected, where="loss", atol=ATOL, rtol=RTOL)
    grads = {n: p.grad for n, p in model.named_parameters()}
    expected_grads = {n: p.grad for n, p in eager.named_parameters()}
    assert_same(grads, expected_grads, where="grads", atol=ATOL, rtol=RTOL)
    assert_same(model.state_dict(), eager.state_dict(), where="state_dict()", atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", params([n for n in TESTED if n in GAPS], WRONG_WITH_BREAKS))
def test_gap_models_match_eager_with_breaks(name):
    """The entries that don't capture whole yet, compiled without fullgraph: wherever graphjit breaks (or
    runs the forward eagerly), the results, arguments and state_dicts are still eager's, call after call."""
    skip_if_missing(name)
    spec = FULL[name]
    check_module(spec.factory, lambda: (), kwargs_factory=spec.inputs, graphs=None, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", TRAIN)
def test_train_steps_through_the_compiler(name):
    """Train mode through graphjit's compiler (forward and backward halves from AOTAutograd, C++ kernels):
    two steps of forward, loss, backward and SGD; losses, outputs, gradients and the state_dict after each
    step match eager's, and every half of every graph compiled. Each entry runs on one Python of
    conftest.SPREAD (a compile of both halves takes 3-14 s; tests/compiler/test_training.py runs on all)."""
    if not runs_here(TRAIN.index(name)):
        pytest.skip("spread over the test matrix (conftest.runs_here)")
    skip_if_missing(name)
    spec = FULL[name]
    check_training(spec.factory, lambda: (), kwargs_factory=spec.inputs, loss=_scalar, steps=2, graphs=None,
                   backend=graphjit_backend, atol=1e-4, rtol=1e-4)
