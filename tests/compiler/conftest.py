import logging

import pytest
from graphjit import config as gj_config

# make_fx logs every traced tensor to torch's structured-trace logger at DEBUG; pytest would print all of
# it with any failure.
logging.getLogger("torch.__trace").propagate = False


@pytest.fixture(autouse=True)
def _compiler_errors_raise(monkeypatch):
    """In these tests a compiler error fails the test instead of silently running eagerly."""
    from graphjit import config
    monkeypatch.setattr(config, "raise_errors", 1)


def _triton_available():
    from graphjit.compiler.codegen import triton as triton_codegen
    return triton_codegen.triton_available()


@pytest.fixture(params=["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _triton_available(),
                                                                             reason="Triton is not installed"))])
def backend(request, monkeypatch):
    """The code generator a test's graphs go through: C++, or Triton under its interpreter (CPU tensors)."""
    from graphjit.compiler.codegen import triton as triton_codegen
    monkeypatch.setattr(gj_config, "triton_cpu", int(request.param == "triton"))
    return request.param
