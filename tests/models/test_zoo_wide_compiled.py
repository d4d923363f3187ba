"""The wider zoo (zoo.WIDE) through graphjit's own compiler, in inference, with GRAPHJIT_FULL_ZOO=1 only (the
default run has no cases here): every graph compiles (none runs eagerly) and the outputs match eager over three
calls with fresh inputs, as tests/compiler/test_zoo_compiled.py checks ZOO's entries (C++ kernels). Entries
that break (gaps.GAPS) compile each of their graphs. Fallbacks (ops run by ATen, not lowered) are not checked here;
the last full run's (Python 3.11, torch 2.13): MoE entries aten.histc/index_put/sort/topk and the
transformers.grouped_mm_fallback custom op, longt5 aten.max.dim, beit, mobilevit and segformer
aten.upsample_bilinear2d, wav2vec2 aten.linalg_vector_norm/native_group_norm, speech2text
aten.flip/index_put/index_select, siglip aten.linalg_vector_norm."""
import pytest

import graphjit
from graphjit import config as gj_config
from graphjit.backends.registry import graphjit_backend
from graphjit.testing import CompileCounter

from .gaps import skip_if_missing
from .zoo import WIDE, build, full_zoo, matches_eager

EVAL = [name for name, spec in WIDE.items() if not spec.train] if full_zoo() else [
    pytest.param(None, id="wide-zoo", marks=pytest.mark.skip(reason="the wider zoo through the compiler runs with"
                                                                  " GRAPHJIT_FULL_ZOO=1"))]


@pytest.mark.parametrize("name", EVAL)
def test_wide_zoo_compiled_cpp(name, monkeypatch):
    skip_if_missing(name)
    monkeypatch.setattr(gj_config, "triton_cpu", 0)
    counter = CompileCounter(graphjit_backend)
    model, _ = build(WIDE[name])
    matches_eager(model, graphjit.compile(model, backend=counter), WIDE[name], rtol=1e-4, atol=1e-4)
    assert counter.compiled and all(hasattr(fn, "items") for fn in counter.compiled_functions()), "a graph ran eagerly"
