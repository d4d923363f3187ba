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
from a small config: mixture-of-experts, state-space, more decoders, encoders, encoder-decoders, vision, audio
and multimodal models. FULL = ZOO + WIDE. tests/models/test_zoo.py runs ZOO and the few entries of WIDE_SAMPLE
by default, every entry of WIDE with GRAPHJIT_FULL_ZOO=1 (selected() gives the names); other readers of ZOO
(the compiler's and the GPU's zoo tests, benchmarks/capture.py) don't see WIDE.
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
# state-space, more decoders, encoders, encoder-decoders, vision, audio, multimodal). They are not in ZOO:
# the compiler's and the GPU's zoo tests (tests/compiler/test_zoo_compiled.py, tests/cuda/test_zoo_modes.py)
# and benchmarks/capture.py iterate ZOO, and these would multiply their time. FULL holds both tables;
# tests/models/test_zoo.py runs ZOO and WIDE_SAMPLE by default, all of WIDE with GRAPHJIT_FULL_ZOO=1.

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


WIDE = {
    # ---- mixture of experts
    "mixtral": _hf_spec("MixtralForCausalLM", mixtral_config, causal_lm_inputs(),
                        "top-2 of 4 experts: router softmax/topk, tokens sorted by expert into grouped matmuls"),
    "qwen2-moe": _hf_spec("Qwen2MoeForCausalLM", qwen2_moe_config, causal_lm_inputs(),
                          "experts plus a gated shared expert"),
    # ---- state-space and recurrent
    "mamba": _hf_spec("MambaForCausalLM", mamba_config, mamba_inputs,
                      "selective scan in plain torch (no CUDA kernels): a Python loop over the sequence"),
    "mamba2": _hf_spec("Mamba2ForCausalLM", mamba2_config, mamba_inputs,
                       "SSD chunked scan (chunk 8, sequence 12: padded to chunks), gated RMSNorm"),
    "recurrent-gemma": _hf_spec("RecurrentGemmaForCausalLM", recurrent_gemma_config, mamba_inputs,
                                "RG-LRU recurrent block, conv1d, then local attention"),
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
    # ---- encoder-decoders
    "mbart": _hf_spec("MBartForConditionalGeneration", mbart_config, seq2seq_inputs(pad_id=1),
                      "pre-norm BART with final layer norms"),
    "pegasus": _hf_spec("PegasusForConditionalGeneration", pegasus_config, seq2seq_inputs(pad_id=0),
                        "sinusoidal positions"),
    "marian": _hf_spec("MarianMTModel", marian_config, seq2seq_inputs(pad_id=0),
                       "sinusoidal positions, final_logits_bias buffer"),
    "longt5": _hf_spec("LongT5ForConditionalGeneration", longt5_config, seq2seq_inputs(pad_id=0),
                       "transient-global encoder attention: blocks of local radius 4, global block sums"),
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
    # ---- audio
    "wav2vec2": _hf_spec("Wav2Vec2Model", wav2vec2_config, audio_inputs,
                         "conv feature encoder on raw audio, grouped conv positional embedding"),
    "speech2text": _hf_spec("Speech2TextForConditionalGeneration", speech2text_config, speech2text_inputs,
                            "conv1d subsampler with GLU, sinusoidal positions, encoder-decoder"),
    # ---- multimodal
    "siglip": _hf_spec("SiglipModel", siglip_config,
                       lambda: {"input_ids": token_ids(), **image_inputs()()},
                       "text and vision towers, attention-pooling head, sigmoid logits"),
    "llava": _hf_spec("LlavaForConditionalGeneration", llava_config, llava_inputs,
                      "CLIP vision tower, projector, image features scattered into the text embeddings"),
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
