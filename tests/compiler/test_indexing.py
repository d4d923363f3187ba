"""Advanced indexing (aten.index.Tensor), repeat, short cumsums and argmax/argmin, lowered instead of
falling back to ATen: every HF model's attention mask indexes a padding mask by broadcast aranges; OPT and
RoBERTa compute position ids with a cumsum over the mask; CLIP pools at the argmax of the token ids. Against eager through the C++
codegen and Triton's interpreter (and CUDA where there is a GPU), with negative, int32, broadcast and
non-adjacent indices; each graph must compile without a fallback."""
import pytest
import torch

from graphjit.compiler import decompose, lowering

from .harness import check_lowered, compile_cases, make, run_cases, trace_cases, triton_devices
from .test_ops import Op

aten = torch.ops.aten
F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64


def ix(*values, dtype=I64):
    return torch.tensor(values, dtype=dtype)


def index_inputs(dtype):
    g = torch.Generator().manual_seed(6)
    x3 = make((5, 6, 7), dtype, gen=g)
    return [(x3, ix([0, -1], [2, 3]), ix(1, 4)),
            (make((7, 6, 5), dtype, gen=g).permute(2, 1, 0), ix(4, 0, -5), ix(0, 1, 2, dtype=torch.int32)),
            (make((5, 12, 7), dtype, gen=g)[:, ::2], ix([1], [2]), ix([0, 5]))]     # broadcast [2,1] x [1,2]


def hf_padding_mask(mask):
    """transformers' padding_mask_function under the vmap-free mask builder: mask[batch, kv] with
    broadcast aranges, then a causal mask over the last 3 queries and'ed in."""
    q = 3
    b = torch.arange(mask.shape[0])[:, None, None, None]
    kv = torch.arange(mask.shape[1])[None, None, None, :]
    qi = torch.arange(q)[None, None, :, None]
    return mask.bool()[b, kv] & (kv <= qi + (mask.shape[1] - q))


def _arg_inputs(dtype):
    """Ties (the first index wins), NaN (it wins, the first one), a transposed and a sliced input."""
    g = torch.Generator().manual_seed(8)
    if dtype.is_floating_point:
        x = make((5, 7), dtype, gen=g)
        x[1, 3] = x[1, 5] = float("nan")
        x[2, 4] = x[2, 5] = 100.0
        x[3, 0] = x[3, 6] = -100.0
    else:
        x = torch.randint(-3, 3, (5, 7), generator=g).to(dtype)     # many ties
    return [(x,), (x.t().contiguous().t(),), (make((6, 9), dtype, gen=g)[::2, 1:] if dtype.is_floating_point
                                              else x[::2, 1:],)]


OPS = [
    Op("index_first", lambda x, i, j: x[i] * 2, index_inputs),
    Op("index_middle", lambda x, i, j: x[:, i] + 1, index_inputs),
    Op("index_two_adjacent", lambda x, i, j: x[i, j], index_inputs),
    Op("index_non_adjacent", lambda x, i, j: x[i, :, j], index_inputs),
    Op("index_last", lambda x, i, j: x[..., j].relu(), index_inputs),
    Op("hf_padding_mask", hf_padding_mask,
       lambda d: [(torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]),), (torch.ones(1, 4, dtype=I64),)],
       (F32,)),
    Op("repeat", lambda x: (x.repeat(2, 3) * 1, x.repeat(2, 1, 1) + 1, x.t().repeat(1, 2) - 1),
       lambda d: [(make((3, 4), d),), (make((5, 2), d)[::2],)]),
    Op("cumsum", lambda x: (torch.cumsum(x, 0) * 2, x.t().cumsum(1), x.cumsum(-1, dtype=torch.float32)),
       lambda d: [(make((7, 3), d),), (make((9, 12), d)[::2, 1:],)]),
    Op("argmax_argmin", lambda x: (x.argmax(-1), x.argmin(0, keepdim=True), x.argmax(), x.t().argmax(1),
                                   torch.argmax(x * 2, dim=None, keepdim=True)), lambda d: _arg_inputs(d)),
    Op("argmax_int", lambda x: (x.argmax(-1), x.argmin(1, keepdim=True), x.argmax()), lambda d: _arg_inputs(d),
       (I64, torch.int32)),
    Op("cumsum_position_ids", lambda m: ((m.cumsum(-1) - 1).clamp(min=0) * m, torch.cumsum(m.bool(), 1)),
       lambda d: [(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]]),), (torch.ones(3, 40, dtype=I64),)], (I64,)),
]
PARAMS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
          for op in OPS for dtype in (op.dtypes if op.dtypes != Op.dtypes else (F32, BF16))]


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op(op, dtype):
    check_lowered(op, dtype)


@pytest.mark.parametrize("device", triton_devices(matrix=True))
@pytest.mark.parametrize("op,dtype", PARAMS)
def test_op_triton(op, dtype, device):
    # eager's CUDA cumsum adds in the tensor's dtype (scan_dim with std::plus<BFloat16>: every partial sum
    # rounded to bfloat16), ours in float32, rounded once: up to half an ulp of each partial sum apart per
    # row (an ulp is 0.0625 at 8-16: 0.22 over these 7 rows); the CPU's kernel adds in float32, as ours
    tol = dict(atol=0.25) if op.name == "cumsum" and dtype == torch.bfloat16 and device == "cuda" else {}
    check_lowered(op, dtype, device, **tol)


def test_lowerings_are_reached():
    reached = set()
    for op in OPS:
        cases = op.inputs(F32)
        gm = trace_cases(op.fn, cases)
        inputs = [t for case in cases for t in case]
        reached |= {n.target for n in decompose.decompose(gm, inputs).graph.nodes if n.op == "call_function"}
    lowered = {aten.index.Tensor, aten.repeat.default, aten.cumsum.default, aten.argmax.default,
               aten.argmin.default}
    assert lowered <= reached and lowered <= set(lowering.LOWERINGS)


def test_long_cumsum_stays_aten():
    """Past lowering.CUMSUM_MAX_LENGTH the per-element masked sum would cost length**2."""
    x = make((2, lowering.CUMSUM_MAX_LENGTH + 1), F32)
    compiled = run_cases(lambda x: x.cumsum(-1), [(x,)], rtol=1e-4, atol=1e-4)
    assert [target for target, _ in compiled.graph.fallbacks] == [str(aten.cumsum.default)]


def test_index_out_of_range_raises():
    x = make((3, 5), F32)
    compiled, _ = compile_cases(lambda x, i: x[:, i] + 1, [(x, ix(0, 4))])
    assert compiled(x, ix(-5, 2))[0].shape == (3, 2)
    with pytest.raises(IndexError, match="index out of range"):
        compiled(x, ix(1, 5))


def embeddings_normalized(ids, positions, word, pos, weight, bias):
    """BERT's embeddings: two tables' rows gathered by ids, added, and layer-normalized."""
    return torch.nn.functional.layer_norm(word[ids] + pos[positions], (word.shape[1],), weight, bias)


def test_index_read_once_per_row_is_checked_before_the_row_loops():
    """An index each row reads once (a token id) is converted and bounds-checked before the row's loops
    (CppKernel.hoisted_index), so the loops carry no branch and vectorize; results are eager's, and an
    out-of-range id still raises."""
    g = torch.Generator().manual_seed(3)
    ids, positions = torch.randint(0, 50, (4, 9), generator=g), torch.arange(9).expand(4, 9)
    word, pos = make((50, 40), F32, gen=g), make((16, 40), F32, gen=g)
    weight, bias = make((40,), F32, gen=g), make((40,), F32, gen=g)
    compiled = run_cases(embeddings_normalized, [(ids, positions, word, pos, weight, bias)], atol=1e-5, rtol=1e-5)
    body = compiled.source[compiled.source.index("omp simd"):]
    assert "gj_fail(" not in body, compiled.source
    with pytest.raises((IndexError, RuntimeError)):
        compiled(ids + 50, positions, word, pos, weight, bias)
