"""Aliasing and in-place writes through graphjit's compiler, compiled vs eager: outputs, the inputs after
the call, and which outputs share memory with which inputs (and where in it), on the C++ codegen and
(where Triton is installed) the Triton interpreter.

Causes covered: an op whose schema hides a write (batch_norm's running statistics); composite ops that
return their input (type_as) or copy it (contiguous of a strided input written earlier), decided on
eager's metadata; inputs that share memory, at compile time or only on a later call; writes into memory
several elements share (expanded tensors); as_strided's offset counted from the storage; outputs that
are, or view, an input the graph writes."""
import pytest
import torch
import torch.fx
import torch.nn.functional as F

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.compiler import decompose
from graphjit.compiler.codegen.wrapper import DisjointInputs
from graphjit.testing import assert_same

from .harness import check_calls


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _leaves(value):
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _alias_map(outputs, inputs):
    """Per output tensor: (input index, is that input, byte offset from its data) of the first input whose
    storage it shares, or None."""
    table = []
    for out in _leaves(outputs):
        hit = None
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
                hit = (i, out is x, out.data_ptr() - x.data_ptr())
                break
        table.append(hit)
    return table


def assert_matches_eager(fn, compiled, make_inputs):
    """compiled(*inputs) against fn(*inputs) on two fresh copies of the inputs (made twice, so inputs that
    share memory share it in both): outputs with their strides, the inputs after the call (within the
    dtype's tolerances), and which outputs share memory with which inputs."""
    eager_in, compiled_in = make_inputs(), make_inputs()
    want = fn(*eager_in)
    got = compiled(*compiled_in)
    assert_same(got, want, strides=True, atol=None, rtol=None)     # None: the dtype's tolerances
    assert_same(compiled_in, eager_in, where="inputs after the call", atol=None, rtol=None)
    assert _alias_map(got, compiled_in) == _alias_map(want, eager_in)
    return got, compiled_in


def check(fn, make_inputs, calls=2):
    """fn through the frontend, each call against eager (the second call hits the compiled graphs)."""
    compiled = graphjit.compile(fn, backend="graphjit")
    for _ in range(calls):
        assert_matches_eager(fn, compiled, make_inputs)


def backend_compile(fn, inputs):
    """fn's torch-level graph compiled by the graphjit backend for `inputs` (no frontend guards)."""
    return graphjit_backend(torch.fx.symbolic_trace(fn), list(inputs))


def check_backend(fn, make_inputs):
    """fn's graph as the backend gets it (the frontend resolves some aliases itself), against eager."""
    compiled = backend_compile(fn, make_inputs())
    for _ in range(2):
        assert_matches_eager(fn, compiled, make_inputs)


# ---- a write the op's schema does not show: batch norm's running statistics ----

def bn_unused(x, mean, var, bias):
    F.batch_norm(x, mean, var, None, bias, training=True, momentum=0.1, eps=1e-5)


def bn_then_read_stats(x, mean, var, bias):
    y = F.batch_norm(x, mean, var, None, bias, training=True, momentum=0.3, eps=1e-5)
    return y.relu() + mean[0], var * 2


def bn_strided_input(x, mean, var, bias):
    F.batch_norm(x.permute(0, 2, 1), mean, var, None, bias, training=True, momentum=0.1, eps=1e-5)


@pytest.mark.parametrize("fn", [bn_unused, bn_then_read_stats, bn_strided_input], ids=lambda f: f.__name__)
def test_batch_norm_training_updates_running_stats(fn, backend):
    def inputs():
        g = _gen(1)
        shape = (6, 5, 4) if fn is not bn_strided_input else (6, 4, 5)
        return [torch.randn(shape, generator=g), torch.randn(5, generator=g), torch.rand(5, generator=g) + 0.5,
                torch.randn(5, generator=g)]
    check(fn, inputs)


def test_batch_norm_module_in_training_mode(backend):
    torch.manual_seed(0)
    eager_bn, compiled_bn = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    compiled = graphjit.compile(compiled_bn, backend="graphjit")
    x = torch.randn(8, 3, 4)
    for _ in range(2):
        with torch.no_grad():
            got, want = compiled(x), eager_bn(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(compiled_bn.running_mean, eager_bn.running_mean)
        torch.testing.assert_close(compiled_bn.running_var, eager_bn.running_var)
    assert compiled_bn.num_batches_tracked == eager_bn.num_batches_tracked


# ---- composite ops decided on eager's metadata, not a functional wrapper's ----

def type_as_then_write(x):
    y = x.type_as(x)            # x itself in eager
    y[1:].add_(10.0)
    return (x,)


def type_as_contiguous_then_write(x):
    y = x.type_as(x).contiguous()
    y[:-1].mul_(2)


def write_then_contiguous_of_strided(x):
    x.sub_(x, alpha=2)
    y = x.contiguous()          # a copy in eager: x is strided
    y[0].neg_()
    return y


def masked_fill_then_contiguous_of_strided(x):
    x.masked_fill_(x > 0, 2.0)
    y = x.contiguous()
    y[1:].neg_()


def _strided():
    return torch.randn(17, 2, generator=_gen(2))[:, 0]


@pytest.mark.parametrize("fn,make", [
    (type_as_then_write, lambda: torch.randn(17, 1, generator=_gen(3))),
    (type_as_contiguous_then_write, lambda: torch.randn(17, generator=_gen(4))),
    (write_then_contiguous_of_strided, _strided),
    (masked_fill_then_contiguous_of_strided, _strided),
], ids=lambda v: getattr(v, "__name__", ""))
def test_alias_or_copy_as_in_eager(fn, make, backend):
    check(fn, lambda: [make()])
    check_backend(fn, lambda: [make()])


# ---- inputs that share memory ----

def write_one_read_other(x, row):
    row.div_(4)
    return (x.half() * 2,)


def write_row_then_attention(x, row):
    row[0].mul_(-0.25)
    return (F.scaled_dot_product_attention(x, x * 0.5, x, is_causal=True),)


@pytest.mark.parametrize("fn,shape", [(write_one_read_other, (4,)), (write_row_then_attention, (5, 6, 4))],
                         ids=["div_", "attention"])
def test_inputs_sharing_memory_at_compile_time(fn, shape, backend):
    def inputs():
        x = torch.randn(shape, generator=_gen(5))
        return [x, x[0]]
    check(fn, inputs)


def add_one_read_other(a, b):
    a.add_(1)
    return b * 2 + a


@pytest.mark.parametrize("layout", ["same", "overlapping", "disjoint"])
def test_inputs_sharing_memory_on_a_later_call(layout, backend):
    """Compiled for separate inputs; called with inputs that share memory, the graph runs as captured
    where the memory overlaps, and compiled where it does not (two halves of one tensor)."""
    compiled = backend_compile(add_one_read_other, [torch.randn(4), torch.randn(4)])
    ran_eagerly = []
    eager = compiled.__globals__["eager"]
    compiled.__globals__["eager"] = lambda *a: ran_eagerly.append(1) or eager(*a)

    def inputs():
        base = torch.arange(8.0)
        return {"same": [base[:4], base[:4]], "overlapping": [base[:4], base[2:6]],
                "disjoint": [base[:4], base[4:]]}[layout]
    assert_matches_eager(add_one_read_other, compiled, inputs)
    assert bool(ran_eagerly) == (layout != "disjoint")


def test_view_taken_before_a_graph_break(backend):
    def unfold_break_fill(x):
        v = x.unfold(0, 2, 2)
        n = len(v.tolist())         # graph break: v is an output of the first graph, an input of the second
        x[...] = 1
        return (v * 3 + n,)

    def view_break_copy(x, y):
        v = x[:-1, ::3]
        if y.sum() > 0:
            y = y.abs()
        x.copy_(torch.zeros(()))
        return (v.masked_fill(y > 0, 1e-3),)

    check(unfold_break_fill, lambda: [torch.randn(7, generator=_gen(6))])
    check(view_break_copy, lambda: [torch.randn(7, 1, generator=_gen(7)), torch.randn(1, 6, generator=_gen(8))])


# ---- writes into memory several elements share ----

def zero_expanded_view(x):
    x.expand(9, -1, -1).zero_()


def fill_expanded(x, y):
    x.fill_(y.shape[-1])


def setitem_expanded_from_itself(x):
    x[...] = x


def index_put_expanded(x, i):
    x.index_put_((i % x.shape[0],), torch.tensor(7.0), accumulate=True)


def write_row_of_expanded(x):
    x[0].fill_(3.0)                # x's other rows are the same memory
    return x * 1


@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors")
@pytest.mark.parametrize("fn,make", [
    (zero_expanded_view, lambda: [torch.randn(1, 5, 3, generator=_gen(9))]),
    (fill_expanded, lambda: [torch.randn(1, 1, 5, generator=_gen(10)).expand(5, 1, 5),
                                 torch.randn(5, 5, generator=_gen(20))]),
    (setitem_expanded_from_itself, lambda: [torch.randn(1, 4, 3, generator=_gen(11)).expand(7, 4, 3)]),
    (index_put_expanded, lambda: [torch.randn(1, 4, 1, generator=_gen(12)).expand(6, 4, 1),
                                  torch.arange(4)]),
    (write_row_of_expanded, lambda: [torch.randn(1, 5, generator=_gen(13)).expand(4, 5)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_writes_into_shared_elements(fn, make, backend):
    check(fn, make)


# ---- as_strided: its offset counts from the storage's start ----

def as_strided_of_input(x, view):
    return (view.as_strided((2, 1), (0, 1), 0), view.as_strided((2, 2), (1, 2), 3) * 2)


def test_as_strided_of_an_input_with_an_offset(backend):
    def inputs():
        x = torch.randn(8, generator=_gen(14))
        return [x, x[1:]]
    check(as_strided_of_input, inputs)
    compiled = backend_compile(lambda v: v.as_strided((2, 2), (1, 2), 0) + 1, [torch.randn(8)[2:]])
    base = torch.randn(8)
    torch.testing.assert_close(compiled(base[3:]), base.as_strided((2, 2), (1, 2), 0) + 1)


def test_as_strided_of_a_computed_value_is_a_view(backend):
    def fn(x):
        return (x * 2).as_strided((3, 2), (1, 3)) + 1
    compiled = backend_compile(fn, [torch.randn(2, 3)])
    assert not compiled.graph.fallbacks
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), fn(x))


# ---- outputs that are, or view, an input the graph writes ----

def add_return_input(x):
    return x.add_(1)


def mul_return_view(x, y):
    x.mul_(y)
    return x[1:], x.t(), x + 1


def write_view_return_base_and_view(x):
    v = x[:, 1:]
    v.add_(3)
    return x, v, v.sum()


def write_returned_twice(x):
    x[0].fill_(5.0)
    return x, x


@pytest.mark.parametrize("fn,make", [
    (add_return_input, lambda: [torch.randn(4, 3, generator=_gen(15))]),
    (mul_return_view, lambda: [torch.randn(4, 3, generator=_gen(16)), torch.randn(3, generator=_gen(17))]),
    (write_view_return_base_and_view, lambda: [torch.randn(3, 4, generator=_gen(18))]),
    (write_returned_twice, lambda: [torch.randn(3, generator=_gen(19))]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_outputs_alias_written_inputs(fn, make, backend):
    check(fn, make)
    check_backend(fn, make)


def test_output_alias_of_written_input_through_the_backend(backend):
    """The backend alone (no frontend): eager's output is a view of x, so is the compiled one, and a later
    write to x shows through it."""
    compiled = backend_compile(mul_return_view, [torch.randn(4, 3), torch.randn(3)])
    x, y = torch.randn(4, 3), torch.randn(3)
    rows, t, plus = compiled(x, y)
    x.zero_()
    assert rows.abs().sum() == 0 and t.abs().sum() == 0 and plus.abs().sum() > 0


# ---- refusals carry a reason ----

@pytest.mark.parametrize("fn,make,reason", [
    (zero_expanded_view, lambda: [torch.randn(1, 5, 3)], "share memory"),
    (write_one_read_other, lambda: (lambda x: [x, x[0]])(torch.randn(4)), "shares memory with input 0"),
    (lambda x: x.t_(), lambda: [torch.randn(2, 3)], "sizes, strides or offset"),
])
def test_decompose_refuses_with_a_reason(fn, make, reason):
    inputs = make()
    with pytest.raises(decompose.Refused, match=reason):
        decompose.decompose(torch.fx.symbolic_trace(fn), inputs)


def test_disjoint_inputs_check_with_cached_fixed_inputs():
    """The per-call check: written spans against moving inputs (scanned) and fixed ones (looked up in the
    intervals remembered from the last call where they moved)."""
    fixed = [torch.randn(4) for _ in range(9)]
    check = DisjointInputs([16], [16], [16] * 9)
    w, m = torch.randn(4), torch.randn(4)
    assert check([w], [m], fixed)
    assert check([w], [m], fixed)                       # the fixed inputs' addresses cached
    assert not check([fixed[3][1:]], [m], fixed[:3] + [fixed[3]] + fixed[4:])
    assert not check([w], [w[2:]], fixed)
    moved = list(fixed)
    big = torch.randn(8)
    moved[5] = big[:4]
    assert not check([big[2:6]], [m], moved)
    assert check([torch.randn(4)], [m], moved)


# ---- writes into values only they hold: rewritten out of place, no second (functionalizing) trace ----

def relu_in_place_after_conv(x, w):
    y = F.conv2d(x, w)
    F.relu(y, inplace=True)
    z = y * 2
    y.mul_(3)
    return y + z, y


def write_through_a_view_of_a_fresh_value(x, w):
    y = F.conv2d(x, w)
    y[:, 0].relu_()                 # a view shares y's memory: functionalized by a second trace
    return y * 2


@pytest.mark.parametrize("fn,traces", [(relu_in_place_after_conv, 1), (write_through_a_view_of_a_fresh_value, 2)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_writes_into_fresh_values(fn, traces, monkeypatch, backend):
    seen = []
    real = decompose.make_fx

    def counting(f, **kwargs):
        if not getattr(f, "template_trace", False):        # op_templates' traces of single calls aside
            seen.append(f)
        return real(f, **kwargs)
    monkeypatch.setattr(decompose, "make_fx", counting)

    def inputs():
        return [torch.randn(2, 3, 6, 6, generator=_gen(21)), torch.randn(4, 3, 3, 3, generator=_gen(22))]
    check_backend(fn, inputs)
    assert len(seen) == traces


# ---- as_strided of a view of a value the graph computes: the storage is the whole value's ----

@pytest.mark.parametrize("fn", [
    lambda x: (x * 2)[1:].as_strided((2, 3), (1, 2), 1) + 1,
    lambda x: (x * 2)[:, 1:].as_strided((2, 3), (1, 2), 0) + 1,
    lambda x: (x * 2).t().as_strided((2, 3), (1, 2), 1) + 1,
    lambda x: (x * 2).t()[1:].as_strided((3, 2), (2, 1), 3) * 3,
    lambda x: (x * 2).reshape(-1)[5:].as_strided((2, 2), (1, 4), 2) - 1,
], ids=["slice", "column_slice", "transpose", "transpose_slice", "flat_slice"])
def test_as_strided_of_a_view_of_a_computed_value(fn, backend):
    def inputs():
        base = torch.arange(30.).reshape(5, 6)
        return [base[1:, 1:5]]
    check(fn, inputs)
    check_backend(fn, inputs)


# ---- the per-call disjointness check against a scan of every pair ----

def _overlap_scan(written, others):
    spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in written if t.numel()]
    rest = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in others if t.numel()]
    pairs = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]] + [(a, b) for a in spans for b in rest]
    return not any(a[0] < b[1] and b[0] < a[1] for a, b in pairs)


@pytest.mark.every_python     # skipped where torch lacks the function
@pytest.mark.parametrize("use_same", [False, True])
@pytest.mark.parametrize("counts", [(1, 1, 0), (2, 3, 9), (20, 2, 30), (12, 12, 12)])
def test_disjoint_inputs_matches_a_scan(counts, use_same):
    nw, nm, nf = counts
    gen = _gen(21)
    pool = torch.zeros(4096)
    check = DisjointInputs([16] * nw, [16] * nm, [16] * nf)
    if not use_same:
        check.same = None
    elif check.same is None:
        pytest.skip("this torch has no _tensors_data_ptrs_at_indices_equal, or too few fixed inputs")

    def pick(n, spread):
        starts = torch.randint(0, spread, (n,), generator=gen).tolist()
        return [pool[s:s + 4] for s in starts]
    fixed = pick(nf, 4000)
    outcomes = set()
    for step in range(200):
        if step % 7 == 0:
            fixed = pick(nf, 4000)                     # the fixed inputs move now and then
        spread = [40, 400, 4000][step % 3]
        written, moving = pick(nw, 4000), pick(nm, spread)
        want = _overlap_scan(written, moving + fixed)
        assert check(written, moving, fixed) == want, step
        outcomes.add(want)
    assert outcomes == {True, False} or nw == 1 and nm <= 1 and nf == 0


# ---- several inputs written: every new value is computed before the first write-back ----

def add_then_negate_the_other(x1, x2):
    x2.add_(x1)
    x1.neg_()
    return x2


def lerp_then_abs_the_other(x1, x2):
    v = x2.lerp_(x1, 0.3)
    x1.abs_()
    return (v,)


def copy_then_zero_the_source(x1, x2):
    x2.copy_(x1.t())
    x1.zero_()


def swap_through_a_temporary(x1, x2):
    t = x1.clone()
    x1.copy_(x2)
    x2.copy_(t)


@pytest.mark.parametrize("fn", [add_then_negate_the_other, lerp_then_abs_the_other, copy_then_zero_the_source,
                                swap_through_a_temporary],
                         ids=lambda f: f.__name__)
def test_write_backs_read_old_contents(fn, backend):
    make = lambda: tuple(torch.randn(4, 4, generator=torch.Generator().manual_seed(k)) for k in (1, 2))  # noqa: E731
    check(fn, make)
    check_backend(fn, make)


# ---- outputs that view one value the graph computes: one buffer, viewed as eager views it ----

def _sharing(outputs):
    """Per pair of output tensors, whether they share a storage; per output, its storage offset."""
    outs = _leaves(outputs)
    pointers = [t.untyped_storage().data_ptr() for t in outs]
    return [[p == q for q in pointers] for p in pointers], [t.storage_offset() for t in outs]


def _write_through_each(outputs):
    """Writes into each output in turn (floats +1, bools negated; an expanded one is not written) and
    returns every output's values after each write: outputs that share memory see each other's writes."""
    outs, seen = _leaves(outputs), []
    for out in (t for t in outs if not decompose.overlaps_itself(t)):
        out.logical_not_() if out.dtype == torch.bool else out.add_(1)
        seen.append([t.clone() for t in outs])
    return seen


def check_output_views(fn, make_inputs, calls=3):
    """fn through the frontend against eager on fresh inputs, several calls: outputs with their strides
    (assert_matches_eager), which outputs share memory and at what offsets, and what a write through
    each output shows in the others."""
    compiled = graphjit.compile(fn, backend="graphjit")
    for _ in range(calls):
        got, _ = assert_matches_eager(fn, compiled, make_inputs)
        want = fn(*make_inputs())
        assert _sharing(got) == _sharing(want)
        assert_same(_write_through_each(got), _write_through_each(want), where="outputs after each write",
                    atol=None, rtol=None)


def slice_and_whole(x):                  # fuzz tensor seed 90
    v = x.round()
    return v[..., 2:], v


def row_of_a_cast_and_the_cast(x):       # fuzz tensor seed 73
    v = x.isinf().to(torch.bfloat16)
    return v.unbind(0)[0], v


def rows_of_a_value_not_returned(x):
    y = x.exp()
    return y[0], y[2], y[1:]


def unbind_of_a_sum(x):
    return (x + x.sum(0)).unbind(1)


def strided_slice(x):
    return (x * 2)[:, ::2]


def transposed_slice_and_expand(x):
    y = x.sum(0)
    z = (x * 3).t()
    return z[1:], y.expand(3, -1), z, y


def views_of_a_product(x, w):
    y = x @ w
    return y[:, 1:], y.t(), y[0]


def unsqueeze_of_a_permuted_sum(a, z):
    return (a.permute(0, 2, 1) + z).unsqueeze(1)     # eager lays the sum out as a is: the view keeps that


def view_back_of_a_channels_last_difference(x):
    return (x.view(2, 4, 2, 6, 7) - 1).view(2, 8, 6, 7)  # eager: channels-last again


def _channels_last(seed):
    return torch.randn(2, 8, 6, 7, generator=_gen(seed)).contiguous(memory_format=torch.channels_last)


def two_reshapes_of_a_permuted_product(a):
    v = a.transpose(1, 2) * 2
    return v.reshape(4, 4), v.reshape(16)     # each reshape copies: two outputs of their own memory


@pytest.mark.parametrize("fn,make", [
    (two_reshapes_of_a_permuted_product, lambda: [torch.randn(4, 2, 2, generator=_gen(31))]),
    (unsqueeze_of_a_permuted_sum, lambda: [torch.randn(2, 8, 5, generator=_gen(28)),
                                           torch.randn(2, 5, 8, generator=_gen(29))]),
    (view_back_of_a_channels_last_difference, lambda: [_channels_last(30)]),
    (slice_and_whole, lambda: [torch.randn(2, 6, generator=_gen(21)) * 3]),
    (row_of_a_cast_and_the_cast, lambda: [torch.tensor([[1.0, float("inf"), 2.0], [-float("inf"), 0.0, 1.0]])]),
    (rows_of_a_value_not_returned, lambda: [torch.randn(3, 4, generator=_gen(22))]),
    (unbind_of_a_sum, lambda: [torch.randn(3, 4, generator=_gen(23))]),
    (strided_slice, lambda: [torch.randn(3, 5, generator=_gen(24))]),
    (transposed_slice_and_expand, lambda: [torch.randn(3, 4, generator=_gen(25))]),
    (views_of_a_product, lambda: [torch.randn(3, 4, generator=_gen(26)), torch.randn(4, 5, generator=_gen(27))]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_outputs_viewing_a_computed_value(fn, make, backend):
    check_output_views(fn, make)


def test_output_strides_decide_a_later_view(backend):
    """A view taken after a graph break succeeds or fails as in eager: the first graph's output keeps
    eager's strides (a slice of columns is not contiguous; a slice of rows is)."""
    def view_after_break(x, columns):
        y = (x * 2)[:, 1:] if columns else (x * 2)[1:]
        n = len(y.tolist())          # graph break: y is an output of the first graph
        return y.view(-1) + n

    compiled = graphjit.compile(view_after_break, backend="graphjit")
    for _ in range(2):
        x = torch.randn(3, 4, generator=_gen(28))
        torch.testing.assert_close(compiled(x, False), view_after_break(x, False))
        for fn in (view_after_break, compiled):
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                fn(x, True)


# ---- writes that read, through another view, elements they write ----

def _outcome(fn, inputs):
    """fn's outputs and inputs after the call, or the error it raised."""
    try:
        return fn(*inputs), inputs
    except RuntimeError as e:
        return str(e).split(".")[0]


def add_shifted_rows(x):
    x[1:].add_(x[:-1])          # eager: "some elements of the input tensor and the written-to tensor ..."


def add_shifted_columns(x):
    x[:, 1:].add_(x[:, :-1])    # no error in eager (the views have gaps): each column adds the updated one


def add_own_transpose(x):
    y = x * 1
    y.add_(y.t())
    return y


def copy_shifted_rows_of_a_fresh_value(x):
    y = x.exp()
    y[1:].copy_(y[:-1])
    return y


def mul_into_shifted_out(x):
    torch.mul(x[:-1], 2, out=x[1:])


@pytest.mark.parametrize("fn", [add_shifted_rows, add_shifted_columns, add_own_transpose,
                                copy_shifted_rows_of_a_fresh_value, mul_into_shifted_out],
                         ids=lambda f: f.__name__)
def test_write_reading_its_own_elements_through_another_view(fn, backend):
    """As eager on every call: the same error, or the same values; never the functional graph's values
    computed from the elements before the write."""
    check_refused_write(fn, "reads elements it writes through another view")


def check_refused_write(fn, reason):
    """fn compiled gives eager's outcome (the same error, or the same values) on every call, because
    decompose refuses its graph for `reason` and it runs as captured."""
    compiled = graphjit.compile(fn, backend="graphjit")
    make = lambda: [torch.arange(16.0).reshape(4, 4)]      # noqa: E731
    for _ in range(2):
        want, got = _outcome(fn, make()), _outcome(compiled, make())
        assert_same(got, want, where="outcome")
    with pytest.raises(decompose.Refused, match=reason):
        decompose.decompose(torch.fx.symbolic_trace(fn), make())


def add_to_overlapping_windows(x):
    x.unfold(1, 3, 1).add_(1)   # no error in eager: its overlap check gives up; windows add 1 several times


def add_to_an_expand(x):
    x[:1].expand(4, 4).add_(1)  # eager: "more than one element of the written-to tensor refers to ..."


def add_to_an_expand_of_a_fresh_value(x):
    return (x[0] * 2).expand(3, 4).add_(1)


@pytest.mark.parametrize("fn", [add_to_overlapping_windows, add_to_an_expand, add_to_an_expand_of_a_fresh_value],
                         ids=lambda f: f.__name__)
def test_write_into_a_view_whose_elements_overlap(fn, backend):
    """As eager on every call (the same error, or the same values), the graph running as captured."""
    check_refused_write(fn, "elements share memory")


def add_to_rows_of_narrowed_windows(x):
    x.frac().unfold(0, 2, 1).narrow(0, 0, 1).select(0, 0)[:-1].add_(1)    # fresh windows (fuzz 972100215)


def test_write_into_narrowed_overlapping_windows(backend):
    """A write through a view of overlapping windows that the expand check doesn't see: functionalization
    refuses it, and so does decompose, by name."""
    check_refused_write(add_to_rows_of_narrowed_windows, "overlap in memory")


def test_write_reading_other_elements_of_its_tensor_compiles(backend):
    """Views of one tensor whose elements interleave without meeting (two columns) are no overlap."""
    def swap_columns(x):
        first = x[:, 0].clone()
        x[:, 0].copy_(x[:, 1])
        x[:, 1].mul_(x[:, 2]).add_(first)
    check_backend(swap_columns, lambda: [torch.randn(4, 3, generator=_gen(29))])
    decompose.decompose(torch.fx.symbolic_trace(swap_columns), [torch.randn(4, 3)])


# ---- zeroing through broadcast views: NaN and inf times 0 stay NaN, as in eager ----

def _odd_row():
    return torch.tensor([[1.0, float("nan"), float("inf"), -2.0]])


def times_zero_of_an_expand(x):
    e = x.expand(3, 4)
    return e * 0, (e * 0).sum(0), e.mul(torch.tensor(0.0)), torch.zeros(3, 4) * e


def zeros_like_an_expand_copied_into(x):
    e = x.expand(3, 4)
    return torch.zeros_like(e).copy_(e * 0), torch.zeros_like(e).add_(x), x.new_zeros(3, 4).addcmul_(e, e, value=0)


def mul_zero_in_place_through_views(x, y):
    y[:, 1:].mul_(0)
    y.t()[0].mul_(0)
    x.expand(1, 1, 4).mul_(0)
    return x.clone().expand(3, 4).contiguous().mul_(0), y


@pytest.mark.parametrize("fn,make", [
    (times_zero_of_an_expand, lambda: [_odd_row()]),
    (times_zero_of_an_expand, lambda: [_odd_row().expand(5, 4)[:1]]),
    (zeros_like_an_expand_copied_into, lambda: [_odd_row()]),
    (mul_zero_in_place_through_views, lambda: [_odd_row(), _odd_row().t().repeat(1, 3)]),
], ids=["expand", "expanded_input", "zeros_like", "mul_in_place"])
def test_zeroing_through_broadcast_views_keeps_nan(fn, make, backend):
    check(fn, make, calls=3)
    check_backend(fn, make)
    assert hasattr(backend_compile(fn, make()), "graph")       # compiled, not run as captured


# ---- a view that changes nothing ----

def views_that_change_nothing(x):
    return x[:, 0:1], x.expand(1, 1), x.split([1, 0], 1)[0]


def views_of_a_result_that_change_nothing(x):
    y = x + 1
    v = y[:, 0:1]
    return y, v, v, y.view(y.shape), x, x[:]


@pytest.mark.parametrize("fn", [views_that_change_nothing, views_of_a_result_that_change_nothing])
def test_a_view_that_changes_nothing_is_a_new_tensor(fn, backend):
    """Eager's view ops return new tensor objects even when sizes and strides stay the same: setting an
    attribute or resizing the output leaves the input alone. The lowering makes such a view the very
    buffer it views; the wrapper returns a new view of it (and the same object where eager's output is the
    same object: `v, v`)."""
    check_calls(fn, lambda: [torch.randn(1, 1)], backend)


def test_outputs_viewing_inputs_are_autograd_views_of_them(backend):
    """An output that views an input is eager's view of it: its _base is the input, it shares the input's
    version counter (a later write into the input counts as one into the view), and an in-place op on it
    with a tensor that requires grad makes the input require grad (its gradient flows back to w)."""
    def f(x):
        return x.t(), x[1:], x * 2
    compiled = graphjit.compile(f, backend=graphjit_backend)
    for fn in (f, compiled):
        x = torch.randn(4, 4, generator=_gen())
        a, b, c = fn(x)
        assert a._base is x and b._base is x and c._base is None
        x.add_(1)
        assert (a._version, b._version) == (x._version, x._version) == (1, 1)

    def g(x):
        return x[1:]
    compiled = graphjit.compile(g, backend=graphjit_backend)
    grads = []
    for fn in (g, compiled):
        x = torch.zeros(5, 4)
        w = torch.ones(4, requires_grad=True)
        v = fn(x)
        v.mul_(0).add_(w * 3)
        assert x.requires_grad
        (x * x).sum().backward()
        grads.append(w.grad)
    assert_same(grads[1], grads[0], where="w.grad")


def test_an_input_written_after_the_call_that_the_backward_reads_raises_as_in_eager(backend):
    """w @ x saves x (a transposed view of it) for w's gradient: a write into x between the call and the
    backward makes the backward raise autograd's error, as eager's does, instead of reading the new x."""
    def f(x, w):
        return w @ x
    compiled = graphjit.compile(f, backend=graphjit_backend)
    for fn in (f, compiled):
        for _ in range(2):
            x, w = torch.randn(4, 4, generator=_gen()), torch.randn(4, 4, generator=_gen(1)).requires_grad_()
            y = fn(x, w)
            x.add_(1)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                y.sum().backward()


def test_outputs_viewing_another_output_are_autograd_views_of_it(backend):
    """y and views of y returned together: each view's _base is y and shares its version counter, so an
    in-place op on a view with a tensor that requires grad makes y require grad, and y's gradient flows
    back to w, as in eager."""
    def f(x):
        y = x * 2
        return y, y[1:], y.t()
    compiled = graphjit.compile(f, backend=graphjit_backend)
    grads = []
    for fn in (f, compiled):
        a, b, t = fn(torch.randn(4, 4, generator=_gen()))
        assert b._base is a and t._base is a
        w = torch.ones(4, requires_grad=True)
        b.add_(w)
        assert a.requires_grad and (a._version, b._version, t._version) == (1, 1, 1)
        a.sum().backward()
        grads.append(w.grad)
    assert_same(grads[1], grads[0], where="w.grad")


def test_training_outputs_viewing_inputs_that_share_memory_stay_views():
    """A training graph returning views of two inputs, compiled for inputs in separate memory, then called
    with two views of one buffer: both outputs stay views of the buffer (a write through one reaches it),
    as in eager; none comes back as a copy."""
    def f(x, y, w):
        return x[0:2], y[1:], (x * w).sum() + (y * w).sum()
    compiled = graphjit.compile(f, backend=graphjit_backend)
    w = torch.randn(3, requires_grad=True)
    compiled(torch.randn(3, 3), torch.randn(3, 3), w)
    bases = []
    for fn in (f, compiled):
        base = torch.zeros(6, 3)
        a, b, _ = fn(base[:3], base[3:], w)
        assert a._base is base and b._base is base
        b.fill_(7.0)
        bases.append(base)
    assert_same(bases[1], bases[0], where="the buffer after a write through an output")


@pytest.mark.parametrize("view", [lambda t: t.view(-1), lambda t: t.t(), lambda t: t[1:], lambda t: t.unsqueeze(0)],
                         ids=["view", "t", "slice", "unsqueeze"])
def test_a_write_into_an_output_viewing_a_saved_value_raises_as_in_eager(view):
    """exp saves its result for the backward; an output that views it (returned as a tensor of its own over
    that memory) written in place before the backward makes the backward raise autograd's error, as eager's
    does, instead of reading the written values; without the write the gradients are eager's."""
    def f(x, w):
        return view((x * w).exp())
    compiled = graphjit.compile(f, backend=graphjit_backend)
    grads = []
    for fn in (f, compiled):
        for write in (True, False):
            x = torch.randn(3, 3, generator=_gen())
            w = torch.randn(3, generator=_gen(1)).requires_grad_()
            y = fn(x, w)
            if write:
                y[0:1].add_(1.0)
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    y.sum().backward()
            else:
                y.sum().backward()
                grads.append(w.grad)
    assert_same(grads[1], grads[0], where="w.grad", rtol=1.3e-6, atol=1e-6)
