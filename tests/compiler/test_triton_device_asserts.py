"""The GPU's form of index checks, run on the CPU. On a GPU an embedding or gather index is checked by a
`tl.device_assert` in the kernel (compiled with Triton's debug option); in Triton's interpreter the same
checks set a status flag instead, so CI never ran the assert form. With `triton_check_indices=2` the
interpreter's kernels take the assert form too, and `triton_build.interpreting` makes their asserts live:
an in-range index must never fail one (a failed device-side assert ends the GPU's CUDA context), and an
index out of range must."""
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from graphjit import config as gj_config  # noqa: E402

from .harness import make  # noqa: E402
from .test_ops import ALL  # noqa: E402
from .test_ops_more import OPS, tolerance  # noqa: E402

# every op whose kernels read through an index tensor or a computed position
INDEXING = ("embedding", "gather_last", "gather_dim0", "gather_3d_logprobs", "gather_bool", "index_select", "roll",
            "select", "causal_mask", "masked_fill", "pad", "pad_negative", "cat", "cat_dim0")
PARAMS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
          for op in ALL + OPS if op.name in INDEXING for dtype in op.dtypes]


@pytest.fixture(autouse=True)
def _asserts_in_kernels(tmp_path_factory, monkeypatch):
    monkeypatch.setattr(gj_config, "cache_dir", str(tmp_path_factory.getbasetemp() / "kernels"))
    with gj_config.patch(triton_check_indices=2):
        yield


def test_every_indexing_op_is_covered():
    assert {op.name for op in ALL + OPS} >= set(INDEXING)


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_in_range_indices_pass_the_kernels_asserts(op, dtype):
    from . import test_triton
    compiled = test_triton.run_triton(op.fn, op.inputs(dtype), "cpu", **tolerance(op, dtype))
    if op.name in ("embedding", "gather_last", "index_select"):
        assert "tl.device_assert(" in compiled.source and "gj_status" not in compiled.source


def test_an_index_out_of_range_fails_its_assert():
    from . import test_triton
    w = make((10, 4), torch.float32)
    fn = lambda w, i: F.embedding(i, w) * 2     # noqa: E731
    compiled = test_triton.run_triton(fn, [(w, torch.tensor([1, 2, 7]))], "cpu")
    assert "tl.device_assert(" in compiled.source
    with pytest.raises(Exception, match="index out of range"):
        compiled(w, torch.tensor([1, 12, 7]))
    assert torch.equal(compiled(w, torch.tensor([3, 9, 0]))[0], fn(w, torch.tensor([3, 9, 0])))


def test_symbolic_sizes_in_range_pass_the_asserts():
    """Index checks against a symbolic size, masked lanes beyond the last element included."""
    import graphjit
    fn = lambda x, i: torch.gather(x, 1, i) * 2 + x[:, :1]     # noqa: E731
    with gj_config.patch(triton_cpu=1):
        compiled = graphjit.compile(fn, dynamic=True)
        for n in (5, 7, 13):
            x, i = make((3, n), torch.float32), torch.randint(0, n, (3, n + 2))
            assert torch.equal(compiled(x, i), fn(x, i))


@pytest.mark.parametrize("fn,x", [
    (lambda x: (x + x, x * 3), torch.tensor([[200, 7], [255, 128]], dtype=torch.uint8)),
    (lambda x: (x ** 3, x * 65536), torch.tensor([[2000, -1291], [70000, 5]], dtype=torch.int32)),
], ids=["uint8", "int32"])
def test_integer_arithmetic_wraps_as_in_eager(fn, x):
    """The debug option that makes the interpreter's asserts live also checks integer arithmetic for
    overflow, which torch's integers do (uint8 200 + 200 is 144; an int32 cube past 2**31 wraps): the
    interpreter raised "int8 overflow detected" (fuzz triton 17100027, 17100025). It is left off, as on the
    GPU."""
    from . import test_triton
    test_triton.run_triton(fn, [(x,), (x.flip(0),)], "cpu")      # each case against eager
