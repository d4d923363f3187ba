"""Differential testing of graphjit's compiler against eager PyTorch, on top of graphjit.testing.

`run_cases(fn, cases)` traces one fx graph that applies fn to every case (so one C++ compile covers all
of an op's shapes and layouts), compiles it with the graphjit backend, and compares each result to eager.
`check_calls(fn, make_inputs, backend)` goes through the frontend instead, over several calls of fresh
inputs. Compiled kernels are cached on disk (~/.cache/graphjit/kernels), so reruns, and the other Pythons
of the test matrix, mostly skip the C++ compiler.
"""
import torch
import torch.fx

from graphjit import testing
from graphjit.backends.registry import graphjit_backend
from graphjit.compiler.scheduler import Kernel


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


def run_cases(fn, cases, atol=None, rtol=None):
    """Compile fn over all cases in one graph; assert each output is eager's (within the dtype's
    TOLERANCES, or atol/rtol where given). Returns the compiled."""
    compiled, inputs = compile_cases(fn, cases)
    with torch.no_grad():
        got = compiled(*inputs)
        expected = tuple(fn(*case) for case in cases)
    for i, (g, e) in enumerate(zip(got, expected)):
        testing.assert_same(g, e, where=f"case {i} (inputs {describe(cases[i])})", atol=atol, rtol=rtol)
    return compiled


def check_calls(fn, make_inputs, backend, calls=3, *, atol=0.0, rtol=0.0, graphs="first", **options):
    """fn through the frontend and graphjit's compiler against eager on fresh inputs over several calls
    (graphjit.testing.check; make_inputs(call) -> arguments): outputs and the arguments after each call
    exactly eager's (values, dtypes, shapes, signs of zeros; NaN for NaN) unless atol/rtol say otherwise
    (None: the dtype's TOLERANCES); no recompile after the first call; every graph compiled by `backend`'s
    code generator ("cpp", or "triton": the interpreter on CPU tensors, the GPU on CUDA ones), none run as
    captured (nor failed in the backend, which runs the graph as captured with a warning)."""
    counter = testing.check(fn, make_inputs, calls=calls, backend=graphjit_backend, atol=atol, rtol=rtol,
                            graphs=graphs, **options)
    assert len(counter.compiled) == counter.frame_count, "the backend failed on a graph (see the warning)"
    made_by = "launches" if backend == "triton" else "source"
    wrong = [i for i, compiled in enumerate(counter.compiled_functions()) if not hasattr(compiled, made_by)]
    assert not wrong, f"graph(s) {wrong} were not compiled by the {backend} code generator"
    return counter


def describe(case):
    parts = []
    for t in case:
        if isinstance(t, torch.Tensor):
            layout = "" if t.is_contiguous() else f" strides {tuple(t.stride())}"
            parts.append(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}{layout}")
        else:
            parts.append(repr(t))
    return ", ".join(parts)


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

def triton_devices(matrix=False):
    """Triton's interpreter on CPU tensors, and CUDA where there is a GPU (the `gpu` marker skips it).

    matrix: for a test over every op and dtype. Its interpreter runs are marked one_python: the Triton code
    of an op is written by our codegen, the same Python on every Python, and the C++ matrix runs on every
    Python (every torch version's decompositions). Triton's interpreter version (3.6 with Python 3.12, 3.8
    with 3.13) shows in the semantics tests, which run on both (the `backend` fixture's tests)."""
    import pytest
    interpret = pytest.param("cpu", id="interpret", marks=[pytest.mark.one_python] if matrix else [])
    return [interpret, pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


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

