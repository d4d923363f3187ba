"""Values written into guard source as literals, and torch.Size arguments.

A string guarded by value may hold braces ("{0}", "got {}"): guard templates are format() strings, so its
text must not be read as a placeholder (a guard `mode == "{0}"` became `mode == 'mode'`; "{}" raised while
tracing, and so did every nn.RNN/GRU/LSTM forward, whose size check has such a default message).
Tensor.new(torch.Size) makes a tensor of that size, where new(tuple) takes the tuple as data.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch
import torch.distributions as D

import graphjit
from graphjit.testing import CompileCounter, assert_same, check

MODE = "{0}"


def branch_on_text(x, mode):
    if mode == "{0}":
        return x + 1
    return x - 1


def test_a_string_with_braces_is_guarded_by_its_text():
    counter = CompileCounter()
    compiled = graphjit.compile(branch_on_text, backend=counter)
    x = torch.zeros(2)
    for mode in ("{0}", "mode", "{0}", "{}", "{{0}}"):
        assert_same(compiled(x, mode), branch_on_text(x, mode))


def default_message(x, msg="got {} and {0}"):
    return x + len(msg)


def test_a_default_string_with_braces_is_captured():
    check(default_message, lambda: (torch.randn(3),), graphs=1)


def read_global_text(x):
    return x + 1 if MODE == "{0}" else x - 1


def test_a_global_string_with_braces_changes():
    global MODE
    compiled = graphjit.compile(read_global_text)
    x = torch.zeros(2)
    try:
        assert_same(compiled(x), read_global_text(x))
        MODE = "other"
        assert_same(compiled(x), read_global_text(x))
        MODE = "{0}"
        assert_same(compiled(x), read_global_text(x))
    finally:
        MODE = "{0}"


def test_recurrent_modules_capture_whole():
    torch.manual_seed(0)
    for module in (torch.nn.GRU(4, 5), torch.nn.RNN(4, 5, num_layers=2)):
        counter = CompileCounter()
        compiled = graphjit.compile(module, backend=counter)
        x = torch.randn(3, 2, 4)
        assert_same(compiled(x), module(x))
        assert counter.frame_count == 1


def new_of_size(r):
    return r.new(r.shape).fill_(7.0), r.new(r.shape[:1] + (2,)).fill_(1.0)


def test_new_of_a_size_makes_a_tensor_of_that_size():
    check(new_of_size, lambda: (torch.randn(4, 3),), graphs=1)


def exponential_draw(rate):
    return D.Exponential(rate.exp(), validate_args=False).rsample(), \
        D.Laplace(rate, rate.exp(), validate_args=False).rsample()


def test_distributions_that_call_new_with_a_size():
    counter = CompileCounter()
    compiled = graphjit.compile(exponential_draw, backend=counter)
    for seed in range(3):
        rate = torch.randn(4)
        torch.manual_seed(seed)
        expected = exponential_draw(rate)
        torch.manual_seed(seed)
        assert_same(compiled(rate), expected)
    assert counter.frame_count == 1


@pytest.mark.parametrize("name", ["a b", "a{0}", "class"])
def test_attribute_names_that_are_not_identifiers(name):
    import types
    holder = types.SimpleNamespace()
    setattr(holder, name, 2)

    def read(x, o):
        return x * getattr(o, name)
    check(read, lambda: (torch.ones(2), holder), graphs=1)
