"""Fusion: how many kernels a chain becomes, which buffers are never stored, and the refusal reasons."""
import re

import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit.compiler.scheduler import Kernel

from .harness import extern_count, kernel_count, make, run_cases


def allocations(compiled):
    """New buffers the wrapper allocates (`bufN = empty_strided(...)`, or torch's C++ helpers)."""
    return len(re.findall(r"= empty_\w+\(", compiled.wrapper_source))


def test_layer_norm_gelu_sigmoid_residual_is_one_kernel():
    def block(x, w, b, r):
        return torch.sigmoid(F.gelu(F.layer_norm(x, (1024,), w, b))) + r
    compiled = run_cases(block, [(make((256, 1024), torch.float32), make((1024,), torch.float32),
                                  make((1024,), torch.float32), make((256, 1024), torch.float32))])
    assert kernel_count(compiled) == 1
    (kernel,) = compiled.items
    # mean and variance live in registers: the only buffer written is the output
    assert len(kernel.local) == 2 and allocations(compiled) == 1
    assert [len(g.nodes) for g in kernel.groups] == [1, 1, 1]


def test_a_rows_first_element_is_loaded_before_the_simd_loops():
    """layer_norm's mean is shifted by each row's first element; loaded inside the row loops, gcc left
    the output loop (with gelu's erf) scalar, 10x slower: it is loaded once per row, before the loops."""
    def block(x, w, b):
        return F.gelu(F.layer_norm(x, (256,), w, b))
    compiled = run_cases(block, [(make((16, 256), torch.float32), make((256,), torch.float32),
                                  make((256,), torch.float32))])
    body = compiled.source[compiled.source.index('extern "C"'):]
    (first,) = set(re.findall(r"auto (tmp\d+) = arg0\[256\*x0\];", body))
    assert body.index(f"auto {first} = ") < body.index("#pragma omp simd")


def test_softmax_is_one_kernel_with_local_reductions():
    compiled = run_cases(lambda x: torch.softmax(x, -1), [(make((64, 1000), torch.float32),)])
    assert kernel_count(compiled) == 1 and allocations(compiled) == 1
    assert "reduction(max:" in compiled.source and "reduction(+:" in compiled.source


def test_attention_chain_is_bmm_kernel_bmm():
    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1) @ v
    t = lambda: make((8, 128, 64), torch.float32)  # noqa: E731
    compiled = run_cases(attention, [(t(), t(), t())], rtol=1e-4, atol=1e-4)
    assert kernel_count(compiled) == 1 and extern_count(compiled) == 2


def test_pointwise_chain_is_one_loop():
    compiled = run_cases(lambda x, y: ((x * 2).exp() + y).relu().sqrt(), [(make((33, 1000), torch.float32),
                                                                           make((1000,), torch.float32))])
    assert kernel_count(compiled) == 1
    # the contiguous [33, 1000] loop nest was not merged (y broadcasts), but stays two loops, no div/mod
    assert " / " not in compiled.source.split("kernel0")[1].split("return")[0].replace(" / 0x", "")


def test_contiguous_loops_merge_into_one():
    compiled = run_cases(lambda x: x.sin() + 1, [(make((64, 33), torch.float32),)])
    body = compiled.source.split('extern "C" int kernel0')[1]
    assert body.count("for (") == 1 and "< 2112" in body


def test_channels_last_pointwise_loops_over_channels_innermost():
    """A per-channel scale on a channels-last tensor: the loops follow the output's memory order, so the
    innermost (simd) loop runs over the 48 channels, stride 1, not over pixels 48 floats apart."""
    x = make((2, 48, 5, 7), torch.float32).contiguous(memory_format=torch.channels_last)
    w = make((48,), torch.float32)
    compiled = run_cases(lambda x, w: (x * w.view(1, -1, 1, 1) + 1).relu(), [(x, w)])
    body = compiled.source.split('extern "C" int kernel0')[1].split("return")[0]
    loops = re.findall(r"for \(int64_t (\w+) = 0; \1 < (\d+);", body)
    assert loops and loops[-1][1] == "48", loops


def _kernels_source(compiled):
    return compiled.source[compiled.source.index('extern "C" int kernel'):]


def _exp_twice(x):
    e = x.exp()
    return e + 1, e.sum(-1)


def test_shared_expensive_value_is_computed_once():
    # exp(x) has two readers: it is realized once instead of being recomputed in both
    compiled = run_cases(_exp_twice, [(make((16, 100), torch.float32),)])
    assert _kernels_source(compiled).count("gj_exp(") == 1


def test_cheap_shared_value_is_inlined():
    def shared_sum(x, y):
        s = x + y
        return s * 2, s.sum(-1)
    compiled = run_cases(shared_sum, [(make((16, 100), torch.float32), make((16, 100), torch.float32))])
    # one kernel, one inner loop: the row's sum and s * 2 both inline x + y, which CSE computes once
    assert kernel_count(compiled) == 1 and allocations(compiled) == 2
    assert len(compiled.items[0].groups) == 1
    assert _kernels_source(compiled).count("(tmp1 + tmp2)") == 1


def test_reduction_over_other_dim_is_refused_with_reason(capsys, monkeypatch):
    monkeypatch.setattr(graphjit.config, "logs", "fusion")
    compiled = run_cases(lambda x: x - x.mean(0), [(make((64, 48), torch.float32),)])
    assert kernel_count(compiled) == 2
    assert "not fused into kernel0: loops differ" in capsys.readouterr().err


def test_fallback_is_counted_and_logged(capsys, monkeypatch):
    monkeypatch.setattr(graphjit.config, "logs", "fusion")
    compiled = run_cases(lambda x: torch.cumprod(x, -1) * 2, [(make((8, 16), torch.float32),)])
    assert [op for op, _ in compiled.graph.fallbacks] == ["aten.cumprod.default"]
    assert "fallback" in capsys.readouterr().err


def test_gpt_block_kernels():
    from graphjit.examples.tiny_gpt import Block, GPTConfig
    block = Block(GPTConfig(n_embd=64, n_head=4)).eval()
    x = torch.randn(2, 16, 64)
    counter = []

    def backend(gm, inputs):
        from graphjit.backends.registry import graphjit_backend
        compiled = graphjit_backend(gm, inputs)
        counter.append(compiled)
        return compiled
    with torch.no_grad():
        out = graphjit.compile(block, backend=backend)(x)
        torch.testing.assert_close(out, block(x), rtol=1e-4, atol=1e-4)
    (compiled,) = counter
    kernels = [i for i in compiled.items if isinstance(i, Kernel)]
    # ln_1; residual + ln_2; gelu (feeds a matmul); the last residual. Matmuls and attention are externs.
    assert len(kernels) == 4, compiled.items
    assert not compiled.graph.fallbacks


def test_fusion_looks_past_a_kernel_with_other_loops():
    # x.sum(0) iterates [33]; amax(1), var(1) iterate [7]: var joins amax's kernel across the sum's
    compiled = run_cases(lambda x: (x.amax(1), x.sum(0), x.var(1)), [(make((7, 33), torch.float32),)])
    assert kernel_count(compiled) == 2


def test_softmax_computes_exp_once_into_a_row_scratch():
    compiled = run_cases(lambda x: torch.softmax(x, -1), [(make((64, 1000), torch.float32),)])
    (kernel,) = compiled.items
    # exp(x - max) is kept per row on the stack (no allocation), read back to scale by 1/sum
    assert len(kernel.scratch) == 1 and allocations(compiled) == 1
    assert _kernels_source(compiled).count("gj_exp(") == 1


def _residual_blocks(x, w1, w2, w3, g, b):
    # each block: layer_norm(previous + matmul(previous)) on [batch, tokens, dim]; a layer norm's output is
    # read by the next matmul (an extern call, through a 2-d view) and by the next residual add
    h = F.layer_norm(x, (64,), g, b)
    for w in (w1, w2, w3):
        h = F.layer_norm(h + h @ w, (64,), g, b)
    return h


def test_residual_chain_across_extern_calls_reads_stored_values():
    weights = [make((64, 64), torch.float32) for _ in range(3)]
    compiled = run_cases(_residual_blocks, [(make((2, 16, 64), torch.float32), *weights,
                                             make((64,), torch.float32), make((64,), torch.float32))],
                         rtol=1e-4, atol=1e-4)
    kernels = [i for i in compiled.items if isinstance(i, Kernel)]
    assert len(kernels) == 4 and extern_count(compiled) == 3
    # every block's kernel reads the matmul's result, the previous layer norm's stored output, g and b:
    # none recomputes the earlier blocks
    for kernel in kernels[1:]:
        args = compiled.source.split(f'int {kernel.name}(')[1].split(')')[0]
        assert args.count("__restrict__") == 5, args


def test_layer_norm_output_read_twice_is_stored_once():
    def f(x, w, b):
        y = F.layer_norm(x, (64,), w, b)
        return y * 2, y.sum(-1)
    compiled = run_cases(f, [(make((32, 64), torch.float32), make((64,), torch.float32),
                              make((64,), torch.float32))])
    # the output of native_layer_norm (a getitem) has two readers: it is computed once, kept in a register
    # for both (not inlined into each)
    (kernel,) = compiled.items
    assert [n.name for n in kernel.nodes if not n.is_reduction and n.name in kernel.local]
    assert allocations(compiled) == 2


def test_a_residual_sum_read_again_later_is_computed_in_the_layer_norms_kernel():
    """layer_norm's mean is shifted by each row's first element; where the normalized value is a stored
    sum (it is read again later), the first element is recomputed from the sum's inputs, not loaded: a load
    of the sum's first element kept the layer norm out of the kernel that computes the sum (a GPT-2 decode
    step ran both as kernels of their own)."""
    def f(a, b, c, w, bias):
        h = a + b + c
        return F.layer_norm(h, (128,), w, bias) * 2, h
    for shape in ((1, 1, 128), (4, 3, 128)):
        compiled = run_cases(f, [(*[make(shape, torch.float32) for _ in range(3)], make((128,), torch.float32),
                                  make((128,), torch.float32))])
        assert kernel_count(compiled) == 1, shape


def test_a_query_split_from_a_fused_projection_goes_to_attention_without_a_copy():
    """q of [1, heads, 1, dim] viewed from a [1, 1, 3 * width] projection: its strides differ from the
    traced ones only at dims of size 1, which no address depends on, so attention takes it as a view."""
    def f(x, w, k, v):
        q, _, _ = (x @ w).split(64, -1)
        q = q.view(1, 1, 4, 16).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v)
    compiled = run_cases(f, [(make((1, 1, 64), torch.float32), make((64, 192), torch.float32),
                              make((1, 4, 9, 16), torch.float32), make((1, 4, 9, 16), torch.float32))],
                         rtol=1e-5, atol=1e-5)
    assert kernel_count(compiled) == 0 and extern_count(compiled) == 2


def _layers_with_one_mask(x, mask, w):
    outs = []
    for _ in range(4):
        bias = torch.where(mask, 0.0, float("-inf"))
        x = torch.softmax(x @ w + F.pad(bias, (0, 3))[..., :mask.shape[-1]], -1)
        outs.append(x)
    return tuple(outs)


def test_an_op_repeated_on_the_same_arguments_is_computed_once():
    """Each layer converts and pads the one mask again; the four conversions become one kernel."""
    compiled = run_cases(_layers_with_one_mask, [(make((1, 4, 8), torch.float32), make((1, 1, 8), torch.bool),
                                                  make((8, 8), torch.float32))], rtol=1e-5, atol=1e-5)
    readers = [k for k in compiled.items if isinstance(k, Kernel) and
               any(name == "arg1" for n in k.nodes for name, _ in n.accesses()[0])]
    assert len(readers) == 1 and kernel_count(compiled) == 5


def test_repeated_ops_that_outputs_hold_stay_apart():
    """Outputs computed alike are distinct tensors with memory of their own (as eager's), views of them
    too; random ops are never merged."""
    def f(x):
        return x + 1, x + 1, (x * 2).view(-1), (x * 2).view(-1), torch.rand_like(x), torch.rand_like(x)
    x = make((3, 4), torch.float32)
    out = graphjit.compile(f)(x)
    expected = f(x)
    for got, want in zip(out[:4], expected[:4]):
        torch.testing.assert_close(got, want)
    assert len({t.untyped_storage().data_ptr() for t in out}) == 6
    assert not torch.equal(out[4], out[5])


def _statistics_after_the_matmul(x, w):
    """A row statistic of x computed after a matmul that does not read it: it joins the kernel before the
    matmul, which reads x's rows already."""
    h = torch.relu(x)
    y = h @ w
    return y, (x * x).sum(1)


def test_work_independent_of_a_matmul_joins_the_kernel_before_it():
    gen = torch.Generator().manual_seed(7)
    compiled = run_cases(_statistics_after_the_matmul, [(make((64, 48), torch.float32, gen=gen),
                                                         make((48, 32), torch.float32, gen=gen))], rtol=1e-4, atol=1e-4)
    assert kernel_count(compiled) == 1 and extern_count(compiled) == 1
    assert compiled.items.index(next(i for i in compiled.items if isinstance(i, Kernel))) == 0


def _statistics_of_the_product(x, w):
    """A statistic that reads the matmul's result stays after it."""
    y = torch.relu(x) @ w
    return y, (y * x[:, :32]).sum(1)


def test_work_reading_a_matmul_stays_after_it():
    gen = torch.Generator().manual_seed(8)
    compiled = run_cases(_statistics_of_the_product, [(make((64, 48), torch.float32, gen=gen),
                                                       make((48, 32), torch.float32, gen=gen))], rtol=1e-4, atol=1e-4)
    kinds = [isinstance(i, Kernel) for i in compiled.items]
    assert kinds == [True, False, True]


def test_extern_barriers():
    """Work moves back across matmuls and convolutions only: not across a call that writes into memory,
    draws random numbers, or checks something (a check raises before later work runs)."""
    from graphjit.compiler.decompose import RUNTIME_CHECKS
    from graphjit.compiler.ir import ExternKernel
    from graphjit.compiler.scheduler import _extern_barrier
    aten = torch.ops.aten
    barrier = lambda op: _extern_barrier(ExternKernel("e", op, (), {}, "extern op"))  # noqa: E731
    assert not barrier(aten.mm.default) and not barrier(aten.convolution.default)
    assert barrier(aten.copy_.default) and barrier(aten.index_put_.default)
    assert barrier(aten.rand.default) and barrier(aten.native_dropout.default)
    assert barrier(aten._linalg_check_errors.default) and barrier(aten.bincount.default)
    assert all(barrier(op) for op in RUNTIME_CHECKS)
    assert barrier(lambda *a: None)


def _cholesky_then_division(a, x, d):
    """A check (cholesky's) before independent work that raises on its own (an integer division by zero):
    the check's error comes first, as in eager."""
    lower = torch.linalg.cholesky(a * 2)
    return lower, x // d


def test_a_check_raises_before_later_work_runs():
    a, x, d = -torch.eye(4), torch.arange(16).reshape(4, 4), torch.zeros(4, 4, dtype=torch.int64)
    with pytest.raises(torch.linalg.LinAlgError):
        _cholesky_then_division(a, x, d)
    compiled = graphjit.compile(_cholesky_then_division, backend="graphjit")
    with pytest.raises(torch.linalg.LinAlgError):
        compiled(a, x, d)
    good = torch.eye(4) * 3, x, torch.ones(4, 4, dtype=torch.int64)
    for got, expected in zip(compiled(*good), _cholesky_then_division(*good)):
        assert torch.equal(got, expected)
