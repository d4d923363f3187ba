"""Training steps, side by side in one process: eager vs torch.compile (Inductor, default mode) vs
graphjit.compile(model, backend="graphjit") (forward and backward halves through AOTAutograd, each
compiled by graphjit's compiler). One step = forward, loss, backward, optimizer step (AdamW), on fresh
copies of the same randomly initialised model and the same data.

Reported per workload and engine: median step ms (synchronized; the timed steps rotate over the engines,
one step each per round), peak memory (torch.cuda.max_memory_allocated over the engine's first steps,
above what was allocated before its model was: GPU only), first step seconds (compile included; fresh
caches for both compilers), and the largest relative difference of the first steps' losses from eager's.

    python benchmarks/train.py                        # GPU: GPT-2 124M, BERT-base, ResNet-50, ViT-B/16,
                                                      # bf16 autocast, fp32 weights
    python benchmarks/train.py --device cpu           # CPU: small GPT-2 / BERT / MLP / conv models, fp32
    python benchmarks/train.py --only gpt2,mlp --steps 20 --engines eager,graphjit
    python benchmarks/train.py --dropout 0.1          # the transformers' dropouts at 0.1 (their default):
                                                      # each engine draws its own masks, so losses differ
    GRAPHJIT_TRITON_CPU=1 ./dev python 3.12 benchmarks/train.py --smoke     # tiny, CPU: checks this script
"""
import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback

_CACHE = tempfile.mkdtemp(prefix="graphjit-train-bench-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))
os.environ.setdefault("GRAPHJIT_CACHE_DIR", os.path.join(_CACHE, "graphjit"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import graphjit  # noqa: E402


# ---------------------------------------------------------------------------------------------------------
# Workloads: a model factory (big: the GPU sizes) and a batch factory -> (inputs dict, loss of output)
# ---------------------------------------------------------------------------------------------------------

DROPOUT = 0.0      # the transformers models' dropout probabilities (--dropout)


def _hf_loss(out):
    return out.loss


def gpt2(big):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config() if big else GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = DROPOUT
    return GPT2LMHeadModel(config)


def token_batch(big_shape, small_shape):
    """A batch factory of random token ids (batch, length) from a vocabulary, labels the ids (an LM loss)."""
    def make(big, g, device):
        batch, length, vocab = big_shape if big else small_shape
        ids = torch.randint(0, vocab, (batch, length), generator=g).to(device)
        return {"input_ids": ids, "labels": ids}, _hf_loss
    return make


def bert(big):
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig() if big else BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                                 intermediate_size=512, vocab_size=1000)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = DROPOUT
    return BertForMaskedLM(config)


def resnet50(big):
    if big:
        import torchvision
        return torchvision.models.resnet50()
    from tests.models.plain import ResNet       # no torchvision on the CPU machine
    return ResNet(widths=(32, 64, 128), blocks_per_stage=2)


def vit(big):
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(num_labels=1000) if big else ViTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                                              intermediate_size=512, image_size=64, patch_size=16,
                                                              num_labels=10)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = DROPOUT
    return ViTForImageClassification(config)


def image_batch(size, classes, batch, key, channels_last=False):
    def make(big, g, device):
        n, s, k = (batch, size, classes) if big else (8, 64, 10)
        x = torch.randn(n, 3, s, s, generator=g).to(device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, k, (n,), generator=g).to(device)
        logits = (lambda out: out) if key is None else (lambda out: out.logits)
        return {key or "x": x}, lambda out: F.cross_entropy(logits(out).float(), y)
    return make


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256),
                                       torch.nn.LayerNorm(256), torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


def mlp_batch(big, g, device):
    x = torch.randn(256, 256, generator=g).to(device)
    y = torch.randint(0, 10, (256,), generator=g).to(device)
    return {"x": x}, lambda out: F.cross_entropy(out, y)


WORKLOADS = {
    "gpt2": ("GPT-2 124M, batch 8 x 512", "GPT-2 2 layers 128 wide, batch 4 x 128", gpt2,
             token_batch((8, 512, 50257), (4, 128, 1000))),
    "bert": ("BERT-base MLM, batch 16 x 128", "BERT 2 layers 128 wide MLM, batch 4 x 128", bert,
             token_batch((16, 128, 30522), (4, 128, 1000))),
    "resnet50": ("ResNet-50, batch 32, channels_last", "ResNet (BasicBlocks 32-64-128, 2 per stage), batch 8 x 64 x 64", resnet50,
                 image_batch(224, 1000, 32, None, channels_last=True)),
    "vit": ("ViT-B/16, batch 32", "ViT 2 layers 128 wide, batch 8 x 64 x 64", vit,
            image_batch(224, 1000, 32, "pixel_values")),
    "mlp": (None, "MLP 256-1024-256, batch 256", lambda big: MLP(), mlp_batch),
}
GPU_DEFAULT = ["gpt2", "bert", "resnet50", "vit"]
CPU_DEFAULT = ["gpt2", "bert", "mlp", "resnet50"]


# ---------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------

def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def engine(name, model):
    """eager, torch.compile, graphjit, or graphjit:knob=value+knob=value (graphjit with options=, e.g.
    graphjit:fallback_random=1 draws dropout with eager's kernels)."""
    if name == "eager":
        return model
    if name == "torch.compile":
        return torch.compile(model)
    _, _, spec = name.partition(":")
    options = {k: int(v) for k, v in (item.split("=") for item in spec.split("+") if item)} or None
    return graphjit.compile(model, backend="graphjit", options=options)


class Engine:
    """One engine's copy of the model, its optimizer, and what its steps measured."""

    def __init__(self, name, base, device):
        self.name, self.device = name, device
        self.allocated_before = torch.cuda.memory_allocated() if device == "cuda" else 0
        self.model = copy.deepcopy(base).to(device).train()
        self.fn = engine(name, self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.losses, self.times = [], []

    def step(self, inputs, loss_of, autocast):
        synchronize(self.device)
        start = time.perf_counter()
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=autocast):
            loss = loss_of(self.fn(**inputs))
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        synchronize(self.device)
        self.times.append(time.perf_counter() - start)
        self.losses.append(loss.item())


def run_workload(key, args, device, big):
    """Each engine is built and run for its first steps alone (first step seconds; peak memory above what
    was allocated before its model was: its own parameters, gradients, optimizer state and activations),
    then the timed steps rotate over the engines, one step each per round, so that a slow spell of the
    host or the GPU falls on all of them alike."""
    title_big, title_small, factory, batch_factory = WORKLOADS[key]
    title = title_big if big else title_small
    torch.manual_seed(0)
    base = factory(big)
    g = torch.Generator().manual_seed(1)
    batches = [batch_factory(big, g, device) for _ in range(2)]
    row = {"workload": key, "title": title, "engines": {}}
    engines = []
    warm = 3
    for name in args.engines:
        try:
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            e = Engine(name, base, device)
            for i in range(warm):
                e.step(*batches[i % len(batches)], autocast=big)
            e.peak = (torch.cuda.max_memory_allocated() - e.allocated_before) / 2**30 if device == "cuda" else None
            engines.append(e)
        except Exception as ex:     # noqa: BLE001 -- a failing engine is reported, the others still run
            traceback.print_exc()
            row["engines"][name] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
    for i in range(warm, args.steps):
        for e in engines:
            e.step(*batches[i % len(batches)], autocast=big)
    eager = next((e for e in engines if e.name == "eager"), None)
    for e in engines:
        ms = statistics.median(e.times[warm:]) * 1e3 if len(e.times) > warm else float("nan")
        entry = {"step_ms": ms, "first_s": e.times[0], "peak_gib": e.peak, "losses": e.losses[:args.compare]}
        if eager is not None and e is not eager:
            k = args.compare
            entry["loss_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(e.losses[:k], eager.losses[:k]))
        row["engines"][e.name] = entry
        print(f"  {key} {e.name}: {ms:.2f} ms/step, first {e.times[0]:.1f} s" +
              (f", peak {e.peak:.2f} GiB" if e.peak is not None else "") +
              (f", loss diff {entry['loss_rel_diff']:.1e}" if "loss_rel_diff" in entry else ""), flush=True)
    return row


def fmt_table(rows, engines):
    head = "| workload | " + " | ".join(f"{e} ms/step" for e in engines) + \
        " | graphjit vs Inductor | peak GiB (" + " / ".join(engines) + ") | first step s (" + " / ".join(engines[1:]) + \
        ") | loss rel. diff (graphjit) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        e = row["engines"]
        ms = [f"{e[n]['step_ms']:.2f}" if "step_ms" in e.get(n, {}) else e.get(n, {}).get("error", "-")[:40]
              for n in engines]
        ratio = "-"
        if "step_ms" in e.get("torch.compile", {}) and "step_ms" in e.get("graphjit", {}):
            ratio = f"{e['torch.compile']['step_ms'] / e['graphjit']['step_ms']:.2f}x"
        peak = " / ".join(f"{e[n]['peak_gib']:.2f}" if e.get(n, {}).get("peak_gib") is not None else "-"
                          for n in engines)
        first = " / ".join(f"{e[n]['first_s']:.1f}" if "first_s" in e.get(n, {}) else "-" for n in engines[1:])
        diff = e.get("graphjit", {}).get("loss_rel_diff")
        lines.append(f"| {row['title']} | " + " | ".join(ms) + f" | {ratio} | {peak} | {first} | " +
                     (f"{diff:.1e}" if diff is not None else "-") + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default=None, help="comma-separated workloads: " + ",".join(WORKLOADS))
    p.add_argument("--engines", default="eager,torch.compile,graphjit")
    p.add_argument("--steps", type=int, default=15, help="steps per engine (the first three are not timed)")
    p.add_argument("--compare", type=int, default=4, help="first steps whose losses are compared with eager's")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--out", default=None, help="write train_results.json here")
    p.add_argument("--smoke", action="store_true", help="small models, 3 steps: checks this script")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout probability of the transformers models "
                   "(default 0: the same losses in every engine)")
    args = p.parse_args()
    global DROPOUT
    DROPOUT = args.dropout
    args.engines = args.engines.split(",")
    if args.smoke:
        args.steps, args.compare = 5, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    big = device == "cuda" and not args.smoke
    keys = args.only.split(",") if args.only else (GPU_DEFAULT if big else CPU_DEFAULT)
    if args.smoke:
        keys = [k for k in keys if k in ("mlp", "gpt2")] or keys
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if device == 'cuda' else platform.processor() or 'cpu'}, "
          f"{'bf16 autocast' if big else 'fp32'}, {args.steps} steps"
          + (f", dropout {DROPOUT} (losses differ by the masks drawn)" if DROPOUT else ""), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    rows = []
    for key in keys:
        rows.append(run_workload(key, args, device, big))
        if args.out:
            with open(os.path.join(args.out, "train_results.json"), "w") as f:
                json.dump(rows, f, indent=1)
    print(fmt_table(rows, args.engines))


if __name__ == "__main__":
    main()
