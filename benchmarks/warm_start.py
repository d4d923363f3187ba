"""Warm start as a user sees it: the first compiled call of a fresh process, with empty caches (cold) and
then in another fresh process reusing the first one's cache folders (warm: a restarted server, the next
job), graphjit against torch.compile, each in processes of its own.

    cold   seconds of compile(model) and its first call (capture + compile + run) in a new process with
           empty cache folders, after the imports (torch._dynamo among them: torch.compile() imports it,
           and so does a process's first fake tensor mode, about 1.4 s here) and one eager call (the
           libraries' lazy initialization), as the issue's table excludes model build and imports
    warm   the same in a new process given the cold process's cache folders (graphjit's graph cache and
           kernel builds, Triton's cache; Inductor's FX graph, AOTAutograd and kernel caches)

graphjit's rows also split the first call into capture (before the backend is called), backend (the
compiler, a graph-cache hit included) and after (the entry's build and the first run).

Workloads: on the CPU, transformers' GPT-2, BERT, ViT and Llama from configs (12, 12, 12 and 8 layers of
256, random weights, fp32) and a plain-torch ResNet; on CUDA, the bf16 workloads of benchmarks/gpu.py and
the Llama-style model of benchmarks/regions.py (16 layers of 2048, batch 4 x 512).

    python benchmarks/warm_start.py [--device cpu|cuda] [--only gpt2,bert] [--contenders graphjit,inductor] [--profile DIR]
                                       [--dynamic]
    ./dev python 3.11 benchmarks/warm_start.py --smoke      # one tiny workload, to check the script
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_workloads(smoke):
    """key -> (title, make_model, make_inputs) of the CPU workloads (built in the child process)."""
    import torch
    layers, width = (2, 32) if smoke else (12, 256)

    def gpt2():
        import transformers
        config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=1000, n_positions=256)
        return transformers.GPT2LMHeadModel(config).eval()

    def bert():
        import transformers
        config = transformers.BertConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=4,
                                         intermediate_size=4 * width, vocab_size=1000)
        return transformers.BertModel(config).eval()

    def vit():
        import transformers
        config = transformers.ViTConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=4,
                                        intermediate_size=4 * width, image_size=64, patch_size=16)
        return transformers.ViTModel(config).eval()

    def llama():
        import transformers
        config = transformers.LlamaConfig(num_hidden_layers=max(2, layers * 2 // 3), hidden_size=width,
                                          num_attention_heads=4, num_key_value_heads=2, intermediate_size=688,
                                          vocab_size=1000)
        return transformers.LlamaForCausalLM(config).eval()

    def resnet():
        sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
        from plain import ResNet
        return ResNet(widths=(64, 128, 256, 512), blocks_per_stage=2).eval()

    def ids(batch, seq):
        return lambda: ((), {"input_ids": torch.randint(0, 1000, (batch, seq), generator=torch.Generator().manual_seed(1))})

    loads = {
        "gpt2": (f"GPT-2 (transformers), {layers} layers of {width}, batch 1 x 64", gpt2, ids(1, 64)),
        "bert": (f"BERT (transformers), {layers} layers of {width}, batch 2 x 64", bert, ids(2, 64)),
        "vit": (f"ViT (transformers), {layers} layers of {width}, batch 2 x 3 x 64 x 64", vit,
                lambda: ((), {"pixel_values": torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))})),
        "llama": (f"Llama (transformers), {max(2, layers * 2 // 3)} layers of {width}, batch 1 x 64", llama,
                  ids(1, 64)),
        "resnet": ("ResNet, 4 x 2 BasicBlocks, batch 2 x 3 x 112 x 112", resnet,
                   lambda: ((torch.randn(2, 3, 112, 112, generator=torch.Generator().manual_seed(1)),), {})),
    }
    return {"gpt2": loads["gpt2"]} if smoke else loads


def cuda_workloads():
    sys.path.insert(0, HERE)
    import gpu
    loads = {key: (title, make_model, (lambda make=make_inputs: (tuple(make()), {})))
             for key, (title, make_model, make_inputs, _) in gpu.WORKLOADS.items()}

    def llama():                # the Llama-style model: benchmarks/regions.py's, 16 layers of 2048
        import types
        import regions
        model, ids = regions.make_model(types.SimpleNamespace(hidden=2048, layers=16, vocab=32000, seq=512,
                                                              batch=4, device="cuda"))
        llama.ids = ids
        return model
    loads["llama"] = ("Llama-style, 16 layers of 2048, batch 4 x 512", llama, lambda: ((llama.ids,), {}))
    return loads


def other_sizes(args, kwargs):
    """The inputs at other sizes, for the warm process of --dynamic: token ids 3/4 as long, a batch of 4 or
    more 3/4 as large (images keep their size: some models accept only the size they were built for)."""
    import torch

    def fresh(t):           # laid out as a new tensor (contiguous() keeps a size-1 dim's old stride)
        return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)

    def shrink(t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        if not t.is_floating_point() and t.dim() == 2 and t.shape[-1] >= 8:
            return fresh(t[:, : t.shape[-1] * 3 // 4])
        if t.is_floating_point() and t.shape[0] >= 4:
            return fresh(t[: t.shape[0] * 3 // 4]).contiguous(memory_format=_format(t))
        return t
    return tuple(shrink(a) for a in args), {k: shrink(v) for k, v in kwargs.items()}


def _format(t):
    import torch
    return torch.channels_last if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and \
        not t.is_contiguous() else torch.contiguous_format


def child(key, contender, device, smoke, profile=None, dynamic=None):
    """One first call, in this (fresh) process; prints one JSON line. profile: a file that receives
    cProfile's table of that call (cumulative and own time). dynamic: None, or "cold"/"warm": compiled with
    dynamic=True, the warm process at other sizes (other_sizes)."""
    start = time.perf_counter()
    import torch
    import graphjit
    from graphjit.backends.registry import graphjit_backend
    loads = cuda_workloads() if device == "cuda" else cpu_workloads(smoke)
    _, make_model, make_inputs = loads[key]
    model = make_model()
    args, kwargs = make_inputs()
    if dynamic == "warm":
        args, kwargs = other_sizes(args, kwargs)
    options = dict(dynamic=True) if dynamic else {}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    import torch._dynamo            # imported by torch.compile() and by a process's first fake tensor mode
    row = dict(key=key, contender=contender, import_s=time.perf_counter() - start)
    with torch.inference_mode():
        model(*args, **kwargs)                  # libraries' lazy initialization, outside the timing
        sync()
        marks = []
        began = time.perf_counter()
        if contender == "inductor":
            compiled = torch.compile(model, **options)
        else:
            def timed(gm, example_inputs):
                marks.append(time.perf_counter())
                fn = graphjit_backend(gm, example_inputs)
                marks.append(time.perf_counter())
                return fn
            compiled = graphjit.compile(model, backend=timed, **options)
        profiler = None
        if profile:
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        compiled(*args, **kwargs)
        sync()
        row["first_call_s"] = time.perf_counter() - began
        if profiler is not None:
            profiler.disable()
            _write_profile(profiler, profile)
        if marks:
            backend = sum(b - a for a, b in zip(marks[::2], marks[1::2]))
            row.update(capture_s=marks[0] - began, backend_s=backend, graphs=len(marks) // 2,
                       after_s=row["first_call_s"] - (marks[0] - began) - backend)
            from graphjit.compiler.runtime import triton_build
            times = triton_build.prewarm_times      # Triton's start-up thread, from the call's start
            row["prewarm"] = {k: round(v if k == "waited" else v - began, 3) for k, v in times.items()}
    print("RESULT " + json.dumps(row), flush=True)


def _write_profile(profiler, path):
    import io
    import pstats
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    with open(path, "w") as f:
        f.write(out.getvalue())
    stats.dump_stats(os.path.splitext(path)[0] + ".pstats")     # the whole profile, for pstats' callers/callees


def measure(key, contender, caches, device, smoke, timeout, profile=None, dynamic=None):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"),
               TRITON_CACHE_DIR=os.path.join(caches, "triton"), GRAPHJIT_CACHE_DIR=os.path.join(caches, "graphjit"))
    env.pop("GRAPHJIT_GRAPH_CACHE", None)
    # bytecode written and read as in an installed package (a development shell may turn it off, and every
    # process would then compile graphjit's modules from source: 0.15 s of each first call)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", key, contender, "--device", device] + \
        (["--smoke"] if smoke else []) + (["--profile", profile] if profile else []) + \
        (["--dynamic-child", dynamic] if dynamic else [])
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout} s")
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return dict(error=f"exit {done.returncode}: {done.stderr[-1500:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", default="")
    parser.add_argument("--contenders", default="graphjit,inductor")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one process may take")
    parser.add_argument("--smoke", action="store_true", help="one tiny workload")
    parser.add_argument("--profile", default="", help="a folder: each warm graphjit process writes cProfile's "
                        "table of its first call there (<workload>.txt, and <workload>.pstats); its times then include the profiler's")
    parser.add_argument("--dynamic", action="store_true", help="compile with dynamic=True; the warm process "
                        "calls with other sizes (shorter token ids, a smaller batch of 4 or more)")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CONTENDER"), help=argparse.SUPPRESS)
    parser.add_argument("--dynamic-child", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.device, args.smoke, args.profile or None, args.dynamic_child)
    sys.path.insert(0, ROOT)
    loads = cuda_workloads() if args.device == "cuda" else cpu_workloads(args.smoke)
    keys, titles = list(loads), {k: v[0] for k, v in loads.items()}
    if args.only:
        keys = [k for k in keys if k in args.only.split(",")]
    contenders = args.contenders.split(",")
    rows = {}
    for key in keys:
        for contender in contenders:
            caches = tempfile.mkdtemp(prefix="warm-start-")
            try:
                cold = measure(key, contender, caches, args.device, args.smoke, args.timeout,
                               dynamic="cold" if args.dynamic else None)
                profile = os.path.join(os.path.abspath(args.profile), f"{key}.txt") \
                    if args.profile and contender == "graphjit" else None
                if profile:
                    os.makedirs(args.profile, exist_ok=True)
                warm = measure(key, contender, caches, args.device, args.smoke, args.timeout, profile,
                               dynamic="warm" if args.dynamic else None)
            finally:
                shutil.rmtree(caches, ignore_errors=True)
            rows[key, contender] = (cold, warm)
            print(f"{key} {contender}: cold {cold.get('first_call_s', cold.get('error'))}, "
                  f"warm {warm.get('first_call_s', warm.get('error'))}", file=sys.stderr, flush=True)
    print(table(keys, titles, contenders, rows))


def _s(row, field="first_call_s"):
    return f"{row[field]:.2f}" if field in row else "error"


def table(keys, titles, contenders, rows):
    both = {"graphjit", "inductor"} <= set(contenders)
    lines = ["| workload | " + " | ".join(f"{c} cold s | {c} warm s" for c in contenders) +
             (" | graphjit warm: capture / backend / after, s" if "graphjit" in contenders else "") +
             (" | graphjit / inductor warm" if both else "") + " |"]
    lines.append("|---" * (1 + 2 * len(contenders) + ("graphjit" in contenders) + both) + "|")
    notes = []
    for key in keys:
        cells = [titles[key]]
        for c in contenders:
            cold, warm = rows[key, c]
            cells += [_s(cold), _s(warm)]
            notes += [f"{key} {c} {when}: {row['error']}" for when, row in (("cold", cold), ("warm", warm))
                       if "error" in row]
        if "graphjit" in contenders:
            warm = rows[key, "graphjit"][1]
            cells.append(" / ".join(_s(warm, f) for f in ("capture_s", "backend_s", "after_s")))
            if "key" in (warm.get("prewarm") or {}):      # Triton's key was computed: a GPU process
                notes.append(f"{key} graphjit warm: Triton start-up thread (s from the call's start) {warm['prewarm']}")
        if both:
            other = rows[key, "inductor"][1]
            ok = "first_call_s" in warm and "first_call_s" in other
            cells.append(f"{warm['first_call_s'] / other['first_call_s']:.2f}" if ok else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + notes)


if __name__ == "__main__":
    main()
