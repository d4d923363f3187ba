"""The harness itself: run it against deliberately wrong stand-in compilers and check that each kind of
wrongness (values, types, lost mutations, lost identity, extra graphs, other exceptions) is caught, with a
message that names the call and the path. No graphjit involved.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import types

import pytest
import torch

from graphjit import testing
from graphjit.testing import assert_same, check, check_raises, clone_tree, Mismatch


def _stand_in(wrap):
    """A compiler namespace whose compile(fn, backend) traces fn with torch.fx once, hands the graph to the
    backend, and runs `wrap(fn)` for the result."""
    def compile(fn, backend=None, **kwargs):
        state = {"compiled": False}

        def run(*args, **kw):
            if not state["compiled"]:
                backend(_trace(fn), list(args))
                state["compiled"] = True
            return wrap(fn)(*args, **kw)
        return run
    return types.SimpleNamespace(compile=compile, reset=lambda: None)


def _trace(fn):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.neg, (x,)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.fixture
def compiler():
    previous = testing._override
    yield lambda wrap: testing.use_compiler(_stand_in(wrap))
    testing.use_compiler(previous)


def _double(x):
    return [x * 2, {"k": x + 1}]


def _mutate(x):
    x.add_(1)
    return x


def test_correct_stand_in_passes(compiler):
    compiler(lambda fn: fn)
    counter = check(_double, lambda: (torch.randn(3),), compile_kwargs={"fullgraph": False})
    assert counter.frame_count == 1 and counter.op_count == 1, counter


def test_wrong_values_caught(compiler):
    def perturbed(fn):
        def run(x):
            out = fn(x)
            out[1]["k"] = out[1]["k"] + 1e-3
            return out
        return run
    compiler(perturbed)
    with pytest.raises(Mismatch, match=r"call 0 of 4: output\[1\]\['k'\]: values differ: max abs diff 0.001"):
        check(_double, lambda: (torch.randn(3),))


def test_tolerance_accepts_small_error(compiler):
    compiler(lambda fn: (lambda x: [t + 1e-7 if isinstance(t, torch.Tensor) else t for t in fn(x)]))
    check(lambda x: [x * 2], lambda: (torch.randn(3),), atol=1e-6, rtol=0)


def test_wrong_container_type_caught(compiler):
    compiler(lambda fn: (lambda x: tuple(fn(x))))
    with pytest.raises(Mismatch, match=r"output: type tuple != expected list"):
        check(_double, lambda: (torch.randn(3),))


def test_wrong_dtype_caught(compiler):
    compiler(lambda fn: (lambda x: fn(x).double()))
    with pytest.raises(Mismatch, match=r"output: dtype torch.float64 != expected torch.float32"):
        check(lambda x: x + 1, lambda: (torch.randn(3),))


def test_lost_requires_grad_caught(compiler):
    compiler(lambda fn: (lambda x: fn(x).detach()))
    with pytest.raises(Mismatch, match=r"requires_grad False != expected True"):
        check(lambda x: x * 2, lambda: (torch.randn(3, requires_grad=True),))


def test_lost_mutation_caught(compiler):
    compiler(lambda fn: (lambda x: fn(x.clone())))
    with pytest.raises(Mismatch, match=r"\(args, kwargs\) after the call\[0\]\[0\]: values differ"):
        check(_mutate, lambda: (torch.randn(3),))


def test_lost_container_mutation_caught(compiler):
    def appends(xs):
        xs.append(xs[0] * 2)
        return xs[0] + 1
    compiler(lambda fn: (lambda xs: fn(list(xs))))
    with pytest.raises(Mismatch, match=r"after the call\[0\]\[0\]: length 1 != expected 2"):
        check(appends, lambda: ([torch.randn(3)],))


def test_lost_identity_caught(compiler):
    compiler(lambda fn: (lambda x: fn(x).clone()))
    with pytest.raises(Mismatch, match=r"eager returns the argument args\[0\]\[0\]; compiled returns a new tensor"):
        check(_mutate, lambda: (torch.randn(3),))


def test_extra_graphs_caught(compiler):
    testing.use_compiler(types.SimpleNamespace(
        compile=lambda fn, backend=None, **kw: (lambda *a: (backend(_trace(fn), list(a)), fn(*a))[1]),
        reset=lambda: None))
    with pytest.raises(AssertionError, match=r"handed 4 graph\(s\) \(ops per graph \[1, 1, 1, 1\]\), expected 1"):
        check(lambda x: x + 1, lambda: (torch.randn(3),))


def test_graphs_none_skips_count(compiler):
    testing.use_compiler(types.SimpleNamespace(compile=lambda fn, backend=None, **kw: fn, reset=lambda: None))
    check(lambda x: x + 1, lambda: (torch.randn(3),), graphs=None)
    with pytest.raises(AssertionError, match="handed 0 graph"):
        check(lambda x: x + 1, lambda: (torch.randn(3),))


def test_fullgraph_requested_when_one_graph_expected(compiler):
    seen = []
    testing.use_compiler(types.SimpleNamespace(
        compile=lambda fn, backend=None, **kw: (seen.append(kw), fn)[1], reset=lambda: None))
    check(lambda x: x + 1, lambda: (torch.randn(3),), graphs=None)
    with pytest.raises(AssertionError):
        check(lambda x: x + 1, lambda: (torch.randn(3),), graphs=1)
    assert seen == [{}, {"fullgraph": True}], seen


def test_check_raises_compares_type_and_message(compiler):
    def bad(x):
        raise ValueError(f"n={x.shape[0]}")
    compiler(lambda fn: fn)
    check_raises(bad, lambda: (torch.randn(3),))

    def other_message(fn):
        def run(x):
            raise ValueError("something else")
        return run
    compiler(other_message)
    with pytest.raises(AssertionError, match=r"eager raised ValueError\(n=3\); compiled raised ValueError\(something"):
        check_raises(bad, lambda: (torch.randn(3),))


def test_fresh_inputs_per_call_and_independent_copies(compiler):
    seen = []

    def record(fn):
        def run(x):
            seen.append(x)
            return fn(x)
        return run
    compiler(record)
    check(_mutate, lambda: (torch.randn(3),), calls=3)
    assert len(seen) == 3 and not torch.equal(seen[0], seen[1])


def test_clone_tree_keeps_aliasing_and_grad():
    x = torch.randn(3, requires_grad=True)
    tree = {"a": [x, x], "b": (x,)}
    copy = clone_tree(tree)
    assert copy["a"][0] is copy["a"][1] is copy["b"][0]
    assert copy["a"][0] is not x and copy["a"][0].requires_grad and copy["a"][0].is_leaf
    assert_same(copy, tree)


def test_assert_same_messages():
    with pytest.raises(Mismatch, match=r"out\[0\].x: 1 != expected 2"):
        assert_same([types.SimpleNamespace(x=1)], [types.SimpleNamespace(x=2)], where="out")
    with pytest.raises(Mismatch, match=r"out: type int != expected bool"):
        assert_same(1, True, where="out")
    with pytest.raises(Mismatch, match=r"keys \['b'\] != expected \['a'\]"):
        assert_same({"b": 1}, {"a": 1})
    assert_same(float("nan"), float("nan"))
    assert_same(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))
    with pytest.raises(Mismatch, match="type Tensor != expected Parameter"):
        assert_same(torch.zeros(2), torch.nn.Parameter(torch.zeros(2)))


def test_zero_signs_compared_in_exact_checks_only():
    with pytest.raises(Mismatch, match=r"out: signs of zeros differ: 1 of 2 zeros"):
        assert_same(torch.tensor([0.0, -0.0]), torch.tensor([0.0, 0.0]), where="out")
    assert_same(torch.tensor([0.0, -0.0]), torch.tensor([0.0, 0.0]), atol=1e-6, rtol=0)
    with pytest.raises(Mismatch, match=r"signs of zeros differ"):
        assert_same(torch.tensor([-0.0]), torch.tensor([0.0]), atol=1e-6, rtol=0, zero_signs=True)


def test_dtype_tolerances_when_none():
    off = torch.tensor([1.0]) + 1e-5
    assert_same(off, torch.tensor([1.0]), atol=None, rtol=None)          # within float32's TOLERANCES
    with pytest.raises(Mismatch, match="values differ"):
        assert_same(off, torch.tensor([1.0]))                             # exact by default
    with pytest.raises(Mismatch, match="values differ"):
        assert_same(off.double(), torch.tensor([1.0], dtype=torch.float64), atol=None, rtol=None)


def test_strides_compared_on_request():
    x = torch.randn(3, 4)
    assert_same(x.t().contiguous(), x.t())
    with pytest.raises(Mismatch, match=r"stride \(3, 1\) != expected \(1, 4\)"):
        assert_same(x.t().contiguous(), x.t(), strides=True)


def test_clone_tree_keeps_strides_of_broadcast_and_sliced_tensors():
    base = torch.randn(4, 1)
    for t in (base.expand(4, 5), torch.randn(6, 8)[::2, 1:], torch.randn(3, 4).t()):
        copy = clone_tree(t)
        assert copy.stride() == t.stride() and torch.equal(copy, t)
        assert copy.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


def test_make_args_gets_the_call_index(compiler):
    compiler(lambda fn: fn)
    calls = []
    check(lambda x: x + 1, lambda call: (calls.append(call), torch.full((2,), float(call)))[1:], calls=3)
    assert calls == [0, 1, 2]


def test_graph_run_as_captured_caught_with_a_backend(compiler):
    compiler(lambda fn: fn)
    with pytest.raises(AssertionError, match=r"graph\(s\) \[0\] of 1 ran as captured"):
        check(lambda x: x + 1, lambda: (torch.randn(3),), backend=lambda gm, example_inputs: gm.forward)
    check(lambda x: x + 1, lambda: (torch.randn(3),), backend=lambda gm, example_inputs: gm.forward,
          fallback=True)


def test_recompile_after_the_first_call_caught(compiler):
    testing.use_compiler(types.SimpleNamespace(
        compile=lambda fn, backend=None, **kw: (lambda *a: (backend(_trace(fn), list(a)), fn(*a))[1]),
        reset=lambda: None))
    with pytest.raises(AssertionError, match=r"handed 3 graph\(s\) \(ops per graph \[1, 1, 1\]\), expected 1"):
        check(lambda x: x + 1, lambda: (torch.randn(3),), calls=3, graphs="first")


def test_compile_counter_lists_what_a_per_size_backend_compiled():
    """A backend that compiles a graph with size symbols once per set of sizes (backends/dynamic.PerSize):
    compiled_functions() has one entry per size seen (compiled has one per graph). graphjit's compiler
    compiles such a graph once for all sizes: one entry."""
    import graphjit
    from graphjit.backends.dynamic import PerSize, symbolic_inputs
    from graphjit.backends.registry import graphjit_backend
    from graphjit.testing import CompileCounter

    def per_size(gm, example_inputs):
        return PerSize(graphjit_backend, gm, symbolic_inputs(gm))
    for backend, functions in ((per_size, 3), (graphjit_backend, 1)):
        counter = CompileCounter(backend)
        compiled = graphjit.compile(lambda x: x * 2 + 1, backend=counter, dynamic=True)
        for n in (3, 5, 5, 7):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), x * 2 + 1)
        assert len(counter.compiled) == 1 and len(counter.compiled_functions()) == functions
        assert all(hasattr(fn, "source") for fn in counter.compiled_functions())
