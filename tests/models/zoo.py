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

WIDE[name] (same Specs, at the end of this file) widens the zoo toward every architecture transformers builds
from a small config: mixture-of-experts, state-space, more decoders, encoders, encoder-decoders, vision, audio,
multimodal and time-series models. FULL = ZOO + WIDE. tests/models/test_zoo.py runs ZOO and the few entries of
WIDE_SAMPLE by default, every entry of WIDE with GRAPHJIT_FULL_ZOO=1 (selected() gives the names); other readers
of ZOO (the compiler's and the GPU's zoo tests, benchmarks/capture.py) don't see WIDE.
"""
import dataclasses
import importlib
import os

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


# --------------------------------------------------------------------------------------------- the wider zoo
#
# More transformers architectures, one entry per family or code path not in ZOO above (mixture-of-experts,
# state-space, more decoders, encoders, encoder-decoders, vision, audio, multimodal, time series). They are
# not in ZOO: the compiler's and the GPU's zoo tests (tests/compiler/test_zoo_compiled.py,
# tests/cuda/test_zoo_modes.py) and benchmarks/capture.py iterate ZOO, and these would multiply their time.
# FULL holds both tables; tests/models/test_zoo.py runs ZOO and WIDE_SAMPLE by default, all of WIDE with
# GRAPHJIT_FULL_ZOO=1.

def _decoder(config_name, **kwargs):
    """A decoder-only config: 2 layers, hidden 32, 4 heads, vocabulary 99, ids 0/1/2 for pad/bos/eos."""
    def config():
        return _hf(config_name, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2, **kwargs)
    return config


_LLAMA_SIZES = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=2,
                    intermediate_size=FFN, max_position_embeddings=64)

mixtral_config = _llama_like("MixtralConfig", num_local_experts=4, num_experts_per_tok=2)
qwen2_moe_config = _decoder("Qwen2MoeConfig", **_LLAMA_SIZES, num_experts=4, num_experts_per_tok=2,
                            moe_intermediate_size=32, shared_expert_intermediate_size=32, decoder_sparse_step=1)
mamba_config = _decoder("MambaConfig", hidden_size=HIDDEN, state_size=8, num_hidden_layers=LAYERS, expand=2,
                        conv_kernel=4, time_step_rank=4)
mamba2_config = _decoder("Mamba2Config", hidden_size=HIDDEN, state_size=8, num_hidden_layers=LAYERS, expand=2,
                         num_heads=4, head_dim=16, n_groups=1, conv_kernel=4, chunk_size=8, time_step_rank=4)
recurrent_gemma_config = _decoder("RecurrentGemmaConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN,
                                  intermediate_size=FFN, num_attention_heads=HEADS, num_key_value_heads=1,
                                  lru_width=HIDDEN, attention_window_size=8, conv1d_width=4,
                                  block_types=("recurrent", "attention"))
falcon_config = _decoder("FalconConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                         max_position_embeddings=64)
bloom_config = _decoder("BloomConfig", n_layer=LAYERS, hidden_size=HIDDEN, n_head=HEADS)
gptj_config = _decoder("GPTJConfig", n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_inner=FFN, rotary_dim=4,
                       n_positions=64)
gpt_neo_config = _decoder("GPTNeoConfig", num_layers=LAYERS, hidden_size=HIDDEN, num_heads=HEADS,
                          intermediate_size=FFN, attention_types=[[["global", "local"], 1]], window_size=8,
                          max_position_embeddings=64)
codegen_config = _decoder("CodeGenConfig", n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_inner=FFN, rotary_dim=4,
                          n_positions=64, n_ctx=64)
gpt_bigcode_config = _decoder("GPTBigCodeConfig", n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_inner=FFN,
                              n_positions=64, multi_query=True)
stablelm_config = _llama_like("StableLmConfig", partial_rotary_factor=0.5)
phi3_config = _llama_like("Phi3Config")
gemma2_config = _llama_like("Gemma2Config", head_dim=8, sliding_window=8)
qwen3_config = _llama_like("Qwen3Config", head_dim=8)
olmo2_config = _llama_like("Olmo2Config")
cohere_config = _llama_like("CohereConfig")
starcoder2_config = _llama_like("Starcoder2Config", sliding_window=8)
granite_config = _llama_like("GraniteConfig", embedding_multiplier=2.0, residual_multiplier=0.5,
                             attention_multiplier=0.25, logits_scaling=2.0)

_ENCODER_SIZES = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN,
                      vocab_size=VOCAB, max_position_embeddings=64)


def _encoder(config_name, pad_token_id=0, **kwargs):
    def config():
        return _hf(config_name, **_ENCODER_SIZES, pad_token_id=pad_token_id, **kwargs)
    return config


albert_config = _encoder("AlbertConfig", embedding_size=16)
electra_config = _encoder("ElectraConfig", embedding_size=16)
deberta_v2_config = _encoder("DebertaV2Config", relative_attention=True, position_buckets=8,
                             max_relative_positions=16, pos_att_type=["p2c", "c2p"])
mpnet_config = _encoder("MPNetConfig", pad_token_id=1)   # 32 buckets: compute_position_bias hard-codes 32
modernbert_config = _encoder("ModernBertConfig", local_attention=8, global_attn_every_n_layers=2, bos_token_id=1,
                             eos_token_id=2, cls_token_id=1, sep_token_id=2)


def _bart_like(config_name, pad_token_id=1, **kwargs):
    def config():
        sizes = dict(encoder_layers=LAYERS, decoder_layers=LAYERS, d_model=HIDDEN, encoder_attention_heads=HEADS,
                     decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, vocab_size=VOCAB,
                     max_position_embeddings=64, pad_token_id=pad_token_id)
        return _hf(config_name, **{**sizes, **kwargs})
    return config


mbart_config = _bart_like("MBartConfig", bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                          forced_eos_token_id=None)
pegasus_config = _bart_like("PegasusConfig", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                            forced_eos_token_id=None)
marian_config = _bart_like("MarianConfig", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                           decoder_vocab_size=VOCAB, forced_eos_token_id=None)


def longt5_config():
    return _hf("LongT5Config", num_layers=LAYERS, num_decoder_layers=LAYERS, d_model=HIDDEN, d_kv=HIDDEN // HEADS,
               d_ff=FFN, num_heads=HEADS, vocab_size=VOCAB, relative_attention_num_buckets=8,
               relative_attention_max_distance=16, encoder_attention_type="transient-global", local_radius=4,
               global_block_size=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


_VIT_SIZES = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, intermediate_size=FFN)


def _vision(config_name, **kwargs):
    def config():
        return _hf(config_name, **kwargs)
    return config


deit_config = _vision("DeiTConfig", **_VIT_SIZES, num_labels=10)
beit_config = _vision("BeitConfig", **_VIT_SIZES, use_relative_position_bias=True, use_mean_pooling=True,
                      num_labels=10)
dinov2_config = _vision("Dinov2Config", **_VIT_SIZES)
convnext_config = _vision("ConvNextConfig", num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
                          num_labels=10)
resnet_hf_config = _vision("ResNetConfig", num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                           layer_type="bottleneck", num_labels=10)
swin_config = _vision("SwinConfig", image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 1],
                      num_heads=[2, 2], window_size=4, num_labels=10)
segformer_config = _vision("SegformerConfig", num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                           hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                           mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5)
mobilevit_config = _vision("MobileViTConfig", num_channels=3, image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
                           neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_attention_heads=2, num_labels=10)

_WAV2VEC2_SIZES = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       intermediate_size=FFN, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                       num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, mask_time_prob=0.0)
wav2vec2_config = _vision("Wav2Vec2Config", **_WAV2VEC2_SIZES)


def speech2text_config():
    return _hf("Speech2TextConfig", vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, input_feat_per_channel=8, conv_channels=16, num_conv_layers=2,
               conv_kernel_sizes=(5, 5), max_source_positions=64, max_target_positions=32, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def siglip_config():
    import transformers
    text = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, max_position_embeddings=SEQ, pad_token_id=0, bos_token_id=1,
                eos_token_id=2)
    vision = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS)
    return _no_dropout(transformers.SiglipConfig(text_config=text, vision_config=vision))


LLAVA_IMAGE_TOKEN = VOCAB - 1   # 16 patches of a 16x16 image (CLS dropped): 16 of these in input_ids


def llava_config():
    import transformers
    vision = transformers.CLIPVisionConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN,
                                           intermediate_size=FFN, num_hidden_layers=LAYERS,
                                           num_attention_heads=HEADS, projection_dim=16)
    text = transformers.LlamaConfig(**_LLAMA_SIZES, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                                    eos_token_id=2)
    return _no_dropout(transformers.LlavaConfig(vision_config=vision, text_config=text,
                                                image_token_index=LLAVA_IMAGE_TOKEN, image_seq_length=16,
                                                vision_feature_layer=-1,
                                                vision_feature_select_strategy="default"))


def llava_inputs():
    """A prompt of 4 text tokens, the image's 16 tokens and 4 more (row 1 left-padded by 2), and the image."""
    ids = torch.randint(3, VOCAB - 1, (BATCH, 24))
    ids[:, 4:20] = LLAVA_IMAGE_TOKEN
    mask = torch.ones(BATCH, 24, dtype=torch.long)
    mask[1, :2] = 0
    return {"input_ids": padded(ids, mask, 0), "attention_mask": mask, "pixel_values": torch.randn(BATCH, 3, 16, 16)}


def audio_inputs(samples=400):
    return {"input_values": torch.randn(BATCH, samples)}


def speech2text_inputs():
    """32 frames of 8 features, row 1 with its last 8 frames padded (the subsampler shortens the mask too)."""
    return {"input_features": torch.randn(BATCH, 32, 8), "attention_mask": right_padding_mask(seq=32, pad=8),
            "decoder_input_ids": token_ids(seq=6)}


def mamba_inputs():
    return {"input_ids": token_ids()}


# ---- more of the wider zoo: decoders, encoders, encoder-decoders, vision, audio, multimodal, time series

gemma3_config = _llama_like("Gemma3TextConfig", head_dim=8, query_pre_attn_scalar=8, sliding_window=8,
                            layer_types=["sliding_attention", "full_attention"])
qwen3_moe_config = _llama_like("Qwen3MoeConfig", head_dim=8, num_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=32, norm_topk_prob=True)
olmo_config = _llama_like("OlmoConfig", clip_qkv=0.5)
olmoe_config = _llama_like("OlmoeConfig", num_experts=4, num_experts_per_tok=2)
phimoe_config = _llama_like("PhimoeConfig", num_local_experts=4, num_experts_per_tok=2)
nemotron_config = _llama_like("NemotronConfig")
glm_config = _llama_like("GlmConfig", head_dim=8)
helium_config = _llama_like("HeliumConfig", head_dim=8)
persimmon_config = _decoder("PersimmonConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                            intermediate_size=FFN, max_position_embeddings=64, qk_layernorm=True)


def xglm_config():
    return _hf("XGLMConfig", vocab_size=VOCAB, num_layers=LAYERS, d_model=HIDDEN, attention_heads=HEADS, ffn_dim=FFN,
               max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)


mpt_config = _decoder("MptConfig", n_layers=LAYERS, d_model=HIDDEN, n_heads=HEADS, expansion_ratio=2, max_seq_len=64,
                      attn_config={"alibi": True, "alibi_bias_max": 8, "clip_qkv": 4.0})
jamba_config = _decoder("JambaConfig", **_LLAMA_SIZES, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
                        expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8,
                        mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4)
falcon_mamba_config = _decoder("FalconMambaConfig", hidden_size=HIDDEN, state_size=8, num_hidden_layers=LAYERS,
                               expand=2, conv_kernel=4, time_step_rank=4)

xlm_roberta_config = _encoder("XLMRobertaConfig", pad_token_id=1, bos_token_id=0, eos_token_id=2)
megatron_bert_config = _encoder("MegatronBertConfig")
roformer_config = _encoder("RoFormerConfig", embedding_size=HIDDEN)
convbert_config = _encoder("ConvBertConfig", embedding_size=HIDDEN, head_ratio=2, conv_kernel_size=3, num_groups=2)
squeezebert_config = _encoder("SqueezeBertConfig", embedding_size=HIDDEN, q_groups=2, k_groups=2, v_groups=2,
                              post_attention_groups=2, intermediate_groups=4, output_groups=4)
mobilebert_config = _encoder("MobileBertConfig", embedding_size=16, intra_bottleneck_size=16,
                             num_feedforward_networks=2, normalization_type="no_norm")
deberta_config = _encoder("DebertaConfig", relative_attention=True, max_relative_positions=16,
                          pos_att_type=["p2c", "c2p"])
longformer_config = _encoder("LongformerConfig", pad_token_id=1, attention_window=4, bos_token_id=0, eos_token_id=2,
                             sep_token_id=2)
big_bird_config = _encoder("BigBirdConfig", attention_type="block_sparse", block_size=1, num_random_blocks=1)
rembert_config = _encoder("RemBertConfig", input_embedding_size=16, output_embedding_size=16)
esm_config = _encoder("EsmConfig", pad_token_id=1, mask_token_id=VOCAB - 1, position_embedding_type="rotary",
                      token_dropout=True, emb_layer_norm_before=False)
layoutlm_config = _encoder("LayoutLMConfig", max_2d_position_embeddings=64)


def funnel_config():
    return _hf("FunnelConfig", vocab_size=VOCAB, block_sizes=[1, 1], num_decoder_layers=1, d_model=HIDDEN, n_head=HEADS,
               d_head=HIDDEN // HEADS, d_inner=FFN, max_position_embeddings=64, pad_token_id=0)


def canine_config():
    return _hf("CanineConfig", num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
               intermediate_size=FFN, max_position_embeddings=64, downsampling_rate=4, upsampling_kernel_size=4,
               num_hash_functions=4, num_hash_buckets=64, local_transformer_stride=4, bos_token_id=1, eos_token_id=2)


def xlnet_config():
    return _hf("XLNetConfig", vocab_size=VOCAB, d_model=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_inner=FFN, mem_len=8,
               pad_token_id=0, bos_token_id=1, eos_token_id=2)


def layoutlm_inputs():
    """encoder_inputs plus a box per token: (x0, y0, x1, y1) with x0 <= x1, y0 <= y1, all below 64."""
    corners = torch.randint(0, 32, (BATCH, SEQ, 2))
    sizes = torch.randint(0, 32, (BATCH, SEQ, 2))
    return {**encoder_inputs(token_types=True)(), "bbox": torch.cat([corners, corners + sizes], -1)}


def _t5_like(config_name, **kwargs):
    def config():
        return _hf(config_name, num_layers=LAYERS, num_decoder_layers=LAYERS, d_model=HIDDEN, d_kv=HIDDEN // HEADS,
                   d_ff=FFN, num_heads=HEADS, vocab_size=VOCAB, relative_attention_num_buckets=8,
                   relative_attention_max_distance=16, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                   **kwargs)
    return config


mt5_config = _t5_like("MT5Config", feed_forward_proj="gated-gelu", tie_word_embeddings=False)
umt5_config = _t5_like("UMT5Config", feed_forward_proj="gated-gelu")
switch_transformers_config = _t5_like("SwitchTransformersConfig", num_sparse_encoder_layers=1,
                                      num_sparse_decoder_layers=1, num_experts=4, expert_capacity=8)
m2m100_config = _bart_like("M2M100Config", bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
blenderbot_config = _bart_like("BlenderbotConfig", pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               decoder_start_token_id=1, forced_eos_token_id=None)
blenderbot_small_config = _bart_like("BlenderbotSmallConfig", pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     decoder_start_token_id=1, forced_eos_token_id=None)
plbart_config = _bart_like("PLBartConfig", bos_token_id=0, eos_token_id=2, forced_eos_token_id=None)


def led_config():
    return _hf("LEDConfig", encoder_layers=LAYERS, decoder_layers=LAYERS, d_model=HIDDEN, encoder_attention_heads=HEADS,
               decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, vocab_size=VOCAB,
               max_encoder_position_embeddings=64, max_decoder_position_embeddings=64, attention_window=4,
               pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def prophetnet_config():
    return _hf("ProphetNetConfig", vocab_size=VOCAB, hidden_size=HIDDEN, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
               num_encoder_layers=LAYERS, num_decoder_layers=LAYERS, num_encoder_attention_heads=HEADS,
               num_decoder_attention_heads=HEADS, max_position_embeddings=64, ngram=2, num_buckets=8,
               relative_max_distance=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def fsmt_config():
    return _hf("FSMTConfig", langs=["en", "de"], src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=HIDDEN,
               encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
               decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64,
               pad_token_id=1, bos_token_id=0, eos_token_id=2, forced_eos_token_id=None)


vit_mae_config = _vision("ViTMAEConfig", **_VIT_SIZES, mask_ratio=0.75)
yolos_config = _vision("YolosConfig", **{**_VIT_SIZES, "image_size": [16, 16]}, num_detection_tokens=5, num_labels=5)
data2vec_vision_config = _vision("Data2VecVisionConfig", **_VIT_SIZES, use_shared_relative_position_bias=True,
                                 use_mean_pooling=True, drop_path_rate=0.0)
swinv2_config = _vision("Swinv2Config", image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 1],
                        num_heads=[2, 2], window_size=4, drop_path_rate=0.0, num_labels=10)
convnextv2_config = _vision("ConvNextV2Config", num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
                            num_labels=10)
# width 0.05: every conv 8 channels wide (the divisor), the top conv 1280 * 0.05 = 64 = hidden_dim
_EFFICIENTNET_SIZES = dict(image_size=32, width_coefficient=0.05, depth_coefficient=0.5, kernel_sizes=[3, 5],
                           in_channels=[32, 16], out_channels=[16, 24], strides=[1, 2], num_block_repeats=[1, 2],
                           expand_ratios=[1, 6], hidden_dim=64, drop_connect_rate=0.0)
efficientnet_config = _vision("EfficientNetConfig", **_EFFICIENTNET_SIZES, num_labels=10)
regnet_config = _vision("RegNetConfig", num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                        groups_width=4, num_labels=10)
mobilenet_v2_config = _vision("MobileNetV2Config", num_channels=3, image_size=32, depth_multiplier=0.25,
                              num_labels=10)
levit_config = _vision("LevitConfig", image_size=64, num_channels=3, patch_size=16, hidden_sizes=[16, 32, 48],
                       num_attention_heads=[2, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], mlp_ratio=[2, 2, 2],
                       attention_ratio=[2, 2, 2], num_labels=10)
pvt_config = _vision("PvtConfig", image_size=32, num_channels=3, num_encoder_blocks=2, depths=[1, 1],
                     sequence_reduction_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[4, 2], strides=[4, 2],
                     num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=10)
poolformer_config = _vision("PoolFormerConfig", num_channels=3, num_encoder_blocks=2, depths=[1, 1],
                            hidden_sizes=[8, 16], patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1], num_labels=10)
bit_config = _vision("BitConfig", num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                     num_groups=2, global_padding="SAME", layer_type="bottleneck", num_labels=10)


def vit_mae_inputs():
    """An image and the noise whose argsort picks the kept patches (random masking made deterministic)."""
    return {**image_inputs()(), "noise": torch.rand(BATCH, 16)}


hubert_config = _vision("HubertConfig", **_WAV2VEC2_SIZES, feat_extract_norm="layer", do_stable_layer_norm=True)
wavlm_config = _vision("WavLMConfig", **_WAV2VEC2_SIZES, num_buckets=16, max_bucket_distance=32)
sew_config = _vision("SEWConfig", **_WAV2VEC2_SIZES, squeeze_factor=2)
data2vec_audio_config = _vision("Data2VecAudioConfig", **{**_WAV2VEC2_SIZES, "num_conv_pos_embeddings": 5},
                                conv_pos_kernel_size=5)
ast_config = _vision("ASTConfig", hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=FFN, patch_size=4, frequency_stride=4, time_stride=4, max_length=32,
                     num_mel_bins=16, num_labels=5)


def ast_inputs():
    return {"input_values": torch.randn(BATCH, 32, 16)}


def _two_towers(config_name, text, vision, **kwargs):
    """A text-and-vision config from the two sub-configs' keyword arguments."""
    def config():
        return _hf(config_name, text_config=text, vision_config=vision, **kwargs)
    return config


_TEXT_TOWER = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                   num_attention_heads=HEADS, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
                   eos_token_id=2)
_VISION_TOWER = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, intermediate_size=FFN,
                     num_hidden_layers=LAYERS, num_attention_heads=HEADS)

blip_config = _two_towers("BlipConfig", {**_TEXT_TOWER, "sep_token_id": 2}, _VISION_TOWER, projection_dim=16,
                          image_text_hidden_size=16)
owlvit_config = _two_towers("OwlViTConfig", {**_TEXT_TOWER, "max_position_embeddings": 16}, _VISION_TOWER,
                            projection_dim=16)
groupvit_config = _two_towers("GroupViTConfig", {**_TEXT_TOWER, "pad_token_id": 1},
                              {**_VISION_TOWER, "num_hidden_layers": 3, "depths": [1, 1, 1],
                               "num_group_tokens": [4, 2, 0], "num_output_groups": [4, 2, 2]},
                              projection_dim=16, projection_intermediate_dim=32)
align_config = _two_towers("AlignConfig", _TEXT_TOWER, _EFFICIENTNET_SIZES, projection_dim=8)   # image embeddings: the last block's 8 channels


def text_image_inputs(size=16):
    return lambda: {**encoder_inputs()(), **image_inputs(size)()}


patchtst_config = _vision("PatchTSTConfig", num_input_channels=2, context_length=32, patch_length=8, patch_stride=8,
                          num_hidden_layers=LAYERS, d_model=HIDDEN, num_attention_heads=HEADS, ffn_dim=FFN)
informer_config = _vision("InformerConfig", prediction_length=4, context_length=8, lags_sequence=[1, 2, 3],
                          num_time_features=1, d_model=HIDDEN, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                          encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_layers=LAYERS,
                          decoder_layers=LAYERS)


def patchtst_inputs():
    return {"past_values": torch.randn(BATCH, 32, 2)}


def informer_inputs():
    """11 past steps (context 8 plus the largest lag 3) with one time feature, 4 future steps, 2 unobserved."""
    observed = torch.ones(BATCH, 11)
    observed[1, :2] = 0
    return {"past_values": torch.randn(BATCH, 11), "past_time_features": torch.randn(BATCH, 11, 1),
            "past_observed_mask": observed, "future_values": torch.randn(BATCH, 4),
            "future_time_features": torch.randn(BATCH, 4, 1)}


WIDE = {
    # ---- mixture of experts
    "mixtral": _hf_spec("MixtralForCausalLM", mixtral_config, causal_lm_inputs(),
                        "top-2 of 4 experts: router softmax/topk, tokens sorted by expert into grouped matmuls"),
    "qwen2-moe": _hf_spec("Qwen2MoeForCausalLM", qwen2_moe_config, causal_lm_inputs(),
                          "experts plus a gated shared expert"),
    "qwen3-moe": _hf_spec("Qwen3MoeForCausalLM", qwen3_moe_config, causal_lm_inputs(),
                          "top-2 of 4 experts with renormalised top-k weights, q/k RMSNorm"),
    "olmoe": _hf_spec("OlmoeForCausalLM", olmoe_config, causal_lm_inputs(),
                      "top-2 of 4 experts without renormalisation, q/k RMSNorm over the whole projection"),
    "phimoe": _hf_spec("PhimoeForCausalLM", phimoe_config, causal_lm_inputs(),
                       "sparsemixer routing (masked top-1 twice), LayerNorm"),
    # ---- state-space and recurrent
    "mamba": _hf_spec("MambaForCausalLM", mamba_config, mamba_inputs,
                      "selective scan in plain torch (no CUDA kernels): a Python loop over the sequence"),
    "mamba2": _hf_spec("Mamba2ForCausalLM", mamba2_config, mamba_inputs,
                       "SSD chunked scan (chunk 8, sequence 12: padded to chunks), gated RMSNorm"),
    "recurrent-gemma": _hf_spec("RecurrentGemmaForCausalLM", recurrent_gemma_config, mamba_inputs,
                                "RG-LRU recurrent block, conv1d, then local attention"),
    "falcon-mamba": _hf_spec("FalconMambaForCausalLM", falcon_mamba_config, mamba_inputs,
                             "Mamba with RMS-normalised B, C and dt inside the selective scan"),
    "jamba": _hf_spec("JambaForCausalLM", jamba_config, causal_lm_plain_inputs(),
                      "hybrid: a Mamba layer then an attention layer, experts every other layer"),
    # ---- decoder-only LMs
    "falcon": _hf_spec("FalconForCausalLM", falcon_config, causal_lm_inputs(),
                       "multi-query attention, parallel attention/MLP, rotary"),
    "bloom": _hf_spec("BloomForCausalLM", bloom_config, causal_lm_plain_inputs(),
                      "ALiBi position bias built from the attention mask"),
    "gptj": _hf_spec("GPTJForCausalLM", gptj_config, causal_lm_inputs(), "interleaved partial rotary (rotary_dim 4)"),
    "gpt-neo": _hf_spec("GPTNeoForCausalLM", gpt_neo_config, causal_lm_inputs(),
                        "alternating global and local (window 8) attention layers"),
    "codegen": _hf_spec("CodeGenForCausalLM", codegen_config, causal_lm_inputs(),
                        "fused qkv split into model-parallel blocks, partial rotary"),
    "gpt-bigcode": _hf_spec("GPTBigCodeForCausalLM", gpt_bigcode_config, causal_lm_inputs(),
                            "multi-query attention with a fused c_attn"),
    "stablelm": _hf_spec("StableLmForCausalLM", stablelm_config, causal_lm_inputs(),
                         "LayerNorm, partial rotary (factor 0.5)"),
    "phi3": _hf_spec("Phi3ForCausalLM", phi3_config, causal_lm_inputs(), "fused qkv and gate_up projections"),
    "gemma2": _hf_spec("Gemma2ForCausalLM", gemma2_config, causal_lm_inputs(),
                       "alternating sliding-window (8) and global layers, attention and logit soft-capping"),
    "qwen3": _hf_spec("Qwen3ForCausalLM", qwen3_config, causal_lm_inputs(), "q/k RMSNorm per head"),
    "olmo2": _hf_spec("Olmo2ForCausalLM", olmo2_config, causal_lm_inputs(), "post-norm blocks, q/k RMSNorm"),
    "cohere": _hf_spec("CohereForCausalLM", cohere_config, causal_lm_inputs(),
                       "LayerNorm without bias, interleaved rotary, logit_scale"),
    "starcoder2": _hf_spec("Starcoder2ForCausalLM", starcoder2_config, causal_lm_inputs(),
                           "biased projections, sliding window 8, GELU MLP"),
    "granite": _hf_spec("GraniteForCausalLM", granite_config, causal_lm_inputs(),
                        "embedding/residual/attention multipliers, logits scaling"),
    "gemma3-text": _hf_spec("Gemma3ForCausalLM", gemma3_config, causal_lm_inputs(),
                            "sliding and global layers with separate rotary tables, q/k norm, scaled embeddings"),
    "olmo": _hf_spec("OlmoForCausalLM", olmo_config, causal_lm_inputs(),
                     "LayerNorm without parameters, q/k/v clamped to clip_qkv"),
    "persimmon": _hf_spec("PersimmonForCausalLM", persimmon_config, causal_lm_inputs(),
                          "fused qkv, q/k LayerNorm, partial rotary, squared-ReLU MLP"),
    "nemotron": _hf_spec("NemotronForCausalLM", nemotron_config, causal_lm_inputs(),
                         "LayerNorm1P ((1 + weight) LayerNorm), partial rotary, squared-ReLU MLP"),
    "glm": _hf_spec("GlmForCausalLM", glm_config, causal_lm_inputs(),
                    "interleaved partial rotary (half the head dim), fused gate_up MLP"),
    "helium": _hf_spec("HeliumForCausalLM", helium_config, causal_lm_inputs(),
                       "Llama-style decoder with interleaved rotary"),
    "xglm": _hf_spec("XGLMForCausalLM", xglm_config, causal_lm_inputs(pad_id=1),
                     "sinusoidal positions offset past the padding index, scaled embeddings"),
    "mpt": _hf_spec("MptForCausalLM", mpt_config, causal_lm_plain_inputs(),
                    "ALiBi bias, fused Wqkv clamped to clip_qkv, no biases"),
    # ---- encoders
    "albert": _hf_spec("AlbertModel", albert_config, encoder_inputs(token_types=True),
                       "factorised embeddings (16 -> 32), one layer's weights shared by both layers"),
    "electra": _hf_spec("ElectraForPreTraining", electra_config, encoder_inputs(token_types=True),
                        "embedding projection, discriminator head"),
    "deberta-v2": _hf_spec("DebertaV2Model", deberta_v2_config, encoder_inputs(),
                           "disentangled attention: log-bucketed relative positions, c2p/p2c gathers"),
    "mpnet": _hf_spec("MPNetModel", mpnet_config, encoder_inputs(pad_id=1), "relative position bias buckets"),
    "modernbert": _hf_spec("ModernBertModel", modernbert_config, encoder_inputs(),
                           "rotary, GeGLU, alternating local (window 8) and global attention"),
    "xlm-roberta": _hf_spec("XLMRobertaModel", xlm_roberta_config, encoder_inputs(pad_id=1),
                            "RoBERTa's layers under XLM-R's classes, positions from input_ids != padding_idx"),
    "megatron-bert": _hf_spec("MegatronBertModel", megatron_bert_config, encoder_inputs(token_types=True),
                              "pre-LayerNorm BERT with a final LayerNorm"),
    "roformer": _hf_spec("RoFormerModel", roformer_config, encoder_inputs(token_types=True),
                         "sinusoidal rotary position embedding applied to q and k in a BERT encoder"),
    "convbert": _hf_spec("ConvBertModel", convbert_config, encoder_inputs(token_types=True),
                         "span-based dynamic convolution heads beside self-attention (head_ratio 2), grouped FFN"),
    "squeezebert": _hf_spec("SqueezeBertModel", squeezebert_config, encoder_inputs(token_types=True),
                            "grouped 1x1 conv1d in place of the linear layers, channels-first layout"),
    "funnel": _hf_spec("FunnelModel", funnel_config, encoder_inputs(token_types=True),
                       "sequence mean-pooled between blocks, relative-shift attention, upsampling decoder"),
    "mobilebert": _hf_spec("MobileBertModel", mobilebert_config, encoder_inputs(token_types=True),
                           "trigram input embedding, bottlenecks, stacked FFNs, NoNorm"),
    "deberta": _hf_spec("DebertaModel", deberta_config, encoder_inputs(),
                        "DeBERTa v1: disentangled attention with linear relative positions, fused in_proj"),
    "longformer": _hf_spec("LongformerModel", longformer_config, encoder_inputs(pad_id=1),
                           "sliding-window (4) attention by chunked diagonals, padding to the window"),
    "big-bird": _hf_spec("BigBirdModel", big_bird_config, encoder_inputs(),
                         "block-sparse attention (blocks of 1 token): global, sliding and random (eval: fixed) blocks"),
    "rembert": _hf_spec("RemBertModel", rembert_config, encoder_inputs(token_types=True),
                        "decoupled input embedding (16) projected to the hidden size"),
    "esm": _hf_spec("EsmModel", esm_config, encoder_inputs(pad_id=1),
                    "rotary positions, token dropout rescaling by the observed mask ratio"),
    "canine": _hf_spec("CanineModel", canine_config, encoder_inputs(),
                       "hashed character embeddings, local attention, strided conv downsampling and upsampling"),
    "layoutlm": _hf_spec("LayoutLMModel", layoutlm_config, layoutlm_inputs,
                         "2-D position embeddings of each token's bounding box"),
    "xlnet": _hf_spec("XLNetModel", xlnet_config, encoder_inputs(token_types=True),
                      "relative attention with segment encodings, memories returned"),
    # ---- encoder-decoders
    "mbart": _hf_spec("MBartForConditionalGeneration", mbart_config, seq2seq_inputs(pad_id=1),
                      "pre-norm BART with final layer norms"),
    "pegasus": _hf_spec("PegasusForConditionalGeneration", pegasus_config, seq2seq_inputs(pad_id=0),
                        "sinusoidal positions"),
    "marian": _hf_spec("MarianMTModel", marian_config, seq2seq_inputs(pad_id=0),
                       "sinusoidal positions, final_logits_bias buffer"),
    "longt5": _hf_spec("LongT5ForConditionalGeneration", longt5_config, seq2seq_inputs(pad_id=0),
                       "transient-global encoder attention: blocks of local radius 4, global block sums"),
    "mt5": _hf_spec("MT5ForConditionalGeneration", mt5_config, seq2seq_inputs(pad_id=0),
                    "T5 with gated-GELU FFN and an untied lm head"),
    "umt5": _hf_spec("UMT5ForConditionalGeneration", umt5_config, seq2seq_inputs(pad_id=0),
                     "T5 with a relative position bias in every layer"),
    "switch-transformers": _hf_spec("SwitchTransformersForConditionalGeneration", switch_transformers_config,
                                    seq2seq_inputs(pad_id=0),
                                    "top-1 routing to 4 experts with capacity 8 (overflowing tokens dropped)"),
    "led": _hf_spec("LEDForConditionalGeneration", led_config, seq2seq_inputs(pad_id=1),
                    "Longformer sliding-window encoder attention in a BART-style encoder-decoder"),
    "m2m100": _hf_spec("M2M100ForConditionalGeneration", m2m100_config, seq2seq_inputs(pad_id=1),
                       "sinusoidal positions from input_ids != padding_idx, pre-norm"),
    "blenderbot": _hf_spec("BlenderbotForConditionalGeneration", blenderbot_config, seq2seq_inputs(pad_id=0),
                           "pre-norm encoder-decoder with learned positions and final layer norms"),
    "blenderbot-small": _hf_spec("BlenderbotSmallForConditionalGeneration", blenderbot_small_config,
                                 seq2seq_inputs(pad_id=0), "post-norm, LayerNorm on the embeddings"),
    "plbart": _hf_spec("PLBartForConditionalGeneration", plbart_config, seq2seq_inputs(pad_id=1),
                       "BART with learned positions offset by 2, scaled embeddings"),
    "prophetnet": _hf_spec("ProphetNetForConditionalGeneration", prophetnet_config, seq2seq_inputs(pad_id=0),
                           "n-gram (2) predicting decoder: main and predict streams, relative buckets"),
    "fsmt": _hf_spec("FSMTForConditionalGeneration", fsmt_config, seq2seq_inputs(pad_id=1),
                     "fairseq transformer: separate source and target vocabularies, sinusoidal positions"),
    # ---- vision
    "deit": _hf_spec("DeiTForImageClassification", deit_config, image_inputs(), "CLS and distillation tokens"),
    "beit": _hf_spec("BeitForImageClassification", beit_config, image_inputs(),
                     "relative position bias table, layer scale, mean pooling"),
    "dinov2": _hf_spec("Dinov2Model", dinov2_config, image_inputs(),
                       "position embeddings interpolated (bicubic) to the image size, layer scale"),
    "convnext": _hf_spec("ConvNextForImageClassification", convnext_config, image_inputs(size=32),
                         "depthwise 7x7 convs, channels-last LayerNorm, layer scale"),
    "resnet-hf": _hf_spec("ResNetForImageClassification", resnet_hf_config, image_inputs(size=32),
                          "transformers' ResNet: bottleneck blocks, BatchNorm (eval), max pool"),
    "swin": _hf_spec("SwinForImageClassification", swin_config, image_inputs(),
                     "shifted windows (roll, window partition), patch merging, relative position bias"),
    "segformer": _hf_spec("SegformerForSemanticSegmentation", segformer_config, image_inputs(size=32),
                          "overlapping patch embeds, spatial-reduction attention, upsampled MLP decode head"),
    "mobilevit": _hf_spec("MobileViTForImageClassification", mobilevit_config, image_inputs(size=32),
                          "inverted residuals, unfold into patches, transformer, fold back"),
    "vit-mae": _hf_spec("ViTMAEModel", vit_mae_config, vit_mae_inputs,
                        "random masking of 75% of the patches: argsort of the noise, gather, restore ids"),
    "yolos": _hf_spec("YolosForObjectDetection", yolos_config, image_inputs(),
                      "detection tokens, mid-layer position embeddings, box and class MLP heads"),
    "data2vec-vision": _hf_spec("Data2VecVisionModel", data2vec_vision_config, image_inputs(),
                                "BEiT-style encoder with one relative position bias shared by all layers"),
    "swinv2": _hf_spec("Swinv2ForImageClassification", swinv2_config, image_inputs(),
                       "cosine attention with a learned scale, continuous position bias MLP, post-norm"),
    "convnextv2": _hf_spec("ConvNextV2ForImageClassification", convnextv2_config, image_inputs(size=32),
                           "global response normalisation in each block"),
    "efficientnet": _hf_spec("EfficientNetForImageClassification", efficientnet_config, image_inputs(size=32),
                             "MBConv blocks: depthwise convs, squeeze-excitation, BatchNorm"),
    "regnet": _hf_spec("RegNetForImageClassification", regnet_config, image_inputs(size=32),
                       "grouped convs, squeeze-excitation (RegNetY)"),
    "mobilenet-v2": _hf_spec("MobileNetV2ForImageClassification", mobilenet_v2_config, image_inputs(size=32),
                             "inverted residuals, TensorFlow-style dynamic padding, ReLU6"),
    "levit": _hf_spec("LevitForImageClassification", levit_config, image_inputs(size=64),
                      "conv stem, attention biases gathered by index (cached per device in eval), distillation head"),
    "pvt": _hf_spec("PvtForImageClassification", pvt_config, image_inputs(size=32),
                    "pyramid stages, spatial-reduction attention, position embeddings per stage"),
    "poolformer": _hf_spec("PoolFormerForImageClassification", poolformer_config, image_inputs(size=32),
                           "average pooling as the token mixer, GroupNorm, layer scale"),
    "bit": _hf_spec("BitForImageClassification", bit_config, image_inputs(size=32),
                    "weight-standardised convs, GroupNorm, dynamic SAME padding"),
    # ---- audio
    "wav2vec2": _hf_spec("Wav2Vec2Model", wav2vec2_config, audio_inputs,
                         "conv feature encoder on raw audio, grouped conv positional embedding"),
    "speech2text": _hf_spec("Speech2TextForConditionalGeneration", speech2text_config, speech2text_inputs,
                            "conv1d subsampler with GLU, sinusoidal positions, encoder-decoder"),
    "hubert": _hf_spec("HubertModel", hubert_config, audio_inputs,
                       "stable layer norm variant: LayerNorm conv feature encoder, pre-norm transformer"),
    "wavlm": _hf_spec("WavLMModel", wavlm_config, audio_inputs,
                      "gated relative position bias (buckets), computed in the first layer and reused"),
    "sew": _hf_spec("SEWModel", sew_config, audio_inputs,
                    "sequence squeezed (pooled by 2) before the transformer, upsampled after"),
    "data2vec-audio": _hf_spec("Data2VecAudioModel", data2vec_audio_config, audio_inputs,
                               "positional embedding of stacked conv layers with LayerNorm"),
    "ast": _hf_spec("ASTForAudioClassification", ast_config, ast_inputs,
                    "spectrogram patches (overlapping strides), CLS and distillation tokens"),
    # ---- multimodal
    "siglip": _hf_spec("SiglipModel", siglip_config,
                       lambda: {"input_ids": token_ids(), **image_inputs()()},
                       "text and vision towers, attention-pooling head, sigmoid logits"),
    "llava": _hf_spec("LlavaForConditionalGeneration", llava_config, llava_inputs,
                      "CLIP vision tower, projector, image features scattered into the text embeddings"),
    "blip": _hf_spec("BlipModel", blip_config, text_image_inputs(),
                     "BERT-style text encoder and ViT, contrastive logits"),
    "owlvit": _hf_spec("OwlViTModel", owlvit_config, text_image_inputs(),
                       "CLIP-style towers, text pooled at the argmax token"),
    "groupvit": _hf_spec("GroupViTModel", groupvit_config, text_image_inputs(),
                         "group tokens assigned by hard Gumbel-softmax (eval: argmax) between vision stages"),
    "align": _hf_spec("AlignModel", align_config, text_image_inputs(size=32),
                      "EfficientNet vision tower and BERT text tower, temperature-scaled logits"),
    # ---- time series
    "patchtst": _hf_spec("PatchTSTModel", patchtst_config, patchtst_inputs,
                         "std scaling, unfold into patches per channel, BatchNorm transformer"),
    "informer": _hf_spec("InformerModel", informer_config, informer_inputs,
                         "ProbSparse attention (random key sample, top-u queries), distilling convs, lag features"),
}

FULL = {**ZOO, **WIDE}
assert not set(ZOO) & set(WIDE)

# The entries of WIDE that the tests run by default (one per family: experts, state-space, decoder, encoder,
# encoder-decoder, vision, audio); GRAPHJIT_FULL_ZOO=1 runs all of them.
WIDE_SAMPLE = ("mixtral", "mamba", "gemma2", "deberta-v2", "mbart", "swin", "wav2vec2")
assert set(WIDE_SAMPLE) <= set(WIDE)


def full_zoo():
    """Whether the environment asks for every entry of WIDE (GRAPHJIT_FULL_ZOO=1), not only WIDE_SAMPLE."""
    return os.environ.get("GRAPHJIT_FULL_ZOO", "") not in ("", "0")


def selected():
    """The entry names the tests run: all of ZOO, then WIDE_SAMPLE, or all of WIDE under GRAPHJIT_FULL_ZOO=1."""
    return list(ZOO) + [name for name in WIDE if full_zoo() or name in WIDE_SAMPLE]
