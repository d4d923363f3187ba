"""The model zoo (tests/models/zoo.py) on a CUDA GPU under the compile modes: compiled vs eager on fresh
inputs over three calls, in inference, fp32. reduce-overhead runs every eval entry (CUDA graphs replayed
from the second call); max-autotune a few (its compiles time kernel candidates). Skipped without a GPU."""
import os
import sys

import pytest
import torch

import graphjit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "models"))
from zoo import ZOO, build, missing  # noqa: E402

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


def outputs(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if hasattr(result, "to_tuple"):
        result = result.to_tuple()
    if isinstance(result, (list, tuple)):
        return [t for item in result for t in outputs(item)]
    return []


def check(name, mode):
    spec = ZOO[name]
    reason = missing(spec)
    if reason:
        pytest.skip(reason)
    model, _ = build(spec)
    model = model.cuda()
    compiled = graphjit.compile(model, mode=mode)
    with torch.no_grad():
        for seed in range(3):
            torch.manual_seed(seed + 1)
            inputs = to_cuda(spec.inputs())
            expected = [t.clone() for t in outputs(model(**inputs))]
            got = [t.clone() for t in outputs(compiled(**inputs))]
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", EVAL)
def test_reduce_overhead_matches_eager(name):
    check(name, "reduce-overhead")


@pytest.mark.parametrize("name", AUTOTUNED)
def test_max_autotune_matches_eager(name):
    check(name, "max-autotune")
