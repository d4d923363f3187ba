"""The benchmark scripts that have a CPU mode still run (they are not part of the suite's claims, but a
script that rotted would be found only on the next GPU session): cold_compile.py --smoke (tiny GPT-2,
Triton's interpreter), triton_compile.py (a zoo model's kernels compiled for an sm_90 target) and
warm_start.py --smoke (graphjit's cold and warm processes, a tiny GPT-2 on the CPU)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GRAPHJIT_CACHE_DIR=str(tmp_path / "graphjit"), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# one_python: checks that the script still runs (a tiny GPT-2 through the Triton interpreter, ~15 s); the
# script's code is the same on every Python, and the model's graphs are tested in tests/compiler.
@pytest.mark.one_python
def test_cold_compile_smoke(tmp_path):
    pytest.importorskip("triton")
    pytest.importorskip("transformers")
    out = run(["benchmarks/cold_compile.py", "--smoke", "--only", "gpt2_decode", "--contenders", "graphjit",
               "--warm", "none", "--out", str(tmp_path)], tmp_path)
    row = [line for line in out.splitlines() if line.startswith("| gpt2_decode | graphjit |")]
    assert row and re.search(r"\| \d+\.\d\d \|", row[0]), out[-2000:]
    assert "decompose" in row[0], out[-3000:]          # the graph went through graphjit's Triton path


@pytest.mark.one_python     # Triton's sm90 compile of the same kernels on every Python (~10 s)
def test_triton_compile_for_sm90(tmp_path):
    pytest.importorskip("triton")
    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no NVIDIA backend in this Triton ({e})")
    out = run(["benchmarks/triton_compile.py", "--model", "resnet", "--threads", "1", "--prelude", "gpu"], tmp_path)
    assert re.search(r"\| resnet \| gpu \| 1 \| \d+ \| \d+\.\d\d \|", out), out[-2000:]


@pytest.mark.one_python     # two fresh processes, a tiny GPT-2 on the CPU (~10 s)
def test_warm_start_smoke(tmp_path):
    pytest.importorskip("transformers")
    out = run(["benchmarks/warm_start.py", "--smoke", "--contenders", "graphjit"], tmp_path)
    row = [line for line in out.splitlines() if line.startswith("| GPT-2")]
    # cold s, warm s, and the warm first call's capture / backend / after split
    assert row and re.fullmatch(r"\| GPT-2 [^|]+ \| \d+\.\d\d \| \d+\.\d\d \| \d+\.\d\d / \d+\.\d\d / -?\d+\.\d\d \|",
                                row[0]), out[-2000:]
