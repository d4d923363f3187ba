"""Known capture gaps of the model suite: which zoo entries (ZOO and WIDE) graphjit can't capture
yet, and why.

Each reason: the Unsupported message (or exception), the user line that reaches it (file:line), and what
comes after it (found by working around the gap outside the suite), so the list shows all the work. The
tests mark these entries xfail(strict=True): fix the gap, the test XPASSes and fails, remove the entry.
"""
import pytest

from .zoo import FULL, missing

HF = "transformers/"   # site-packages/transformers/..., shortened in the reasons below

OUTPUT_CAPTURE = (
    "Breaks on the first call, results equal to eager: with output_attentions/output_hidden_states requested,"
    " transformers installs capture hooks on submodules on the first call, under a threading.Lock ('C method"
    f" lock.__enter__ on Object(lock)', {HF}utils/output_capturing.py:239) and through weakref.ref"
    " ('ReferenceType defines __new__'); those frames run eagerly (their calls are still compiled). Later"
    " calls trace the hooks inline: one graph, so compile(model) settles at 2 graphs. torch.compile: 1 graph.")

# ---- the wider zoo (zoo.WIDE). Graph counts: graphjit's explain() on the first call, then compile(model) after
# 4 calls; torch.compile's with a counting backend (fullgraph=False). Every one of these matches eager with its
# breaks (test_gap_models_match_eager_with_breaks), and through graphjit's compiler too.

GAPS = {
    "bert-all-outputs": OUTPUT_CAPTURE,
    "segformer": (
        "SegformerForSemanticSegmentation always asks its encoder for output_hidden_states=True, so the first call"
        " installs transformers' output-capture hooks, as bert-all-outputs does ('C method lock.__enter__ on"
        f" Object(lock)', {HF}utils/output_capturing.py:239; 'ReferenceType defines __new__', torch/utils/hooks.py:25)."
        " 2 graphs, 8 breaks on the first call; 3 graphs after 4 calls. torch.compile: 2 graphs (1 break, the"
        " lock)."),
    "llava": (
        "6 graphs, 22 breaks on the first call; 7 graphs after 4 calls (torch.compile: 7 graphs, 6 breaks: the same"
        f" count). Breaks: inspect.Signature.bind in {HF}utils/output_capturing.py:298 ('C method mappingproxy.values"
        " on Object(mappingproxy)', inspect.py:3081; mappingproxy.items, inspect.py:2903); the output-capture hooks"
        " installed on the vision tower on the first call (the lock and weakref.ref of bert-all-outputs: LLaVA"
        " reads a hidden layer's output); 'mutating the dict contents of a BaseModelOutputWithPooling from outside"
        f" the frame' ({HF}utils/generic.py:590); 'formatting Tensor(sum_1) into a string' (the f-string message of"
        f" torch_compilable_check, {HF}models/llava/modeling_llava.py:189); 'Tensor.item() needs the tensor's data'"
        " (torch._check_tensor_all, torch/__init__.py:1891: torch.compile breaks there too); 'dict.update() from a"
        f" mapping that is not a dict: Object(BaseModelOutputWithPast)' ({HF}models/llava/modeling_llava.py:246,"
        " LlavaModelOutputWithPast(**outputs, ...))."),
    "longformer": (
        f"'Tensor.item() needs the tensor's data' at {HF}models/longformer/modeling_longformer.py:1175"
        " (is_global_attn = is_index_global_attn.flatten().any().item(): whether any token attends globally picks"
        " the attention path). 4 graphs, 2 breaks on the first call, all there; 4 graphs after 4 calls."
        " torch.compile: 4 graphs (3 breaks, the same .item() with capture_scalar_outputs=False)."),
    "led": (
        f"'Tensor.item() needs the tensor's data' at {HF}models/led/modeling_led.py:1446, the encoder's"
        " is_global_attn of longformer's sliding-window attention. 4 graphs, 5 breaks on the first call (the one"
        " .item(), seen from each frame it passes through), all there; 4 graphs after 4 calls. torch.compile: 4"
        " graphs (3 breaks, the same .item())."),
    "switch-transformers": (
        "The experts loop over a data-dependent set of tokens ('nonzero has a data-dependent output',"
        f" {HF}models/switch_transformers/modeling_switch_transformers.py:174; 'where has a data-dependent output',"
        " :176), inside a loop: those frames run eagerly and their calls are compiled, as torch.compile does. (The"
        " router's `self.classifier = self.classifier.to(self.dtype)` is traced: .to() changes nothing, and the"
        " write-backs are no-ops; torch's own one-op modules the eager frames call, nn.Embedding and nn.Dropout,"
        " run eagerly, as torch.compile leaves them.) 21 graphs, 26 breaks on the first call; 21 graphs after 4"
        " calls. torch.compile: 22 graphs after 4 calls (its breaks are the nonzero at :174)."),
}

ONE_GRAPH_GAPS = dict(GAPS)

# Entries whose results differ from eager even with graph breaks allowed (a miscompile, not a missing feature).
WRONG_WITH_BREAKS = {}

# Graphs after 4 calls where more than one is right. bert-train, vit-train: the first call with labels sets
# config.problem_type (transformers/models/bert/modeling_bert.py:1119, transformers/loss/loss_utils.py:98),
# so the second call takes the other branch and its guard on `config.problem_type is None` fails: one
# legitimate recompile (torch.compile recompiles there too).
# levit: in eval, LevitAttention caches its gathered attention biases in a dict on the module on the first
# call (transformers/models/levit/modeling_levit.py:192), so the second call reads the cache: one recompile
# (torch.compile: 2 graphs too).
EXPECTED_GRAPHS = {"bert-train": 2, "vit-train": 2, "levit": 2}

# Gaps of the gradient test only (entries whose forward captures).
BACKWARD_GAPS = {}

# Gaps of graphjit's compiler on the wider zoo (tests/models/test_zoo_wide_compiled.py): a graph that fails to
# compile runs eagerly (results still eager's), which that test counts as a failure.
COMPILED_GAPS = {}

# generate() through a compiled forward (tests/models/test_generate.py), by zoo entry.
GENERATE_GAPS = {}

def params(names, gaps):
    """pytest params of zoo entries, xfail(strict=True) with the reason where `gaps` names the entry."""
    return [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=gaps[name])]
                         if name in gaps else []) for name in names]


def skip_if_missing(name):
    """pytest.skip, with the reason, an entry whose transformers class the installed version lacks."""
    reason = missing(FULL[name])
    if reason is not None:
        pytest.skip(reason)
