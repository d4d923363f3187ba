"""An index out of range raises eager's exception class (gather's RuntimeError, index_select's IndexError
along dim 0). index_add, index_copy and index_fill run as eager's kernels (torch's decompositions put through index_put,
which counts a negative index from the end where eager's index_add and index_copy raise, and index_fill's
goes through index_copy, which raises where eager's index_fill counts from the end); embedding's weight
gradient on the CPU adds rows in eager's order (index_add), with every thread count.
"""
import pytest
import torch

import graphjit
from graphjit.testing import assert_same


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:     # noqa: BLE001 -- the class is what's compared
        return type(e)


SOURCE = torch.ones(2, 4)


@pytest.mark.parametrize("op", [
    lambda x, i: x.index_add(0, i, SOURCE) * 2,
    lambda x, i: x.index_copy(0, i, SOURCE) * 2,
    lambda x, i: x.index_fill(0, i, 3.0) * 2,
    lambda x, i: x.index_add(1, i, SOURCE.t(), alpha=2) + 1,
    lambda x, i: x.gather(0, i[:, None].expand(2, 4).contiguous()) + 1,
    lambda x, i: x.index_select(0, i) * 2,
    lambda x, i: x.index_select(1, i) * 2,
], ids=["index_add", "index_copy", "index_fill", "index_add_dim1", "gather", "index_select", "index_select_dim1"])
@pytest.mark.parametrize("index", [[1, 3], [1, -1], [1, 4], [-5, 0]])
def test_index_ops_take_or_refuse_indices_as_eager(op, index):
    compiled = graphjit.compile(op)
    x = torch.arange(16.).view(4, 4)
    i = torch.tensor(index)
    expected, actual = _outcome(op, x, i), _outcome(compiled, x, i)
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"eager gave a value, compiled raised {actual}"
        assert_same(actual, expected)
    else:
        assert actual is expected


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_weight_gradient_is_eagers_bits(threads, padding_idx):
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        weight = torch.randn(50, 16, generator=g)
        indices = torch.randint(0, 50, (64, 97), generator=g)
        upstream = torch.randn(64, 97, 16, generator=g)

        def step(w, i, up):
            return (torch.nn.functional.embedding(i, w, padding_idx=padding_idx) * up).sum()

        grads = []
        for fn in (step, graphjit.compile(step)):
            w = weight.clone().requires_grad_()
            fn(w, indices, upstream).backward()
            grads.append(w.grad)
        assert_same(grads[1], grads[0])
    finally:
        torch.set_num_threads(saved)
