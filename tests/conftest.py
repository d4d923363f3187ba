"""Suite-wide test setup: GPU tests skip without a GPU; `one_python` tests skip on all Pythons of the
test matrix but ONE_PYTHON; each test starts from a clean graphjit and torch's generator
seeded with 0.

Markers (`gpu`, `slow`, `one_python`) are declared in pyproject.toml under [tool.pytest.ini_options].
"""
import os
import re
import sys
import zlib

import pytest

# The Python of the test matrix (./dev test: 3.11, 3.12, 3.13) that runs the tests marked one_python: heavy
# tests whose result does not depend on the Python or torch version (each use says why). 3.12 has Triton,
# which most of them need.
ONE_PYTHON = (3, 12)
MATRIX = ((3, 11), (3, 12), (3, 13))
# The Pythons that like tests are spread over (runs_here): those without the one_python load, so that the
# suites, run side by side, end at about the same time.
SPREAD = tuple(v for v in MATRIX if v != ONE_PYTHON)


def other_python():
    """A mark: the test runs on one Python of SPREAD only (3.13), for a heavy test that is the same on
    every Python: it keeps the one_python load of 3.12 from being the longest suite when ./dev test runs
    them side by side."""
    return pytest.mark.other_python


def runs_here(n):
    """For a list of like tests spread over the test matrix (random fuzz programs: any of them may find a
    bug, none guards a known one): whether number n runs on this Python. Number n runs on
    SPREAD[n % len(SPREAD)]; a Python outside the matrix runs them all."""
    here = sys.version_info[:2]
    return here not in MATRIX or SPREAD[n % len(SPREAD)] == here


# ./dev test runs the matrix's suites side by side and names their Pythons in GRAPHJIT_TEST_SPREAD ("3.11
# 3.12 3.13"). Then each test under SPREAD_DIRS runs on one of them, chosen by a hash of its id (in the
# shares WEIGHTS gives), instead of on all: the work of the compiler, the backends and the command line is
# the same on every Python, while capture, which differs, is tested on all. Tests that need Triton go to the Pythons whose torch has it (WITH_TRITON: the CUDA
# builds ./dev pins); tests marked every_python, one_python or other_python keep their own rule. A test that
# skips on the Python it was given (other than for lack of a GPU) fails, naming the mark it needs, so that
# no test is left to a Python that cannot run it.
SPREAD_DIRS = ("tests/compiler/", "tests/backends/", "tests/test_report.py", "tests/test_demo.py")
WITH_TRITON = ((3, 12), (3, 13))
# shares of the spread tests without Triton: 3.12 carries the one_python load and half the Triton tests
WEIGHTS = {(3, 11): 3, (3, 12): 1, (3, 13): 2}
_TRITON_IDS = re.compile(r"triton|interpret|cuda|gpu", re.IGNORECASE)
_SPREAD_KEY = pytest.StashKey()


def spread_pythons():
    """The Pythons the spread is over, or () when this suite runs alone (a single Python's run keeps all)."""
    vers = tuple(tuple(int(p) for p in v.split(".")) for v in os.environ.get("GRAPHJIT_TEST_SPREAD", "").split())
    return vers if len(vers) > 1 and sys.version_info[:2] in vers else ()


def _spread_to(item, pythons):
    """The Python that runs `item`, or None where it is not spread."""
    if not item.nodeid.startswith(SPREAD_DIRS) or any(
            item.get_closest_marker(m) for m in ("every_python", "one_python", "other_python", "gpu")):
        return None
    if _needs_triton(item):
        pythons = tuple(v for v in pythons if v in WITH_TRITON) or pythons
    else:
        pythons = tuple(v for v in pythons for _ in range(WEIGHTS.get(v, 1)))
    return pythons[zlib.crc32(item.nodeid.encode()) % len(pythons)]


def _needs_triton(item):
    """Marked triton; named for Triton, its interpreter or a GPU (the test or a parameter); skipped without
    Triton (a skipif saying so); or using a fixture of Triton's."""
    if item.get_closest_marker("triton") or _TRITON_IDS.search(item.nodeid.partition("::")[2]):
        return True
    if any("riton" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
        return True
    return any("triton" in name for name in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    here = sys.version_info[:2]
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)
    if here != ONE_PYTHON:
        skip = pytest.mark.skip(reason="marked one_python: runs on Python %d.%d only" % ONE_PYTHON)
        for item in items:
            if item.get_closest_marker("one_python"):
                item.add_marker(skip)
    if here != SPREAD[1 % len(SPREAD)]:
        skip = pytest.mark.skip(reason="runs on Python %d.%d only (conftest.other_python)" % SPREAD[1 % len(SPREAD)])
        for item in items:
            if item.get_closest_marker("other_python"):
                item.add_marker(skip)
    pythons = spread_pythons()
    for item in items if pythons else ():
        target = _spread_to(item, pythons)
        if target is None:
            continue
        if target == here:
            item.stash[_SPREAD_KEY] = True
        else:
            item.add_marker(pytest.mark.skip(reason="spread over the test matrix (conftest.SPREAD_DIRS): "
                                                    "Python %d.%d runs it" % target))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.stash.get(_SPREAD_KEY, False) and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if "CUDA" not in reason and "GPU" not in reason:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} skipped on Python %d.%d, the one conftest's spread gave it "
                               f"({reason}); no other Python runs it. Mark it `triton` if it needs Triton, or "
                               "`every_python` if its skip depends on the Python's torch." % sys.version_info[:2])


def _cuda_available():
    import torch

    return torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _fresh_graphjit():
    # Only if a test module already imported graphjit: conftest never imports it itself,
    # so a broken graphjit shows up in the tests that use it, not as a suite-wide error.
    module = sys.modules.get("graphjit")
    reset = getattr(module, "reset", None)
    if callable(reset):
        reset()
        # a fresh entry whose guards fail on its own call is a bug the suite must see, not an eager call
        module.config.strict_fresh_guards = True
        # tests read what a compile made (kernels, schedules): every graph compiles, none comes from the
        # on-disk cache of an earlier run (tests/compiler/test_graph_cache.py turns it on in a folder of its
        # own; GRAPHJIT_TEST_GRAPH_CACHE=1 runs the suite with it)
        module.config.graph_cache = int(bool(os.environ.get("GRAPHJIT_TEST_GRAPH_CACHE")))
    # inputs drawn from torch's global generator are the same whatever ran before, so a test's result does
    # not depend on the order tests run in (nor on which tests were selected)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
    yield
