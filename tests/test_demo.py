"""The README's main job, `./dev demo` (python -m graphjit.demo), on a small input: it runs end to end,
its compiled results equal eager's, through the default backend (graphjit's own compiler, which builds
fused kernels) and through backend="eager"."""
import re

from graphjit import demo


def test_demo_runs_and_compiled_equals_eager(capsys, tmp_path):
    report = str(tmp_path / "demo.html")
    demo.main(["--batch", "1", "--seq", "8", "--iters", "1", "--report", report])
    out = capsys.readouterr().out
    assert f"compile report written to {report}" in out
    with open(report) as f:
        page = f.read()
    # both models' graphs and their kernels
    assert "GPT2LMHeadModel.forward" in page and "GPT.forward" in page and "kernel0" in page
    assert "Compile time per stage" in page
    diffs = [float(d) for d in re.findall(r"max \|compiled - eager\| on the logits: (\S+)", out)]
    assert len(diffs) >= 3 and max(diffs) < 1e-3, out[-3000:]
    assert "backend 'graphjit'" in out and "backend 'eager'" in out
    assert re.search(r"(\d+) fused kernels", out) and int(re.search(r"(\d+) fused kernels", out).group(1)) > 0
