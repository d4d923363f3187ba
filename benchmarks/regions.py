"""Regional compilation, side by side: a Llama-style model (transformers' LlamaForCausalLM from a config,
random weights) compiled whole and by regions, by graphjit and by torch.compile.

Engines (each cold number from a fresh process with empty cache folders, after one eager call):

    graphjit          graphjit.compile(model)
    graphjit-regions  graphjit.compile_regions(model): each decoder layer compiled on its own, in place
    torch             torch.compile(model)
    torch-regions     Accelerate's compile_regions recipe with torch.compile: each child of a ModuleList
                      of one class compiled on its own, every other leaf module compiled on its own

For each: the first compiled call (capture + compile + run), then the median of --steps calls, timed
interleaved with eager calls in the same process; max |compiled - eager| on the logits. A last process
(`steady`) compiles graphjit whole and by regions and times the two interleaved, so their steady ratio is
measured side by side; it also times one block's call alone with its compiled graph replaced by one that
returns its outputs: what remains is the per-call host cost of a region (nn.Module.__call__, dispatch,
the entry's guards and input reads), and the entry alone; counts the entry's guards; and splits a regions
step's host time (until the call returns) between the blocks' calls and the code around them.

    python benchmarks/regions.py [--device cpu|cuda] [--layers 16] [--hidden 256] [--batch 1] [--seq 128]
                                 [--engines graphjit,graphjit-regions,torch,torch-regions] [--steps 20]
    python benchmarks/regions.py --smoke          # a tiny model, to check the script
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ENGINES = ("graphjit", "graphjit-regions", "torch", "torch-regions")


def make_model(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    heads = max(1, args.hidden // 64)
    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=int(args.hidden * 2.6875) // 8 * 8,
                         num_hidden_layers=args.layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 2), vocab_size=args.vocab,
                         max_position_embeddings=max(2048, args.seq))
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = LlamaForCausalLM(config).to(args.device, dtype).eval()
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    return model, ids


def torch_regions(module):
    """Accelerate's compile_regions recipe, in place: a ModuleList of one class has each child compiled;
    other modules with children are walked; other leaves are compiled."""
    import torch
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        kids = [m for m in child._modules.values() if m is not None]
        if isinstance(child, torch.nn.ModuleList) and len(kids) >= 2 and len({type(m) for m in kids}) == 1:
            for key, block in list(child._modules.items()):
                child._modules[key] = torch.compile(block)
        elif kids:
            torch_regions(child)
        else:
            module._modules[name] = torch.compile(child)
    return module


def sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def call(model, ids, device):
    out = model(ids, use_cache=False).logits
    sync(device)
    return out


def child(args):
    """One engine in this fresh process; prints one JSON line."""
    import torch
    import graphjit
    model, ids = make_model(args)
    row = {"engine": args.child}
    with torch.no_grad():
        expected = call(model, ids, args.device).float()
        eager = model
        if args.child == "steady":
            import copy
            full = graphjit.compile(model)
            regions = graphjit.compile_regions(copy.deepcopy(model))
            engines = {"eager": eager, "graphjit": full, "graphjit-regions": regions}
        else:
            import copy
            # the regional recipes compile in place: a copy of their own, so that eager stays eager
            target = copy.deepcopy(model) if args.child.endswith("-regions") else model
            start = time.perf_counter()
            if args.child == "graphjit":
                compiled = graphjit.compile(target)
            elif args.child == "graphjit-regions":
                compiled = graphjit.compile_regions(target)
            elif args.child == "torch":
                compiled = torch.compile(target)
            else:
                compiled = torch_regions(target)
            got = call(compiled, ids, args.device).float()
            row["first_s"] = time.perf_counter() - start
            row["max_diff"] = (got - expected).abs().max().item()
            engines = {"eager": eager, args.child: compiled}
        from graphjit.capture.frame import Recorder
        with Recorder() as recorder:
            for fn in engines.values():          # compile what is not compiled yet, warm up
                call(fn, ids, args.device)
                call(fn, ids, args.device)
        if args.child == "steady":
            row["block"] = block_cost(engines["graphjit-regions"], ids, recorder, args.device)
        times = {name: [] for name in engines}
        for _ in range(args.steps):
            for name, fn in engines.items():
                start = time.perf_counter()
                call(fn, ids, args.device)
                times[name].append(time.perf_counter() - start)
        row["ms"] = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print("ROW " + json.dumps(row), flush=True)


def block_cost(model, ids, recorder, device, calls=2000):
    """One compiled block's guards, and the host us of its call and of its entry alone, with its compiled
    graph replaced by one that returns the outputs it computed once (best of 5 x `calls`); and the host
    ms of a whole step (until the call returns) and of the blocks' calls in it (median of 30 steps)."""
    from graphjit.api import CompiledModule
    block = next(m for m in model.modules() if isinstance(m, CompiledModule))
    cls = type(block)
    compiled = cls._graphjit_forward
    guards = [len(r.guards) for r in recorder.records if r.code is compiled._code]
    seen, real_call, inside = {}, cls.__call__, [0.0]

    def spy(self, *a, **k):
        seen.setdefault("args", (a, k))
        start = time.perf_counter()
        try:
            return real_call(self, *a, **k)
        finally:
            inside[0] += time.perf_counter() - start
    cls.__call__ = spy
    steps = []
    try:
        for _ in range(30):
            sync(device)
            inside[0], start = 0.0, time.perf_counter()
            model(ids, use_cache=False)
            steps.append((time.perf_counter() - start, inside[0]))
            sync(device)
    finally:
        cls.__call__ = real_call
    step_ms = statistics.median(t for t, _ in steps) * 1e3
    blocks_ms = statistics.median(b for _, b in steps) * 1e3
    a, k = seen["args"]
    entry = compiled._cache.entries[0]
    namespace = entry.__globals__
    graph = namespace["__gj_graph"]
    out = []
    namespace["__gj_graph"] = lambda *xs: out[0] if out else out.append(graph(*xs)) or out[0]
    try:
        block(*a, **k)

        def best_us(fn):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                times.append((time.perf_counter() - start) / calls * 1e6)
            return min(times)
        return {"guards": guards[0] if guards else None, "call_us": best_us(lambda: block(*a, **k)),
                "entry_us": best_us(lambda: entry(compiled._closure, block, *a, **k)),
                "step_host_ms": step_ms, "blocks_host_ms": blocks_ms,
                "blocks": sum(isinstance(m, CompiledModule) for m in model.modules())}
    finally:
        namespace["__gj_graph"] = graph


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--no-steady", action="store_true", help="skip the side-by-side steady process")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer, 64-wide model, 2 steps")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.hidden, args.vocab, args.seq, args.steps = 2, 64, 100, 8, 2
    if args.child:
        return child(args)
    rows = []
    passed = [a for a in sys.argv[1:] if a != "--smoke"]
    if args.smoke:
        passed += ["--layers", "2", "--hidden", "64", "--vocab", "100", "--seq", "8", "--steps", "2"]
    names = [e for e in args.engines.split(",") if e] + ([] if args.no_steady else ["steady"])
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, GRAPHJIT_CACHE_DIR=os.path.join(tmp, "graphjit"),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                       TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
            done = subprocess.run([sys.executable, __file__, *passed, "--child", name], env=env,
                                  capture_output=True, text=True)
        lines = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
        if done.returncode or not lines:
            print(f"{name}: failed (rc {done.returncode})\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(lines[-1]))
        print(f"[regions] {name} done", file=sys.stderr, flush=True)
    print(f"\nLlama-style, {args.layers} layers of {args.hidden}, batch {args.batch} x {args.seq}, "
          f"{args.device}; median of {args.steps} calls, interleaved with eager in the same process\n")
    print("| engine | first call s | ms | eager ms (same process) | eager/engine | max diff |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        if row["engine"] == "steady":
            continue
        ms, eager = row["ms"][row["engine"]], row["ms"]["eager"]
        print(f"| {row['engine']} | {row['first_s']:.2f} | {ms:.2f} | {eager:.2f} | {eager / ms:.2f}x | "
              f"{row['max_diff']:.2e} |")
    for row in rows:
        if row["engine"] == "steady":
            ms = row["ms"]
            print(f"\nside by side (one process): eager {ms['eager']:.2f} ms, graphjit whole {ms['graphjit']:.2f} "
                  f"ms, graphjit regions {ms['graphjit-regions']:.2f} ms: regions/whole "
                  f"{ms['graphjit-regions'] / ms['graphjit']:.3f}")
            block = row["block"]
            print(f"one block, its graph stubbed: {block['guards']} guards; call {block['call_us']:.1f} us, "
                  f"entry alone {block['entry_us']:.1f} us (best of 5 x 2000 calls); regions step host "
                  f"{block['step_host_ms']:.2f} ms, of which the {block['blocks']} blocks' calls "
                  f"{block['blocks_host_ms']:.2f} ms")


if __name__ == "__main__":
    main()
