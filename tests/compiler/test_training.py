"""Training through graphjit's compiler (compiler/training.py): forward and backward halves from
AOTAutograd, each compiled (C++, or Triton under its interpreter), against eager over several steps of
forward, loss, backward and an optimizer step (graphjit.testing.check_training): outputs, losses,
gradients of parameters and inputs, and parameters and buffers after each step."""
import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.testing import CompileCounter, assert_same, check_training


# float32 gradients go through reductions in another order than eager's (a sum over the batch of a
# weight's gradient): a few ulps of the largest terms
TOL = dict(atol=1e-5, rtol=1e-4)


def r(*shape):
    return torch.randn(*shape)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(F.silu(F.gelu(self.ln(self.fc1(x)))))


class ConvBN(torch.nn.Module):
    """Convolution, BatchNorm in train mode (its running statistics are buffers the forward writes),
    ReLU, pooling and a linear head."""

    def __init__(self):
        super().__init__()
        # no bias: batch norm subtracts it again, so its true gradient is 0 and the computed one rounding noise
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.head(y.mean((2, 3)))


class TinyAttention(torch.nn.Module):
    """Embedding, causal attention by hand (softmax of masked scores) and by SDPA, cross-entropy loss."""

    def __init__(self, sdpa):
        super().__init__()
        self.sdpa = sdpa
        self.emb = torch.nn.Embedding(50, 32)
        self.qkv = torch.nn.Linear(32, 96)
        self.out = torch.nn.Linear(32, 50)

    def forward(self, ids, targets):
        x = self.emb(ids)
        q, k, v = self.qkv(x).view(*ids.shape, 3, 4, 8).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-1, -2) / 8 ** 0.5
            mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        logits = self.out(y.transpose(1, 2).reshape(*ids.shape, 32) + x)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def token_args(call):
    g = torch.Generator().manual_seed(call)
    return torch.randint(0, 50, (2, 9), generator=g), torch.randint(0, 50, (2, 9), generator=g)


def test_mlp(backend):
    check_training(MLP, lambda: (r(6, 16),), backend=graphjit_backend, **TOL)


def test_conv_batchnorm_running_stats(backend):
    check_training(ConvBN, lambda: (r(4, 3, 8, 8),), backend=graphjit_backend, **TOL)


class BatchNorms(torch.nn.Module):
    """BatchNorm1d over (N, C) and over (N, C, L) (an expanded input), and BatchNorm2d in channels-last
    memory without affine parameters: each in train mode, its statistics computed by the kernels."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.bn1 = torch.nn.BatchNorm1d(8)
        self.bn2 = torch.nn.BatchNorm1d(8, momentum=0.3)
        self.conv = torch.nn.Conv2d(8, 4, 1, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(4, affine=False)

    def forward(self, x):
        y = self.bn2(self.bn1(self.fc(x)).unsqueeze(-1).expand(-1, -1, 3))
        z = self.conv(y.unsqueeze(-1).expand(-1, -1, -1, 5).contiguous(memory_format=torch.channels_last))
        return self.bn3(z).relu()


def test_batch_norm_statistics_are_compiled(backend):
    """Train-mode batch norm is lowered (mean and variance as reductions in the forward's kernels, the
    running statistics updated and written back), not left to ATen's kernel: outputs, gradients and
    running statistics as eager's over three steps."""
    counter, *_ = check_training(BatchNorms, lambda: (r(5, 6) * 3 + 1,), backend=graphjit_backend, **TOL)
    fallbacks = [str(op) for f in counter.compiled_functions() for op, _ in f.graph.fallbacks]
    assert not [op for op in fallbacks if "batch_norm" in op or "var_mean" in op], fallbacks


def test_batch_norm_running_statistics_match_eager_exactly():
    """On the CPU the batch mean is sum / n in eager's accumulate type: the running mean is eager's bit for
    bit, for data far from 0 too, and a batch holding an infinity leaves that channel's running mean
    infinite, as eager's (a mean shifted by the channel's first element, infinite, was NaN)."""
    torch.manual_seed(0)
    eager = torch.nn.BatchNorm2d(3)
    mine = copy.deepcopy(eager)
    compiled = graphjit.compile(mine)
    batches = [torch.randn(4, 3, 5, 5) * 0.01 + 1e4, torch.randn(4, 3, 5, 5)]
    batches[1][0, 1, 0, 0] = math.inf        # the channel's first element
    for x in batches:
        for model in (eager, compiled):
            model(x.clone().requires_grad_()).square().sum().backward()
        assert torch.equal(eager.running_mean, mine.running_mean), (eager.running_mean, mine.running_mean)
    assert math.isinf(mine.running_mean[1])
    assert torch.equal(eager.running_var.isnan(), mine.running_var.isnan())


@pytest.mark.parametrize("how", ["grad", "grad_positional", "backward"])
def test_create_graph_in_the_frame_runs_the_graph_before_it_as_captured(how):
    """A frame that differentiates its gradients again (autograd.grad or backward with create_graph=True
    after a graph): that graph's backward must be differentiable, so it runs as captured; a second
    derivative through it equals eager's (its compiled backward raised)."""
    def f(x):
        y = (x.sin() * x).sum()
        if how == "grad":
            g, = torch.autograd.grad(y, x, create_graph=True)
        elif how == "grad_positional":
            g, = torch.autograd.grad(y, x, None, None, True)
        else:
            y.backward(create_graph=True)
            g = x.grad
        return g.square().sum()
    compiled = graphjit.compile(f)
    for _ in range(2):
        x = torch.randn(5, requires_grad=True)
        expected = f(x)
        expected_second, = torch.autograd.grad(expected, x)
        x.grad = None
        got = compiled(x)
        got_second, = torch.autograd.grad(got, x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_second, expected_second)


class CausalBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.ln, self.out = torch.nn.Linear(16, 48), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(a.transpose(1, 2).reshape(x.shape))


def test_a_training_graph_with_symbolic_sizes_compiles_once():
    """A second batch size and sequence length make the training graph symbolic: AOTAutograd traces it in
    capture's ShapeEnv and both halves compile once for all sizes (not per size), with outputs and
    gradients as eager's over every size."""
    from graphjit.backends.dynamic import PerSize
    torch.manual_seed(0)
    model = CausalBlock()
    reference = copy.deepcopy(model)
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter)
    for batch, length in ((2, 5), (3, 7), (2, 9), (4, 6), (3, 5)):
        x = torch.randn(batch, length, 16)
        got, expected = compiled(x), reference(x)
        assert_same(got, expected, **TOL)
        got.square().mean().backward()
        expected.square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert_same(p.grad, q.grad, where=name, **TOL)
    assert counter.frame_count == 2, counter.frame_count
    assert not any(isinstance(fn, PerSize) for fn in counter.compiled), counter.compiled
    assert not counter.ran_as_captured()


def _loss_and_unreached(x, w, v):
    h = x @ w
    return h.sum(), (h.exp() * float("inf")).sum() + v.sum()


def test_symbolic_training_keeps_none_for_the_gradient_of_an_unreached_output():
    """Two outputs needing gradients, sizes symbolic: a backward from the first leaves the gradient of the
    second absent, not zeros, so v (reached only through it) keeps .grad None and x's gradient has no
    0 * inf; a backward from the second fills the first's with zeros of this call's sizes. One symbolic
    graph for every size, as eager's gradients."""
    from graphjit.backends.dynamic import PerSize
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(_loss_and_unreached, backend=counter)
    for n in (3, 5, 7, 4):
        mine = [r(n, 4).requires_grad_(), r(4, 2).requires_grad_(), r(n).requires_grad_()]
        eager = [t.detach().clone().requires_grad_() for t in mine]
        compiled(*mine)[0].backward()
        _loss_and_unreached(*eager)[0].backward()
        assert mine[2].grad is None and eager[2].grad is None
        compiled(*mine)[1].backward()
        _loss_and_unreached(*eager)[1].backward()
        for a, b in zip(mine, eager):
            assert torch.equal(a.grad.isnan(), b.grad.isnan())
            assert_same(a.grad.nan_to_num(), b.grad.nan_to_num(), **TOL)
    assert counter.frame_count == 2
    assert not any(isinstance(fn, PerSize) for fn in counter.compiled)


def _loss_and_rows(x, w):
    h = x @ w
    return h.sum(), (h * 3).sum(1)


def test_symbolic_training_fills_a_missing_gradient_with_zeros_of_the_calls_sizes(monkeypatch):
    """Where the backward is run with a missing output gradient filled with zeros (past the limit of
    specialized backwards, or where one can't be made), the zeros take this call's sizes, read off the
    backward's other arguments, on every size of one symbolic graph."""
    from graphjit.compiler import training
    compile_variant = training._BackwardOfPresent._compile
    monkeypatch.setattr(training._BackwardOfPresent, "_compile",
                        lambda self, missing: self._filled(missing) if missing else compile_variant(self, missing))
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(_loss_and_rows, backend=counter)
    for n in (3, 5, 7, 4):
        mine = [r(n, 4).requires_grad_(), r(4, 2).requires_grad_()]
        eager = [t.detach().clone().requires_grad_() for t in mine]
        compiled(*mine)[0].backward()
        _loss_and_rows(*eager)[0].backward()
        for a, b in zip(mine, eager):
            assert_same(a.grad, b.grad, **TOL)
    assert counter.frame_count == 2


def _scaled_prefix(x, n):
    return (x[:, :n] * n).sin().sum(1)


def test_a_training_graph_compiled_per_size_compiles_its_forward_with_an_int_argument(monkeypatch):
    """Where the symbolic trace is not taken (per size), AOTAutograd hands the forward half the int argument
    the per-size copy has built in: an input the graph does not read, which the compiler takes (it left
    the forward uncompiled)."""
    from graphjit.backends import registry
    monkeypatch.setattr(registry, "_symbolic_training", lambda *args, **kwargs: None)
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(_scaled_prefix, backend=counter, dynamic=True)
    for b, n in ((3, 4), (5, 2), (4, 3)):
        x = r(b, 6).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        compiled(x, n).sum().backward()
        _scaled_prefix(x2, n).sum().backward()
        assert_same(x.grad, x2.grad, **TOL)
    assert not counter.ran_as_captured()


class CrossEntropy(torch.nn.Module):
    def __init__(self, spatial, **options):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 11, 1) if spatial else torch.nn.Linear(8, 11)
        self.options = options

    def forward(self, x, y):
        return F.cross_entropy(self.proj(x), y, **self.options)


@pytest.mark.parametrize("options", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3},
                                     {"weight": "random"}, {"label_smoothing": 0.1}, {"spatial": True}],
                         ids=lambda o: ",".join(o) or "mean")
def test_cross_entropy_gradient_is_one_pointwise_kernel(options):
    """nll_loss's backward (decompose._nll_loss_backward) is pointwise where the class is the target: no
    zero fill and scatter into a tensor of the logits' size; gradients as eager's for each reduction,
    ignored targets, class weights, label smoothing and spatial (nll_loss2d) targets."""
    options = dict(options)
    spatial = options.pop("spatial", False)
    if options.get("weight") == "random":
        options["weight"] = torch.rand(11, generator=torch.Generator().manual_seed(5)) + 0.1

    def args(call):
        g = torch.Generator().manual_seed(call)
        if spatial:
            return torch.randn(2, 3, 4, 4, generator=g), torch.randint(0, 11, (2, 4, 4), generator=g)
        return torch.randn(20, 8, generator=g), torch.randint(0, 11, (20,), generator=g)
    counter, *_ = check_training(lambda: CrossEntropy(spatial, **options), args, backend=graphjit_backend,
                                 loss=lambda out: out.sum(), **TOL)
    externs = [str(getattr(item, "op", "")) for f in counter.compiled_functions() for item in f.items]
    assert not [op for op in externs if "scatter" in op], externs


class Checkpointed(torch.nn.Module):
    """Residual MLP blocks, each under torch.utils.checkpoint (or not), a dropout inside the first."""

    def __init__(self, checkpoint=True, reentrant=False, p=0.0):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.LayerNorm(16), torch.nn.Linear(16, 48), torch.nn.GELU(), torch.nn.Dropout(p if i == 0 else 0.0),
            torch.nn.Linear(48, 16)) for i in range(3))
        self.checkpoint, self.reentrant = checkpoint, reentrant

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for block in self.blocks:
            x = x + (checkpoint(block, x, use_reentrant=self.reentrant) if self.checkpoint else block(x))
        return x


def _returned_by_forward(counter):
    """The nodes the forward halves return (outputs and what they save for the backward)."""
    return [leaf for f in counter.compiled for h in getattr(f, "graphjit_halves", ()) if h.which == "forward"
            for leaf in torch.utils._pytree.tree_leaves([n.args for n in h.graph.graph.nodes if n.op == "output"])]


def _saved_by_forward(counter):
    """How many tensors the forward halves return."""
    return len(_returned_by_forward(counter))


def test_activation_checkpoint_recomputes_in_backward():
    """torch.utils.checkpoint(use_reentrant=False) is captured in the graph (no break), gradients are
    eager's, and the forward saves fewer tensors than without it: the partitioner recomputes the
    checkpointed blocks in the backward."""
    counter, *_ = check_training(Checkpointed, lambda: (r(8, 16),), backend=graphjit_backend, **TOL)
    plain, *_ = check_training(lambda: Checkpointed(checkpoint=False), lambda: (r(8, 16),),
                               backend=graphjit_backend, **TOL)
    assert _saved_by_forward(counter) < _saved_by_forward(plain)


class UpcastNormalizations(torch.nn.Module):
    """bfloat16 logits made float32 (as transformers' losses do under autocast): a cross-entropy of them and
    a softmax of a slice of them."""

    def __init__(self, returns_logits=False):
        super().__init__()
        self.a, self.head = torch.nn.Linear(16, 32), torch.nn.Linear(32, 40)
        self.returns_logits = returns_logits

    def forward(self, x, targets):
        logits = self.head(torch.relu(self.a(x)))
        probs = logits[:, :-1, :].float().softmax(-1)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) + (probs * probs).sum()
        return (loss, logits) if self.returns_logits else loss


@pytest.mark.parametrize("returns_logits", [False, True], ids=["loss", "loss_and_logits"])
def test_upcast_normalizations_are_recomputed_not_saved(returns_logits):
    """Under bf16 autocast the forward saves the bfloat16 logits, not the float32 log_softmax and softmax
    of them (compiler/training._partition): the backward recomputes those, and gradients are eager's. The
    same where the forward also returns the bfloat16 logits (a model's output beside its loss: HF's
    causal LMs)."""
    def args(call):
        g = torch.Generator().manual_seed(call)
        return torch.randn(3, 6, 16, generator=g), torch.randint(0, 40, (3, 6), generator=g)
    counter, *_ = check_training(lambda: UpcastNormalizations(returns_logits), args, backend=graphjit_backend,
                                 loss=(lambda out: out[0]) if returns_logits else (lambda out: out),
                                 context=lambda: torch.autocast("cpu", dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    saved = [n.meta["val"] for n in _returned_by_forward(counter) if isinstance(n, torch.fx.Node)]
    assert saved
    wide = [tuple(v.shape) for v in saved if isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.numel() >= 3 * 5 * 40]
    assert not wide, wide
    narrow = [tuple(v.shape) for v in saved if isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 and v.numel() >= 3 * 6 * 40]
    assert narrow, [(tuple(v.shape), v.dtype) for v in saved if isinstance(v, torch.Tensor)]


class ConvolutionStack(torch.nn.Module):
    """Convolutions left in the default layout: two 3x3 ones, a depthwise and a 1x1 one (whose weights
    are dense in both layouts)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.pointwise = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv1(x)))
        h = self.conv2(self.depthwise(h)) + h
        return self.pointwise(h)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16_autocast"])
def test_convolution_weights_take_the_layout_of_a_channels_last_input_once(autocast):
    """Channels-last images through convolutions whose weights are contiguous: the forward makes a
    channels-last copy of each 3x3 weight once and saves it for the backward (training.
    _convolution_weights_in_input_layout), where oneDNN would copy the weight into the input's layout in
    each convolution and again in each convolution_backward. Results, gradients and the optimizer's
    updates are eager's; the depthwise and 1x1 weights, dense in both layouts, are saved as they were."""
    def images(call):
        return (torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(call))
                .contiguous(memory_format=torch.channels_last),)
    context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else None
    tol = dict(atol=2e-2, rtol=2e-2) if autocast else TOL
    projection = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(7))
    counter, *_ = check_training(ConvolutionStack, images, backend=graphjit_backend, context=context,
                                 loss=lambda out: (out.float() * projection).mean(), **tol)
    saved = [n.meta["val"] for n in _returned_by_forward(counter)
             if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)]
    weights = {tuple(v.shape): v for v in saved if tuple(v.shape) in {(8, 3, 3, 3), (8, 8, 3, 3), (8, 1, 3, 3)}}
    assert set(weights) == {(8, 3, 3, 3), (8, 8, 3, 3), (8, 1, 3, 3)}, [tuple(v.shape) for v in saved]
    for shape in ((8, 3, 3, 3), (8, 8, 3, 3)):
        w = weights[shape]
        assert w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous(), (shape, w.stride())
    assert weights[(8, 1, 3, 3)].stride() == (9, 9, 3, 1)


class UpcastCrossEntropy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(16, 300)

    def forward(self, x, targets):
        logits = self.head(x)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def test_cross_entropy_backward_stores_no_logits_sized_intermediate():
    """The backward of a cross-entropy of upcast logits allocates one logits-sized buffer, the gradient it
    returns: the one-hot gradient (read by a row sum and by the output, loading only labels and scalars)
    is recomputed in both (scheduler.realize_reason counts reads along the last dim), not stored in float32."""
    import re

    def args(call):
        g = torch.Generator().manual_seed(call)
        return torch.randn(3, 8, 16, generator=g), torch.randint(0, 300, (3, 8), generator=g)
    counter, *_ = check_training(UpcastCrossEntropy, args, backend=graphjit_backend, loss=lambda out: out,
                                 context=lambda: torch.autocast("cpu", dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    (backward,) = [h.compiled for f in counter.compiled for h in f.graphjit_halves if h.which == "backward"]
    shapes = [tuple(int(v) for v in m.split(",") if v.strip())
              for m in re.findall(r"empty_cpu\(\(([\d, ]*)\)", backward.wrapper_source)]
    assert len([s for s in shapes if math.prod(s) >= 24 * 300]) == 1, backward.wrapper_source


class LanguageModelHead(UpcastCrossEntropy):
    """float32 logits of a vocabulary and their cross-entropy, returned beside the loss (HF's LM heads)."""

    def forward(self, x, targets):
        logits = self.head(x)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


def test_float32_log_softmax_saves_row_statistics():
    """A float32 cross-entropy's log_softmax is partitioned as its ops (training._log_softmax_by_row_statistics):
    the forward saves the row max and log-sum, not a logits-sized log_softmax beside the logits it returns,
    and gradients are eager's."""
    def args(call):
        g = torch.Generator().manual_seed(call)
        return torch.randn(3, 8, 16, generator=g), torch.randint(0, 300, (3, 8), generator=g)
    counter, *_ = check_training(LanguageModelHead, args, backend=graphjit_backend, loss=lambda out: out[0], **TOL)
    returned = {n for n in _returned_by_forward(counter) if isinstance(n, torch.fx.Node)}
    wide = [n for n in returned if isinstance(n.meta["val"], torch.Tensor) and n.meta["val"].numel() >= 24 * 300]
    assert len(wide) == 1, wide      # the logits: an output, and saved


class ScaledDropout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(lambda t: F.dropout(t * self.w, 0.5, training=True), x, use_reentrant=False)


def test_random_ops_in_a_checkpoint_are_saved_not_redrawn():
    """A dropout inside a checkpointed region is not tagged for recomputation: the backward uses the mask
    the forward drew. out = mask * x * w / (1 - p), so w's gradient of out.sum() is (out / w).sum(0); a
    mask drawn again in the backward would give another."""
    torch.manual_seed(0)
    model = ScaledDropout()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter, fullgraph=True)
    for _ in range(2):
        x = r(64, 32)
        out = compiled(x)
        out.sum().backward()
        assert_same(model.w.grad, (out.detach() / model.w.detach()).sum(0), where="w.grad", atol=1e-5, rtol=1e-5)
        assert 0.3 < (out == 0).float().mean() < 0.7
        model.w.grad = None
    assert not counter.ran_as_captured()


@pytest.mark.parametrize("name, fn", [
    ("exp", lambda x, w: (x.exp() * w, x.add_(1))[0].sum()),
    ("view", lambda x, w: (x.view(3, 2).sin() * w.view(3, 2), x.sub_(0.5))[0].sum()),
    ("read_by_backward", lambda x, w: ((x + 0) * w * x.cos(), x.mul_(2))[0].sum()),
])
def test_an_input_the_forward_writes_is_saved_as_it_was_before_the_write(backend, name, fn):
    """x needs no gradient, is read, then written by the graph: w's gradient reads x's value before the
    write, as eager's saved tensors hold it. The partitioner saves the input itself to recompute exp(x) in
    the backward (or for the backward to read), which after the forward holds the written values: the
    forward saves a copy instead."""
    compiled = graphjit.compile(fn, backend=graphjit_backend)
    for call in range(3):
        x = torch.linspace(-1, 1, 6) + call
        w = r(6)
        xe, xc = x.clone(), x.clone()
        we, wc = w.clone().requires_grad_(), w.clone().requires_grad_()
        loss_e = fn(xe, we)
        loss_e.backward()
        loss_c = compiled(xc, wc)
        loss_c.backward()
        assert_same(loss_c, loss_e, where="loss", **TOL)
        assert_same(wc.grad, we.grad, where="w.grad", **TOL)
        assert_same(xc, xe, where="x after the call")


def test_reentrant_checkpoint_breaks_and_matches_eager():
    """The reentrant form runs at a graph break (its gradients differ from inlined code's when no input
    requires grad), with eager's results."""
    check_training(lambda: Checkpointed(reentrant=True), lambda: (r(8, 16).requires_grad_(),), backend=graphjit_backend,
                   compile_kwargs={"fullgraph": False}, graphs=None, fallback=True, **TOL)


def test_regional_compilation_compiles_a_repeated_block_once():
    """Each of N identical blocks compiled on its own (regional compilation): their parameters are graph
    inputs, not constants, so the blocks share one compiled graph (a second for the first block, whose
    input needs no gradient); gradients and parameters over three SGD steps (small ones: the step must not magnify rounding) match the uncompiled model's."""
    import copy
    torch.manual_seed(0)
    eager = Checkpointed(checkpoint=False)
    model = copy.deepcopy(eager)
    counter = CompileCounter(graphjit_backend)
    for i, block in enumerate(model.blocks):
        model.blocks[i] = graphjit.compile(block, backend=counter)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (eager, model)]
    for step in range(3):
        x = r(8, 16)
        for m, opt in zip((eager, model), optimizers):
            (m(x) * torch.linspace(-1, 1, 16)).sum().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            assert_same(q.grad, p.grad, where=f"step {step}: {name}.grad", **TOL)
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
    assert len(counter.compiled) == 2, counter
    assert not counter.ran_as_captured()


@pytest.mark.parametrize("sdpa", [False, True], ids=["by-hand", "sdpa"])
def test_attention_cross_entropy(backend, sdpa):
    check_training(lambda: TinyAttention(sdpa), token_args, backend=graphjit_backend, loss=lambda out: out,
                   **TOL)


def test_gradient_of_an_input():
    """An argument that requires grad gets eager's gradient (the backward graph returns it)."""
    check_training(MLP, lambda: (r(6, 16).requires_grad_(),), backend=graphjit_backend, **TOL)


class NoGradInside(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.no_grad():
            scale = self.a(x).abs().mean() + 1      # no gradient reaches a's parameters
        return self.b(x) * scale


def test_no_grad_region_inside_the_graph():
    _, _, eager, compiled = check_training(NoGradInside, lambda: (r(4, 8),), backend=graphjit_backend, **TOL)
    assert compiled.a.weight.grad is None and eager.a.weight.grad is None


class AutocastInside(torch.nn.Module):
    """bf16 autocast around the first layer; enable_grad: an enable_grad block around a multiplication."""

    def __init__(self, enable_grad=False):
        super().__init__()
        self.enable_grad = enable_grad
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.relu(self.a(x))
        if self.enable_grad:
            with torch.enable_grad():
                h = h * 2
        return self.b(h.float())


def test_autocast_region_inside_the_graph():
    """bf16 autocast in the forward: AOTAutograd applies it while tracing, so both halves compile."""
    check_training(AutocastInside, lambda: (r(8, 16),), backend=graphjit_backend, atol=2e-2, rtol=2e-2)


def test_frozen_parameters_recompile():
    """requires_grad is guarded: freezing a layer between steps recompiles, and its parameters then get
    no gradient, as in eager."""
    torch.manual_seed(0)
    eager = MLP()
    model = MLP()
    model.load_state_dict(eager.state_dict())
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter)
    for step in range(3):
        if step == 2:
            for m in (eager, model):
                m.fc1.requires_grad_(False)
                m.zero_grad(set_to_none=True)
        x = r(5, 16)
        assert_same(compiled(x).square().sum(), eager(x).square().sum(), where=f"step {step}", **TOL)
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            assert_same(p.grad, q.grad, where=f"step {step}: {name}.grad", **TOL)
    assert counter.frame_count == 2
    assert not counter.ran_as_captured()


def test_new_batch_sizes_with_dynamic_true():
    """dynamic=True: the captured graph has a symbolic batch; training compiles per batch size, each
    matching eager."""
    counter, *_ = check_training(MLP, lambda call: (r((3, 5, 7)[call], 16),), backend=graphjit_backend,
                                 compile_kwargs={"dynamic": True}, graphs=1, **TOL)


def test_dropout_statistics_and_gradient():
    """Dropout in train mode draws its mask inside the compiled forward: about p of the elements are
    zero, the others scaled by 1/(1-p), and the gradient flows through exactly the kept elements."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Dropout(0.25)).train()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter)
    x = r(128, 64)
    out = compiled(x)
    dense = model[0](x)
    kept = out != 0
    assert 0.22 < 1 - kept.float().mean().item() < 0.28
    assert_same(out[kept], dense[kept] / 0.75, where="kept elements", **TOL)
    upstream = r(*out.shape)
    (grad,) = torch.autograd.grad(out, model[0].weight, upstream)
    expected = (upstream * kept / 0.75).t() @ x
    assert_same(grad, expected, where="weight gradient", atol=1e-4, rtol=1e-4)
    assert not counter.ran_as_captured()


def test_gradient_accumulation_over_two_calls():
    """Two forward/backward passes before one optimizer step: gradients add up as in eager."""
    torch.manual_seed(0)
    eager = ConvBN()
    model = ConvBN()
    model.load_state_dict(eager.state_dict())
    compiled = graphjit.compile(model, backend=graphjit_backend)
    for step in range(2):
        x = r(2, 3, 8, 8)
        compiled(x).square().mean().backward()
        eager(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_same(p.grad, q.grad, where=f"accumulated {name}.grad", **TOL)
    assert_same(model.state_dict(), eager.state_dict(), where="state_dict", **TOL)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad-mode-on"])
def test_inference_graph_changing_autocast_and_grad_mode_compiles(backend, grad):
    """An eval graph that enters autocast and enable_grad mid-graph goes through AOTAutograd as one
    inference graph (no input requires grad) and compiles, with eager's results (bf16 rounding)."""
    from graphjit import testing
    model = AutocastInside(enable_grad=True).eval().requires_grad_(False)
    testing.check(model, lambda: (r(8, 16),), backend=graphjit_backend, atol=2e-2, rtol=2e-2,
                  context=lambda: torch.set_grad_enabled(grad))



def test_writes_into_inputs_that_share_memory_run_as_captured():
    """A graph that needs gradients and writes into an input that is a strided view of another input (the
    other also read): AOTAutograd's write-back of such inputs differed from eager's (fuzz seed 4100065);
    such a call runs the graph as captured."""
    def f(w, a, b):
        scaled = torch.tensor(1.5) * w
        b.copy_(b.flip(0))
        scaled.gt(scaled).clamp(min=a)
        return b.split(2, 0)[-1]
    for n in (4, 7, 16):
        results = []
        for fn in (graphjit.compile(f, backend=graphjit_backend), f):
            w = torch.tensor(0.5).requires_grad_()
            a = torch.arange(n) % 3 == 0
            results.append((fn(w, a, a[::2]), a))
        assert_same(results[0], results[1], where=f"{n} elements")
        graphjit.reset()


def test_a_write_functionalization_refuses_runs_as_captured_quietly():
    """A graph needing gradients that writes through an expanded bool tensor: AOTAutograd's
    functionalization raises (torch.compile raises too). It runs as captured, with eager's result, no
    warning, and no traceback logged by torch's fake-tensor logger (fuzz grad 8101105)."""
    import logging
    import warnings

    records = []

    class Recording(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    handler = Recording(level=logging.DEBUG)
    logger.addHandler(handler)

    def f(x):
        v = x.to(dtype=torch.bool).clone()
        v.expand(2, *v.shape)[0] = 1e20
        return v, x * 2

    compiled = graphjit.compile(f, backend=graphjit_backend)
    try:
        for n in (1, 3):
            x = torch.randn(n, requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = compiled(x)
            assert not [str(c.message) for c in caught if "graphjit" in str(c.message)]
            assert_same(got, f(x), where=f"{n} elements")
    finally:
        logger.removeHandler(handler)
    assert not [m for m in records if m.startswith("failed while attempting to run meta")], records


@pytest.mark.parametrize("augmented", [True, False], ids=["operator", "method"])
def test_an_augmented_assignment_functionalization_refuses_runs_as_captured_quietly(augmented):
    """`v += 3.0` (operator.iadd in the captured graph) through an as_strided view of a graph value, inputs
    needing gradients: AOTAutograd's functionalization refuses the write; the graph runs as captured
    with eager's results and gradients and no warning, as for the add_ method (fuzz grad 17700591)."""
    import torch.nn.functional as F
    import warnings

    def f(x):
        pooled = F.adaptive_avg_pool1d(x, 2)
        view = torch.as_strided(pooled, (4,), (1,))
        if augmented:
            view += 3.0
        else:
            view.add_(3.0)
        return pooled * x[..., :2]

    compiled = graphjit.compile(f, backend=graphjit_backend)
    for call in range(2):
        results = []
        for fn in (compiled, f):
            x = torch.randn(2, 2, 5, generator=torch.Generator().manual_seed(call)).requires_grad_()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = fn(x)
            assert not [str(c.message) for c in caught if "graphjit" in str(c.message)]
            out.sum().backward()
            results.append((out, x.grad))
        assert_same(results[0], results[1], where=f"call {call}")


@pytest.mark.parametrize("op", ["sgn", "sign"])
def test_a_gradient_that_is_a_constant_zero(op):
    """sgn's gradient is an efficient zero tensor (no storage) that AOTAutograd's trace makes a constant of
    the backward; its deepcopy of the backward module raised at the first backward (torch.compile raises
    too; fuzz grad 9100128). The gradient is eager's zeros, on several calls."""
    def f(x):
        return getattr(x.squeeze(0).flatten(), op)() * 2
    compiled = graphjit.compile(f, backend=graphjit_backend)
    for n in (1, 3, 3):
        grads = []
        for fn in (compiled, f):
            x = torch.randn(2, n, 1, dtype=torch.float64, requires_grad=True)
            out = fn(x)
            out.sum().backward()
            grads.append((out.detach(), x.grad))
        assert_same(grads[0][1], grads[1][1], where=f"gradient, n={n}")


def test_group_norm_of_an_empty_input_needing_gradients():
    """group_norm over a zero-size spatial dim with inputs requiring grad: torch's decomposition of its
    backward (and so its fake-tensor meta) divides by H * W = 0 while AOTAutograd traces (torch.compile
    raises there). The graph runs as captured, with eager's results and gradients (or, where eager raises
    on HxW = 0, as torch 2.14's group_norm does, the same error) and no warning (fuzz grad 9100852)."""
    import warnings

    def f(x, w):
        return F.group_norm(x, x.shape[1], w, None)
    compiled = graphjit.compile(f, backend=graphjit_backend)
    for spatial in (0, 0):
        results = []
        for fn in (compiled, f):
            x = torch.randn(1, 3, spatial, 1, requires_grad=True)
            w = torch.randn(3, requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    out = fn(x, w)
                    out.sum().backward()
                except RuntimeError as e:        # torch 2.14: group_norm raises on HxW = 0
                    results.append(("raised", str(e)))
                    continue
                finally:
                    assert not [str(c.message) for c in caught if "graphjit" in str(c.message)]
            results.append((out.detach(), x.grad, w.grad))
        assert_same(results[0], results[1], where=f"spatial {spatial}")


def test_log_softmax_of_a_0d_value_needing_gradients_compiles():
    """log_softmax over dim -1 of a 0-d value (a product reduced to one number) needing gradients: no row
    to write out as row statistics (training._log_softmax_by_row_statistics read its size at dim -1 and
    raised, the backend failing with a warning). Compiled, with eager's results and gradients (fuzz grad
    18700552)."""
    import warnings

    def f(x):
        v = x[torch.tensor([1, 0, 1])].prod(-1)
        return F.log_softmax(F.log_softmax(v * 3, dim=-1), dim=0) + v
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(f, backend=counter)
    for call in range(2):
        results = []
        for fn in (compiled, f):
            x = torch.randn(2, dtype=torch.float64, generator=torch.Generator().manual_seed(call)).requires_grad_()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = fn(x)
                out.backward()
            assert not [str(c.message) for c in caught if "graphjit" in str(c.message)]
            results.append((out.detach(), x.grad))
        assert_same(results[0], results[1], where=f"call {call}")
    assert counter.frame_count == 1


def test_sgn_of_an_einsum_needing_gradients_runs_as_captured_without_a_warning():
    """sgn's zero gradient (an efficient zero tensor) reaching einsum's permutes: AOTAutograd's joint trace
    meets a real tensor in the fake mode and asserts (torch.compile raises there). The graph runs as
    captured, with eager's results and gradients and no warning (fuzz grad 15900114)."""
    import warnings

    def f(x):
        return torch.einsum('...ij,...kj->...ik', x, x).sgn() + x.sum()
    compiled = graphjit.compile(f, backend=graphjit_backend)
    results, x0 = [], torch.randn(1, 1, 2, dtype=torch.float64)
    for fn in (compiled, f):
        x = x0.clone().requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fn(x)
            out.sum().backward()
        assert not [str(c.message) for c in caught if "graphjit" in str(c.message)]
        results.append((out.detach(), x.grad))
    assert_same(results[0], results[1])


@pytest.mark.parametrize("model, retraced", [(MLP, 0), (ConvBN, 2)], ids=["mlp", "conv_bn"])
def test_halves_are_not_traced_again_where_a_trace_would_change_nothing(monkeypatch, model, retraced):
    """Both halves of an MLP's training graph (no writes, no op EAGER_LAYOUTS lays out) are taken as
    AOTAutograd traced them; those of a train-mode BatchNorm model (batch norm is laid out in eager's
    layout) are traced again. Gradients are eager's either way."""
    from graphjit.compiler import decompose
    traces = []
    real = decompose.make_fx
    monkeypatch.setattr(decompose, "make_fx", lambda *a, **k: traces.append(1) or real(*a, **k))
    shape = (8, 16) if model is MLP else (2, 3, 8, 8)
    check_training(model, lambda: (r(*shape),), backend=graphjit_backend, **TOL)
    assert len(traces) == retraced


def abs_in_place(v):
    return v.abs_() * 2


def test_an_input_needing_gradients_written_in_place_runs_as_captured():
    """A graph writing in place into an input that needs gradients (an activation handed over a graph
    break): AOTAutograd saves the input for abs_'s backward, then writes the new value back into it, so
    the backward raised "modified by an inplace operation" (fuzz grad 10100058; torch.compile raises too).
    Such a graph runs as captured: eager's gradients."""
    for compiled_run in (False, True):
        graphjit.reset()
        counter = CompileCounter(graphjit_backend)
        fn = graphjit.compile(abs_in_place, backend=counter) if compiled_run else abs_in_place
        torch.manual_seed(0)
        a, b = r(4, 3).requires_grad_(), r(3, 5).requires_grad_()
        out = fn(a @ b)
        out.sum().backward()
        if not compiled_run:
            expected = out.detach(), a.grad, b.grad
    assert_same(out.detach(), expected[0], where="out")
    assert_same(a.grad, expected[1], where="a.grad")
    assert_same(b.grad, expected[2], where="b.grad")
    assert counter.ran_as_captured() == [0]


def scale_in_place(x, w):
    w.mul_(x)
    return w * 2


def test_a_value_needing_gradients_written_into_an_input_runs_as_captured():
    """w.mul_(x), x needing gradients and w not: AOTAutograd saves w for mul's backward and writes the new
    value back into w outside the forward, so the backward raised a false "modified by an inplace
    operation" (torch.compile's aot_eager raises too). Such a graph runs as captured: eager's gradients."""
    results = []
    for compiled_run in (False, True):
        graphjit.reset()
        counter = CompileCounter(graphjit_backend)
        fn = graphjit.compile(scale_in_place, backend=counter) if compiled_run else scale_in_place
        torch.manual_seed(0)
        x, w = r(3).requires_grad_(), r(3)
        out = fn(x, w)
        out.sum().backward()
        results.append((out.detach(), w.detach(), w.requires_grad, x.grad))
    assert_same(results[1][:2], results[0][:2], where="out, w")
    assert results[1][2] is results[0][2] is True
    assert_same(results[1][3], results[0][3], where="x.grad")
    assert counter.ran_as_captured() == [0]


def fill_through_an_expand(mask, x):
    y = mask.to(torch.uint8).to(mask.dtype) ** 3          # int64, needing no gradient
    y.expand(2, *y.shape).masked_fill_(mask, -3)         # each element of y written twice, eager keeps -3
    return y, x * 2


def test_a_write_through_an_expand_in_a_graph_needing_gradients_runs_as_captured():
    """AOTAutograd's functionalization replays a write through an expand as base + the written deltas summed
    over the expanded dim: -3 written twice into 1 gave -7 (fuzz grad 10100884; eager: -3). Such a graph runs
    as captured, as the inference path does (decompose.check_writes_through_overlaps)."""
    import warnings
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    mask = torch.tensor([[[True], [False], [True], [True]]])
    x = r(3).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # masked_fill_ on an expanded tensor is deprecated
        expected = fill_through_an_expand(mask, x)
        actual = graphjit.compile(fill_through_an_expand, backend=counter)(mask, x)
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
    assert counter.ran_as_captured() == [0]


def floor_divided_before_a_break(x, w):
    h = x @ w
    q = x[:, :2] // h[:, :2]         # floor_divide has no derivative: eager raises only if a backward reaches it
    print("break", file=io.StringIO())
    return h.exp(), q


def test_an_op_without_a_derivative_runs_as_captured():
    """A floor_divide of values needing gradients, live across a graph break: AOTAutograd's joint trace
    raised "derivative for aten::floor_divide is not implemented" (a backend-failure warning, and at a second
    set of sizes an error in the user's program: fuzz grad 10101142). The graph runs as captured, with
    eager's values and gradients, and no warning."""
    import warnings
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(floor_divided_before_a_break, backend=counter)
    for rows in (3, 5):
        torch.manual_seed(rows)
        x, w = r(rows, 4).requires_grad_(), r(4, 4).requires_grad_()
        expected = floor_divided_before_a_break(x, w)
        expected[0].sum().backward()
        grads, x.grad, w.grad = (x.grad, w.grad), None, None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            actual = compiled(x, w)
        actual[0].sum().backward()
        assert_same(actual[0].detach(), expected[0].detach(), where="h.exp()")
        assert torch.equal(actual[1], expected[1])
        assert_same(x.grad, grads[0], where="x.grad")
        assert_same(w.grad, grads[1], where="w.grad")
    assert 0 in counter.ran_as_captured()


def detached_floor_divide(x, w):
    v = torch.clamp(x @ w, x.amax(), None)
    return (v // v).split(2, 0)[0].detach(), (x // 2).detach()


def detached_floor_divide_beside_a_view(x, w):
    return x[:2], *detached_floor_divide(x, w)


@pytest.mark.parametrize("fn", [detached_floor_divide, detached_floor_divide_beside_a_view])
def test_an_op_without_a_derivative_whose_results_are_detached_runs_as_captured(fn):
    """floor_divide of values needing gradients, its results detached: eager's backward never reaches it,
    AOTAutograd's joint trace raised for its missing derivative and the backend warned it failed (fuzz
    grad 16500121). The graph runs as captured, with eager's values and gradients and no warning."""
    import warnings
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(fn, backend=counter)
    for rows in (3, 5, 3):
        results = []
        for f in (fn, compiled):
            torch.manual_seed(rows)
            x, w = r(rows, 4).requires_grad_(), r(4, 4).requires_grad_()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = f(x, w)
            if out[0].requires_grad:
                out[0].sum().backward()
            results.append((out, x.grad))
        for got, want in zip(*[out for out, _ in results]):
            assert_same(got.detach(), want.detach(), where="result")
            assert got.requires_grad == want.requires_grad
        assert (results[0][1] is None) == (results[1][1] is None)
        if results[0][1] is not None:
            assert_same(results[1][1], results[0][1], where="x.grad")
    assert counter.ran_as_captured() and counter.frame_count == 2


def divided_by_an_integer_tensor(x, k):
    h = x * 2
    q = torch.addcdiv(h, h, k, value=2)    # its gradient for h divides an int64 tensor in place: eager raises
    return h.exp(), q                      # only if a backward reaches q


def test_a_gradient_formula_eager_refuses_runs_as_captured():
    """addcdiv by an int64 tensor needing no gradient: its derivative formula for the dividend computes
    value / k as an int64 tensor filled with value, then divided in place, which raises. Eager raises only
    if a backward reaches the addcdiv; AOTAutograd's joint trace (torch 2.13) raised at once, and the
    backend warned it failed (fuzz grad 15100652). Eager's backward run on fakes raises too, so the graph
    runs as captured, with eager's values and gradients, and no warning."""
    import warnings
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(divided_by_an_integer_tensor, backend=counter)
    x, k = r(3, 4).requires_grad_(), torch.tensor([1, -2, 3, 1])

    def gradients(out):
        first = torch.autograd.grad(out[0].sum(), x, retain_graph=True)[0]
        try:
            return first, torch.autograd.grad(out[1].sum(), x)[0]
        except RuntimeError as e:
            return first, str(e)
    expected = divided_by_an_integer_tensor(x, k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actual = compiled(x, k)
    # where the graph compiles (torch 2.11), its exp may be an ulp from eager's vectorized one
    assert_same(actual[0].detach(), expected[0].detach(), where="h.exp()", atol=None, rtol=None)
    assert_same(actual[1].detach(), expected[1].detach(), where="addcdiv")
    (first, second), (first_e, second_e) = gradients(actual), gradients(expected)
    assert_same(first, first_e, where="x's gradient from h.exp()", atol=None, rtol=None)
    if counter.ran_as_captured() == [0]:
        assert second == second_e
    else:   # torch 2.11: the functionalized trace copies the quotient into the int64 tensor, where eager's
        assert torch.__version__ < "2.13"     # in-place division raises: a gradient where eager raises


def sorted_twice(x):
    s = x.sort(0).values
    return x.msort(), s, s[1:]


def test_outputs_merged_by_aotautograd_come_back_as_separate_tensors():
    """x.msort() and x.sort(0).values are one computation to AOTAutograd's common-subexpression elimination:
    the compiled graph returned one tensor for both outputs (fuzz grad 10100668), where eager returns two;
    the lone one comes back as a copy, and an output that views another (the slice) still views it."""
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(sorted_twice, backend=counter)
    for n in (6, 9):        # the second size recompiles with a symbolic size
        x = r(n).requires_grad_()
        a, b, c = compiled(x)
        ea, eb, ec = sorted_twice(x)
        assert torch.equal(a, ea) and torch.equal(b, eb) and torch.equal(c, ec)
        storage = lambda t: t.untyped_storage().data_ptr()     # noqa: E731
        assert storage(a) != storage(b) and storage(c) == storage(b)
        (a.sum() + 2 * b.sum()).backward()
        assert_same(x.grad, torch.full((n,), 3.0), where="x.grad")
    assert not counter.ran_as_captured()


def flattened_transpose(x):
    w = torch.where(x == x.amax(), x, 2)
    return w.mT.flatten() ** 3


def test_a_saved_view_keeps_its_traced_strides():
    """The forward saves w.mT for the backward, which views it flat: w (of a transposed input) is laid out
    like the input in eager, so w.mT is contiguous; realized in dense strides, w.mT was not, and the
    backward raised "view size is not compatible" (fuzz grad 10600281)."""
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(flattened_transpose, backend=counter)
    for n in (2, 3):
        x = r(n, n).t().requires_grad_()
        out = compiled(x)
        out.sum().backward()
        grad, x.grad = x.grad, None
        expected = flattened_transpose(x)
        expected.sum().backward()
        assert_same(out.detach(), expected.detach(), where="out")
        assert_same(grad, x.grad, where="x.grad")
    assert not counter.ran_as_captured()


def sign_of_addmm(bias, a, b):
    return torch.addmm(bias, a, b.t(), beta=0.5).sgn()


def test_a_backward_zero_tensor_is_a_constant():
    """sgn's gradient is an efficient zero tensor, which has no storage; the backward scaled and summed it
    for the bias's gradient, and the kernel handed its data pointer read address 0 (fuzz grad 11000352,
    a segfault)."""
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(sign_of_addmm, backend=counter)
    for n in (1, 3):
        inputs = [r(n).requires_grad_(), r(n, n).requires_grad_(), r(n, n).requires_grad_()]
        out = compiled(*inputs)
        out.sum().backward()
        grads = [t.grad for t in inputs]
        for t in inputs:
            t.grad = None
        expected = sign_of_addmm(*inputs)
        expected.sum().backward()
        assert_same(out.detach(), expected.detach(), where="out")
        for i, (got, t) in enumerate(zip(grads, inputs)):
            assert_same(got, t.grad, where=f"grad {i}")
    assert not counter.ran_as_captured()


def test_a_write_into_part_of_an_overlapping_as_strided_needing_gradients():
    """As test_view_writes' (fuzz 16301109) in a training graph: AOTAutograd's functionalization writes the
    whole as_strided view back, which eager's as_strided_scatter refuses; the graph runs as captured,
    with eager's results and gradients."""
    def f(x):
        v = (x * 1).as_strided((1, 3), (0, 0), 1)
        v[:, 0].sub_(1.5)
        return v * x[0]

    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(f, backend=counter)
    for call in range(3):
        results = []
        for fn in (f, compiled):
            x = torch.linspace(-1, 2, 2).view(2, 1).add(call).requires_grad_()
            out = fn(x)
            out.sum().backward()
            results.append((out.detach(), x.grad))
        assert_same(results[1][0], results[0][0], where="out")
        assert_same(results[1][1], results[0][1], where="gradient")
    assert counter.frame_count == 1


def written_through_a_view_after_a_break(x):
    any_ = x.any()
    y = x * 2
    y.view(-1)[any_] = float("nan")      # a 0-d bool index: a graph break, the write runs in CPython
    return y * 3


@pytest.mark.parametrize("n", [1, 4])
def test_a_write_through_a_view_of_an_output_after_a_break(n):
    """The graph before the break returns `y` and `y.view(-1)`; the compiled forward returned y as a view
    of the buffer of the view, made inside AOTAutograd's autograd Function, and the write through the view
    raised "a view created inside a custom Function ... modified inplace" (fuzz grad 16800347). Against
    eager: values and gradients, several calls."""
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(written_through_a_view_after_a_break, backend=counter)
    for call in range(3):
        results = []
        for f in (written_through_a_view_after_a_break, compiled):
            x = torch.linspace(-1, 1 + call, n).requires_grad_()
            out = f(x)
            out.nan_to_num(0.0).sum().backward()
            results.append((out.detach(), x.grad))
        assert_same(results[1][0], results[0][0], where="out")
        assert_same(results[1][1], results[0][1], where="gradient")
    assert not counter.ran_as_captured()


def sgn_of_a_var_over_one_element(x):
    s = x.unflatten(-1, (1, x.shape[-1])).var(-2, correction=1).sgn()     # var: 0 / 0, NaN
    return s.round(decimals=1), s


@pytest.mark.parametrize("shapes", [((7,), (1,), (7,)), ((1,), (7,)), ((2, 7), (2, 3), (2, 7))])
@pytest.mark.parametrize("halves", ["compiled", "eager", "eager, zeros for unreached outputs"])
def test_a_zero_gradient_times_an_infinity_is_zero_as_in_eager(shapes, halves):
    """sgn's gradient is an efficient zero tensor; eager's ZeroTensor kernels keep a product with it (2 / 0
    times it in var's formula over one element), a quotient of it and a view of it a zero tensor, so x's
    gradient is 0 where the traced formula on plain zeros gave NaN (fuzz grad 16200784); where a half
    runs as captured, the zero tensor itself made AOTAutograd's runtime segfault (torch.compile's
    aot_eager too)."""
    from graphjit.compiler.training import compile_training
    backend = graphjit_backend if halves == "compiled" else \
        lambda gm, inputs: compile_training(gm, inputs, lambda graph, example_inputs: graph.forward,
                                            unreached=halves == "eager")
    fn = sgn_of_a_var_over_one_element
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter)
    for shape in shapes:
        grads = []
        for f in (fn, compiled):
            x = torch.linspace(-2, 3, math.prod(shape)).view(shape).requires_grad_()
            sum(o.sum() for o in f(x)).backward()
            grads.append(x.grad)
        assert_same(grads[1], grads[0], where=f"gradient, shape {shape}")
    assert counter.frame_count == 2 and not (halves == "compiled" and counter.ran_as_captured())


_VIEWED_PARTS = {
    "tensor_split": lambda h: h.tensor_split((1,), -1)[1],
    "split": lambda h: h.split([1, 2], -1)[1],
    "chunk": lambda h: h.chunk(2, -1)[1],
    "unbind": lambda h: h.view(3, 1).unbind(0)[1],
    "narrow": lambda h: h.narrow(-1, 1, 2),
}


@pytest.mark.parametrize("view", list(_VIEWED_PARTS))
@pytest.mark.parametrize("detach", ["method", "function", "data", "after_view"])
def test_a_detached_view_beside_another_view_of_it(view, detach):
    """AOTAutograd replays the views of an output that detaches a view of an intermediate wrongly when
    another output views it too (a wrong size, a failed check, or a read out of bounds: torch.compile
    crashes); the detach is applied after the compiled call."""
    part = _VIEWED_PARTS[view]
    detached = {"method": lambda v: v.detach(), "function": torch.detach, "data": lambda v: v.data,
                "after_view": lambda v: v.detach().view(-1)}[detach]

    def f(x):
        v = part(x * 2)
        return detached(v), v.view(-1), x.sin()

    compiled = graphjit.compile(f, backend=CompileCounter("graphjit"))
    for call in range(2):
        x = torch.randn(3, requires_grad=True, generator=torch.Generator().manual_seed(call))
        want, got = f(x), compiled(x)
        assert_same(got, want)
        assert not got[0].requires_grad and got[1].requires_grad
        assert got[0].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()
        g_want = torch.autograd.grad(want[1].sum() + want[2].sum(), x)
        g_got = torch.autograd.grad(got[1].sum() + got[2].sum(), x)
        torch.testing.assert_close(g_got, g_want)


def _gradients_of(fn, x, weights):
    x = x.detach().clone().requires_grad_()
    outs = fn(x)
    loss = sum((out * w).sum() for out, w in zip(outs, weights))
    return torch.autograd.grad(loss, x)[0]


@pytest.mark.parametrize("reduction", ["min", "max", "median"])
def test_a_whole_reduction_passes_a_nan_gradient_only_to_its_chosen_elements(reduction):
    """x ** x.min() with a negative x: the exponent's gradient is NaN (log of a negative number). Eager's
    CPU kernel fills min's gradient into the elements equal to the min, so the others keep theirs; the traced
    formula multiplied the NaN by the 0/1 mask and every element of x got NaN (grad fuzz 14200674)."""
    def f(x):
        chosen = getattr(x, reduction)()
        return x ** chosen, chosen * 3

    compiled = graphjit.compile(f, backend=CompileCounter("graphjit"))
    for call in range(3):
        g = torch.Generator().manual_seed(call)
        x = torch.randn(4, 5, generator=g)
        weights = [torch.randn(4, 5, generator=g), torch.randn((), generator=g)]
        want, got = _gradients_of(f, x, weights), _gradients_of(compiled, x, weights)
        torch.testing.assert_close(got, want, equal_nan=True)
        assert want.isfinite().any()


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu_gradient_at_a_nan_input(alpha):
    """eager's vectorized CPU kernel of elu's gradient takes the exponential branch for x not > 0, so a NaN x
    gets a NaN gradient even where the incoming gradient is 0 (an index_fill over it); torch's decomposition
    tested x <= 0 and gave 0 there (grad fuzz 14200276)."""
    def f(x):
        y = F.elu(x, alpha)
        return (y.index_fill(1, torch.tensor([0, 2]), 0.5) * 2,)

    compiled = graphjit.compile(f, backend=CompileCounter("graphjit"))
    for call in range(2):
        g = torch.Generator().manual_seed(call)
        x = torch.randn(4, 8, generator=g)
        x[1, 2] = x[3, 5] = float("nan")
        weights = [torch.randn(4, 8, generator=g)]
        want, got = _gradients_of(f, x, weights), _gradients_of(compiled, x, weights)
        torch.testing.assert_close(got, want, equal_nan=True)
        assert got[1, 2].isnan()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_hardswish_gradient_at_a_nan_input(dtype):
    """eager's vectorized CPU kernel of hardswish's gradient takes the middle branch (g * (x / 3 + 0.5)) for
    x neither <= -3 nor >= 3, so a NaN x gets a NaN gradient; torch's decomposition tested x < 3 for it and
    passed the incoming gradient on (grad fuzz 15003344). 64 elements: all in eager's vector loop (its
    scalar tail passes the gradient on), on any vector width up to 512 bits."""
    def f(x):
        v = x.sum(1)
        return F.hardswish(v), v * 2

    compiled = graphjit.compile(f, backend=CompileCounter("graphjit"))
    for call in range(2):
        g = torch.Generator().manual_seed(call)
        x = torch.randn(64, 2, generator=g).to(dtype) * 3
        x[7, 1] = x[40 + call, 0] = float("nan")
        x[3] = torch.tensor([-1.5, -1.5])       # sums exactly on the branch bounds, and past them
        x[4] = torch.tensor([1.5, 1.5])
        x[5, 0], x[6, 0] = float("inf"), float("-inf")
        weights = [torch.randn(64, generator=g).to(dtype), torch.randn(64, generator=g).to(dtype)]
        want, got = _gradients_of(f, x, weights), _gradients_of(compiled, x, weights)
        torch.testing.assert_close(got, want, equal_nan=True)
        assert got[7].isnan().all() and got[40 + call].isnan().all() and got[3:7].isfinite().all()


def prods(x, y):
    return x.prod(), torch.prod(y, 1), y.prod(dim=0, keepdim=True), y.long().prod(1)


@pytest.mark.parametrize("values", [[float("-inf"), 1.5, 2.0], [0.0, 2.0, 3.0], [3.0, 2.0, -0.5]])
def test_prod_gradient_divides_as_eager_where_no_element_is_zero(values):
    """Eager's prod gradient is the product divided by each element where the input has no zero (NaN at an
    infinite element: inf / inf), and the product of the others otherwise; a traced gradient is always the
    latter (grad fuzz 13801144, 14600055, 14600855)."""
    import warnings
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(prods, backend=counter)
    for call in range(2):
        grads = []
        for fn in (prods, compiled):
            x = torch.tensor(values, requires_grad=True)
            y = torch.tensor([values, [1.5, float("inf"), 2.0 + call]], requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outs = fn(x, y)
            # a backend that failed (fx found no module for a Function's apply on torch 2.14) ran the graph
            # as captured, with eager's values: only its warning tells
            assert not [str(w.message) for w in caught if "failed" in str(w.message)]
            assert outs[3].dtype == torch.int64 and not outs[3].requires_grad
            grads.append(torch.autograd.grad(outs[0] * 3 + outs[1].sum() * 2 + outs[2].sum(), (x, y)))
        for want, got in zip(*grads):
            torch.testing.assert_close(got, want, equal_nan=True)
    assert counter.frame_count == 1 and not counter.ran_as_captured()
    if values[0] == float("-inf"):
        assert grads[0][0][0].isnan()


def test_a_prod_of_a_prod_compiles():
    """The second prod reads the first's replacement (grad fuzz 15000094: the backend failed on a graph
    reading the erased first prod, and the graph ran as captured)."""
    import warnings

    def f(x):
        return x.prod(-1).prod(-1) * 2, x.prod(0).prod()

    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(f, backend=counter)
    for call in range(2):
        grads = []
        for fn in (f, compiled):
            x = torch.tensor([[1.5, -2.0, 0.5 + call], [float("inf"), 3.0, 0.25]], requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outs = fn(x)
            assert not [str(w.message) for w in caught if "failed" in str(w.message)]
            grads.append((outs, torch.autograd.grad(outs[0] + outs[1], x)))
        torch.testing.assert_close(grads[1], grads[0], equal_nan=True)
    assert counter.frame_count == 1 and not counter.ran_as_captured()


class RowOfTable(torch.nn.Module):
    """A row picked by a 0-d index: index_select's gradient is an index_add by that 0-d index."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 5, generator=torch.Generator().manual_seed(3)))

    def forward(self, x, i):
        return self.table.index_select(0, i) * x


def test_index_select_by_a_0d_index_backward(backend):
    """torch's index_add decomposition indexed with the 0-d index and put a source keeping the dim: the
    backward kernel raised "shape mismatch" where eager's index_add takes it."""
    calls = iter(range(100))
    check_training(RowOfTable, lambda: (r(1, 5), torch.tensor(next(calls) % 6)), backend=graphjit_backend, **TOL)


def test_a_double_backward_through_a_compiled_graph_raises():
    """A gradient taken with create_graph=True to be differentiated again: the compiled backward is not
    differentiable, so the call raises rather than give a second derivative missing the graph's terms (w's
    saved values are made under no_grad: AOTAutograd's own refusal would not reach w)."""
    def g(x, w):
        return (x * w).sin()
    compiled = graphjit.compile(g, backend=graphjit_backend)
    x, w = r(4, 4), r(4, 4).requires_grad_()
    (gw,) = torch.autograd.grad(g(x, w).sum(), w, create_graph=True)
    assert gw.requires_grad           # eager differentiates it again
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(compiled(x, w).sum(), w, create_graph=True)
    (plain,) = torch.autograd.grad(compiled(x, w).sum(), w)      # without create_graph: as before
    assert_same(plain, gw.detach(), where="w's gradient", **TOL)


def test_a_view_of_an_input_taken_under_no_grad_has_no_gradient():
    """`with torch.no_grad(): y = x[1:]` returned beside a loss: eager's y is a view of x made without
    grad (no grad_fn), so y.sum().backward() gives x no gradient; AOTAutograd replays the view from x at
    run time with grad on, which gave x one."""
    def f(x, w):
        with torch.no_grad():
            y = x[1:]
        return y, (x * w).sum()
    compiled = graphjit.compile(f, backend=graphjit_backend)
    for fn in (f, compiled):
        x, w = r(4, 4).requires_grad_(), r(4, 4)
        y, loss = fn(x, w)
        assert y._base is x and y.grad_fn is None
        y.sum().backward()
        assert x.grad is None
        loss.backward()
        assert_same(x.grad, w, where="x.grad")


def test_two_backwards_with_retain_graph_after_a_plain_step():
    """A step whose backward runs without retain_graph, then two losses from one compiled call, the first
    backward with retain_graph=True: AOTAutograd's donated buffers made that raise."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6))
    twin = copy.deepcopy(model)
    compiled = graphjit.compile(model)
    for step in range(3):
        x = torch.randn(5, 8)
        for m in (compiled, twin):
            out = m(x)
            if step == 0:
                out.sum().backward()
            else:
                out[:, :3].pow(2).mean().backward(retain_graph=True)
                out[:, 3:].pow(2).mean().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert_same(p.grad, q.grad, atol=1e-5, rtol=1e-5, where=f"step {step}")


def test_an_lstm_trained_over_changing_lengths_keeps_one_symbolic_entry(capfd):
    """torch's lstm decomposition unrolls the time loop, so the joint trace fixes the length: each length
    compiles its halves within the one symbolic entry (the frame recompiled per length and hit its limit),
    and nothing is printed on the way (a fake run's failure printed torch.fx's traceback)."""
    torch.manual_seed(0)
    model = torch.nn.LSTM(4, 4, batch_first=True)
    reference = copy.deepcopy(model)
    graphjit.reset()
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter)
    for b, n in [(2, 5), (3, 6), (4, 7), (5, 8), (6, 9), (3, 6)]:
        x = torch.randn(b, n, 4)
        got, want = compiled(x)[0], reference(x)[0]
        got.square().sum().backward()
        want.square().sum().backward()
        assert_same(got, want, atol=1e-6, rtol=1e-5)
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_same(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    assert counter.frame_count == 2, counter       # static, then one entry with symbolic sizes
    assert "FX-traced Module" not in capfd.readouterr().err
