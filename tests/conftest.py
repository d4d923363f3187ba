"""Suite-wide test setup: GPU tests skip without a GPU; `one_python` tests skip on all Pythons of the
test matrix but ONE_PYTHON; each test starts from a clean graphjit and torch's generator
seeded with 0.

Markers (`gpu`, `slow`, `one_python`) are declared in pyproject.toml under [tool.pytest.ini_options].
"""
import os
import sys

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
    every Python and needs no Triton 3.6: it keeps the one_python load of 3.12 from being the longest
    suite when ./dev test runs them side by side."""
    return pytest.mark.skipif(not runs_here(1), reason="runs on Python %d.%d only (conftest.other_python)" %
                              SPREAD[1 % len(SPREAD)])


def runs_here(n):
    """For a list of like tests spread over the test matrix (random fuzz programs: any of them may find a
    bug, none guards a known one): whether number n runs on this Python. Number n runs on
    SPREAD[n % len(SPREAD)]; a Python outside the matrix runs them all."""
    here = sys.version_info[:2]
    return here not in MATRIX or SPREAD[n % len(SPREAD)] == here


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)
    if sys.version_info[:2] != ONE_PYTHON:
        skip = pytest.mark.skip(reason="marked one_python: runs on Python %d.%d only" % ONE_PYTHON)
        for item in items:
            if item.get_closest_marker("one_python"):
                item.add_marker(skip)


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
