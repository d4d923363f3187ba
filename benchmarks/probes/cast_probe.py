"""How eager converts a Python float out of an integer dtype's range on each device, against graphjit's
compiled copy_ of it (GRAPHJIT_LOGS=output_code shows the generated code).
    python3 benchmarks/probes/cast_probe.py"""
import torch

import graphjit


def fill(x, small):
    return (x.clone().copy_(1e20), x.clone().copy_(-1e20), small.clone().copy_(300.7),
            small.clone().copy_(-2.5), x.clone().copy_(3e9).to(torch.int32) + 1)


for v in (1e20, -1e20, float("nan"), float("inf"), 3e9):
    row = [v]
    for dt in (torch.int64, torch.int32, torch.int8, torch.uint8):
        for dev in ("cpu", "cuda"):
            row.append((str(dt)[6:], dev, torch.zeros(3, dtype=dt, device=dev).copy_(v)[0].item(),
                        torch.tensor(v, dtype=torch.float64, device=dev).to(dt).item()))
    print(row)
for dev in ("cpu", "cuda"):
    args = (torch.arange(1, 7, device=dev), torch.arange(4, dtype=torch.int8, device=dev))
    graphjit.reset()
    got, expected = graphjit.compile(fill)(*args), fill(*args)
    for i, (g, e) in enumerate(zip(got, expected)):
        print(dev, i, "compiled", g.tolist(), "eager", e.tolist())
