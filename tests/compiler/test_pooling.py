"""max_pool2d (ResNet's stem) and the in-place restride that adaptive_avg_pool2d decomposes to: lowered
instead of falling back to ATen. Values and indices against eager through the C++ codegen and Triton's
interpreter (and CUDA where there is a GPU), on padding, stride, dilation, ceil_mode, channels-last,
sliced and 3-d inputs, with NaN and ties; each graph must compile without a fallback.
"""
import pytest
import torch
import torch.nn.functional as F

from .harness import check_lowered, make, run_cases, triton_devices
from .test_ops import Op

aten = torch.ops.aten
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def pool_inputs(dtype):
    g = torch.Generator().manual_seed(5)
    nan = make((2, 3, 9, 9), dtype, gen=g)
    nan[0, 1, 2:4, 3] = float("nan")
    nan[1, 2, 0, 0] = float("nan")
    ties = make((1, 2, 8, 8), dtype, gen=g).round()        # many equal values in one window
    return [
        (make((2, 3, 16, 16), dtype, gen=g),),
        (make((2, 4, 13, 11), dtype, gen=g).contiguous(memory_format=torch.channels_last),),
        (make((2, 3, 20, 15), dtype, gen=g)[:, :, 1::2],),    # sliced rows
        (make((3, 7, 10), dtype, gen=g),),                      # 3-d (C, H, W)
        (nan,),
        (ties,),
        (make((1, 1, 2, 3), dtype, gen=g),),                    # smaller than a window
        (torch.full((1, 2, 5, 5), float("-inf"), dtype=dtype),),  # every value -inf: indices of the start
    ]


def _both(**kw):
    def fn(x):
        values, indices = F.max_pool2d(x, return_indices=True, **kw)
        return values, indices
    return fn


OPS = [
    Op("max_pool2d_resnet_stem", lambda x: F.max_pool2d(x, 3, 2, 1), pool_inputs),
    Op("max_pool2d_indices_stem", _both(kernel_size=3, stride=2, padding=1), pool_inputs),
    Op("max_pool2d_2x2", _both(kernel_size=2), pool_inputs),
    Op("max_pool2d_ceil_dilated", _both(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1),
                                        ceil_mode=True), pool_inputs),
    Op("max_pool2d_ceil_stride3", _both(kernel_size=2, stride=3, ceil_mode=True), pool_inputs),
    Op("max_pool2d_then_relu", lambda x: F.relu(F.max_pool2d(x, 3, 2, 1)) * 2, pool_inputs),
    Op("adaptive_avg_pool_channels_last",
       lambda x: torch.flatten(F.adaptive_avg_pool2d(x, 1), 1) * 3,
       lambda d: [(make((2, 8, 5, 5), d).contiguous(memory_format=torch.channels_last),),
                  (make((3, 4, 6, 7), d),)]),
]
PARAMS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
          for op in OPS for dtype in op.dtypes]


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op(op, dtype):
    check_lowered(op, dtype)


@pytest.mark.parametrize("device", triton_devices(matrix=True))
@pytest.mark.parametrize("op,dtype", [p for p in PARAMS if p.values[1] in (F32, BF16)])
def test_op_triton(op, dtype, device):
    check_lowered(op, dtype, device)


_POOLS = [lambda x: F.max_pool1d(x.flatten(0, 1), 3), lambda x: F.max_pool2d(x, 3, 2, 1),
          lambda x: F.max_pool2d(x, 2, return_indices=True)[0]]


@pytest.mark.parametrize("device", [None] + triton_devices())
@pytest.mark.parametrize("pool", _POOLS, ids=["1d", "2d_padded", "2d"])
def test_max_pool_ties_of_signed_zeros_keep_the_first(pool, device):
    """Of equal elements eager keeps the first (a later one replaces the max only where it is greater or
    NaN): a window of -0.0 then 0.0 gives -0.0, and its reciprocal is -inf where 0.0's is +inf (a fuzz
    program's digamma of such a max returned -inf for eager's +inf)."""
    g = torch.Generator().manual_seed(11)
    zeros = torch.randn(2, 3, 6, 9, generator=g).sign() * 0.0
    op = Op("max_pool_signed_zeros", lambda x: 1 / pool(x), lambda dtype: [(zeros.to(dtype),)])
    assert (1 / pool(zeros)).isinf().all()
    check_lowered(op, torch.float64 if device is None else F32, device)


def test_max_pool_indices_are_computed_only_when_read():
    """A graph that reads only the values has one kernel and no index arithmetic stored."""
    compiled = run_cases(lambda x: F.max_pool2d(x, 3, 2, 1) + 1, [(make((2, 3, 8, 8), F32),)])
    assert [buf.layout.dtype for buf in compiled.graph.nodes if hasattr(buf, "layout")] == [F32]


def test_max_pool_large_window_falls_back_and_stays_correct():
    compiled = run_cases(lambda x: F.max_pool2d(x, 9, 1), [(make((1, 2, 12, 12), F32),)])
    assert [target for target, _ in compiled.graph.fallbacks] == [str(aten.max_pool2d_with_indices.default)]


def test_as_strided_in_place_on_an_input_or_a_shared_value():
    """as_strided_ changes a tensor's metadata. On a graph input the caller's tensor changes, which no
    compiled write-back does: the graph runs as captured. On a value another node reads after, the
    functionalized graph reads it restrided (results match eager)."""
    def on_input(x):
        return aten.as_strided_(x, (2, 3), (1, 2)) * 2

    x = make((6,), F32)
    compiled = run_cases(on_input, [(x.clone(),)])
    assert not hasattr(compiled, "graph")

    def shared(x):
        y = x * 2
        z = aten.as_strided_(y, (3, 2), (1, 3))
        return z + 1, y.sum()

    run_cases(shared, [(make((2, 3), F32),)])
