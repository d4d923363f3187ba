"""CPU inference, side by side in one process: eager vs torch.compile (Inductor's C++ backend) vs
graphjit.compile(backend="graphjit") (and, with --engines, graphjit.compile(backend="onnxrt"): ONNX
Runtime). Median ms per call, speedup over eager, and cold compile seconds (first call, with fresh kernel
and ONNX caches for every compiler). Prints a markdown table.

    ./dev python 3.11 benchmarks/cpu.py [--runs 50] [--only gpt2,mlp] [--threads 1 --clock cpu]
    ./dev python 3.11 benchmarks/cpu.py --engines inductor,graphjit,onnxrt    # onnxruntime, onnxscript installed

On a machine shared with other work, wall-clock medians of multi-threaded runs measure the scheduler;
`--threads 1 --clock cpu` measures the work itself.
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

# Fresh caches for both compilers, before either is imported: cold compile times are cold.
_CACHE = tempfile.mkdtemp(prefix="graphjit-bench-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE, "inductor")
os.environ["GRAPHJIT_CACHE_DIR"] = os.path.join(_CACHE, "graphjit")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import graphjit  # noqa: E402
from graphjit.examples.tiny_gpt import GPT, GPTConfig  # noqa: E402


class LayerNormChain(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = torch.nn.LayerNorm(n)

    def forward(self, x, residual):
        return torch.sigmoid(F.gelu(self.norm(x))) + residual


def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5), dim=-1) @ v


def workloads():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(n_layer=2, n_embd=256, n_head=4, block_size=128, vocab_size=512)).eval()
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
    qkv = [torch.randn(8, 128, 64) for _ in range(3)]
    loads = {
        "gpt2": ("GPT-2, 2 layers, n_embd 256, batch 1 x 128 tokens", gpt, (torch.randint(0, 512, (1, 128)),)),
        "mlp": ("MLP 512-2048-512, batch 64", mlp, (torch.randn(64, 512),)),
        "layernorm": ("layer_norm + gelu + sigmoid + residual, 256 x 1024", LayerNormChain(1024).eval(),
                      (torch.randn(256, 1024), torch.randn(256, 1024))),
        "attention": ("softmax attention, 8 x 128 x 128 scores (head dim 64)", attention, qkv),
    }
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
    from plain import ResNet      # conv + batch norm + ReLU BasicBlocks
    resnet = ResNet(widths=(64, 128, 256, 512), blocks_per_stage=2).eval().to(memory_format=torch.channels_last)
    loads["resnet-cl"] = ("ResNet, 4 x 2 BasicBlocks, channels-last, batch 2 x 3 x 112 x 112", resnet,
                          (torch.randn(2, 3, 112, 112).contiguous(memory_format=torch.channels_last),))
    try:
        import transformers
    except ImportError:
        return loads
    config = transformers.BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=1024, vocab_size=1000, max_position_embeddings=128)
    bert = transformers.BertModel(config).eval()

    def bert_hidden(ids):
        return bert(input_ids=ids).last_hidden_state

    loads["bert"] = ("BERT (transformers), 2 layers, hidden 256, batch 4 x 64", bert_hidden,
                     (torch.randint(0, 1000, (4, 64)),))
    return loads


CLOCK = time.perf_counter


def median_ms(fn, args, runs):
    for _ in range(5):
        fn(*args)
    samples = []
    for _ in range(runs):
        start = CLOCK()
        fn(*args)
        samples.append((CLOCK() - start) * 1e3)
    return statistics.median(samples)


def cold_compile(make, args):
    """(compiled fn, seconds of its first call)."""
    fn = make()
    start = time.perf_counter()
    fn(*args)
    return fn, time.perf_counter() - start


def check(name, got, expected):
    if not torch.allclose(got, expected, rtol=1e-3, atol=1e-3):
        print(f"WARNING: {name} differs from eager by {(got - expected).abs().max().item():.3g}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--only", default="", help="comma-separated subset of: gpt2, mlp, layernorm, attention, resnet-cl, bert")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: the calling thread's CPU time, robust on a shared machine; only with --threads 1 "
                             "(then every op and kernel runs on the calling thread)")
    parser.add_argument("--engines", default="inductor,graphjit",
                        help=f"comma-separated compilers beside eager, of: {', '.join(ENGINES)}")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    if any(e not in ENGINES for e in engines):
        parser.error(f"--engines takes {', '.join(ENGINES)}")
    global CLOCK
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures the calling thread only: use it with --threads 1")
    # (not process_time: Inductor leaves background threads in the process, which it would count)
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)      # also the OpenMP pool graphjit's kernels run on
    chosen = [w for w in args.only.split(",") if w]
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}, "
          f"float32 inference (no_grad), median {args.clock} time of {args.runs} calls")
    print()
    titles = [ENGINES[e][0] for e in engines]
    print("| workload | eager ms | " + " | ".join(f"{t} ms (speedup)" for t in titles) + " | " +
          " | ".join(f"{t} cold s" for t in titles) + " |")
    print("|---|---|" + "---|" * (2 * len(engines)))
    for key, (title, model, inputs) in workloads().items():
        if chosen and key not in chosen:
            continue
        timed, colds = [], []
        with torch.no_grad():
            expected = model(*inputs)
            eager = median_ms(model, inputs, args.runs)
            for engine in engines:
                compiled, cold = cold_compile(lambda: ENGINES[engine][1](model, args.threads), inputs)
                check(f"{key} {engine}", compiled(*inputs), expected)
                ms = median_ms(compiled, inputs, args.runs)
                timed.append(f"{ms:.3f} ({eager / ms:.2f}x)")
                colds.append(f"{cold:.1f}")
        print(f"| {title} | {eager:.3f} | " + " | ".join(timed) + " | " + " | ".join(colds) + " |", flush=True)


# compiler: (column title, model -> compiled model)
# compiler: (column title, (model, --threads) -> compiled model); ORT's own thread pool as torch's
ENGINES = {
    "inductor": ("Inductor", lambda model, threads: torch.compile(model, backend="inductor")),
    "graphjit": ("graphjit", lambda model, threads: graphjit.compile(model, backend="graphjit")),
    "onnxrt": ("graphjit onnxrt", lambda model, threads: graphjit.compile(
        model, backend="onnxrt", options={"intra_op_num_threads": threads} if threads else None)),
}


if __name__ == "__main__":
    main()
