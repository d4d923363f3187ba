"""Process-wide state around a compiled call: torch modes, the default device, state getters.

- A default device (torch.set_default_device, `with torch.device(...)`) is guarded, factory functions in
  the graph take it, and the translation and compile run without its mode (graphjit's own tensors stay
  on the CPU); a graph making meta tensors is not compiled (no kernel computes there).
- Any other TorchFunctionMode, or a TorchDispatchMode, around the call: the frame runs in CPython under
  it, as in eager (the modes were ignored).
- Getters of process-wide state (torch._C's _get_*/is_*) are guarded on their answer, also with
  arguments (they were constants without a guard).
- A function of no arguments and no tensor work traced twice gets an entry with no guard (its generated
  source did not compile).
"""
import os

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import graphjit
from graphjit.testing import CompileCounter


def zeros_plus_one():
    return torch.zeros(3) + 1


def test_the_default_device_is_followed_and_guarded():
    compiled = graphjit.compile(zeros_plus_one)
    assert compiled().device.type == "cpu"
    with torch.device("meta"):
        assert compiled().device.type == "meta"
    torch.set_default_device("meta")
    try:
        assert compiled().device.type == "meta"
    finally:
        torch.set_default_device(None)
    assert compiled().device.type == "cpu" and torch.equal(compiled(), zeros_plus_one())


def test_compiling_under_a_default_device_compiles_for_the_inputs():
    """x * 2 + 1 of a CPU x under a meta default device: compiled for the CPU without a warning (the
    compiler made a scalar on the default device and failed)."""
    import warnings

    def f(x):
        return x * 2 + 1
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(f, backend=counter)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.device("meta"):
            got = compiled(x)
    assert torch.equal(got, f(x)) and counter.frame_count == 1
    assert getattr(counter.compiled[0], "kernel_count", 1) > 0


class Times10(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is torch.add else out


class NegateAdds(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return -out if func is torch.ops.aten.add.Tensor else out


def add_one(x):
    return torch.add(x, 1)


def test_torch_modes_around_the_call_are_honored():
    compiled = graphjit.compile(add_one)
    x = torch.zeros(3)
    assert torch.equal(compiled(x), torch.ones(3))
    for mode in (Times10, NegateAdds):
        with mode():
            want = add_one(x)
        with mode():
            got = compiled(x)
        assert torch.equal(got, want), mode
    graphjit.reset()
    with NegateAdds():               # first compiled under the mode
        assert torch.equal(graphjit.compile(add_one)(x), -torch.ones(3))
    assert torch.equal(graphjit.compile(add_one)(x), torch.ones(3))


def test_state_getters_are_guarded_on_their_answers():
    def f(x):
        return x + 1, torch.is_anomaly_enabled(), torch.is_autocast_cache_enabled()
    compiled = graphjit.compile(f)
    x = torch.zeros(3)
    for anomaly, cache in ((False, True), (True, False), (False, True)):
        torch.autograd.set_detect_anomaly(anomaly)
        torch.set_autocast_cache_enabled(cache)
        try:
            assert compiled(x)[1:] == f(x)[1:] == (anomaly, cache)
        finally:
            torch.autograd.set_detect_anomaly(False)
            torch.set_autocast_cache_enabled(True)


def _mode():
    return os.environ.get("GRAPHJIT_TEST_MODE_VALUE", "slow")


def test_a_function_of_no_arguments_traced_twice_keeps_running():
    compiled = graphjit.compile(_mode)
    try:
        for value in ("a", "b", "c"):
            os.environ["GRAPHJIT_TEST_MODE_VALUE"] = value
            assert compiled() == value
    finally:
        os.environ.pop("GRAPHJIT_TEST_MODE_VALUE", None)


def test_code_reading_the_default_device_sees_the_callers():
    """The trace runs under the caller's default-device mode (only the compile runs without it): code
    that reads it, or passes device=None explicitly, gets the caller's device."""
    def f(x):
        d = torch.get_default_device()
        return torch.zeros(2, device=d), torch.ones(2, device=None), x + 1
    compiled = graphjit.compile(f)
    x = torch.randn(2)
    for context in (torch.device("meta"), torch.device("cpu")):
        with context:
            want, got = f(x), compiled(x)
        assert [t.device for t in got] == [t.device for t in want]
