"""Which graphs graphjit's compiler hands to the Triton codegen: decisions that hold with or without Triton
installed (this file runs on every Python of the matrix; test_triton.py skips where Triton is missing)."""
import torch

from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config


def test_cpu_graphs_stay_on_cpp_unless_GRAPHJIT_TRITON_CPU(monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", 0)
    assert not triton_codegen.TritonDevice.wants([torch.ones(3)])


def test_without_triton_cpu_graphs_stay_on_cpp_even_with_the_switch(monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
    monkeypatch.setattr(triton_codegen, "triton_available", lambda: False)
    assert not triton_codegen.TritonDevice.wants([torch.ones(3)])


def test_without_triton_a_cuda_graph_runs_eagerly_and_says_why(monkeypatch):
    monkeypatch.setattr(triton_codegen, "triton_available", lambda: False)
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    assert triton_codegen.TritonDevice.unsupported_reason(gm, [torch.ones(3)]) == "Triton is not installed (pip install triton)"


def test_mixed_devices_run_eagerly():
    gm = torch.fx.symbolic_trace(lambda x, y: x * y)
    reason = triton_codegen.TritonDevice.unsupported_reason(gm, [torch.ones(3), torch.ones(3, device="meta")])
    assert reason.startswith("inputs on several devices")
