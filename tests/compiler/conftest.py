import logging

import pytest

# make_fx logs every traced tensor to torch's structured-trace logger at DEBUG; pytest would print all of
# it with any failure.
logging.getLogger("torch.__trace").propagate = False


@pytest.fixture(autouse=True)
def _compiler_errors_raise(monkeypatch):
    """In these tests a compiler error fails the test instead of silently running eagerly."""
    from graphjit.compiler import config
    monkeypatch.setattr(config, "raise_errors", 1)
