"""Triton graphs compute 2-D convolutions and what follows them in channels-last memory
(decompose.channels_last_convolutions, config.conv_channels_last): each convolution reads an NHWC input,
the ops after it lay out their results as eager lays out ops on channels-last tensors, and the outputs come
back in eager's strides. Run in Triton's interpreter on CPU tensors, against eager."""
import pytest
import torch
import torch.nn.functional as F

import graphjit
from graphjit import config as gj_config
from graphjit.testing import CompileCounter
from graphjit.compiler import decompose

from .conftest import _triton_available
from .harness import check_calls

# the tests that compile through Triton's code generator (its interpreter, on CPU tensors)
needs_triton = pytest.mark.skipif(not _triton_available(), reason="Triton is not installed")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 8)
        self.conv_mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.conv_out = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        h = F.silu(self.norm(self.conv_in(x)))
        h = self.conv_mid(h) + h
        h = self.conv_out(F.gelu(self.depthwise(h)))
        # outputs: NCHW in eager (a convolution's, an upsampled one, a slice), and a reduction
        return h, h.mean((2, 3)), F.interpolate(h, scale_factor=2.0), h[:, 1:3].contiguous()


def _convolution_inputs(fn, *args):
    """[strides of each convolution's input] in the ATen graph the Triton compiler lowers."""
    seen = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        decompose.channels_last_convolutions(aten)
        seen.extend(n.args[0].meta["val"].stride() for n in aten.graph.nodes
                    if n.target is torch.ops.aten.convolution.default)
        return gm.forward
    graphjit.compile(fn, backend=backend)(*args)
    return seen


def test_convolutions_read_channels_last_inputs():
    torch.manual_seed(0)
    block = Block().eval()
    with torch.no_grad():
        strides = _convolution_inputs(block, torch.randn(2, 3, 8, 8))
    # conv_in, conv_mid and conv_out read NHWC; the depthwise one reads what precedes it (NHWC too)
    assert strides == [(192, 1, 24, 3), (512, 1, 64, 8), (512, 1, 64, 8), (512, 1, 64, 8)]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_convolutions_give_eager_values_and_strides(triton_interpreter, dtype):
    torch.manual_seed(0)
    block = Block().eval().to(dtype)

    def make_inputs(call):
        return (torch.randn(2, 3, 8, 8, dtype=dtype),)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    with torch.no_grad():
        counter = check_calls(block, make_inputs, "triton", **tol)
        assert counter.frame_count == 1
        (compiled,) = counter.compiled_functions()
        convs = [i for i in compiled.items if "convolution" in str(getattr(i, "op", ""))]
        assert len(convs) == 4 and all(int(c.args[0].strides[1]) == 1 for c in convs)     # NHWC inputs
        x = make_inputs(0)[0]
        got, want = graphjit.compile(block, backend="graphjit")(x), block(x)
    assert [t.stride() for t in got] == [t.stride() for t in want]


@needs_triton
def test_inputs_already_channels_last_and_the_knob_off_keep_eager_layouts(triton_interpreter, monkeypatch):
    torch.manual_seed(0)
    block = Block().eval()
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        strides = _convolution_inputs(block, x)
    assert strides[0] == (192, 1, 24, 3)
    monkeypatch.setattr(gj_config, "conv_channels_last", 0)
    with torch.no_grad():
        counter = check_calls(block, lambda call: (torch.randn(2, 3, 8, 8),), "triton", atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1


def test_an_output_in_neither_layout_keeps_the_graph_as_traced():
    """An output whose eager strides are neither contiguous nor channels-last (a transposed convolution
    result) can't be restored by a copy: the pass leaves the graph as it was."""
    weight = torch.randn(4, 3, 3, 3)

    def f(x):
        return F.conv2d(x, weight).transpose(2, 3)
    seen = []

    def backend(gm, example_inputs):
        aten = decompose.decompose(gm, example_inputs)
        code = aten.code
        seen.append((decompose.channels_last_convolutions(aten), aten.code == code))
        return gm.forward
    graphjit.compile(f, backend=backend)(torch.randn(1, 3, 6, 6))
    assert seen == [(False, True)]


@needs_triton
def test_a_residual_stream_eager_keeps_transposed_is_stored_contiguous(triton_interpreter):
    """Whisper's encoder: conv1d, permute, + positions, then residual adds. Eager's adds take the layout of
    their first operand, so the residual stays transposed and each add reads its contiguous operand one
    strided element at a time; Triton buffers whose operand of the same shape is contiguous are stored
    contiguous (lowering._permuted_by_an_operand). Outputs keep eager's strides."""
    torch.manual_seed(0)
    conv, norm, proj = torch.nn.Conv1d(4, 16, 3, padding=1), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)
    positions = torch.randn(10, 16)

    def encoder(x):
        h = F.gelu(conv(x)).permute(0, 2, 1) + positions
        for _ in range(3):
            h = h + proj(norm(h))
        return h, norm(h)
    with torch.no_grad():
        counter = check_calls(encoder, lambda call: (torch.randn(2, 4, 10),), "triton", atol=1e-5, rtol=1e-5)
        (compiled,) = counter.compiled_functions()
        residuals = [n for n in compiled.graph.nodes if type(n).__name__ == "ComputedBuffer"
                     and tuple(int(s) for s in n.layout.sizes) == (2, 10, 16)]
        transposed = [n.name for n in residuals if tuple(int(s) for s in n.layout.strides) == (160, 1, 10)]
        # transposed: the first add's (its operands are transposed or broadcast) and the returned h's
        assert len(residuals) >= 4 and len(transposed) == 2, transposed
        x = torch.randn(2, 4, 10)
        got, want = graphjit.compile(encoder, backend="graphjit")(x), encoder(x)
    assert [t.stride() for t in got] == [t.stride() for t in want]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_convolution_bias_is_added_by_the_kernel_that_reads_the_result(triton_interpreter, dtype):
    """Eager's CUDA convolution adds its bias in a kernel of its own; in Triton graphs the library call gets
    no bias and the add (in float32 for 16-bit tensors, rounded once, as eager's) fuses into the next
    kernel: a transposed convolution, a strided one and a 1-D one too."""
    torch.manual_seed(0)
    down = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1).to(dtype)
    up = torch.nn.ConvTranspose2d(6, 4, 2, stride=2).to(dtype)
    line = torch.nn.Conv1d(4, 5, 3).to(dtype)

    def f(x, y):
        h = F.silu(down(x))
        return up(h) * 2, F.relu(line(y)), down(x)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    with torch.no_grad():
        counter = check_calls(f, lambda call: (torch.randn(2, 4, 8, 8, dtype=dtype), torch.randn(2, 4, 9, dtype=dtype)),
                              "triton", **tol)
        (compiled,) = counter.compiled_functions()
    convs = [i for i in compiled.items if "convolution" in str(getattr(i, "op", ""))]
    assert len(convs) == 3 and all(c.args[2] is None for c in convs)


def _outputs_like_eager(fn, *args, atol=1e-5):
    """fn compiled (Triton) against eager: values, strides, storage offsets and which outputs share memory."""
    counter = CompileCounter("graphjit")
    with torch.no_grad():
        want, got = fn(*args), graphjit.compile(fn, backend=counter)(*args)
    assert not counter.ran_as_captured()
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=atol, rtol=atol)
        # strides where the size is not 1 (no address depends on the others)
        assert [st for st, n in zip(g.stride(), g.shape) if n != 1] == \
            [st for st, n in zip(w.stride(), w.shape) if n != 1] and g.storage_offset() == w.storage_offset()
    storages = lambda outs: [[a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in outs]
                             for a in outs]
    assert storages(got) == storages(want)


@needs_triton
def test_outputs_that_alias_or_read_the_layout_keep_eager_memory(triton_interpreter):
    """An output that is memory of another (a view, a chunk) and a graph with as_strided keep eager's
    layouts (the pass would return copies, or as_strided would index the NHWC buffer); an output restored
    into eager's layout gets eager's strides."""
    torch.manual_seed(0)
    w = torch.randn(4, 3, 3, 3)
    x = torch.randn(2, 3, 6, 7)
    _outputs_like_eager(lambda x: (F.conv2d(x, w), F.conv2d(x, w)[None]), x)
    _outputs_like_eager(lambda x: (F.conv2d(x, w)[1] * 1, F.conv2d(x, w)[:, 1, 0, 0]), x)
    _outputs_like_eager(lambda x: (F.conv2d(x, w).as_strided((2, 5), (1, 2)) + 1,), x)
    _outputs_like_eager(lambda x: (F.conv2d(x, w).permute(0, 2, 3, 1) + 1,), torch.randn(2, 3, 3, 3))
    _outputs_like_eager(lambda x: (F.conv2d(x, w[:1]).permute(0, 2, 3, 1) * 2,), x)


@needs_triton
def test_a_buffer_read_by_as_strided_keeps_eager_strides(triton_interpreter):
    def f(a, b, z):
        t = a.permute(0, 2, 1) * b.permute(0, 2, 1) + z
        return t.as_strided((3, 4), (1, 7)) * 2, t.cumsum(1)
    _outputs_like_eager(f, torch.randn(2, 8, 5), torch.randn(2, 8, 5), torch.randn(2, 5, 8))


@needs_triton
def test_group_norm_keeps_eager_layout_and_dtype_rules(triton_interpreter):
    from torch._subclasses.fake_tensor import FakeTensorMode
    gw, gb = torch.randn(8), torch.randn(8)
    x = torch.randn(2, 8, 6, 7).contiguous(memory_format=torch.channels_last)
    with FakeTensorMode() as mode:
        traced = F.group_norm(mode.from_tensor(x), 2).stride()
    if traced == F.group_norm(x, 2).stride():
        _outputs_like_eager(lambda x: (F.group_norm(x, 4, gw, gb), F.group_norm(x, 2)), x)
    else:   # torch 2.14's meta function lays it out contiguous where the CPU kernel keeps channels-last
        with torch.no_grad():
            got = graphjit.compile(lambda x: F.group_norm(x, 4, gw, gb), backend="graphjit")(x)
        torch.testing.assert_close(got, F.group_norm(x, 4, gw, gb), atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="mixed dtype"):       # as eager's CPU kernel raises
        with torch.no_grad():
            graphjit.compile(lambda x: F.group_norm(x, 4, gw.half(), gb.half()), backend="graphjit")(x)
