"""The on-disk cache of compiled generated sources (graphjit/code_cache.py): a second compile of the same
source loads the code object; a damaged file is warned about, removed and compiled again; the entries
that generated sources build behave as without the cache."""
import os
import stat
import warnings

import pytest
import torch

import graphjit
from graphjit import code_cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(graphjit.config, "cache_dir", str(tmp_path / "kernels"))
    monkeypatch.setattr(graphjit.config, "graph_cache", 1)
    return tmp_path / "kernels" / "code"


def big_source(value):
    lines = [f"x{i} = {i}" for i in range(600)]
    return "\n".join(lines + [f"result = {value!r}"])


def run(source, filename="<test source>"):
    namespace = {}
    exec(code_cache.compile_source(source, filename), namespace)
    return namespace["result"]


def files(folder):
    return sorted(p for p in folder.iterdir() if p.suffix == ".bin") if folder.exists() else []


def test_a_second_compile_loads_the_stored_code(folder, monkeypatch):
    assert run(big_source("a")) == "a"
    assert len(files(folder)) == 1
    compiled = []
    real = compile
    monkeypatch.setattr(code_cache, "compile", lambda *a: compiled.append(a) or real(*a), raising=False)
    assert run(big_source("a")) == "a"
    assert compiled == []
    assert run(big_source("b")) == "b"           # another source: its own file
    assert len(compiled) == 1 and len(files(folder)) == 2


def test_the_file_name_is_part_of_the_key(folder):
    code = code_cache.compile_source(big_source(1), "<one>")
    other = code_cache.compile_source(big_source(1), "<two>")
    assert code.co_filename == "<one>" and other.co_filename == "<two>"
    assert len(files(folder)) == 2


def test_small_sources_and_the_cache_off_write_nothing(folder, monkeypatch):
    assert run("result = 3") == 3
    assert files(folder) == []
    monkeypatch.setattr(graphjit.config, "graph_cache", 0)
    assert run(big_source(4)) == 4
    assert files(folder) == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "not_code"])
def test_a_damaged_file_is_warned_about_removed_and_compiled_again(folder, damage):
    assert run(big_source("v")) == "v"
    (path,) = files(folder)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 0x40]) + data[-4:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:       # a valid digest over marshal's bytes of something that is not code
        import hashlib
        import marshal
        payload = marshal.dumps({"result": "evil"})
        path.write_bytes(hashlib.sha256(payload).digest() + payload)
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert run(big_source("v")) == "v"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run(big_source("v")) == "v"       # rebuilt whole
    assert files(folder) == [path]


def test_an_unwritable_cache_folder_compiles_without_storing(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setattr(graphjit.config, "cache_dir", str(blocker / "kernels"))     # under a file
    monkeypatch.setattr(graphjit.config, "graph_cache", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run(big_source(5)) == 5
        assert run(big_source(5)) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_the_folder_is_private(folder):
    run(big_source(6))
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0


def test_entries_built_from_stored_code_give_eager_results(folder):
    """A function whose guard function is large enough to be stored: after reset() its entry comes from
    the stored code object and still checks its guards (a changed attribute recompiles)."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(12))
            self.scale = 2.0

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x)) * self.scale
            return x

    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = model(x)
        assert torch.allclose(graphjit.compile(model)(x), expected)
        assert files(folder)
        graphjit.reset()
        compiled = graphjit.compile(model)
        assert torch.allclose(compiled(x), expected)
        model.scale = 3.0
        assert torch.allclose(compiled(x), model(x))


def test_a_fresh_process_generates_the_same_entry_and_loads_its_code(tmp_path):
    """Generated sources are the same text in every process that compiles the same frames in the same
    order (no object ids in them), so a warm process loads its entry's code instead of compiling it."""
    import subprocess
    import sys
    import textwrap
    script = tmp_path / "warm.py"
    script.write_text(textwrap.dedent("""
        import torch, graphjit
        import torch.nn.functional as F

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(12))
                self.norm = torch.nn.LayerNorm(8)

            def forward(self, x):
                for layer in self.layers:
                    x = F.gelu(layer(self.norm(x)))
                return x

        torch.manual_seed(0)
        net = Net().eval()
        x = torch.randn(2, 8)
        with torch.no_grad():
            assert torch.allclose(graphjit.compile(net)(x), net(x), atol=1e-5)
        print("ok")
    """))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, GRAPHJIT_CACHE_DIR=str(tmp_path / "c"))
    seen = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
        seen.append(files(tmp_path / "c" / "code"))
    assert seen[0] and seen[1] == seen[0]
