"""Dynamic shapes, side by side: HF generate() with the model's forward compiled by torch.compile and by
graphjit, against eager, in one process.

For each model and engine: greedy generate() of --tokens new tokens with the default DynamicCache (--cache
static: a StaticCache, generate()'s cache_implementation; on a GPU the torch.compile row is then
transformers' own auto-compile of the forward, its CUDA-graph mode included, and --mode applies to graphjit).
  first s:      the first generate() (prompt length L): compiles included.
  steady tok/s: generate() again with the same prompt length, --steady-runs times (new tokens / the
                median seconds), in rounds of one call per engine (the host's speed drifts by 15-60%).
  new-L tok/s:  generate() with --lengths other prompt lengths, one after another (recompiles included).
  graphs:       graphs the engine's backend was handed over all of it.
  same tokens:  every generate() gave eager's tokens.

    python benchmarks/dynamic.py [--device cuda] [--models gpt2,llama] [--tokens 32] [--engines eager,torch,graphjit]
    ./dev python 3.11 benchmarks/dynamic.py --models gpt2 --tokens 16

--sweep: a batch-size sweep instead, for BERT (transformers, random weights) and ResNet-50 (torchvision,
when installed): per batch size, the latency of graphjit's one dynamic compile (automatic dynamic: the
batch dim becomes symbolic at the second size) against a static graphjit compile of that size, and eager's.

    python benchmarks/dynamic.py --sweep [--device cuda] [--batches 1,2,4,8,16,32,64] [--sweep-models bert,resnet50]
"""
import argparse
import functools
import os
import platform
import sys
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import graphjit  # noqa: E402


def build(name, device, small):
    import transformers
    torch.manual_seed(0)                 # the same random weights for every engine
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4) if small else transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(config)
    elif name == "llama":
        config = transformers.LlamaConfig(hidden_size=128 if small else 1024, intermediate_size=256 if small else 2816,
                                          num_hidden_layers=2 if small else 8, num_attention_heads=4 if small else 16,
                                          num_key_value_heads=2 if small else 8, vocab_size=32000)
        model = transformers.LlamaForCausalLM(config)
    else:
        raise SystemExit(f"unknown model {name!r}")
    return model.to(device).eval()


class Counting:
    """Wraps a backend: counts the graphs it is handed."""

    def __init__(self, backend):
        self.backend, self.graphs = backend, 0
        self.__name__ = "counting"
        # graphjit's registered backend takes the compile() call's mode (max-autotune autotunes)
        self.graphjit_takes_mode = getattr(backend, "graphjit_takes_mode", False)

    def __call__(self, gm, example_inputs, **mode):
        self.graphs += 1
        return self.backend(gm, example_inputs, **mode)


def engine(name, model, mode=None):
    """(model with its forward compiled by `name` in `mode` (None: the default), counter or None)."""
    if name == "eager":
        return model, None
    if name in ("torch", "torch-auto"):
        # as a fresh process: no graphs, and no dims learned dynamic (torch's automatic-dynamic profile,
        # keyed by code object and source name, carries over from one model to the next: transformers'
        # forwards share their wrapper's code)
        torch._dynamo.reset()
    if name == "torch-auto":      # transformers compiles the forward itself inside generate()
        return model, None
    if name == "torch":
        from torch._inductor.compile_fx import compile_fx
        counter = Counting(compile_fx)
        if mode is None:
            model.forward = torch.compile(model.forward, backend=counter)
        else:       # a mode needs Inductor by name; its graph count is then not known here
            counter = None
            model.forward = torch.compile(model.forward, mode=mode)
        return model, counter
    if name == "graphjit":
        counter = Counting(graphjit.backends.registry.graphjit_backend)
        graphjit.reset()
        model.forward = graphjit.compile(model.forward, backend=counter, mode=mode)
        return model, counter
    raise SystemExit(f"unknown engine {name!r}")


def prompt(length, vocab, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, length), generator=g).to(device)


def generate_with(model, ids, tokens, cache=None, auto_compile=False):
    """(generate()'s tokens, seconds); cache: generate's cache_implementation (None: DynamicCache).
    With a static cache on a GPU, generate() compiles the forward with torch.compile itself (transformers'
    auto-compile, in its CUDA-graph mode) unless told not to: auto_compile lets it (the torch.compile row),
    otherwise each engine runs its own forward."""
    sync(ids.device)
    start = time.perf_counter()
    extra = {} if cache is None else {"cache_implementation": cache, "disable_compile": not auto_compile}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens,
                             min_new_tokens=tokens, pad_token_id=0, **extra)
    sync(ids.device)
    return out, time.perf_counter() - start


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


class Engine:
    """One engine's model for one benchmark model, and what it measured."""

    def __init__(self, name, engine_name, args):
        device = torch.device(args.device)
        # a static cache on a GPU: torch.compile as transformers applies it (generate's auto-compile), which
        # marks each step for CUDA graphs; model.forward compiled by hand fails there in reduce-overhead
        # ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run")
        auto = engine_name == "torch" and args.cache == "static" and device.type == "cuda"
        self.name, self.args = engine_name, args
        self.model, self.counter = engine("torch-auto" if auto else engine_name, build(name, device, args.small),
                                          args.mode)
        self.generate = functools.partial(generate_with, cache=args.cache, auto_compile=auto)
        self.ids = prompt(args.length, self.model.config.vocab_size, device)
        self.outs, self.runs, self.error = [], [], None

    def first(self):
        out, self.first_s = self.generate(self.model, self.ids, self.args.tokens)
        self.outs.append(out)

    def steady(self):
        out, seconds = self.generate(self.model, self.ids, self.args.tokens)
        self.runs.append(seconds)
        self.last = out

    def new_lengths(self):
        self.outs.append(self.last)
        self.new_s = 0.0
        for i, length in enumerate(self.args.lengths):
            ids = prompt(length, self.model.config.vocab_size, self.ids.device, seed=i + 1)
            out, seconds = self.generate(self.model, ids, self.args.tokens)
            self.outs.append(out)
            self.new_s += seconds

    def row(self, model_name, reference):
        if self.error:
            return f"| {model_name} | {self.name} | failed: {self.error} | | | | |"
        tokens, args = self.args.tokens, self.args
        steady = sorted(self.runs)[len(self.runs) // 2]
        new = tokens * len(args.lengths) / self.new_s if args.lengths else float("nan")
        same = "-" if reference is None else (
            "yes" if all(torch.equal(a, b) for a, b in zip(self.outs, reference)) else "NO")
        graphs = self.counter.graphs if self.counter is not None else "-"
        return (f"| {model_name} | {self.name} | {self.first_s:.2f} | {tokens / steady:.1f} | {new:.1f} | "
                f"{graphs} | {same} |")


def run(name, args):
    """One model, every engine: first calls (compiles) engine by engine; the steady calls in rounds, one
    call of each engine a round, so that the host's drifts (its speed moves by 15-60% over minutes) fall
    on every engine alike; then the new prompt lengths engine by engine. Prints a row per engine."""
    engines = []
    for engine_name in args.engines.split(","):
        e = Engine(name, engine_name, args)
        engines.append(e)
        step(e, e.first)

    for _ in range(args.steady_runs):
        for e in engines:
            step(e, e.steady)
    for e in engines:
        step(e, e.new_lengths)
    reference = next((e.outs for e in engines if e.name == "eager" and not e.error), None)
    for e in engines:
        print(e.row(name, None if e.name == "eager" else reference), flush=True)


def step(e, method):
    """Run one phase of an engine unless it failed before; a failure is a result of the run."""
    if e.error:
        return
    try:
        method()
    except Exception as ex:       # noqa: BLE001
        message = str(ex).strip().splitlines()[0][:150] if str(ex).strip() else ""
        e.error = f"{type(ex).__name__}: {message}"


def sweep_model(name, device, small):
    """(model, input maker: batch -> inputs tuple) for the batch sweep; None if unavailable."""
    torch.manual_seed(0)
    if name == "bert":
        import transformers
        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                                         intermediate_size=256) if small else transformers.BertConfig()
        model = transformers.BertModel(config).to(device).eval()
        return model, lambda b: (torch.randint(0, config.vocab_size, (b, 128), device=device),)
    if name == "resnet50":
        try:
            import torchvision
        except ImportError:
            return None
        model = torchvision.models.resnet50().to(device).eval()
        side = 64 if small else 224
        return model, lambda b: (torch.randn(b, 3, side, side, device=device),)
    raise SystemExit(f"unknown sweep model {name!r}")


def latencies(fns, args, device, repeat=20):
    """Median seconds of each fn(*args), after 3 warm-up calls each; the calls alternate between the fns
    (one of each a round), so that the host's drifts fall on all of them alike."""
    for fn in fns:
        for _ in range(3):
            fn(*args)
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, t in zip(fns, times):
            sync(device)
            start = time.perf_counter()
            fn(*args)
            sync(device)
            t.append(time.perf_counter() - start)
    return [sorted(t)[len(t) // 2] for t in times]


def sweep(args):
    device = torch.device(args.device)
    batches = [int(b) for b in args.batches.split(",")]
    print("| model | batch | eager ms | static ms | dynamic ms | dynamic/static | dynamic graphs |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sweep_models.split(","):
        made = sweep_model(name, device, args.small)
        if made is None:
            print(f"| {name} | - | not installed | | | | |")
            continue
        model, inputs = made
        counter = Counting(graphjit.backends.registry.graphjit_backend)
        graphjit.reset()
        dynamic = graphjit.compile(model, backend=counter)
        with torch.no_grad():
            for b in batches:
                x = inputs(b)
                dynamic(*x)                 # the dynamic compile sees this size before the static one
                eager, static, dyn = latencies([model, graphjit.compile(model, dynamic=False), dynamic], x, device)
                print(f"| {name} | {b} | {eager * 1e3:.3f} | {static * 1e3:.3f} | {dyn * 1e3:.3f} | "
                      f"{dyn / static:.2f} | {counter.graphs} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="gpt2")
    p.add_argument("--engines", default="eager,torch,graphjit")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--cache", default=None, help="generate()'s cache_implementation (static, ...; default: DynamicCache)")
    p.add_argument("--mode", default=None, help="compile mode of both compilers (reduce-overhead ...)")
    p.add_argument("--steady-runs", type=int, default=5, help="steady-state generate() calls (the median is kept)")
    p.add_argument("--length", type=int, default=8, help="prompt length of the first two generate() calls")
    p.add_argument("--lengths", default="5,11,13", help="other prompt lengths, comma-separated")
    p.add_argument("--small", action="store_true", help="2-layer, 128-wide configs (a quick CPU run)")
    p.add_argument("--sweep", action="store_true", help="the batch-size sweep (see above)")
    p.add_argument("--batches", default="1,2,4,8,16,32,64")
    p.add_argument("--sweep-models", default="bert,resnet50")
    args = p.parse_args()
    args.lengths = [int(n) for n in args.lengths.split(",") if n]
    warnings.simplefilter("ignore")
    if args.sweep:
        print(f"benchmarks/dynamic.py --sweep  {platform.node()}  torch {torch.__version__}  device {args.device}"
              f"{'  small configs' if args.small else ''}")
        return sweep(args)
    print(f"benchmarks/dynamic.py  {platform.node()}  torch {torch.__version__}  device {args.device}  "
          f"mode {args.mode or 'default'}  cache {args.cache or 'dynamic'}  tokens {args.tokens}  prompt {args.length}, then {args.lengths}{'  small configs' if args.small else ''}")
    print("| model | engine | first s | steady tok/s | new-L tok/s | graphs | same tokens |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        run(name, args)

if __name__ == "__main__":
    main()
