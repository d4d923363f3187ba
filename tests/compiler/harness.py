"""Differential testing of graphjit's compiler against eager PyTorch.

`run_cases(fn, cases)` traces one fx graph that applies fn to every case (so one C++ compile covers all
of an op's shapes and layouts), compiles it with the graphjit backend, and compares each result to eager.
Compiled kernels are cached on disk (~/.cache/graphjit/kernels), so reruns, and the other Pythons of the
test matrix, mostly skip the C++ compiler.
"""
import os
import sys

import torch
import torch.fx

from graphjit.backends.registry import graphjit_backend
from graphjit.compiler.scheduler import Kernel

TOLERANCES = {
    torch.float32: dict(rtol=2e-5, atol=2e-5),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
}


def repro(request=None):
    """The one command that reruns the current test."""
    node = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"GRAPHJIT_TEST_PYTHONS={py} ./dev test '{node}'"


def trace_cases(fn, cases):
    """An fx GraphModule (torch-level, as the capture frontend makes) returning fn(*case) for each case."""
    params, calls = [], []
    for i, case in enumerate(cases):
        names = [f"c{i}_{j}" for j in range(len(case))]
        params += names
        calls.append(f"fn({', '.join(names)})")
    source = f"def cases({', '.join(params)}):\n    return ({', '.join(calls)},)\n"
    namespace = {"fn": fn}
    exec(source, namespace)
    return torch.fx.symbolic_trace(namespace["cases"])


def compile_cases(fn, cases):
    gm = trace_cases(fn, cases)
    inputs = [t for case in cases for t in case]
    return graphjit_backend(gm, inputs), inputs


def run_cases(fn, cases, **tolerance):
    """Compile fn over all cases in one graph; assert each output equals eager's. Returns the compiled."""
    compiled, inputs = compile_cases(fn, cases)
    with torch.no_grad():
        got = compiled(*inputs)
        expected = tuple(fn(*case) for case in cases)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_same(g, e, f"case {i} (inputs {describe(cases[i])})", **tolerance)
    return compiled


def assert_same(got, expected, what, **tolerance):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), f"{what}: {len(got)} outputs, eager has {len(expected)}"
        for k, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what} output {k}", **tolerance)
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected, f"{what}: {got!r} != {expected!r}"
        return
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, eager {expected.dtype}\nrepro: {repro()}"
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, eager {tuple(expected.shape)}"
    tol = dict(TOLERANCES.get(expected.dtype, dict(rtol=0, atol=0)))
    tol.update(tolerance)
    torch.testing.assert_close(got, expected, equal_nan=True, **tol,
                               msg=lambda m: f"{what}: {m}\nrepro: {repro()}")


def describe(case):
    parts = []
    for t in case:
        if isinstance(t, torch.Tensor):
            layout = "" if t.is_contiguous() else f" strides {tuple(t.stride())}"
            parts.append(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}{layout}")
        else:
            parts.append(repr(t))
    return ", ".join(parts)


def compiling_backend(backend):
    """(graphjit's backend, a list noting per graph whether it compiled for `backend`, "cpp" or "triton",
    rather than running as captured)."""
    compiled_graphs = []

    def compile_graph(gm, example_inputs):
        compiled = graphjit_backend(gm, example_inputs)
        compiled_graphs.append(hasattr(compiled, "launches" if backend == "triton" else "source"))
        return compiled
    return compile_graph, compiled_graphs


def kernel_count(compiled):
    return sum(isinstance(i, Kernel) for i in compiled.items)


def extern_count(compiled):
    return sum(not isinstance(i, Kernel) for i in compiled.items)


# ---- inputs: shapes and layouts every op is tried on ----

def make(shape, dtype, low=-3.0, high=3.0, gen=None):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high) + 1, shape, dtype=dtype, generator=gen)
    return (torch.rand(shape, generator=gen, dtype=torch.float32) * (high - low) + low).to(dtype)


def unary_inputs(dtype, low=-3.0, high=3.0, seed=0):
    """Odd sizes (1, 7, 33, 1000), 0-d, transposed, sliced and broadcast (stride 0) inputs."""
    g = torch.Generator().manual_seed(seed)
    m = lambda *shape: make(shape, dtype, low, high, g)  # noqa: E731
    return [
        (m(),), (m(1),), (m(7),), (m(1000),), (m(33, 7),), (m(7, 1000),),
        (m(7, 33).t(),),                         # transposed
        (m(9, 40)[1:8:2, 3:36],),                # sliced, step 2, offset
        (m(33, 1).expand(33, 7),),               # broadcast: stride 0
        (m(2, 3, 5, 7).permute(0, 2, 3, 1),),    # 4-d permuted
    ]


def binary_inputs(dtype, low=-3.0, high=3.0, seed=1, other_dtype=None, other_low=None, other_high=None):
    """Pairs: same shape, broadcast both ways, 0-d tensor, transposed, sliced, size-1 dims."""
    g = torch.Generator().manual_seed(seed)
    other_dtype = other_dtype or dtype
    ol = low if other_low is None else other_low
    oh = high if other_high is None else other_high
    a = lambda *shape: make(shape, dtype, low, high, g)  # noqa: E731
    b = lambda *shape: make(shape, other_dtype, ol, oh, g)  # noqa: E731
    return [
        (a(7), b(7)), (a(1), b(1)), (a(33, 1000), b(33, 1000)),
        (a(7, 33), b(33)),                       # broadcast the second
        (a(7, 1), b(1, 33)),                     # broadcast both
        (a(), b(5, 7)),                          # 0-d first
        (a(7, 33).t(), b(33, 7)),                # transposed first
        (a(10, 40)[::3, 5:], b(4, 35)),          # sliced first
        (a(3, 1, 5), b(4, 1)),                   # size-1 dims
    ]


# ---- lowering tests: an op through both codegens, without a fallback ----

def triton_devices():
    """Triton's interpreter on CPU tensors, and CUDA where there is a GPU (the `gpu` marker skips it)."""
    import pytest
    return [pytest.param("cpu", id="interpret"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def check_lowered(op, dtype, device=None, **tolerance):
    """op against eager on its inputs: the C++ codegen (device None) or the Triton codegen on `device`;
    the graph must compile without a fallback."""
    if device is None:
        compiled = run_cases(op.fn, op.inputs(dtype), **tolerance)
    else:
        import pytest
        pytest.importorskip("triton")
        from . import test_triton
        compiled = test_triton.run_triton(op.fn, op.inputs(dtype), device, **tolerance)
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks
    return compiled

