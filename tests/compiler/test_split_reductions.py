"""Split reductions (lowering.split_count): a long reduction with few results is computed by the Triton
codegen as partial results over pieces of the reduced elements, then a reduction of the partials. Each
case against eager, under Triton's interpreter (CPU tensors) and on CUDA where there is a GPU: column
sums (a bias gradient), channels-last BatchNorm-style sums over (N, H, W), a whole-tensor sum whose
length is no multiple of the pieces (the last piece masked), max/min with -inf/inf and NaN, integer and
bool reductions. The C++ codegen never splits."""
import pytest
import torch

from graphjit.compiler import lowering

from ..conftest import other_python

from .harness import run_cases, triton_devices

pytest.importorskip("triton")
from .test_triton import run_triton  # noqa: E402


def split_buffers(compiled):
    """Names of the partial-result buffers: reductions whose first dim is a piece count."""
    return [n for n in compiled.graph.buffers() if getattr(getattr(n, "data", None), "reduction_sizes", None)
            and len(n.data.sizes) >= 1 and str(n.data.sizes[0]).isdigit()
            and int(n.data.sizes[0]) in (1 << k for k in range(1, 12))]


def cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    with_nan = r(3000)
    with_nan[1234] = float("nan")
    return [
        ("column sum", lambda x: x.sum(0), [(r(4096, 96),)]),
        ("channels-last sums", lambda x, w: ((x * w).sum((0, 2, 3)), x.sum((0, 2, 3))),
         [(r(8, 16, 20, 20).contiguous(memory_format=torch.channels_last), r(8, 16, 20, 20))]),
        ("whole sum, ragged", lambda x: x.sum(), [(r(10007),)]),
        ("max/min", lambda x: (x.amax(0), x.amin(0)), [(r(5000, 3),)]),
        ("max with NaN", lambda x: (x.amax(), x.amin()), [(with_nan,)]),
        ("int sum", lambda x: x.sum(0), [(torch.randint(-5, 5, (3000, 4), generator=g),)]),
        ("bool any/all", lambda x: (x.any(), x.all()), [(r(4000) > 2.5,)]),
        ("ragged bool and int", lambda x, y: (x.any(), x.all(), y.amax(), y.amin()),
         [(r(4099) > 2.5, torch.randint(-9, 9, (4099,), generator=g))]),
    ]


CASES = cases()


@pytest.mark.parametrize("device", [pytest.param("cpu", id="interpret", marks=other_python()),
                                    *triton_devices()[1:]])
@pytest.mark.parametrize("name,fn,inputs", CASES, ids=[c[0] for c in CASES])
def test_split_reduction_matches_eager(name, fn, inputs, device):
    compiled = run_triton(fn, inputs, device)
    assert split_buffers(compiled), f"{name}: the reduction was not split"


def test_short_or_wide_reductions_are_not_split():
    device = torch.device("cuda")
    assert lowering.split_count((96,), (4096,), "sum", device) >= 2
    assert lowering.split_count((96,), (1000,), "sum", device) == 0              # short
    assert lowering.split_count((100000,), (4096,), "sum", device) == 0          # many results
    assert lowering.split_count((96,), (4096,), "prod", device) == 0             # not sum/max/min
    # rows (the innermost dim reduced: a softmax's): a program per row fills the GPU
    assert lowering.split_count((4096,), (50257,), "sum", device, row=True) == 0
    assert lowering.split_count((4096,), (50257,), "sum", device, row=False) >= 2
    assert lowering.split_count((64,), (50257,), "sum", device, row=True) >= 2   # few rows


def test_cpp_does_not_split():
    compiled = run_cases(lambda x: x.sum(0), [(torch.randn(4096, 96),)], atol=1e-4, rtol=1e-5)
    assert not split_buffers(compiled)
