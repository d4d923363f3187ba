"""Capture of timm's and diffusers' models, side by side with torch.compile: the rows of benchmarks/capture.py
(graphs, breaks, output equal to eager, first-call seconds with counting backends) for timm image models
built with random weights (`timm.create_model(name, pretrained=False)`) and diffusers denoisers built from
small configs, in eval mode (and train mode with --train).

Needs timm (with torchvision) and diffusers, which graphjit's test environment does not install, e.g.:

    python -m pip install --no-deps --target /tmp/extra timm==1.0.31 diffusers==0.42.1 torchvision==<torch's> \
        pillow requests
    PYTHONPATH=/tmp/extra ./dev python 3.12 benchmarks/capture_libs.py [--models resnet50,unet] [--train]
"""
import argparse
import os
import platform
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import capture  # noqa: E402  (benchmarks/capture.py: one row's measurement and its table)
from tests.models.zoo import Spec  # noqa: E402

TIMM = ["resnet50", "resnext50_32x4d", "efficientnet_b0", "mobilenetv3_large_100", "regnety_016",
        "convnext_tiny", "densenet121", "inception_v3", "vit_base_patch16_224", "deit_small_patch16_224",
        "swin_tiny_patch4_window7_224", "beit_base_patch16_224", "levit_128", "mixer_b16_224",
        "coatnet_0_rw_224", "maxvit_tiny_rw_224", "efficientformer_l1", "poolformer_s12", "ghostnet_100",
        "dla34", "cspdarknet53", "xcit_tiny_12_p16_224", "eva02_tiny_patch14_224", "fastvit_t8",
        "mobilevit_s", "edgenext_small", "tresnet_m", "hrnet_w18_small", "nfnet_l0", "rexnet_100"]


def timm_spec(name, train):
    import timm

    def factory():
        model = timm.create_model(name, pretrained=False)
        return model.train() if train else model.eval()
    size = 299 if name.startswith("inception") else 224
    return Spec(factory, lambda: {"x": torch.randn(2, 3, size, size)})


def unet_spec(train):
    from diffusers import UNet2DConditionModel

    def factory():
        model = UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32, attention_head_dim=8,
            norm_num_groups=8)
        return model.train() if train else model.eval()
    return Spec(factory, lambda: {"sample": torch.randn(2, 4, 16, 16), "timestep": torch.tensor([10, 500]),
                                  "encoder_hidden_states": torch.randn(2, 7, 32)})


def dit_spec(train):
    from diffusers import DiTTransformer2DModel

    def factory():
        model = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                                      num_layers=2, sample_size=8, patch_size=2, norm_num_groups=8,
                                      num_embeds_ada_norm=1000)
        return model.train() if train else model.eval()
    return Spec(factory, lambda: {"hidden_states": torch.randn(2, 4, 8, 8), "timestep": torch.tensor([10, 500]),
                                  "class_labels": torch.tensor([1, 7])})


def sd3_spec(train):
    from diffusers import SD3Transformer2DModel

    def factory():
        model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                                      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                      caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
                                      pos_embed_max_size=16)
        return model.train() if train else model.eval()
    return Spec(factory, lambda: {"hidden_states": torch.randn(2, 4, 8, 8),
                                  "encoder_hidden_states": torch.randn(2, 5, 32),
                                  "pooled_projections": torch.randn(2, 16), "timestep": torch.tensor([10, 500])})


DIFFUSERS = {"unet2d-condition": unet_spec, "dit": dit_spec, "sd3-transformer": sd3_spec}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated timm names and " + ", ".join(DIFFUSERS))
    parser.add_argument("--train", action="store_true", help="train mode (dropout, batch statistics)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-dynamo-explain", action="store_true")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or TIMM + list(DIFFUSERS)
    warnings.filterwarnings("ignore")
    import diffusers
    import timm
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    capture.warm_up()
    print(f"python {platform.python_version()}, torch {torch.__version__}, timm {timm.__version__}, diffusers "
          f"{diffusers.__version__}, {'train' if args.train else 'eval'} mode; counting backends")
    print()
    print("| model | graphjit graphs | graphjit breaks | graphjit = eager | torch.compile graphs "
          "| torch.compile breaks | graphjit first call s | torch.compile first call s "
          "| graphjit: first break or error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        try:
            spec = DIFFUSERS[name](args.train) if name in DIFFUSERS else timm_spec(name, args.train)
            if args.train:
                spec = Spec(spec.factory, spec.inputs)
            row = capture.measure(spec, not args.no_dynamo_explain, args.repeat)
        except Exception as e:  # noqa: BLE001 - a model that does not build is a row, not the end of the run
            print(f"| {name} | not built: {type(e).__name__}: {str(e).splitlines()[0][:100]} | | | | | | | |")
            continue
        gj_graphs, gj_breaks, same, tc_graphs, tc_breaks, gj_s, tc_s, note = row
        print(f"| {name} | {gj_graphs} | {gj_breaks} | {same} | {tc_graphs} | {tc_breaks} | {gj_s:.2f} "
              f"| {tc_s:.2f} | {note} |", flush=True)
    print()
    print("breaks with *: graphs - 1 (torch._dynamo.explain not run or failed).")


if __name__ == "__main__":
    main()
