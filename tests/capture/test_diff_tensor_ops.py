"""Tensor operations: operators, torch.* functions, Tensor methods and attributes, indexing, setitem on
locals, torch.nn.functional. Each case must be one graph, the same on fresh inputs of the same shapes.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import operator

import pytest
import torch
import torch.nn.functional as F

import graphjit

from graphjit.testing import check

from .harness import Cases, r

cases = Cases()


def ints(*shape, low=-8, high=9):
    return torch.randint(low, high, shape)


def bools(*shape):
    return torch.rand(*shape) > 0.5


def two(*shape):
    return lambda: (r(*shape), r(*shape))


def one(*shape):
    return lambda: (r(*shape),)


# ------------------------------------------------------------------------------------ operators

@cases.add(two(3, 4))
def add_sub_mul(x, y):
    return x + y, x - y, x * y


@cases.add(lambda: (r(3, 4), r(3, 4).abs() + 0.5))
def true_div(x, y):
    return x / y


@cases.add(lambda: (ints(3, 4), ints(3, 4, low=1, high=5)))
def floordiv_mod_int(x, y):
    return x // y, x % y


@cases.add(lambda: (r(3, 4), r(3, 4).abs() + 0.5))
def floordiv_mod_float(x, y):
    return x // y, x % y


@cases.add(lambda: (r(3, 4).abs() + 0.1,))
def pow_scalar(x):
    return x ** 2, 2 ** x, x ** 0.5


@cases.add(lambda: (r(3, 4).abs() + 0.1, r(3, 4)))
def pow_tensor(x, y):
    return x ** y


@cases.add(lambda: (r(3, 4), r(4, 5)))
def matmul_operator(x, y):
    return x @ y


@cases.add(lambda: (r(2, 3, 4), r(2, 4, 5)))
def matmul_batched(x, y):
    return x @ y


@cases.add(one(3, 4))
def unary_neg_pos_abs(x):
    return -x, +x, abs(x)


@cases.add(two(3, 4))
def comparisons(x, y):
    return x < y, x <= y, x > y, x >= y, x == y, x != y


@cases.add(one(5))
def comparisons_scalar(x):
    return x > 0, 0.5 >= x, x == 0


@cases.add(lambda: (bools(3, 4), bools(3, 4)))
def bitwise_bool(x, y):
    return x & y, x | y, x ^ y, ~x


@cases.add(lambda: (ints(3, 4), ints(3, 4)))
def bitwise_int(x, y):
    return x & y, x | y, x ^ y, ~x


@cases.add(lambda: (ints(3, 4, low=0, high=64),))
def shifts_int(x):
    return x << 2, x >> 1


@cases.add(one(3, 4))
def scalar_reflected(x):
    return 1 - x, 2 * x, 3 + x, 1 / (x.abs() + 1)


@cases.add(two(3, 4))
def inplace_on_local(x, y):
    z = x.clone()
    z += y
    z *= 2
    z -= 1
    z /= 3
    return z


@cases.add(lambda: (ints(3, 4), ints(3, 4)))
def inplace_bitwise_on_local(x, y):
    z = x.clone()
    z &= y
    z |= 1
    z ^= y
    return z


@cases.add(two(3, 4))
def inplace_methods_on_local(x, y):
    z = x * 1
    z.add_(y).mul_(2).sub_(0.5)
    z.clamp_(min=-1, max=1)
    return z


@cases.add(one(2, 3))
def broadcasting(x):
    return x + torch.ones(3), x * torch.arange(2.0).view(2, 1)


@cases.add(lambda: (r(3, 4).requires_grad_(),))
def requires_grad_input(x):
    return (x * 2).sum(), x.detach() + 1


# ------------------------------------------------------------------------------------ torch.* functions

@cases.add(two(2, 3))
def cat_stack(x, y):
    return torch.cat([x, y]), torch.cat((x, y), dim=1), torch.stack([x, y], dim=-1)


@cases.add(two(3, 4))
def where_(x, y):
    return torch.where(x > 0, x, y), torch.where(y > 0, y, 0.0)


@cases.add(lambda: (r(3, 4), r(4, 2)))
def matmul_mm_bmm(x, y):
    return torch.matmul(x, y), torch.mm(x, y), torch.bmm(x[None], y[None])


@cases.add(one(3, 5))
def softmax_log_softmax(x):
    return torch.softmax(x, dim=-1), torch.log_softmax(x, 1), x.softmax(0)


@cases.add(lambda: (r(2, 3, 4), r(2, 4, 5)))
def einsum_(x, y):
    return torch.einsum("bij,bjk->bik", x, y), torch.einsum("bij->b", x)


@cases.add(one(3, 4))
def factories_like_input(x):
    z = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    o = torch.ones(x.size(0), 2, dtype=x.dtype, device=x.device)
    a = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)
    f = torch.full((2, x.shape[1]), 7.0, dtype=x.dtype, device=x.device)
    return x + z, o, x + a, f


@cases.add(one(3, 4))
def factories_like(x):
    return torch.zeros_like(x), torch.ones_like(x) + x, torch.full_like(x, 3.0), torch.empty_like(x).fill_(2.0)


@cases.add(lambda: (ints(3, 4),))
def factories_int_dtype(x):
    return torch.arange(0, 8, 2), torch.zeros(2, dtype=torch.int64) + x[0, :2], torch.eye(3, dtype=x.dtype)


@cases.add(one(3, 4))
def clamp_(x):
    return torch.clamp(x, -0.5, 0.5), x.clamp(min=0), x.clamp(max=0.1), torch.clip(x, -1, 1)


@cases.add(one(3, 6))
def topk_values(x):
    return torch.topk(x, 2).values, x.topk(3, dim=0, largest=False)[0]


@cases.add(one(3, 6))
def topk_namedtuple(x):
    out = torch.topk(x, 2)
    return out.values, out.indices


@cases.add(one(3, 6))
def sort_(x):
    values, indices = torch.sort(x, dim=1, descending=True)
    return values, indices, x.sort().values


@cases.add(one(3, 6))
def cumsum_cumprod(x):
    return torch.cumsum(x, dim=1), x.cumsum(0), torch.cumprod(x, dim=-1)


@cases.add(lambda: (r(3, 5), torch.randint(0, 5, (3, 2))))
def gather_(x, idx):
    return torch.gather(x, 1, idx), x.gather(1, idx)


@cases.add(lambda: (r(5, 3), torch.tensor([0, 2, 4])))
def index_select_(x, idx):
    return torch.index_select(x, 0, idx), x.index_select(1, idx[:2])


@cases.add(one(3, 4))
def masked_fill_(x):
    return x.masked_fill(x < 0, 0.0), torch.masked_fill(x, x > 1, float("-inf"))


@cases.add(one(3, 4))
def pointwise_math(x):
    return torch.exp(x), torch.tanh(x), torch.sigmoid(x), torch.sin(x), torch.cos(x), x.abs().sqrt(), x.abs().log1p()


@cases.add(one(3, 4))
def reductions(x):
    return torch.sum(x), torch.mean(x, dim=0), torch.amax(x, dim=1), torch.prod(x, 1), torch.var(x), x.norm()


@cases.add(one(3, 4))
def max_min_variants(x):
    return torch.max(x), torch.max(x, x.flip(0)), torch.maximum(x, x * 2), torch.min(x, dim=0).values


@cases.add(one(2, 3, 4))
def flatten_flip_roll(x):
    return torch.flatten(x, 1), torch.flip(x, [0, 2]), torch.roll(x, 1, dims=2), x.tril(), torch.triu(x[0], 1)


@cases.add(one(4, 4))
def outer_linalg(x):
    return torch.outer(x[0], x[1]), torch.tensordot(x, x, dims=1), torch.diagonal(x), x.t() @ x


@cases.add(lambda: (ints(10, low=0, high=5),))
def int_tensor_ops(x):
    return x.sum(), x.float().mean(), x.argmax(), x.max(), x.abs().min()


@cases.add(one(3, 4))
def isclose_allclose_free(x):
    return torch.isclose(x, x + 1e-9), torch.isnan(x), torch.isfinite(x / 0.5), torch.nan_to_num(x / 0)


# ------------------------------------------------------------------------------------ Tensor methods

@cases.add(one(2, 3, 4))
def view_reshape(x):
    return x.view(6, 4), x.reshape(-1), x.view(2, -1), x.reshape(4, 6), x.view(-1, 3, 4)


@cases.add(one(2, 3, 4))
def permute_transpose(x):
    return x.permute(2, 0, 1), x.transpose(0, 1), x.transpose(-1, -2).contiguous(), x.mT, x[0].T


@cases.add(one(3, 1))
def expand_unsqueeze_squeeze(x):
    return x.expand(3, 4), x.expand(2, -1, 5), x.unsqueeze(0), x.squeeze(1), x.squeeze(), x[None].squeeze(0)


@cases.add(one(6, 4))
def split_chunk(x):
    a, b = x.split(3)
    c = x.split([1, 2, 3], dim=0)
    d = torch.chunk(x, 2, dim=1)
    return a, b, c, d, x.unbind(1)


@cases.add(one(3, 4))
def to_dtype_conversions(x):
    return x.to(torch.float64), x.float(), x.double(), x.half(), x.to(torch.int32), x.long(), x.bool(), x.int()


@cases.add(lambda: (r(3, 4), torch.randn(3, 4).double()))
def type_as_to_other(x, y):
    return x.type_as(y), x.to(y), x.to(y.dtype), x.to(device=y.device)


@cases.add(one(2, 3, 4))
def sum_mean_keepdim(x):
    return x.sum(1), x.sum(dim=(0, 2), keepdim=True), x.mean(-1, keepdim=True), x.sum(), x.mean()


@cases.add(one(3, 5))
def max_with_dim(x):
    values, indices = x.max(dim=1)
    out = x.min(0)
    return values, indices, out.values, out.indices, x.max(dim=-1, keepdim=True)[0]


@cases.add(one(3, 5))
def argmax_argmin(x):
    return x.argmax(), x.argmax(dim=1), x.argmin(0, keepdim=True), torch.argmax(x, -1)


@cases.add(one(2, 3, 4))
def size_shape_dim_numel(x):
    b, s, h = x.shape
    return x.view(b * s, h) * x.dim() + x.numel() + x.ndim + x.size(-1) + x.size()[1] + len(x)


@cases.add(one(2, 3, 4))
def shape_as_values(x):
    return x.sum() + 0, x.shape, x.size(), x.dim(), x.numel(), x.ndim, x.shape[-1]


@cases.add(lambda: (r(3, 4), ints(3, 4)))
def dtype_device_attrs(x, y):
    z = torch.zeros(2, dtype=y.dtype, device=x.device)
    return x + 1, z, x.dtype, y.dtype, x.device, x.is_floating_point(), y.is_floating_point(), x.dtype.is_floating_point


@cases.add(one(3, 4))
def new_tensor_methods(x):
    return x.new_zeros(2, 3), x.new_ones((4,)), x.new_full((2,), 5.0), x.new_empty(0).numel() + x


@cases.add(one(3, 4))
def method_chain(x):
    return x.abs().add(1).log().mul(0.5).exp().sub(x).div(2).neg().relu().sigmoid()


@cases.add(one(4, 6))
def repeat_tile_flip(x):
    return x.repeat(2, 1), x.tile((1, 2)), x.repeat_interleave(2, dim=0), x.narrow(1, 2, 3), x.unfold(1, 2, 2)


# ------------------------------------------------------------------------------------ indexing

@cases.add(one(4, 5, 6))
def index_int_slice(x):
    return x[0], x[-1], x[1:3], x[:, 2], x[..., 1], x[:, ::2], x[1, 2, 3], x[-2:, :-1]


@cases.add(one(4, 5))
def index_none_ellipsis(x):
    return x[None], x[:, None], x[..., None], x[None, ..., None, 1:], x[...]


@cases.add(lambda: (r(5, 3), torch.tensor([4, 0, 2])))
def index_tensor(x, idx):
    return x[idx], x[:, idx[1:] % 3], x[idx, idx % 3]


@cases.add(one(5, 3))
def index_constant_list(x):
    return x[[0, 2]], x[:, [1, 1, 0]]


@cases.add(lambda: (r(3, 4), r(4)))
def setitem_local(x, y):
    z = x.clone()
    z[0] = 1.0
    z[:, 1:] += 2.0
    z[1] = y
    z[..., 0] = z[..., -1]
    return z


@cases.add(lambda: (r(3, 4), r(3, 3)))
def setitem_local_slices(x, y):
    z = x.clone()
    z[:, 1:] += y
    z[-1, :2] = 0
    return z


@cases.add(lambda: (r(5, 3), torch.tensor([0, 3])))
def setitem_local_tensor_index(x, idx):
    z = torch.zeros_like(x)
    z[idx] = x[idx] * 2
    z[:, 0] = torch.arange(5.0)
    return z


@cases.add(one(4, 4))
def setitem_local_mask(x):
    z = x.clone()
    z[z < 0] = 0.0  # masked assignment: no data-dependent shape
    return z


# ------------------------------------------------------------------------------------ torch.nn.functional

@cases.add(lambda: (r(2, 3, 4), r(5, 4), r(5)))
def f_linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w)


@cases.add(one(3, 4))
def f_activations(x):
    return F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.leaky_relu(x, 0.1), F.elu(x)


@cases.add(one(3, 4))
def f_softmax(x):
    return F.softmax(x, dim=-1), F.log_softmax(x, dim=0), F.softmax(x, dim=1, dtype=torch.float64)


@cases.add(lambda: (r(2, 3, 8), r(8), r(8)))
def f_layer_norm(x, w, b):
    return F.layer_norm(x, (8,), w, b), F.layer_norm(x, x.shape[-1:], eps=1e-6)


@cases.add(one(3, 4))
def f_dropout_eval(x):
    return F.dropout(x, p=0.5, training=False), F.dropout(x, 0.0), torch.dropout(x, 0.3, False)


@cases.add(lambda: (r(2, 2, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8)), atol=1e-6, rtol=1e-5)
def f_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@cases.add(lambda: (r(2, 2, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8)), atol=1e-6, rtol=1e-5)
def f_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@cases.add(lambda: (r(2, 2, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8)), atol=1e-6, rtol=1e-5)
def f_sdpa_mask(q, k, v):
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@cases.add(lambda: (torch.randint(0, 10, (2, 5)), r(10, 4)))
def f_embedding(idx, weight):
    return F.embedding(idx, weight), F.embedding(idx, weight, padding_idx=0)


@cases.add(lambda: (r(6, 5), torch.randint(0, 5, (6,))))
def f_cross_entropy(logits, target):
    return (F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="none"),
            F.nll_loss(F.log_softmax(logits, -1), target), F.mse_loss(logits, logits.flip(0)))


@cases.add(one(2, 3, 4))
def f_pad(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 1, 1), value=-1.0), F.pad(x, (1, 1, 1, 1, 1, 1))


@cases.add(one(3, 4))
def f_normalize(x):
    return F.normalize(x, dim=-1), F.normalize(x, p=1, dim=0), F.cosine_similarity(x, x.flip(0))


@cases.add(lambda: (r(2, 3, 8, 8), r(4, 3, 3, 3), r(4)), atol=1e-5, rtol=1e-5)
def f_conv2d(x, w, b):
    return F.conv2d(x, w, b), F.conv2d(x, w, padding=1, stride=2), F.conv2d(x, w, b, padding="same")


@cases.add(one(2, 3, 8, 8))
def f_pooling(x):
    return F.max_pool2d(x, 2), F.avg_pool2d(x, 2, stride=1), F.adaptive_avg_pool2d(x, 1), F.max_pool2d(x, 3, 2, 1)


@cases.add(one(1, 2, 4, 4), atol=1e-6, rtol=1e-6)
def f_interpolate(x):
    return (F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(6, 6), mode="bilinear",
            align_corners=False))


@cases.add(one(2, 4))
def f_one_hot_free(x):
    return F.one_hot(torch.arange(4) % 3, num_classes=3) + 0 * x.sum().long()


@cases.add(lambda: (r(2, 6), r(2, 6)))
def operator_module_on_tensors(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.neg(x), operator.matmul(x, y.t())


@pytest.mark.parametrize("case", cases.params())
def test_tensor_ops(case):
    case.run()


# ------------------------------------------------------------------- arguments eager refuses

def attention_with_an_enlarging_mask(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2


@pytest.mark.parametrize("mask_shape, enlarges", [((3, 1, 4, 4), True), ((2, 1, 4), False), ((4, 4), False),
                                                  ((1, 2, 4, 4), True)])
def test_attention_mask_that_enlarges_the_scores_runs_as_in_eager(mask_shape, enlarges):
    """A mask whose broadcast enlarges the scores: eager's CPU attention adds it into them in place and
    raises (torch 2.11, 2.13; torch 2.14 accepts a leading 1), where the fake kernel broadcasts. Capture
    must not trust the fake kernel: the call runs in CPython (a graph break), raising or not as eager."""
    from graphjit.testing import check, check_raises
    make = lambda: (r(2, 4, 8), r(2, 4, 8), r(2, 4, 8), torch.ones(mask_shape, dtype=torch.bool))  # noqa: E731
    try:
        attention_with_an_enlarging_mask(*make())
        eager_raises = False
    except RuntimeError:
        eager_raises = True
    if eager_raises:
        check_raises(attention_with_an_enlarging_mask, make)
    else:
        check(attention_with_an_enlarging_mask, make, graphs=None if enlarges else 1)


def power_of_booleans(x, y):
    return x ** True, x ** False, (x ** True).dtype, torch.pow(x, False).dtype, x.__pow__(True), y * 2


def integer_to_a_power(x, e):
    return (x + 1) ** e


def integer_to_size_powers(x):
    return x ** x.shape[0], x ** (x.shape[0] - 5)


def test_an_integer_tensor_to_a_size_power_compiles_where_it_cannot_be_negative():
    """x ** n for an integer x and a size expression n: compiled where n >= 0 for every size (its graph
    holds the power), run in CPython where n may be negative (eager raises there)."""
    from graphjit.testing import CompileCounter
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(integer_to_size_powers, dynamic=True, backend=counter)
    for n in (3, 4, 6, 7):
        x = torch.arange(n) % 3
        try:
            expected = integer_to_size_powers(x)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=str(e)):
                compiled(x)
            continue
        got = compiled(x)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert any("pow" in str(n.target) for gm in counter.graphs for n in gm.graph.nodes)


def booleans_to_a_boolean_tensor_power(x):
    return x ** (x > 0)


def test_powers_the_fake_kernel_gets_wrong_run_as_in_eager():
    """Where torch's fake kernel of a power disagrees with eager's, the call runs in CPython (a graph
    break): a bool tensor to a Python bool stays bool in eager, the fake kernel says int64 (the dtype read
    while tracing was int64: fuzz seed 198, 19802297); an integer tensor to a negative Python int raises
    in eager, where the fake kernel and the compiled op give a value; a bool tensor to a bool tensor
    raises in eager."""
    from graphjit.testing import check, check_raises
    check(power_of_booleans, lambda: (bools(3, 4), r(3)), graphs=None)
    check(integer_to_a_power, lambda: (ints(5), 2), graphs=None)
    check_raises(integer_to_a_power, lambda: (ints(5), -1), backend="graphjit")
    check_raises(integer_to_a_power, lambda: (ints(5).to(torch.int32), -3), backend="graphjit")
    check_raises(booleans_to_a_boolean_tensor_power, lambda: (bools(4),), backend="graphjit")


@pytest.mark.parametrize("op", [torch.abs, torch.floor, torch.round, lambda x: torch.round(x, decimals=1), torch.trunc,
                                torch.fix, lambda x: torch.trace(x.reshape(2, 2)),
                                lambda x: torch.div(x, x, rounding_mode="trunc"),
                                lambda x: torch.div(x, True, rounding_mode="trunc"), torch.ceil,
                                lambda x: x % x.flip(0), lambda x: x % True, F.relu, lambda x: 1 - x,
                                F.hardsigmoid, lambda x: torch.lerp(x, x.flip(0), 0.5)],
                         ids=["abs", "floor", "round", "round_decimals", "trunc", "fix", "trace", "div_trunc",
                              "div_trunc_scalar", "ceil", "remainder", "remainder_scalar", "relu", "rsub",
                              "hardsigmoid", "lerp"])
def test_ops_eager_has_no_bool_kernel_for_raise_as_in_eager(op):
    """Eager's CPU kernels of these ops have no bool implementation and raise; torch's decompositions and
    graphjit's loops would compute a value. The compiled call raises eager's error (an ATen call:
    lowering.NO_BOOL_KERNEL; trace: a graph break)."""
    from graphjit.testing import check_raises

    def fn(x):
        return op(x) * 1
    check_raises(fn, lambda: (bools(4),), backend="graphjit")


_I8 = torch.int8
_INTEGER_REFUSALS = {
    # Python scalars eager converts to the tensor's dtype with an overflow check
    "where_scalar": lambda x: torch.where(x > 0, 1000, x.to(_I8)),
    "add_alpha": lambda x: torch.add(x.to(_I8), x.to(_I8), alpha=1000),
    "sub_alpha": lambda x: torch.sub(x.to(_I8), 1, alpha=300),
    "threshold_value": lambda x: F.threshold(x.to(_I8), 2, 1000),
    "hardtanh_bounds": lambda x: F.hardtanh(x.to(_I8), -1000, 1000),
    "pow_exponent": lambda x: x.to(_I8) ** 1000,
    "bool_float_alpha": lambda x: torch.add(x > 0, x > 1, alpha=2.5),
    # kernels eager has for floating dtypes only
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.5),
    "softplus": F.softplus, "hardswish": F.hardswish, "mish": F.mish, "hardsigmoid": F.hardsigmoid,
    "hardshrink": F.hardshrink, "celu": F.celu, "glu": F.glu,
    "prelu": lambda x: F.prelu(x, torch.tensor([1])),
    "smooth_l1_loss": lambda x: F.smooth_l1_loss(x, x.flip(0)),
    "logaddexp": lambda x: torch.logaddexp(x, x.flip(0)), "logaddexp2": lambda x: torch.logaddexp2(x, x),
    "addcdiv": lambda x: torch.addcdiv(x, x, x.flip(0), value=2),
    # bool kernels, bool results and mixed dtypes eager refuses
    "dot_bool": lambda x: torch.dot(x > 0, x > 1),
    "cumsum_to_bool": lambda x: x.cumsum(0, dtype=torch.bool),
    "heaviside_mixed": lambda x: torch.heaviside(x, x.float()),
    "softmax_method": lambda x: x.softmax(0), "log_softmax_method": lambda x: x.log_softmax(0),
}


@pytest.mark.parametrize("name", list(_INTEGER_REFUSALS))
def test_integer_calls_eager_refuses_raise_as_in_eager(name):
    """Integer and bool calls whose eager kernel raises (a scalar the dtype cannot hold, a float-only
    kernel, a bool result eager has no kernel for): the compiled call raises eager's error, where the
    compiled ops computed a value."""
    from graphjit.testing import check_raises
    op = _INTEGER_REFUSALS[name]

    def fn(x):
        return op(x * 1)
    check_raises(fn, lambda: (ints(6),), backend="graphjit")


def test_float_calls_the_integer_refusals_leave_captured():
    """The refusals above leave float calls alone: where(mask, half, -1e9) is -inf in eager (no overflow
    check for a float result), a float alpha of float tensors, threshold by -1e9: one graph, eager's values."""
    def fn(x):
        h = x.half()
        return torch.where(x > 0, h, -1e9), torch.add(x, x, alpha=0.5), F.threshold(h, -1e9, 0.0)
    from graphjit.testing import CompileCounter
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(fn, backend=counter)
    x = torch.randn(6)
    for got, want in zip(compiled(x), fn(x)):
        assert torch.equal(got, want)
    assert counter.frame_count == 1 and not counter.ran_as_captured()


def negative_bases(x, i):
    return (-1) ** i, (-0.0) ** x, (-2.5) ** x, (-float("inf")) ** i, 2 ** -i, x ** -1


def negative_bases_of_booleans(b):
    return (-1) ** b, (-0.0) ** b, (-3) ** b


def negative_base_to_a_size(x, n):
    return x * ((-1) ** n), x.shape[0] * ((-2) ** n), x * (-1) ** x.shape[0]


def test_a_negative_constant_base_keeps_its_sign():
    """fx writes operator.pow infix with the base's repr, `-1 ** x`, which Python reads as -(1 ** x): the
    compiled (-1) ** x was -1 everywhere (a sweep of scalar-tensor ops against eager). Such a power is
    recorded as torch.pow, or as the size symbol's __rpow__."""
    from graphjit.testing import check
    check(negative_bases, lambda: (torch.tensor([1.5, 0.0, -2.0, 3.0, float("nan")]), ints(6, low=-1, high=4)),
          backend="graphjit")
    check(negative_bases_of_booleans, lambda: (bools(5),), backend="graphjit")
    check(negative_base_to_a_size, lambda call: (r(3 + call), 2 + call), graphs=None,
          compile_kwargs={"dynamic": True})


@pytest.mark.parametrize("fn", [
    lambda k: torch.tensor([1], dtype=int) + k,
    lambda k: torch.zeros(3, dtype=int) + k,
    lambda k: torch.ones(3, dtype=float) + k,
    lambda k: k.to(int),
    lambda k: k.to(complex).real,
    lambda k: torch.full((3,), 1, dtype=bool) & (k > 0),
    lambda k: k.new_zeros(2, dtype=float),
], ids=["tensor int", "zeros int", "ones float", "to int", "to complex", "full bool", "new_zeros float"])
def test_python_number_types_as_dtypes(fn):
    """torch reads int, float, bool and complex as int64, float64, bool and complex128 (float64 whatever
    the default dtype); fx can't print the classes themselves."""
    check(fn, lambda: (torch.randn(3),))
