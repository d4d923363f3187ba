"""Writes that are not element by element (masked_scatter_, index_put_, scatter_, index_add_, put_, an
out= op) whose source is the tensor they write: eager raises ("some elements of the input tensor and the
written-to tensor refer to a single memory location") or, where it does not check, reads elements it has
already written. The graph runs as captured (decompose refuses it), so both come out as in eager; the
compiled graph read the old values and returned."""
import pytest
import torch

import graphjit


def outcome(fn, x, i):
    x = x.clone()
    try:
        return fn(x, i).clone(), x
    except RuntimeError as e:
        return type(e), None


CASES = {
    "scatter_add_": (lambda x, i: x.scatter_add_(0, i, x), lambda: torch.randint(0, 6, (6, 3))),
    "scatter_": (lambda x, i: x.scatter_(0, i, x), lambda: torch.randint(0, 6, (6, 3))),
    "index_put_": (lambda x, i: x.index_put_((i,), x), lambda: torch.randint(0, 6, (6,))),
    "index_add_": (lambda x, i: x.index_add_(0, i, x), lambda: torch.randint(0, 6, (6,))),
    "index_copy_": (lambda x, i: x.index_copy_(0, i, x), lambda: torch.randperm(6)),
    "put_": (lambda x, i: x.put_(i, x), lambda: torch.randint(0, 18, (6, 3))),
    "index_select_out": (lambda x, i: torch.index_select(x, 0, i, out=x), lambda: torch.randint(0, 6, (6,))),
    "masked_scatter_": (lambda x, m: x.masked_scatter_(m, x), lambda: torch.rand(6, 3) > 0.5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_write_whose_source_is_its_destination_acts_as_in_eager(name):
    fn, make_index = CASES[name]
    compiled = graphjit.compile(fn)
    for seed in range(2):
        torch.manual_seed(seed)
        x, i = torch.randn(6, 3), make_index()
        want, got = outcome(fn, x, i), outcome(compiled, x, i)
        if isinstance(want[0], type):
            assert got[0] is want[0]
        else:
            assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_pointwise_writes_reading_their_destination_still_compile():
    from graphjit.testing import CompileCounter
    counter = CompileCounter("graphjit")

    def f(x):
        return x.mul_(x).add_(x)
    compiled = graphjit.compile(f, backend=counter)
    x = torch.randn(5)
    assert torch.equal(compiled(x.clone()), f(x.clone()))
    assert getattr(counter.compiled[0], "kernel_count", 0) > 0
