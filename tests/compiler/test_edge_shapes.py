"""Shape and layout edge cases through graphjit's compiler, compiled vs eager (outputs and the inputs after
the call), on the C++ codegen and (where Triton is installed) the Triton interpreter: padding in every
mode and rank, batch norm of a strided input, pooling with ceil_mode, tensors with a zero-size dim or no
dims at all, and the cost of index arithmetic on long reshape chains and wide splits.

Causes covered: circular padding traced as writes into an empty tensor; a fallback op laying out its result
otherwise than its meta function (training batch norm of a transposed input); index arithmetic dividing by
a zero-size dim (reshape, repeat) and reductions over dim 0 of a 0-d tensor; reductions over no elements
(Triton printed loops of zero length); a buffer without elements fused into another kernel's loop (stored
where it has no memory); a lazy value split into many pieces computed once per piece; sympy's Mod
evaluation on every index built."""
import time
import warnings

import pytest
import sympy
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler import decompose, ir, lowering, scheduler
from graphjit.compiler.codegen import triton as triton_codegen

from .harness import check_calls


def check(fn, *inputs, backend, atol=None, rtol=None, strides=False, identities=True):
    """fn through the frontend and graphjit's compiler against eager, on copies of inputs (one call):
    outputs and the inputs after the call eager's within the dtype's TOLERANCES (or atol/rtol); every
    graph compiled (none ran as captured)."""
    check_calls(fn, lambda: inputs, backend, calls=1, atol=atol, rtol=rtol, strides=strides, identities=identities)


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ---- padding: every mode, 1-d/2-d/3-d, negative pads crop ----

CIRCULAR = [((2, 5, 7), (1, 1)), ((5, 64, 3), (1, 1)), ((2, 3, 4), (3, 0)), ((2, 3, 6), (-2, 3)),
            ((2, 3, 4, 5), (1, 2, 2, 1)), ((2, 3, 4, 5), (0, 0, -1, 3)), ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 3))]


@pytest.mark.parametrize("shape,pad", CIRCULAR, ids=str)
def test_circular_pad(shape, pad, backend):
    check(lambda x: F.pad(x, pad, mode="circular"), randn(*shape), backend=backend)


def test_circular_pad_of_a_computed_value(backend):
    """Padding a matmul's result (an extern call's output), then a mask of the padded tensor."""
    def fn(x, w):
        y = F.pad(x @ w, (1, 1), mode="circular")
        return y, (y > 0).float() * y
    check(fn, randn(1, 12, 3, 12), randn(12, seed=1), backend=backend)


@pytest.mark.parametrize("mode,shape,pad", [
    ("reflect", (2, 3, 7), (2, 3)), ("reflect", (2, 3, 5, 6), (1, 2, 3, 1)),
    ("reflect", (1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 1)),
    ("replicate", (2, 3, 7), (2, 3)), ("replicate", (2, 3, 5, 6), (0, 2, 3, 1)),
    ("replicate", (1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 1)), ("constant", (2, 3, 7), (-2, 3)),
    ("constant", (2, 3, 5, 6), (1, -2, 0, 4)),
], ids=str)
def test_other_pad_modes(mode, shape, pad, backend):
    check(lambda x: F.pad(x, pad, mode=mode) * 2, randn(*shape), backend=backend)


# ---- batch norm in training mode of a strided input, its output read by other ops ----

def test_training_batch_norm_of_a_transposed_input(backend):
    def fn(x, mean, var, weight):
        y = F.batch_norm(x.mT, mean, var, weight, None, training=True, momentum=0.1, eps=1e-5)
        return torch.cat(y.chunk(3, 0)[::-1], 0)
    check(fn, randn(65, 160), randn(65, seed=1), randn(65, seed=2).abs() + 0.5, randn(65, seed=3), backend=backend)


def test_training_batch_norm_of_a_permuted_4d_input(backend):
    def fn(x, mean, var):
        return F.batch_norm(x.permute(0, 3, 1, 2), mean, var, training=True, momentum=0.2).relu() + 1
    check(fn, randn(2, 5, 3, 4), randn(4, seed=1), randn(4, seed=2).abs() + 0.5, backend=backend)


# ---- kernels that lay their result out otherwise than torch's meta function says ----

@pytest.mark.parametrize("fn,make", [
    (lambda x, w: F.batch_norm(x.mT, None, None, w, w, training=True), lambda: [randn(2, 5, 3), randn(3, seed=1)]),
    (lambda x, w: F.batch_norm(x.permute(0, 3, 1, 2), w, w.abs(), training=False) * 2,
     lambda: [randn(2, 5, 4, 3), randn(3, seed=1)]),
    (lambda x, w: F.batch_norm(x, w, w.abs(), training=False),
     lambda: [randn(2, 3, 4, 5).to(memory_format=torch.channels_last), randn(3, seed=1)]),
    (lambda x, w: torch.pow(2.0, x.mT) + w, lambda: [randn(2, 4, 3), randn(3, 1, seed=1)]),
    (lambda x, w: torch.copysign(x.mT, w), lambda: [randn(2, 4, 3), randn(3, 1, seed=1)]),
    (lambda x, w: F.channel_shuffle(x, 2) + w, lambda: [randn(2, 4, 3, 5).to(memory_format=torch.channels_last),
                                                        randn(5, seed=1)]),
    (lambda x, w: F.max_pool1d(x.mT, 2) + w, lambda: [randn(2, 6, 3), randn(3, 1, seed=1)]),
    (lambda x, w: F.max_pool1d(x.mT, 2, return_indices=True)[0] + w, lambda: [randn(2, 6, 3), randn(3, 1, seed=1)]),
    (lambda x, w: F.rrelu(x.mT) + w, lambda: [randn(2, 6, 3), randn(3, 1, seed=1)]),
], ids=["bn_training_3d", "bn_eval_permuted", "bn_eval_channels_last", "pow_scalar", "copysign", "channel_shuffle",
        "max_pool1d", "max_pool1d_with_indices", "rrelu"])
def test_output_strides_where_eager_kernels_differ_from_meta(fn, make, backend):
    """Outputs have eager's strides, so a view of them after the graph succeeds or fails as in eager."""
    check(fn, *make(), backend=backend, strides=True)


# ---- pooling with ceil_mode (windows running off the end) ----

@pytest.mark.parametrize("length,kernel,stride,padding,dilation", [
    (2, 3, 3, 0, 1), (5, 2, 2, 1, 1), (7, 3, 2, 1, 2), (4, 4, 3, 2, 1), (1, 1, 1, 0, 1)], ids=str)
def test_max_pool1d_ceil_mode(length, kernel, stride, padding, dilation, backend):
    check(lambda x: F.max_pool1d(x, kernel, stride, padding, dilation, ceil_mode=True), randn(2, 3, length),
          backend=backend)


def test_max_pool1d_ceil_mode_of_a_broadcast_product(backend):
    check(lambda x, w: F.max_pool1d((x - x) * w, 3, 3, 0, ceil_mode=True), randn(2, 4, 2), randn(2, seed=1),
          backend=backend)


@pytest.mark.parametrize("size,kernel,stride,padding", [((5, 4), 2, 2, 0), ((7, 5), 3, 2, 1), ((2, 2), 3, 3, 1)],
                         ids=str)
def test_max_pool2d_ceil_mode_values_and_indices(size, kernel, stride, padding, backend):
    def fn(x):
        values, indices = F.max_pool2d(x, kernel, stride, padding, ceil_mode=True, return_indices=True)
        return values * 2, indices + 1
    check(fn, randn(2, 3, *size), backend=backend)


@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d_ceil_mode(include_pad, backend):
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=include_pad), randn(2, 3, 6, 7),
          backend=backend)


# ---- zero-size dims, 0-d tensors ----

ZERO_SIZE = {
    "reshape of a zero-size view": (lambda x: (x.clone()[:, 1:] * 2).reshape(-1, 4), [randn(3, 1, 4)]),
    "flatten, fill of a transposed empty": (lambda x: x.clone().view(-1).fill_(1), [randn(16, 1, 1, 0).mT]),
    "repeat of an empty row": (lambda x: x[1::2].amin(1).repeat(2), [randn(1, 65)]),
    "stack of empty slices": (lambda x: torch.floor(torch.stack([x[i] * (i - 1) for i in range(3)], 0)),
                              [randn(3, 4, 0)]),
    "sum over an empty dim": (lambda x: (x.sum(1), x.sum(), x.mean(1), x.var(1)), [randn(3, 0)]),
    "amax over non-empty dims of an empty": (lambda x: x.amax(1) + 1, [randn(0, 5)]),
    "logsumexp over an empty dim": (lambda x: torch.logsumexp(x * 1, 1), [randn(3, 0, 2)]),
    "softmax of an empty": (lambda x: torch.softmax(x, -1), [randn(0, 5)]),
    "any and all over an empty dim": (lambda x: ((x > 0).any(1), (x > 0).all(1)), [randn(3, 0)]),
    "tensor_split pieces summed": (lambda x: sum(p.sum() for p in torch.tensor_split(x, 3, -2)), [randn(2, 0)]),
    "tensor_split pieces, log_softmax of one": (
        lambda x: (torch.tensor_split(x * 2, 3, 1), F.log_softmax(torch.tensor_split(x * 2, 3, 1)[0], 1)),
        [randn(7, 1)]),
    "pad of an empty": (lambda x: F.pad(x, (1, 1)) + 1, [randn(2, 0)]),
    "cat with an empty piece": (lambda x, y: torch.cat([x, y], 0) * 2, [randn(0, 4), randn(3, 4)]),
    "chunks of a written empty, stacked": (
        lambda x: torch.logsumexp(torch.stack((x * 1).unsqueeze(0).fill_(3).chunk(3, 3)[:1], 0), -3),
        [randn(31, 0, 2)]),
    "sum over dim -1 of a 0-d": (lambda x: (x.sum(-1), x.amax(0), x.mean(-1, keepdim=True)), [randn()]),
    "softmax of a 0-d": (lambda x: (torch.softmax(x, -1), F.log_softmax(x, 0)), [randn()]),
    "where of a 0-d, summed over -1": (lambda x, y: torch.where(x > 0, y, x).sum(-1), [randn(), randn(seed=1)]),
}


@pytest.mark.parametrize("name", list(ZERO_SIZE))
def test_zero_size_and_0d(name, backend):
    fn, inputs = ZERO_SIZE[name]
    check(fn, *inputs, backend=backend)


def test_empty_reduction_is_a_constant():
    """A sum over no elements is its identity: no loop of zero length reaches a codegen."""
    x = lowering.constant_value(1.0, (3, 0), torch.float32)
    lowering._graphs.append(ir.LoopGraph())
    try:
        total = lowering.reduce(x, [1], "sum", torch.float32, False)
    finally:
        lowering._graphs.pop()
    assert isinstance(total, ir.Pointwise) and total.sizes == (3,)
    assert "constant(0" in str(total)


def test_empty_output_beside_a_softmax(backend):
    """A zero-size result in the same graph as a reduction: never fused into its loop (C3: the Triton
    kernel stored a whole row into the empty buffer)."""
    def fn(x, empty, y):
        return torch.empty_like(empty).fill_(1.5), torch.softmax(x[1:, -1, ::2], -2), y.split([1, 0], 1)
    # identities left out: y's whole piece comes back as y (test_a_view_that_changes_nothing_is_a_new_tensor)
    check(fn, randn(17, 6, 1), randn(1, 0), randn(1, 1, seed=1), backend=backend, identities=False)


def test_a_reduction_feeding_only_an_output_without_elements(backend):
    """amax kept in registers, read only by a result with no elements: the Triton kernel had no buffer
    to take, and its launch was printed with an empty argument list (triton fuzz 11701313)."""
    def fn(x):
        v = torch.zeros_like(x).pow(0.5)
        w = torch.where(v == v.amax(), v, v)
        return (torch.split(w, [1, w.shape[-1] - 1], -1)[1].round(),)
    check(fn, randn(1, 1, 1).double(), backend=backend)
    check(fn, randn(2, 3, 1), backend=backend)


def test_buffer_without_elements_gets_a_kernel_of_its_own():
    def fn(x, empty):
        return torch.softmax(x, -1), empty + 1
    gm = torch.fx.symbolic_trace(fn)
    inputs = [randn(4, 8), randn(4, 0)]
    graph = lowering.lower(decompose.decompose(gm, inputs), inputs)
    items = scheduler.schedule(graph)
    kernels = [k for k in items if isinstance(k, scheduler.Kernel)]
    empty = [k for k in kernels if scheduler.is_empty_kernel(k)]
    assert len(empty) == 1 and len(empty[0].nodes) == 1
    assert all(not any(scheduler.has_no_elements(n.buffer) for n in k.nodes) for k in kernels if k not in empty)


@pytest.mark.skipif(not triton_codegen.triton_available(), reason="Triton is not installed")
def test_triton_launches_nothing_for_a_buffer_without_elements():
    from .test_triton import compile_triton
    compiled, _, _ = compile_triton(lambda x, e: (x.exp().sum(1), e * 2), [(randn(4, 8), randn(4, 0))], "cpu")
    assert "triton_fused_mul" not in compiled.source and len(compiled.launches) == 1


def test_kernel_without_elements_keeping_values_in_registers(backend):
    """A kernel of zero-size buffers, some of them kept in registers (never allocated): the Triton wrapper
    deleted those after the kernel (UnboundLocalError; fuzz triton 9700896, a training batch_norm of an empty
    batch feeding an einsum)."""
    def fn(x, mean, var):
        v = F.batch_norm(x, mean, var, None, None, training=True, momentum=0.1, eps=1e-5)
        v = torch.where(v > -1.5, v, v)
        return torch.einsum("...ij,...kj->...ik", v, v)
    check(fn, randn(2, 0), randn(0), randn(0).abs(), backend=backend)


# ---- the cost of index arithmetic ----

def test_mod_simplifies_structurally():
    x0, x1 = ir.index_symbol("x0"), ir.index_symbol("x1")
    assert ir.Mod(64 * x0 + x1 + 3, 64) == ir.Mod(x1 + 3, 64)            # (d*a + b) % d == b % d
    assert ir.Mod(ir.Mod(x0, 12), 4) == ir.Mod(x0, 4)                      # (e % (k*d)) % d == e % d
    assert ir.Mod(sympy.Integer(17), 5) == 2 and ir.Mod(x0, 1) == 0
    assert ir.simplify_with_ranges(ir.Mod(64 * x0 + x1, 1024), {x0: 32, x1: 64}) == 64 * ir.Mod(x0, 16) + x1
    assert ir.format_index(ir.Mod(x0 + 1, 7), "/") == "(x0 + 1) % 7"


def test_mod_and_floordiv_keep_their_operand_non_negative():
    """Printed as C's / Triton's truncating `%` and `/`, a split may not leave a negative constant:
    (8*r + c - 7) % 4 is (c + 1) % 4, and (8*r + c - 7) // 4 is 2*r - 2 + (c + 1) // 4."""
    r, c = ir.index_symbol("r"), ir.index_symbol("c")
    assert ir.Mod(8 * r + c - 7, 4) == ir.Mod(c + 1, 4)
    assert ir.FloorDiv(8 * r + c - 7, 4) == 2 * r - 2 + ir.FloorDiv(c + 1, 4)
    assert ir.Mod(4 * r - c + 9, 4).args[0] == 4 * r - c + 9                 # a negative term: no split
    for rv in (1, 2):
        for cv in range(8):
            v = 8 * rv + cv - 7
            env = {r: rv, c: cv}
            for e, want in ((ir.Mod(8 * r + c - 7, 4), v % 4), (ir.FloorDiv(8 * r + c - 7, 4), v // 4)):
                got = eval(ir.format_index(e, "/").replace("/", "//"), {}, {"r": rv, "c": cv})
                assert got == want, (e, env)


def test_pad_of_a_shifted_reshape(backend):
    """A reshape of a transposed value, sliced and padded: its index has a negative constant inside %."""
    def fn(a):
        y = (a * 2).reshape(2, 8)[:, 1:]
        return torch.nn.functional.pad(y, (0, 0, 1, 0)) + 1
    check(fn, torch.arange(16.).reshape(4, 4).t(), backend=backend)


def _lower_to_kernels(fn, inputs):
    """Seconds from the ATen graph to scheduled kernels and printed code (no C++ build), and the graph."""
    from graphjit.compiler.codegen import cpp
    aten = decompose.decompose(torch.fx.symbolic_trace(fn), inputs)
    start = time.perf_counter()
    graph = lowering.lower(aten, inputs)
    graph.verify()
    cpp.generate(graph, scheduler.schedule(graph))
    return time.perf_counter() - start, graph


def test_split_into_many_pieces_computes_its_input_once():
    """A lazy value split into 1408 pieces, all returned (as across a graph break): one buffer, viewed
    1408 times, not 1408 computed buffers (~18 s of index simplification before)."""
    def fn(x):
        flat = x[0, 1::2].reshape(-1) * 2          # a lazy value: strided slice, merged by a reshape
        return flat.split(3, 0)
    seconds, graph = _lower_to_kernels(fn, [randn(1, 256, 33)])
    assert sum(isinstance(n, ir.ComputedBuffer) for n in graph.nodes) == 1
    assert seconds < 10, f"{seconds:.1f} s from the ATen graph to kernels"


def test_reshape_chains_compile_quickly():
    """Reshapes that neither merge nor split whole dims build floor/mod chains on every index; sympy's own
    Mod took seconds over this graph (0.94 vs 0.35 s on the 2-core dev machine)."""
    def fn(x, w):
        outs, y = [], x * 2 + 1
        for k in range(4):
            y = y.t().reshape(-1).reshape(24, 352)
            y = y[:, ::2].reshape(-1, 16).t() + w.sum() * k
            y = torch.cat([y, y], 1).reshape(256, 33)
            outs.append(y.cos())
        return outs
    seconds, _ = _lower_to_kernels(fn, [randn(256, 33), randn(5, seed=1)])
    assert seconds < 5, f"{seconds:.1f} s from the ATen graph to kernels"


def test_reduction_dims():
    assert lowering.reduction_dims([1, -1], 2) == [1]          # one dim, named twice
    assert lowering.reduction_dims([0, -1], 0) == [] and lowering.reduction_dims([], 3) == [0, 1, 2]


def test_as_strided_of_an_empty_slice_reads_the_storage(backend):
    """x[:0] has no elements, but as_strided of it reads x's storage as eager does (the graph is refused,
    not compiled with the slice as an empty constant; fuzz 972200361)."""

    def f(x):
        return torch.as_strided(x[: x.shape[0] // 2], (1,), (1,)) >= x
    compiled = graphjit.compile(f, backend="graphjit")
    for n in (1, 1, 4):
        x = torch.arange(n * 3).reshape(n, 3) - 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x)
        assert torch.equal(got, f(x))
        assert not [w for w in caught if "graphjit" in str(w.message)], [str(w.message) for w in caught]


def conv_then_transposed_product(x, w, b):
    v = F.conv1d(x, w, b, padding=1, groups=x.shape[1])
    return torch.matmul(v.mT, v)


def test_convolution_output_laid_out_otherwise_than_its_meta(backend):
    """On one thread eager's CPU convolution of an input whose channels are innermost in memory returns a
    contiguous result where its meta function says channels-innermost strides; the wrapper viewed it with
    the meta's strides (its .mT read the wrong elements; fuzz triton 10800862). A convolution's result
    strides are now checked and a differing one copied."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = randn(3, 1, 3).transpose(-1, -2)[1:]         # [2, 3, 1], strides (3, 1, 3), offset 3
        check(conv_then_transposed_product, x, randn(3, 1, 1, seed=1), randn(3, seed=2), backend=backend)
    finally:
        torch.set_num_threads(threads)
