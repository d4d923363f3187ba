"""The model zoo (tests/models/zoo.py) on a CUDA GPU under the compile modes: compiled vs eager on fresh
inputs over three calls, in inference, fp32. reduce-overhead runs every eval entry (CUDA graphs replayed
from the second call); max-autotune a few (its compiles time kernel candidates). Skipped without a GPU."""

import pytest
import torch

import graphjit

from tests.models.zoo import ZOO, build, matches_eager, missing

pytestmark = pytest.mark.gpu

EVAL = [name for name in ZOO if "train" not in name and "decode" not in name and name != "bert-all-outputs"]
AUTOTUNED = ["gpt2", "bert", "vit", "resnet"]


def to_cuda(tree):
    if isinstance(tree, torch.Tensor):
        return tree.cuda()
    if isinstance(tree, dict):
        return {k: to_cuda(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cuda(v) for v in tree)
    return tree


def check(name, mode):
    spec = ZOO[name]
    reason = missing(spec)
    if reason:
        pytest.skip(reason)
    model, _ = build(spec)
    model = model.cuda()
    matches_eager(model, graphjit.compile(model, mode=mode), spec, prepare=to_cuda, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", EVAL)
def test_reduce_overhead_matches_eager(name):
    check(name, "reduce-overhead")


@pytest.mark.parametrize("name", AUTOTUNED)
def test_max_autotune_matches_eager(name):
    check(name, "max-autotune")
