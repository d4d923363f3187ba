"""Random numbers drawn inside graphjit's kernels: Philox4x32-10 (ops.rand), seeded from torch's generator at
each call. The numbers are checked bit for bit against a reference Philox written here (itself checked on
Random123's known answers), on the C++ codegen and, where installed, Triton's interpreter; dropout's
statistics, its mask in the backward, reproducibility under torch.manual_seed, and options=
{"fallback_random": True} (eager's bits) are checked against eager."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit import config as gj_config
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit.testing import CompileCounter

BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not triton_codegen.triton_available(),
                                                                      reason="Triton is not installed"))]
M32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Random123's Philox4x32 with 10 rounds: four 32-bit words from a 4-word counter and a 2-word key."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        a, b = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (b >> 32) ^ c1 ^ k0, b & M32, (a >> 32) ^ c3 ^ k1, a & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def reference_uniforms(seed, first, count):
    """What ops.rand gives for counters first .. first + count - 1 under `seed`."""
    key = (seed & M32, (seed >> 32) & M32)
    words = [philox4x32_10(((i & M32), (i >> 32) & M32, 0, 0), key)[0] for i in range(first, first + count)]
    return torch.tensor([(w >> 8) * 2.0 ** -24 for w in words], dtype=torch.float32)


def drawn_seeds(seed, count):
    """The seeds of a compiled graph's `count` random ops after torch.manual_seed(seed): one draw of
    (count, 2) int64s, the first of each row an op's seed."""
    torch.manual_seed(seed)
    return [int(v) for v in torch.randint(0, 2 ** 63 - 1, (count, 2))[:, 0]]


def test_reference_philox_gives_random123s_known_answers():
    """Random123's tests/kat_vectors, the three philox4x32 10 lines (counter, key -> result)."""
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)
    assert philox4x32_10((M32,) * 4, (M32, M32)) == (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)
    assert philox4x32_10((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0)) == \
        (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)


@pytest.fixture(params=BACKENDS)
def codegen(request, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", int(request.param == "triton"))
    monkeypatch.setattr(gj_config, "raise_errors", 1)
    graphjit.reset()
    return request.param


def _fused(counter):
    """The ops the compiled graphs call as ATen externs."""
    return [str(item.op) for f in counter.compiled_functions() for item in f.items if hasattr(item, "op")]


def test_rand_is_philox_of_a_seed_from_the_generator(codegen):
    """rand_like and rand in one graph: each op's numbers are counters 0.. under a seed of its own, the
    generator's next draw for the graph's random ops, so torch.manual_seed decides every number."""
    from graphjit.backends.registry import graphjit_backend
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(lambda x: (torch.rand_like(x) + x, torch.rand(3, 5)), backend=counter)
    x = torch.zeros(7, 45)
    for seed in (0, 123456789):
        seeds = drawn_seeds(seed, 2)
        first, second = reference_uniforms(seeds[0], 0, 315).view(7, 45), reference_uniforms(seeds[1], 0, 15).view(3, 5)
        torch.manual_seed(seed)
        a, b = compiled(x)
        assert torch.equal(a, first) and torch.equal(b, second)
    assert not [op for op in _fused(counter) if "rand." in op or "rand_like" in op], _fused(counter)


def test_dropout_statistics_and_reproducibility(codegen):
    """F.dropout in train mode, fused into the kernel that reads it: a fraction 1 - p kept (within 5 sigma),
    kept elements scaled by 1 / (1 - p) as eager scales them, the same numbers under the same seed, other
    numbers on the next call."""
    from graphjit.backends.registry import graphjit_backend
    counter = CompileCounter(graphjit_backend)

    def f(x, p):
        return F.dropout(x, p, training=True) + 1
    compiled = graphjit.compile(f, backend=counter)
    x = torch.randn(200, 250)
    for p in (0.2, 0.5):
        torch.manual_seed(0)
        out = compiled(x, p)
        kept = out != 1
        n = x.numel()
        assert abs(kept.sum().item() - n * (1 - p)) < 5 * (n * p * (1 - p)) ** 0.5
        assert torch.equal(out[kept], (x * (1 / (1 - p)) + 1)[kept])
        torch.manual_seed(0)
        assert torch.equal(compiled(x, p), out)
        assert not torch.equal(compiled(x, p), out)
    assert not [op for op in _fused(counter) if "bernoulli" in op or "dropout" in op], _fused(counter)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_of_zero_or_one_is_eagers(codegen, p):
    """p = 0 keeps every element, p = 1 none (NaN and inf times the dropped mask stay NaN, as eager's): exactly
    eager's results, in an inference graph and in a training graph's forward (its backward's column sums to
    the summation order's rounding)."""
    x = torch.randn(64, 33)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    expected = F.dropout(x, p, training=True)
    actual = graphjit.compile(lambda t: F.dropout(t, p, training=True))(x)
    assert torch.equal(actual.isnan(), expected.isnan())
    assert torch.equal(actual.nan_to_num(), expected.nan_to_num())
    w = torch.nn.Parameter(torch.rand(33) + 0.5)
    model = lambda t: F.dropout(t * w, p, training=True)           # noqa: E731
    xs = torch.randn(64, 33)
    eager_out = model(xs)
    eager_out.sum().backward()
    eager_grad, w.grad = w.grad, None
    out = graphjit.compile(model)(xs)
    out.sum().backward()
    assert torch.equal(out, eager_out)
    torch.testing.assert_close(w.grad, eager_grad, atol=1e-5, rtol=1e-5)     # a sum over rows: its order


class ScaledDropout(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(40) + 0.5)
        self.p = p

    def forward(self, x):
        return F.dropout(x * self.w, self.p, training=self.training)


@pytest.mark.parametrize("dynamic", [False, True])
def test_training_dropout_backward_reads_the_forwards_mask(codegen, dynamic):
    """out = mask * x * w / (1 - p): w's gradient of out.sum() is (out / w).sum(0) only if the backward uses
    the mask the forward's kernel drew. Also with symbolic sizes (the counters' offsets are expressions)."""
    from graphjit.backends.registry import graphjit_backend
    torch.manual_seed(0)
    model = ScaledDropout(0.3)
    counter = CompileCounter(graphjit_backend)
    compiled = graphjit.compile(model, backend=counter, dynamic=dynamic)
    for rows in (64, 96, 80):
        out = compiled(torch.randn(rows, 40))
        out.sum().backward()
        expected = (out.detach() / model.w.detach()).sum(0)
        torch.testing.assert_close(model.w.grad, expected, atol=1e-5, rtol=1e-5)
        assert 0.6 < (out != 0).float().mean() < 0.8
        model.w.grad = None
    assert not counter.ran_as_captured()
    assert not [op for op in _fused(counter) if "dropout" in op], _fused(counter)


def test_fallback_random_keeps_eagers_bits():
    """options={"fallback_random": True}: dropout and rand run as eager's kernels, so under one seed the
    compiled function returns exactly eager's numbers (without it, other numbers), in inference and training."""
    graphjit.reset()

    def f(x):
        return F.dropout(x, 0.5, training=True) * 2, torch.rand_like(x)
    x = torch.randn(32, 32)
    torch.manual_seed(7)
    expected = f(x)
    for options, same in (({"fallback_random": True}, True), (None, False)):
        torch.manual_seed(7)
        actual = graphjit.compile(f, options=options)(x)
        assert all(torch.equal(a, e) for a, e in zip(actual, expected)) == same
    model, eager = ScaledDropout(0.5), ScaledDropout(0.5)
    eager.load_state_dict(model.state_dict())
    compiled = graphjit.compile(model, options={"fallback_random": True})
    for _ in range(2):
        xs = torch.randn(16, 40)
        torch.manual_seed(11)
        out = compiled(xs)
        torch.manual_seed(11)
        assert torch.equal(out, eager(xs))


def test_random_numbers_of_16_bit_dtypes_keep_eagers_kernel():
    """rand_like in bfloat16 is eager's (a float32 number near 1 rounds to 1.0 in bfloat16): in [0, 1)."""
    graphjit.reset()
    out = graphjit.compile(lambda x: torch.rand_like(x) * 1)(torch.zeros(4096, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and 0 <= out.min() and out.max() < 1


def test_bernoulli_of_probabilities(codegen):
    """torch.bernoulli(probs): probabilities 0 and 1 give exactly 0 and 1, 0.3 gives about 30% ones."""
    probs = torch.tensor([0.0, 1.0, 0.3]).repeat_interleave(20000).view(3, 20000)
    out = graphjit.compile(lambda q: torch.bernoulli(q))(probs)
    assert torch.equal(out[:2], probs[:2])
    assert abs(out[2].mean().item() - 0.3) < 5 * (0.3 * 0.7 / 20000) ** 0.5


@pytest.mark.parametrize("options, message", [
    ({"no_such_knob": 1}, "unknown option 'no_such_knob'"),
    ({"fallback_random": "yes"}, "takes int values"),
    ([("fallback_random", 1)], "must be a dict"),
])
def test_options_are_checked_at_compile(options, message):
    with pytest.raises(ValueError, match=message):
        graphjit.compile(lambda x: x + 1, options=options)
    with pytest.raises(ValueError, match="takes none"):
        graphjit.compile(lambda x: x + 1, backend="eager", options={"fallback_random": True})


class ResidualDropouts(torch.nn.Module):
    """Residual blocks with a dropout on each branch, as transformers' blocks have."""

    def __init__(self, blocks=3, p=(0.1, 0.2, 0.3)):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 32),
                                                              torch.nn.GELU(), torch.nn.Dropout(p[i % len(p)]))
                                          for i in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


def test_each_dropout_draws_its_numbers_once(codegen):
    """A training forward with three dropouts (of different p, so that no two blocks share a kernel) draws
    three masks: each mask (saved for the backward, read by the residual sum) is stored where it is drawn,
    not drawn again at the end of the graph where the saved values are stored (one kernel recomputing every
    residual sum and mask)."""
    from graphjit.backends.registry import graphjit_backend
    counter = CompileCounter(graphjit_backend)
    model = graphjit.compile(ResidualDropouts(), backend=counter)
    model(torch.randn(64, 32)).sum().backward()
    (forward,) = [h.compiled for f in counter.compiled for h in f.graphjit_halves if h.which == "forward"]
    assert forward.source.count("gj_rand(") == 3 + 1, forward.source        # and the prelude's definition


def test_repeated_layers_share_their_dropout_kernels_and_draw_masks_of_their_own(codegen):
    """Each random op draws under a seed of its own (a buffer, not a counter offset in the kernel's text):
    six dropouts of one tensor (fused into one kernel) draw six different masks, each with dropout's
    statistics; identical residual blocks, each with its own dropout, print one kernel for all blocks
    (the source draws fewer times than there are blocks); the same seed gives the same masks, forward and
    backward."""
    from graphjit.backends.registry import graphjit_backend
    counter = CompileCounter(graphjit_backend)

    class Masks(torch.nn.Module):
        def forward(self, x):
            return [F.dropout(x, 0.25, training=True) for _ in range(6)]
    compiled = graphjit.compile(Masks(), backend=counter)
    x = torch.ones(96, 80)
    torch.manual_seed(3)
    outs = compiled(x)
    masks = [o != 0 for o in outs]
    for i, m in enumerate(masks):
        assert abs(m.float().mean().item() - 0.75) < 5 * (0.75 * 0.25 / x.numel()) ** 0.5
        assert torch.equal(outs[i][m], torch.full_like(x, 1 / 0.75)[m])
        for other in masks[:i]:
            assert not torch.equal(m, other)
    torch.manual_seed(3)
    assert all(torch.equal(a, b) for a, b in zip(compiled(x), outs))

    counter = CompileCounter(graphjit_backend)
    model = ResidualDropouts(blocks=4, p=(0.1,))
    compiled = graphjit.compile(model, backend=counter)
    x = torch.randn(64, 32, requires_grad=True)
    torch.manual_seed(5)
    compiled(x).sum().backward()
    grad = x.grad.clone()
    (forward,) = [h.compiled for f in counter.compiled for h in f.graphjit_halves if h.which == "forward"]
    assert forward.source.count("gj_rand(") - 1 < 4, forward.source
    x.grad = None
    torch.manual_seed(5)
    compiled(x).sum().backward()
    assert torch.equal(x.grad, grad)


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpoint_recomputes_the_forwards_dropout_masks(codegen, reentrant):
    """torch.utils.checkpoint around a compiled block with dropouts: the forward runs it under no_grad (an
    inference graph: dropout as bernoulli(1 - p)), the backward again under grad from the same generator
    state (a training graph: dropout decomposed to a draw and a comparison). Both draw the same masks, so
    the gradient is the forward's mask scaled, as eager's checkpoint gives it."""
    from torch.utils.checkpoint import checkpoint

    def block(x):
        return F.dropout(x, 0.3, training=True) * 2 + F.dropout(x * 0 + 1, 0.6, training=True) * 0
    compiled = graphjit.compile(block)
    for _ in range(3):
        x = (torch.randn(64, 16).abs() + 0.1).requires_grad_()
        y = checkpoint(compiled, x, use_reentrant=reentrant)
        y.sum().backward()
        assert 0.5 < (y != 0).float().mean() < 0.9
        assert torch.equal(x.grad, (y != 0).float() * (2 / 0.7)), (x.grad, y)


def test_a_compile_leaves_torchs_generator_as_it_was():
    """A max-autotune training compile makes real example inputs for the graphs AOTAutograd hands it as
    fake tensors: their numbers come from a generator of their own, so after the first (compiling) call
    torch's generator is where eager's call leaves it."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    compiled = graphjit.compile(model, mode="max-autotune")
    x = torch.randn(4, 8)
    draws = []
    for fn in (compiled, model):
        torch.manual_seed(0)
        fn(x).sum().backward()
        draws.append(torch.rand(5))
    assert torch.equal(draws[0], draws[1])
