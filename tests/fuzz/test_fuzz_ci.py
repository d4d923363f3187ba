"""A short seeded fuzz run: random tensor programs through graphjit's compiler (the C++ path, and the Triton
path in Triton's interpreter where triton is installed) and random Python programs through capture only
(backend="eager"), each against eager PyTorch / plain Python.

A failing seed prints its reproducer (shrunk a little; saved under pytest's tmp dir) and the command that
reruns it. Longer runs by hand (shrunk reproducers go to /tmp/fuzz_out):

    python -m tests.fuzz --seed 1 --minutes 30 [--mode python] [--triton]

FOUND holds the programs longer runs found failing, one or two per cause: they run here from then on, as
regression tests of their fixes. KNOWN_OPEN marks the seeds that fail on a bug still open (xfail, not
strict: an XPASS means the bug is gone and the entry can go). A seed's program changes when the generator
does: after a change to generator.py, ops.py or pyprog.py, rerun the FOUND seeds' causes by their own
tests (each cause has one in tests/compiler or tests/capture) rather than trusting the seeds.
"""
import functools

import pytest

from . import generator, pyprog, shrink
from .runner import FAILURES, describe
from .worker import Worker

# Programs longer runs found failing, and what they found (shrunk reproducers: python -m tests.fuzz
# --seed 0 --start SEED --count 1 [--mode python | --triton]).
FOUND = {
}
# Seeds failing on a bug still open.
KNOWN_OPEN = {
}


def _plus_found(mode, seeds):
    return list(seeds) + [s for m, s in FOUND if m == mode]


TENSOR_SEEDS = _plus_found("tensor", range(100))
PYTHON_SEEDS = _plus_found("python", range(200))
TRITON_SEEDS = _plus_found("triton", range(30))    # the Triton path in Triton's interpreter, where installed


def _seeds(mode, seeds):
    return [pytest.param(s, marks=pytest.mark.xfail(reason=KNOWN_OPEN[(mode, s)], strict=False))
            if (mode, s) in KNOWN_OPEN else s for s in seeds]


@pytest.fixture(scope="module")
def worker():
    with Worker() as w:
        yield w


@pytest.fixture(scope="module")
def triton_worker():
    pytest.importorskip("triton")
    with Worker(triton=True) as w:
        yield w


def _check(key, prog, backend, worker, tmp_path):
    run = functools.partial(worker.run, backend=backend, timeout=120)
    res = run(prog.source())
    if res["status"] not in FAILURES and res["status"] != "harness_error":
        return
    small, small_res = prog, res
    if res["status"] not in ("hang", "harness_error") and key not in KNOWN_OPEN:
        small, small_res = shrink.shrink(prog, res, run, budget=20, seconds=60)
    path = shrink.save(small, small_res, str(tmp_path / f"{prog.mode}_{prog.seed}_{small_res['status']}.py"),
                       original=prog)
    pytest.fail(f"{prog.mode} program, seed {prog.seed}: {describe(res)}\n\nreproducer ({path}; rerun from the "
                f"project root: python {path}):\n\n{open(path).read()}", pytrace=False)


@pytest.mark.parametrize("seed", _seeds("tensor", TENSOR_SEEDS))
def test_tensor_program(seed, worker, tmp_path):
    _check(("tensor", seed), generator.generate(seed), "graphjit", worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("triton", TRITON_SEEDS))
def test_triton_program(seed, triton_worker, tmp_path):
    _check(("triton", seed), generator.generate(seed, triton=True), "graphjit", triton_worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("python", PYTHON_SEEDS))
def test_python_program(seed, worker, tmp_path):
    _check(("python", seed), pyprog.generate(seed), "eager", worker, tmp_path)
