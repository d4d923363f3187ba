"""Suite-wide test setup: GPU tests skip without a GPU; each test starts from a clean graphjit.

Markers (`gpu`, `slow`) are declared in pyproject.toml under [tool.pytest.ini_options].
"""
import sys

import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)


def _cuda_available():
    import torch

    return torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _fresh_graphjit():
    # Only if a test module already imported graphjit: conftest never imports it itself,
    # so a broken graphjit shows up in the tests that use it, not as a suite-wide error.
    reset = getattr(sys.modules.get("graphjit"), "reset", None)
    if callable(reset):
        reset()
    yield
