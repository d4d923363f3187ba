"""The entry's two fast paths must guard exactly what the plain checks did:

* tensors: one batched C++ check (torch's TensorGuards) of type, dtype, device, shape, strides and
  requires_grad for all tensor inputs;
* objects whose class has a Python __getattribute__ (transformers' configs): one comparison of the
  instance dict with a snapshot instead of a guard per attribute read;
* tuples of immutable values (a conv's stride, padding, dilation): `is` the tuple seen while tracing,
  the type, length and item guards only when it is another object.

Each test changes one thing between calls and checks compiled == eager and the recompile count."""
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter


class AliasedConfig:
    """Like transformers' PretrainedConfig: attribute names mapped through a Python __getattribute__."""
    attribute_map = {"hidden_size": "n_embd"}

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in type(self).attribute_map:
            key = type(self).attribute_map[key]
        return super().__getattribute__(key)


def use_config(x, cfg):
    y = x * cfg.hidden_size
    if cfg.flag:
        y = y + 1
    if getattr(cfg, "extra", None) is not None:
        y = y * cfg.extra
    return y + cfg.sizes[0]


def run(fn, *args):
    counter = CompileCounter()
    compiled = graphjit.compile(fn, backend=counter)
    return counter, compiled


def test_config_attribute_changes_recompile_and_match_eager():
    cfg = AliasedConfig(n_embd=3, flag=False, sizes=[5, 6])
    counter, compiled = run(use_config)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x, cfg), use_config(x, cfg))
    torch.testing.assert_close(compiled(x, cfg), use_config(x, cfg))
    assert counter.frame_count == 1
    steps = [lambda c: setattr(c, "flag", True),          # a read attribute changes
             lambda c: setattr(c, "n_embd", 4),           # ... through the alias
             lambda c: setattr(c, "extra", 2.0),          # a missing attribute appears
             lambda c: c.sizes.__setitem__(0, 7),         # a nested mutable value changes in place
             lambda c: setattr(c, "unrelated", 1)]        # an attribute never read: a (harmless) recompile
    for step in steps:
        step(cfg)
        torch.testing.assert_close(compiled(x, cfg), use_config(x, cfg))
    assert counter.frame_count <= 1 + len(steps)
    before = counter.frame_count
    for _ in range(3):                                    # stable again: no more compiles
        torch.testing.assert_close(compiled(x, cfg), use_config(x, cfg))
    assert counter.frame_count == before


def test_two_configs_with_equal_values_share_the_entry():
    a = AliasedConfig(n_embd=3, flag=True, sizes=[1])
    b = AliasedConfig(n_embd=3, flag=True, sizes=[1])
    counter, compiled = run(use_config)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x, a), use_config(x, a))
    torch.testing.assert_close(compiled(x, b), use_config(x, b))
    assert counter.frame_count == 1


def test_tensor_metadata_changes_recompile_and_match_eager():
    def f(x, w):
        return (x @ w).sin()
    counter, compiled = run(f)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    variants = [(torch.randn(3, 4), torch.randn(4, 5)),                  # fresh, same metadata
                (torch.randn(3, 4).double(), torch.randn(4, 5).double()),  # dtype
                (torch.randn(2, 4), torch.randn(4, 5)),                  # shape
                (torch.randn(4, 3).t(), torch.randn(4, 5)),              # strides
                (torch.nn.Parameter(torch.randn(3, 4)), torch.randn(4, 5))]   # type and requires_grad
    for x, w in variants:
        torch.testing.assert_close(compiled(x, w), f(x, w))
    assert counter.frame_count == 5
    with torch.no_grad():
        x, w = variants[0]
        torch.testing.assert_close(compiled(x, w), f(x, w))


def test_class_attributes_and_aliases_keep_their_own_guards():
    class Cfg(AliasedConfig):
        scale = 2.0                                   # a class attribute, read through __getattribute__

    def f(x, cfg):
        return x * cfg.scale + cfg.hidden_size        # hidden_size: an alias of n_embd
    cfg = Cfg(n_embd=3)
    counter, compiled = run(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, cfg), f(x, cfg))
    Cfg.scale = 5.0                                   # the instance dict is unchanged
    torch.testing.assert_close(compiled(x, cfg), f(x, cfg))
    assert counter.frame_count == 2


def test_immutable_tuple_attributes_identity_fast_path():
    """The same tuple object: no guard on its items runs and nothing recompiles; an equal new tuple: the
    item guards pass (no recompile); a different value: a recompile with eager's result; a list: too."""
    conv = torch.nn.Conv2d(2, 3, 3, padding=1).eval()
    counter, compiled = run(conv)
    x = torch.randn(1, 2, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x))
        torch.testing.assert_close(compiled(x), conv(x))
        assert counter.frame_count == 1
        conv.padding = (1, 1)                               # equal contents, another object
        torch.testing.assert_close(compiled(x), conv(x))
        assert counter.frame_count == 1
        conv.padding = (0, 0)                               # new contents
        torch.testing.assert_close(compiled(x), conv(x))
        assert counter.frame_count == 2
        conv.padding = [0, 0]                               # a list: not the tuple type guarded
        torch.testing.assert_close(compiled(x), conv(x))
        assert counter.frame_count == 3


def test_entry_checks_the_tuple_by_identity_first():
    from graphjit.capture import codegen
    conv = torch.nn.Conv2d(2, 3, 3, stride=2).eval()
    sources = []
    real = codegen._immutable_group

    def recording(lines, names, root, identity, group):
        sources.append((root.expr(), len(group)))
        return real(lines, names, root, identity, group)
    codegen._immutable_group = recording
    try:
        graphjit.compile(conv, backend=CompileCounter())(torch.randn(1, 2, 8, 8))
    finally:
        codegen._immutable_group = real
    roots = {expr for expr, _ in sources}
    assert any(expr.endswith(".stride") for expr in roots) and any(expr.endswith(".padding") for expr in roots)
    assert all(n >= 2 for _, n in sources)          # type and length at least, inside the block


class DoublingReads:
    def __init__(self):
        self.v = 1

    def __getattribute__(self, key):
        value = object.__getattribute__(self, key)
        return value * 2 if key == "v" else value


def _set_then_read_alias(x, cfg):
    cfg.n_embd = 7
    return x * cfg.hidden_size


def _set_then_read_back(x, obj):
    obj.v = 3
    return x * obj.v


@pytest.mark.parametrize("fn,make,fullgraph", [(_set_then_read_alias, lambda: AliasedConfig(n_embd=4), True),
                                              (_set_then_read_back, DoublingReads, False)])
def test_reads_through_a_python_getattribute_after_a_store_match_eager(fn, make, fullgraph):
    """After the frame sets an attribute, a read through the class's Python __getattribute__ is traced
    through the hook, which sees the stores (the real hook would read the object as it was before: the
    alias of a stored name; reading the stored value back skipped the hook). A hook calling
    object.__getattribute__ is refused, and the frame runs in CPython."""
    compiled = graphjit.compile(fn, backend="eager", fullgraph=fullgraph)
    for _ in range(2):
        got_obj, want_obj = make(), make()
        assert torch.equal(compiled(torch.ones(2), got_obj), fn(torch.ones(2), want_obj))
        assert vars(got_obj) == vars(want_obj)
    graphjit.reset()
