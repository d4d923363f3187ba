"""triton_build.prewarm_if_cold: with config.triton_prewarm_at_capture, a process's first translation starts
Triton's start-up thread before capture where the inputs are on a GPU and the compiled-graph cache holds no
graph; never for CPU inputs, a cache holding graphs (a warm start needs no Triton start-up) or with the knob
off. CUDA tensors are fake ones here (the CPU machine has no GPU): only their device is read."""
import os

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphjit import config as gj_config
from graphjit.compiler.runtime import triton_build


@pytest.fixture
def started(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(triton_build, "_prewarm_thread", None)
    monkeypatch.setattr(triton_build, "prewarm", lambda: calls.append(1))
    monkeypatch.setattr(gj_config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(gj_config, "triton_prewarm_at_capture", 1)
    return calls


def cuda_tensor():
    with FakeTensorMode():
        return torch.empty(3, device="cuda")


class OnCuda(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", cuda_tensor())


def test_cuda_inputs_and_an_empty_cache_start_it(started):
    triton_build.prewarm_if_cold([1, cuda_tensor()])
    assert started == [1]


def test_a_module_on_cuda_starts_it(started):
    triton_build.prewarm_if_cold([OnCuda(), torch.randn(2)])
    assert started == [1]


def test_cpu_inputs_do_not(started):
    triton_build.prewarm_if_cold([torch.randn(2), torch.nn.Linear(2, 2), 3.0])
    assert started == []


def test_a_cache_holding_graphs_does_not(started):
    folder = os.path.join(gj_config.cache_dir, "graphs")
    os.makedirs(folder)
    with open(os.path.join(folder, "k.json"), "w") as f:
        f.write("{}")
    triton_build.prewarm_if_cold([cuda_tensor()])
    assert started == []


def test_off_or_started_already_does_not(started, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_prewarm_at_capture", 0)
    triton_build.prewarm_if_cold([cuda_tensor()])
    monkeypatch.setattr(gj_config, "triton_prewarm_at_capture", 1)
    monkeypatch.setattr(triton_build, "_prewarm_thread", object())
    triton_build.prewarm_if_cold([cuda_tensor()])
    assert started == []


def test_a_first_translation_hands_its_arguments_over(monkeypatch):
    import graphjit
    seen = []
    monkeypatch.setattr(gj_config, "triton_prewarm_at_capture", 1)
    monkeypatch.setattr(triton_build, "prewarm_if_cold", lambda values: seen.append(values))
    x = torch.randn(3)
    assert torch.equal(graphjit.compile(lambda a, b=None: a * 2)(x, b=x), x * 2)
    assert len(seen) == 1 and seen[0][0] is x and seen[0][1] is x
    monkeypatch.setattr(gj_config, "triton_prewarm_at_capture", 0)
    graphjit.compile(lambda a: a + 1)(x)
    assert len(seen) == 1
