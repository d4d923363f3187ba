"""The on-disk cache of compiled graphs (compiler/runtime/graph_cache.py): a graph compiled once is loaded,
not compiled, after graphjit.reset() and in a fresh process, with results equal to eager's; truncated,
corrupted, altered and foreign files are warned about, removed and rebuilt; graphs whose code could change
are not cached; the folder is private to the user."""
import json
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import graphjit
from graphjit.backends.registry import lookup_backend
from graphjit.compiler.runtime import graph_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(graphjit.config, "cache_dir", str(tmp_path / "kernels"))
    monkeypatch.setattr(graphjit.config, "graph_cache", 1)
    return tmp_path / "kernels" / "graphs"


def compiled_with_record(fn, **kwargs):
    made = []

    def recording(gm, example_inputs):
        out = lookup_backend("graphjit")(gm, example_inputs)
        made.append(out)
        return out
    return graphjit.compile(fn, backend=recording, **kwargs), made


def entries(folder):
    return sorted(p for p in folder.glob("*.json")) if folder.exists() else []


def pointwise(x, y):
    return (x.sin() * y + 1).relu().sum(-1), x.T @ y


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

    def forward(self, x):
        h = torch.tanh(self.fc(x)) * self.scale
        return {"out": h.softmax(-1), "norm": h.norm(dim=-1)}


def writes_input(x, y):
    x.mul_(2)
    return x + y


def run_twice(make_fn, make_args, calls=3):
    """Compile, reset, compile again: the second compile must load every graph from the cache; each call's
    results (and mutated arguments) equal eager's."""
    for attempt in range(2):
        graphjit.reset()
        fn = make_fn()
        compiled, made = compiled_with_record(fn)
        for call in range(calls):
            torch.manual_seed(call)
            args = make_args()
            eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            got, want = compiled(*args), fn(*eager_args)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            for a, b in zip(args, eager_args):
                torch.testing.assert_close(a, b)
        assert made, "the backend compiled nothing"
        cached = [getattr(m, "cached", False) for m in made]
        assert all(cached) if attempt else not any(cached), (attempt, cached)
    return made


def test_functions_load_from_the_cache_after_reset(cache):
    run_twice(lambda: pointwise, lambda: (torch.randn(6, 5), torch.randn(6, 5)))
    assert len(entries(cache)) == 1
    run_twice(lambda: writes_input, lambda: (torch.randn(4, 4), torch.randn(4, 4)))


def test_a_module_with_parameters_and_a_buffer_loads_from_the_cache(cache):
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        made = run_twice(lambda: net, lambda: (torch.randn(3, 8),))
    assert made[0].kernel_count > 0


def test_training_halves_load_from_the_cache(cache, monkeypatch, capsys):
    monkeypatch.setattr(graphjit.config, "logs", "fusion")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    grads = []
    for attempt in range(2):
        graphjit.reset()
        compiled, made = compiled_with_record(net)
        net.zero_grad()
        compiled(x).square().sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
        loaded = capsys.readouterr().err.count("loaded from the compiled-graph cache")
        assert loaded == (2 if attempt else 0)
    net.zero_grad()
    net(x).square().sum().backward()
    for got in grads:
        for g, p in zip(got, net.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)
    assert len(entries(cache)) == 2              # the forward and the backward half


def test_a_fresh_process_loads_the_graph(tmp_path):
    script = tmp_path / "warm.py"
    script.write_text(textwrap.dedent("""
        import torch, graphjit
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()
        x = torch.randn(4, 16)
        with torch.no_grad():
            got, want = graphjit.compile(model)(x), model(x)
        print("equal", torch.allclose(got, want, rtol=1e-5, atol=1e-5))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT, GRAPHJIT_CACHE_DIR=str(tmp_path / "c"), GRAPHJIT_LOGS="fusion")
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0 and "equal True" in run.stdout, run.stderr[-2000:]
    assert "loaded from the compiled-graph cache" not in runs[0].stderr
    assert "loaded from the compiled-graph cache" in runs[1].stderr


def test_the_folder_is_private(cache):
    run_twice(lambda: pointwise, lambda: (torch.randn(3, 3), torch.randn(3, 3)), calls=1)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700


def _damage_truncate(path):
    path.write_text(path.read_text()[:200])


def _damage_garbage(path):
    path.write_bytes(b"\x00\xffnot json at all")


def _damage_alter(path):                      # the wrapper changed, the digest not
    stored = json.loads(path.read_text())
    stored["body"]["wrapper_source"] = stored["body"]["wrapper_source"].replace("return", "return 0 and", 1)
    path.write_text(json.dumps(stored))


def _damage_foreign(path):                    # another format, with a digest that matches it
    stored = json.loads(path.read_text())
    stored["body"]["format"] = 999
    stored["digest"] = graph_cache._body_digest(stored["body"])
    path.write_text(json.dumps(stored))


def _damage_bad_recipe(path):                 # a recipe that names an op torch does not have
    stored = json.loads(path.read_text())
    name = next(n for n, r in stored["body"]["globals"].items() if r[0] in ("op_fn", "dtype"))
    stored["body"]["globals"][name] = ["op_fn", "aten::no_such_op.default"]
    stored["digest"] = graph_cache._body_digest(stored["body"])
    path.write_text(json.dumps(stored))


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_garbage, _damage_alter, _damage_foreign,
                                    _damage_bad_recipe])
def test_a_damaged_entry_is_warned_about_removed_and_rebuilt(cache, damage):
    args = (torch.randn(6, 5), torch.randn(6, 5))
    compiled, _ = compiled_with_record(pointwise)
    compiled(*args)
    (path,) = entries(cache)
    damage(path)
    graphjit.reset()
    compiled, made = compiled_with_record(pointwise)
    with pytest.warns(RuntimeWarning, match="compiled-graph cache entry .* is unusable"):
        got = compiled(*args)
    torch.testing.assert_close(got, pointwise(*args))
    assert not getattr(made[0], "cached", False)
    (rebuilt,) = entries(cache)                # written again, whole
    assert json.loads(rebuilt.read_text())["body"]["format"] == graph_cache.FORMAT
    graphjit.reset()
    compiled, made = compiled_with_record(pointwise)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(compiled(*args), pointwise(*args))
    assert made[0].cached


@graphjit.allow_in_graph
def test_a_fresh_process_loads_a_graph_with_size_symbols(tmp_path):
    """Size symbols are named the same in every process: the second one, at other sizes, loads the entry."""
    script = tmp_path / "warm_dynamic.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, graphjit
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()
        compiled = graphjit.compile(model, dynamic=True)
        with torch.no_grad():
            for n in map(int, sys.argv[1:]):
                x = torch.randn(n, 16)
                print("equal", torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT, GRAPHJIT_CACHE_DIR=str(tmp_path / "c"), GRAPHJIT_LOGS="fusion")
    runs = [subprocess.run([sys.executable, str(script), *sizes], capture_output=True, text=True, env=env,
                           timeout=300) for sizes in (("3", "5"), ("7", "4", "9"))]
    for run in runs:
        assert run.returncode == 0 and "equal False" not in run.stdout and "equal True" in run.stdout, \
            run.stderr[-2000:]
    assert "loaded from the compiled-graph cache" not in runs[0].stderr
    assert runs[1].stderr.count("loaded from the compiled-graph cache") == 1
    assert "compiled in" not in runs[1].stderr


@graphjit.allow_in_graph
def opaque_op(x):
    return x * 3


def test_graphs_whose_code_could_change_are_not_cached(cache):
    """A graph calling a function of the user's (allow_in_graph: one node, not traced into) is not kept:
    that function's code could differ in the next process."""
    compiled, _ = compiled_with_record(lambda x: opaque_op(x.sin()) + 1)
    torch.testing.assert_close(compiled(x := torch.randn(4)), x.sin() * 3 + 1)
    assert entries(cache) == []


def symbolic_made(fn, sizes, make_args):
    """Compile fn with dynamic=True after a reset and call it at each size; results equal eager's. Returns
    for each backend compile whether it was loaded from the cache."""
    graphjit.reset()
    compiled, made = compiled_with_record(fn, dynamic=True)
    for n in sizes:
        args = make_args(n)
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
    return [getattr(m, "cached", False) for m in made]


def test_a_graph_with_size_symbols_loads_for_other_sizes(cache):
    """One entry serves every size: a later compile at sizes the first never saw loads it."""
    def make(n):
        return torch.randn(n, n + 2), torch.randn(n, n + 2)
    assert symbolic_made(pointwise, (3, 5, 6), make) == [False]
    assert len(entries(cache)) == 1
    body = json.loads(entries(cache)[0].read_text())["body"]
    assert ".size(0)" in body["wrapper_source"]          # sizes read off the inputs, not baked in
    assert symbolic_made(pointwise, (9, 4), make) == [True]


def upper_half_max(x):
    return x[x.shape[0] // 2:].amax(0)


def test_guards_the_compile_added_come_back_with_the_entry(cache):
    """The compile of upper_half_max decides that its row count n - n // 2 is not 1 (a guard in the
    ShapeEnv). Loaded in a later process, the entry brings that guard back: at n = 2 (one row) it fails,
    and the graph is compiled again rather than the loaded code run."""
    def make(n):
        return (torch.randn(n, 4),)
    assert symbolic_made(upper_half_max, (5, 7, 9), make) == [False]
    (entry,) = entries(cache)
    stored = json.loads(entry.read_text())["body"]["shape_guards"]
    assert any(tree[0] == "Unequality" for tree in stored), stored
    assert symbolic_made(upper_half_max, (11, 6, 2), make) == [True, False]


def test_an_entry_whose_size_guards_fail_here_is_compiled_again_and_kept(cache):
    """An entry compiled for one row (n = 2) and loaded where the trace's sizes have more rows: its guard
    fails on them, so the graph is compiled, with no warning about the file."""
    def make(n):
        return (torch.randn(n, 4),)
    assert symbolic_made(upper_half_max, (2,), make) == [False]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert symbolic_made(upper_half_max, (2,), make) == [True]
        assert symbolic_made(upper_half_max, (8,), make) == [False]


def test_size_guard_trees_round_trip_and_refuse_other_functions():
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    expr = sympy.And(sympy.Ne(FloorDiv(s0, 2) * s1 + Mod(s1, 3), 1), sympy.Le(s0, 2 * s1 - 1))
    tree = graph_cache.expression_tree(expr)
    assert graph_cache.expression_from_tree(json.loads(json.dumps(tree)), {"s0": s0, "s1": s1}) == expr
    with pytest.raises(ValueError):
        graph_cache.expression_from_tree(tree, {"s0": s0})                   # a symbol this trace lacks
    with pytest.raises(ValueError):
        graph_cache.expression_from_tree(["__import__", [["int", 1]]], {})   # only size functions
    with pytest.raises(graph_cache.NotCacheable):
        graph_cache.expression_tree(sympy.sin(s0))


def test_inputs_of_other_layouts_get_their_own_entry(cache):
    def f(x):
        return x.exp() + 1
    x = torch.randn(4, 6)
    for arg in (x, x.T.contiguous().T):               # same shape, transposed strides
        graphjit.reset()
        compiled, _ = compiled_with_record(f, dynamic=False)
        torch.testing.assert_close(compiled(arg), f(arg))
    assert len(entries(cache)) == 2


def test_off_writes_nothing(cache, monkeypatch):
    monkeypatch.setattr(graphjit.config, "graph_cache", 0)
    compiled, _ = compiled_with_record(pointwise)
    compiled(torch.randn(3, 3), torch.randn(3, 3))
    assert entries(cache) == []


def test_artifacts_round_trip_to_another_cache(cache, tmp_path, monkeypatch):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = net(x)
        compiled, _ = compiled_with_record(net)
        compiled(x)
        bundle = tmp_path / "artifacts.json"
        assert graphjit.save_cache_artifacts(bundle) == 1
        # the serving machine: an empty cache, filled from the file
        monkeypatch.setattr(graphjit.config, "cache_dir", str(tmp_path / "serving"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert graphjit.load_cache_artifacts(bundle) == 1
        graphjit.reset()
        compiled, made = compiled_with_record(net)
        torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
    assert made[0].cached


def test_artifacts_from_elsewhere_and_damaged_ones(cache, tmp_path):
    compiled, _ = compiled_with_record(pointwise)
    compiled(torch.randn(3, 3), torch.randn(3, 3))
    bundle = tmp_path / "a.json"
    graphjit.save_cache_artifacts(bundle)
    document = json.loads(bundle.read_text())
    document["environment"]["torch"] = "1.0"
    document["entries"].append({"digest": "0", "body": {"key": "../../evil", "format": 1}})
    bundle.write_text(json.dumps(document))
    with pytest.warns(RuntimeWarning) as caught:
        assert graphjit.load_cache_artifacts(bundle) == 1
    messages = " ".join(str(w.message) for w in caught)
    assert "made with another torch" in messages and "compile again here" in messages and "damaged" in messages
    assert not (tmp_path / "evil.json").exists()
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not an artifacts file"):
        graphjit.load_cache_artifacts(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"something": 1}))
    with pytest.raises(ValueError, match="not a graphjit artifacts file"):
        graphjit.load_cache_artifacts(tmp_path / "other.json")


def test_artifacts_whose_environment_is_not_a_mapping_load_with_a_warning(cache, tmp_path):
    compiled, _ = compiled_with_record(pointwise)
    compiled(torch.randn(3, 3), torch.randn(3, 3))
    bundle = tmp_path / "a.json"
    graphjit.save_cache_artifacts(bundle)
    document = json.loads(bundle.read_text())
    for environment in ("cpu", ["torch"], None, 3):
        document["environment"] = environment
        bundle.write_text(json.dumps(document))
        with pytest.warns(RuntimeWarning, match="compile again here"):
            assert graphjit.load_cache_artifacts(bundle) == 1


def test_saving_artifacts_onto_a_folder_raises_and_leaves_no_file(cache, tmp_path):
    compiled, _ = compiled_with_record(pointwise)
    compiled(torch.randn(3, 3), torch.randn(3, 3))
    (tmp_path / "out").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(IsADirectoryError):
        graphjit.save_cache_artifacts(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_thread_count_is_not_part_of_the_key(cache):
    """Generated code does not depend on torch's thread count (OpenMP's team is chosen when a kernel
    runs): artifacts built on a machine of other core count load on this one."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        run_twice(lambda: pointwise, lambda: (torch.randn(6, 5), torch.randn(6, 5)), calls=1)
        torch.set_num_threads(2)
        graphjit.reset()
        compiled, made = compiled_with_record(pointwise)
        x, y = torch.randn(6, 5), torch.randn(6, 5)
        torch.testing.assert_close(compiled(x, y), pointwise(x, y), rtol=1e-5, atol=1e-5)
        assert made[0].cached
    finally:
        torch.set_num_threads(threads)


def test_triton_graphs_load_from_the_cache(cache, monkeypatch):
    """A Triton graph's entry keeps its module (here run in Triton's interpreter: on a GPU its kernels are
    compiled again for what they were compiled for, each a hit of Triton's cache, with their launchers)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(graphjit.config, "triton_cpu", 1)
    made = run_twice(lambda: pointwise, lambda: (torch.randn(6, 5), torch.randn(6, 5)))
    (entry,) = entries(cache)
    body = json.loads(entry.read_text())["body"]
    assert body["triton"]["interpret"] and body["triton"]["module_names"]
    assert "@triton.jit" in body["kernel_source"] and made[-1].kernel_count == made[0].kernel_count > 0


def test_triton_graphs_with_size_symbols_load_for_other_sizes(cache, monkeypatch):
    """Symbolic Triton kernels take sizes as arguments: the entry compiled at some sizes runs at others."""
    pytest.importorskip("triton")
    monkeypatch.setattr(graphjit.config, "triton_cpu", 1)

    def make(n):
        return torch.randn(n, n + 2), torch.randn(n, n + 2)
    assert symbolic_made(pointwise, (3, 5), make) == [False]
    assert symbolic_made(pointwise, (6, 4), make) == [True]
    assert symbolic_made(upper_half_max, (5, 7), lambda n: (torch.randn(n, 4),)) == [False]
    assert symbolic_made(upper_half_max, (9, 2), lambda n: (torch.randn(n, 4),)) == [True, False]


_custom_ops = torch.library.Library("gjcachetest", "DEF")
_custom_ops.define("scale(Tensor x) -> Tensor")
_custom_ops.impl("scale", lambda x: x * 2, "CompositeImplicitAutograd")


def test_graphs_calling_custom_ops_are_not_cached(cache):
    """A custom op's kernels (here a Python body decompose traces into) are the user's code: another process
    may register other ones under the same name."""
    compiled, _ = compiled_with_record(lambda x: torch.ops.gjcachetest.scale(x) + 1)
    torch.testing.assert_close(compiled(x := torch.randn(4)), x * 2 + 1)
    assert entries(cache) == []


def matmul_relu(x, y):
    return (x @ y).relu()


def test_the_callers_autocast_state_is_part_of_the_key(cache):
    """decompose traces under the caller's autocast, so an entry compiled under it holds its casts."""
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    for context in (torch.autocast("cpu", dtype=torch.bfloat16), torch.autocast("cpu", dtype=torch.float16),
                    torch.autocast("cpu", enabled=False)):
        graphjit.reset()
        compiled, _ = compiled_with_record(matmul_relu)
        with context:
            got, want = compiled(x, y), matmul_relu(x, y)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    assert len(entries(cache)) == 3


def test_inputs_with_the_negative_bit_are_read_as_their_values(cache):
    """z.conj().imag is a lazy negation: its memory holds -x. Such a graph runs eagerly (and gets its own
    key and guards), the plain input's graph is compiled."""
    z = torch.randn(8, dtype=torch.complex64)
    fn = lambda x: x * 2 + 1            # noqa: E731
    for attempt in range(2):
        graphjit.reset()
        compiled, _ = compiled_with_record(fn)
        for x in (z.conj().imag, z.imag.clone(), z.conj().imag):
            torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)


@pytest.mark.parametrize("size", [0, 1000, 8000])
def test_a_truncated_library_is_rebuilt(cache, size):
    """The dynamic loader may crash (SIGBUS) on a truncated library rather than refuse it: a library whose
    bytes differ from its .sha256 is not loaded. In a fresh process, as dlopen keeps loaded files."""
    script = textwrap.dedent(f"""
        import glob, os, sys, torch, graphjit
        graphjit.config.cache_dir = sys.argv[1]
        fn = lambda x: (x.sin() * 2).sum(-1)
        x = torch.randn(4, 8)
        if sys.argv[2] == "damage":
            for lib in glob.glob(os.path.join(sys.argv[1], "*.so")):
                with open(lib, "r+b") as f:
                    f.truncate({size})
        torch.testing.assert_close(graphjit.compile(fn)(x), fn(x))
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GRAPHJIT_GRAPH_CACHE="0")
    for step in ("build", "damage"):
        run = subprocess.run([sys.executable, "-c", script, str(cache.parent), step], capture_output=True,
                             text=True, env=env, timeout=300)
        assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]
