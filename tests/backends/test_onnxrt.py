"""backend="onnxrt" (graphjit/backends/onnxrt.py) against eager: an MLP, a conv net with BatchNorm, GPT-2
and BERT from small configs, plain functions, each at two input sizes (one session where the size is a
dynamic dim); graphs it cannot take (gradients, writes into inputs, ops the exporter refuses) run as
captured with eager's results; the disk cache of exported models; options checked at compile()."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphjit
from graphjit.backends import onnxrt
from graphjit.testing import CompileCounter

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

TOL = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(graphjit.config, "cache_dir", str(tmp_path))
    graphjit.reset()


def sessions():
    return onnxrt.sessions_made


def run_sizes(model, make, sizes, dynamic=True, **tol):
    """model compiled with onnxrt, called under no_grad at each size; returns the sessions it made."""
    before = sessions()
    compiled = graphjit.compile(model, backend="onnxrt", dynamic=dynamic)
    with torch.no_grad():
        for size in sizes:
            args = make(size)
            torch.testing.assert_close(compiled(*args), model(*args), **(tol or TOL))
    return sessions() - before


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.l2(F.gelu(self.l1(x))).softmax(-1)


def test_mlp_two_batch_sizes_one_session():
    torch.manual_seed(0)
    assert run_sizes(MLP().eval(), lambda b: [torch.randn(b, 16)], [8, 3]) == 1


def test_mlp_static_sizes_a_session_per_size():
    torch.manual_seed(0)
    assert run_sizes(MLP().eval(), lambda b: [torch.randn(b, 16)], [8, 3], dynamic=False) == 2


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = F.avg_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.head(y.mean((2, 3)))


def test_conv_batchnorm_two_batch_sizes():
    torch.manual_seed(0)
    model = ConvBN()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2)
    assert run_sizes(model.eval(), lambda b: [torch.randn(b, 3, 12, 12)], [4, 2]) == 1


def test_weights_changed_after_compiling_are_read():
    # parameters are inputs of the ONNX model, not folded into it
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = graphjit.compile(model, backend="onnxrt")
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)
        model.l1.weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), **TOL)


def plain(x, y):
    return torch.tanh(x @ y) * 2 + x.sum(-1, keepdim=True)


def test_plain_function_two_sizes():
    assert run_sizes(plain, lambda n: [torch.randn(n, 6), torch.randn(6, n)], [5, 7]) == 1


def _hf(config_name, **kwargs):
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, config_name)(**kwargs)
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if hasattr(config, key):
            setattr(config, key, 0.0)
    return config


def test_gpt2_two_sequence_lengths():
    import transformers
    torch.manual_seed(0)
    config = _hf("GPT2Config", n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).logits

    made = run_sizes(Logits(), lambda n: [torch.randint(0, 100, (2, n))], [9, 13], atol=1e-4, rtol=1e-4)
    assert made == 1


def test_bert_two_sequence_lengths():
    import transformers
    torch.manual_seed(0)
    config = _hf("BertConfig", num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                 vocab_size=100, max_position_embeddings=64)
    model = transformers.BertModel(config).eval()

    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    def make(n):
        mask = torch.ones(2, n, dtype=torch.long)
        mask[1, -3:] = 0
        return [torch.randint(0, 100, (2, n)), mask]
    made = run_sizes(Hidden(), make, [9, 13], atol=1e-4, rtol=1e-4)
    assert made == 1


def test_a_graph_needing_gradients_runs_as_captured():
    torch.manual_seed(0)
    model = MLP()
    before = sessions()
    compiled = graphjit.compile(model, backend="onnxrt")
    x = torch.randn(4, 16)
    out = compiled(x)
    assert out.requires_grad
    out.sum().backward()
    assert model.l1.weight.grad is not None and sessions() == before


def write_into(x, y):
    x.add_(1)
    return x * y


def test_a_graph_writing_into_an_input_runs_as_captured():
    before = sessions()
    compiled = graphjit.compile(write_into, backend="onnxrt")
    a, b = torch.ones(3), torch.ones(3)
    out = compiled(a, b)
    assert torch.equal(a, torch.full((3,), 2.0)) and torch.equal(out, a) and sessions() == before


def scaled_sum(x, f):
    return x.sum() * f + x


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_a_float_argument_that_changes_is_not_baked_into_the_model(dynamic):
    """A Python float that changes between calls is a graph input (a symbolic float); torch.onnx's export
    kept its first value as a constant, so every later call used it. Such a graph runs as captured."""
    compiled = graphjit.compile(scaled_sum, backend="onnxrt", dynamic=dynamic)
    for f in (2.0, 3.0, 5.5, -0.25):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, f), scaled_sum(x, f), **TOL)


def returns_a_view(x):
    return x[1:], x * 2


def test_an_output_viewing_an_input_runs_as_captured():
    compiled = graphjit.compile(returns_a_view, backend="onnxrt")
    x = torch.randn(4)
    view, _ = compiled(x)
    view.fill_(7)
    assert (x[1:] == 7).all()


def unsupported_op(x):
    return torch.special.zeta(x, torch.full_like(x, 2.0)) + 1


def only_an_unsupported_op(x, q):
    return torch.special.zeta(x, q)


def test_a_graph_of_only_ops_the_exporter_refuses_warns_and_gives_eagers_result():
    compiled = graphjit.compile(only_an_unsupported_op, backend="onnxrt")
    x, q = torch.rand(5) + 2, torch.full((5,), 2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x, q)
    torch.testing.assert_close(out, only_an_unsupported_op(x, q))
    assert any("runs as captured" in str(w.message) for w in caught), [str(w.message) for w in caught]


def zeta_between(x, w):
    y = torch.relu(x @ w) * 2
    z = torch.special.zeta(y + 2, torch.full_like(y, 2.0))
    return (z.softmax(-1) + y).sum(-1), y


class ZetaBetween(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.l2(torch.special.zeta(F.gelu(self.l1(x)).abs() + 2, torch.full_like(x, 3.0)))


@pytest.mark.parametrize("case", ["function", "module"])
def test_ops_the_exporter_refuses_run_in_pytorch_and_the_parts_around_them_in_sessions(case):
    """A graph with an op ONNX has no function for (zeta) is partitioned: zeta runs in PyTorch, the parts
    before and after it in a session each; one warning names the op; results equal eager's over calls with
    fresh inputs, and no session is made after the first call."""
    torch.manual_seed(0)
    fn = zeta_between if case == "function" else ZetaBetween().eval()
    w = torch.randn(8, 8)
    args = (lambda: (torch.randn(4, 8), w)) if case == "function" else (lambda: (torch.randn(4, 8),))
    compiled = graphjit.compile(fn, backend="onnxrt", dynamic=False)
    before = sessions()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in range(3):
            a = args()
            torch.testing.assert_close(compiled(*a), fn(*a), **TOL)
            if call == 0:
                made = sessions() - before
    assert made == 2 and sessions() - before == 2
    named = [str(w.message) for w in caught if "zeta" in str(w.message)]
    assert len(named) == 1 and "run in PyTorch" in named[0], [str(w.message) for w in caught]


def test_the_parts_of_a_graph_with_dynamic_dims_take_new_sizes_in_their_sessions():
    """The partition of a graph with dynamic dims keeps them dynamic: the parts' two sessions run every
    batch size; results equal eager's at each size."""
    compiled = graphjit.compile(zeta_between, backend="onnxrt", dynamic=True)
    w = torch.randn(8, 8)
    before = sessions()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch in (4, 6, 5, 4):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x, w), zeta_between(x, w), **TOL)
    assert sessions() - before == 2


def test_the_exported_model_is_read_back_from_the_disk_cache(tmp_path):
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(4, 16)
    with torch.no_grad():
        graphjit.compile(model, backend="onnxrt")(x)
        files = list((tmp_path / "onnx").glob("*.onnx"))
        assert len(files) == 1
        graphjit.reset()
        exported = []
        real = onnxrt._export
        onnxrt._export = lambda *a: exported.append(1) or real(*a)
        try:
            torch.testing.assert_close(graphjit.compile(model, backend="onnxrt")(x), model(x), **TOL)
            assert not exported
            files[0].write_bytes(b"not a model")        # a corrupted file is exported again
            graphjit.reset()
            torch.testing.assert_close(graphjit.compile(model, backend="onnxrt")(x), model(x), **TOL)
            assert exported == [1]
        finally:
            onnxrt._export = real


def test_options_are_checked_at_compile():
    with pytest.raises(ValueError, match="unknown option 'thread'"):
        graphjit.compile(plain, backend="onnxrt", options={"thread": 2})
    with pytest.raises(ValueError, match="graph_optimization_level"):
        graphjit.compile(plain, backend="onnxrt", options={"graph_optimization_level": "max"})


def test_options_reach_the_session(tmp_path):
    path = tmp_path / "not made yet" / "optimized.onnx"
    compiled = graphjit.compile(plain, backend="onnxrt", options={
        "intra_op_num_threads": 1, "graph_optimization_level": "basic", "optimized_model_path": str(path),
        "cache": False})
    x, y = torch.randn(3, 6), torch.randn(6, 3)
    torch.testing.assert_close(compiled(x, y), plain(x, y), **TOL)
    assert path.exists() and not (tmp_path / "onnx").exists()


def test_a_missing_provider_warns_and_runs_as_captured():
    compiled = graphjit.compile(plain, backend="onnxrt", options={"providers": ["NoSuchExecutionProvider"]})
    x, y = torch.randn(3, 6), torch.randn(6, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x, y), plain(x, y))
    assert any("NoSuchExecutionProvider" in str(w.message) for w in caught)


def test_graph_breaks_keep_each_graph_in_onnxrt():
    def f(x):
        y = torch.relu(x) + 1
        print("", end="")
        return y * 3
    counter = CompileCounter("onnxrt")
    compiled = graphjit.compile(f, backend=counter)
    x = torch.randn(4)
    before = sessions()
    torch.testing.assert_close(compiled(x), f(x))
    assert counter.frame_count == 2 and sessions() - before == 2


def test_a_sequential_whose_argument_is_named_input():
    # nn.Sequential.forward(input): the placeholder's node is input_1, the model's input `input`
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).eval()
    assert run_sizes(model, lambda b: [torch.randn(b, 8)], [4, 6]) == 1


# a 0-d tensor: a Python float that is a graph input (dynamic=True) gets a session per value
SHIFT = torch.tensor(0.5)


def linear_stats(x, w, shift):
    y = torch.relu(x @ w) + shift
    return y, (y > 0).sum(1), y.double().mean(0)


def test_io_binding_reads_inputs_in_place_and_returns_ors_outputs_as_tensors(monkeypatch):
    """options={"io_binding": True} (the default for GPU inputs): each input bound at its data pointer (a
    transposed one made contiguous first), each output allocated by ORT and taken through DLPack; two batch
    sizes in one session, with eager's values and dtypes."""
    bound = []
    real = onnxrt.Session._bound
    monkeypatch.setattr(onnxrt.Session, "_bound", lambda self, args: bound.append(1) or real(self, args))
    before = sessions()
    compiled = graphjit.compile(linear_stats, backend="onnxrt", options={"io_binding": True}, dynamic=True)
    with torch.no_grad():
        for b in (3, 5):
            x, w = torch.randn(4, b).t(), torch.randn(4, 6)
            got, want = compiled(x, w, SHIFT), linear_stats(x, w, SHIFT)
            for g, e in zip(got, want):
                assert g.dtype == e.dtype
                torch.testing.assert_close(g, e, **TOL)
    assert sessions() - before == 1 and len(bound) == 2


def test_a_call_with_an_empty_input_runs_as_captured():
    """ONNX Runtime's mean over no elements is 0 where torch's is NaN: a call whose input has no elements
    (a dynamic batch of 0) runs as captured, and the session serves the other sizes."""
    compiled = graphjit.compile(linear_stats, backend="onnxrt", dynamic=True)
    before = sessions()
    with torch.no_grad():
        for b in (3, 0, 4):
            x, w = torch.randn(b, 4), torch.randn(4, 6)
            for g, e in zip(compiled(x, w, SHIFT), linear_stats(x, w, SHIFT)):
                torch.testing.assert_close(g, e, equal_nan=True, **TOL)
        assert linear_stats(torch.randn(0, 4), w, SHIFT)[2].isnan().all()
    assert sessions() - before == 1


def test_io_binding_is_an_option_checked_at_compile():
    with pytest.raises(ValueError, match="'io_binding' of backend 'onnxrt' takes bool"):
        graphjit.compile(plain, backend="onnxrt", options={"io_binding": 1})


def _gpu_provider():
    import onnxruntime
    return torch.cuda.is_available() and "CUDAExecutionProvider" in onnxruntime.get_available_providers()


@pytest.mark.skipif("not _gpu_provider()", reason="needs a GPU and onnxruntime-gpu's CUDA provider")
def test_cuda_inputs_run_in_the_cuda_provider_and_outputs_stay_on_the_gpu():
    compiled = graphjit.compile(linear_stats, backend="onnxrt", dynamic=True)
    before = sessions()
    with torch.no_grad():
        for b in (3, 7):
            x, w, shift = torch.randn(b, 4, device="cuda"), torch.randn(4, 6, device="cuda"), SHIFT.cuda()
            got, want = compiled(x, w, shift), linear_stats(x, w, shift)
            for g, e in zip(got, want):
                assert g.device == e.device and g.dtype == e.dtype
                torch.testing.assert_close(g, e, **TOL)
    assert sessions() - before == 1


def test_inputs_on_a_device_without_a_provider_run_as_captured():
    """An input ONNX Runtime cannot reach (a meta tensor here; a CUDA one without onnxruntime-gpu) runs the
    graph as captured, the reason logged."""
    with pytest.raises(onnxrt.Unsupported, match="meta"):
        onnxrt._check_graph(torch.fx.symbolic_trace(lambda x: x * 2), [torch.empty(2, device="meta")], {})


# ---- where ONNX Runtime or the exporter compute otherwise: eager's results all the same ----------------

def onnx_compiled(fn):
    return graphjit.compile(fn, backend="onnxrt")


def test_two_allow_in_graph_helpers_of_one_name_do_not_share_a_cached_model():
    """The disk cache keys on the graph's code, which names an allow_in_graph function only by name: such
    graphs are not cached (the second helper got the first's model)."""
    def make(k):
        def helper(x):
            return x * k
        return graphjit.allow_in_graph(helper)
    for k in (2.0, 3.0):
        helper = make(k)

        def f(x):
            return helper(x) + 1
        with torch.no_grad():
            assert torch.equal(onnx_compiled(f)(torch.ones(3)), torch.full((3,), k + 1))


def test_random_ops_draw_from_torchs_generator():
    def f(x):
        return F.dropout(x, 0.5, training=True) + torch.rand_like(x)
    compiled = onnx_compiled(f)
    with torch.no_grad():
        for seed in (0, 1):
            x = torch.ones(64)
            torch.manual_seed(seed)
            want, after_want = f(x), torch.rand(1)
            torch.manual_seed(seed)
            got, after_got = compiled(x), torch.rand(1)
            assert torch.equal(got, want) and torch.equal(after_got, after_want)


def test_a_split_graphs_first_call_draws_as_eager():
    def f(x):
        return x[torch.randperm(8)].cumsum(0) * 2
    compiled = onnx_compiled(f)
    with torch.no_grad():
        x = torch.arange(8.0)
        torch.manual_seed(0)
        want = f(x)
        torch.manual_seed(0)
        assert torch.equal(compiled(x), want)


def test_outputs_keep_eagers_dtypes_and_strides():
    conv = nn.Conv2d(3, 4, 3).eval()

    def f(x, y):
        return x.half().sum(1), conv(y), x.unsqueeze(0).permute(2, 1, 0) * 2
    compiled = onnx_compiled(f)
    with torch.no_grad():
        x, y = torch.randn(4, 6), torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
        for got, want in zip(compiled(x, y), f(x, y)):
            assert got.dtype == want.dtype and got.stride() == want.stride()
            torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


def test_float64_through_an_op_onnx_computes_in_float32_keeps_its_digits():
    """ONNX's Celu has no float64 kernel: the exporter casts to float32 and back; such a graph runs as
    captured (2.9e-6 relative error before)."""
    x = torch.randn(64, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(onnx_compiled(lambda t: F.celu(t) * 2)(x), F.celu(x) * 2, rtol=1e-12, atol=1e-12)


def test_float64_with_python_constants_keeps_its_digits():
    def f(x):
        return x * 0.1 - 1e16
    x = torch.full((3,), 3.0, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(onnx_compiled(f)(x), f(x))


@pytest.mark.parametrize("fn", [
    lambda x: x.max(), lambda x: torch.amin(x, 0), lambda x: x.argmax(), lambda x: x.max(0).values,
    lambda x: F.max_pool1d(x.view(1, 1, -1), 2),
], ids=["max", "amin", "argmax", "max_dim", "max_pool1d"])
def test_nan_propagates_through_max_and_min(fn):
    x = torch.tensor([1.0, float("nan"), -2.0, 0.5])
    with torch.no_grad():
        torch.testing.assert_close(onnx_compiled(fn)(x), fn(x), equal_nan=True)


def test_a_model_with_max_pooling_runs_in_parts_with_eagers_nan():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 2)).eval()
    compiled = graphjit.compile(model, backend="onnxrt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.randn(2, 3, 8, 8)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        x[0, :, 2, 2] = float("nan")
        torch.testing.assert_close(compiled(x), model(x), equal_nan=True, **TOL)


def test_cross_entropy_with_label_smoothing():
    def f(logits, target):
        return F.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=1, reduction="sum")
    logits, target = torch.randn(6, 5), torch.tensor([0, 1, 2, 3, 4, 1])
    with torch.no_grad():
        torch.testing.assert_close(onnx_compiled(f)(logits, target), f(logits, target), **TOL)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_rows_the_mask_blocks_entirely_are_zeros(kind):
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    if kind == "float":
        mask = torch.zeros(3, 5).masked_fill(~mask, float("-inf"))

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    with torch.no_grad():
        got, want = onnx_compiled(f)(q, k, v, mask), f(q, k, v, mask)
    torch.testing.assert_close(got, want, **TOL)
    assert not got[:, :, 1].any()


def test_an_expanded_output_comes_back_with_eagers_values():
    def f(x):
        return (x + 1).expand(3, 4)
    x = torch.randn(1, 4)
    with torch.no_grad():
        torch.testing.assert_close(onnx_compiled(f)(x), f(x))


_relu = nn.ReLU(inplace=True)


@pytest.mark.parametrize("fn, make", [
    (lambda x: _relu(x) + 1, lambda: (torch.tensor([-1.0, 2.0]),)),
    (lambda x: F.leaky_relu(x, 0.1, True) * 2, lambda: (torch.tensor([-1.0, 2.0]),)),
    (lambda x, y: torch.mul(x, 3, out=y) + x, lambda: (torch.tensor([-1.0, 2.0]), torch.zeros(2))),
    (lambda x: x.__iadd__(1) * 2, lambda: (torch.tensor([-1.0, 2.0]),)),
    (lambda x, m, v: F.batch_norm(x, m, v, training=True) + 0, lambda: (torch.randn(4, 3), torch.zeros(3), torch.ones(3))),
    (lambda x, m, v: torch.batch_norm(x, None, None, m, v, True, 0.1, 1e-5, False) + 0,
     lambda: (torch.randn(4, 3), torch.zeros(3), torch.ones(3))),
    (lambda x, m, v: F.instance_norm(x, m, v) + 0, lambda: (torch.randn(2, 3, 5), torch.zeros(3), torch.ones(3))),
], ids=["relu_module_inplace", "leaky_relu_inplace_positional", "out", "iadd_dunder", "F.batch_norm_training",
        "torch.batch_norm_training", "instance_norm_running_stats"])
def test_every_kind_of_write_into_an_input_runs_as_captured(fn, make):
    """An input written by a call whose name does not end in `_` (inplace=True, out=, __iadd__, a batch norm's
    running statistics) is written as eager writes it: ONNX Runtime's outputs are new tensors, so such a
    graph runs as captured."""
    before = sessions()
    eager_args = make()
    compiled_args = tuple(a.clone() for a in eager_args)
    with torch.no_grad():
        want = fn(*eager_args)
        got = onnx_compiled(fn)(*compiled_args)
    torch.testing.assert_close(got, want, **TOL)
    for c, e in zip(compiled_args, eager_args):
        torch.testing.assert_close(c, e, **TOL)
    assert sessions() == before


@pytest.mark.parametrize("fn", [
    lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5),
    lambda q: F.gumbel_softmax(q, tau=0.5),
], ids=["sdpa_dropout", "gumbel_softmax"])
def test_random_draws_named_otherwise_draw_from_torchs_generator(fn):
    compiled = onnx_compiled(fn)
    with torch.no_grad():
        q = torch.randn(1, 2, 8, 4)
        torch.manual_seed(3)
        want, after_want = fn(q), torch.rand(1)
        torch.manual_seed(3)
        got, after_got = compiled(q), torch.rand(1)
    assert torch.equal(got, want) and torch.equal(after_got, after_want)


def test_a_16_bit_graph_with_a_float_it_cannot_hold_computes_as_eager():
    def f(x):
        return x * 70000.0, x / 70000.0, x * 1e-9
    x = torch.tensor([0.5, 0.25, 1000.0], dtype=torch.float16)
    with torch.no_grad():
        for got, want in zip(onnx_compiled(f)(x), f(x)):
            assert torch.equal(got, want)


def test_strided_outputs_come_from_the_session_in_eagers_strides():
    conv = nn.Conv2d(3, 4, 3).eval()
    before = sessions()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")          # a graph the backend could not take warns
        x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
        got = onnx_compiled(conv)(x)
        assert got.stride() == conv(x).stride()
        compiled = graphjit.compile(lambda t: t * 2 + 1, backend="onnxrt", dynamic=True)
        for n in (4, 5, 7):
            t = torch.randn(3, n).t()
            got, want = compiled(t), t * 2 + 1
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want, **TOL)
    assert sessions() > before
