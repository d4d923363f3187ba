"""Index writes check their indices as eager's kernels do.

- In-place index_add_/index_copy_/index_fill_ stay whole (torch's decompositions of the in-place forms
  write through index_put_, which takes a negative index from the end: index_add_ at -1 added into the
  last row where eager raises).
- A write whose result is never read, or read in part, checks every index (its kernel computes only what
  is read, and dead code is removed): eager raises for any index out of range, with the class its kernel
  raises (probed per op and dim).
"""
import pytest
import torch

import graphjit

OPS = {
    "index_add_": lambda y, i, s: y.index_add_(0, i, s),
    "index_copy_": lambda y, i, s: y.index_copy_(0, i, s),
    "index_fill_": lambda y, i, s: y.index_fill_(0, i, 2.0),
    "index_put_": lambda y, i, s: y.index_put_((i,), s),
    "index_put_accumulate": lambda y, i, s: y.index_put_((i,), s, accumulate=True),
    "scatter_": lambda y, i, s: y.scatter_(0, i.view(1, 1).expand(1, 3), s),
    "scatter_add_": lambda y, i, s: y.scatter_add_(0, i.view(1, 1).expand(1, 3), s),
    "put_": lambda y, i, s: y.put_(i * 3, s[:, 0]),
}


def outcome(fn, *args):
    try:
        return fn(*args)
    except (IndexError, RuntimeError) as e:
        return type(e)


def same(a, b):
    if isinstance(a, type) or isinstance(b, type):
        return a is b
    return torch.equal(a, b)


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("index", [-1, 4, 5, -6])
def test_in_place_index_writes_read_after(name, index):
    op = OPS[name]

    def f(x, i):
        y = x.clone()
        op(y, i, x[:1])
        return y * 2
    compiled = graphjit.compile(f)
    x, i = torch.randn(5, 3), torch.tensor([index])
    assert same(outcome(compiled, x, i), outcome(f, x, i))


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("index", [-1, 5, -6])
def test_index_writes_never_read_check_their_indices(name, index):
    op = OPS[name]

    def f(x, i):
        op(x.clone(), i, x[:1])         # a scratch write: its result is never read
        return x + 1
    compiled = graphjit.compile(f)
    x, i = torch.randn(5, 3), torch.tensor([index])
    assert same(outcome(compiled, x, i), outcome(f, x, i))


def test_a_bool_mask_covers_its_dims_in_the_index_check():
    """index_put_ with a 2-d mask then an int index: the int indexes dim 2 (it was checked against dim 1)."""
    def f(x, mask, i, v):
        y = x * 2
        y.index_put_((mask, i), v)
        return y[0, 0]
    x, mask = torch.randn(2, 2, 5), torch.tensor([[True, False], [False, True]])
    v = torch.ones(2)
    for index in (4, 5, -5):
        i = torch.tensor([index])
        assert same(outcome(graphjit.compile(f), x, mask, i, v), outcome(f, x, mask, i, v))


def test_put_on_a_tensor_of_three_dims_raises_eagers_class():
    def f(x, i):
        x.clone().put_(i, torch.ones(1), accumulate=True)
        return x + 1
    x, i = torch.randn(2, 2, 5), torch.tensor([20])
    assert same(outcome(graphjit.compile(f), x, i), outcome(f, x, i))


def test_an_index_write_into_a_0d_tensor_never_read_compiles():
    """index_fill_ of a 0-d value whose result is dead: no dim to check against (the check raised an
    internal IndexError and the graph ran uncompiled)."""
    from graphjit.testing import CompileCounter

    def f(x):
        v = (x * 2).mean()
        v.index_fill_(0, torch.tensor([0]), -0.0)
        return x + 1
    counter = CompileCounter("graphjit")
    x = torch.randn(3, 3)
    with graphjit.config.patch(raise_errors=1):
        assert torch.equal(graphjit.compile(f, backend=counter)(x), f(x))


def _two_kinds_of_checks(x, i):
    return torch.index_select(x, 0, i * 2).sum(), torch.gather(x, 0, (i * 2).unsqueeze(1)).sum()


def test_the_first_failing_check_decides_the_error_class():
    """A kernel with index_select's check (eager: IndexError) and gather's (eager: RuntimeError), both out of
    range: the first check that fails sets the kernel's status and keeps it, so the error is index_select's,
    which eager runs first (the last one set won: a RuntimeError)."""
    compiled = graphjit.compile(_two_kinds_of_checks)
    x = torch.randn(5, 1)
    compiled(x, torch.tensor([0, 1]))
    with pytest.raises(IndexError):
        _two_kinds_of_checks(x, torch.tensor([1, 3]))
    with pytest.raises(IndexError):
        compiled(x, torch.tensor([1, 3]))
