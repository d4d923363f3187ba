"""Lowerings real models reach that used to fall back to ATen: BatchNorm in eval (ResNet), any/all (the
"safe softmax" of attention's math path), full_like and its kin, gather. Each op against eager through the
C++ codegen and through Triton's interpreter, and each graph must compile without a fallback.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from graphjit.compiler import decompose, lowering

from .harness import describe, extern_count, kernel_count, make, run_cases, trace_cases, triton_devices
from .test_ops import Op

aten = torch.ops.aten
F32, BF16, F16, I64 = torch.float32, torch.bfloat16, torch.float16, torch.int64
FLOATS = (F32, BF16, F16)


def channels_last(t):
    return t.contiguous(memory_format=torch.channels_last)


# ---- inputs ----

def bn_inputs(with_affine=True, stats_f32=False):
    """(x, weight, bias, running_mean, running_var), or (x, running_mean, running_var) without affine:
    NCHW, channels_last, sliced, 2-d and 3-d x."""
    def inputs(dtype):
        g = torch.Generator().manual_seed(3)
        stat = F32 if stats_f32 else dtype

        def case(x):
            c = x.shape[1]
            params = (make((c,), stat, gen=g), make((c,), stat, gen=g)) if with_affine else ()
            return (x, *params, make((c,), stat, gen=g), make((c,), stat, 0.5, 2.0, gen=g))
        return [
            case(make((2, 3, 5, 5), dtype, gen=g)),
            case(channels_last(make((2, 4, 7, 9), dtype, gen=g))),
            case(make((2, 3, 10, 5), dtype, gen=g)[:, :, ::2]),            # sliced: strides (150, 50, 10, 1)
            case(make((6, 3), dtype, gen=g)),                              # BatchNorm1d on (N, C)
            case(make((7, 5, 2), dtype, gen=g).permute(2, 1, 0)[:, 1:]),   # (N, C, L), permuted, sliced
            case(make((1, 33, 1, 1), dtype, gen=g)),
        ]
    return inputs


def mostly_zero(*shapes, seed=4):
    """Values of which ~5/6 are zero, so that whole rows of a few elements are all-zero and others are not;
    plus a transposed and a sliced input."""
    def inputs(dtype):
        g = torch.Generator().manual_seed(seed)

        def m(*shape):
            if dtype == torch.bool:
                return torch.rand(shape, generator=g) > 0.85
            if not dtype.is_floating_point:
                return (torch.rand(shape, generator=g) > 0.85).to(dtype) * torch.randint(-3, 4, shape, generator=g)
            return make(shape, dtype, -0.6, 0.6, g).round()
        out = [(m(*s),) for s in shapes]
        out.append((m(9, 5).t(),))
        out.append((m(7, 12)[1::2, 3:],))
        return out
    return inputs


def like_inputs(dtype):
    g = torch.Generator().manual_seed(5)
    return [(make((7, 33), dtype, gen=g),), (make((1,), dtype, gen=g),), (make((), dtype, gen=g),),
            (make((33, 7), dtype, gen=g).t(),), (channels_last(make((2, 3, 4, 5), dtype, gen=g)),)]


def index_select_inputs(dtype):
    """(x, i): positions i < x.shape[1] (i[0] a row, i[1, 0] a 0-d index), x plain and transposed."""
    g = torch.Generator().manual_seed(7)
    return [(make((5, 6), dtype, gen=g), torch.randint(0, 6, (2, 3), generator=g)),
            (make((9, 4), dtype, gen=g).t(), torch.randint(0, 9, (2, 3), generator=g))]


def roll_inputs(dtype):
    g = torch.Generator().manual_seed(8)
    return [(make((7, 5), dtype, gen=g),), (make((5, 9), dtype, gen=g).t(),), (make((2, 1), dtype, gen=g),)]


def gather_inputs(dim, x_shape, index_shapes, transposed=False):
    """(x, index) pairs: index as large as x, smaller in other dims, and transposed."""
    def inputs(dtype):
        g = torch.Generator().manual_seed(6)
        x = make(x_shape, dtype, gen=g)
        size = x_shape[dim]
        out = [(x, torch.randint(0, size, s, generator=g)) for s in index_shapes]
        if transposed:
            xt = make(tuple(reversed(x_shape)), dtype, gen=g).t()
            idx = torch.randint(0, size, tuple(reversed(index_shapes[0])), generator=g).t()
            out.append((xt, idx))
        return out
    return inputs


def _bn_legit(x, w, b, m, v):
    return aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-5)


def _bn_no_affine(x, m, v):
    return aten._native_batch_norm_legit_no_training(x, None, None, m, v, 0.1, 1e-5)


def _bn_functional(x, w, b, m, v):
    return F.relu(F.batch_norm(x, m, v, w, b, training=False, eps=1e-3))


def _safe_softmax(x):
    # rows of a 7-wide row are all -inf often enough (x < 2.2 masks ~87% of the entries)
    return aten._safe_softmax(x.masked_fill(x < 2.2, -math.inf), -1)


OPS = [
    Op("batch_norm_legit_no_training", _bn_legit, bn_inputs(), FLOATS),
    Op("batch_norm_f32_stats", _bn_legit, bn_inputs(stats_f32=True), (BF16, F16)),
    Op("batch_norm_no_affine", _bn_no_affine, bn_inputs(with_affine=False), FLOATS),
    Op("batch_norm_functional_relu", _bn_functional, bn_inputs(), FLOATS),
    Op("any_dim", lambda x: x.any(-1), mostly_zero((7, 5), (3, 1, 7), (1,)), (F32, BF16, I64, torch.bool)),
    Op("any_dim_keepdim_first", lambda x: x.any(0, keepdim=True), mostly_zero((7, 5), (33, 3)),
       (F32, torch.bool)),
    Op("any_all_dims", lambda x: (x.any(), torch.any(x, dim=(0, 1))), mostly_zero((2, 3), (7, 5), (1, 1)),
       (F32, torch.bool)),
    Op("any_no_dims", lambda x: aten.any.dims(x, []), mostly_zero((7, 5)), (F32,)),
    Op("any_nan", lambda x: (x * math.nan).any(-1), mostly_zero((7, 5)), (F32,)),
    Op("all_dim", lambda x: ((x == 0).all(-1), x.all(0), x.all()), mostly_zero((7, 5), (3, 2)),
       (F32, I64, torch.bool)),
    Op("safe_softmax", _safe_softmax, lambda d: [(make((5, 7), d, 0.0, 3.0),), (make((2, 3, 7), d, 0.0, 3.0),),
                                                 (make((7, 6), d, 0.0, 3.0).t(),)], (F32, BF16)),
    Op("full_like", lambda x: (torch.full_like(x, 2.5) + x, torch.full_like(x, 7, dtype=torch.int32)),
       like_inputs, (F32, BF16)),
    Op("zeros_ones_like", lambda x: (torch.zeros_like(x), torch.ones_like(x, dtype=I64) + 1,
                                     torch.ones_like(x) * x), like_inputs, (F32, BF16, I64)),
    Op("empty_like_filled", lambda x: torch.empty_like(x).fill_(3) + x, like_inputs, (F32,)),
    Op("gather_last", lambda x, i: torch.gather(x, -1, i) * 2,
       gather_inputs(1, (5, 9), [(5, 9), (5, 3), (2, 1)], transposed=True), (F32, BF16, I64)),
    Op("gather_dim0", lambda x, i: torch.gather(x, 0, i) + 1, gather_inputs(0, (7, 4), [(3, 4), (9, 2)]),
       (F32,)),
    Op("gather_3d_logprobs", lambda x, i: torch.gather(F.log_softmax(x, -1), 2, i).squeeze(-1),
       gather_inputs(2, (2, 5, 33), [(2, 5, 1)]), (F32, BF16)),
    Op("gather_bool", lambda x, i: torch.gather(x, 1, i), gather_inputs(1, (4, 6), [(4, 8)]), (torch.bool,)),
    Op("index_select", lambda x, i: (torch.index_select(x, 1, i[0]) * 2, x.index_select(-1, i[0, :2]),
                                     x.t().index_select(0, i[1, 0])), index_select_inputs, (F32, BF16, I64)),
    Op("roll", lambda x: (x.roll(2, 0) + 1, x.roll((-3, 1), (1, 0)), x.t().roll(7, 1)), roll_inputs, (F32, I64)),
    Op("fmod_integers", lambda x: (torch.fmod(x, 3), torch.fmod(x, -4), torch.fmod(x.t(), 7) * 2),
       lambda d: [(make((5, 6), d, -20, 20),), (make((1, 7), d, -9, 9),)], (I64, torch.int32)),
]

PARAMS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
          for op in OPS for dtype in op.dtypes]

# The lowerings this file is about: each must be reached by some case of OPS (test_every_new_lowering...).
NEW_LOWERINGS = {
    aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm.default,
    aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.default,
    aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
    aten.gather.default, aten.index_select.default, aten.fmod.Scalar,
}


# Eager's 16-bit batch norm rounds each channel's scale and shift to the input's dtype before using them;
# graphjit keeps them in fp32 (test_batch_norm_16_bit_is_as_accurate_as_eager): the two differ by a few
# ulp of the scale times |x| where x * scale and shift cancel.
HALF_BATCH_NORM = dict(rtol=1e-2, atol=1e-2)


def tolerance(op, dtype):
    if op.name.startswith("batch_norm") and dtype == F16:
        return {**op.tol, **HALF_BATCH_NORM}
    return op.tol


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op(op, dtype):
    compiled = run_cases(op.fn, op.inputs(dtype), **tolerance(op, dtype))
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bfloat16", "float16"])
def test_batch_norm_16_bit_is_as_accurate_as_eager(dtype):
    cases = bn_inputs()(dtype)
    compiled = run_cases(_bn_legit, cases, rtol=0.1, atol=0.1)
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks
    for case, (got, _, _) in zip(cases, compiled(*[t for case in cases for t in case])):
        exact = _bn_legit(*[t.double() for t in case])[0]
        error = (got.double() - exact).abs().max()
        eager_error = (_bn_legit(*case)[0].double() - exact).abs().max()
        assert error <= eager_error, (describe(case), error.item(), eager_error.item())


def aten_targets(fn, cases):
    """The ATen ops of fn's decomposed graph over cases, and the graph's fallbacks once lowered."""
    gm = trace_cases(fn, cases)
    inputs = [t for case in cases for t in case]
    aten_gm = decompose.decompose(gm, inputs)
    targets = {n.target for n in aten_gm.graph.nodes if n.op == "call_function"}
    return targets, lowering.lower(aten_gm, inputs).fallbacks


def test_every_new_lowering_is_registered_and_exercised():
    reached = set()
    for op in OPS:
        targets, fallbacks = aten_targets(op.fn, op.inputs(op.dtypes[0]))
        assert not fallbacks, (op.name, fallbacks)
        reached |= targets
    assert NEW_LOWERINGS <= set(lowering.LOWERINGS), NEW_LOWERINGS - set(lowering.LOWERINGS)
    assert NEW_LOWERINGS <= reached, f"no case reaches {NEW_LOWERINGS - reached}"


@pytest.mark.parametrize("stats_f32", [False, True], ids=["bf16_stats", "f32_stats"])
def test_batch_norm_saved_stats_are_empty_on_cpu_like_eager(stats_f32):
    """Empty, of the statistics' dtype (eager's CPU kernel; torch's meta function says x's dtype). On CUDA
    they are the running mean and 1 / sqrt(var + eps): test_op_triton[...-cuda] compares them to eager."""
    case = bn_inputs(stats_f32=stats_f32)(BF16)[1]                     # channels_last x
    compiled = run_cases(_bn_legit, [case])
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks
    (out, mean, invstd), = compiled(*case)
    eager_out, eager_mean, _ = _bn_legit(*case)
    assert mean.shape == invstd.shape == (0,) and mean.dtype == invstd.dtype == eager_mean.dtype
    assert mean.dtype == (F32 if stats_f32 else BF16)
    assert out.stride() == eager_out.stride()                         # channels_last kept


def test_full_like_keeps_the_layout_of_its_input():
    cases = like_inputs(F32)
    compiled = run_cases(lambda x: torch.full_like(x, 2.0), cases)
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks
    for case, got in zip(cases, compiled(*[c[0] for c in cases])):
        assert got.stride() == torch.full_like(case[0], 2.0).stride(), describe(case)


@pytest.mark.parametrize("op", [lambda x, i: x.index_select(1, i), lambda x, i: torch.gather(x, 1, i.expand(3, 3)),
                                lambda x, i: F.embedding(i, x.t())], ids=["index_select", "gather", "embedding"])
@pytest.mark.parametrize("bad", [6, -1], ids=["past_the_end", "negative"])
def test_index_out_of_range_raises_as_eager(op, bad):
    """index_select, gather and embedding raise for a negative index too (advanced indexing wraps it), of
    the class eager's kernel raises (gather's RuntimeError; index_select along dim 1: per torch version)."""
    from .harness import compile_cases
    x = make((3, 6), F32)
    compiled, _ = compile_cases(op, [(x, torch.tensor([0, 5, 2]))])
    assert torch.equal(compiled(x, torch.tensor([1, 5, 0]))[0], op(x, torch.tensor([1, 5, 0])))
    with pytest.raises((IndexError, RuntimeError)) as eager:
        op(x, torch.tensor([1, bad, 0]))
    with pytest.raises(eager.type, match="index out of range") as got:
        compiled(x, torch.tensor([1, bad, 0]))
    assert got.type is eager.type


@pytest.mark.parametrize("op", [lambda x, i: x.index_select(1, i)[:, :1] * 2,
                                lambda x, i: torch.gather(x, 1, i.expand(3, 3))[:, :1] * 2,
                                lambda x, i: F.embedding(i, x.t())[:1] * 2, lambda x, i: x[:, i][:, :1] * 2,
                                lambda x, i: x.index_select(1, i).roll(1, 1)[:, :1]],
                         ids=["index_select", "gather", "embedding", "advanced_index", "roll_of_it"])
@pytest.mark.parametrize("device", ["cpp", "interpret"])
def test_index_out_of_range_raises_where_read_in_part(op, device):
    """An indexing op read in part (sliced after) checks every index, as eager does: the kernel reads, and
    checks, only the indices of the elements read; the last one out of range went unnoticed."""
    x = make((3, 6), F32)
    if device == "cpp":
        from .harness import compile_cases
        compiled, _ = compile_cases(op, [(x, torch.tensor([0, 5, 2]))])
    else:
        pytest.importorskip("triton")
        from . import test_triton
        compiled, _, _ = test_triton.compile_triton(op, [(x, torch.tensor([0, 5, 2]))], "cpu")
    assert torch.equal(compiled(x, torch.tensor([1, 5, 0]))[0], op(x, torch.tensor([1, 5, 0])))
    with pytest.raises((IndexError, RuntimeError)) as eager:
        op(x, torch.tensor([1, 0, 7]))
    with pytest.raises(eager.type, match="index out of range"):     # the class eager's kernel raises
        compiled(x, torch.tensor([1, 0, 7]))


def test_index_read_in_part_checked_with_symbolic_sizes():
    """The check of an index read in part, with the indexed dim's size a symbol: advanced indexing allows
    [-n, n) (its lower bound is the symbol negated), index_select [0, n)."""
    import graphjit
    fns = {"advanced_index": (lambda x, i: x[:, i][:, :1] * 2, -1), "index_select": (
        lambda x, i: x.index_select(1, i)[:, :1] * 2, 0)}
    for name, (fn, lowest) in fns.items():
        compiled = graphjit.compile(fn, dynamic=True)
        for n in (4, 5, 6):
            x = make((3, n), F32)
            good = torch.tensor([0, lowest * n, n - 1])
            assert torch.equal(compiled(x, good), fn(x, good)), name
            for bad in (n, lowest * n - 1):
                with pytest.raises((IndexError, RuntimeError)) as eager:
                    fn(x, torch.tensor([0, bad]))
                with pytest.raises(eager.type, match="index out of range"):
                    compiled(x, torch.tensor([0, bad]))


def test_index_read_whole_or_by_positions_gets_no_separate_check():
    """The separate check is added only where an indexing op is read in part: not where it is read whole
    (an embedding into a layer norm, a gather squeezed and summed), nor where its indices are built from
    positions (a roll's index_select read in part: the check passes on the folded constants)."""
    x, i = make((4, 4), F32), torch.tensor([1, 2])
    fns = [lambda w, i: F.layer_norm(F.embedding(i, w) + 1, (4,)),
           lambda x, i: torch.gather(x, 1, i[None].expand(4, 2)).squeeze(1).sum(),
           lambda x, i: torch.roll(x, 1, 0)[:2] * 2]
    for fn in fns:
        gm = decompose.decompose(trace_cases(fn, [(x, i)]), [x, i])
        assert not [n for n in gm.graph.nodes if n.target in decompose.RUNTIME_CHECKS], gm.code


@pytest.mark.parametrize("op", [lambda x, i: x.index_select(1, i), lambda x, i: torch.gather(x, 1, i.expand(3, 3))],
                         ids=["index_select", "gather"])
def test_negative_index_raises_triton_interpreter(op):
    pytest.importorskip("triton")
    from . import test_triton
    x = make((3, 6), F32)
    compiled, _, _ = test_triton.compile_triton(op, [(x, torch.tensor([0, 5, 2]))], "cpu")
    assert torch.equal(compiled(x, torch.tensor([1, 5, 0]))[0], op(x, torch.tensor([1, 5, 0])))
    with pytest.raises((IndexError, RuntimeError)) as eager:
        op(x, torch.tensor([1, -1, 0]))
    with pytest.raises(eager.type, match="index out of range") as got:
        compiled(x, torch.tensor([1, -1, 0]))
    assert got.type is eager.type


@pytest.mark.parametrize("fn,make_args", [
    (lambda x: torch.fmod(x, 256), lambda: [torch.arange(-5, 5, dtype=torch.int8)]),     # 0 as an int8
    (lambda x: torch.fmod(x, 2 ** 32 - 1), lambda: [torch.arange(-5, 5, dtype=torch.int32)]),  # -1 as int32
    (lambda x, i: x.index_select(1, i), lambda: [torch.randn(3, 0), torch.tensor([0])]),
    (lambda x, i: x.index_select(1, i), lambda: [torch.randn(3, 4), torch.tensor([1.0, 2.0])]),
], ids=["fmod_int8_by_256", "fmod_int32_by_minus_one", "index_select_empty_dim", "index_select_float_index"])
def test_fmod_and_index_select_stay_eager_where_eager_raises_or_overflows(fn, make_args):
    """Not lowered (the ATen call gives eager's outcome): a divisor that is 0 or -1 in the tensor's dtype,
    a dim without elements, an index that is not int32 or int64."""
    _, fallbacks = aten_targets(fn, [tuple(make_args())])
    assert fallbacks, "lowered"


def test_roll_keeps_eager_layouts():
    """Eager's CPU roll keeps a channels-last input's format along dims; rolled flat, it is contiguous."""
    from .harness import compile_cases
    fn = lambda y: (y.roll(1, 1), y.roll((2, -1), (2, 3)) * 2, y.roll(3))     # noqa: E731
    y = channels_last(make((2, 3, 4, 5), F32))
    compiled, _ = compile_cases(fn, [(y,)])
    for got, want in zip(compiled(y)[0], fn(y)):
        assert torch.equal(got, want) and got.stride() == want.stride(), (got.stride(), want.stride())


def test_gather_index_out_of_range_raises():
    from .harness import compile_cases
    x = make((3, 5), F32)
    compiled, _ = compile_cases(lambda x, i: torch.gather(x, 1, i), [(x, torch.tensor([[0], [4], [2]]))])
    assert compiled(x, torch.tensor([[1], [4], [0]]))[0].shape == (3, 1)
    with pytest.raises(RuntimeError, match="index out of range"):       # eager's gather: RuntimeError
        compiled(x, torch.tensor([[1], [5], [0]]))


# ---- models ----

class ConvBnRelu(nn.Module):
    """A ResNet basic block without downsampling: conv-bn-relu, conv-bn, + x, relu."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        for bn in (self.bn1, self.bn2):       # statistics and affine parameters away from 0/1
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.5, 0.5)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last],
                         ids=["nchw", "channels_last"])
def test_resnet_block_in_eval_fuses_batch_norm(dtype, memory_format):
    import graphjit
    torch.manual_seed(0)
    model = ConvBnRelu().eval().to(dtype=dtype, memory_format=memory_format)
    compiled_fns = []

    def backend(gm, example_inputs):
        from graphjit.backends.registry import graphjit_backend
        fn = graphjit_backend(gm, example_inputs)
        compiled_fns.append(fn)
        return fn
    x = torch.randn(2, 8, 9, 11).to(dtype=dtype, memory_format=memory_format)
    with torch.no_grad():
        got, expected = graphjit.compile(model, backend=backend)(x), model(x)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == F32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(got, expected, **tol)
    assert got.stride() == expected.stride()
    (fn,) = compiled_fns
    assert not fn.graph.fallbacks, fn.graph.fallbacks
    # two convolutions (extern calls), each followed by one kernel: bn + relu, bn + add + relu
    assert extern_count(fn) == 2 and kernel_count(fn) == 2, fn.items


def test_masked_sdpa_and_its_math_path_have_no_fallbacks():
    g = torch.Generator().manual_seed(7)
    q, k, v = (make((2, 2, 5, 8), F32, gen=g) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
    mask[0, 0, 2] = False                             # a fully masked row: safe softmax gives zeros there

    def sdpa(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def math_path(q, k, v, m):
        return aten._scaled_dot_product_attention_math(q, k, v, attn_mask=m)[0]
    for fn in (sdpa, math_path):
        targets, fallbacks = aten_targets(fn, [(q, k, v, mask)])
        assert not fallbacks, (fn.__name__, fallbacks)
    targets, _ = aten_targets(math_path, [(q, k, v, mask)])
    assert aten.all.dim in targets or aten.any.dim in targets
    compiled = run_cases(math_path, [(q, k, v, mask)], rtol=1e-4, atol=1e-4)
    assert not compiled.graph.fallbacks


# ---- the same ops through the Triton codegen: in Triton's interpreter, and on CUDA where there is a GPU ----

@pytest.mark.parametrize("device", triton_devices(matrix=True))
@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op_triton(op, dtype, device):
    pytest.importorskip("triton")
    from . import test_triton
    compiled = test_triton.run_triton(op.fn, op.inputs(dtype), device, **tolerance(op, dtype))
    assert not compiled.graph.fallbacks, compiled.graph.fallbacks


def test_gather_index_out_of_range_raises_triton_interpreter():
    pytest.importorskip("triton")
    from . import test_triton
    x = make((3, 5), F32)
    compiled, _, _ = test_triton.compile_triton(lambda x, i: torch.gather(x, 1, i),
                                                [(x, torch.tensor([[0], [4], [2]]))], "cpu")
    assert compiled(x, torch.tensor([[1], [4], [0]]))[0].shape == (3, 1)
    with pytest.raises(RuntimeError, match="index out of range"):       # eager's gather: RuntimeError
        compiled(x, torch.tensor([[1], [5], [0]]))


def test_int64_constants_mix_with_int64_values_in_cpp():
    """T5's relative position buckets: minimum(int64 tensor, full_like(..., 7)). The C++ literal must be an
    int64_t (`long` on Linux), not `7LL` (`long long`), or gj_minimum's template can't deduce its type."""
    x = torch.arange(-5, 20, dtype=torch.int64)
    compiled = run_cases(lambda t: torch.minimum(t, torch.full_like(t, 7)) + torch.clamp(t, max=5) * 3,
                         [(x,), (x[::2],)])
    assert kernel_count(compiled) >= 1      # compiled, not run eagerly after a C++ compile error


@pytest.mark.parametrize("target,dim,ndim", [(aten.index_select.default, 0, 2), (aten.index_select.default, 1, 2),
                                             (aten.gather.default, 1, 2), (aten.embedding.default, 0, 2),
                                             (aten.index.Tensor, 0, 1)])
def test_eager_index_error_probes_on_the_cpu_under_any_default_device(target, dim, ndim):
    """The probe finding eager's exception class runs a bad index on the CPU: under `torch.device("cuda")`
    (as test harnesses and users set it) it failed a device-side assert that ended the CUDA context. A
    meta default device stands in for it here (a meta op raises nothing: the probe would read RuntimeError)."""
    from graphjit.compiler.decompose import _eager_index_rule
    _eager_index_rule.cache_clear()
    expected = _eager_index_rule(target, dim, ndim)
    _eager_index_rule.cache_clear()
    with torch.device("meta"):
        assert _eager_index_rule(target, dim, ndim) == expected
    _eager_index_rule.cache_clear()
