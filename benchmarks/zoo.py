"""The inference zoo of benchmarks/gpu.py beyond its five core workloads: transformers decoders (prefill and one
token), encoders, torchvision classifiers and a diffusers UNet denoiser step, each built from a config with
random weights (no downloads). `workloads(device, dtype, smoke)` returns {key: (title, make_model,
make_inputs, output)} in gpu.py's WORKLOADS form; `smoke` gives tiny configs that check this file on the CPU.

Decoders keep their real width, heads, vocabulary and block structure with fewer layers than the released
checkpoints (the layer count is in the title): the per-layer kernels are what the compilers differ in, and
fewer layers keep torch.compile's cold compiles inside a device call. A decoder's prefill and one-token rows
share one model; `use_cache=False`, so no KV cache is built or returned.
"""
import torch


def _hf_output(out):
    return out.logits if hasattr(out, "logits") else out[0]


def _plain(out):
    return out


def _ids(device, batch, length, vocab, smoke):
    if smoke:
        batch, length, vocab = min(batch, 2), min(length, 8), min(vocab, 100)
    g = torch.Generator(device=device).manual_seed(1)
    return torch.randint(0, vocab, (batch, length), device=device, generator=g)


def _randn(device, dtype, *shape):
    g = torch.Generator(device=device).manual_seed(2)
    return torch.randn(*shape, device=device, generator=g).to(dtype)


def _built(device, dtype, make, channels_last=False):
    """make() under the device (weights are initialized there, not copied from the CPU), then cast."""
    torch.manual_seed(0)
    with torch.device(device):
        model = make()
    model = model.to(dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.eval()


# (key, transformers config class, full config, layers of the full config, smoke config)
_DECODERS = [
    ("llama", "LlamaConfig", dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                                  num_key_value_heads=4, vocab_size=32000), 8, "Llama (TinyLlama width)"),
    ("mistral", "MistralConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=32000, sliding_window=4096), 4,
     "Mistral-7B width"),
    ("qwen2", "Qwen2Config", dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                                  num_key_value_heads=2, vocab_size=151936), 8, "Qwen2-1.5B width"),
    ("gemma", "GemmaConfig", dict(hidden_size=2048, intermediate_size=16384, num_attention_heads=8,
                                  num_key_value_heads=1, head_dim=256, vocab_size=256000), 6, "Gemma-2B width"),
    ("phi", "PhiConfig", dict(hidden_size=2560, intermediate_size=10240, num_attention_heads=32,
                              partial_rotary_factor=0.4, vocab_size=51200), 6, "Phi-2 width"),
]
_SMOKE_DECODER = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=100, num_hidden_layers=1)


def _decoder(device, dtype, smoke, config_name, full, layers, cache):
    def make():
        if "model" not in cache:
            import transformers
            kwargs = dict(full, num_hidden_layers=layers)
            if smoke:
                kwargs = dict(_SMOKE_DECODER)
                if config_name == "GemmaConfig":
                    kwargs.update(num_key_value_heads=1, head_dim=16)
                if config_name == "PhiConfig":
                    kwargs.update(num_key_value_heads=4, partial_rotary_factor=0.4)
            config = getattr(transformers, config_name)(use_cache=False, **kwargs)
            cache["model"] = _built(device, dtype, lambda: transformers.AutoModelForCausalLM.from_config(config))
        return cache["model"]
    return make


def workloads(device, dtype, smoke=False):
    out = {}
    for key, config_name, full, layers, width in _DECODERS:
        cache = {}          # prefill and one token share the model
        make = _decoder(device, dtype, smoke, config_name, full, layers, cache)
        vocab = full["vocab_size"]
        out[f"{key}_prefill"] = (f"{width}, {layers} layers, prefill 4 x 512", make,
                                 lambda vocab=vocab: (_ids(device, 4, 512, vocab, smoke),), _hf_output)
        out[f"{key}_decode"] = (f"{width}, {layers} layers, one token (no past KV)", make,
                                lambda vocab=vocab: (_ids(device, 1, 1, vocab, smoke),), _hf_output)

    def roberta():
        from transformers import RobertaConfig, RobertaModel
        config = RobertaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                               vocab_size=100) if smoke else RobertaConfig(vocab_size=50265)
        return _built(device, dtype, lambda: RobertaModel(config, add_pooling_layer=False))

    def t5_encoder():
        from transformers import T5Config, T5EncoderModel
        config = T5Config(num_layers=1, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=100) if smoke \
            else T5Config(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12, vocab_size=32128)
        config.use_cache = False
        return _built(device, dtype, lambda: T5EncoderModel(config))

    def whisper_encoder():
        from transformers import WhisperConfig, WhisperModel
        config = WhisperConfig(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                               num_mel_bins=80, max_source_positions=30) if smoke else \
            WhisperConfig(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                          decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, num_mel_bins=80)
        return _built(device, dtype, lambda: WhisperModel(config).get_encoder())

    def tv(name, channels_last):
        def make():
            import torchvision
            return _built(device, dtype, lambda: getattr(torchvision.models, name)(), channels_last)
        return make

    def images(batch, channels_last):
        size = 64 if smoke else 224
        x = _randn(device, dtype, min(batch, 2) if smoke else batch, 3, size, size)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x

    def unet():
        from diffusers import UNet2DConditionModel
        if smoke:
            config = dict(sample_size=8, block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32,
                          attention_head_dim=8, norm_num_groups=8,
                          down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                          up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
        else:       # Stable Diffusion 1.5's UNet config
            config = dict(sample_size=64, block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
                          cross_attention_dim=768, attention_head_dim=8)
        return _built(device, dtype, lambda: UNet2DConditionModel(**config))

    def unet_inputs():
        side, ctx, width = (8, 7, 32) if smoke else (64, 77, 768)
        return (_randn(device, dtype, 2, 4, side, side), torch.tensor(500, device=device),
                _randn(device, dtype, 2, ctx, width))

    out["roberta"] = ("RoBERTa-base, batch 16 x 128", roberta, lambda: (_ids(device, 16, 128, 50265, smoke),),
                      _hf_output)
    out["t5_encoder"] = ("T5-base encoder, batch 16 x 128", t5_encoder,
                         lambda: (_ids(device, 16, 128, 32128, smoke),), _hf_output)
    out["whisper_encoder"] = ("Whisper-small encoder, batch 8 x 30 s", whisper_encoder,
                              lambda: (_randn(device, dtype, 2 if smoke else 8, 80, 60 if smoke else 3000),),
                              _hf_output)
    for key, name, title, channels_last in [
            ("convnext_t", "convnext_tiny", "ConvNeXt-T", True),
            ("efficientnet_b0", "efficientnet_b0", "EfficientNet-B0", True),
            ("mobilenet_v3_l", "mobilenet_v3_large", "MobileNetV3-L", True),
            ("densenet121", "densenet121", "DenseNet-121", True),
            ("regnet_y_1_6gf", "regnet_y_1_6gf", "RegNetY-1.6GF", True),
            ("swin_t", "swin_t", "Swin-T", False)]:
        layout = ", channels_last" if channels_last else ""
        out[key] = (f"{title}, batch 32{layout}", tv(name, channels_last),
                    lambda channels_last=channels_last: (images(32, channels_last),), _plain)
    out["unet"] = ("SD-1.5 UNet denoiser step, batch 2 x 64 x 64", unet, unet_inputs, _hf_output)
    return out
