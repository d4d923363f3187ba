"""The cheaper guard forms of a module's per-call checks stay exact:
- which of _parameters / _buffers / _modules holds a name is checked as `len(d) == n` plus the reads the
  entry makes anyway (and `in` for keys it doesn't read): renaming or moving a parameter still misses;
- a module's hooks are read from its instance dict: a hook registered after compiling still runs;
- int, float and str attributes are checked by identity first: the same value in a new object still hits,
  a different value misses.
Every case compares with eager and counts compiles.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import CompileCounter, assert_same


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("shift", torch.randn(4))
        self.scale = 1.5
        self.mode = "tanh"
        self.extra = nn.Identity()          # a child the forward never touches

    def forward(self, x):
        y = self.norm(self.lin(x)) * self.scale + self.shift
        return torch.tanh(y) if self.mode == "tanh" else torch.relu(y)


def _pair():
    torch.manual_seed(0)
    eager = Scaled().eval()
    counter = CompileCounter()
    return eager, graphjit.compile(eager, backend=counter), counter


def _same(compiled, eager):
    x = torch.randn(3, 4)
    assert_same(compiled(x), eager(x))


def test_renamed_parameter_misses_and_matches_eager():
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    _same(compiled, eager)
    assert counter.frame_count == 1
    # same number of parameters, one under a new name: `lin.bias` now resolves to nothing
    bias = eager.lin._parameters.pop("bias")
    eager.lin.register_parameter("bias_renamed", bias)
    eager.lin.bias = None
    _same(compiled, eager)
    assert counter.frame_count == 2


def test_parameter_moved_to_buffers_misses_and_matches_eager():
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    weight = eager.norm._parameters.pop("weight")
    eager.norm.register_buffer("weight", weight.detach() * 2)
    _same(compiled, eager)
    assert counter.frame_count == 2


def test_untouched_child_replaced_by_another_name_misses():
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    del eager.extra
    eager.other = nn.Identity()        # _modules keeps its length; a key the entry never read changed
    _same(compiled, eager)
    assert counter.frame_count == 2


def test_hook_registered_after_compiling_runs():
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    handle = eager.norm.register_forward_hook(lambda mod, args, out: out * 0 + 7)
    x = torch.randn(3, 4)
    got = compiled(x)
    torch.testing.assert_close(got, eager(x))
    torch.testing.assert_close(got, torch.tanh(torch.full((3, 4), 7.0) * 1.5 + eager.shift))
    handle.remove()
    _same(compiled, eager)


def test_hook_dict_replaced_by_a_non_empty_one_runs():
    from collections import OrderedDict
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    hooks = OrderedDict()
    hooks[12345] = lambda mod, args, out: out + 1
    eager.lin._forward_hooks = hooks
    _same(compiled, eager)        # the hook adds 1 to lin's output: ignoring it would differ from eager
    assert counter.frame_count > 1


def test_equal_constant_in_a_new_object_hits_and_a_new_value_misses():
    eager, compiled, counter = _pair()
    _same(compiled, eager)
    eager.scale = float("1.5")                 # a new float object, same value
    eager.mode = "".join(["ta", "nh"])         # a new str object, same value
    eager.norm.eps = 1e-5 * 1.0
    _same(compiled, eager)
    assert counter.frame_count == 1
    eager.scale = 2.5
    _same(compiled, eager)
    assert counter.frame_count == 2
    eager.mode = "relu"
    _same(compiled, eager)
    assert counter.frame_count == 3


def test_int_turned_bool_misses():
    class Flagged(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 1

        def forward(self, x):
            return x * (self.k + 1) if type(self.k) is int else x - 1

    eager = Flagged()
    counter = CompileCounter()
    compiled = graphjit.compile(eager, backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), eager(x))
    eager.k = True                 # equal to 1, but another type
    torch.testing.assert_close(compiled(x), eager(x))
    assert counter.frame_count == 2


def test_a_parameter_that_was_none_gets_a_value():
    """Linear(bias=False) then `lin.bias = Parameter(...)`: the same keys, a new value: must miss (the
    None was unguarded before, and the old entry ignored the new bias)."""
    torch.manual_seed(0)
    eager = nn.Linear(4, 3, bias=False)
    counter = CompileCounter()
    compiled = graphjit.compile(eager, backend=counter)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), eager(x))
    eager.bias = nn.Parameter(torch.ones(3))
    torch.testing.assert_close(compiled(x), eager(x))
    assert counter.frame_count == 2


def test_a_buffer_that_was_none_gets_a_tensor():
    class Shifted(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("shift", None)

        def forward(self, x):
            return x if self.shift is None else x + self.shift

    eager = Shifted()
    counter = CompileCounter()
    compiled = graphjit.compile(eager, backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), eager(x))
    before = counter.frame_count          # 0: `return x` makes no graph
    eager.shift = torch.full((3,), 5.0)
    torch.testing.assert_close(compiled(x), eager(x))     # x + 5: the old entry would return x
    assert counter.frame_count == before + 1
