"""Dynamic shapes in capture: sequences of sizes and int values, compiled vs eager, with graph counts.

Each case runs a function over a sequence of inputs with graphjit (CompileCounter backend, so the graphs
run as captured and only capture is under test) and compares every result with eager. The counts are
torch.compile's on the same sequences (automatic dynamic: the first call static, a recompile makes what
changed symbolic; dims of size 0 and 1 specialized).
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.testing import CompileCounter


def run_sequence(fn, inputs, graphs, dynamic=None, backend=None, frontend=None):
    """fn compiled (by graphjit, or by `frontend(fn)`) over each args tuple of `inputs`, every result
    equal to eager's; with the counting backend, `graphs` graphs."""
    counter = CompileCounter()
    if frontend is not None:
        compiled = frontend(fn)
    else:
        compiled = graphjit.compile(fn, backend=backend or counter, dynamic=dynamic)
    for args in inputs:
        expected = fn(*args)
        got = compiled(*args)
        assert_same(got, expected, args)
    if backend is None and frontend is None:
        assert counter.frame_count == graphs, (counter.frame_count, graphs)
    return counter


def assert_same(got, expected, args):
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, args)
    elif isinstance(expected, torch.Tensor):
        assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, expected.shape, args)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    else:
        assert got == expected and type(got) is type(expected), (got, expected)


def rows(*ns, cols=4):
    return [(torch.randn(n, cols),) for n in ns]


def test_automatic_dynamic_one_static_graph_then_one_dynamic():
    def f(x):
        return (x * 2).sum(0) + x.shape[0]
    run_sequence(f, rows(3, 5, 7, 9, 4, 5), graphs=2)


def test_a_size_inside_a_tuple_compared_with_another_stays_symbolic():
    """A tuple holding a size compared with == or != (nn.RNN's check_hidden_size compares hx.size() with the
    expected tuple): asking whether the tuple is a constant specialized the size (one graph per size)."""
    def f(x):
        b = x.size(0)
        h = torch.zeros(1, b, 4)
        if h.size() != (1, b, 4) or (b, 4) != (b, 4) or not (h.shape[1:] == (b, 4)):
            raise RuntimeError("unreachable")
        return x + h.sum(), [b, 4] == [x.shape[0], 4], (b, 4) == (4, 4)
    run_sequence(f, rows(3, 5, 7, 9, 6), graphs=1, dynamic=True)


def test_dynamic_true_one_graph_dynamic_false_one_per_size():
    def f(x):
        return x.view(x.shape[0], 2, -1).mean(1)
    run_sequence(f, rows(3, 5, 7, 9), graphs=1, dynamic=True)
    run_sequence(f, rows(3, 5, 7, 9), graphs=4, dynamic=False)


def test_sizes_zero_and_one_are_specialized():
    def f(x):
        return x + x.sum(0, keepdim=True)
    # 4 -> dynamic graph; 1 and 0 need their own (broadcasting and emptiness differ); 6 reuses the first
    run_sequence(f, rows(4, 1, 0, 6, 1), graphs=3, dynamic=True)


def test_mark_dynamic_gives_one_graph_and_mark_static_wins():
    def f(x):
        return torch.cat([x, x * 2], dim=0).relu()
    inputs = rows(3, 5, 7)
    for (x,) in inputs:
        graphjit.mark_dynamic(x, 0)
    run_sequence(f, inputs, graphs=1)
    inputs = rows(3, 5, 7)
    for (x,) in inputs:
        torch._dynamo.mark_dynamic(x, 0)          # torch's own mark is honoured too
    run_sequence(f, inputs, graphs=1)
    inputs = rows(3, 5, 7)
    for (x,) in inputs:
        graphjit.mark_static(x, 0)
    run_sequence(f, inputs, graphs=3, dynamic=True)


def test_mark_dynamic_dim_that_must_specialize_is_refused():
    def f(x):
        return x.reshape(2, 3) + 1                 # only a size of 6 works: the dim specializes
    x = torch.randn(6)
    graphjit.mark_dynamic(x, 0)
    counter = CompileCounter()
    compiled = graphjit.compile(f, backend=counter)
    torch.testing.assert_close(compiled(x), f(x))
    assert counter.frame_count == 0


def test_int_argument_that_changes_becomes_symbolic():
    def f(x, n):
        return x[:n] * n + torch.arange(n).float()
    x = torch.randn(10)
    run_sequence(f, [(x, 2), (x, 3), (x, 4), (x, 7)], graphs=2)


def test_int_attribute_that_changes_becomes_symbolic():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2

        def forward(self, x):
            return x * self.scale + x.shape[-1]
    m = M()
    counter = CompileCounter()
    compiled = graphjit.compile(m, backend=counter)
    for scale in [2, 3, 4, 5]:
        m.scale = scale
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), m(x))
    assert counter.frame_count == 2


def test_dynamic_true_keeps_module_ints_constant_until_they_change():
    """dynamic=True makes the frame's int arguments symbolic, not ints read from attributes (LayerNorm's
    normalized_shape, a scale): as a symbol, normalized_shape met the weight's size 32 and was specialized
    back to 32, and graphjit's compiler then failed on the constant size input (the graph ran as captured).
    An attribute that does change becomes symbolic (automatic, as with dynamic=None)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 32)
            self.norm = torch.nn.LayerNorm(32)
            self.scale = 2

        def forward(self, x, n):
            return self.norm(self.lin(x)) * self.scale + n
    m = M().eval()
    counter = CompileCounter()
    compiled = graphjit.compile(m, backend=counter, dynamic=True)
    for rows_, scale in [(3, 2), (5, 2), (7, 3), (9, 4)]:
        m.scale = scale
        x = torch.randn(rows_, 8)
        torch.testing.assert_close(compiled(x, rows_), m(x, rows_))
    assert counter.frame_count == 2      # the second when scale changes; n and the rows symbolic throughout
    ints = [n for n in counter.graphs[0].graph.nodes if n.op == "placeholder"
            and isinstance(n.meta.get("example_value"), torch.SymInt)]
    assert [n.target for n in ints] == ["n"]


def test_module_ints_under_dynamic_true_compile_with_graphjit(recwarn):
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).eval()
    compiled = graphjit.compile(m, dynamic=True)
    with torch.no_grad():
        for rows_ in [3, 5, 7]:
            x = torch.randn(rows_, 16)
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-5)
    assert not [w for w in recwarn if "graphjit" in str(w.message)], [str(w.message) for w in recwarn]


def test_an_int_argument_the_trace_specializes_compiles(recwarn):
    """n meets the weight's static size 32 and the ShapeEnv replaces its symbol by 32: the graph's int
    input is then a constant, which graphjit's compiler takes (it failed on it: the graph ran as captured)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(32))

        def forward(self, x, n):
            return F.layer_norm(x, (n,), self.weight) * 2
    m = M()
    compiled = graphjit.compile(m, dynamic=True)
    with torch.no_grad():
        for rows_ in [3, 5]:
            x = torch.randn(rows_, 32)
            torch.testing.assert_close(compiled(x, 32), m(x, 32), rtol=1e-5, atol=1e-5)
    assert not [w for w in recwarn if "graphjit" in str(w.message)], [str(w.message) for w in recwarn]


def test_int_used_as_python_index_specializes():
    def f(x, n):
        return x * [1.0, 2.0, 3.0, 4.0][n] + sum(range(n))
    x = torch.randn(3)
    # from the second call n is symbolic, but a list index needs its value: a guard per value
    run_sequence(f, [(x, 0), (x, 1), (x, 2), (x, 3), (x, 1)], graphs=4)


def test_a_tensor_indexed_by_a_symbolic_int_stays_symbolic():
    """x[i], x[:, j], x[i, j] and x[-1, j] with int arguments that change are selects over symbolic ints:
    one graph for the non-negative values and one for the negative ones, not one per value; an index out
    of range still raises eager's IndexError."""
    def f(x, i, j):
        return x[i] * 2, x[:, j] + 1, x[i, j] - 1, x[-1, j]
    x = torch.randn(6, 5)
    counter = run_sequence(f, [(x, 0, 1), (x, 1, 2), (x, 5, 4), (x, 2, 0), (x, 3, 3), (x, -1, -5), (x, -6, -2)],
                           graphs=3)
    compiled = graphjit.compile(f, backend=counter)
    for i, j in [(6, 0), (-7, 0), (0, 5), (0, -6)]:
        with pytest.raises(IndexError, match="out of"):
            compiled(x, i, j)


def test_divmod_and_math_prod_of_a_symbolic_int_stay_symbolic():
    """divmod(n, k) of ints is (n // k, n % k) and math.prod a product from the left: an int argument that
    changes stays symbolic through them (each pinned it: a graph per value)."""
    import math

    def f(x, n):
        q, r = divmod(n, 3)
        return x * q + r, math.prod([n, 2]), math.prod([2.5, n], start=3), divmod(-n, 4)
    x = torch.randn(3)
    run_sequence(f, [(x, 2), (x, 3), (x, 7), (x, 11), (x, 5), (x, 12)], graphs=2)


def test_is_none_of_a_size_and_split_by_a_symbolic_int():
    """`n is not None` of a symbolic size is True without specializing n (it pinned n: a graph per size);
    x.split(k) by a symbolic k compiles per size (the compiler raised a TypeError and the graph ran
    uncompiled, with a warning)."""
    def f(x, k):
        n = x.shape[0]
        return x * (n is not None), x.split(k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_sequence(f, [(torch.randn(n), k) for n, k in ((3, 2), (4, 3), (5, 3), (6, 4), (7, 4))], graphs=2,
                     backend="graphjit")
    run_sequence(f, [(torch.randn(n), k) for n, k in ((3, 2), (4, 3), (5, 3), (6, 4), (7, 4))], graphs=2)


def test_a_dict_keyed_by_torch_size_is_captured():
    """A per-shape cache keyed by x.shape (a torch.Size): the keys are guarded as a tuple's are, so the
    cache growing recompiles and a size seen before hits (the frame ran eagerly: a Size key was refused)."""
    cache = {}

    def f(x):
        k = x.shape
        if k not in cache:
            cache[k] = torch.ones(k[-1])
        return (x + cache[k]).relu()
    counter = run_sequence(f, [(torch.randn(2, n),) for n in (3, 4, 4, 3, 4)], graphs=3)
    assert counter.op_count >= 2


def test_branch_on_symbolic_size_guards_the_branch():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1
    run_sequence(f, rows(3, 5, 6, 7, 2, 3, 9), graphs=2, dynamic=True)     # one graph per side


def test_shape_arithmetic_views_and_factories():
    def f(x, y):
        b, t = x.shape[0], x.shape[1]
        h = x.reshape(b * t, -1)
        z = torch.zeros(b, t, device=x.device) + torch.full((b, 1), 2.0)
        w = torch.arange(t * 2).float().view(t, 2)
        s = x[:, : t // 2].sum(-1) + y[: b * 2 : 2].sum(-1, keepdim=True)
        return h.shape[0] + h.sum(), z, w, s, x.size(), x.numel() - 1, len(x)
    inputs = [(torch.randn(b, t, 3), torch.randn(2 * b + 1, t)) for b, t in [(2, 4), (3, 6), (4, 5), (5, 3)]]
    # t == 3 makes t // 2 == 1, where the slice broadcasts against the (b, 1) sum: a graph of its own
    run_sequence(f, inputs, graphs=2, dynamic=True)


def test_cat_split_chunk_over_dynamic_dims():
    def f(x):
        a, b = x.chunk(2, dim=1)
        parts = torch.split(x, 2, dim=0)
        return torch.cat([a, b], dim=0), parts[0] * 2, len(parts)
    # chunk(2) along a static dim; split(2) along the dynamic dim: the count of parts is guarded
    # (n in {5, 6} gives 3 parts, the last of 1 or 2 rows)
    inputs = [(torch.randn(n, 6),) for n in (4, 5, 6, 6)]
    run_sequence(f, inputs, graphs=2, dynamic=True)


def test_reductions_softmax_attention_over_variable_length():
    def f(q, k, v):
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        return F.softmax(scores, dim=-1) @ v, F.scaled_dot_product_attention(q, k, v, is_causal=True)
    inputs = [tuple(torch.randn(2, t, 8) for _ in range(3)) for t in (5, 7, 9, 11)]
    run_sequence(f, inputs, graphs=2)


def test_conv_with_variable_spatial_size():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def f(x):
        return F.max_pool2d(conv(x).relu(), 2)
    inputs = [(torch.randn(1, 3, s, s + 2),) for s in (8, 10, 12, 14)]
    with torch.no_grad():
        run_sequence(f, inputs, graphs=2)


def test_graph_break_with_dynamic_sizes_resumes_correctly():
    def f(x):
        y = x * x.shape[0]
        print("", end="")                          # a graph break
        return y + x.shape[0]
    run_sequence(f, rows(3, 5, 7, 9), graphs=4)     # two graphs per frame: static, then dynamic


def test_returned_size_is_the_callers_value():
    def f(x):
        return x + 1, x.shape[0], x.shape
    run_sequence(f, rows(3, 5, 7), graphs=1, dynamic=True)


def test_counts_match_torch_compile_on_the_same_sequences():
    def f(x, n):
        return (x[:, :n] * 2).sum(1) + x.shape[0]
    seq = [(torch.randn(b, 8), n) for b, n in [(2, 3), (3, 3), (4, 5), (5, 6), (2, 2)]]
    torch_counter = CompileCounter()
    torch._dynamo.reset()
    tc = torch.compile(f, backend=torch_counter)
    for args in seq:
        tc(*args)
    run_sequence(f, seq, graphs=torch_counter.frame_count)


@pytest.mark.parametrize("backend", ["graphjit", "eager", "aot_eager"])
def test_backends_get_dynamic_graphs_right(backend):
    def f(x, y):
        n = x.shape[0]
        return (x.view(n, -1) * 2 + y[:n]).sum(0), torch.arange(n).float() * y.shape[0]
    inputs = [(torch.randn(n, 4), torch.randn(n + 2, 4)) for n in (3, 5, 7, 4)]
    run_sequence(f, inputs, graphs=None, dynamic=True, backend=backend)


def test_explain_names_the_symbolic_inputs():
    def f(x):
        return x * 2
    x = torch.randn(5, 3)
    assert "Dynamic inputs: none" in str(graphjit.explain(f)(x))
    graphjit.mark_dynamic(x, 0)
    out = graphjit.explain(f)(x)
    assert out.dynamic_inputs and out.dynamic_inputs[0].startswith("x: sizes (s") and ", 3)" in out.dynamic_inputs[0]
    assert "Dynamic inputs (symbolic sizes):" in str(out)


def test_recompile_limit_keeps_cached_entries_and_names_what_changed():
    def f(x, t):
        return x * len(t)                # a string guarded by value: every new one recompiles
    compiled = graphjit.compile(f, backend=CompileCounter())
    x = torch.randn(3)
    with graphjit.config.patch(recompile_limit=2):
        with pytest.warns(RuntimeWarning, match="keep running"):
            for t in ("a", "bb", "ccc"):
                torch.testing.assert_close(compiled(x, t), f(x, t))
        torch.testing.assert_close(compiled(x, "a"), f(x, "a"))      # a cached entry, still compiled
        assert compiled._cache.entries and len(compiled._cache.entries) == 2


def test_data_dependent_ops_break_in_dynamic_traces_too():
    def f(x):
        y = x * 2
        return y[y > 0], torch.nonzero(x).shape[0] + x.shape[0]
    counter = CompileCounter()
    compiled = graphjit.compile(f, backend=counter, dynamic=True)
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        for g, e in zip(compiled(x), f(x)):
            torch.testing.assert_close(g, e) if isinstance(e, torch.Tensor) else None
            assert g == e if not isinstance(e, torch.Tensor) else True
        for gm in counter.graphs:        # no unbacked (data-dependent) size in any graph
            for node in gm.graph.nodes:
                value = node.meta.get("example_value")
                if isinstance(value, torch.Tensor):
                    assert not any(str(s).startswith("u") for s in value.shape), node.format_node()


def test_graphjit_compiler_is_safe_with_symbolic_graphs_however_they_arrive():
    """A user backend wrapping graphjit's compiler, and torch.compile with it, hand it graphs with size
    symbols: it compiles them per set of sizes, never running a kernel made for one size on another."""
    from graphjit.backends.registry import graphjit_backend

    def f(x, y):
        n = x.shape[0]
        return (x.view(n, -1) * 2 + y[:n]).sum(0), torch.arange(n).float() * y.shape[0]
    seen = []

    def wrapping(gm, example_inputs):
        seen.append(gm)
        return graphjit_backend(gm, example_inputs)
    inputs = [(torch.randn(n, 4), torch.randn(n + 2, 4)) for n in (3, 5, 7, 4)]
    run_sequence(f, inputs, graphs=None, dynamic=True, backend=wrapping)
    assert len(seen) == 1
    torch._dynamo.reset()
    run_sequence(f, inputs, graphs=None, frontend=lambda fn: torch.compile(fn, backend=graphjit_backend))


def test_inputs_whose_metadata_the_frame_changes_in_place():
    """x.t_() / unsqueeze_() change the input's sizes while tracing: the guards are on the sizes it came in
    with (fuzz seeds 970000117, 970100164)."""
    def f(x, y):
        x.t_()
        y.unsqueeze_(0)
        return x * 2, y.shape[1]
    for dynamic in (None, True):
        counter = CompileCounter()
        compiled = graphjit.compile(f, backend=counter, dynamic=dynamic)
        for n, m in [(1, 1), (1, 2), (3, 5), (4, 2)]:
            xe, ye = torch.randn(n, m), torch.randn(m)
            xc, yc = xe.clone(), ye.clone()
            expected, got = f(xe, ye), compiled(xc, yc)
            torch.testing.assert_close(got[0], expected[0])
            assert got[1] == expected[1] and xc.shape == xe.shape and yc.shape == ye.shape


def test_a_constant_tuple_plus_symbolic_sizes_stays_symbolic():
    """`(1,) + x.shape[1:]` (transformers builds view shapes so) and `x.shape.numel()` keep the sizes
    symbolic: one dynamic graph for every length, not one per length (the concatenation made each
    size a Python int, guarded to stay the same)."""
    def f(x):
        shape = (1,) + x.shape[1:]
        return x.reshape(shape + (-1,)).sum(-1) * x.shape.numel(), [2] + list(x.shape)
    run_sequence(f, [(torch.randn(2, n, 3),) for n in (4, 6, 9, 11)], graphs=2)
    run_sequence(f, [(torch.randn(2, n, 3),) for n in (4, 6, 9, 11)], graphs=1, dynamic=True)


def test_a_size_bounded_by_a_table_stays_one_symbolic_graph():
    # a slice of a 32-row table as long as the input: the symbolic length gets an upper bound, a range
    # guard whose provenance torch prints when it makes the guards (torch 2.11 cannot print an empty one)
    table = torch.randn(32, 4)

    def f(x):
        return x + table[:x.shape[1]]
    run_sequence(f, [(torch.randn(2, n, 4),) for n in (5, 7, 9, 12)], graphs=2)


def _pools(x):
    a = F.max_pool1d(x, 3, 2)
    b, where = F.max_pool1d(x, 2, padding=1, ceil_mode=True, return_indices=True)
    c = torch.max_pool1d(x, [3], [1], [1], [2])
    d, at = F.max_pool1d_with_indices(x, kernel_size=4, stride=3)
    return a + 1, b, where, c, d, at


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_max_pool1d_over_a_changing_length_is_one_dynamic_graph(backend):
    """torch's 1-d max pool reads the length as an int (torch.compile compiles per length); capture
    records it as max_pool2d over a height of 1, which keeps the length symbolic: the same maxima,
    indices, NaN and ties as eager, on 3-d and 2-d inputs."""
    def inputs(n, rows=True):
        x = torch.randn(2, 3, n) if rows else torch.randn(3, n)
        x[..., 1] = x[..., 0]                      # a tie
        x[..., n // 2] = float("nan")
        return (x,)
    for rows in (True, False):
        counter = CompileCounter(graphjit.backends.registry.graphjit_backend if backend == "graphjit" else "eager")
        compiled = graphjit.compile(lambda x: _pools(x), backend=counter)
        for n in (9, 12, 17, 30, 13, 22, 41, 26, 33, 19):
            args = inputs(n, rows)
            expected = _pools(*args)
            got = compiled(*args)
            for g, e in zip(got, expected):
                assert torch.equal(g, e) or torch.allclose(g, e, equal_nan=True), (n, rows)
                assert g.dtype == e.dtype and g.shape == e.shape
        # the first call static, then dynamic graphs, one per side of the guards max_pool2d's shape formula
        # takes (ceil_mode's last window starting inside the padded input or not; on some torch versions
        # whether the stride divides the length): not one per length (10 here)
        assert counter.frame_count <= 5, counter.frame_count


def test_max_pool1d_over_a_changing_length_keeps_eagers_layout_and_errors():
    """Eager's 1-d CPU kernel returns a contiguous result whatever the input's layout (a `.view()` after it
    works), while a 2-d pool keeps a channels-last input's layout: the recorded form makes it contiguous.
    Integer inputs: eager's kernel has none and raises, and so does the compiled call."""
    def f(x):
        b = x.shape[0]
        return F.max_pool1d(x.transpose(1, 2), 2).view(b, -1) * 2

    counter = CompileCounter()
    compiled = graphjit.compile(f, backend=counter)
    for n in (9, 12, 17, 12):
        x = torch.randn(2, n, 3)
        expected = f(x)
        got = compiled(x)
        assert got.stride() == expected.stride()
        assert_same(got, expected, n)
    integer = graphjit.compile(lambda x: F.max_pool1d(x, 3), dynamic=True)
    for n in (9, 12):
        with pytest.raises(NotImplementedError):
            integer(torch.randint(-5, 5, (2, 3, n)))
