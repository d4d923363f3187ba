"""Capture of torchvision models, side by side: graphjit's graphs and breaks next to torch.compile's, and
whether graphjit's captured graphs (run as captured) give eager's output. torchvision is not a dependency
of the project: run where it is installed (the GPU host has it).

  graphs:  graphs a counting backend was handed after --calls calls of compile(model) on fresh inputs of
           one shape (recompiles count).
  breaks:  graphjit: explain().graph_break_count on a fresh model; torch.compile: torch._dynamo.explain.
  = eager: the last call's output against eager's (atol = rtol = 1e-4).

    python benchmarks/vision_capture.py [--models efficientnet_b0,swin_t] [--size 224] [--calls 3]
"""
import argparse
import os
import platform
import sys
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import graphjit  # noqa: E402
from graphjit.testing import CompileCounter, assert_same  # noqa: E402

CLASSIFICATION = ["resnet18", "resnet50", "efficientnet_b0", "efficientnet_v2_s", "mobilenet_v2",
                  "mobilenet_v3_small", "convnext_tiny", "regnet_y_400mf", "densenet121", "shufflenet_v2_x0_5",
                  "squeezenet1_0", "mnasnet0_5", "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t", "googlenet",
                  "inception_v3", "alexnet", "vgg11"]
SEGMENTATION = ["deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50"]
DETECTION = ["fasterrcnn_mobilenet_v3_large_fpn", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]


def build(name, size):
    import torchvision.models as classification
    import torchvision.models.detection as detection
    import torchvision.models.segmentation as segmentation
    torch.manual_seed(0)
    if name in DETECTION:
        model = getattr(detection, name)(weights=None, weights_backbone=None, num_classes=5)
        inputs = ([torch.rand(3, size, size)],)
    elif name in SEGMENTATION:
        model = getattr(segmentation, name)(weights=None, weights_backbone=None, num_classes=5)
        inputs = (torch.randn(1, 3, size, size),)
    else:
        extra = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
        model = getattr(classification, name)(weights=None, **extra)
        inputs = (torch.randn(1, 3, 299 if name == "inception_v3" else size, 299 if name == "inception_v3" else size),)
    return model.eval(), inputs


def count_graphs(compile_fn, name, size, calls):
    """(graphs after `calls` calls, last output, eager's output, error or None)."""
    model, inputs = build(name, size)
    counter = CompileCounter()
    try:
        compiled = compile_fn(model, counter)
        with torch.no_grad():
            for _ in range(calls):
                out = compiled(*inputs)
            expected = model(*inputs)
    except Exception as e:  # noqa: BLE001 - a failing model is a row of the table
        return counter.frame_count, None, None, f"{type(e).__name__}: {e}".splitlines()[0][:100]
    return counter.frame_count, out, expected, None


def breaks_and_reason(name, size):
    model, inputs = build(name, size)
    graphjit.reset()
    with torch.no_grad():
        explained = graphjit.explain(model)(*inputs)
    reason = ""
    if explained.break_reasons:
        e = explained.break_reasons[0]
        where = "/".join(e.filename.replace(os.sep, "/").split("/")[-2:]) if e.filename else "?"
        reason = f"{e.reason.splitlines()[0][:80]} ({where}:{e.lineno})"
        if getattr(e, "fallback", None):
            reason += f"; frame ran eagerly: {e.fallback}"
    return explained.graph_break_count, reason


def torch_breaks(name, size):
    model, inputs = build(name, size)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            return torch._dynamo.explain(model)(*inputs).graph_break_count
    except Exception:  # noqa: BLE001 - best effort
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated torchvision names (default: all listed)")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or CLASSIFICATION + SEGMENTATION + DETECTION
    warnings.filterwarnings("ignore")
    import torchvision
    torch.set_num_threads(min(torch.get_num_threads(), 8))
    print(f"python {platform.python_version()}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{platform.machine()}, CPU, {torch.get_num_threads()} threads; counting backends, {args.calls} calls")
    print()
    print("| model | graphjit graphs | graphjit breaks | graphjit = eager | torch.compile graphs "
          "| torch.compile breaks | graphjit s | first break |")
    print("|---|---|---|---|---|---|---|---|")
    totals = {"at or under": 0, "over": 0}
    for name in names:
        graphjit.reset()
        start = time.perf_counter()
        gj_graphs, out, expected, gj_error = count_graphs(lambda m, c: graphjit.compile(m, backend=c), name,
                                                          args.size, args.calls)
        seconds = time.perf_counter() - start
        same = "error" if gj_error else "yes"
        if gj_error is None:
            try:
                assert_same(out, expected, atol=1e-4, rtol=1e-4)
            except AssertionError as e:
                same = "NO: " + str(e).splitlines()[0][:60]
        try:
            gj_breaks, reason = breaks_and_reason(name, args.size)
        except Exception as e:  # noqa: BLE001
            gj_breaks, reason = "error", f"{type(e).__name__}: {e}".splitlines()[0][:100]
        torch._dynamo.reset()
        tc_graphs, _, _, tc_error = count_graphs(lambda m, c: torch.compile(m, backend=c), name, args.size,
                                                 args.calls)
        tc_breaks = torch_breaks(name, args.size) if tc_error is None else "error"
        if gj_error:
            reason = gj_error + ("; " + reason if reason else "")
        totals["at or under" if isinstance(tc_graphs, int) and gj_graphs <= tc_graphs else "over"] += 1
        print(f"| {name} | {gj_graphs} | {gj_breaks} | {same} | {tc_graphs} | {tc_breaks} | {seconds:.1f} | "
              f"{reason.replace('|', '/')} |", flush=True)
    print()
    print(f"graphjit's graph count at or under torch.compile's: {totals['at or under']} of {len(names)}")


if __name__ == "__main__":
    main()
