"""Training over changing batch sizes and sequence lengths, side by side in one process: eager vs torch.compile
(Inductor, automatic dynamic) vs graphjit.compile(model, backend="graphjit"). One step = forward, loss,
backward, AdamW step, on fresh copies of one randomly initialised model; the (batch, length) pairs change
every step, as in training on unpadded, length-bucketed data.

Reported per workload and engine:
  sweep s:    the first pass over all sizes, compiles included (fresh caches for both compilers).
  steady ms:  per-step median over the later passes (the timed steps rotate over the engines, one step each
              per round, so that a slow spell of the host falls on all of them alike), summed over sizes.
  graphs:     graphs the engine's backend was handed; for graphjit also its compiles of a forward or
              backward half (one per half for all sizes when they compile with symbolic sizes; one per
              half and size when they compile per size).
  loss diff:  the largest relative difference of the first pass's losses from eager's.

    python benchmarks/train_dynamic.py                              # GPU: GPT-2 124M, BERT-base, bf16 autocast
    python benchmarks/train_dynamic.py --device cpu --only gpt2     # CPU: 2-layer models, fp32
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback

_CACHE = tempfile.mkdtemp(prefix="graphjit-train-dynamic-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))
os.environ.setdefault("GRAPHJIT_CACHE_DIR", os.path.join(_CACHE, "graphjit"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import graphjit  # noqa: E402
import graphjit.compiler  # noqa: E402
from train import bert, gpt2, synchronize  # noqa: E402

SIZES = {   # (batch, length) pairs, one step each, in this order
    ("gpt2", True): [(8, 512), (8, 384), (4, 512), (8, 256), (6, 448), (8, 320), (4, 384), (8, 192)],
    ("bert", True): [(16, 128), (16, 96), (8, 128), (16, 64), (12, 112), (16, 80), (8, 96), (16, 48)],
    ("gpt2", False): [(4, 64), (4, 48), (2, 64), (4, 32), (3, 56), (4, 40)],
    ("bert", False): [(4, 64), (4, 48), (2, 64), (4, 32), (3, 56), (4, 40)],
}
MODELS = {"gpt2": (gpt2, 50257, 1000, "GPT-2 124M", "GPT-2 2 layers 128 wide"),
          "bert": (bert, 30522, 1000, "BERT-base MLM", "BERT 2 layers 128 wide MLM")}


class Counting:
    """Wraps a backend: counts the graphs it is handed."""

    def __init__(self, backend):
        self.backend, self.graphs = backend, 0
        self.__name__ = "counting"

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.backend(gm, example_inputs)


class HalfCount:
    """Counts graphjit's compiles of a graph (a forward or backward half, or a per-size copy of one)."""

    def __init__(self):
        self.n, self._orig = 0, graphjit.compiler.compile_graph

    def __enter__(self):
        def counting(*args, **kwargs):
            self.n += 1
            return self._orig(*args, **kwargs)
        graphjit.compiler.compile_graph = counting
        return self

    def __exit__(self, *exc):
        graphjit.compiler.compile_graph = self._orig


class Engine:
    def __init__(self, name, base, device):
        import copy
        self.name, self.device = name, device
        self.model = copy.deepcopy(base).to(device).train()
        self.counter, self.halves = None, None
        if name == "torch.compile":
            from torch._inductor.compile_fx import compile_fx
            torch._dynamo.reset()
            self.counter = Counting(compile_fx)
            self.fn = torch.compile(self.model, backend=self.counter)
        elif name == "graphjit":
            graphjit.reset()
            self.counter = Counting(graphjit.backends.registry.graphjit_backend)
            self.halves = HalfCount()
            self.fn = graphjit.compile(self.model, backend=self.counter)
        else:
            self.fn = self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.losses, self.times = [], {}

    def step(self, ids, autocast, size):
        synchronize(self.device)
        start = time.perf_counter()
        if self.halves is not None:
            self.halves.__enter__()
        try:
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=autocast):
                loss = self.fn(input_ids=ids, labels=ids).loss
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            synchronize(self.device)
        finally:
            if self.halves is not None:
                self.halves.__exit__()
        self.times.setdefault(size, []).append(time.perf_counter() - start)
        self.losses.append(loss.item())


def run(key, args, device, big):
    factory, vocab_big, vocab_small, title_big, title_small = MODELS[key]
    vocab = vocab_big if big else vocab_small
    sizes = SIZES[(key, big)]
    title = f"{title_big if big else title_small}, {len(sizes)} (batch, length) pairs"
    torch.manual_seed(0)
    base = factory(big)
    g = torch.Generator().manual_seed(1)
    batches = [(size, torch.randint(0, vocab, size, generator=g).to(device)) for size in sizes]
    engines, row = [], {"title": title, "engines": {}}
    for name in args.engines:
        try:
            e = Engine(name, base, device)
            start = time.perf_counter()
            for size, ids in batches:
                e.step(ids, big, size)
            e.sweep_s = time.perf_counter() - start
            e.losses_first = list(e.losses)
            engines.append(e)
        except Exception as ex:     # noqa: BLE001 -- a failing engine is reported, the others still run
            traceback.print_exc()
            row["engines"][name] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
    for _ in range(args.passes):
        for size, ids in batches:
            for e in engines:
                e.step(ids, big, size)
    eager = next((e for e in engines if e.name == "eager"), None)
    for e in engines:
        steady = sum(statistics.median(t[1:]) for t in e.times.values()) * 1e3 if args.passes else float("nan")
        entry = {"sweep_s": e.sweep_s, "steady_ms": steady,
                 "graphs": e.counter.graphs if e.counter else None,
                 "halves": e.halves.n if e.halves else None}
        if eager is not None and e is not eager:
            entry["loss_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(e.losses_first, eager.losses_first))
        row["engines"][e.name] = entry
        print(f"  {key} {e.name}: sweep {e.sweep_s:.1f} s, steady {steady:.1f} ms over {len(sizes)} sizes" +
              (f", {entry['graphs']} graphs" if entry["graphs"] is not None else "") +
              (f", {entry['halves']} half compiles" if entry["halves"] is not None else "") +
              (f", loss diff {entry['loss_rel_diff']:.1e}" if "loss_rel_diff" in entry else ""), flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default="gpt2,bert")
    p.add_argument("--engines", default="eager,torch.compile,graphjit")
    p.add_argument("--passes", type=int, default=3, help="timed passes over the sizes after the first")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    args.engines = args.engines.split(",")
    if args.threads:
        torch.set_num_threads(args.threads)
    big = args.device == "cuda"
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name() if big else 'cpu'}", flush=True)
    rows = [run(key, args, args.device, big) for key in args.only.split(",")]
    names = args.engines
    print("\n| workload | " + " | ".join(f"{n} sweep s" for n in names) + " | " +
          " | ".join(f"{n} steady ms" for n in names) + " | graphs (torch.compile / graphjit) | graphjit half compiles | loss rel. diff (graphjit) |")
    print("|" + "---|" * (2 * len(names) + 4))
    for row in rows:
        e = row["engines"]

        def cell(name, field, fmt):
            v = e.get(name, {}).get(field)
            return fmt.format(v) if v is not None else e.get(name, {}).get("error", "-")[:30]
        print(f"| {row['title']} | " + " | ".join(cell(n, "sweep_s", "{:.1f}") for n in names) + " | " +
              " | ".join(cell(n, "steady_ms", "{:.1f}") for n in names) + " | " +
              f"{cell('torch.compile', 'graphs', '{}')} / {cell('graphjit', 'graphs', '{}')} | "
              f"{cell('graphjit', 'halves', '{}')} | {cell('graphjit', 'loss_rel_diff', '{:.1e}')} |")


if __name__ == "__main__":
    main()
