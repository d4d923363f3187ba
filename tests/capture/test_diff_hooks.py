"""Forward hooks on submodules, and lists the frame appends to from outside.

A submodule's forward pre-hooks and forward hooks are traced inline, as nn.Module._call_impl runs them
(the hooks guarded to stay the same functions): one graph. Backward hooks, always_call hooks and global
hooks still break. Hooks (and logging helpers) that append to a list that outlives the call don't guard
its length: the appends are replayed on the real list, and the next call, with a longer list, hits the
same entry.

Each case compares outputs, the modules' state and the lists the hooks fill against an eager copy, and
counts graphs.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import io

import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import CompileCounter, assert_same, check_module
from .harness import r
from .test_breaks_support import World, check_break, check_break_module

SINK = io.StringIO()


class Recorder(nn.Module):
    """Two linears with hooks of every forward kind; `seen` collects what the hooks saw."""

    def __init__(self, pre=True, post=True, kwargs_pre=False, kwargs_post=False, returns=True):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 3)
        self.seen = []
        if pre:
            self.a.register_forward_pre_hook(self.scale_input if returns else self.peek_input)
        if post:
            self.a.register_forward_hook(self.shift_output if returns else self.peek_output)
        if kwargs_pre:
            self.b.register_forward_pre_hook(self.kwargs_pre, with_kwargs=True)
        if kwargs_post:
            self.b.register_forward_hook(self.kwargs_post, with_kwargs=True)

    def scale_input(self, module, args):
        return args[0] * 2                       # a single value: becomes the only argument

    def peek_input(self, module, args):
        self.seen.append(args[0].shape[-1])      # None: the arguments stay

    def shift_output(self, module, args, output):
        self.seen.append(output.detach().sum())
        return output + args[0].mean()

    def peek_output(self, module, args, output):
        self.seen.append(output.detach() * 1)

    def kwargs_pre(self, module, args, kwargs):
        return (args[0] - 1,), kwargs

    def kwargs_post(self, module, args, kwargs, output):
        return output * 3

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


HOOK_CASES = {
    "pre_and_post_returning": dict(),
    "pre_and_post_observing": dict(returns=False),
    "with_kwargs": dict(pre=False, post=False, kwargs_pre=True, kwargs_post=True),
    "all": dict(kwargs_pre=True, kwargs_post=True),
}


@pytest.mark.parametrize("case", list(HOOK_CASES))
def test_submodule_hooks_are_traced(case):
    options = HOOK_CASES[case]
    counter, *_ = check_break_module(lambda: Recorder(**options), lambda: (r(2, 4),), graphs=1,
                                     attrs=("seen",), atol=1e-6)
    assert counter.frame_count == 1


def test_submodule_hooks_fullgraph():
    check_module(Recorder, lambda: (r(2, 4),), graphs=1, compile_kwargs={"fullgraph": True}, atol=1e-6)


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.outputs = []
        for block in self.blocks:
            block.register_forward_hook(self.collect)

    def collect(self, module, args, output):
        self.outputs.append(output)

    def forward(self, x):
        for block in self.blocks:
            x = block(x).tanh()
        return x, len(self.outputs)


def test_output_collecting_hooks_in_a_loop():
    """transformers' output capturing in miniature: hooks append every block's output to a list, which
    the forward then reads (its length is guarded: it was read)."""
    counter, *_ = check_break_module(Blocks, lambda: (r(2, 4),), graphs=None, atol=1e-6)
    assert counter.frame_count >= 1


def test_hook_removed_and_added_between_calls():
    torch.manual_seed(0)
    eager, compiled_module = Recorder(post=False), Recorder(post=False)
    compiled_module.load_state_dict(eager.state_dict())
    counter = CompileCounter()
    compiled = graphjit.compile(compiled_module, backend=counter)
    x = r(2, 4)
    assert_same(compiled(x), eager(x), atol=1e-6)
    for module in (eager, compiled_module):
        for handle_id in list(module.a._forward_pre_hooks):
            del module.a._forward_pre_hooks[handle_id]
    assert_same(compiled(x), eager(x), atol=1e-6)            # the hook is gone: a guard fails, recompiles
    handles = [m.a.register_forward_hook(lambda mod, args, out: out * -1) for m in (eager, compiled_module)]
    assert_same(compiled(x), eager(x), atol=1e-6)
    assert counter.frame_count == 3
    for h in handles:
        h.remove()
    assert_same(compiled(x), eager(x), atol=1e-6)
    assert counter.frame_count == 3                          # back to the entry without hooks


class BackwardHooked(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)
        self.grads = []
        if kind == "backward":
            self.a.register_full_backward_hook(lambda m, gi, go: self.grads.append(go[0].shape))
        else:
            self.a.register_forward_hook(lambda m, args, out: out + 1, always_call=True)

    def forward(self, x):
        return self.b(self.a(x).relu())


@pytest.mark.parametrize("kind", ["backward", "always_call"])
def test_hooks_that_still_break(kind):
    counter, *_ = check_break_module(lambda: BackwardHooked(kind), lambda: (r(2, 4),), graphs=None, atol=1e-6)
    explained = graphjit.explain(BackwardHooked(kind))(r(2, 4))
    assert explained.graph_break_count >= 1
    assert any("hook" in e.reason for e in explained.break_reasons), explained.break_reasons


# ---- lists from outside the frame that are only appended to ----

LOG = []


def _log_world():
    return World(LOG.clear, lambda: list(LOG))


def log_and_print(x):
    y = x.sin()
    LOG.append(y)                      # appended, never read: no guard on len(LOG)
    LOG.extend((1, "two"))
    print("logged", file=SINK)         # a break: the appends are replayed before the print runs
    return y * 2


def test_appends_to_a_global_list_across_a_break():
    check_break(log_and_print, lambda: (r(3),), graphs=2, world=_log_world())


def test_appends_accumulate_without_recompiling():
    LOG.clear()
    counter = CompileCounter()
    compiled = graphjit.compile(log_and_print, backend=counter)
    for i in range(5):
        x = r(3)
        compiled(x)
        assert len(LOG) == 3 * (i + 1)
        assert_same(LOG[-3], x.sin())
    assert counter.frame_count == 2
    LOG.clear()


def append_then_read(x, out):
    out.append(x + 1)
    LOG.append(x.cos())
    n = len(LOG)                       # read: the list's items and length are guarded from here
    return out[-1] * n, out, LOG[-1]


def test_append_then_read():
    check_break(append_then_read, lambda: (r(3), [r(3)]), graphs=None, world=_log_world())


def aliased(x, lst):
    LOG.append(x * 2)
    return lst[-1] + 1                 # lst is LOG: the read sees the append


def test_append_through_one_name_read_through_another():
    LOG.clear()
    LOG.append(torch.zeros(3))
    compiled = graphjit.compile(aliased)
    x = r(3)
    expected_log = [LOG[0], x * 2]
    assert_same(compiled(x, LOG), x * 2 + 1)
    assert_same(LOG, expected_log)
    LOG.clear()


def extend_with_itself(x):
    LOG.extend(LOG)
    LOG.append(x)
    return x + len(LOG)


def test_extend_with_itself():
    def reset():
        LOG[:] = [1, 2]
    check_break(extend_with_itself, lambda: (r(2),), graphs=None, world=World(reset, lambda: list(LOG)))


class KwargsEditing(nn.Module):
    """Hooks that edit the kwargs dict in place (returning None) and hand state to later hooks through
    it; a plain pre-hook returning a namedtuple (its items become forward's arguments)."""

    Pair = __import__("collections").namedtuple("Pair", "x shift")

    def __init__(self):
        super().__init__()
        self.sub = Scaled()
        self.tup = Shifted()
        self.sub.register_forward_pre_hook(self.set_scale, with_kwargs=True)
        self.sub.register_forward_pre_hook(self.read_scale, with_kwargs=True)
        self.sub.register_forward_hook(self.mark, with_kwargs=True)
        self.sub.register_forward_hook(self.read_mark, with_kwargs=True)
        self.tup.register_forward_pre_hook(self.as_pair)

    def set_scale(self, module, args, kwargs):
        kwargs["scale"] = kwargs["scale"] * 5

    def read_scale(self, module, args, kwargs):
        kwargs["seen"] = kwargs["scale"] + 1

    def mark(self, module, args, kwargs, output):
        kwargs["marked"] = 100.0

    def read_mark(self, module, args, kwargs, output):
        return output + kwargs["marked"] + kwargs["seen"]

    def as_pair(self, module, args):
        return self.Pair(args[0], 3.0)

    def forward(self, x):
        return self.tup(self.sub(x, scale=2.0))


class Scaled(nn.Module):
    def forward(self, x, scale=1.0, seen=0.0):
        return x * scale + seen


class Shifted(nn.Module):
    def forward(self, x, shift=0.0):
        return x - shift


def test_hooks_share_the_kwargs_dict_and_namedtuple_args():
    """nn.Module._call_impl hands every hook the same kwargs dict, which forward is then called with, and
    keeps a tuple subclass a pre-hook returns as the arguments."""
    check_module(KwargsEditing, lambda: (r(2, 4),), graphs=1)


def _symmetric():
    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).T
    return Symmetric()


def test_parametrizing_the_original_after_compiling():
    """torch.nn.utils.parametrize swaps the module's class for one with a property per parametrized tensor:
    the compiled wrapper follows the original's class, and back when the parametrization is removed."""
    import torch.nn.utils.parametrize as P
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    compiled = graphjit.compile(lin)
    x = r(2, 4)
    assert_same(compiled(x), lin(x))
    P.register_parametrization(lin, "weight", _symmetric())
    assert_same(compiled(x), lin(x))
    assert_same(compiled.weight, lin.weight)
    with torch.no_grad():
        lin.parametrizations.weight.original.mul_(2)
    assert_same(compiled(x), lin(x))
    P.remove_parametrizations(lin, "weight")
    assert type(lin) is nn.Linear
    assert_same(compiled(x), lin(x))
    assert isinstance(compiled, nn.Linear) and not P.is_parametrized(compiled)


def test_parametrizing_the_compiled_module():
    """The same on the wrapper: the original gets a twin of the parametrized class (it reads `weight` as
    the wrapper does), and remove_parametrizations restores both classes."""
    import torch.nn.utils.parametrize as P
    torch.manual_seed(0)
    ref = nn.Linear(4, 4)
    orig = nn.Linear(4, 4)
    orig.load_state_dict(ref.state_dict())
    compiled = graphjit.compile(orig)
    x = r(2, 4)
    assert_same(compiled(x), ref(x))
    P.register_parametrization(ref, "weight", _symmetric())
    P.register_parametrization(compiled, "weight", _symmetric())
    assert P.is_parametrized(compiled) and P.is_parametrized(orig)
    assert_same(compiled(x), ref(x))
    assert_same(orig(x), ref(x))
    assert_same(orig.weight, ref.weight)
    assert_same(compiled.state_dict(), ref.state_dict())
    P.remove_parametrizations(ref, "weight")
    P.remove_parametrizations(compiled, "weight")
    assert type(orig) is nn.Linear and isinstance(compiled, nn.Linear)
    assert_same(compiled(x), ref(x))
    assert_same(orig(x), ref(x))


class Ema(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))

    def forward(self, x):
        self.buf = self.buf * 0.5 + x.mean(0)
        return x * self.buf


def test_global_buffer_registration_hook_sees_an_assigned_buffer():
    """nn.Module.__setattr__ passes an assigned buffer through the global buffer registration hooks (they
    may replace it): an entry traced without hooks must not serve a call with one, and a read of the buffer
    after the assignment sees the hook's value."""
    from torch.nn.modules import module as nn_module
    eager, orig = Ema(), Ema()
    compiled = graphjit.compile(orig)
    x = r(2, 4)
    assert_same(compiled(x), eager(x))
    handle = nn_module.register_module_buffer_registration_hook(lambda module, name, buf: buf * 0 + 1)
    try:
        for _ in range(2):
            assert_same(compiled(x), eager(x))
            assert_same(orig.buf, eager.buf)
    finally:
        handle.remove()
    assert_same(compiled(x), eager(x))
    assert_same(orig.buf, eager.buf)


def test_a_parametrized_compiled_module_deep_copies():
    import copy
    import torch.nn.utils.parametrize as P
    torch.manual_seed(0)
    orig = nn.Linear(3, 3)
    compiled = graphjit.compile(orig)
    P.register_parametrization(compiled, "weight", _symmetric())
    x = r(2, 3)
    expected = compiled(x)
    duplicate = copy.deepcopy(compiled)
    assert_same(duplicate(x), expected)
    with torch.no_grad():
        duplicate.parametrizations.weight.original.mul_(2)
    assert_same(compiled(x), expected)
