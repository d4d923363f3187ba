"""Why does scaled_dot_product_attention inside a captured graph take torch's math path when eager takes
flash/cuDNN? Prints, for 1-layer BERT and ViT (bf16, CUDA): the arguments eager passes to sdpa and the
backend torch picks for them; the arguments in graphjit's captured graph (fake-tensor metadata) and the
backend torch picks for real tensors laid out the same way; and the attention ops of the decomposed graph.

    python benchmarks/probes/sdpa_probe.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import graphjit  # noqa: E402
from graphjit.compiler import decompose  # noqa: E402

BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def describe(t):
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return dict(shape=list(t.shape), stride=list(t.stride()), dtype=str(t.dtype), offset=t.storage_offset(),
                requires_grad=t.requires_grad)


def choice(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    try:
        return BACKENDS.get(torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale,
                                                    enable_gqa=enable_gqa), "?")
    except Exception as e:  # noqa: BLE001
        return f"error {type(e).__name__}: {e}"


class Spy(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            names = ["attn_mask", "dropout_p", "is_causal"]
            full = dict(zip(["query", "key", "value"] + names, args))
            full.update(kwargs)
            self.calls.append(dict(
                args={k: describe(v) for k, v in full.items()},
                choice=choice(full["query"], full["key"], full["value"], full.get("attn_mask"),
                              full.get("dropout_p", 0.0), full.get("is_causal", False), full.get("scale"),
                              full.get("enable_gqa", False))))
        return func(*args, **kwargs)


def real_like(fake):
    """A real CUDA tensor with fake's sizes, strides and dtype (random values; stride-0 dims allowed)."""
    span = 1 + sum((s - 1) * st for s, st in zip(fake.shape, fake.stride()) if s > 0)
    base = torch.randn(span, device="cuda").to(fake.dtype) if fake.is_floating_point() else \
        torch.ones(span, device="cuda", dtype=fake.dtype)
    return torch.as_strided(base, fake.shape, fake.stride())


def main():
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel
    out = dict(flags=dict(flash=torch.backends.cuda.flash_sdp_enabled(),
                          efficient=torch.backends.cuda.mem_efficient_sdp_enabled(),
                          cudnn=torch.backends.cuda.cudnn_sdp_enabled(), math=torch.backends.cuda.math_sdp_enabled()))
    models = {
        "bert": (BertModel(BertConfig(num_hidden_layers=1), add_pooling_layer=False),
                 torch.randint(0, 30522, (16, 128), device="cuda")),
        "vit": (ViTModel(ViTConfig(num_hidden_layers=1), add_pooling_layer=False),
                torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.bfloat16)),
    }
    for name, (model, x) in models.items():
        model = model.to("cuda", torch.bfloat16).eval()
        entry = {}
        with torch.inference_mode():
            spy = Spy()
            with spy:
                model(x)
            entry["eager"] = spy.calls

            def backend(gm, example_inputs):
                found = []
                for node in gm.graph.nodes:
                    if "scaled_dot_product" in str(node.target):
                        vals = [a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a for a in node.args]
                        kw = {k: (v.meta.get("example_value") if isinstance(v, torch.fx.Node) else v)
                              for k, v in node.kwargs.items()}
                        q, k, v = (real_like(t) for t in vals[:3])
                        mask = kw.get("attn_mask", vals[3] if len(vals) > 3 else None)
                        mask_real = real_like(mask) if isinstance(mask, torch.Tensor) else mask
                        found.append(dict(args=[describe(t) for t in vals], kwargs={k: describe(v) for k, v in kw.items()},
                                          choice_real_same_layout=choice(q, k, v, mask_real, kw.get("dropout_p", 0.0),
                                                                         kw.get("is_causal", False), kw.get("scale"),
                                                                         kw.get("enable_gqa", False))))
                entry["masks_folded"] = decompose.fold_constant_attention_masks(gm)
                aten_gm = decompose.decompose(gm, example_inputs)
                entry["captured"] = found
                entry["aten_attention_ops"] = sorted({str(n.target) for n in aten_gm.graph.nodes if any(
                    s in str(n.target) for s in ("attention", "bmm", "softmax", "any"))})
                return gm.forward
            graphjit.reset()
            graphjit.compile(model, backend=backend)(x)
        out[name] = entry
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
