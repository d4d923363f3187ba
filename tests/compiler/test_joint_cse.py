"""Common subexpressions (compiler/decompose.merge_repeated_ops), the pass inference graphs get and the
joint training graph gets before torch's min-cut partitioner in place of the partitioner's own (whose import
of Inductor's pattern matcher costs a process's first training compile 0.7 s): repeated pure calls merge;
random calls, writes, calls across a write into an input, and values returned as separate outputs do not;
a graph writing into an intermediate merges nothing."""
import subprocess
import sys
import textwrap

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from graphjit.compiler.decompose import merge_repeated_ops


def _ops(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _merged(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    before = _ops(gm)
    merge_repeated_ops(gm)
    gm.graph.lint()
    gm.recompile()
    return before, _ops(gm), gm


def test_repeated_pure_calls_merge_and_the_graph_computes_the_same():
    def f(x, y):
        a, b = x.sin() * y, x.sin() * y
        return a + b, torch.cat([x, y]).sum() + torch.cat([x, y]).sum()
    before, after, gm = _merged(f, torch.randn(3), torch.randn(3))
    assert before.count("aten.sin.default") == 2 and after.count("aten.sin.default") == 1
    assert after.count("aten.mul.Tensor") == 1 and after.count("aten.cat.default") == 1
    x, y = torch.randn(3), torch.randn(3)
    for got, want in zip(gm(x, y), f(x, y)):
        torch.testing.assert_close(got, want)


def test_random_calls_writes_and_separate_outputs_stay():
    def f(x):
        r1, r2 = torch.rand_like(x), torch.rand_like(x)
        s1 = x.cos()
        x.add_(1)                   # a write into an input: cos(x) after it is another value
        s2 = x.cos()
        return r1, r2, s1, s2, x.exp(), x.exp()     # two outputs eager returns as separate tensors
    before, after, gm = _merged(f, torch.randn(4))
    assert after.count("aten.rand_like.default") == 2
    assert after.count("aten.cos.default") == 2
    assert after.count("aten.exp.default") == 2
    assert after == before
    x = torch.randn(4)
    r1, r2, s1, s2, e1, e2 = gm(x.clone())
    assert not torch.equal(r1, r2) and e1 is not e2
    torch.testing.assert_close(s2, (x + 1).cos())
    torch.testing.assert_close(s1, x.cos())


def test_a_graph_writing_into_an_intermediate_merges_nothing():
    def f(x):
        y = x * 2
        a = y.sin()
        y.add_(1)
        return a, y.sin(), x.exp() + x.exp()
    before, after, gm = _merged(f, torch.randn(4))
    assert after == before
    x = torch.randn(4)
    for got, want in zip(gm(x), f(x)):
        torch.testing.assert_close(got, want)


def test_a_training_compile_does_not_import_inductors_pattern_matcher():
    code = textwrap.dedent("""
        import sys, torch, graphjit
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
        x = torch.randn(4, 8)
        graphjit.compile(model)(x).sin().sum().backward()
        graphjit.compile(model)(x).cos().sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        print("pattern_matcher" in str([m for m in sys.modules if m.startswith("torch._inductor.pattern")]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout
