"""capture/fake_memo.py: a repeated op's fake result comes from the memo, and the captured graph, its
example values and the results are those of running every op on fake tensors."""
import torch

import graphjit
from graphjit.api import ExplainOutput
from graphjit.capture.frame import Recorder
from graphjit.capture import fake_memo
from graphjit.capture.fake_memo import FakeMemo, _REFUSED
from graphjit.testing import assert_same


def _capture(fn, args, memo, **options):
    """The graphs fn captures (fake_memo on or off), explain()'s text of the translation (graphs, breaks,
    size symbols, guards), and the compiled result."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    saved, fake_memo.enabled = fake_memo.enabled, memo
    try:
        with Recorder() as recorder:
            result = graphjit.compile(fn, backend=backend, **options)(*args)
    finally:
        fake_memo.enabled = saved
        graphjit.reset()
    return graphs, str(ExplainOutput(recorder.records)), result


def _sizes(values):
    return tuple(str(v) for v in values)


def _metadata(value):
    if isinstance(value, torch.Tensor):
        return (_sizes(value.shape), _sizes(value.stride()), str(value.storage_offset()), value.dtype,
                value.device, value.requires_grad, value.is_leaf, value.is_inference(), value._is_view())
    if isinstance(value, (tuple, list)):
        return tuple(_metadata(v) for v in value)
    return repr(value)


def _graph_metadata(graphs):
    return [[(n.op, str(n.target), _metadata(n.meta.get("example_value"))) for n in gm.graph.nodes]
            for gm in graphs]


def blocks(x, w, b):
    for _ in range(4):
        h = torch.nn.functional.linear(x, w, b)
        h = torch.nn.functional.gelu(h) * 0.5 + h.softmax(-1)
        q, k = h.view(2, -1, 4).transpose(0, 1).chunk(2, dim=-1)
        x = x + torch.cat([q, k], -1).transpose(0, 1).reshape(x.shape).to(torch.float64).float()
        x = torch.nn.functional.layer_norm(x, x.shape[-1:])
    return x


def _blocks_args(requires_grad=False):
    g = torch.Generator().manual_seed(0)
    return lambda: (torch.randn(6, 8, generator=g.manual_seed(0)),
                    torch.randn(8, 8, generator=g, requires_grad=requires_grad), torch.randn(8, generator=g))


def _check_same_capture(fn, make_args, context=torch.no_grad, **options):
    with context():
        off_graphs, off_explained, _ = _capture(fn, make_args(), memo=False, **options)
        on_graphs, on_explained, on = _capture(fn, make_args(), memo=True, **options)
        expected = fn(*make_args())
    assert on_explained == off_explained
    assert [g.code for g in on_graphs] == [g.code for g in off_graphs]
    assert _graph_metadata(on_graphs) == _graph_metadata(off_graphs)
    assert_same(on, expected, atol=1e-5, rtol=1e-5)
    return on_graphs


def test_repeated_blocks_capture_the_same_graph():
    graphs = _check_same_capture(blocks, _blocks_args())
    values = [n.meta["example_value"] for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert len({id(v) for v in values}) == len(values)         # every hit is a fresh fake tensor


def test_repeated_blocks_with_size_symbols():
    _check_same_capture(blocks, _blocks_args(), dynamic=True)


def test_repeated_blocks_in_grad_mode_and_inference_mode():
    _check_same_capture(blocks, _blocks_args(requires_grad=True), context=torch.enable_grad)
    _check_same_capture(blocks, _blocks_args(requires_grad=True), context=torch.inference_mode)


def promotions(x):
    return [x + 1, x + 1.0, x + True, x * 2, x * 2.0, (x > 0) + 1, (x > 0) + True, x.to(torch.int32) + 1]


def test_constants_of_other_types_are_other_keys():
    _check_same_capture(promotions, lambda: (torch.arange(3.0) - 1,))


def mutations(x, y):
    a = x.add_(1)
    b = x.add_(1)
    c = torch.add(x, y, out=y)
    d = torch.add(x, y, out=y)
    return a is b, c is d, (x * 2).view(-1), (x * 2).view(-1)


def test_in_place_ops_and_views_run_every_time():
    _check_same_capture(mutations, lambda: (torch.arange(3.0), torch.ones(3)))


def _memo_after(fn, *args):
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    memo = FakeMemo(mode)
    key = memo.key(fn, fakes, {})
    tensors, versions = memo.versions(fakes, {})
    with mode:
        result = fn(*fakes)
    memo.record(key, fakes, result, tensors, versions)
    return memo.entries[key], result


def test_what_is_refused():
    view = torch.Tensor.view
    assert _memo_after(view, torch.randn(2, 3), -1)[0] is _REFUSED          # a view, in grad mode
    with torch.no_grad():
        assert _memo_after(view, torch.randn(2, 3), -1)[0] is not _REFUSED
        # returns its argument: a hit returns the argument it is called with
        entry, _ = _memo_after(torch.Tensor.contiguous, torch.randn(2, 3))
        assert entry is not _REFUSED and entry[1][0][1] == 0
    assert _memo_after(torch.Tensor.add_, torch.randn(3), torch.randn(3))[0] is _REFUSED  # in place
    assert _memo_after(torch.Tensor.size, torch.randn(3))[0] is _REFUSED                 # not a tensor
    entry, result = _memo_after(torch.add, torch.randn(3), torch.randn(3))
    assert entry is not _REFUSED


def test_keys_separate_metadata_and_state():
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        a, b = mode.from_tensor(torch.randn(4, 4)), mode.from_tensor(torch.randn(4, 4).t())
        c = mode.from_tensor(torch.randn(4, 4, dtype=torch.float64))
    memo = FakeMemo(mode)
    keys = {memo.key(torch.relu, [t], {}) for t in (a, b, c)}
    with torch.no_grad():
        keys.add(memo.key(torch.relu, [a], {}))
    assert len(keys) == 4
    assert memo.key(lambda x: x, [a], {}) is None                 # not torch's function
    assert memo.key(torch.relu, [torch.randn(2)], {}) is None     # a real tensor


def _storage_names(graphs):
    """Per node with a tensor example value, the first node whose example value shares its storage."""
    names = []
    for gm in graphs:
        first = {}
        for n in gm.graph.nodes:
            value = n.meta.get("example_value")
            if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                names.append((n.name, first.setdefault(value.untyped_storage()._cdata, n.name)))
    return names


def broadcast_aliasing(x, y, z):
    torch.broadcast_tensors(x, x, z)
    c, d, _ = torch.broadcast_tensors(x, y, z)      # same metadata as above: d is a view of y, not of x
    torch.meshgrid(x, x, indexing="ij")
    e, f = torch.meshgrid(x, y, indexing="ij")
    return c + d, e * f


def test_a_view_of_one_of_several_aliasing_arguments_is_not_memoized():
    make = lambda: (torch.arange(3.0), torch.arange(3.0) + 1, torch.zeros(2, 1))
    graphs = _check_same_capture(broadcast_aliasing, make, fullgraph=True)
    with torch.no_grad():
        off_graphs, _, _ = _capture(broadcast_aliasing, make(), memo=False, fullgraph=True)
    names = dict(_storage_names(graphs))
    assert _storage_names(graphs) == _storage_names(off_graphs)
    assert names["getitem_4"] == "y" and names["getitem_9"] == "y"
    with torch.no_grad():
        assert _memo_after(torch.broadcast_tensors, torch.randn(3), torch.randn(2, 1))[0] is not _REFUSED
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            x, z = mode.from_tensor(torch.randn(3)), mode.from_tensor(torch.randn(2, 1))
        memo = FakeMemo(mode)
        key = memo.key(torch.broadcast_tensors, [x, x, z], {})
        tensors, versions = memo.versions([x, x, z], {})
        with mode:
            result = torch.broadcast_tensors(x, x, z)
        memo.record(key, [x, x, z], result, tensors, versions)
        assert memo.entries[key] is _REFUSED


def sparse(x):
    return x.to_sparse().to_dense() + x.to_sparse().to_dense()


def test_sparse_tensors_are_not_memoized():
    _check_same_capture(sparse, lambda: (torch.eye(3),), fullgraph=True)


def identities(x, y):
    for _ in range(3):
        a = x.to(torch.float32).contiguous()
        x = a * 2 + (a is x)
        y = y.t().contiguous().to(torch.float32).t() + x.sum()
    return x, y, y.contiguous() is y


def test_ops_returning_their_argument_return_it_on_a_hit():
    """x.to(its own dtype), x.contiguous() of a contiguous x: the argument itself, each call."""
    g = torch.Generator()
    _check_same_capture(identities, lambda: (torch.randn(3, 4, generator=g.manual_seed(0)),
                                             torch.randn(4, 3, generator=g).t()))
