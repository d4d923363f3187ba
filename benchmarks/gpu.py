"""GPU inference, side by side in one process: eager vs torch.compile (Inductor, default mode) vs
graphjit.compile(model, backend="graphjit") (graphjit's compiler: Triton kernels + ATen extern calls).
Models (bf16, or fp32 with --dtype fp32) built from configs with random weights (no downloads); --only
takes workloads and groups: core (GPT-2 prefill and one token, BERT, ResNet-50, ViT), zoo (benchmarks/zoo.py: more decoders, encoders, vision
models and a diffusers UNet), decoders, vision, all. Median ms per call (synchronized,
so CPU launch overhead counts), speedup over eager, cold compile seconds (first call, fresh caches for
both compilers), max relative error vs eager (max |out - eager| / max |eager|).

    python benchmarks/gpu.py [--only gpt2_prefill,bert] [--runs 50] [--out DIR] [--profile]
    GRAPHJIT_TRITON_CPU=1 ./dev python 3.12 benchmarks/gpu.py --smoke     # tiny models on CPU: checks this script

--profile adds, per workload, where GPU time goes (torch.profiler): matmul/attention library kernels vs
generated Triton kernels vs everything else, and graphjit's slowest Triton kernels with the bandwidth they
reach (bytes = each argument buffer read or written once) against a measured device-to-device copy.
DIR/gpu_results.json is rewritten after each workload, so a run cut short keeps what it finished.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback

# Fresh caches for both compilers before either is imported: cold compiles are cold.
_CACHE = tempfile.mkdtemp(prefix="graphjit-gpu-bench-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))
os.environ.setdefault("GRAPHJIT_CACHE_DIR", os.path.join(_CACHE, "graphjit"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import graphjit  # noqa: E402
from benchmarks import zoo  # noqa: E402
from graphjit.backends.registry import registered_backend  # noqa: E402

DEVICE = "cuda"
SMOKE = "--smoke" in sys.argv       # tiny configs (CPU, Triton interpreter): exercises this script only
if SMOKE:
    DEVICE = "cpu"
# --dtype fp32 runs every workload in float32 (models and floating inputs); bf16 otherwise
DTYPE = torch.float32 if "--dtype=fp32" in sys.argv or "--dtype fp32" in " ".join(sys.argv) else torch.bfloat16


# ---------------------------------------------------------------------------------------------------------
# Workloads: (title, model factory, inputs factory, output -> tensor)
# ---------------------------------------------------------------------------------------------------------

def _hf_output(out):
    return out.logits if hasattr(out, "logits") else out[0]


_gpt2 = {}


def gpt2():
    if "model" not in _gpt2:
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        config = GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=100) if SMOKE else GPT2Config()
        _gpt2["model"] = GPT2LMHeadModel(config).to(DEVICE, DTYPE).eval()
    return _gpt2["model"]


def bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                        vocab_size=100) if SMOKE else BertConfig()
    return BertModel(config, add_pooling_layer=False).to(DEVICE, DTYPE).eval()


def resnet50():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18() if SMOKE else torchvision.models.resnet50()
    return model.to(DEVICE, DTYPE, memory_format=torch.channels_last).eval()


def vit():
    from transformers import ViTConfig, ViTModel
    torch.manual_seed(0)
    config = ViTConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                       image_size=32, patch_size=8) if SMOKE else ViTConfig()
    return ViTModel(config, add_pooling_layer=False).to(DEVICE, DTYPE).eval()


def ids(batch, length, vocab):
    if SMOKE:
        batch, length, vocab = min(batch, 2), min(length, 8), 100
    g = torch.Generator(device=DEVICE).manual_seed(1)
    return torch.randint(0, vocab, (batch, length), device=DEVICE, generator=g)


def images(batch, channels_last=False):
    size = 32 if SMOKE else 224
    x = torch.randn(min(batch, 2) if SMOKE else batch, 3, size, size, device=DEVICE, dtype=DTYPE)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


WORKLOADS = {
    "gpt2_prefill": ("GPT-2 124M prefill, batch 8 x 512", gpt2, lambda: (ids(8, 512, 50257),), _hf_output),
    "gpt2_decode": ("GPT-2 124M one token, batch 1 (no past KV)", gpt2, lambda: (ids(1, 1, 50257),), _hf_output),
    "bert": ("BERT-base, batch 16 x 128", bert, lambda: (ids(16, 128, 30522),), _hf_output),
    "resnet50": ("ResNet-50, batch 32, channels_last", resnet50, lambda: (images(32, True),), lambda o: o),
    "vit": ("ViT-B/16, batch 32", vit, lambda: (images(32),), _hf_output),
}
CORE = list(WORKLOADS)
WORKLOADS.update(zoo.workloads(DEVICE, DTYPE, SMOKE))
# names --only takes for several workloads at once
GROUPS = {"core": CORE, "zoo": [k for k in WORKLOADS if k not in CORE], "all": list(WORKLOADS)}
GROUPS.update({"decoders": [k for k in WORKLOADS if k.endswith(("_prefill", "_decode"))],
               "vision": ["resnet50", "vit", "convnext_t", "efficientnet_b0", "mobilenet_v3_l", "densenet121",
                          "regnet_y_1_6gf", "swin_t"]})


# ---------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------

def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed_call(fn, inputs):
    synchronize()
    start = time.perf_counter()
    out = fn(*inputs)
    synchronize()
    return out, time.perf_counter() - start


def median_ms(fn, inputs, runs, warmup=10):
    for _ in range(warmup):
        fn(*inputs)
    samples = [timed_call(fn, inputs)[1] * 1e3 for _ in range(runs)]
    return statistics.median(samples)


def interleaved_ms(contenders, inputs, runs, row, suffix, warmup=10):
    """{name: (median ms, (25th, 75th percentile))} of each contender, timed in rounds of one call each,
    the order rotating: a slow spell of the machine (its CPU is shared) falls on all of them alike instead
    of on whichever was being timed. A contender that fails is dropped, its error put in row."""
    samples = {name: [] for name in contenders}
    for name, fn in list(contenders.items()):
        try:
            for _ in range(warmup):
                fn(*inputs)
        except Exception as e:           # noqa: BLE001
            row[f"{name}{suffix}_error"] = f"{type(e).__name__}: {e}"[:800]
            del samples[name]
    names = list(samples)
    for r in range(runs):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name in samples:
                try:
                    samples[name].append(timed_call(contenders[name], inputs)[1] * 1e3)
                except Exception as e:   # noqa: BLE001
                    row[f"{name}{suffix}_error"] = f"{type(e).__name__}: {e}"[:800]
                    del samples[name]
    result = {}
    for name, times in samples.items():
        quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else times * 3
        result[name] = statistics.median(times), (round(quartiles[0], 3), round(quartiles[2], 3))
    return result


def rel_error(got, expected):
    got, expected = got.float(), expected.float()
    return ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


class Recording:
    """graphjit's registered "graphjit" backend, remembering what each graph compiled to. It takes the
    compile() call's mode as the registered backend does (max-autotune autotunes); CUDA-graph recording
    wraps it outside, in the registry."""

    def __init__(self):
        self.backend = registered_backend("graphjit")
        self.graphjit_takes_mode = self.backend.graphjit_takes_mode
        self.graphjit_takes_symbols = self.backend.graphjit_takes_symbols
        self.compiled = []

    def __call__(self, gm, example_inputs, **mode):
        fn = self.backend(gm, example_inputs, **mode)
        self.compiled.append(fn)
        return fn

    def summary(self):
        graphs = len(self.compiled)
        eager = sum(not hasattr(fn, "launches") for fn in self.compiled)
        kernels = sum(len(getattr(fn, "launches", {})) for fn in self.compiled)
        externs = sum(sum(not hasattr(i, "groups") for i in getattr(fn, "items", [])) for fn in self.compiled)
        fallbacks = sorted({op for fn in self.compiled for op, _ in getattr(getattr(fn, "graph", None),
                                                                            "fallbacks", [])})
        timings = {}
        for fn in self.compiled:
            for phase, seconds in getattr(fn, "timings", {}).items():
                timings[phase] = round(timings.get(phase, 0) + seconds, 2)
        return dict(graphs=graphs, graphs_run_eagerly=eager, triton_kernels=kernels, extern_calls=externs,
                    fallback_ops=fallbacks, compile_seconds=timings)


# ---------------------------------------------------------------------------------------------------------
# Profiling: where GPU time goes
# ---------------------------------------------------------------------------------------------------------

def copy_bandwidth():
    """GB/s of a large device-to-device copy (bytes read + written)."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 10
    del x, y
    return 2 * (1 << 30) / seconds / 1e9


def category(name):
    lowered = name.lower()
    if lowered.startswith("triton") or "triton_" in lowered:
        return "generated triton"
    if any(k in lowered for k in ("flash", "fmha", "attention", "sdpa", "mha")):
        return "attention library"
    if any(k in lowered for k in ("gemm", "cutlass", "sm90_xmma", "cublas", "nvjet", "wgmma", "conv", "cudnn",
                                  "implicit", "sgemm", "hgemm")):
        return "matmul/conv library"
    return "other (ATen elementwise, copies, ...)"


def profile(fn, inputs, runs=10):
    """({category: ms per call}, {kernel name: (ms per call, calls per call)}) of the GPU kernels."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn(*inputs)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn(*inputs)
        torch.cuda.synchronize()
    by_category, by_kernel = {}, {}
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0)
        if device_us <= 0 or not str(getattr(event, "device_type", "CUDA")).endswith("CUDA"):
            continue
        ms = device_us / 1e3 / runs
        by_category[category(event.key)] = by_category.get(category(event.key), 0) + ms
        by_kernel[event.key] = (ms, event.count / runs)
    return by_category, by_kernel


def top_kernels(by_kernel, n=6):
    """The n kernels taking most GPU time: (ms per call, calls per call, category, name shortened)."""
    top = sorted(((ms, count, name) for name, (ms, count) in by_kernel.items()), reverse=True)[:n]
    return [(round(ms, 3), count, category(name), name[:90]) for ms, count, name in top]


def issue_ms(fn, inputs, runs=10):
    """Median ms until a call returns, without waiting for the GPU (each call starts on an idle GPU)."""
    issue = []
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*inputs)
        issue.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(issue)


def host_profile(fn, inputs, runs=10):
    """The CPU side of a call: ms until the call returns without waiting for the GPU (median), and the CUDA
    runtime/driver calls it makes ({name: (calls per call, CPU ms per call)}). A call whose issue time is its
    whole wall time waits for the GPU somewhere (a sync, a pageable copy); the API calls say which."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    issue = issue_ms(fn, inputs, runs)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn(*inputs)
        torch.cuda.synchronize()
    api = {}
    for event in prof.key_averages():
        if event.key.startswith("cu"):
            api[event.key] = (round(event.count / runs, 2), round(event.cpu_time_total / 1e3 / runs, 3))
    return round(issue, 3), api


def python_profile(fn, inputs, calls=20):
    """Where a call's CPU time goes: the top functions of cProfile over `calls` calls (tottime, ms/call)."""
    import cProfile
    import pstats
    fn(*inputs)
    synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*inputs)
    synchronize()
    prof.disable()
    stats = pstats.Stats(prof).stats
    rows = sorted(((tt, nc, f"{func[2]} ({os.path.basename(func[0])}:{func[1]})") for func, (cc, nc, tt, ct, _)
                   in stats.items()), reverse=True)[:15]
    return [(round(tt / calls * 1e3, 3), nc // calls, name) for tt, nc, name in rows]


def probe():
    """Hypotheses checked directly: (1) cuBLAS on an lm_head product whose output rows are not 16-byte
    aligned, vs the same product into row-padded output (+ copy back); (2) which attention the traced
    graphs of BERT and ViT call."""
    out = {}
    a = torch.randn(4096, 768, device=DEVICE, dtype=DTYPE)
    w = torch.randn(50257, 768, device=DEVICE, dtype=DTYPE)
    flops = 2 * 4096 * 768 * 50257
    padded = torch.empty_strided((4096, 50257), (50264, 1), device=DEVICE, dtype=DTYPE)

    def plain():
        return torch.mm(a, w.t())

    def into_padded():
        torch.ops.aten.mm.out(a, w.t(), out=padded)
        return padded

    def pad_n():           # what graphjit's wrapper does (GRAPHJIT_TRITON_PAD_MM=1)
        return torch.mm(a, torch.constant_pad_nd(w.t(), (0, 7)))[:, :50257].contiguous()
    for name, fn in (("mm, N = 50257", plain), ("mm into rows padded to 50264", into_padded),
                     ("mm, N padded to 50264 (pad weight + mm + slice copy)", pad_n)):
        ms = median_ms(fn, (), 20, warmup=3)
        out[name] = f"{ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s"
    torch.testing.assert_close(pad_n(), plain(), rtol=2e-2, atol=1e-2)   # bf16 sums in another order
    if "--probe-mm-only" in sys.argv:
        return out

    import torch.nn.functional as F
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel
    from graphjit.compiler import decompose
    seen = {}

    def attention_ops(name):
        def backend(gm, example_inputs):
            calls = [str(n.target) for n in gm.graph.nodes if "attention" in str(n.target)]
            sdpa_masks = [n.kwargs.get("attn_mask", n.args[3] if len(n.args) > 3 else None) is not None
                          for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)]
            aten_gm = decompose.decompose(gm, example_inputs)
            ops = sorted({str(n.target) for n in aten_gm.graph.nodes
                          if any(k in str(n.target) for k in ("attention", "bmm", "_safe_softmax", "any"))})
            seen[name] = dict(torch_calls=calls, sdpa_has_mask=sdpa_masks, aten=ops)
            return gm.forward
        return backend
    small = dict(num_hidden_layers=1)
    for name, model, x in (("bert", BertModel(BertConfig(**small), add_pooling_layer=False), ids(16, 128, 30522)),
                           ("vit", ViTModel(ViTConfig(**small), add_pooling_layer=False), images(32))):
        model = model.to(DEVICE, DTYPE).eval()
        with torch.inference_mode():
            graphjit.reset()
            graphjit.compile(model, backend=attention_ops(name))(x)
    out["traced attention"] = seen
    q = torch.randn(32, 197, 12, 64, device=DEVICE, dtype=DTYPE).transpose(1, 2)
    try:
        out["sdp choice, ViT shapes, real tensors"] = str(torch._fused_sdp_choice(q, q, q))
    except Exception as e:      # noqa: BLE001
        out["sdp choice"] = repr(e)
    graphjit.reset()
    return out


def kernel_bytes(recording):
    """Triton kernel name -> bytes its argument buffers hold, summed over every launch of it in one call of
    the compiled graphs (each buffer read or written once: the floor). A kernel shared by launches of
    several sizes (kernel sharing) counts each launch's own buffers."""
    sizes = {}
    for fn in recording.compiled:
        graph = getattr(fn, "graph", None)
        if graph is None:
            continue
        buffers = {b.name: b for b in graph.buffers()}
        for item in getattr(fn, "launches", {}).values():
            for launch in getattr(item, "launches", [item]):
                total = 0
                for arg in launch.args:
                    if arg in buffers:
                        layout = buffers[arg].layout
                        total += int(layout.storage_size()) * torch.empty(0, dtype=layout.dtype).element_size()
                sizes[launch.name] = sizes.get(launch.name, 0) + total
    return sizes


# ---------------------------------------------------------------------------------------------------------
# One workload
# ---------------------------------------------------------------------------------------------------------

def run_workload(key, runs, do_profile, bandwidth, cprofile=(), modes=("default",), inductor_modes=None):
    title, make_model, make_inputs, output = WORKLOADS[key]
    row = dict(key=key, title=title)
    model = make_model()
    inputs = make_inputs()
    with torch.inference_mode():
        expected = output(model(*inputs))
        if do_profile:
            row["eager_profile"], kernels = profile(model, inputs)
            row["eager_top"] = top_kernels(kernels)

        for mode in modes:
            suffix = "" if mode == "default" else f"_{mode}"
            torch_mode = None if mode == "default" else mode
            contenders = {"eager": model}
            try:
                if SMOKE:
                    raise RuntimeError("skipped under --smoke")
                if inductor_modes is not None and mode not in inductor_modes:
                    raise RuntimeError("not run (--inductor-modes)")
                torch._dynamo.reset()
                inductor = torch.compile(model, mode=torch_mode)
                out, row[f"inductor{suffix}_cold_s"] = timed_call(inductor, inputs)
                row[f"inductor{suffix}_rel_err"] = rel_error(output(out), expected)
                contenders["inductor"] = inductor
            except Exception as e:           # noqa: BLE001 -- a failing compiler is a result, not a crash
                row[f"inductor{suffix}_error"] = f"{type(e).__name__}: {e}"[:500]
            try:
                graphjit.reset()
                recording = Recording()
                ours = graphjit.compile(model, backend=recording, mode=torch_mode)
                out, row[f"graphjit{suffix}_cold_s"] = timed_call(ours, inputs)
                row[f"graphjit{suffix}_rel_err"] = rel_error(output(out), expected)
                row[f"graphjit{suffix}_stats"] = recording.summary()
                contenders["graphjit"] = ours
            except Exception as e:           # noqa: BLE001
                row[f"graphjit{suffix}_error"] = f"{type(e).__name__}: {e}"[:800]
                row[f"graphjit{suffix}_traceback"] = traceback.format_exc()[-3000:]
            try:
                for name, (ms, spread) in interleaved_ms(contenders, inputs, runs, row, suffix).items():
                    row[f"{name}{suffix}_ms"], row[f"{name}{suffix}_spread"] = ms, spread
                if mode == modes[0]:
                    row["eager_ms"] = row[f"eager{suffix}_ms"]
                if "inductor" in contenders and do_profile and not suffix:
                    row["inductor_issue_ms"], row["inductor_api"] = host_profile(inductor, inputs)
                    row["inductor_profile"], kernels = profile(inductor, inputs)
                    row["inductor_top"] = top_kernels(kernels)
                if "graphjit" in contenders and key in cprofile:
                    row[f"graphjit{suffix}_cprofile"] = python_profile(ours, inputs)
                if "graphjit" in contenders and do_profile and not suffix:
                    row["graphjit_issue_ms"], row["graphjit_api"] = host_profile(ours, inputs)
                    by_category, by_kernel = profile(ours, inputs)
                    row["graphjit_profile"] = by_category
                    row["graphjit_top"] = top_kernels(by_kernel)
                    sizes = kernel_bytes(recording)
                    top = sorted(((ms, name, count) for name, (ms, count) in by_kernel.items() if name in sizes),
                                 reverse=True)[:12]
                    row["graphjit_top_kernels"] = [
                        dict(name=name, ms=ms, calls=count, mb=sizes[name] / 1e6 / max(count, 1),
                             gbps=sizes[name] / (ms / 1e3) / 1e9 if ms else None,
                             of_copy=(sizes[name] / (ms / 1e3) / 1e9) / bandwidth if ms and bandwidth else None)
                        for ms, name, count in top]
            except Exception as e:           # noqa: BLE001
                row[f"profile{suffix}_error"] = f"{type(e).__name__}: {e}"[:800]
            finally:
                torch._dynamo.reset()
                graphjit.reset()
    return row


def fmt_row(r, mode="default"):
    suffix = "" if mode == "default" else f"_{mode}"
    eager = r.get(f"eager{suffix}_ms", r.get("eager_ms"))

    def cell(prefix):
        prefix += suffix
        if f"{prefix}_error" in r:
            return f"failed: {r[f'{prefix}_error'][:120]}"
        return f"{r[f'{prefix}_ms']:.2f} ({eager / r[f'{prefix}_ms']:.2f}x)"

    def cold(prefix):
        prefix += suffix
        return f"{r[f'{prefix}_cold_s']:.1f}" if f"{prefix}_cold_s" in r else "-"

    def err(prefix):
        prefix += suffix
        return f"{r[f'{prefix}_rel_err']:.1e}" if f"{prefix}_rel_err" in r else "-"
    title = r["title"] + ("" if mode == "default" else f", {mode}")
    return (f"| {title} | {eager:.2f} | {cell('inductor')} | {cell('graphjit')} | {cold('inductor')} | "
            f"{cold('graphjit')} | {err('inductor')} | {err('graphjit')} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--only", default="core", help="comma-separated workloads or groups (" + ", ".join(GROUPS)
                        + "): " + ", ".join(WORKLOADS))
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for <workload>.json")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU (GRAPHJIT_TRITON_CPU=1)")
    parser.add_argument("--cprofile", default="", help="workloads whose graphjit call gets a cProfile of 20 calls")
    parser.add_argument("--modes", default="default",
                        help="comma-separated compile modes for both compilers: default, reduce-overhead, "
                             "max-autotune, max-autotune-no-cudagraphs")
    parser.add_argument("--inductor-modes", default=None,
                        help="comma-separated modes torch.compile runs in too (default: all of --modes); its "
                             "max-autotune compiles take minutes per model")
    parser.add_argument("--compile-workers", type=int, default=None,
                        help="graphjit's Triton compile worker processes (config.triton_compile_workers)")
    parser.add_argument("--probe", action="store_true", help="run the hypothesis probes first (see probe())")
    parser.add_argument("--probe-mm-only", action="store_true", help="only the matmul part of --probe")
    args = parser.parse_args()
    if args.compile_workers is not None:
        from graphjit import config as compiler_config
        compiler_config.triton_compile_workers = args.compile_workers
    if args.smoke:
        args.runs = 2
    os.makedirs(args.out, exist_ok=True)
    chosen = [k for w in args.only.split(",") if w for k in GROUPS.get(w, [w])]
    unknown = [k for k in chosen if k not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}")
    import triton
    machine = "CPU (smoke)" if SMOKE else "{0.name} ({0.multi_processor_count} SMs)".format(
        torch.cuda.get_device_properties(0))
    header = (f"{datetime.date.today()}, {machine}, python "
              f"{platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}; {args.dtype} inference, "
              f"median of {args.runs} synchronized calls")
    bandwidth = copy_bandwidth() if args.profile else None
    print(header + (f"; device-to-device copy {bandwidth:.0f} GB/s" if bandwidth else ""), flush=True)
    rows = []
    if args.probe:
        try:
            result = probe()
        except Exception as e:           # noqa: BLE001
            result = dict(error=traceback.format_exc()[-2000:])
        print("probe: " + json.dumps(result, indent=1, default=str), flush=True)
        rows.append(dict(key="probe", probe=result))
    for key in chosen:
        start = time.perf_counter()
        try:
            row = run_workload(key, args.runs, args.profile, bandwidth, args.cprofile.split(","),
                               [m for m in args.modes.split(",") if m],
                               None if args.inductor_modes is None else args.inductor_modes.split(","))
        except Exception as e:           # noqa: BLE001
            row = dict(key=key, title=WORKLOADS[key][0], error=f"{type(e).__name__}: {e}"[:500],
                       traceback=traceback.format_exc()[-3000:])
        row["wall_s"] = time.perf_counter() - start
        rows.append(row)
        with open(os.path.join(args.out, "gpu_results.json"), "w") as f:
            json.dump(dict(header=header, rows=rows), f, indent=1, default=str)
        print(f"[{key} done in {row['wall_s']:.0f} s] " + json.dumps(
            {k: v for k, v in row.items() if not k.endswith(("traceback", "profile", "top_kernels", "_api"))}, default=str),
            flush=True)
        if not any(k.startswith("gpt2") for k in chosen[chosen.index(key) + 1:]):
            _gpt2.clear()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    print()
    print(header)
    print()
    print("| workload | eager ms | Inductor ms (speedup) | graphjit ms (speedup) | Inductor cold s | graphjit cold s "
          "| Inductor rel err | graphjit rel err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["key"] != "probe":
            if "eager_ms" not in r:
                print(f"| {r['title']} | failed: {r.get('error', '?')[:200]} |")
                continue
            for mode in [m for m in args.modes.split(",") if m]:
                print(fmt_row(r, mode))
    print()
    for r in rows:
        for mode in [m for m in args.modes.split(",") if m]:
            suffix = "" if mode == "default" else f"_{mode}"
            spreads = [f"{name} {r[f'{name}{suffix}_spread'][0]:.2f}-{r[f'{name}{suffix}_spread'][1]:.2f}"
                       for name in ("eager", "inductor", "graphjit") if f"{name}{suffix}_spread" in r]
            if spreads:
                print(f"{r['key']} {mode}: middle half of the calls (ms): {', '.join(spreads)}")
    for r in rows:
        for name in [k for k in r if k.endswith("_cprofile")]:
            for line in r[name]:
                print(f"{r['key']} {name}: {line[0]:.3f} ms/call, {line[1]} calls/call, {line[2]}")
    if args.profile:
        print()
        for r in rows:
            for name in ("eager", "inductor", "graphjit"):
                for ms, count, cat, kname in r.get(f"{name}_top", []):
                    print(f"  {r['key']} {name} top: {ms:.3f} ms/call x{count:.0f} [{cat}] {kname}")
            for name in ("eager", "inductor", "graphjit"):
                if f"{name}_profile" in r:
                    parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r[f"{name}_profile"].items()))
                    print(f"{r['key']} {name} GPU ms/call: {parts}")
            for name in ("inductor", "graphjit"):
                if f"{name}_api" in r:
                    calls = ", ".join(f"{k} x{n} {ms:.3f} ms" for k, (n, ms) in sorted(r[f"{name}_api"].items()))
                    print(f"{r['key']} {name} issue {r[f'{name}_issue_ms']:.3f} ms/call; CUDA API per call: {calls}")
            for k in r.get("graphjit_top_kernels", []):
                print(f"  {r['key']} {k['name']}: {k['ms']:.3f} ms/call, {k['calls']:.0f} calls, {k['mb']:.1f} MB "
                      f"each, {k['gbps'] or 0:.0f} GB/s ({(k['of_copy'] or 0) * 100:.0f}% of copy)")


if __name__ == "__main__":
    main()
