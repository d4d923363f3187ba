"""erf and gelu through graphjit's compiler: against eager within float32's tolerance, on the C++ codegen and
(where Triton is installed) the Triton interpreter, over values that reach every branch of the C++ kernels'
own float erf (cpp._erf_lines: a polynomial below |x| = 0.9, 1 - 2**p(|x|) above, capped at 4) and the
special values; and, C++ only, the compiled erf's error against a float64 reference, which stays within
1.6 ulp (eager's torch.erf, MKL's: 0.76; libmvec's erff: 4), and gelu's, within an ulp or eager's.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import graphjit

from .harness import check_calls

NAN, INF = float("nan"), float("inf")
# the branch boundary, the cap, where erf rounds to 1.0f (3.92), tiny and subnormal values, zeros' signs
EDGES = [0.0, -0.0, 0.9, -0.9, 0.8999999, 0.9000001, 3.92, -3.92, 4.0, -4.0, 4.5, 1e-45, -1e-45, 1e-38, 1e-20,
         -3e-8, 10.0, -10.0, 1e30, -1e30]


def _values(seed, n=1001):
    """n values (not a multiple of the vector width: some in the kernel's scalar tail) over [-6, 6], plus
    EDGES."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.rand(n, generator=g) * 12 - 6, torch.tensor(EDGES)])


@pytest.mark.parametrize("fn", [lambda x: torch.erf(x), lambda x: torch.erf(x * 0.7071067811865476) * x,
                                lambda x: torch.special.erfc(x) + 1], ids=["erf", "erf-fused", "erfc"])
def test_erf_as_eager(fn, backend):
    check_calls(fn, lambda call: (torch.cat([_values(call), torch.tensor([INF, -INF, NAN])]),), backend,
                atol=None, rtol=None)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_as_eager(approximate, backend):
    """(Eager's exact gelu of +inf is NaN, ours inf: +inf is left out.)"""
    check_calls(lambda x: F.gelu(x, approximate=approximate),
                lambda call: (torch.cat([_values(call), torch.tensor([-INF, NAN])]),), backend, atol=None, rtol=None)


def test_layer_norm_gelu_sigmoid_as_eager(backend):
    """benchmarks/cpu.py's layernorm workload: layer_norm, gelu and sigmoid in one kernel."""
    def make(call):
        g = torch.Generator().manual_seed(call)
        return torch.randn(8, 1024, generator=g) * 3, torch.randn(8, 1024, generator=g)
    norm = torch.nn.LayerNorm(1024)
    check_calls(lambda x, r: torch.sigmoid(F.gelu(norm(x))) + r, make, backend, atol=None, rtol=None)


def _ulps(got, exact):
    """|got - exact| in units of the float32 ulp at exact (the subnormal spacing below 2**-126)."""
    exponent = torch.floor(torch.log2(exact.abs().clamp(min=2.0 ** -126)))
    return torch.where(got.double() == exact, 0.0, (got.double() - exact).abs() / torch.pow(2.0, exponent - 23))


def _sweep(limit):
    """Every 97th float32 in [0, limit] and its negation."""
    positive = torch.arange(0, torch.tensor(limit).view(torch.int32).item(), 97, dtype=torch.int32).view(torch.float32)
    return torch.cat([positive, -positive])


def test_compiled_erf_error_against_float64():
    x = torch.cat([_sweep(5.0), torch.tensor(EDGES)])
    graphjit.reset()
    got = graphjit.compile(lambda t: torch.erf(t) * 1)(x)
    error = _ulps(got, torch.erf(x.double()))
    worst = int(error.argmax())
    assert error.max() <= 1.6, f"erf({x[worst].item()!r}) is {got[worst].item()!r}, {error.max().item():.2f} ulp off"
    assert torch.equal(torch.signbit(got[x == 0]), torch.signbit(x[x == 0]))
    special = torch.tensor([INF, -INF, NAN, 1e-45, -1e-45])
    graphjit.reset()
    got = graphjit.compile(lambda t: torch.erf(t) * 1)(special)
    assert got[:2].tolist() == [1.0, -1.0] and got[2].isnan()
    assert got[3:].tolist() == torch.erf(special[3:].double()).float().tolist()


def test_compiled_erf_tail_equals_body():
    """A value in the kernel's scalar tail equals the same value in its vectorized body."""
    x = _values(0, n=4096)
    graphjit.reset()
    got = graphjit.compile(lambda t: torch.erf(t) * 1)(torch.cat([x, x[:13]]))
    assert torch.equal(got[-13:], got[:13])


def test_compiled_gelu_error_within_an_ulp_or_eagers():
    """Max error against a float64 gelu over [-10, 10], in float32 ulps of the result: within one ulp, or
    else no more than eager's (ATen's Vectorized erf: which one depends on the CPU's vector width; near
    gelu's negative tail, where 1 + erf cancels, both are many ulps off)."""
    x = _sweep(10.0)
    exact = x.double() * 0.5 * (1 + torch.erf(x.double() / math.sqrt(2)))
    graphjit.reset()
    got = graphjit.compile(lambda t: F.gelu(t))(x)
    ours, eagers = _ulps(got, exact), _ulps(F.gelu(x), exact)
    worst = int(ours.argmax())
    assert ours.max() <= max(eagers.max(), 1.0), \
        f"gelu({x[worst].item()!r}) is {ours.max().item():.3g} ulp off, eager's worst {eagers.max().item():.3g}"
