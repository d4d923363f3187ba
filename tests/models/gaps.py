"""Known capture gaps of the model suite: which zoo entries graphjit can't capture yet, and why.

Each reason: the Unsupported message (or exception), the user line that reaches it (file:line), and what
comes after it (found by working around the gap outside the suite), so the list shows all the work. The
tests mark these entries xfail(strict=True): fix the gap, the test XPASSes and fails, remove the entry.
"""
import pytest

from .zoo import ZOO, missing

HF = "transformers/"   # site-packages/transformers/..., shortened in the reasons below

OUTPUT_CAPTURE = (
    "Breaks on the first call, results equal to eager: with output_attentions/output_hidden_states requested,"
    " transformers installs capture hooks on submodules on the first call, under a threading.Lock ('C method"
    f" lock.__enter__ on Object(lock)', {HF}utils/output_capturing.py:239) and through weakref.ref"
    " ('ReferenceType defines __new__'); those frames run eagerly (their calls are still compiled). Later"
    " calls trace the hooks inline: one graph, so compile(model) settles at 2 graphs. torch.compile: 1 graph.")

GAPS = {"bert-all-outputs": OUTPUT_CAPTURE}

ONE_GRAPH_GAPS = dict(GAPS)

# Entries whose results differ from eager even with graph breaks allowed (a miscompile, not a missing feature).
WRONG_WITH_BREAKS = {}

# Graphs after 4 calls where more than one is right. bert-train, vit-train: the first call with labels sets
# config.problem_type (transformers/models/bert/modeling_bert.py:1119, transformers/loss/loss_utils.py:98),
# so the second call takes the other branch and its guard on `config.problem_type is None` fails: one
# legitimate recompile (torch.compile recompiles there too).
EXPECTED_GRAPHS = {"bert-train": 2, "vit-train": 2}

# Gaps of the gradient test only (entries whose forward captures).
BACKWARD_GAPS = {}

# generate() through a compiled forward (tests/models/test_generate.py), by zoo entry.
GENERATE_GAPS = {}

def params(names, gaps):
    """pytest params of zoo entries, xfail(strict=True) with the reason where `gaps` names the entry."""
    return [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=gaps[name])]
                         if name in gaps else []) for name in names]


def skip_if_missing(name):
    """pytest.skip, with the reason, an entry whose transformers class the installed version lacks."""
    reason = missing(ZOO[name])
    if reason is not None:
        pytest.skip(reason)
