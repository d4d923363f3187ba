"""The model zoo: small, randomly initialised models (no downloads) that graphjit must capture whole.

    ZOO[name] -> Spec(factory, inputs, notes, needs)

  factory(): a fresh model, deterministic weights (seeded), in eval mode, or in train mode for the
             "-train" entries (every dropout probability is 0 so train mode is deterministic; BatchNorm
             updates its running statistics).
  inputs():  the keyword arguments of one forward call (random values, fixed shapes and padding).
  notes:     which code paths the entry exercises.
  needs:     transformers class names the entry uses; `missing(spec)` says which the installed transformers
             lacks (tests skip with that reason, benchmarks print it).

transformers models come from Config objects: 2 layers, hidden size 32, 4 heads, vocabulary 99. The tests
(tests/models/test_zoo.py) and benchmarks/capture.py both read this table:

    import sys; sys.path.insert(0, REPO_ROOT)
    from tests.models.zoo import ZOO, missing, build
"""
import dataclasses
import importlib

import torch

from graphjit.testing import assert_same

from . import plain

VOCAB = 99
BATCH, SEQ = 2, 12
HIDDEN, HEADS, LAYERS, FFN = 32, 4, 2, 64


@dataclasses.dataclass(frozen=True)
class Spec:
    factory: object
    inputs: object
    notes: str = ""
    needs: tuple = ()

    @property
    def train(self):
        return getattr(self.factory, "train_mode", False)


def missing(spec):
    """None if every transformers class the entry needs is installed, else the reason it can't run."""
    if not spec.needs:
        return None
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as e:
        return f"transformers is not installed ({e})"
    absent = [name for name in spec.needs if not hasattr(transformers, name)]
    if absent:
        return f"transformers {transformers.__version__} has no {', '.join(absent)}"
    return None


def build(spec):
    """(model, kwargs) of one entry, seeded: the model from seed 0, the inputs from seed 1."""
    torch.manual_seed(0)
    model = spec.factory()
    torch.manual_seed(1)
    return model, spec.inputs()


def output_tensors(result):
    """Every tensor of a model's result (a ModelOutput, dict, tuple or tensor), in order."""
    if isinstance(result, torch.Tensor):
        return [result]
    if hasattr(result, "to_tuple"):
        result = result.to_tuple()
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (list, tuple)):
        return [t for item in result for t in output_tensors(item)]
    return []


def matches_eager(model, compiled, spec, prepare=lambda inputs: inputs, calls=3, **tolerance):
    """compiled against model over `calls` calls with fresh inputs (seeds 1, 2 ...), under no_grad: every
    output tensor equal within tolerance. prepare(kwargs) moves the inputs (to a device)."""
    with torch.no_grad():
        for seed in range(calls):
            torch.manual_seed(seed + 1)
            inputs = prepare(spec.inputs())
            expected = [t.clone() for t in output_tensors(model(**inputs))]
            got = [t.clone() for t in output_tensors(compiled(**inputs))]
            assert_same(got, expected, where=f"call {seed} outputs", **tolerance)


# --------------------------------------------------------------------------------------------- inputs

def token_ids(low=3, seq=SEQ, batch=BATCH):
    """Token ids in [low, VOCAB): ids below `low` are kept for pad/bos/eos."""
    return torch.randint(low, VOCAB, (batch, seq))


def right_padding_mask(seq=SEQ, pad=4):
    """Row 0 full, row 1 with its last `pad` positions padded (encoders: BERT-style)."""
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, seq - pad:] = 0
    return mask


def left_padding_mask(seq=SEQ, pad=3):
    """Row 0 full, row 1 with its first `pad` positions padded (decoders batch prompts this way)."""
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, :pad] = 0
    return mask


def positions_from_mask(mask):
    """position_ids as generate() computes them for left-padded batches."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def padded(ids, mask, pad_id):
    return ids.masked_fill(mask == 0, pad_id)


def causal_lm_inputs(pad_id=0, **extra):
    def make():
        mask = left_padding_mask()
        return {"input_ids": padded(token_ids(), mask, pad_id), "attention_mask": mask,
                "position_ids": positions_from_mask(mask), **extra}
    return make


def causal_lm_plain_inputs(**extra):
    def make():
        mask = left_padding_mask()
        return {"input_ids": padded(token_ids(), mask, 0), "attention_mask": mask, **extra}
    return make


def causal_lm_train_inputs(pad_id=0):
    def make():
        mask = right_padding_mask()
        ids = padded(token_ids(), mask, pad_id)
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    return make


def decode_step_inputs(class_name, config_fn, past=SEQ - 1):
    """One new token per row after `past` cached positions (a DynamicCache of random keys/values), passed
    as `cache` (transformers >= 5.x) or `past_key_values` (older), whichever the model's forward takes."""
    def make():
        import inspect
        import transformers
        forward = inspect.signature(getattr(transformers, class_name).forward).parameters
        cache_arg = "cache" if "cache" in forward else "past_key_values"
        cfg = config_fn()
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        layers = [(torch.randn(BATCH, kv_heads, past, head_dim), torch.randn(BATCH, kv_heads, past, head_dim))
                  for _ in range(cfg.num_hidden_layers)]
        mask = left_padding_mask(seq=past + 1)
        return {"input_ids": token_ids(seq=1), "attention_mask": mask,
                "position_ids": positions_from_mask(mask)[:, -1:],
                cache_arg: transformers.DynamicCache(ddp_cache_data=layers), "use_cache": True}
    return make


def encoder_inputs(token_types=False, pad_id=0, **extra):
    def make():
        mask = right_padding_mask()
        kwargs = {"input_ids": padded(token_ids(), mask, pad_id), "attention_mask": mask, **extra}
        if token_types:
            kwargs["token_type_ids"] = torch.cat([torch.zeros(BATCH, SEQ // 2, dtype=torch.long),
                                                 torch.ones(BATCH, SEQ - SEQ // 2, dtype=torch.long)], 1)
        return kwargs
    return make


def seq2seq_inputs(pad_id, decoder_seq=7, **extra):
    def make():
        mask = right_padding_mask()
        return {"input_ids": padded(token_ids(), mask, pad_id), "attention_mask": mask,
                "decoder_input_ids": token_ids(seq=decoder_seq), **extra}
    return make


def seq2seq_label_inputs(pad_id, decoder_seq=7):
    def make():
        mask = right_padding_mask()
        labels = token_ids(seq=decoder_seq)
        labels[1, -2:] = -100
        return {"input_ids": padded(token_ids(), mask, pad_id), "attention_mask": mask, "labels": labels}
    return make


def image_inputs(size=16, channels=3, key="pixel_values"):
    return lambda: {key: torch.randn(BATCH, channels, size, size)}


def channels_last_inputs():
    return {"x": torch.randn(BATCH, 3, 16, 16).contiguous(memory_format=torch.channels_last)}


# --------------------------------------------------------------------------------------------- configs

def _no_dropout(cfg):
    """Every dropout/layerdrop probability of the config (and its sub-configs) set to 0."""
    for name, value in list(vars(cfg).items()):
        if isinstance(value, float) and any(w in name for w in ("dropout", "pdrop", "layerdrop")):
            setattr(cfg, name, 0.0)
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _no_dropout(value)
    return cfg


def _hf(config_name, **kwargs):
    import transformers
    return _no_dropout(getattr(transformers, config_name)(**kwargs))


def gpt2_config():
    return _hf("GPT2Config", n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_inner=FFN, vocab_size=VOCAB,
               n_positions=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def bert_config():
    return _hf("BertConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0)


def bert_eager_attention_config():
    cfg = bert_config()
    cfg._attn_implementation = "eager"
    return cfg


def roberta_config():
    return _hf("RobertaConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=1,
               bos_token_id=0, eos_token_id=2)


def distilbert_config():
    return _hf("DistilBertConfig", n_layers=LAYERS, dim=HIDDEN, n_heads=HEADS, hidden_dim=FFN, vocab_size=VOCAB,
               max_position_embeddings=64, pad_token_id=0)


def _llama_like(config_name, **extra):
    def config():
        return _hf(config_name, num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                   num_key_value_heads=2, intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=64,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)
    return config


llama_config = _llama_like("LlamaConfig")
llama_eager_attention_config = _llama_like("LlamaConfig", attn_implementation="eager")
mistral_config = _llama_like("MistralConfig", sliding_window=8)
qwen2_config = _llama_like("Qwen2Config")
gemma_config = _llama_like("GemmaConfig", head_dim=8)


def phi_config():
    return _hf("PhiConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
               bos_token_id=1, eos_token_id=2)


def gpt_neox_config():
    return _hf("GPTNeoXConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
               bos_token_id=1, eos_token_id=2)


def opt_config():
    return _hf("OPTConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               ffn_dim=FFN, word_embed_proj_dim=HIDDEN, vocab_size=VOCAB, max_position_embeddings=64,
               pad_token_id=1, bos_token_id=2, eos_token_id=2)


def t5_config():
    return _hf("T5Config", num_layers=LAYERS, num_decoder_layers=LAYERS, d_model=HIDDEN, d_kv=HIDDEN // HEADS,
               d_ff=FFN, num_heads=HEADS, vocab_size=VOCAB, relative_attention_num_buckets=8,
               relative_attention_max_distance=16, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def bart_config():
    return _hf("BartConfig", encoder_layers=LAYERS, decoder_layers=LAYERS, d_model=HIDDEN,
               encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)


def vit_config():
    return _hf("ViTConfig", image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN,
               num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN, num_labels=10)


def clip_config():
    import transformers
    text = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, projection_dim=16)
    vision = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS, projection_dim=16)
    return _no_dropout(transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))


def whisper_config():
    return _hf("WhisperConfig", vocab_size=VOCAB, num_mel_bins=8, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, d_model=HIDDEN, max_source_positions=16, max_target_positions=32,
               pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
               suppress_tokens=None, begin_suppress_tokens=None)


def whisper_inputs():
    return {"input_features": torch.randn(BATCH, 8, 32), "decoder_input_ids": token_ids(seq=6)}


# --------------------------------------------------------------------------------------------- factories

def hf(class_name, config_fn, train=False):
    """A factory of transformers' `class_name` built from config_fn() (eval mode unless train)."""
    def factory():
        import transformers
        model = getattr(transformers, class_name)(config_fn())
        return model.train() if train else model.eval()
    factory.train_mode = train
    factory.__name__ = f"{class_name}_{'train' if train else 'eval'}"
    return factory


def torch_model(cls, train=False, **kwargs):
    def factory():
        model = cls(**kwargs)
        return model.train() if train else model.eval()
    factory.train_mode = train
    factory.__name__ = f"{cls.__name__}_{'train' if train else 'eval'}"
    return factory


def _hf_spec(class_name, config_fn, inputs, notes, train=False, needs=()):
    return Spec(hf(class_name, config_fn, train), inputs, notes, (class_name,) + tuple(needs))


ZOO = {
    # ---- decoder-only LMs
    "gpt2": _hf_spec("GPT2LMHeadModel", gpt2_config, causal_lm_inputs(),
                     "left-padded attention_mask, position_ids, ModelOutput with the DynamicCache"),
    "gpt2-tuple": _hf_spec("GPT2LMHeadModel", gpt2_config, causal_lm_plain_inputs(return_dict=False,
                                                                                   use_cache=False),
                           "return_dict=False, use_cache=False: a plain tuple"),
    "gpt2-decode": _hf_spec("GPT2LMHeadModel", gpt2_config, decode_step_inputs("GPT2LMHeadModel", gpt2_config),
                            "one-token decode step on a passed-in DynamicCache (mutated in place)",
                            needs=("DynamicCache",)),
    "gpt2-train": _hf_spec("GPT2LMHeadModel", gpt2_config, causal_lm_train_inputs(),
                           "train mode, labels: loss computed in the graph", train=True),
    "llama": _hf_spec("LlamaForCausalLM", llama_config, causal_lm_inputs(),
                      "GQA, RoPE, RMSNorm, SiLU MLP; left padding and position_ids"),
    "llama-tuple": _hf_spec("LlamaForCausalLM", llama_config,
                            causal_lm_plain_inputs(return_dict=False, use_cache=False),
                            "return_dict=False, use_cache=False"),
    "llama-decode": _hf_spec("LlamaForCausalLM", llama_config, decode_step_inputs("LlamaForCausalLM", llama_config),
                             "one-token decode step on a passed-in DynamicCache", needs=("DynamicCache",)),
    "llama-eager-attention": _hf_spec("LlamaForCausalLM", llama_eager_attention_config, causal_lm_inputs(),
                                      "attn_implementation='eager': matmul-softmax attention, additive float mask"),
    "llama-train": _hf_spec("LlamaForCausalLM", llama_config, causal_lm_train_inputs(),
                            "train mode, labels", train=True),
    "mistral": _hf_spec("MistralForCausalLM", mistral_config, causal_lm_inputs(),
                        "sliding_window=8 < sequence length 12: sliding-window causal mask"),
    "qwen2": _hf_spec("Qwen2ForCausalLM", qwen2_config, causal_lm_inputs(), "biased q/k/v projections, GQA"),
    "gemma": _hf_spec("GemmaForCausalLM", gemma_config, causal_lm_inputs(),
                      "scaled embeddings, GeGLU, (1 + weight) RMSNorm"),
    "phi": _hf_spec("PhiForCausalLM", phi_config, causal_lm_inputs(), "partial rotary, parallel attn/MLP"),
    "gpt-neox": _hf_spec("GPTNeoXForCausalLM", gpt_neox_config, causal_lm_inputs(),
                         "fused qkv, partial rotary, parallel residual"),
    "opt": _hf_spec("OPTForCausalLM", opt_config, causal_lm_plain_inputs(),
                    "learned positions computed from attention_mask.cumsum"),
    "opt-train": _hf_spec("OPTForCausalLM", opt_config, causal_lm_train_inputs(pad_id=1),
                          "train mode, labels", train=True),
    # ---- encoders
    "bert": _hf_spec("BertModel", bert_config, encoder_inputs(token_types=True),
                     "right-padded attention_mask, token_type_ids, pooler"),
    "bert-tuple": _hf_spec("BertModel", bert_config, encoder_inputs(token_types=True, return_dict=False),
                           "return_dict=False: a plain tuple"),
    "bert-all-outputs": _hf_spec("BertModel", bert_eager_attention_config,
                                 encoder_inputs(token_types=True, output_attentions=True, output_hidden_states=True),
                                 "output_attentions and output_hidden_states (eager attention): outputs collected"
                                 " by hooks"),
    "bert-train": _hf_spec("BertForSequenceClassification", bert_config,
                           lambda: {**encoder_inputs(token_types=True)(), "labels": torch.tensor([1, 0])},
                           "train mode, classification head with labels", train=True),
    "roberta": _hf_spec("RobertaModel", roberta_config, encoder_inputs(pad_id=1),
                        "position ids made from input_ids != padding_idx (cumsum)"),
    "distilbert": _hf_spec("DistilBertModel", distilbert_config, encoder_inputs(), "no token types, no pooler"),
    # ---- encoder-decoders
    "t5": _hf_spec("T5ForConditionalGeneration", t5_config, seq2seq_inputs(pad_id=0),
                   "relative position buckets, encoder-decoder cache, lm head scaling"),
    "t5-train": _hf_spec("T5ForConditionalGeneration", t5_config, seq2seq_label_inputs(pad_id=0),
                         "train mode, labels shifted into decoder_input_ids, loss", train=True),
    "bart": _hf_spec("BartForConditionalGeneration", bart_config, seq2seq_inputs(pad_id=1),
                     "learned positions, encoder-decoder cross attention"),
    "bart-tuple": _hf_spec("BartForConditionalGeneration", bart_config,
                           seq2seq_inputs(pad_id=1, return_dict=False, use_cache=False),
                           "return_dict=False, use_cache=False"),
    "whisper": Spec(hf("WhisperForConditionalGeneration", whisper_config), whisper_inputs,
                    "conv1d audio encoder, decoder with cache", ("WhisperForConditionalGeneration",)),
    # ---- vision and multimodal
    "vit": _hf_spec("ViTForImageClassification", vit_config, image_inputs(), "patch embedding, CLS head"),
    "vit-train": _hf_spec("ViTForImageClassification", vit_config,
                          lambda: {**image_inputs()(), "labels": torch.tensor([3, 7])}, "train mode, labels",
                          train=True),
    "clip": _hf_spec("CLIPModel", clip_config, lambda: {**encoder_inputs()(), **image_inputs()()},
                     "text and vision towers, contrastive logits"),
    "clip-loss": _hf_spec("CLIPModel", clip_config,
                          lambda: {**encoder_inputs(return_loss=True)(), **image_inputs()()},
                          "return_loss=True: contrastive loss over the batch"),
    "clip-text": Spec(hf("CLIPTextModel", lambda: clip_config().text_config), encoder_inputs(),
                      "causal text encoder, EOS pooling (argmax)", ("CLIPTextModel",)),
    "clip-vision": Spec(hf("CLIPVisionModel", lambda: clip_config().vision_config), image_inputs(),
                        "vision tower, pre-layernorm", ("CLIPVisionModel",)),
    # ---- plain torch
    "resnet": Spec(torch_model(plain.ResNet), image_inputs(key="x"), "conv + BatchNorm (eval: running stats)"),
    "resnet-train": Spec(torch_model(plain.ResNet, train=True), image_inputs(key="x"),
                         "train mode: BatchNorm updates running_mean/var and num_batches_tracked"),
    "resnet-channels-last": Spec(torch_model(plain.ResNet, train=True), channels_last_inputs,
                                 "train mode on a channels_last input (strides differ from contiguous)"),
    "plain-vit": Spec(torch_model(plain.ViT), image_inputs(), "hand-written attention, cls token, pos embed"),
    "plain-vit-train": Spec(torch_model(plain.ViT, train=True), image_inputs(), "train mode (dropout p=0)"),
}
