"""graphjit.compile_regions: each repeated block compiled on its own, in place; results equal eager's, the
blocks share entries (one graph for blocks that read only their parameters), blocks that read an index of
their own get entries of their own without falling back to eager at the recompile limit."""
import copy
import warnings

import pytest
import torch

import graphjit
from graphjit.api import CompiledModule
from graphjit.testing import CompileCounter


class Block(torch.nn.Module):
    def __init__(self, i, width=16):
        super().__init__()
        self.layer_idx = i
        self.norm = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc(self.norm(x)).tanh()


class Model(torch.nn.Module):
    def __init__(self, n=6, container=torch.nn.ModuleList, block=Block):
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        blocks = [block(i) for i in range(n)]
        if container is torch.nn.ModuleDict:
            self.layers = container({f"b{i}": b for i, b in enumerate(blocks)})
        else:
            self.layers = container(blocks)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, *extra):
        x = self.embed(x)
        layers = self.layers.values() if isinstance(self.layers, torch.nn.ModuleDict) else self.layers
        for layer in layers:
            x = layer(x, *extra)
        return self.head(x)


def compare(eager, compiled, make_input, calls=3, extra=lambda: ()):
    for call in range(calls):
        torch.manual_seed(call)
        x = make_input(call)
        torch.testing.assert_close(compiled(x, *extra()), eager(x, *extra()), rtol=1e-5, atol=1e-5)


class SeqModel(Model):
    """Its blocks in a Sequential, called as one module."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*self.layers)

    def forward(self, x):
        return self.head(self.layers(self.embed(x)))


@pytest.mark.parametrize("container", [torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict])
def test_blocks_compiled_in_place_share_one_graph(container):
    torch.manual_seed(0)
    model = SeqModel() if container is torch.nn.Sequential else Model(container=container)
    eager = copy.deepcopy(model)
    names = {k: v for k, v in model.state_dict().items()}
    counter = CompileCounter()
    with torch.no_grad():
        got = graphjit.compile_regions(model, backend=counter)
        assert got is model
        blocks = list(model.layers.values() if container is torch.nn.ModuleDict else model.layers)
        assert all(isinstance(b, CompiledModule) and isinstance(b, Block) for b in blocks)
        assert not isinstance(model.embed, CompiledModule)          # only the repeated blocks
        state = model.state_dict()
        assert list(state) == list(names) and all(state[k].data_ptr() == names[k].data_ptr() for k in names)
        compare(eager, model, lambda call: torch.randn(4, 8))
    assert counter.frame_count == 1


def test_regions_train_with_eager_gradients():
    torch.manual_seed(0)
    model = Model(n=3)
    eager = copy.deepcopy(model)
    graphjit.compile_regions(model)
    x = torch.randn(4, 8)
    for m in (model, eager):
        m(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


class CachedBlock(Block):
    """Reads its own index: writes its output into slot layer_idx of a list it is given (a KV cache)."""

    def forward(self, x, cache):
        y = x + self.fc(self.norm(x)).tanh()
        cache[self.layer_idx] = y
        return y * (self.layer_idx + 1) / 4


def test_blocks_reading_their_index_get_entries_of_their_own_past_the_limit():
    torch.manual_seed(0)
    n = graphjit.config.recompile_limit + 4
    model = Model(n=n, block=CachedBlock)
    eager = copy.deepcopy(model)
    counter = CompileCounter()
    graphjit.compile_regions(model, backend=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # no recompile-limit warning
        with torch.no_grad():
            for call in range(3):
                x = torch.randn(2, 8)
                got_cache, want_cache = [None] * n, [None] * n
                torch.testing.assert_close(model(x, got_cache), eager(x, want_cache))
                for a, b in zip(got_cache, want_cache):
                    torch.testing.assert_close(a, b)
    frames = counter.frame_count
    with torch.no_grad():
        model(torch.randn(2, 8), [None] * n)
    assert counter.frame_count == frames                 # every block's entry is reused


def test_a_model_without_repeated_blocks_is_compiled_whole():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = graphjit.compile_regions(model)
    assert isinstance(compiled, CompiledModule)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))


def test_bad_arguments():
    with pytest.raises(TypeError, match="expects an nn.Module"):
        graphjit.compile_regions(lambda x: x)
    with pytest.raises(TypeError, match="already compiled"):
        graphjit.compile_regions(graphjit.compile(Model()))
    model = Model()
    with pytest.raises(ValueError):                      # a bad option fails before anything is replaced
        graphjit.compile_regions(model, mode="no-such-mode")
    assert not any(isinstance(b, CompiledModule) for b in model.layers)


def test_hf_llama_layers_with_a_kv_cache():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    layers = graphjit.config.recompile_limit + 2
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    eager = copy.deepcopy(model)
    counter = CompileCounter()
    graphjit.compile_regions(model, backend=counter)
    ids = torch.randint(0, 100, (1, 6))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(2):
            got = model.generate(ids, max_new_tokens=4, do_sample=False)
            want = eager.generate(ids, max_new_tokens=4, do_sample=False)
            assert torch.equal(got, want)
            out = model(ids, use_cache=True)
            torch.testing.assert_close(out.logits, eager(ids, use_cache=True).logits, rtol=1e-5, atol=1e-5)
    # every layer reads its cache layer at its own layer_idx: the entries serve all layers (a static first
    # entry, then symbolic ones: prefill and decode), not one set per layer
    assert 0 < counter.frame_count <= 6


class Slot:
    def __init__(self, scale, start=0.0):
        self.scale = scale                    # a float: guarded by value, the same in every slot here
        self.state = torch.full((4,), float(start))


class OtherSlot(Slot):
    def __init__(self, scale):
        super().__init__(scale)
        self.state = torch.ones(4)


class SlotBlock(torch.nn.Module):
    """Reads and updates the slot of a list at its own index, as a transformers attention layer does with
    its KV cache's layers."""

    def __init__(self, i):
        super().__init__()
        self.idx = i
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, slots):
        slot = slots[self.idx]
        if isinstance(slot, OtherSlot):
            x = x - 1
        slot.state = slot.state + self.fc(x) * slot.scale
        return x + slot.state


def run_blocks(blocks, x, slots):
    for block in blocks:
        x = block(x, slots)
    return x


def test_an_item_read_at_a_blocks_own_index_shares_the_entry():
    torch.manual_seed(0)
    n = 12
    blocks = torch.nn.ModuleList([SlotBlock(i) for i in range(n)])
    eager = copy.deepcopy(blocks)
    counter = CompileCounter()
    holder = torch.nn.Module()
    holder.layers = blocks
    graphjit.compile_regions(holder, backend=counter)
    got_slots = [Slot(0.5, i) for i in range(n)]
    want_slots = [Slot(0.5, i) for i in range(n)]
    with torch.no_grad():
        for call in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(run_blocks(blocks, x, got_slots), run_blocks(eager, x, want_slots))
            for a, b in zip(got_slots, want_slots):
                torch.testing.assert_close(a.state, b.state)
        assert counter.frame_count <= 2          # block 0 static, then one entry for every other index
        # another kind of slot at one index: that index's guards fail, the others keep their entry
        got_slots[5], want_slots[5] = OtherSlot(2.0), OtherSlot(2.0)
        x = torch.randn(4)
        torch.testing.assert_close(run_blocks(blocks, x, got_slots), run_blocks(eager, x, want_slots))
        for a, b in zip(got_slots, want_slots):
            torch.testing.assert_close(a.state, b.state)
        # a shorter list: eager's IndexError
        with pytest.raises(IndexError):
            run_blocks(eager, x, want_slots[:3])
        with pytest.raises(IndexError):
            run_blocks(blocks, x, got_slots[:3])
