"""What a compiled entry assumed must be checked again on every call: a change between calls to anything
the trace read either makes the entry miss (a recompile) or is read fresh by the entry, so the result stays
eager's. Each case compiles a model of repeated blocks both ways (graphjit.compile of the whole model, and
graphjit.compile_regions, where every block shares its class's entries), calls it, changes one thing in
the compiled model and in an eager copy alike, and compares the results; cases whose change a guard must
catch also count the compiles.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import copy
import sys

import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import CompileCounter, assert_same

SHIFT = 0.5


def scale_by(x, k=2.0, *, bias=0.0):
    return x * k + bias


def activation(x):
    return torch.tanh(x)


def _make_offset(value):
    def offset(x):
        return x + value
    return offset


offset = _make_offset(0.25)


class Block(nn.Module):
    gain = 1.0          # a class attribute the forward reads

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.scale = 1.5
        self.mode = "tanh"

    def forward(self, x):
        y = scale_by(self.fc(self.norm(x))) * self.scale * self.gain + SHIFT
        if self.training:
            y = y * 0.5
        y = activation(y) if self.mode == "tanh" else torch.relu(y)
        return offset(x + y)


class Model(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _models(how):
    """(compiled, eager copy, counter): the same weights, in eval mode."""
    torch.manual_seed(0)
    model = Model().eval()
    eager = copy.deepcopy(model)
    counter = CompileCounter()
    if how == "regions":
        compiled = graphjit.compile_regions(model, backend=counter)
    else:
        compiled = graphjit.compile(model, backend=counter)
    return compiled, eager, counter


def _check(compiled, eager, grad=False):
    torch.manual_seed(1)
    x = torch.randn(2, 8)
    with torch.set_grad_enabled(grad):
        assert_same(compiled(x), eager(x), atol=1e-6, rtol=1e-6)


def _changed(how, change, recompiles, grad=False):
    """Call twice, apply change(model) to both models, call twice again: eager's results throughout, and
    (recompiles) at least one more graph after the change."""
    compiled, eager, counter = _models(how)
    _check(compiled, eager, grad)
    _check(compiled, eager, grad)
    before = counter.frame_count
    change(compiled)
    change(eager)
    _check(compiled, eager, grad)
    _check(compiled, eager, grad)
    if recompiles:
        assert counter.frame_count > before, "the change was not caught by a guard"
    return compiled, counter


HOW = pytest.mark.parametrize("how", ["whole", "regions"])
_this = sys.modules[__name__]


@HOW
def test_module_attribute_changed(how):
    def change(m):
        m.layers[1].scale = 3.0
    _changed(how, change, recompiles=True)


@HOW
def test_module_str_attribute_changed(how):
    def change(m):
        m.layers[2].mode = "relu"
    _changed(how, change, recompiles=True)


@HOW
def test_equal_attribute_in_a_new_object_is_still_a_hit(how):
    def change(m):
        m.layers[1].scale = float("1.5")     # the same value: no recompile needed, eager's result
    _changed(how, change, recompiles=False)


@HOW
def test_class_attribute_changed(how, monkeypatch):
    _changed(how, lambda m: monkeypatch.setattr(Block, "gain", 2.0), recompiles=True)


@HOW
def test_submodule_replaced_by_another_type(how):
    def change(m):
        torch.manual_seed(2)
        m.layers[1].norm = nn.Identity()
    _changed(how, change, recompiles=True)


@HOW
def test_submodule_replaced_by_one_of_its_type(how):
    def change(m):
        torch.manual_seed(3)
        m.layers[0].fc = nn.Linear(8, 8)    # new weights: graph inputs, read on each call
    _changed(how, change, recompiles=False)


@HOW
def test_submodule_replaced_through_modules_dict(how):
    def change(m):
        m.layers[2]._modules["norm"] = nn.Identity()
    _changed(how, change, recompiles=True)


@HOW
def test_global_constant_rebound(how, monkeypatch):
    _changed(how, lambda m: monkeypatch.setattr(_this, "SHIFT", -1.0), recompiles=True)


@HOW
def test_global_function_rebound(how, monkeypatch):
    _changed(how, lambda m: monkeypatch.setattr(_this, "activation", torch.sigmoid), recompiles=True)


@HOW
def test_function_code_replaced(how, monkeypatch):
    def cube(x, k=2.0, *, bias=0.0):
        return x * x * x * k + bias
    _changed(how, lambda m: monkeypatch.setattr(scale_by, "__code__", cube.__code__), recompiles=True)


@HOW
def test_function_defaults_replaced(how, monkeypatch):
    _changed(how, lambda m: monkeypatch.setattr(scale_by, "__defaults__", (3.0,)), recompiles=True)


@HOW
def test_function_kwdefaults_replaced(how, monkeypatch):
    _changed(how, lambda m: monkeypatch.setattr(scale_by, "__kwdefaults__", {"bias": 1.0}), recompiles=True)


@HOW
def test_closure_cell_changed(how, monkeypatch):
    cell = offset.__closure__[0]
    monkeypatch.setattr(cell, "cell_contents", 0.25)       # restored after the test

    def change(m):
        cell.cell_contents = 4.0
    _changed(how, change, recompiles=True)


@HOW
def test_parameter_replaced(how):
    def change(m):
        torch.manual_seed(4)
        m.layers[1].fc.weight = nn.Parameter(torch.randn(8, 8))
    _changed(how, change, recompiles=False)


@HOW
def test_parameter_changed_in_place(how):
    def change(m):
        with torch.no_grad():
            m.layers[0].norm.weight.mul_(2.0)
    _changed(how, change, recompiles=False)


@HOW
def test_parameter_requires_grad_flipped(how):
    def change(m):
        m.layers[1].fc.weight.requires_grad_(False)
    _changed(how, change, recompiles=True, grad=True)


@HOW
def test_training_toggled(how):
    _changed(how, lambda m: m.train(), recompiles=True)


@HOW
def test_one_block_toggled_to_training(how):
    _changed(how, lambda m: m.layers[1].train(), recompiles=True)


@HOW
def test_forward_hook_added_to_a_submodule(how):
    def change(m):
        m.layers[1].fc.register_forward_hook(lambda mod, args, out: out * 2)
    _changed(how, change, recompiles=True)


@HOW
def test_forward_pre_hook_added_to_a_submodule(how):
    def change(m):
        m.layers[0].norm.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    _changed(how, change, recompiles=True)


@HOW
def test_forward_hook_added_to_a_block(how):
    def change(m):
        m.layers[2].register_forward_hook(lambda mod, args, out: out - 1)
    _changed(how, change, recompiles=False)     # a block's own hooks run around its compiled forward


@HOW
def test_instance_forward_override(how):
    def change(m):
        fc = m.layers[1].fc
        fc.forward = lambda x: x * 3
    _changed(how, change, recompiles=True)


@HOW
def test_block_forward_code_replaced(how, monkeypatch):
    def other(self, x):
        return x - torch.sigmoid(self.fc(self.norm(x)) * self.scale)
    _changed(how, lambda m: monkeypatch.setattr(Block.forward, "__code__", other.__code__), recompiles=True)


def test_regions_share_one_entry_until_a_block_changes():
    compiled, eager, counter = _models("regions")
    _check(compiled, eager)
    _check(compiled, eager)
    assert counter.frame_count == 1
    compiled.layers[1].scale = 3.0
    eager.layers[1].scale = 3.0
    _check(compiled, eager)
    _check(compiled, eager)
    assert counter.frame_count == 2       # block 1 has an entry of its own; blocks 0 and 2 keep the first


# ---- objects whose class has a Python __getattribute__ (transformers' configs): the entry compares their
# instance dict with a snapshot, and the objects under the names the trace read by identity

class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __getattribute__(self, key):
        return super().__getattribute__(key)


def use_config(x, cfg):
    y = x * 2 if isinstance(cfg.n, bool) else x * cfg.n * 3
    y = y / cfg.z
    if getattr(cfg, "extra", None) is not None:
        y = y + cfg.extra
    return y


def _config_case(change, recompiles):
    cfg = Config(n=1, z=0.5, unread="a")
    counter = CompileCounter()
    compiled = graphjit.compile(use_config, backend=counter)
    x = torch.randn(3)
    assert_same(compiled(x, cfg), use_config(x, cfg))
    change(cfg)
    assert_same(compiled(x, cfg), use_config(x, cfg))
    assert_same(compiled(x, cfg), use_config(x, cfg))
    assert counter.frame_count == (2 if recompiles else 1)


@pytest.mark.parametrize("value", [True, 1.0])
def test_config_value_replaced_by_an_equal_one_of_another_type(value):
    _config_case(lambda cfg: setattr(cfg, "n", value), recompiles=True)


def test_config_zero_replaced_by_negative_zero():
    cfg = Config(n=1, z=0.0, unread="a")
    counter = CompileCounter()
    compiled = graphjit.compile(use_config, backend=counter)
    x = torch.randn(3)
    assert_same(compiled(x, cfg), use_config(x, cfg))
    cfg.z = -0.0
    assert_same(compiled(x, cfg), use_config(x, cfg))       # -inf, not inf
    assert counter.frame_count == 2


def test_config_equal_value_in_a_new_object_is_a_hit():
    _config_case(lambda cfg: setattr(cfg, "z", float("0.5")), recompiles=False)


def test_config_unread_attribute_changed_is_a_hit():
    _config_case(lambda cfg: setattr(cfg, "unread", "b"), recompiles=False)


def test_config_missing_attribute_added():
    _config_case(lambda cfg: setattr(cfg, "extra", 1.5), recompiles=True)


def test_config_read_value_changed():
    _config_case(lambda cfg: setattr(cfg, "n", 5), recompiles=True)


# ---- global state, checked in its cheapest spelling (the interpreter's state guards)

def _entry_names(compiled_model):
    entry = type(compiled_model)._graphjit_forward._cache.entries[0]
    return set(entry.__code__.co_names)


def test_state_checks_use_their_cheap_forms():
    compiled, eager, counter = _models("whole")
    _check(compiled, eager)
    names = _entry_names(compiled)
    assert {"__gj_any_autocast", "__gj_nn_module"} <= names
    assert not {"__gj_autocast_state", "__gj_global_module_hooks_present"} & names


@HOW
def test_autocast_entered_after_compiling(how):
    compiled, eager, counter = _models(how)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert_same(compiled(x), eager(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert_same(compiled(x), eager(x), atol=1e-2, rtol=1e-2)      # bfloat16, as eager
        assert_same(compiled(x), eager(x))
    assert counter.frame_count >= 2


@HOW
def test_global_module_hook_registered_after_compiling(how):
    compiled, eager, counter = _models(how)
    _check(compiled, eager)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: out + 1)
    try:
        _check(compiled, eager)
    finally:
        handle.remove()
    _check(compiled, eager)


def test_config_changed_while_compiling():
    """The snapshot is the instance dict the trace read, not the one the entry is built with."""
    cfg = Config(n=1, z=0.5, unread="a")

    def backend(gm, example_inputs):
        cfg.extra = 2.0          # what another thread could do while the frame compiles
        return gm.forward
    compiled = graphjit.compile(use_config, backend=backend)
    x = torch.randn(3)
    with graphjit.config.patch(strict_fresh_guards=False):
        assert_same(compiled(x, cfg), use_config(x, cfg))
        assert_same(compiled(x, cfg), use_config(x, cfg))
