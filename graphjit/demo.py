"""graphjit demo: capture a small GPT-2-style model into an fx graph, show what was captured, and time it.

    ./dev demo                   # = python -m graphjit.demo
    ./dev demo --batch 1 --seq 16

For graphjit/examples/tiny_gpt.py (and, if transformers imports, a 2-layer GPT2LMHeadModel with random
weights) it prints: what explain() found (graphs, graph breaks, ops, guards), the start of the captured
graph's code, the first call's capture-and-compile time, the kernels built, the largest difference from
eager, and eager vs compiled time per call, on that input and on a 1 x 8 one where per-call overhead
dominates; for the GPT-2 model, the same through backend="eager" (capture only) for comparison.
"""
import argparse
import statistics
import time

import torch

import graphjit
from graphjit.examples.tiny_gpt import GPT, GPTConfig

MAX_SEQ = 128          # tiny_gpt's block_size and the GPT-2 config's n_positions below
GUARD_SAMPLE = 12      # guards shown; a model has hundreds (one per parameter property, module type ...)
BREAK_SAMPLE = 5       # graph break reasons shown
CODE_LINES = 40        # lines of graph code shown
LINE_WIDTH = 120       # longer lines (the graph's signature lists every parameter) are cut


def clip(line, width=LINE_WIDTH):
    return line if len(line) <= width else line[:width - 4] + " ..."


def show_explain(model, x):
    """Print explain()'s findings: counts, break reasons, a sample of guards, the graph's code."""
    with torch.no_grad():
        found = graphjit.explain(model)(x)
    ops = sum(len(o) for o in found.ops_per_graph)
    print(f"  graphs: {found.graph_count}   graph breaks: {found.graph_break_count}   ops: {ops}   "
          f"guards: {len(found.guards)}")
    for e in found.break_reasons[:BREAK_SAMPLE]:
        print("  break: " + clip(f"{e.reason}  ({e.filename}:{e.lineno})", LINE_WIDTH - 9))
    print(f"  guards (first {min(GUARD_SAMPLE, len(found.guards))} of {len(found.guards)}):")
    for guard in found.guards[:GUARD_SAMPLE]:
        print("    " + clip(guard, LINE_WIDTH - 4))
    return found


def show_code(graph):
    inputs = sum(1 for n in graph.graph.nodes if n.op == "placeholder")
    lines = graph.code.strip("\n").splitlines()
    print(f"\n  captured graph code ({inputs} inputs: the model's arguments, then its parameters):")
    for line in lines[:CODE_LINES]:
        print("    " + clip(line, LINE_WIDTH - 4))
    if len(lines) > CODE_LINES:
        print(f"    ... ({len(lines) - CODE_LINES} more lines)")


def interleaved_times(eager, compiled, x, warmup, iters):
    """Seconds per call of each, calls alternating so that load from other processes hits both alike."""
    fns, times = (eager, compiled), ([], [])
    with torch.no_grad():
        for _ in range(warmup):
            eager(x)
            compiled(x)
        for _ in range(iters):
            for fn, seconds in zip(fns, times):
                start = time.perf_counter()
                fn(x)
                seconds.append(time.perf_counter() - start)
    return times


def print_times(label, times, iters):
    (e_med, c_med), (e_min, c_min) = map(statistics.median, times), map(min, times)
    print(f"  {label}: eager {e_med * 1e3:.2f} ms, compiled {c_med * 1e3:.2f} ms, eager/compiled "
          f"{e_med / c_med:.2f}x  (median of {iters}; min {e_min * 1e3:.2f} / {c_min * 1e3:.2f} ms)")
    if max(e_med / e_min, c_med / c_min) > 1.3:
        print(f"    (noisy: the machine is busy; by the steadier minimums eager/compiled is {e_min / c_min:.2f}x)")


def compile_and_time(model, x, logits, iters, backend=None):
    """Cold compile (capture + the backend: the default one unless named), check against eager, the
    kernels it built, time eager vs compiled on x and (default backend only) on a 1 x 8 input."""
    from graphjit.backends.registry import lookup_backend
    name = backend or graphjit.config.default_backend
    graphjit.reset()                              # the first call below captures from scratch
    recorded = []

    def recording(gm, example_inputs):
        fn = lookup_backend(name)(gm, example_inputs)
        recorded.append(fn)
        return fn
    compiled = graphjit.compile(model, backend=recording)
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(x)
        cold = time.perf_counter() - start
        diff = (logits(out) - logits(model(x))).abs().max().item()
    kernels = sum(getattr(fn, "kernel_count", 0) for fn in recorded)
    built = f"{kernels} fused kernels" if name == "graphjit" else "no kernels of its own"
    print(f"\n  backend {name!r}{' (the default)' if backend is None else ''}: first call {cold:.2f} s "
          f"(capture and compile), {len(recorded)} graph(s), {built}")
    print(f"  max |compiled - eager| on the logits: {diff:.3g}")
    print_times(f"{x.shape[0]} x {x.shape[1]}", interleaved_times(model, compiled, x, 3, iters), iters)
    if backend is None:
        small = x[:1, :8]                         # a new shape: one more compile, then per-call overhead rules
        print_times("1 x 8 (overhead-bound)", interleaved_times(model, compiled, small, 3, 5 * iters), 5 * iters)


def demo_tiny_gpt(args):
    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config).eval()
    x = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    print(f"\n== tiny GPT (graphjit/examples/tiny_gpt.py): {config.n_layer} layers, n_embd {config.n_embd}, "
          f"vocab {config.vocab_size}; input {args.batch} x {args.seq} token ids")
    found = show_explain(model, x)
    if found.graphs:
        show_code(found.graphs[0])
    compile_and_time(model, x, lambda out: out, args.iters)


def demo_hf_gpt2(args):
    try:
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except Exception as e:   # not installed, or broken against this torch
        print(f"\n== transformers GPT2LMHeadModel: skipped (transformers does not import: {e})")
        return
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1024, n_positions=MAX_SEQ,
                        bos_token_id=0, eos_token_id=0)   # the default ids (50256) lie outside this vocab
    model = GPT2LMHeadModel(config).eval()                  # random weights: nothing is downloaded
    x = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    print(f"\n== transformers {transformers.__version__} GPT2LMHeadModel: {config.n_layer} layers, "
          f"n_embd {config.n_embd}, vocab {config.vocab_size}, random weights; input {args.batch} x {args.seq}")
    show_explain(model, x)
    compile_and_time(model, x, lambda out: out.logits, args.iters)
    other = "eager" if graphjit.config.default_backend != "eager" else "graphjit"
    compile_and_time(model, x, lambda out: out.logits, args.iters, backend=other)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m graphjit.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="sequences per call (default 4)")
    parser.add_argument("--seq", type=int, default=128, help=f"tokens per sequence, at most {MAX_SEQ} (default 128)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per model and mode (default 20)")
    parser.add_argument("--report", metavar="PATH", help="also write a compile report of the whole demo: one "
                        "HTML file (graphs, breaks, recompiles, guards, kernels, compile time per stage) and "
                        "its events beside it as JSON lines")
    args = parser.parse_args(argv)
    if not (1 <= args.seq <= MAX_SEQ) or args.batch < 1 or args.iters < 1:
        parser.error(f"need 1 <= --seq <= {MAX_SEQ}, --batch >= 1 and --iters >= 1")
    print(f"graphjit {graphjit.__version__}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    if args.report:
        graphjit.report.start(args.report)
    try:
        demo_tiny_gpt(args)
        demo_hf_gpt2(args)
    finally:
        if args.report:
            print(f"\ncompile report written to {graphjit.report.stop()}")
    print(f"\nThe default backend, {graphjit.config.default_backend!r}, is graphjit's own compiler unless "
          "GRAPHJIT_BACKEND names another:\nfused C++/OpenMP kernels on the CPU, Triton kernels on NVIDIA GPUs; "
          "graphs that need gradients compile\ntheir forward and backward through AOTAutograd. backend='eager' runs "
          "the captured graph as it is: its\nspeedup comes only from skipping Python and nn.Module overhead.")

if __name__ == "__main__":
    main()
