import logging

import pytest
from graphjit import config as gj_config

# make_fx logs every traced tensor to torch's structured-trace logger at DEBUG; pytest would print all of
# it with any failure.
logging.getLogger("torch.__trace").propagate = False


@pytest.fixture(autouse=True)
def _compiler_errors_raise(monkeypatch):
    """In these tests a compiler error fails the test instead of silently running eagerly."""
    monkeypatch.setattr(gj_config, "raise_errors", 1)


def _triton_available():
    from graphjit.compiler.codegen import triton as triton_codegen
    return triton_codegen.triton_available()


@pytest.fixture(params=["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _triton_available(),
                                                                             reason="Triton is not installed"))])
def backend(request, monkeypatch):
    """The code generator a test's graphs go through: C++, or Triton under its interpreter (CPU tensors)."""
    monkeypatch.setattr(gj_config, "triton_cpu", int(request.param == "triton"))
    return request.param


@pytest.fixture
def triton_interpreter(monkeypatch, tmp_path):
    """Graphs compile to Triton and run in its interpreter (CPU tensors), with a kernel and autotuning cache
    of the test's own (tmp_path, returned): choices a test stores or plants stay in it."""
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
    monkeypatch.setattr(gj_config, "cache_dir", str(tmp_path))
    return tmp_path
