"""What a training graph's forward saves for its backward: torch.compile (Inductor) vs graphjit, on the
same model and batch. Both partition the joint graph with torch's min-cut partitioner; what each saves
differs by the decompositions and joint-graph passes before it. The saved tensors live from the forward
to their use in the backward, so their bytes are most of a training step's peak memory above the weights.

    ./dev python 3.11 benchmarks/probes/saved_tensors.py --model gpt2 --layers 2 --batch 2x256
    ./dev python 3.12 benchmarks/probes/saved_tensors.py --device cuda --model vit --list

Prints, per engine: the number of saved tensors, their bytes, and (--list) each one's op, shape and dtype
sorted by size.
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch._functorch.partitioners as partitioners  # noqa: E402

import graphjit  # noqa: E402


def build(name, layers, batch, device):
    rows, length = batch
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(n_layer=layers)
        config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
        model = GPT2LMHeadModel(config)
        ids = torch.randint(0, config.vocab_size, (rows, length))
        return model, {"input_ids": ids.to(device), "labels": ids.to(device)}, lambda out: out.loss
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM
        config = BertConfig(num_hidden_layers=layers)
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
        model = BertForMaskedLM(config)
        ids = torch.randint(0, config.vocab_size, (rows, length))
        return model, {"input_ids": ids.to(device), "labels": ids.to(device)}, lambda out: out.loss
    if name == "vit":
        from transformers import ViTConfig, ViTForImageClassification
        config = ViTConfig(num_hidden_layers=layers, num_labels=1000)
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
        model = ViTForImageClassification(config)
        x = torch.randn(rows, 3, 224, 224)
        y = torch.randint(0, 1000, (rows,))
        return model, {"pixel_values": x.to(device), "labels": y.to(device)}, lambda out: out.loss
    raise SystemExit(f"unknown model {name}")


def saved(fw_module, num_fwd_outputs):
    """(op, shape, dtype, bytes) of each tensor the forward module returns past its own outputs."""
    out = next(n for n in fw_module.graph.nodes if n.op == "output")
    rows = []
    for node in out.args[0][num_fwd_outputs:]:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            rows.append((str(node.target), tuple(val.shape), str(val.dtype).replace("torch.", ""),
                         val.numel() * val.element_size()))
    return rows


def measure(engine, args):
    torch.manual_seed(0)
    model, batch, loss_of = build(args.model, args.layers, args.batch, args.device)
    model = model.to(args.device).train()
    found = []
    real = partitioners.min_cut_rematerialization_partition

    def recording(joint, inputs, *a, **kw):
        fw, bw = real(joint, inputs, *a, **kw)
        found.append(saved(fw, kw["num_fwd_outputs"]))
        return fw, bw
    partitioners.min_cut_rematerialization_partition = recording
    import torch._inductor.compile_fx as compile_fx
    compile_fx.min_cut_rematerialization_partition = recording
    try:
        if engine == "inductor":
            torch._dynamo.reset()
            compiled = torch.compile(model)
        else:
            compiled = graphjit.compile(model, backend="graphjit")
        with torch.autocast(args.device, dtype=torch.bfloat16):
            loss = loss_of(compiled(**batch))
        loss.backward()
    finally:
        partitioners.min_cut_rematerialization_partition = real
        compile_fx.min_cut_rematerialization_partition = real
    return [row for graph in found for row in graph]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=["gpt2", "bert", "vit"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", default="2x256", help="rows x length (ViT: rows x anything)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engines", default="inductor,graphjit")
    parser.add_argument("--list", action="store_true", help="list each saved tensor")
    args = parser.parse_args()
    args.batch = tuple(int(v) for v in args.batch.split("x"))
    for engine in args.engines.split(","):
        rows = measure(engine, args)
        total = sum(r[3] for r in rows)
        print(f"{engine}: {len(rows)} saved tensors, {total / 2**20:.1f} MiB")
        by_op = collections.Counter()
        for r in rows:
            by_op[(r[0], r[2])] += r[3]
        for (op, dtype), size in by_op.most_common(12):
            print(f"    {size / 2**20:9.1f} MiB  {op} ({dtype})")
        if args.list:
            for r in sorted(rows, key=lambda r: -r[3]):
                print(f"      {r[3] / 2**20:9.2f} MiB  {r[0]} {r[1]} {r[2]}")


if __name__ == "__main__":
    main()
