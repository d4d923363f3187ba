"""The Triton wrapper's per-call checks on a CUDA GPU (skipped elsewhere): kernels compiled for 16-byte
aligned inputs must not run on a parameter that moved to an unaligned address; the cached check of the
parameters' addresses must notice the move and the move back."""
import pytest
import torch

import graphjit
from graphjit.compiler.codegen import triton as triton_codegen

def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.LayerNorm(64) for _ in range(5)]).cuda().eval()


@pytest.mark.gpu
def test_a_parameter_moved_to_an_unaligned_view_gives_eager_results():
    m = model()
    compiled = graphjit.compile(m, backend="graphjit")
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(x), m(x))
        original = m[2].weight
        storage = torch.randn(65, device="cuda")
        m[2].weight = torch.nn.Parameter(storage[1:])          # 4 bytes past an aligned start
        assert m[2].weight.data_ptr() % 16
        for _ in range(2):
            torch.testing.assert_close(compiled(x), m(x))
        m[2].weight = original
        for _ in range(2):
            torch.testing.assert_close(compiled(x), m(x))


def test_static_alignment_remembers_only_aligned_addresses():
    same = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
    if same is None:        # CPU-only builds lack it; the wrapper then checks each parameter's data_ptr()
        pytest.skip("this torch has no _tensors_data_ptrs_at_indices_equal")
    check = triton_codegen.StaticAlignment(2, same)
    a, b = torch.zeros(8), torch.zeros(9)
    assert check([a, b]) and check.seen == [a.data_ptr(), b.data_ptr()]
    assert check([a, b])                                   # the C++ comparison alone
    assert not check([a, b[1:]]) and check.seen == [a.data_ptr(), b.data_ptr()]
    c = torch.zeros(8)
    assert check([c, b]) and check.seen == [c.data_ptr(), b.data_ptr()]
