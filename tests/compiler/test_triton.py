"""Triton codegen against eager: every op of test_ops.py (odd sizes, 0-d, transposed, sliced, broadcast
inputs; fp32, bf16, int, bool) compiled to Triton kernels, run in Triton's interpreter on CPU tensors and,
when a GPU is present, on CUDA tensors of the same layouts. Then kernel shapes (persistent vs looped
reductions, masks, names), the module cache, and a model end to end.

The interpreter is slow: shapes stay small, and each op's cases share one graph (one module).
"""
import os

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")

from graphjit.compiler.codegen import triton as triton_codegen  # noqa: E402
from graphjit.compiler.runtime import triton_build  # noqa: E402
from graphjit import config as gj_config  # noqa: E402
from graphjit.compiler import compile_graph  # noqa: E402

from graphjit.testing import TOLERANCES, assert_same  # noqa: E402

from .harness import describe, make, trace_cases, triton_devices  # noqa: E402
from .test_ops import ALL  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = triton_devices()

# Triton's reductions add in a tree and its exp/division are not libm's: a few ulp more than C++'s loops.
TRITON_TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4)}


def to_device(t, device):
    """t on device with the same sizes, strides and storage offset (a copy of its whole storage)."""
    if not isinstance(t, torch.Tensor) or t.device.type == device:
        return t
    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
    return flat.to(device).as_strided(t.shape, t.stride(), t.storage_offset())


def compile_triton(fn, cases, device):
    cases = [tuple(to_device(t, device) for t in case) for case in cases]
    gm = trace_cases(fn, cases)
    inputs = [t for case in cases for t in case]
    with gj_config.patch(triton_cpu=1):         # CPU tensors go to Triton's interpreter
        compiled = compile_graph(gm, inputs)
    assert hasattr(compiled, "launches"), "the graph ran eagerly instead of compiling to Triton"
    return compiled, cases, inputs


def triton_tolerance(expected, tolerance):
    """atol and rtol for a Triton result like `expected`: TRITON_TOLERANCE, else TOLERANCES, for its dtype;
    an op's own tolerance loosens, never tightens, those. None (the leaves' TOLERANCES) for a non-tensor."""
    if not isinstance(expected, torch.Tensor):
        return dict(atol=tolerance.get("atol"), rtol=tolerance.get("rtol"))
    dtype = expected.dtype
    base = {**dict(atol=0.0, rtol=0.0), **TOLERANCES.get(dtype, {}), **TRITON_TOLERANCE.get(dtype, {})}
    return {key: max(value, tolerance.get(key, 0.0)) for key, value in base.items()}


def run_triton(fn, cases, device, **tolerance):
    with torch.device(device):          # tensors the function creates (torch.full, arange ...) go there too
        compiled, cases, inputs = compile_triton(fn, cases, device)
        with torch.no_grad():
            got = compiled(*inputs)
            expected = tuple(fn(*case) for case in cases)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_same(g, e, where=f"case {i} (inputs {describe(cases[i])})", **triton_tolerance(e, tolerance))
    return compiled


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory, monkeypatch):
    from graphjit import config
    monkeypatch.setattr(config, "cache_dir", str(tmp_path_factory.getbasetemp() / "kernels"))


OPS = [pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")
       for op in ALL for dtype in op.dtypes]


@pytest.mark.parametrize("device", triton_devices(matrix=True))
@pytest.mark.parametrize("op,dtype", OPS)
def test_op(op, dtype, device):
    run_triton(op.fn, op.inputs(dtype), device, **op.tol)


# ---- kernel shapes ----

def kernels(compiled):
    return list(compiled.launches.values())


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_chain_is_one_flat_kernel(device):
    compiled = run_triton(lambda x: x.sin() + 1, [(make((64, 33), torch.float32),)], device)
    (launch,) = kernels(compiled)
    assert launch.kind == "pointwise" and launch.name == "triton_fused_sin_add_0"
    assert "xmask = xindex < 2112" in compiled.source          # 2112 is not a multiple of XBLOCK
    assert "x0 = xindex\n" in compiled.source                  # contiguous: one loop variable, no div/mod


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_output_is_written_contiguously(device):
    """x * 2 of a transposed x is transposed too (eager keeps the layout): the kernel walks memory order."""
    compiled = run_triton(lambda x: x * 2, [(make((7, 33), torch.float32).t(),)], device)
    body = compiled.source.split("def triton_fused")[1]
    assert "//" not in body and "%" not in body        # one flat loop variable over both tensors


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_is_one_persistent_kernel_loading_each_row_once(device):
    compiled = run_triton(lambda x: torch.softmax(x, -1), [(make((16, 1000), torch.float32),)], device)
    (launch,) = kernels(compiled)
    assert launch.kind == "persistent reduction" and launch.constexprs["RBLOCK"] == 1024
    assert compiled.source.count("tl.load(") == 1                # max, sum and output share the row
    assert "rmask = rindex < 1000" in compiled.source


def attention_in_float32(q, k, v):
    vf = v.float()          # made before the scores, stored from the softmax's kernel
    a = torch.softmax((q.float() * 0.125) @ (k.float().transpose(-1, -2) * 0.125), -1)
    return a @ vf


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_keeps_its_exp_in_registers_beside_an_unrelated_copy(device):
    """The values' float copy, fused into the softmax's kernel between the exp (with its sum) and the
    division, split the row's loops: the exp was stored, a barrier waited for it and the division loaded it
    back (ViT-B/16's attention: 165 us against Inductor's 74 on the H200). The copy now runs first, and the
    exp, read only by the loops that share its scope, is never stored nor allocated."""
    q, k, v = (make((2, 64, 2, 64), torch.bfloat16).transpose(1, 2) for _ in range(3))
    compiled = run_triton(attention_in_float32, [(q, k, v)], device)
    (body,) = [b for b in compiled.source.split("def triton_fused")[1:] if "gj_maximum" in b]
    assert "debug_barrier" not in body and "inout_ptr" not in body
    assert body.count("tl.store(") == 2      # the copy and the softmax's output


@pytest.mark.parametrize("device", DEVICES)
def test_long_rows_loop(device, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_persistent_rnumel", 64)
    x = make((3, 300), torch.bfloat16)
    compiled = run_triton(lambda x: torch.softmax(x, -1) + F.layer_norm(x, (300,)), [(x,)], device)
    assert all(k.kind == "looped reduction" for k in kernels(compiled))
    assert "for roffset in range(0, 300, RBLOCK):" in compiled.source


@pytest.mark.parametrize("device", DEVICES)
def test_column_reduction_tiles_along_the_contiguous_dim(device):
    compiled = run_triton(lambda x: x.sum(0), [(make((300, 96), torch.float32),)], device)
    (launch,) = kernels(compiled)
    assert "x-contiguous" in compiled.source and launch.constexprs["XBLOCK"] >= 32


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_is_computed_in_float32(device):
    compiled = run_triton(lambda x, w: F.gelu(F.layer_norm(x, (64,), w)) * 3,
                          [(make((8, 64), torch.bfloat16), make((64,), torch.bfloat16))], device)
    assert ".to(tl.float32)" in compiled.source and ".to(tl.bfloat16)" in compiled.source


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_gelu_residual_is_one_kernel_storing_only_its_output(device):
    def block(x, w, b, r):
        return torch.sigmoid(F.gelu(F.layer_norm(x, (128,), w, b))) + r
    f32 = torch.float32
    compiled = run_triton(block, [(make((16, 128), f32), make((128,), f32), make((128,), f32),
                                   make((16, 128), f32))], device)
    (launch,) = kernels(compiled)
    assert compiled.source.count("tl.store(") == 1 and launch.args[-1] == "buf5" or len(launch.args) == 5


def test_embedding_index_out_of_range_raises():
    w = make((10, 4), torch.float32)
    compiled, _, _ = compile_triton(lambda w, i: F.embedding(i, w), [(w, torch.tensor([1, 2]))], "cpu")
    assert compiled(w, torch.tensor([3, 9]))[0].shape == (2, 4)
    with pytest.raises(IndexError, match="index out of range"):
        compiled(w, torch.tensor([3, 10]))


def test_gpu_index_checks_are_device_asserts_without_a_status_flag():
    """On a GPU, index checks cost no sync: the kernel asserts on the device (compiled with Triton's debug
    option) and the wrapper reads no status flag after it."""
    from graphjit.compiler import decompose, lowering, scheduler
    w, i = make((10, 4), torch.float32), torch.tensor([1, 2, 7])
    gm = trace_cases(lambda w, i: (F.embedding(i, w) * 2,), [(w, i)])
    graph = lowering.lower(decompose.decompose(gm, [w, i]), [w, i])
    source, launches = triton_codegen.generate(graph, scheduler.schedule(graph), "assert")
    (launch,) = [launch for kl in launches.values() for launch in kl.launches]
    assert "tl.device_assert(" in source and "index out of range" in source and "gj_status" not in source
    assert launch.debug and not launch.checks_indices
    source, launches = triton_codegen.generate(graph, scheduler.schedule(graph), "status")
    (launch,) = [launch for kl in launches.values() for launch in kl.launches]
    assert "gj_status" in source and "device_assert" not in source and launch.checks_indices and not launch.debug


@pytest.mark.parametrize("device", DEVICES)
def test_indices_built_from_positions_need_no_check(device):
    """x[:, reversed arange]: the index is built from loop positions and constants, so its bounds are known
    and the kernel reads without a check, a wrap or a status flag; results equal eager's."""
    def flip(x):
        idx = x.shape[1] - 1 - torch.arange(x.shape[1], device=x.device)
        return x[:, idx] * 2
    compiled = run_triton(flip, [(make((6, 9), torch.float32),)], device)
    assert "gj_status" not in compiled.source and "device_assert" not in compiled.source
    assert " < 0, " not in compiled.source          # no negative-index wrap either


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_out_of_range_index_fails_its_device_assert(tmp_path):
    """An out-of-range embedding index on the GPU fails the kernel's device-side assert, as eager's CUDA
    embedding does (in a child process: the assert ends the CUDA context); in range, results are eager's."""
    import subprocess
    import sys
    import textwrap
    script = tmp_path / "oob.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn.functional as F
        from graphjit.compiler import compile_graph
        w = torch.randn(10, 4, device="cuda")
        fn = lambda w, i: (F.embedding(i, w) * 2,)
        gm = torch.fx.symbolic_trace(fn)
        compiled = compile_graph(gm, [w, torch.tensor([1, 2], device="cuda")])
        ok = torch.tensor([3, 9], device="cuda")
        torch.testing.assert_close(compiled(w, ok)[0], fn(w, ok)[0])
        print("in range ok", flush=True)
        compiled(w, torch.tensor([3, 10], device="cuda"))
        torch.cuda.synchronize()
        print("no assert", flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "in range ok" in done.stdout, done.stderr[-3000:]
    assert "no assert" not in done.stdout and done.returncode != 0
    assert "index out of range" in done.stderr and "device-side assert" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("device", DEVICES)
def test_cat_and_pad_never_load_outside_their_inputs(device):
    """The lowerings compute every piece in every lane and select after: loads are masked to the buffer."""
    compiled = run_triton(lambda a, b: torch.cat([a, b * 2, a], dim=-1) + F.pad(a, (2, 1)).sum(-1, keepdim=True),
                          [(make((7, 3), torch.float32), make((7, 5), torch.float32))], device)
    assert " < 21)" in compiled.source and " >= 0)" in compiled.source


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_input_runs(device):
    """Kernels assume 16-byte aligned inputs only where the example was; the wrapper checks."""
    x = make((65,), torch.float32)
    compiled, _, (arg,) = compile_triton(lambda t: t * 2, [(x[:64],)], device)
    shifted = to_device(x, device)[1:]
    torch.testing.assert_close(compiled(shifted)[0], shifted * 2)


@pytest.mark.gpu
def test_product_with_unaligned_width_is_padded_on_cuda():
    """GPT-2's logits: N = 50257 has no fast cuBLAS kernel; the product runs with rows padded to 50264, and
    a product returned as it is keeps the padded rows (strides (50264, 1), as torch.compile's)."""
    x, w, b = make((256, 96), torch.bfloat16), make((50257, 96), torch.bfloat16), make((50257,), torch.bfloat16)
    compiled = run_triton(lambda x, w, b: ((x @ w.t()) * 2, F.linear(x, w, b), x @ w.t()), [(x, w, b)], "cuda",
                          rtol=2e-2, atol=2e-2)
    assert compiled.wrapper_source.count("rows padded 50257 -> 50264") == 3
    cuda = [t.cuda() for t in (x, w, b)]
    assert compiled(*cuda)[0][2].stride() == (50264, 1)


# ---- the module cache ----

def test_module_cache_rewrites_a_damaged_file(tmp_path, monkeypatch):
    from graphjit import config
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(triton_build, "_modules", {})
    source = triton_codegen.PRELUDE + "\nVALUE = 42\n"
    path = triton_build.module_path(source)
    assert triton_build.load(source).VALUE == 42
    with open(path, "w") as f:
        f.write("VALUE = 666  # not what hashes to this name\n")
    monkeypatch.setattr(triton_build, "_modules", {})
    assert triton_build.load(source).VALUE == 42
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(path)]     # no temporary files


# ---- end to end ----

@pytest.mark.parametrize("device", DEVICES)
def test_tiny_gpt_end_to_end(device):
    import graphjit
    from graphjit.examples.tiny_gpt import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=64, block_size=16)).eval().to(device)
    compiled_fns = []

    def backend(gm, example_inputs):
        with gj_config.patch(triton_cpu=1):     # CPU tensors go to Triton's interpreter
            fn = compile_graph(gm, example_inputs)
        compiled_fns.append(fn)
        return fn
    compiled = graphjit.compile(model, backend=backend)
    idx = torch.randint(0, 64, (2, 16), device=device)
    with torch.inference_mode():
        assert_same(compiled(idx), model(idx), where="gpt logits", rtol=1e-4, atol=1e-4)
    assert all(hasattr(fn, "launches") for fn in compiled_fns)


def test_backend_routes_cpu_graphs_to_triton_under_GRAPHJIT_TRITON_CPU(monkeypatch):
    """Needs the one-line hook in graphjit/compiler/__init__.py: compile_graph hands Triton's graphs on."""
    from graphjit.backends.registry import graphjit_backend
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
    gm = trace_cases(lambda x: x.cos() * 2, [(make((5, 7), torch.float32),)])
    compiled = graphjit_backend(gm, [make((5, 7), torch.float32)])
    assert hasattr(compiled, "launches"), "graphjit's backend did not route this graph to Triton"
