"""The model zoo (tests/models/zoo.py: transformers architectures from small random configs, a ResNet and a
ViT in plain torch) through graphjit's own compiler, in inference: every graph compiles (none runs
eagerly), outputs match eager over three calls with fresh inputs, and the ATen fallbacks are only the
known ones. C++ kernels on every entry; Triton's interpreter on a few (it is slow)."""
import pytest

import graphjit
from graphjit.backends.registry import graphjit_backend
from graphjit.compiler.codegen import triton as triton_codegen
from graphjit import config as gj_config
from graphjit.testing import CompileCounter

from tests.models.zoo import ZOO, build, matches_eager, missing

# ops still without a lowering that the zoo reaches: a new fallback fails the test (lower it, or add it here)
KNOWN_FALLBACKS = set()
EVAL = [name for name, spec in ZOO.items() if not spec.train and name != "bert-all-outputs"]
TRITON = ["gpt2", "llama", "bert", "vit", "resnet-channels-last", "clip-text"]


def check(name):
    spec = ZOO[name]
    reason = missing(spec)
    if reason:
        pytest.skip(reason)
    counter = CompileCounter(graphjit_backend)
    model, _ = build(spec)
    model.eval()
    matches_eager(model, graphjit.compile(model, backend=counter), spec, rtol=1e-4, atol=1e-4)
    assert counter.compiled and all(hasattr(fn, "items") for fn in counter.compiled_functions()), "a graph ran eagerly"
    fallbacks = {target for fn in counter.compiled_functions() for target, _ in fn.graph.fallbacks}
    assert fallbacks <= KNOWN_FALLBACKS, fallbacks - KNOWN_FALLBACKS


@pytest.mark.parametrize("name", EVAL)
def test_zoo_compiled_cpp(name, monkeypatch):
    monkeypatch.setattr(gj_config, "triton_cpu", 0)
    check(name)


# one_python: whole models in Triton's interpreter take tens of seconds. The Triton code of each op is
# checked on every Python with Triton (test_triton.py and the `backend` fixture's tests), these models'
# graphs from every torch version compile in test_zoo_compiled_cpp, and the Triton codegen between them
# is plain Python: on a second Python these would rerun the same code on the same kernels.
@pytest.mark.one_python
@pytest.mark.parametrize("name", TRITON)
def test_zoo_compiled_triton_interpreter(name, monkeypatch):
    if not triton_codegen.triton_available():
        pytest.skip("Triton is not installed")
    monkeypatch.setattr(gj_config, "triton_cpu", 1)
    check(name)
