"""Numeric semantics of graphjit's own kernels against eager, on the C++ codegen, in Triton's interpreter
and (with a GPU) on CUDA: bool and narrow-integer arithmetic (C++ computes it in int, a Triton i1 add
wraps), float floor division at infinities and signed zeros, clamp and relu keeping -0.0 and NaN, sign of
NaN, negative constants in generated C++, cat of empty pieces, fallback ops whose ATen kernel lays its
result out otherwise than its meta function does (or makes it of another dtype: 16-bit training batch
norm's running statistics), writes through an expand, and Python scalars that eager converts (addcmul's
value, index_add's alpha); float -> int -> float round trips, 16-bit results read inside a kernel, var and std
of values beyond 1e19. Signed zeros are compared through 1 / y (a tolerant comparison takes -0.0 for
0.0), or by sign bit (check_calls compares exactly).
"""
import contextlib

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.compiler.codegen import triton as triton_codegen

from graphjit.testing import assert_same

from .harness import check_calls, compile_cases, run_cases

DEVICES = ["cpp", "interpret", pytest.param("cuda", marks=pytest.mark.gpu)]
SPECIALS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -3e38, 1e-40, -0.5, 0.5, 3.0, -3.0,
            7.25, 1e-20, -1.0]


def check(fn, cases, device, fallbacks=False, **tolerance):
    """fn over each case, compiled for device, against eager; no op may fall back to ATen unless
    `fallbacks`."""
    if device == "cpp":
        compiled = run_cases(fn, cases, **tolerance)
    else:
        pytest.importorskip("triton")
        from .test_triton import run_triton
        compiled = run_triton(fn, cases, "cuda" if device == "cuda" else "cpu", **tolerance)
    assert fallbacks or not compiled.graph.fallbacks, compiled.graph.fallbacks
    return compiled


def full_range(shape, dtype, seed):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(seed)
    high = info.max + 1 if info.bits < 64 else info.max
    return torch.randint(info.min, high, shape, generator=g, dtype=torch.int64).to(dtype)


def specials_grid(dtype):
    """Every pair of SPECIALS: (a, b) of shape [n, n]."""
    values = torch.tensor(SPECIALS, dtype=torch.float64)
    a, b = torch.meshgrid(values, values, indexing="ij")
    return a.to(dtype).contiguous(), b.to(dtype).contiguous()


# ---- bool and narrow integers: values stay in the dtype (wrapping), bools stay 0/1 -----------------------

def bool_ops(b, c, x):
    both = torch.logical_and(x, x)
    return (b + b, torch.add(b, c, alpha=2), b * c + b, ~(b & c), ~(b | c), ~(b ^ c), (b + c).float(),
            -(b + c).float(), torch.add(b, b, alpha=2).to(torch.float32), (b + c).sum(), (b * c + b).sum(0),
            both + both, (both + both).sum(), torch.maximum(b, c) + b, torch.where(b, c, b + c) * b)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_arithmetic_stays_zero_or_one(device):
    g = torch.Generator().manual_seed(0)
    cases = [(torch.rand(31, 6, 8, generator=g) < 0.5, torch.rand(31, 6, 8, generator=g) < 0.5,
              torch.randn(4, 17, generator=g)),
             (torch.rand(1, 3, generator=g) < 0.5, torch.rand(1, 3, generator=g) < 0.5,
              torch.randn(8, 1, generator=g).half())]
    check(bool_ops, cases, device)


def narrow_int_ops(a, b):
    nonzero = torch.where(b == 0, torch.ones_like(b), b)
    folded = torch.where(a > 3, a, -a)
    return (-a, (-a).amax(), (-a).amin(0), folded.amax(), folded.amin(1), (a + b) > 1, (a + b).float(),
            (a - b).float(), (a * b).float(), (a * b) > 0, (a - b) // 3, (a + b) % 7, a // nonzero,
            (a * b).sum(0), (~a).float(), ~(a & b), (-a).abs().float(), torch.sign(a - b),
            torch.maximum(a + b, b), torch.minimum(a - b, a), (a * a).float(), (-a).argmax(1),
            a.all(0), a.any(), a.all(), (a + b).all(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16], ids=str)
def test_narrow_int_arithmetic_wraps_as_eager(dtype, device):
    cases = [(full_range((5, 7), dtype, 1), full_range((5, 7), dtype, 2)),
             (full_range((33, 9), dtype, 3), full_range((9,), dtype, 4))]
    check(narrow_int_ops, cases, device)


@pytest.mark.parametrize("device", DEVICES)
def test_uint8_max_of_negated_values(device):
    """uint8 -v wraps to 256 - v before amax compares (fuzz 079)."""
    def fn(x):
        v = torch.nan_to_num(x, 0.0, 0.0, 0.0).clamp(0, 200).to(torch.uint8)
        return torch.amax(torch.where(v > 3, v, -v), (0, 1)), v.all(0)
    check(fn, [(torch.tensor([[7.0], [2.0], [150.0]]),), (torch.randn(6, 5) * 50,)], device, fallbacks=True)


def int_divisions(a, b):
    return a // b, torch.div(a, b, rounding_mode="trunc"), torch.remainder(a, b)


def _compiled_for(device, fn, cases):
    """(compiled, its inputs) of fn over cases for device: "cpp", or "interpret" (Triton's interpreter)."""
    if device == "cpp":
        return compile_cases(fn, cases)
    pytest.importorskip("triton")
    from .test_triton import compile_triton
    compiled, _, inputs = compile_triton(fn, cases, "cpu")
    return compiled, inputs


@pytest.mark.parametrize("device", ["cpp", "interpret"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8], ids=str)
def test_integer_division_by_zero_raises_as_eager(dtype, device):
    """Eager's CPU kernels raise for an integer division by 0: C++ traps (SIGFPE killed the process), the
    Triton interpreter's division returned a value; both raise eager's RuntimeError instead."""
    a, b = torch.arange(1, 13, dtype=dtype), torch.arange(12, dtype=dtype) % 5
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        int_divisions(a, b)
    compiled, inputs = _compiled_for(device, int_divisions, [(a, b)])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(*inputs)
    b += 1
    for got, want in zip(compiled(*inputs)[0], int_divisions(a, b)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", ["cpp", "interpret"])
def test_integer_division_checks_only_the_lanes_it_computes(device):
    """A division inside a cat's piece: the lanes of the other pieces load no divisor (0 where masked) and
    must not count as a division by 0; a divisor known to be nonzero (a constant) is not checked."""
    def fn(a, b, c):
        return torch.cat([a // b, c]), torch.cat([c, torch.remainder(a, b)]) // 3
    a, b, c = torch.arange(1, 7), torch.arange(1, 7) % 4 + 1, torch.arange(5)
    compiled, inputs = _compiled_for(device, fn, [(a, b, c)])
    for got, want in zip(compiled(*inputs)[0], fn(a, b, c)):
        assert torch.equal(got, want)
    if device == "interpret":
        assert "tl.store(gj_status" in compiled.source and ", 3 == 0)" not in compiled.source


# ---- floats: floor division, signed zeros, NaN -----------------------------------------------------------

def floor_division(a, b):
    q = a // b
    return (q, 1 / q, torch.div(a, b, rounding_mode="floor"), torch.floor_divide(a, 3),
            torch.div(1e-20, b, rounding_mode="floor"), 1 / torch.floor_divide(a, -7),
            torch.div(a, b, rounding_mode="trunc"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_float_floor_division_is_eagers_at_infinities_and_zeros(dtype, device):
    """-0.5 // inf is -1, -inf // 3 is nan, 0.5 // -inf is -1, -0.0 // 3 is -0.0 (fuzz 004 020 039 068 076).
    (Not remainder: eager's own fmod of a huge quotient is nan vectorized and finite in its scalar loop.)"""
    check(floor_division, [specials_grid(dtype)], device)


def clamps(x):
    outs = (-x, torch.neg(x * 2), -torch.full_like(x, 0.0), torch.full_like(x, -0.0), torch.relu(x), F.relu6(x), F.hardtanh(x), F.hardtanh(x, 0.0, 1.0), x.clamp(min=0.0),
            x.clamp(max=-0.0), x.clamp(min=0.0, max=0.0), x.clamp(min=-1.0, max=2.0), x.clamp(min=float("nan")),
            x.clamp(max=float("nan")), x.clamp(min=1.0, max=0.0), F.leaky_relu(x, 0.2))
    return outs + tuple(1 / y for y in outs)


@pytest.mark.parametrize("device", DEVICES)
def test_clamp_and_relu_keep_negative_zero_and_nan(device):
    """relu6(-0.0) is -0.0 (fuzz 017): a clamp to a number replaces only the elements beyond it. -(0.0) is
    -0.0 (Triton 3.6 negates as 0 - x), and so is a constant -0.0 (Triton's tl.full makes +0.0). relu(-0.0)
    is -0.0 on the CPU, +0.0 in eager's CUDA kernel."""
    check(clamps, [(torch.tensor(SPECIALS),), (torch.tensor(SPECIALS, dtype=torch.float64).repeat(5),)], device)


def fractions(x):
    return x.frac(), 1 / x.frac(), x.half().frac(), x.double().frac()


@pytest.mark.parametrize("device", DEVICES)
def test_frac_as_eagers_x_minus_trunc(device):
    """frac(-0.0) is +0.0 (eager: x - trunc(x)); torch's decomposition x - floor(|x|) * sign(x) gave -0.0
    (Triton fuzz 11600443)."""
    check(fractions, [(torch.tensor(SPECIALS + [-2.75, 2.75]),)], device)


def zero_sums(x):
    return 1 / x.sum(-1), 1 / x.sum(0), 1 / x.mean(-1), 1 / x[0, 0].sum(), 1 / x[:1].sum(0), 1 / x.nansum(1)


@pytest.mark.parametrize("device", DEVICES)
def test_sums_of_negative_zeros_are_positive_zero(device):
    """Eager's sum starts from +0.0: a sum of one -0.0, or of -0.0s only, is +0.0 (a Triton row of one
    element was the element itself, a persistent row's tree of -0.0s gave -0.0: Triton fuzz 11701683)."""
    check(zero_sums, [(torch.full((2, 2), -0.0),), (torch.full((3, 4), -0.0),), (torch.full((2, 33), -0.0),)],
          device)


def negated_signs(x):
    # (Not bfloat16: eager rounds every NaN to bfloat16 as +NaN. Not -(x * 2): gcc folds it to x * -2.0,
    # which keeps a NaN's sign; IEEE leaves the sign of a product's NaN unspecified.)
    return (-x).signbit(), (-x.half()).signbit()


@pytest.mark.parametrize("device", DEVICES)
def test_neg_flips_the_sign_of_nan(device):
    """neg flips the sign bit of every value, on the CPU a NaN's too: signbit(-nan) is True (Triton fuzz
    11300937: Triton's neg as x * -1.0 kept the NaN's sign). Eager's CUDA neg makes a float32 or float16 NaN
    +NaN and keeps a float64 NaN as it is; the GPU's kernels do the same."""
    x = torch.tensor(SPECIALS + [-float("nan")])
    check(negated_signs, [(x,), (x.double().repeat(3),)], device, fallbacks=True)     # signbit: ATen


@pytest.mark.parametrize("device", DEVICES)
def test_int_clamp_and_relu(device):
    check(lambda x: (torch.relu(x), x.clamp(min=-3, max=5), x.clamp(min=1.5), F.hardtanh(x.float(), -2.0, 2.0)),
          [(torch.arange(-10, 26).reshape(4, 9),)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_sign_of_nan_and_zero(device):
    """sign(NaN) and sgn(NaN) are 0, sign(-0.0) is +0.0, as eager (fuzz 050)."""
    def fn(x):
        return torch.sign(x), torch.sgn(x), 1 / torch.sign(x), torch.sgn(torch.sqrt(x))
    check(fn, [(torch.tensor(SPECIALS),), (torch.tensor(SPECIALS, dtype=torch.float64),)], device)


# ---- integer pow, scalars cast to the tensor's dtype, 16-bit float conversions (`backend` fixture) -------

def check_traced_calls(fn, make_inputs, calls=3):
    """fn's graph compiled by the graphjit backend for make_inputs(0), against eager on make_inputs(seed) of
    each call (fresh values, same shapes and dtypes); no op may fall back to ATen."""
    compiled = graphjit_backend(torch.fx.symbolic_trace(fn), list(make_inputs(0)))
    assert hasattr(compiled, "graph"), "the graph ran eagerly"
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks
    for seed in range(calls):
        inputs = make_inputs(seed)
        assert_same(compiled(*inputs), fn(*inputs), where=f"call {seed}", atol=None, rtol=None)


def with_edges(t, edges):
    """t with its first elements replaced by `edges` (cast to t's dtype)."""
    t = t.clone()
    t.view(-1)[:len(edges)] = torch.tensor(edges, dtype=torch.float64 if t.is_floating_point() else torch.int64
                                           ).to(t.dtype)
    return t


def int_pows(a, b):
    return a.pow(b), a ** 3, torch.pow(5, b), a[:, :1].pow(b[:1, :]), a.pow(b).sum(1)


def int_pow_inputs(dtype):
    """make_inputs of int_pows: bases over the dtype's range and small ones, exponents from -5 past the
    dtype's width; 0, +-1, the limits; exponent 0, the width, negative."""
    info = torch.iinfo(dtype)
    bits = info.bits - (info.min < 0)
    signed = info.min < 0

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        a = full_range((9, 13), dtype, seed)
        a[4:] = torch.randint(max(info.min, -20), 21, (5, 13), generator=g).to(dtype)   # results that fit
        a = with_edges(a, [0, 1, -1, 2, -2, 3, -3, info.min, info.max, 0, 7] if signed else [0, 1, 2, 255])
        b = torch.randint(max(info.min, -5), bits + 8, (9, 13), generator=g).to(dtype)
        return a, with_edges(b, [0, 0, 0, bits, bits, bits - 1, bits + 1, 2, 3, -1, -3] if signed else
                             [0, 0, bits, bits + 1])
    return inputs


def unsigned_with_negative_scalars(x, i8):
    return (-3 == x, x + (-3), x * -1, x - 300, torch.where(x > 5, x, -1), torch.full_like(x, -3) + x,
            i8 + 300, torch.where(i8 > 0, i8, -100) - 200)


def unsigned_inputs(seed):
    return with_edges(full_range((7, 5), torch.uint8, seed), [253, 0, 255, 3, 6, 44]), \
        full_range((7, 5), torch.int8, seed + 1)


def bool_signs(x, y):
    # the sign of a reduction's bool result too (Triton fuzz 11300032: it had no dtype noted, so gj_sign's
    # subtract ran on bools)
    return x.sign(), x.sgn(), (y <= 0.5).sgn(), torch.sign(x).float() * y, x.all(0, keepdim=True).sign(), \
        x.any(1).sgn()


def bool_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(6, 11, generator=g) < 0.5, torch.rand(6, 11, generator=g)


def to_16_bits(d, i):
    bf16, f16 = torch.bfloat16, torch.float16
    return (d.to(bf16), d.to(bf16).to(d.dtype), d.to(f16), d.to(f16).to(d.dtype), d.float().to(bf16), i.to(bf16),
            i.to(f16).to(torch.float64), (d * 3).to(bf16) + 1)


def wide_inputs(seed):
    """float64 and int64 values: random magnitudes; ties after a first rounding to float32, subnormals,
    beyond float16's and bfloat16's range, inf, NaN."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(5, 8, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-8, 8, (5, 8), generator=g)
    d = with_edges(d, [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -8 + 2 ** -30), 0.1748046875,
                       -0.0, 1e-40, 9.2e-41, 6e-8, 3.3e38, -3.4e38, 65504.9, 70000.0, float("inf"),
                       float("nan"), 1e-300])
    i = with_edges(full_range((5, 8), torch.int64, seed), [2 ** 40 + 2 ** 32 + 1, -(2 ** 40 + 2 ** 32 + 1),
                                                           2 ** 24 + 2 ** 16 + 1, 2 ** 63 - 1, -2 ** 63, 65521, 2049])
    return d, i


def bf16_reads(x):
    return x.bool(), x != 0, x.float(), x.double(), x * 2.0 ** 100, torch.where(x.bool(), 1, 0)


def bf16_subnormal_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-0x7f, 0x80, (4, 64), generator=g, dtype=torch.int16)    # subnormals and +-0
    bits[0, :8] = torch.tensor([1, -0x7fff, 0x7f, -0x7f81, 0x40, 0x80, 0, -0x8000], dtype=torch.int16)
    bits[-1] = torch.randint(-0x8000, 0x8000, (64,), generator=g, dtype=torch.int16)  # and anything
    return (bits.view(torch.bfloat16),)


INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_integer_pow_is_exact(dtype, backend):
    """Integer pow is exact and wraps as eager's powi (by squaring in the dtype), not a float pow rounded
    back (fuzz triton 800700: int64 x ** x); a negative exponent gives 1 / a ** n truncated (1, -1 or 0)."""
    check_traced_calls(int_pows, int_pow_inputs(dtype))


def test_negative_scalar_with_unsigned_tensor_wraps(backend):
    """A Python int is cast to the tensor's dtype as eager does (-3 with a uint8 tensor is 253; 300 with an
    int8 one is 44), not written into the kernel as it is (fuzz triton 800463: Triton's interpreter raised
    OverflowError; a GPU compile rejects it)."""
    check_traced_calls(unsigned_with_negative_scalars, unsigned_inputs)


def test_sign_of_bool(backend):
    """sign/sgn of a bool tensor is the tensor (fuzz triton 800438: the interpreter has no bool subtract)."""
    check_traced_calls(bool_signs, bool_inputs)


def test_float64_and_integers_to_16_bits_as_eager(backend):
    """float64 and int64 -> bfloat16/float16 go through float32, as eager's conversions do (rounded twice:
    1 + 2**-8 + 2**-30 is 1.0 in bfloat16), and nothing reads a float64 as raw bits (fuzz triton 800097:
    float64 -> bfloat16 gave 0 in the interpreter)."""
    check_traced_calls(to_16_bits, wide_inputs)


def test_bfloat16_subnormals(backend):
    """bfloat16 subnormals are nonzero and widen exactly, as on a GPU (Triton's interpreter turned the
    smallest into 0: bool(x) was False)."""
    check_traced_calls(bf16_reads, bf16_subnormal_inputs)


GPU_CASES = [*[(int_pows, int_pow_inputs(dtype)) for dtype in INT_DTYPES], (unsigned_with_negative_scalars,
             unsigned_inputs), (bool_signs, bool_inputs), (to_16_bits, wide_inputs), (bf16_reads, bf16_subnormal_inputs)]


@pytest.mark.parametrize("fn,make_inputs", GPU_CASES, ids=[f"{fn.__name__}{i}" for i, (fn, _) in enumerate(GPU_CASES)])
def test_kernels_compile_for_a_gpu(fn, make_inputs, tmp_path, monkeypatch):
    """The Triton kernels of the tests above compile for an sm_90 target: the interpreter doesn't check
    what a GPU compile does (a negative constant in a uint8 kernel is an error there; gj_ipow's loop
    must keep its types)."""
    pytest.importorskip("triton")
    from graphjit.compiler import decompose, lowering, scheduler
    from graphjit.compiler.runtime import triton_build
    from .sm90 import sm90_module
    inputs = list(make_inputs(0))
    graph = lowering.lower(decompose.decompose(torch.fx.symbolic_trace(fn), inputs), inputs)
    source, launches = triton_codegen.generate(graph, scheduler.schedule(graph), device=torch.device("cuda"),
                                               candidates=False)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())   # no CUDA here
    monkeypatch.setattr(triton_build, "_load", lambda device, kernel: None)
    buffers = {b.name: b for b in graph.buffers()}
    distinct = list({launch.name: launch for kl in launches.values() for launch in kl.launches}.values())
    with sm90_module(tmp_path, monkeypatch, source, "gj_numeric_semantics_kernels") as (module, _):
        compiled = triton_build.compile_all(module, distinct, torch.device("cuda", 0),
                                            {launch.name: [buffers[a].dtype for a in launch.args] for launch in distinct},
                                            threads=1)
    assert set(compiled) == {launch.name for launch in distinct}


# ---- generated C++ that must compile ----------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_negated_negative_constants(device):
    """-(a negative constant) printed as `--0x1p+0f` did not compile (fuzz 070)."""
    def fn(x):
        minus_one = torch.full((2, x.shape[1]), -1.0)
        ints = torch.full((2, x.shape[1]), -3, dtype=torch.int64)
        return (-minus_one, -torch.full_like(x, float("-inf")), x - (-2.5), -ints, -(ints * 2) + 1,
                -torch.full_like(x, -1e-40, dtype=torch.float64), torch.logical_not(minus_one),
                ~ints, torch.relu(-minus_one) * x)
    check(fn, [(torch.randn(1, 3),)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_cat_of_empty_pieces(device):
    """cat of 1-d empty pieces only (eager skips each): one of them, not an empty kernel body (fuzz 008 029)."""
    def fn(x):
        flat = x.reshape(-1)
        empty = x[1:1, 0]
        return (torch.cat((empty, empty.flip(-1)), dim=-1), torch.cat([flat[7::2], flat[:0]], 0),
                torch.cat([flat[:0], x[0], flat[:0]]), torch.cat([x, flat[:0]], 0) * 2)
    check(fn, [(torch.randn(2, 3),)], device, fallbacks=True)     # flip: an ATen call where not lowered


# ---- fallback ops: the layout ATen gives their results ---------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_fallback_result_laid_out_otherwise_than_traced(device):
    """copysign's meta function says contiguous where its kernel follows a transposed operand; the compiled
    code reads the result with the traced strides (fuzz 012 025 042)."""
    def fn(a, b, i, c):
        return (torch.copysign(a, b).reshape(-1), torch.copysign(b, a).floor(), torch.copysign(i, c),
                torch.clamp(torch.copysign(i, c), min=i), torch.xlogy(a, b.abs()) + 1)
    g = torch.Generator().manual_seed(6)
    cases = [(torch.randn(1, 4, 7, generator=g).transpose(-1, -2), torch.randn(7, 4, generator=g),
              torch.randint(0, 64, (4, 12, 17), generator=g).permute(1, 2, 0), torch.randn(1, 4, generator=g))]
    check(fn, cases, device, fallbacks=True)


# ---- through the frontend: writes, and the inputs eager leaves -------------------------------------------

def expand_bool_iadd(x):
    mask = 1 < x
    view = mask.expand(-1, -1, 1)
    view += mask
    return mask, view


def expand_float_iadd(x, y):
    x.expand(-1, -1, 1).add_(y)           # x = inf: inf + 1 is inf (functionalized through expand: nan)
    x.expand(1, *x.shape).mul_(2)
    return x + 1


def addcmul_int(x, a, b):
    x.addcmul_(a, b, value=0.5)
    x.addcmul_(a, b, value=-1.7)
    return torch.addcmul(x, a, b, value=2.9), torch.addcmul(x.to(torch.int8), a.to(torch.int8), b.to(torch.int8),
                                                              value=-1.5)


def addcmul_mixed(x, a, b):
    return torch.addcmul(x, a.float(), b, value=0.5)      # computes in float: value stays 0.5


WRITES = [
    (expand_bool_iadd, lambda: (torch.randint(0, 3, (65, 16, 1)),)),
    (expand_float_iadd, lambda: (torch.tensor([[[float("inf")], [1e-8], [-2.0]]]), torch.ones(1, 3, 1))),
    (addcmul_int, lambda: (torch.randint(-8, 9, (17, 6, 33)), torch.randint(-8, 9, (6, 33)),
                           torch.randint(-8, 9, (17, 1, 33)))),
    (addcmul_mixed, lambda: (torch.randint(-8, 9, (6, 5)), torch.randint(-8, 9, (6, 5)), torch.randn(6, 5))),
]


@pytest.mark.parametrize("fn,inputs", WRITES, ids=[fn.__name__ for fn, _ in WRITES])
def test_writes_match_eager(fn, inputs, backend):
    """In-place add of bools through an expand raised (functionalization subtracts through it; fuzz 010);
    addcmul_ of an int64 tensor with value=0.5 raised in torch's reference (fuzz 001). Neither may fall
    back: a backend failure warns and runs eagerly. (Identities left out: an expand to the same shape
    comes back as its input, test_aliasing.py::test_a_view_that_changes_nothing_is_a_new_tensor.)"""
    check_calls(fn, inputs, backend, identities=False)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_signed_overflow_wraps_as_eager(dtype):
    """int32/int64 arithmetic wraps in eager; the C++ is built with -fwrapv so gcc may not assume it can't
    (without it `x + 1 > x` folds to True at INT_MAX)."""
    info = torch.iinfo(dtype)
    x = torch.tensor([info.max, 0, info.max - 1, info.min] * 4, dtype=dtype)
    for fn in (lambda x: (x + 1) > x, lambda x: (x * 2) // 2 == x):
        graphjit.reset()
        assert torch.equal(graphjit.compile(fn)(x), fn(x))


# ---- through the frontend, compared bit for bit over several calls (the `backend` fixture) -----------------

def index_adds(x, src):
    index = torch.arange(x.shape[0]).flip(0)
    return (x.index_add(0, index, src, alpha=2), x.index_add(0, index, src, alpha=0),
            x.to(torch.uint8).index_add(0, index, src.to(torch.uint8), alpha=-3),
            x.int().index_add(0, index, src.int() * 5, alpha=2.7), x.index_add_(0, index, src, alpha=-1.5))


def test_index_add_converts_alpha_as_eager(backend):
    """index_add's alpha is converted to self's dtype (bool(2) is True, 2.7 is 2 for int32, -3 wraps for
    uint8): torch's decomposition multiplied a bool source by an int alpha into int64 and index_put refused
    it (fuzz 600361), and refused a float alpha for an int tensor."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.rand(6, 3, generator=g) < 0.5, torch.rand(6, 3, generator=g) < 0.5]
    check_calls(index_adds, inputs, backend)


@pytest.mark.parametrize("dtype,stats_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                               (torch.bfloat16, torch.float32)], ids=str)
def test_16_bit_training_batch_norm_running_stats(dtype, stats_dtype, backend):
    """Running statistics of a 16-bit batch norm in training mode as eager's: the CPU kernel of
    _native_batch_norm_legit_functional returns them in their own dtype where its meta function says
    float32; they were read as float32 (fuzz 600106)."""
    def fn(x, mean, var, weight, bias):
        return F.batch_norm(x.cumsum(0), mean, var, weight, bias, training=True, momentum=0.5, eps=1e-5)

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        stats = [torch.randn(3, generator=g).to(stats_dtype) for _ in range(4)]
        stats[1] = stats[1].abs()
        return [torch.randn(11, 3, 2, 3, generator=g).to(dtype)] + stats
    check_calls(fn, inputs, backend)


def int_round_trips(x):
    return (x.to(torch.int64).to(x.dtype), x.to(torch.int32).double(), x.to(torch.int16).to(torch.bfloat16),
            x.to(torch.int8).half(), x.double().to(torch.int64).float() * 2, x.to(torch.uint8).float(),
            torch.where(x < 1, x.to(torch.int64), 3).to(x.dtype), (x * 100).to(torch.uint8).float(),
            (x * 100).to(torch.int8).float(), (x * 2e4).to(torch.int16).float(), (x * 2e9).to(torch.int32).float(),
            (x * 2e9).to(torch.int32), (x * 1e19).to(torch.int64).float(), (x.double() * 2e9 + 7).to(torch.int8),
            (x.double() * 3e9 + 7).to(torch.uint8))


def test_float_int_float_round_trip_has_no_negative_zero(backend):
    """float -> int -> float of -0.0 or -0.5 is +0.0: an integer has no -0.0 (gcc folded the round trip into
    trunc, fuzz 600375); a float beyond a narrow type's range wraps into it through int32, as in eager (-1.5
    is uint8 255; gcc's fold kept -1), into uint8 through int64 (a double 3e9 + 7 is 7, not 0); NaN, infinities and floats beyond int32/int64 convert to the lowest
    int32/int64, as x86's conversion in eager (gcc's fold kept 3e9 and NaN)."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(37, generator=g) * 4 - 2
        x[::5] = -0.0
        x[1::5] = -0.5
        x[2::8] = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e30, -3e38])
        return [x]
    check_calls(int_round_trips, inputs, backend)


def sixteen_bit_results_read_in_the_kernel(x, y):
    hypot = torch.hypot(x, y)
    big = x * 50
    return (hypot.to(torch.int64), hypot.nan_to_num(0.0).to(torch.int64), (x * y).double(),
            ((x / 3) * 3) == x, (x + y).to(torch.float16), (x + y).to(torch.bfloat16), big.to(torch.int64),
            torch.where(x > 0, x * y, y) - x * y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_results_are_rounded_before_fused_readers(dtype, backend):
    """Every op's 16-bit float result is rounded to its dtype before another op in the same kernel reads it,
    as eager holds it: a bf16 hypot converted to int64 from its float32 value (fuzz 600449), a bf16 product
    converted to float64, an fp16 product beyond 65504 read as finite."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return [(torch.randn(5, 37, generator=g) * 300).to(dtype), (torch.randn(37, generator=g) * 300).to(dtype)]
    check_calls(sixteen_bit_results_read_in_the_kernel, inputs, backend)


def spreads(x):
    return (x.var(1), x.std(1), x.std(0, correction=0), x.var(), x.std(), torch.std_mean(x, 1), x.std(1, keepdim=True),
            x.to(torch.bfloat16).std(1), x.var(1, correction=0) / 1e30)


@pytest.mark.parametrize("scale", [1e19, 1e20], ids=str)
def test_var_and_std_of_large_values(scale, backend):
    """var and std of float32 values beyond 1e19 are finite where eager's are: the squared deviations
    overflowed float32 (eager's CPU kernels accumulate in float64), and std(x) decomposed to sqrt(var(x))
    overflowed in the float32 variance between."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(5, 37, generator=g) * scale]
    check_calls(spreads, inputs, backend)


def bool_exponents(x, b):
    return b ** True, b ** False, x ** True, x ** False, x.int() ** True, (b ** True) + b


def test_pow_of_a_bool_exponent_keeps_eager_dtype(backend):
    """x ** True is x and x ** False is ones, in x's dtype: torch's meta function says int64 for a bool x
    (fuzz 1600373), where eager's kernel keeps bool."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 5, generator=g)
        x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0])
        return x, torch.rand(4, 5, generator=g) < 0.5
    check_calls(bool_exponents, inputs, backend)


# ---- signs of zeros, where the checks above leave them out ------------------------------------------------

@pytest.mark.xfail(strict=True, reason="a zero of the other sign than eager's: clamp(x, lo, hi) with NaN and "
                   "signed-zero tensor bounds (output 0), softshrink of a bfloat16 tensor (output 12). Eager's "
                   "own sign there depends on its loop: clamp's vectorized loop returns the bound on a tie of "
                   "zeros, its scalar tail loop x (clamp(0.0, min=-0.0) is -0.0 over 64 elements, 0.0 over "
                   "7); the compiled kernels give the vectorized loop's")
@pytest.mark.parametrize("case", ["clamp_to_tensor_bounds", "scalar_operands"])
def test_signs_of_zeros_as_eager(case, backend):
    """test_numeric_semantics_2.py's clamp and scalar-operand functions compared bit for bit, signs of
    zeros included (there they are compared as values, -0.0 equal to 0.0)."""
    from . import test_numeric_semantics_2 as more
    if case == "clamp_to_tensor_bounds":
        check_calls(more.clamp_to_tensor_bounds, lambda seed: [
            more.odd_values((4, 7), torch.float32, seed), more.odd_values((7,), torch.float32, seed + 10),
            more.odd_values((4, 1), torch.float32, seed + 20)], backend)
    else:
        check_calls(more.scalar_operands, lambda seed: [more.odd_values((4, 9), torch.bfloat16, seed),
                                                        more.odd_values((4, 9), torch.bfloat16, seed + 5)], backend)


def fill_ints_with_non_finite(x):
    y = torch.div(x, x, rounding_mode="floor")
    z = x * 2
    y.copy_(float("nan"))
    z.copy_(float("-inf"))
    return y, z + 1


@pytest.mark.parametrize("device", DEVICES)
def test_int_tensors_filled_with_nan_or_infinity_as_eager(device):
    """copy_ of a NaN or infinite scalar into an int64 tensor converts it as eager's cast kernel does (the
    lowest int64 on x86; fill_ and full refuse such values); the codegens' literal raised on int(nan), so
    the graph fell back to eager with a warning (H200 fuzz 920500161). On CUDA the copied constant was
    allocated on the CPU (a pointwise op over scalars only took the CPU as its device) and the kernel
    launch failed."""
    check(fill_ints_with_non_finite, [(torch.arange(1, 7),), (torch.tensor([3]),)], device)


def fill_ints_with_large_floats(x, small):
    return (x.clone().copy_(1e20), x.clone().copy_(-1e20), small.clone().copy_(300.7),
            small.clone().copy_(-2.5), x.clone().copy_(3e9).to(torch.int32) + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_int_tensors_filled_with_floats_beyond_their_range_as_eager(device):
    """copy_ of a float beyond the integer type's range converts as eager's cast does (x86: the lowest
    value); the C++ literal kept every digit of int(1e20) and wrapped it (fuzz 10000042)."""
    check(fill_ints_with_large_floats, [(torch.arange(1, 7), torch.arange(4, dtype=torch.int8)),
                                        (torch.tensor([3]), torch.tensor([1], dtype=torch.uint8))], device)


def special_exponents(x):
    return x.pow(0.5), x.pow(-0.5), x ** 2, x.pow(3), x.pow(-1), x.pow(-2), x.pow(1.5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_special_exponents_at_special_values(dtype, device):
    """pow with the exponents eager's kernel computes otherwise (0.5 sqrt, -0.5 1/sqrt ...) gives eager's
    NaNs, infinities and signed zeros at -inf, -0.0, negative values (fuzz grad 12700259: bfloat16
    x.pow(-0.5) at -inf, NaN in eager, 0 compiled)."""
    if device == "interpret" and dtype == torch.float16:
        pytest.skip("Triton's interpreter computes libdevice.pow with numpy, whose power takes sqrt for "
                    "an exponent of 0.5 (libdevice's pow on a GPU does not)")
    check(special_exponents, [(torch.tensor(SPECIALS, dtype=torch.float64).to(dtype),)], device)
