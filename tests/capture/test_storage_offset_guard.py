"""`x.storage_offset()` read while tracing is answered from the fake tensor, so the entry is guarded on the
storage offsets of its tensor inputs (the tensor guards check sizes and strides, which two slices of one
base share). A frame that never reads an offset is not guarded on them: other slices are hits."""
import torch

import graphjit
from graphjit.testing import CompileCounter


def offsets(x):
    return x + 1, x.storage_offset(), x[1:].storage_offset(), x.view(-1)[2:].storage_offset()


def plain(x):
    return x * 2


def test_a_read_storage_offset_is_eager_s_for_every_slice():
    counter = CompileCounter()
    compiled = graphjit.compile(offsets, backend=counter)
    base = torch.randn(10)
    for start in (0, 1, 2, 1, 3, 0):
        x = base[start:start + 4]
        got, expected = compiled(x), offsets(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:], (start, got[1:], expected[1:])
    assert counter.frame_count == 4           # one graph per distinct offset: 0, 1, 2, 3


def test_offsets_not_read_are_not_guarded():
    counter = CompileCounter()
    compiled = graphjit.compile(plain, backend=counter)
    base = torch.randn(10)
    for start in range(4):
        torch.testing.assert_close(compiled(base[start:start + 4]), plain(base[start:start + 4]))
    assert counter.frame_count == 1
