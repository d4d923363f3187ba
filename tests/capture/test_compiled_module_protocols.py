"""What code around a compiled module reads of it: forward's signature (transformers' generate() decides from
it which arguments to build: position_ids from a left-padded attention mask), copy.deepcopy (an EMA copy of
a model after compile_regions), and pickling (torch.save of the model object); each against eager.
"""
import copy
import inspect
import io

import torch
import torch.nn as nn

import graphjit


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale: float = 1.0, *, shift=None):
        y = self.lin(x).relu() * scale
        return y if shift is None else y + shift


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_a_compiled_modules_forward_keeps_its_signature():
    model = _Block()
    compiled = graphjit.compile(model)
    assert inspect.signature(compiled.forward) == inspect.signature(model.forward)
    assert compiled.forward.__name__ == "forward"


def test_a_deep_copy_of_a_compiled_module_is_a_compiled_copy():
    torch.manual_seed(0)
    for make in (lambda: graphjit.compile(_Stack()), lambda: graphjit.compile_regions(_Stack())):
        model = make()
        twin = copy.deepcopy(model)
        assert "graphjit.compile" in repr(twin)
        assert twin.state_dict().keys() == model.state_dict().keys()
        x = torch.randn(2, 4)
        torch.testing.assert_close(twin(x), model(x))
        with torch.no_grad():
            next(twin.parameters()).add_(1.0)          # the copy's parameters are its own
        assert not torch.equal(twin(x), model(x))
        graphjit.compile(twin)                           # and it compiles again


def test_a_pickled_compiled_module_loads_compiled():
    torch.manual_seed(0)
    for make in (lambda: graphjit.compile(_Block()), lambda: graphjit.compile_regions(_Stack())):
        model = make()
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        x = torch.randn(2, 4)
        torch.testing.assert_close(loaded(x), model(x))


def test_generate_through_a_compiled_model_builds_positions_from_the_mask():
    transformers = __import__("pytest").importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    compiled = graphjit.compile(copy.deepcopy(model))
    ids = torch.tensor([[1, 1, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    outs = []
    for m in (model, compiled):
        torch.manual_seed(1)
        with torch.no_grad():
            outs.append(m.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=True, top_k=5))
    assert torch.equal(outs[1], outs[0])


def test_a_compiled_lazy_module_becomes_its_plain_class_and_stays_compiled():
    """LazyLinear infers its input size at its first call and sets its own __class__ to Linear: on the
    wrapper that raised (layouts differ); the wrapper now becomes the compiled wrapper of Linear, the module
    converts as in eager, with eager's initial weights and results."""
    from graphjit.api import CompiledModule
    from graphjit.testing import CompileCounter
    torch.manual_seed(0)
    eager = nn.LazyLinear(3)
    x = torch.randn(2, 4)
    want = eager(x)
    torch.manual_seed(0)
    module = nn.LazyLinear(3)
    counter = CompileCounter()
    compiled = graphjit.compile(module, backend=counter)
    torch.randn(2, 4)
    got = compiled(x)
    assert type(module) is nn.Linear and isinstance(compiled, CompiledModule) and isinstance(compiled, nn.Linear)
    assert torch.equal(module.weight, eager.weight) and torch.equal(got, want)
    for _ in range(2):
        x = torch.randn(5, 4)
        assert torch.equal(compiled(x), eager(x))
    assert counter.frame_count >= 1


def test_a_forward_replaced_on_the_class_after_compiling_is_followed():
    """`Model.forward = new_forward` after graphjit.compile(model): the compiled module runs (and
    compiles) the new forward, as eager does, and a model compiled after the change too (the wrapper class
    cached per class kept the old one); a forward that is not a Python function runs as it is."""
    class Patched(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x)

    model = Patched()
    compiled = graphjit.compile(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))

    def new_forward(self, x):
        return self.fc(x) * 0 + 42.0
    Patched.forward = new_forward
    for module in (compiled, graphjit.compile(Patched())):
        assert torch.equal(module(x), torch.full((2, 4), 42.0))
    Patched.forward = lambda self, x: x - 1
    torch.testing.assert_close(compiled(x), x - 1)
    import functools
    Patched.forward = functools.partialmethod(lambda self, x, k: x * k, k=3)
    torch.testing.assert_close(compiled(x), x * 3)
