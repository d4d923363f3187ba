"""graphjit's compiler on graphs with size symbols: one compile for every size, kernels that take the sizes
as arguments, results equal to eager on each size of a sequence.

Each case compiles with dynamic=True (every dim symbolic from the first call, sizes 0 and 1 specialized)
through a CompileCounter around graphjit's compiler, runs a sequence of sizes, compares each result with
eager, and asserts that the backend compiled each graph once, for all sizes (not once per size, which is
what backends/dynamic.PerSize does where the compiler needs concrete sizes). The `backend` fixture runs
each case through the C++ codegen and through Triton's interpreter.
"""
import io

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.backends.dynamic import PerSize
from graphjit.backends.registry import graphjit_backend
from graphjit.testing import CompileCounter, assert_same


@pytest.fixture(params=["cpp", "triton", "cuda"])
def backend(request, monkeypatch):
    """C++, Triton under its interpreter (CPU tensors), or Triton compiled for the GPU (CUDA tensors)."""
    from graphjit import config
    from graphjit.compiler.codegen import triton as triton_codegen
    if request.param != "cpp" and not triton_codegen.triton_available():
        pytest.skip("Triton is not installed")
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setattr(config, "triton_cpu", int(request.param == "triton"))
    _device[0] = "cuda" if request.param == "cuda" else "cpu"
    return request.param


_device = ["cpu"]


def _on_device(value):
    return value.to(_device[0]) if isinstance(value, torch.Tensor) else value


def run_sizes(fn, make_args, sizes, graphs=1, atol=1e-5, rtol=1e-5, dynamic=True):
    """fn compiled with `dynamic` over make_args(n) for each n (on the backend's device): equal to eager,
    `graphs` graphs, each compiled once for all sizes."""
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(fn, backend=counter, dynamic=dynamic)
    for n in sizes:
        args = tuple(_on_device(a) for a in make_args(n))
        expected = fn(*args)
        got = compiled(*args)
        assert_same(got, expected, atol=atol, rtol=rtol, where=f"size {n}")
    assert counter.frame_count == graphs, counter.frame_count
    assert len(counter.compiled) == graphs, "the compiler failed (see the warning)"
    per_size = [fn for fn in counter.compiled if isinstance(fn, PerSize)]
    assert not per_size, "compiled per size, not once for all sizes"
    assert not counter.ran_as_captured(), "a graph ran as captured"
    return counter


SIZES = (5, 9, 3, 17, 9)


def test_pointwise_and_reductions_over_dynamic_dims(backend):
    def f(x, y):
        z = torch.sigmoid(x) * y + 1
        return z.sum(0), z.amax(1), z.mean(), x.var(0)
    run_sizes(f, lambda n: (torch.randn(n, 6), torch.randn(n, 6)), SIZES)


def test_softmax_and_layer_norm_over_a_dynamic_length(backend):
    def f(x, w):
        return F.layer_norm(x, (x.shape[-1],)) , (x @ w).softmax(-1)
    run_sizes(f, lambda n: (torch.randn(3, n), torch.randn(n, n)), SIZES, atol=1e-4, rtol=1e-4)


def test_views_of_symbolic_products(backend):
    def f(x):
        b, t, _ = x.shape
        heads = x.view(b, t, 4, 8).transpose(1, 2)          # [b, 4, t, 8]
        merged = (heads * 2).transpose(1, 2).reshape(b, t, -1)
        return merged + x, x.reshape(-1, 8).sum(1), x.flatten(0, 1)[1:].cos()
    run_sizes(f, lambda n: (torch.randn(2, n, 32),), SIZES)


def test_slices_with_symbolic_bounds(backend):
    def f(x):
        n = x.shape[0]
        return x[1:] - x[:-1], x[-3:] * 2, x[: n // 2].sum(0), x[:, 1:n - 1 if n > 2 else None]
    run_sizes(f, lambda n: (torch.randn(n, n + 2),), (5, 9, 7, 17), graphs=1)


def test_cat_along_a_dynamic_dim_as_a_kv_cache(backend):
    def f(cache, new):
        k = torch.cat([cache, new], dim=2)
        return k, (k * 0.5).softmax(-1)
    run_sizes(f, lambda n: (torch.randn(1, 2, n, 4), torch.randn(1, 2, 1, 4)), SIZES)


def test_offsets_modulo_a_size_stay_in_bounds(backend):
    """(6 - k) % 6 of a symbolic k (bounded by narrow's guard) is a slice start: its index arithmetic keeps
    the multiple of 6 (without it, C's % of -k read before x's start); roll by k, bounded the same way,
    indexes in range."""
    def f(x, k):
        s = (6 - k) % 6
        return x.narrow(0, k, 1) * 1, x[s:s + 2] * 2, x.roll(k) + 1
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(f, backend=counter)
    x = _on_device(torch.arange(6.0) + 10)
    for k in (1, 2, 3, 4, 5, 2):
        assert_same(compiled(x, k), f(x, k), where=f"k={k}")
    assert counter.frame_count == 2, counter.frame_count      # k becomes symbolic on the second call


def test_factories_of_symbolic_sizes(backend):
    def f(x):
        n = x.shape[0]
        return torch.arange(n, device=x.device) * 3, torch.zeros(n, 2, device=x.device) + x[:, :2], \
            torch.full((n,), 2.5, device=x.device) * x[:, 0], \
            x + torch.ones_like(x)
    run_sizes(f, lambda n: (torch.randn(n, 3),), SIZES)


def test_extern_calls_take_the_runtime_sizes(backend):
    def f(q, k, v, w):
        a = F.scaled_dot_product_attention(q, k, v)
        return torch.bmm(a, w), F.linear(a, w[0].t())
    run_sizes(f, lambda n: (torch.randn(2, n, 8), torch.randn(2, n + 3, 8), torch.randn(2, n + 3, 8),
                            torch.randn(2, 8, 5)), SIZES, atol=1e-4, rtol=1e-4)


def test_int_arguments_are_size_arguments(backend):
    def f(x, n):
        return x * n + n, x[:n].sum()
    run_sizes(f, lambda n: (torch.randn(20, 3), n), SIZES)


def test_broadcasting_against_a_dynamic_dim(backend):
    def f(x, bias, row):
        return x + bias, (x * row[:, None]).sum(-1)
    run_sizes(f, lambda n: (torch.randn(n, 7), torch.randn(7), torch.randn(n)), SIZES)


def test_conv_with_a_variable_spatial_size(backend):
    """Automatic dynamic: the first size compiles static, the second makes the image's height and width
    symbolic (the weights stay static), and every later size runs that graph."""
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).to(_device[0])

    def f(x):
        return torch.relu(conv(x)).mean((2, 3))
    with torch.no_grad():
        run_sizes(f, lambda n: (torch.randn(2, 3, n, n + 1),), (5, 8, 6, 11), graphs=2, dynamic=None,
                  atol=1e-4, rtol=1e-4)


def test_sizes_0_and_1_are_their_own_graphs(backend):
    """0 and 1 are specialized (as torch.compile does): their graphs are static, the rest share one."""
    def f(x):
        return (x * 2).sum(0)
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(f, backend=counter, dynamic=True)
    for n in (4, 0, 1, 6, 9):
        x = _on_device(torch.randn(n, 3))
        assert_same(compiled(x), f(x), atol=1e-5, rtol=1e-5, where=f"size {n}")
    assert counter.frame_count == 3


def test_kernel_source_takes_sizes_as_arguments(backend):
    """The generated wrapper reads the symbols off its inputs and passes them to the kernels: one source
    for every size."""
    def f(x):
        return (x.exp() + 1).sum(-1)
    counter = run_sizes(f, lambda n: (torch.randn(n, n),), SIZES)
    (compiled,) = counter.compiled
    source = compiled.wrapper_source
    assert ".size(0)" in source, source


def test_a_size_expression_that_is_one_broadcasts(backend):
    """tensor_split(x, 3)[1] has s // 3 elements: 1 for the traced sizes 3..5, which broadcasting against
    x guarded. The kernel must read its one element for every output element, not walk past it (fuzz
    911200101: 2 of 3 elements wrong); a reduction over it is a reduction over one element (Triton's
    codegen failed on its unbound loop variable, fuzz 930400012)."""
    def f(x):
        piece = torch.tensor_split(x, 3, 0)[1]
        return torch.atan2(piece, x), piece * 2, torch.where(piece == piece.amax(), piece, -piece)
    run_sizes(f, lambda n: (torch.randn(n),), (3, 4, 3, 4), graphs=2)


def test_norm_over_a_dynamic_dim_keeps_its_rank(backend):
    """fuzz 910600130: the result of a comparison of a norm over the only dim came back 1-d."""
    def f(x):
        v = x.norm(dim=-1)
        return v.ge(v), v
    run_sizes(f, lambda n: (torch.randn(n),), (4, 7, 9))


def test_a_write_into_an_expanded_input_runs_as_eager():
    """x.zero_() on an expanded input: eager fills the shared memory; the fake-tensor trace refuses a write
    whose elements share memory, so the compiler refuses the graph (no compiler warning) and the captured
    graph runs as eager (fuzz 910200077 and six more: the trace's error was a compiler failure)."""
    import warnings

    def f(x):
        x.zero_()
        return x.sum() + 1
    compiled = graphjit.compile(f, backend=graphjit_backend, dynamic=True)
    for n in (3, 5):
        base, expected_base = torch.randn(n, 1), None
        expected_base = base.clone()
        expected = f(expected_base.expand(n, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(base.expand(n, 4))
        assert not [w for w in caught if "graphjit" in str(w.message)], [str(w.message) for w in caught]
        assert_same(got, expected)
        assert_same(base, expected_base, where="the written input")


def test_a_backend_failing_for_new_sizes_runs_the_graph_as_captured():
    """PerSize compiles at the call that brings new sizes: a backend error there warns and runs the captured
    graph, as a failure at the first compile does, instead of raising into the user's program (fuzz grad
    10101142: AOTAutograd raised for floor_divide at the second set of sizes)."""
    import warnings
    calls = []

    def failing_after_first(gm, example_inputs):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("a compiler bug")
        return gm.forward
    failing_after_first.graphjit_takes_symbols = False
    per_size = PerSize(failing_after_first, torch.fx.symbolic_trace(lambda x: x * 2), [0])
    assert torch.equal(per_size(torch.ones(2)), torch.full((2,), 2.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = per_size(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0)) and len(calls) == 2
    assert any("a compiler bug" in str(w.message) for w in caught)


def viewed_and_index_added(x):
    v = x.unflatten(-2, (1, x.shape[-2]))
    return v.index_add(4, torch.arange(v.shape[4]).flip(0), v, alpha=2), v


def test_an_output_view_of_an_input_read_by_an_extern_op_stays_a_view():
    """An extern op (index_put) needs its operand in its traced strides: the copy made for it replaced the
    view of the input for every later reader, the graph's output too, which came back as a new tensor where
    eager returns a view of the input (fuzz dynamic 10402015: a transposed input, symbolic sizes)."""
    graphjit.reset()
    compiled = graphjit.compile(viewed_and_index_added, dynamic=True)
    for base in (torch.randint(-20, 20, (1, 1, 2, 1)), torch.randint(-20, 20, (6, 1, 3, 1))):
        x = base.transpose(-1, -2)
        out, view = compiled(x)
        expected_out, expected_view = viewed_and_index_added(x)
        assert torch.equal(out, expected_out) and torch.equal(view, expected_view)
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert view.stride() == expected_view.stride()


def test_rows_of_a_size_expression_that_is_zero(backend):
    """v8 has s // 2 - 1 elements, 0 for size 3, and its store went into the kernel of the full reduction
    amax: the row count, guarded to be at most 1, was taken to be 1, and the kernel stored one element
    into an empty buffer (Triton fuzz 11101709: a segfault). A count not known to be 1 takes the masked
    loop. (Torch 2.11 raises IndexError tracing split of the empty v8: a graph break, two graphs a size;
    later versions trace it: one.)"""
    def f(x1, x3):
        v1 = x3 > x3
        v3 = (x1 / x1).nanmean(dim=(-1, 0))
        v4 = v3[:v3.shape[0] // 2]
        v5 = torch.where(v4 == v4.amax(), v4, x3)
        v8 = v5.narrow(-1, 1, v5.shape[-1] - 1) != -1.5
        return (torch.cat([v8.split(1, -1)[-1], v1], -1),)
    graphs = 4 if tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 12) else 2
    run_sizes(f, lambda n: (torch.randn(1, n, n).transpose(-1, -2), torch.randn(1).expand(1)), (2, 3, 3),
              dynamic=None, graphs=graphs)


def test_a_dim_padded_to_a_multiple_of_eight(backend):
    """Strides of a contiguous tensor whose last dim is padded up to a multiple of 8 are Max(1, padded) in
    the ShapeEnv: the ShapeEnv proves the padded size at least 1, so they compile for all sizes."""
    def f(m):
        n = m.shape[-1]
        p = F.pad(m, (0, 8 - n % 8))[..., :n]
        return p.sum(-1), p + 0, p
    run_sizes(f, lambda n: (torch.randn(3, 4, n),), SIZES)


def test_attention_with_a_mask_over_a_growing_cache(backend):
    """Decode-step attention: one query over a cache of n keys with an additive mask (on the GPU the
    memory-efficient kernel pads the mask to a multiple of 8)."""
    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(1, 4, 1, k.shape[2]))
    run_sizes(f, lambda n: (torch.randn(1, 4, 1, 16), torch.randn(1, 4, n, 16), torch.randn(1, 4, n, 16),
                            torch.zeros(1, 1, 1, n)), (5, 9, 12, 17, 9), atol=1e-4, rtol=1e-4)


def test_a_size_the_graph_returns_twice(backend):
    """x @ x.T is [n, n]: the graph returns the symbol n for both sizes, and the second was wrapped as a
    fresh view of a tensor (aten.alias of an int: Triton fuzz 11702166)."""
    def f(x):
        y = torch.einsum("...ij,...kj->...ik", x, x)
        print("sizes", y.shape, file=_sink)
        return y
    run_sizes(f, lambda n: (torch.randn(n, n),), SIZES, atol=1e-4, rtol=1e-4)


_sink = io.StringIO()      # print to it: a graph break after the einsum


def test_a_reshape_that_views_because_a_dim_is_one_returns_a_view(backend):
    """A split piece of width n // 3, which the trace knows is 1 (n in 3..5), reshaped: eager's reshape is
    a view of the input, and the compiled one must be too (it was computed into a buffer of its own: the
    strides of the symbolic view were not found, dynamic fuzz 12201763). Writing through it reaches x."""
    def f(x):
        piece = torch.tensor_split(x, 3, 1)[1]
        return piece.reshape(piece.shape[::-1])
    compiled = graphjit.compile(f, dynamic=True)
    for n in (3, 4, 5):
        x = _on_device(torch.randn(2, n))
        x_eager = x.clone()
        got, want = compiled(x), f(x_eager)
        assert torch.equal(got, want), n
        assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), "not a view of x"
        assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(), want.storage_offset())
        got.add_(1)
        want.add_(1)
        assert torch.equal(x, x_eager), n


# ---- graphs that write into their inputs, with symbolic sizes ----

def run_writes(fn, make_args, sizes, once=True):
    """fn compiled with dynamic=True over make_args(n) for each n, against eager on copies: outputs and
    every argument after the call equal; once: compiled once for all sizes (decompose.writes_into_inputs
    took the writes), else possibly per size (functionalization) but still right."""
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(fn, backend=counter, dynamic=True)
    for n in sizes:
        args = [_on_device(a) for a in make_args(n)]
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        expected = fn(*args)
        got = compiled(*mine)
        assert_same(got, expected, atol=1e-5, rtol=1e-5, where=f"size {n}")
        assert_same(tuple(mine), tuple(args), where=f"arguments after the call, size {n}")
    per_size = [f for f in counter.compiled if isinstance(f, PerSize)]
    assert len(counter.compiled) == counter.frame_count, "the compiler failed (see the warning)"
    assert not (once and per_size), "compiled per size"
    return counter


def _cache_step(cache, pos, new, count):
    cache[:, :, pos] = new
    count.add_(1)
    return (cache * 2).sum(-1), cache[:, :, :3].exp(), count + 0


def test_a_cache_update_into_an_input_compiles_once(backend):
    """A static KV cache's update (index_put_ into an input) and a counter's add_: the writes become
    out-of-place ops and copies back into the inputs, compiled once for every cache length."""
    run_writes(_cache_step, lambda n: (torch.randn(1, 2, n, 4), torch.tensor([n - 2]), torch.randn(1, 2, 1, 4),
                                       torch.zeros(1)), SIZES)


def test_a_tensor_made_in_the_graph_and_written_compiles_once(backend):
    def f(x, pos):
        buf = torch.zeros(x.shape[0], 3, device=x.device)
        buf.index_put_((pos,), x[:1, :3] * 2)
        return buf, buf.sum()
    run_writes(f, lambda n: (torch.randn(n, 5), torch.tensor([n - 1])), SIZES)


def _router(x):
    # Mixtral's router: top-k weights divided in place, then reshaped (views after the last write), and a
    # second value made in the graph, written, then viewed
    v, i = torch.topk(x.softmax(-1), 2, dim=-1)
    v /= v.sum(dim=-1, keepdim=True)
    v.mul_(2)
    flat = v.reshape(-1)
    perm = torch.argsort(i.reshape(-1) * 4 + flat)
    return perm, flat[:3] + 1, v


def test_values_made_in_the_graph_written_then_viewed_compile_once(backend):
    """Writes on a value only the graph holds, whose views are all taken after the last write: the views
    read the out-of-place result, so the graph keeps its size symbols (not compiled per size)."""
    run_writes(_router, lambda n: (torch.randn(n, 4),), SIZES)


def _masked_write_then_split(x):
    # a write through a bool mask on a value the graph made, then a slice and an item of a split of it (the
    # views' values must be taken again from the out-of-place result: fuzz seed 12300406)
    v = torch.nn.functional.pad(x.softmax(-1), (2, 2), mode="reflect").sign()
    v[v > 0] = 1e20
    head = v[:v.shape[0] // 2]
    return torch.split(head, [1, head.shape[1] - 1], 1)[1]


def test_views_of_a_masked_write_read_the_written_value(backend):
    x = _on_device(torch.randn(2, 3, 4, dtype=torch.float64))
    assert_same(graphjit.compile(_masked_write_then_split, backend=graphjit_backend)(x), _masked_write_then_split(x))
    run_writes(_masked_write_then_split, lambda n: (torch.randn(n, 3, 4, dtype=torch.float64),), SIZES, once=False)


def _viewed_between_two_writes(x):
    v = x * 1
    v.add_(1)
    w = v.reshape(-1)
    v.mul_(3)
    return w + 0, v


def _viewed_before_the_write(x, y):
    head = x[:2]
    x.mul_(2)
    return head + y[:2]


def _written_and_returned(x):
    return x.add_(1)


def _written_twice_with_a_view_between(x):
    v = x.add_(1)[:2]
    x.mul_(3)
    return v * 1


@pytest.mark.parametrize("fn", [_viewed_before_the_write, _written_and_returned, _written_twice_with_a_view_between,
                                _viewed_between_two_writes],
                         ids=lambda f: f.__name__)
def test_writes_the_rewrite_leaves_to_functionalization_stay_right(fn, backend):
    """A view taken before a write (it sees the write), an input returned after its write (eager returns
    the input itself), a view read after a later write: functionalization per size, results as eager's."""
    make = (lambda n: (torch.randn(n, 3), torch.randn(n, 3))) if fn is _viewed_before_the_write else \
        (lambda n: (torch.randn(n, 3),))
    run_writes(fn, make, SIZES, once=False)
    x = _on_device(torch.randn(5, 3))
    if fn is _written_and_returned:
        assert graphjit.compile(fn, dynamic=True)(x) is x


def test_a_written_input_that_shares_memory_with_another_runs_eagerly(backend):
    """The compiled graph checks on each call that a written input shares no memory with another input:
    the cache and a view of it passed together run as eager's graph."""
    compiled = graphjit.compile(_cache_step, dynamic=True)
    for n in (5, 9, 12):
        cache, count = _on_device(torch.randn(1, 2, n, 4)), _on_device(torch.zeros(1))
        mine, my_count = cache.clone(), count.clone()
        pos = _on_device(torch.tensor([1]))
        expected = _cache_step(cache, pos, cache[:, :, 2:3], count)
        got = compiled(mine, pos, mine[:, :, 2:3], my_count)
        assert_same(got, expected)
        assert torch.equal(mine, cache) and torch.equal(my_count, count)


def test_an_in_place_op_keeps_its_inputs_dtype(backend):
    """x.add_(y) with float32 x and float64 y stays float32 (eager casts the result into x); its
    out-of-place form would be float64, so those writes go to functionalization."""
    def f(x, y):
        x.add_(y)
        return x * 2, x > 1     # 1 + 2**-30 is 1.0 in float32: False; in float64 it would be True
    run_writes(f, lambda n: (torch.ones(n, 3), torch.full((n, 3), 2.0 ** -30, dtype=torch.float64)), SIZES,
               once=False)


def test_an_item_of_a_split_of_a_written_tensor_is_returned(backend):
    """A masked write into a tensor the graph made, then one piece of a split of it returned: the split's
    items kept metas on the tensor before the write, and the output was returned from the old value
    (Triton fuzz 12300406; the C++ kernels alike)."""
    def f(x):
        v = x.sign()
        v[v > 0] = 1e20
        return torch.split(v, [1, v.shape[1] - 1], 1)[1], v.unbind(0)[-1]
    run_writes(f, lambda n: (torch.randn(2, n, 3, dtype=torch.float64),), SIZES)


def test_a_slice_of_a_tensor_written_by_copy_is_returned(backend):
    """v.copy_(src) on a tensor the graph made, then a slice of v returned: the slice's traced meta held
    v's storage, and the output was returned as a slice of v before the copy (dynamic fuzz 12000101)."""
    def f(x):
        v = x * 1
        v.copy_(x.flip(0))
        return v[:-1]
    run_writes(f, lambda n: (torch.randn(n, 3),), SIZES)


def one_hot_routed(hidden):
    mask = torch.nn.functional.one_hot(torch.argmax(hidden, dim=-1), num_classes=4)
    return mask * (torch.cumsum(mask, dim=-2) <= 8)


def one_hot_of(idx):
    return torch.nn.functional.one_hot(idx, num_classes=4) * 2


def test_one_hot_with_a_symbolic_size_keeps_its_runtime_checks():
    """With symbolic sizes one_hot's decomposition checks its classes at run time (aten._assert_async.msg, a
    node returning nothing): the graph recompiled for a second size compiles (it ran eagerly: lowering read
    the check's missing value; a router run on an encoder's and a decoder's lengths, SwitchTransformers),
    and runs those checks as ATen calls, so a bad class raises as eager's does."""
    import warnings
    cases = ((one_hot_routed, lambda n: (torch.randn(2, n, 4),)), (one_hot_of, lambda n: (torch.arange(n) % 4,)))
    for fn, make in cases:
        counter = CompileCounter(graphjit_backend)
        compiled = graphjit.compile(fn, backend=counter)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in (12, 7, 9):
                args = make(n)
                torch.testing.assert_close(compiled(*args), fn(*args))
        assert not [str(w.message) for w in caught if "failed" in str(w.message)]
        assert counter.frame_count == 2 and len(counter.compiled_functions()) == 2
    for bad in ([1, -1, 2, 0, 1, 2], [0, 4, 1, 2, 3, 1]):
        with pytest.raises(RuntimeError, match="Class values must be"):
            compiled(torch.tensor(bad))


def test_one_hot_of_static_sizes_checks_its_classes():
    """one_hot with num_classes, static sizes (and on torch 2.11 symbolic ones too): its traced form
    compared each index with each class and gave a row of zeros for a class out of range, where eager
    raises; it is traced with eager's checks (decompose.EAGER_FUNCTION_FORMS)."""
    compiled = graphjit.compile(one_hot_of, backend=CompileCounter(graphjit_backend))
    good = torch.tensor([1, 0, 2, 3, 1, 2])
    torch.testing.assert_close(compiled(good), one_hot_of(good))
    for bad, message in (([1, -1, 2, 0, 1, 2], "non-negative"), ([0, 4, 1, 2, 3, 1], "smaller than num_classes")):
        with pytest.raises(RuntimeError, match=message):
            one_hot_of(torch.tensor(bad))
        with pytest.raises(RuntimeError, match=message):
            compiled(torch.tensor(bad))
    torch.testing.assert_close(compiled(good), one_hot_of(good))


def test_roll_by_an_int_symbol_larger_than_its_dim(backend):
    """(n - s) % n with an int s past n is negative: C's % is not Python's there, so such a graph is
    compiled per size (a kernel indexed with it read out of range and raised IndexError)."""
    def f(x, s):
        return x.roll(s, 0) * 2
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(f, backend=counter, dynamic=True)
    for n, s in [(5, 6), (5, 2), (7, 9), (6, -8), (4, 3)]:
        x = _on_device(torch.randn(n, 3))
        assert_same(compiled(x, s), f(x, s), where=f"size {n}, shift {s}")


def test_a_max_in_a_slice_compiles_once_per_side_of_its_winner(backend):
    """MPT's `bias[:, max(0, n_max - n):]`: the size n_max - Max(0, n_max - n) has no winner the ShapeEnv
    proves. The compiler takes the example's winner and guards it, so sizes on that side share one
    graph (they compiled per size) and a size on the other side gets an entry of its own, with eager's
    values on both sides."""
    def f(bias, x):
        n = x.shape[1]
        return bias[:, max(0, bias.shape[1] - n):] * 2 + x[:, :8].sum(), bias[:, :min(n, 8)] + 1

    bias = torch.randn(3, 8)
    counter = run_sizes(f, lambda n: (bias, torch.randn(2, n)), (3, 5, 6, 4, 11, 13, 9, 6), graphs=2,
                        atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 2, counter.frame_count     # n <= 8 and n > 8


def test_a_graph_compiled_per_size_keeps_no_guard_of_its_symbolic_attempt():
    """`x[::2].add_(1)` writes through a view: the compiler refuses its symbolic sizes (StaticOnly) after
    its first trace asked whether x[::2] is 1 long (at size 2 it is). That answer must not stay a guard of
    the entry: one entry serves every size (through PerSize), as with a backend that takes the symbols."""
    counts = {}
    for name, backend in (("eager", "eager"), ("graphjit", graphjit_backend)):
        counter = CompileCounter(backend)
        compiled = graphjit.compile(lambda x: x[::2].add_(1), dynamic=True, backend=counter)
        for n in (2, 3, 4, 5, 7, 9):
            x = torch.randn(n, 3)
            expected = x.clone()
            expected[::2].add_(1)
            compiled(x)
            assert_same(x, expected, where=f"the written input, size {n}")
        counts[name] = counter.frame_count
    assert counts == {"eager": 1, "graphjit": 1}, counts
