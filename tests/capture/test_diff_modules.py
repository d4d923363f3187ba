"""nn.Modules: torch's layers, containers (Sequential, ModuleList, ModuleDict), custom modules with
submodules, config-driven control flow, shared submodules, parameters and buffers used directly, training
flags; compiled whole (graphjit.compile(module)) or through a bound forward. Each case compares outputs and
state_dicts (BatchNorm in train mode updates buffers) against an identical eager copy.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from graphjit.testing import check, check_module
from .harness import gj, r

from graphjit.testing import CompileCounter


class ModuleCase:
    def __init__(self, name, factory, make_args, **options):
        self.name, self.factory, self.make_args, self.options = name, factory, make_args, options

    def run(self):
        return check_module(self.factory, self.make_args, **self.options)


MODULE_CASES = []


def module_case(make_args, name=None, **options):
    def register(factory):
        MODULE_CASES.append(ModuleCase(name or factory.__name__, factory, make_args, **options))
        return factory
    return register


def evaluated(module):
    return module.eval()


# ------------------------------------------------------------------------------------ torch layers

@module_case(lambda: (r(2, 5, 8),))
def linear():
    return nn.Linear(8, 4)


@module_case(lambda: (r(2, 5, 8),))
def linear_no_bias():
    return nn.Linear(8, 4, bias=False)


@module_case(lambda: (r(2, 3, 8, 8),), atol=1e-5, rtol=1e-5)
def conv2d():
    return nn.Conv2d(3, 6, 3, padding=1, stride=2)


@module_case(lambda: (r(2, 5, 8),))
def layer_norm():
    return nn.LayerNorm(8)


@module_case(lambda: (torch.randint(0, 20, (2, 7)),))
def embedding():
    return nn.Embedding(20, 6, padding_idx=0)


@module_case(lambda: (r(4, 3, 5, 5),))
def batchnorm2d_eval():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.uniform_()
    bn.running_var.uniform_(0.5, 2)
    return bn.eval()


@module_case(lambda: (r(4, 3, 5, 5),), atol=1e-6, rtol=1e-5)
def batchnorm2d_train_updates_buffers():
    return nn.BatchNorm2d(3).train()


@module_case(lambda: (r(4, 8),))
def dropout_eval():
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU()).eval()


@module_case(lambda: (r(4, 8),))
def dropout_p0_train():
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.0)).train()


@module_case(lambda: (r(4, 8),))
def sequential_activations():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2), nn.SiLU(),
                         nn.Tanh(), nn.Softmax(dim=-1))


@module_case(lambda: (r(4, 8),))
def sequential_nested_and_flatten():
    return nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Identity(), nn.Unflatten(1, (2, 4)),
                         nn.Flatten())


@module_case(lambda: (r(2, 3, 8, 8),), atol=1e-5, rtol=1e-5)
def small_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()


# ------------------------------------------------------------------------------------ containers

class ModuleListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return x


class ModuleListIndex(ModuleListLoop):
    def forward(self, x):
        return self.layers[0](x) + self.layers[-1](x) * len(self.layers)


class ModuleListEnumerateZip(ModuleListLoop):
    def __init__(self):
        super().__init__()
        self.norms = nn.ModuleList([nn.LayerNorm(6) for _ in range(3)])

    def forward(self, x):
        outs = []
        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            x = norm(layer(x)) * (i + 1)
            outs.append(x)
        return outs


class ModuleListSlice(ModuleListLoop):
    def forward(self, x):
        for layer in self.layers[1:]:
            x = layer(x)
        for layer in reversed(self.layers[:1]):
            x = layer(x)
        return x


class ModuleDictModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(6, 2), "reg": nn.Linear(6, 1)})

    def forward(self, x):
        out = {name: head(x) for name, head in self.heads.items()}
        out["both"] = self.heads["cls"](x).sum(-1, keepdim=True) + self.heads["reg"](x)
        return out, list(self.heads.keys()), "cls" in self.heads


class ParamContainers(nn.Module):
    def __init__(self):
        super().__init__()
        self.plist = nn.ParameterList([nn.Parameter(torch.randn(6)) for _ in range(2)])
        self.pdict = nn.ParameterDict({"scale": nn.Parameter(torch.ones(6))})

    def forward(self, x):
        for p in self.plist:
            x = x + p
        return x * self.pdict["scale"]


for _cls in (ModuleListLoop, ModuleListIndex, ModuleListEnumerateZip, ModuleListSlice, ModuleDictModel,
             ParamContainers):
    MODULE_CASES.append(ModuleCase(_cls.__name__, _cls, lambda: (r(3, 6),)))


# ------------------------------------------------------------------------------------ custom modules

class Attention(nn.Module):
    def __init__(self, dim=16, heads=2, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg.dim, cfg.heads)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim, bias=cfg.use_bias), nn.GELU(),
                                 nn.Linear(4 * cfg.dim, cfg.dim, bias=cfg.use_bias))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        if self.cfg.parallel_mlp:
            return x + self.mlp(self.ln2(x))
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.block, cfg.dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.wte.weight  # tied weights

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _cfg(**overrides):
    base = dict(vocab=32, block=16, dim=16, heads=2, layers=2, use_bias=True, parallel_mlp=False)
    base.update(overrides)
    return types.SimpleNamespace(**base)


MODULE_CASES += [
    ModuleCase("attention_block", lambda: Block(_cfg()), lambda: (r(2, 5, 16),), atol=1e-5, rtol=1e-5),
    ModuleCase("config_no_bias_parallel", lambda: Block(_cfg(use_bias=False, parallel_mlp=True)),
               lambda: (r(2, 5, 16),), atol=1e-5, rtol=1e-5),
    ModuleCase("tiny_gpt_logits", lambda: TinyGPT(_cfg()).eval(), lambda: (torch.randint(0, 32, (2, 8)),),
               atol=1e-5, rtol=1e-5),
    ModuleCase("tiny_gpt_loss", lambda: TinyGPT(_cfg(layers=1)), lambda: (torch.randint(0, 32, (2, 8)),
               torch.randint(0, 32, (2, 8))), atol=1e-5, rtol=1e-5),
]


class SharedSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(6, 6)
        self.a = nn.Sequential(self.shared, nn.ReLU())
        self.b = self.shared

    def forward(self, x):
        return self.a(x) + self.b(x) + self.shared(self.shared(x))


class DirectParameters(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 6))
        self.bias = nn.Parameter(torch.zeros(6))
        self.register_buffer("mask", torch.ones(6, 6).tril())
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)
        self.eps = 1e-3            # plain attribute constants
        self.names = ("a", "b")

    def forward(self, x):
        w = self.weight * self.mask
        return (w @ x.t()).t() * self.scale + self.bias + self.eps * len(self.names)


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            return y * 2
        return y - 1


class BufferMutation(nn.Module):
    """Updates a buffer in forward (like a running statistic or a step counter)."""
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(6))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        self.steps += 1
        return x - self.running


class ChildrenIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 6)
        self.l2 = nn.Linear(6, 6)

    def forward(self, x):
        for child in self.children():
            x = child(x)
        n_params = len(list(self.parameters()))
        names = [name for name, _ in self.named_parameters()]
        return x * n_params, names, isinstance(self.l1, nn.Linear)


class FunctionalOnParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 4)

    def forward(self, x):
        return F.linear(x, self.proj.weight.t().t(), self.proj.bias), self.proj.weight.shape, self.proj.in_features


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x, *, scale=1.0, residual=None):
        y = self.lin(x) * scale
        return y if residual is None else y + residual


class ModuleOutputsDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 3)
        self.dec = nn.Linear(3, 6)

    def forward(self, batch):
        z = self.enc(batch["x"])
        return {"z": z, "recon": self.dec(z), "loss": F.mse_loss(self.dec(z), batch["x"])}


MODULE_CASES += [
    ModuleCase("shared_submodule", SharedSubmodule, lambda: (r(3, 6),)),
    ModuleCase("direct_parameters_and_buffers", DirectParameters, lambda: (r(3, 6),)),
    ModuleCase("training_flag_train", lambda: TrainingFlag().train(), lambda: (r(3, 6),)),
    ModuleCase("training_flag_eval", lambda: TrainingFlag().eval(), lambda: (r(3, 6),)),
    ModuleCase("buffer_mutation", BufferMutation, lambda: (r(3, 6),), atol=1e-7, rtol=1e-6),
    ModuleCase("children_iteration", ChildrenIteration, lambda: (r(3, 6),)),
    ModuleCase("functional_on_params", FunctionalOnParams, lambda: (r(3, 6),)),
    ModuleCase("kwargs_forward", KwargsForward, lambda: (r(3, 6),),
               kwargs_factory=lambda: {"scale": 0.5, "residual": r(3, 6)}),
    ModuleCase("dict_in_dict_out", ModuleOutputsDict, lambda: ({"x": r(3, 6)},)),
    ModuleCase("bound_forward_compiled", DirectParameters, lambda: (r(3, 6),), call=lambda m: m.forward),
    ModuleCase("bound_forward_tiny_gpt", lambda: TinyGPT(_cfg()).eval(), lambda: (torch.randint(0, 32, (2, 8)),),
               call=lambda m: m.forward, atol=1e-5, rtol=1e-5),
    ModuleCase("forward_hook_on_top_module", lambda: _with_hooks(TrainingFlag().eval()), lambda: (r(3, 6),),
               graphs=None),
]


def _with_hooks(module):
    module.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    module.register_forward_hook(lambda mod, args, out: out + 100)
    return module


class CastsItsClassifier(nn.Module):
    """A router that casts its classifier to its dtype on every call (SwitchTransformers): `.to()` changes
    nothing, so nn.Module._apply writes each parameter back to itself (`p.data = p`) and the assignment
    stores the same submodule back: no-ops, one graph."""

    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(6, 3)
        self.dtype = torch.float32

    def forward(self, x):
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x).softmax(-1)


class SwapsItsClassifier(CastsItsClassifier):
    """Stores another module into the slot: a real assignment (the frame breaks there)."""

    def __init__(self):
        super().__init__()
        self.spare = nn.Linear(6, 3)

    def forward(self, x):
        self.classifier, self.spare = self.spare, self.classifier
        return self.classifier(x)


def test_a_module_cast_to_its_own_dtype_and_stored_back_is_one_graph():
    check_module(CastsItsClassifier, lambda: (r(4, 6),), graphs=1)
    check_module(SwapsItsClassifier, lambda: (r(4, 6),), graphs=None)


def test_storing_a_submodule_back_calls_a_global_registration_hook():
    """The no-op store is guarded on there being no global module registration hook: one registered after
    compiling sees the store, as in eager."""
    from torch.nn.modules.module import register_module_module_registration_hook
    counter = CompileCounter("eager")
    module = CastsItsClassifier()
    compiled = gj.compile(module, backend=counter)
    compiled(r(4, 6))
    seen = []
    handle = register_module_module_registration_hook(lambda m, name, sub: seen.append(name))
    try:
        compiled(r(4, 6))
    finally:
        handle.remove()
    assert seen == ["classifier"], seen


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in MODULE_CASES])
def test_modules(case):
    case.run()


# ------------------------------------------------------------------------------------ modules in functions

def _apply_model(model, x):
    return model(x).relu() + model.bias


def test_module_as_function_argument():
    model = nn.Linear(4, 4)
    check(_apply_model, lambda: (model, r(2, 4)))


_GLOBAL_MODEL = nn.Sequential(nn.Linear(4, 4), nn.Tanh())


def _uses_global_model(x):
    return _GLOBAL_MODEL(x) * 2


def test_global_module_in_function():
    check(_uses_global_model, lambda: (r(2, 4),))


_SWAPPED = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()


def _functional_call(x, w, params):
    """torch.func.functional_call swaps the module's parameters (module._parameters[name] = t) for the
    call and restores them: the call must read the swapped ones (it read the module's own)."""
    a = torch.func.functional_call(_SWAPPED, {"0.weight": w, **params}, (x,))
    return a, _SWAPPED(x)                     # after the call: the module's own parameters again


def _parameters_swapped_by_hand(x, w):
    old = _SWAPPED[0]._parameters["weight"]
    _SWAPPED[0]._parameters["weight"] = w
    y = _SWAPPED(x)
    _SWAPPED[0]._parameters["weight"] = old
    return y, _SWAPPED[0].weight is old


@pytest.mark.parametrize("fn, make_args", [
    (_functional_call, lambda: (r(3, 4), r(4, 4), {"1.running_mean": r(4), "0.bias": r(4)})),
    (_parameters_swapped_by_hand, lambda: (r(3, 4), r(4, 4))),
], ids=["functional_call", "by_hand"])
def test_parameters_swapped_in_the_frame_are_the_ones_read(fn, make_args):
    own = {k: v.clone() for k, v in _SWAPPED.state_dict().items()}
    check(fn, make_args, graphs=1)
    assert all(torch.equal(v, own[k]) for k, v in _SWAPPED.state_dict().items())


_HOOKED = nn.Linear(4, 4)


def _hook_stored_in_the_frame(x):
    _HOOKED._forward_hooks[12345] = lambda module, args, out: out * 0 + 1
    y = _HOOKED(x)
    del _HOOKED._forward_hooks[12345]
    return y


def test_a_hook_stored_into_a_modules_hook_dict_in_the_frame_runs():
    """The module's hook dicts were read as they were before the frame: the call was inlined without the
    hook the frame had just added."""
    check(_hook_stored_in_the_frame, lambda: (r(2, 4),), graphs=None)
    assert not _HOOKED._forward_hooks


def test_module_created_in_frame():
    def fn(x):
        act = nn.ReLU()
        return act(x) + nn.functional.relu(-x)

    check(fn, lambda: (r(2, 4),))


# ------------------------------------------------------------------------------------ the wrapper

def test_wrapper_exposes_the_module():
    torch.manual_seed(0)
    model = TinyGPT(_cfg()).eval()
    counter = CompileCounter()
    gj.reset()
    compiled = gj.compile(model, backend=counter)
    idx = torch.randint(0, 32, (2, 8))
    torch.testing.assert_close(compiled(idx), model(idx), atol=1e-5, rtol=1e-5)
    ids = lambda items: [id(item) for item in items]  # noqa: E731
    assert ids(compiled.parameters()) == ids(model.parameters()), "parameters() are not the module's"
    assert ids(p for _, p in compiled.named_parameters()) == ids(model.parameters()), "named_parameters()"
    assert ids(compiled.buffers()) == ids(model.buffers()), "buffers() are not the module's"
    submodules = set(ids(model.modules())) - {id(model)}
    assert submodules <= set(ids(m for _, m in compiled.named_modules())), "named_modules() lacks submodules"
    assert compiled.wte is model.wte and compiled.blocks[0] is model.blocks[0], "submodule attributes"
    assert compiled.cfg is model.cfg and compiled.training is False, "plain attributes"
    assert isinstance(compiled, nn.Module), f"{type(compiled)} is not an nn.Module"
    assert counter.frame_count == 1, counter


def test_wrapper_state_dict_keys_are_the_modules():
    """state_dict and named_parameters through the wrapper use the module's own names, so checkpoints move
    freely between compiled and plain models. A deliberate difference from torch.compile, whose wrapper
    prefixes every name with `_orig_mod.`."""
    model = DirectParameters()
    gj.reset()
    compiled = gj.compile(model, backend=CompileCounter())
    sd = compiled.state_dict()
    assert list(sd.keys()) == list(model.state_dict().keys()), list(sd.keys())
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(sd[k] is v or torch.equal(sd[k], v) for k, v in model.state_dict().items())


def test_wrapper_load_state_dict_reaches_module():
    model = nn.Linear(4, 4)
    gj.reset()
    compiled = gj.compile(model, backend=CompileCounter())
    x = r(2, 4)
    compiled(x)
    new = {k: torch.full_like(v, 0.25) for k, v in model.state_dict().items()}
    model.load_state_dict(new)
    torch.testing.assert_close(compiled(x), nn.functional.linear(x, new["weight"], new["bias"]))


# ------------------------------------------------------------------------------------ autograd

def test_backward_through_compiled_module_matches_eager():
    torch.manual_seed(0)
    eager = TinyGPT(_cfg(layers=1))
    import copy
    compiled_model = copy.deepcopy(eager)
    counter = CompileCounter()
    gj.reset()
    compiled = gj.compile(compiled_model, backend=counter, fullgraph=True)
    idx, tgt = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    _, loss_e = eager(idx, tgt)
    _, loss_c = compiled(idx, tgt)
    loss_e.backward()
    loss_c.backward()
    torch.testing.assert_close(loss_c, loss_e, atol=1e-5, rtol=1e-5)
    for (name, pe), (_, pc) in zip(eager.named_parameters(), compiled_model.named_parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"grad of {n}: {m}")
    assert counter.frame_count == 1, counter
