"""The graph-break issue's acceptance model: a forward that prints, logs and branches on a tensor's value
runs correctly when compiled, and explain() shows the graphs and each break with its line."""
import inspect
import io
import logging

import torch
import torch.nn as nn

import graphjit as gj
from graphjit.testing import CompileCounter

from graphjit.testing import assert_same

OUT = io.StringIO()
RECORDS = []


class _ListHandler(logging.Handler):
    def emit(self, record):
        RECORDS.append(record.getMessage())


LOG = logging.getLogger("graphjit.tests.noisy")
LOG.addHandler(_ListHandler())
LOG.setLevel(logging.INFO)
LOG.propagate = False


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.pos = nn.Linear(16, 4)
        self.neg = nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x):
        h = torch.relu(self.inp(x))
        print("hidden norm", float(h.norm()), file=OUT)          # BREAK print
        LOG.info("step %d", self.calls)
        self.calls += 1
        if h.mean() > 0.25:                                      # BREAK branch
            return self.pos(h).softmax(-1)
        return self.neg(h).tanh()


def _line(marker):
    lines, start = inspect.getsourcelines(Noisy.forward)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_noisy_model_matches_eager_and_explains_its_breaks():
    torch.manual_seed(0)
    eager, compiled_model = Noisy(), Noisy()
    compiled_model.load_state_dict(eager.state_dict())
    counter = CompileCounter()
    compiled = gj.compile(compiled_model, backend=counter)
    outputs = []
    for scale in (0.1, 10.0, 0.1, 10.0):          # both branches, twice each
        x = torch.randn(3, 8) * scale + (1.0 if scale > 1 else -1.0)
        OUT.seek(0), OUT.truncate()
        RECORDS.clear()
        expected = eager(x)
        eager_out, eager_logs = OUT.getvalue(), list(RECORDS)
        OUT.seek(0), OUT.truncate()
        RECORDS.clear()
        actual = compiled(x)
        assert_same(actual, expected, atol=1e-6, rtol=1e-6)
        assert (OUT.getvalue(), RECORDS) == (eager_out, eager_logs)
        outputs.append(actual)
    assert compiled_model.calls == eager.calls == 4
    assert counter.frame_count >= 3      # before the print, and each branch's resumed rest

    explained = gj.explain(Noisy())(torch.randn(3, 8))
    lines = {b.lineno for b in explained.break_reasons}
    assert _line("BREAK print") in lines and _line("BREAK branch") in lines
    assert explained.graph_count >= 2
    text = str(explained)
    assert "print(" in text and "h.mean() > 0.25" in text
