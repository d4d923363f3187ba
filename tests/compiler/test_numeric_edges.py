"""Numeric edges of the compiled kernels against eager: a signed integer divided by -1 (INT_MIN // -1 traps
in C++), in-place ops whose result type self can't hold (eager raises), var and std of integers (eager
raises), reductions into an `out=` of another dtype (eager computes in out's dtype), and an nll_loss target
out of range (eager's IndexError).
"""
import math

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.testing import assert_same


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:     # noqa: BLE001 -- the class is compared
        return type(e)


def _same_outcome(fn, make_args, calls=2):
    compiled = graphjit.compile(fn)
    for _ in range(calls):
        expected, actual = _outcome(fn, *make_args()), _outcome(compiled, *make_args())
        if isinstance(expected, type):
            assert actual is expected, f"eager raised {expected.__name__}, compiled gave {actual}"
        else:
            assert not isinstance(actual, type), f"eager gave a value, compiled raised {actual.__name__}"
            assert_same(actual, expected, rtol=1.3e-6, atol=1e-6)      # a fused log_softmax: ulps apart


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.int8])
@pytest.mark.parametrize("fn", [
    lambda x, y: (x // y, x % y),
    lambda x, y: torch.remainder(x, y[:1].reshape(())) + torch.floor_divide(x, y[0]),
    lambda x, y: (x // x.sign()).sum(),
], ids=["elementwise", "0-d divisor", "in a reduction"])
def test_the_smallest_integer_divided_by_minus_one(fn, dtype):
    info = torch.iinfo(dtype)
    _same_outcome(fn, lambda: (torch.tensor([info.min, 7, -5, info.max], dtype=dtype),
                               torch.tensor([-1, -1, 2, -1], dtype=dtype)))


def _times_in_place(x, y):
    x.mul_(y)
    return x + 1


def _times_by_operator(x, y):
    x *= y
    return x + 1


@pytest.mark.parametrize("fn", [_times_in_place, _times_by_operator])
@pytest.mark.parametrize("make", [
    lambda: (torch.tensor([1, 2, 3]), 2.7),
    lambda: (torch.tensor([1, 2, 3], dtype=torch.int8), torch.ones(3)),
    lambda: (torch.tensor([True, False]), 2),
    lambda: (torch.ones(3), 1j),
    lambda: (torch.tensor([1, 2, 3]), 3),
], ids=["int64 by 2.7", "int8 by float", "bool by 2", "float by 1j", "int64 by 3"])
def test_in_place_results_self_cannot_hold_raise(fn, make):
    _same_outcome(fn, make)


@pytest.mark.parametrize("fn", [lambda x: x.var() + 1, lambda x: x.std(1) * 2])
def test_var_and_std_of_integers_raise(fn):
    _same_outcome(fn, lambda: (torch.tensor([[1, 2, 3], [4, 5, 9]]),))


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.int64, torch.float32])
def test_a_sum_into_an_out_of_another_dtype(out_dtype):
    def f(x, o):
        torch.sum(x, 0, out=o)
        return o * 2
    _same_outcome(f, lambda: (torch.tensor([[1.0, 2.7], [1e8, -2.7], [-1e8, 2.7]]),
                              torch.empty(2, dtype=out_dtype)))


@pytest.mark.parametrize("target", [[0, 4, 1], [0, -1, 1], [0, 3, -100], [2, 3, 1]])
@pytest.mark.parametrize("fn", [
    lambda x, t: F.cross_entropy(x, t) * 2,
    lambda x, t: F.nll_loss(x.log_softmax(-1), t, reduction="none")[1:] + 1,
], ids=["cross_entropy", "nll_loss_none"])
def test_nll_loss_targets_out_of_range(fn, target):
    _same_outcome(fn, lambda: (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), torch.tensor(target)))


@pytest.mark.parametrize("fn, make", [
    (lambda x: x.fill_(300) + 1, lambda: (torch.zeros(3, dtype=torch.int8),)),
    (lambda x: torch.full((3,), 300, dtype=torch.int8) + x, lambda: (torch.zeros(3, dtype=torch.int8),)),
    (lambda x: x.masked_fill(x > 0, 300), lambda: (torch.ones(3, dtype=torch.int8),)),
    (lambda x: x.clamp(max=90000) + 1, lambda: (torch.full((3,), 30000, dtype=torch.int16),)),
    (lambda x: torch.full_like(x, 90000) + x, lambda: (torch.zeros(3, dtype=torch.int16),)),
    (lambda x: x.masked_fill(x > 0, 1e5), lambda: (torch.ones(3, dtype=torch.float16),)),
    (lambda x: x.masked_fill(x > 0, -1) + 1, lambda: (torch.ones(3, dtype=torch.uint8),)),
    (lambda x: x.clamp(min=-5, max=100) * 2, lambda: (torch.arange(-8, 8, dtype=torch.int8),)),
], ids=["fill_", "full", "masked_fill", "clamp", "full_like", "float16 masked_fill", "uint8 -1", "in range"])
def test_scalars_the_dtype_cannot_hold_raise(fn, make):
    _same_outcome(fn, make)


@pytest.mark.parametrize("fn", [
    lambda x, y: (x // y)[0] + 1,
    lambda x, y: (x % y)[2:] * 2,
    lambda x, y: (x // y, x + 1)[1],
    lambda x, y: torch.fmod(x, y)[:1] - 1,
], ids=["floor_divide read in part", "remainder read in part", "unread", "fmod read in part"])
@pytest.mark.parametrize("divisor", [[2, 0, 1, 3], [2, 5, 1, 3]], ids=["a zero", "no zero"])
def test_integer_divisions_read_in_part_check_every_divisor(fn, divisor):
    _same_outcome(fn, lambda: (torch.tensor([5, 7, -3, 4]), torch.tensor(divisor)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.bool, torch.uint8, torch.float32])
@pytest.mark.parametrize("mode,dims", [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 2)])
def test_nearest_upsampling_takes_eagers_dtypes_only(mode, dims, dtype):
    """Eager's nearest kernels take floating point and uint8 only (NotImplementedError for others); torch's
    decompositions gather any dtype."""
    def fn(x):
        return F.interpolate(x, scale_factor=2, mode=mode)
    shape = (1, 2) + (3,) * dims
    _same_outcome(fn, lambda: (torch.arange(math.prod(shape)).reshape(shape).remainder(2).to(dtype),))


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(dtype=torch.float16),
    lambda x: torch.nansum(x, dtype=torch.bfloat16),
    lambda x: x.cumsum(0, dtype=torch.float16),
    lambda x: x.to(torch.int16).sum(dtype=torch.float16),
    lambda x: x.sum(0, dtype=torch.float16, keepdim=True),
], ids=["sum", "nansum", "cumsum", "int16 sum", "sum over a dim"])
def test_sums_into_a_narrower_dtype_round_each_element_first(fn):
    """Eager converts each element to dtype= before adding: 2049 is 2048 in float16."""
    _same_outcome(fn, lambda: (torch.tensor([2049.0, -2048.0, 3.0, 4097.0, -4096.0]),))


def _scores(dtype=torch.float32):
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=dtype)


@pytest.mark.parametrize("fn, make", [
    (lambda x, t: F.nll_loss(x, t), lambda: (_scores().log_softmax(-1), torch.tensor([0, 2, 1, 1], dtype=torch.int32))),
    (lambda x, t: F.cross_entropy(x, t), lambda: (_scores(), torch.tensor([0, 2, 1, 7], dtype=torch.int32))),
    (lambda x, t: F.cross_entropy(x, t, weight=torch.ones(3)), lambda: (_scores(torch.float64), torch.tensor([0, 2, 1, 1]))),
    (lambda x, t: F.cross_entropy(x, t), lambda: (_scores(), torch.tensor([0, 2, 1, 1], dtype=torch.uint8))),
], ids=["int32 target", "int32 target out of range", "weight of another dtype", "uint8 target"])
def test_nll_loss_takes_eagers_target_and_weight_dtypes_only(fn, make):
    _same_outcome(fn, make)


@pytest.mark.parametrize("fn, dtype", [
    (lambda x: x.var(0), torch.int64),
    (lambda x: x.std(-1), torch.int64),
    (lambda x: x.logcumsumexp(-1), torch.int64),
    (lambda x: x.argmax(0), torch.bool),
    (lambda x: x.sum(0), torch.int64),
    (lambda x: x.float().var(0), torch.int64),
], ids=["var int64", "std int64", "logcumsumexp int64", "argmax bool", "sum int64", "var float"])
def test_ops_without_elements_raise_as_eager_does(fn, dtype):
    """A node with no elements is a constant, unless eager's kernel raises for its inputs' dtypes."""
    _same_outcome(fn, lambda: (torch.zeros(3, 0, dtype=dtype),))


@pytest.mark.parametrize("fn, dtype, value", [
    (lambda x, v: F.pad(x, (1, 1), value=v), torch.uint8, -1),
    (lambda x, v: F.pad(x, (1, 1), value=v), torch.uint8, 300),
    (lambda x, v: F.pad(x, (1, 1), value=v), torch.float16, 1e5),
    (lambda x, v: F.pad(x, (1, 1), value=v), torch.int32, float("inf")),
    (lambda x, v: F.pad(x, (1, 1), value=v), torch.uint8, 7),
    (lambda x, v: torch.constant_pad_nd(x, (1, 1), v), torch.uint8, -1),
    (lambda x, v: x.new_full((3,), v), torch.uint8, 300),
    (lambda x, v: x.new_full((3,), v), torch.uint8, -1),
    (lambda x, v: x.masked_fill(x > 0, v), torch.uint8, -1.5),
    (lambda x, v: x.masked_fill(x > 0, v), torch.uint8, -1),
    (lambda x, v: x.fill_(v), torch.uint8, 255.5),
], ids=["pad uint8 -1", "pad uint8 300", "pad f16 1e5", "pad int32 inf", "pad uint8 7", "constant_pad_nd",
        "new_full 300", "new_full -1", "masked_fill -1.5", "masked_fill -1", "fill_ 255.5"])
def test_scalars_checked_as_eager_checks_them(fn, dtype, value):
    """pad's value may not wrap (-1 into uint8 raises, unlike fill_'s); a float into an unsigned type must
    lie in 0..max."""
    _same_outcome(fn, lambda: (torch.tensor([0, 1, 2], dtype=dtype), value))


def test_float_constants_beyond_float32_are_infinities_in_cpp():
    from graphjit.compiler.codegen.cpp import literal
    assert literal(1e39, torch.float32) == "__builtin_inff()"
    assert literal(-1e39, torch.float32) == "(-__builtin_inff())"
    assert literal(1e39, torch.float64) == (1e39).hex()


def _seeded(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize("fn, make", [
    (lambda x, w: F.layer_norm(x, (4,), w), lambda: (_seeded(2, 4, dtype=torch.float64), torch.ones(4))),
    (lambda x, w: F.batch_norm(x, w, w, training=False),
     lambda: (_seeded(2, 4, dtype=torch.float64), torch.ones(4))),
    (lambda x, w: F.batch_norm(x, w, w, training=False),
     lambda: (_seeded(2, 4), torch.ones(4, dtype=torch.bfloat16))),
    (lambda x, w: F.layer_norm(x, (4,), w), lambda: (_seeded(2, 4, dtype=torch.bfloat16), torch.ones(4))),
], ids=["layer_norm f64 f32", "batch_norm f64 f32", "batch_norm f32 bf16", "layer_norm bf16 f32"])
def test_norms_with_parameters_of_another_dtype_as_eager(fn, make):
    _same_outcome(fn, make)


@pytest.mark.parametrize("fn, make", [
    (lambda x: torch.bernoulli(x, 1.5), lambda: (torch.zeros(4),)),
    (lambda x: torch.bernoulli(x, float("nan")), lambda: (torch.zeros(4),)),
    (lambda x: x.bernoulli_(-0.5), lambda: (torch.zeros(4),)),
    (lambda p: torch.bernoulli(p), lambda: (torch.tensor([0.5, 1.5]),)),
    (lambda p: torch.bernoulli(p), lambda: (torch.tensor([0.0, float("nan")]),)),
    (lambda p: torch.bernoulli(p), lambda: (torch.tensor([0.0, 1.0, 1.0, 0.0]),)),
], ids=["p 1.5", "p nan", "bernoulli_ -0.5", "tensor p 1.5", "tensor p nan", "tensor p of 0 and 1"])
def test_bernoulli_probabilities_outside_0_1_raise(fn, make):
    _same_outcome(fn, make)
