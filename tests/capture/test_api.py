"""The public API around capture: backends (eager, aot_eager, inductor, a callable), allow_in_graph,
disable, explain's output, GRAPHJIT_LOGS artifacts, decorator forms and argument checking."""
import io
import warnings
import contextlib

import pytest
import torch

import graphjit as gj

SINK = io.StringIO()
from graphjit import config
from graphjit.testing import CompileCounter

from graphjit.testing import assert_same, check

from ..conftest import other_python


def mlp(x, w1, w2):
    return torch.relu(x @ w1) @ w2 + x.sum(-1, keepdim=True)


def mlp_args():
    return torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 8)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_named_backends_match_eager(backend):
    gj.reset()
    compiled = gj.compile(mlp, backend=backend)
    for seed in range(3):
        torch.manual_seed(seed)
        args = mlp_args()
        assert_same(compiled(*args), mlp(*args), atol=1e-5, rtol=1e-5)


# On one Python: Inductor's first compile in a process takes 25-40 s; what is tested, the graph and example
# inputs capture hands a backend, is the same on every Python (the eager and aot_eager backends above run on all)
@pytest.mark.slow
@other_python()
def test_inductor_backend_matches_eager():
    gj.reset()
    compiled = gj.compile(mlp, backend="inductor")
    args = mlp_args()
    assert_same(compiled(*args), mlp(*args), atol=1e-4, rtol=1e-4)


def test_aot_eager_keeps_input_mutation():
    def f(x, y):
        x.add_(y)
        return x * 2

    gj.reset()
    compiled = gj.compile(f, backend="aot_eager")
    a, b = torch.randn(3), torch.randn(3)
    a2 = a.clone()
    out = compiled(a2, b)
    expected = f(a.clone(), b)
    assert_same(out, expected)
    assert_same(a2, a + b)


def test_aot_eager_keeps_detach_an_autograd_cut():
    """A graph needing gradients goes through AOTAutograd under aot_eager: make_fx's trace alone made
    detach() an alias, and gradients flowed through it."""
    def f(x, w):
        return (x * w.detach()).sum() + (w * w).sum(), (w * 2).detach()

    gj.reset()
    compiled = gj.compile(f, backend="aot_eager")
    for _ in range(2):
        x, w = torch.randn(3), torch.randn(3, requires_grad=True)
        w2 = w.detach().clone().requires_grad_()
        (loss, cut), (loss2, cut2) = f(x, w), compiled(x, w2)
        loss.backward()
        loss2.backward()
        assert_same(loss2, loss)
        assert_same(w2.grad, w.grad)
        assert not cut2.requires_grad and cut2.grad_fn is None


def test_callable_backend_receives_graph_and_example_inputs():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, [tuple(t.shape) for t in example_inputs]))
        return gm.forward

    gj.reset()
    gj.compile(mlp, backend=backend)(*mlp_args())
    assert len(seen) == 1
    gm, shapes = seen[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert sorted(shapes) == sorted([(4, 8), (8, 16), (16, 8)])


def test_failing_backend_falls_back_with_a_warning():
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    gj.reset()
    args = mlp_args()
    with pytest.warns(RuntimeWarning, match="backend exploded"):
        out = gj.compile(mlp, backend=broken)(*args)
    assert_same(out, mlp(*args))


def test_unknown_backend_and_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown graphjit backend 'nope'"):
        gj.compile(mlp, backend="nope")
    with pytest.raises(ValueError, match="dynamic"):
        gj.compile(mlp, dynamic="yes")
    with pytest.raises(TypeError, match="expects a function"):
        gj.compile(42)


def test_decorator_forms():
    counter = CompileCounter()

    @gj.compile
    def a(x):
        return x + 1

    @gj.compile(backend=counter, fullgraph=True)
    def b(x):
        return x * 2

    gj.reset()
    x = torch.randn(3)
    assert_same(a(x), x + 1)
    assert_same(b(x), x * 2)
    assert counter.frame_count == 1
    assert a.__name__ == "a" and b.__name__ == "b"


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k


def test_bound_method_and_callable_object():
    counter = CompileCounter()
    gj.reset()
    s = Scaler(3)
    compiled = gj.compile(s.apply, backend=counter)
    x = torch.randn(4)
    assert_same(compiled(x), x * 3)
    assert counter.frame_count == 1


def opaque_add(x, y):
    return x + y


def test_allow_in_graph_records_one_node():
    gj.allow_in_graph(opaque_add)

    def f(x):
        return opaque_add(x, 1).sin()

    counter = check(f, lambda: (torch.randn(3),), graphs=1)
    gm = counter.graphs[0]
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert opaque_add in targets


def test_disable_runs_in_cpython_and_compile_returns_it_unchanged():
    calls = []

    @gj.disable
    def side(x):
        calls.append(float(x.sum()))
        return x

    assert gj.compile(side) is side

    def f(x):
        y = x + 1
        side(y)
        return y * 2

    counter = check(f, lambda: (torch.randn(3),), graphs=None)
    assert counter.frame_count == 2          # the graph before the call and the resumed rest
    assert len(calls) == 8                   # 4 calls eager + 4 compiled


def test_explain_reports_graphs_breaks_and_guards():
    def f(x):
        y = x.cos()
        print("hello", file=SINK)
        return y + 1

    out = gj.explain(f)(torch.randn(3))
    assert out.graph_count == 2 and out.graph_break_count == 1
    reason = out.break_reasons[0]
    assert "print" in reason.reason and reason.filename == __file__
    assert "print(" in reason.source_line and reason.hint
    text = str(out)
    assert "Graph count: 2" in text and "print" in text and "x.shape == (3,)" in text
    assert all(len(ops) == 1 for ops in out.ops_per_graph)


def test_explain_of_a_model_without_breaks():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    out = gj.explain(model)(torch.randn(2, 4))
    assert (out.graph_count, out.graph_break_count) == (1, 0)


def test_explain_keeps_no_caches_after_it_returns():
    """Each explain() translates afresh under a backend of its own: its frame caches, interceptors and
    module wrapper class are dropped when it returns, not kept for good; the compiled model is unaffected."""
    import gc
    from graphjit import api
    from graphjit.capture import frame

    def helper(y):
        print("break", file=SINK)
        return y * 2

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return helper(self.fc(x)).relu()

    model = Model().eval()
    compiled = gj.compile(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    gj.explain(model)(x)
    gc.collect()
    def intercepted():
        return sum(len(fn.__dict__.get(frame._INTERCEPTED, ())) for fn in frame._INTERCEPTED_FUNCTIONS)
    before = (len(frame._CACHES), len(frame._INTERCEPTORS), len(api._WRAPPER_CLASSES), len(api._ORIGINAL_CLASS),
              intercepted())
    for _ in range(5):
        out = gj.explain(model)(x)
        assert out.graph_break_count >= 1
    gc.collect()
    after = (len(frame._CACHES), len(frame._INTERCEPTORS), len(api._WRAPPER_CLASSES), len(api._ORIGINAL_CLASS),
             intercepted())
    assert after == before
    torch.testing.assert_close(compiled(x), model(x))


def test_compiling_what_is_already_compiled_or_disabled():
    """A method or forward decorated with @graphjit.compile compiles again under new options (it raised
    an internal error); a module whose forward, or which itself, is marked graphjit.disable is not
    captured at all; disable and allow_in_graph take bound methods and builtins (wrapped, so no other
    instance is marked) and refuse non-callables."""
    class C:
        @gj.compile
        def meth(self, x):
            return x.sin() + 1

    class Compiled(torch.nn.Module):
        @gj.compile
        def forward(self, x):
            return x.cos()

    class Disabled(torch.nn.Module):
        @gj.disable
        def forward(self, x):
            return x.tan()

    x = torch.randn(3)
    c = C()
    torch.testing.assert_close(gj.compile(c.meth)(x), x.sin() + 1)
    torch.testing.assert_close(gj.compile(Compiled())(x), x.cos())
    counter = CompileCounter()
    torch.testing.assert_close(gj.compile(Disabled(), backend=counter)(x), x.tan())
    lin = torch.nn.Linear(3, 3)
    gj.disable(lin)
    torch.testing.assert_close(gj.compile(lin, backend=counter)(x), lin(x))
    assert counter.frame_count == 0

    def uses(x):
        return lin(x).relu() * 2
    torch.testing.assert_close(gj.compile(uses, backend=counter)(x), uses(x))
    assert counter.frame_count == 1 and counter.op_count == 2          # the module ran at a break

    method = gj.disable(c.meth)
    assert not getattr(C.meth, "_graphjit_disable", False)
    torch.testing.assert_close(method(x), x.sin() + 1)
    sin = gj.disable(torch.sin)

    def g(x):
        return sin(x) + 1
    counter = CompileCounter()
    torch.testing.assert_close(gj.compile(g, backend=counter)(x), g(x))
    assert counter.op_count == 1
    with pytest.raises(TypeError, match="expects a callable"):
        gj.disable(3)
    with pytest.raises(ValueError, match="fullgraph"):
        gj.compile(g, fullgraph="yes")
    with pytest.raises(IndexError, match="out of range"):
        gj.mark_dynamic(torch.randn(3), 5)


def test_an_unknown_log_artifact_is_warned_about_once(monkeypatch):
    from graphjit import logs
    monkeypatch.setattr(config, "logs", "graph,nonsense")
    with pytest.warns(RuntimeWarning, match="'nonsense'"):
        assert logs.enabled("graph") and not logs.enabled("nonsense")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert logs.enabled("graph")


@pytest.mark.parametrize("artifact,expected", [
    ("graph", "graph of test_logs.<locals>.f"), ("guards", "x.shape == (3,)"), ("bytecode", "def __gj_entry"),
    ("recompiles", "guard failed: x.shape == (3,)"), ("graph_breaks", "graph break in test_logs.<locals>.f"),
])
def test_logs(monkeypatch, artifact, expected):
    monkeypatch.setattr(config, "logs", artifact)

    def f(x):
        y = x.sin()
        if x.shape[0] == 4:
            print("four", file=SINK)
        return y

    gj.reset()
    compiled = gj.compile(f)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        compiled(torch.randn(3))
        compiled(torch.randn(4))
    assert expected in err.getvalue()


def test_a_recompile_for_another_dispatch_key_set_says_so(monkeypatch):
    """The entry's batched tensor check also compares dispatch keys, which no guard of its own states: a
    call under inference_mode after one under no_grad recompiles, and the log named no guard ("guard
    failed: None")."""
    monkeypatch.setattr(config, "logs", "recompiles")
    gj.reset()
    compiled = gj.compile(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    x = torch.randn(2, 4)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with torch.no_grad():
            compiled(x)
        with torch.inference_mode():
            compiled(x)
    assert "guard failed: " in err.getvalue() and "guard failed: None" not in err.getvalue(), err.getvalue()
    assert "dispatch key set" in err.getvalue(), err.getvalue()


def test_capture_reaches_backends_only_through_the_registry():
    """Capture makes no backend decisions: its only imports from graphjit.backends are the registry's
    lookup and its before_capture hook, and it imports nothing from graphjit.compiler."""
    import ast
    import pathlib
    root = pathlib.Path(gj.__file__).parent / "capture"
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    "backends" in node.module or "compiler" in node.module):
                found.append((path.name, node.module, [a.name for a in node.names]))
    assert sorted(found) == [("frame.py", "backends.registry", ["before_capture"]),
                             ("frame.py", "backends.registry", ["lookup_backend"])]


def test_an_op_raising_on_the_users_tensors_prints_no_traceback_of_torchs(caplog):
    """`-bool_tensor` raises in eager; capture's fake propagation of it made torch's fake-tensor logger print
    a long traceback ("failed while attempting to run meta") before the frame ran in CPython and raised
    eager's own error. The user sees that error only."""
    gj.reset()
    compiled = gj.compile(lambda x: -x)
    with caplog.at_level("ERROR", logger="torch._subclasses.fake_tensor"):
        with pytest.raises(RuntimeError, match="Negation"):
            compiled(torch.tensor([True, False]))
    assert not [r for r in caplog.records if "failed while attempting to run meta" in r.getMessage()]
