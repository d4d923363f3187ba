"""The kernel cache, rebuilds of bad cache entries, compiler failures, and runtime errors."""
import os
import subprocess

import pytest
import torch

from graphjit import config
from graphjit.compiler.codegen.cpp import prelude
from graphjit.compiler.runtime import CompileError, cpp_build

from .harness import compile_cases, make, run_cases

SOURCE = prelude() + 'extern "C" int twice(int x) { return 2 * x; }\n'


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(cpp_build, "_loaded", {})
    return tmp_path


def count_compiles(monkeypatch):
    calls = []
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        if "-shared" in cmd:
            calls.append(cmd)
        return real_run(cmd, *args, **kwargs)
    monkeypatch.setattr(cpp_build.subprocess, "run", run)
    return calls


def test_second_load_uses_the_disk_cache(fresh_cache, monkeypatch):
    compiles = count_compiles(monkeypatch)
    assert cpp_build.load(SOURCE).twice(21) == 42
    monkeypatch.setattr(cpp_build, "_loaded", {})          # a new process: only the disk cache is left
    assert cpp_build.load(SOURCE).twice(4) == 8
    assert len(compiles) == 1
    names = sorted(os.listdir(fresh_cache))
    assert [n.rsplit(".", 1)[1] for n in names] == ["cpp", "so", "sha256"]   # no temporary files left behind


def test_corrupt_cached_library_is_rebuilt(fresh_cache, monkeypatch):
    compiles = count_compiles(monkeypatch)
    cpp_build.load(SOURCE)
    (so,) = [p for p in fresh_cache.iterdir() if p.suffix == ".so"]
    bad = fresh_cache / "bad"
    bad.write_bytes(b"not a shared library")
    os.replace(bad, so)      # a new file (never rewrite a loaded library in place: its pages are mapped)
    monkeypatch.setattr(cpp_build, "_loaded", {})
    assert cpp_build.load(SOURCE).twice(5) == 10
    assert len(compiles) == 2


def test_cache_key_covers_compiler_flags(fresh_cache, monkeypatch):
    key = cpp_build.cache_key(SOURCE)
    monkeypatch.setattr(config, "cxx_flags", config.cxx_flags + ("-DX=1",))
    assert cpp_build.cache_key(SOURCE) != key


def test_compile_error_says_how_to_reproduce(fresh_cache):
    with pytest.raises(CompileError, match="reproduce with:"):
        cpp_build.load('extern "C" int broken( { }')


def test_a_failed_link_keeps_the_linkers_message(fresh_cache):
    """ld removes its output when it fails: the CompileError still carries the command and ld's stderr
    (it was lost to a FileNotFoundError on removing the output), and no temporary file stays."""
    import os
    with pytest.raises(CompileError, match="reproduce with:(.|\n)*gj_no_such_library"):
        cpp_build.load('// link: -lgj_no_such_library\nextern "C" int ok() { return 1; }')
    assert not [n for n in os.listdir(config.cache_dir) if n.endswith(".so") or n.startswith(".tmp.")]


def test_missing_compiler_warns_once_and_runs_eagerly(fresh_cache, monkeypatch):
    monkeypatch.setattr(config, "cxx", "no-such-cxx-compiler")
    monkeypatch.setattr(cpp_build, "_compiler_ids", {})
    monkeypatch.setattr(config, "raise_errors", 0)     # the user's setting: warn and run eagerly
    x = make((8, 8), torch.float32)
    with pytest.warns(RuntimeWarning, match="not found"):
        compiled, inputs = compile_cases(lambda t: t.exp() * 3, [(x,)])
    torch.testing.assert_close(compiled(*inputs)[0], x.exp() * 3)


def test_embedding_index_out_of_range_raises():
    w = make((10, 4), torch.float32)
    compiled, _ = compile_cases(lambda w, i: torch.nn.functional.embedding(i, w), [(w, torch.tensor([1, 2]))])
    assert compiled(w, torch.tensor([3, 9]))[0].shape == (2, 4)
    with pytest.raises(IndexError, match="index out of range"):
        compiled(w, torch.tensor([3, 10]))


def test_wrong_strides_run_eagerly():
    x = make((6, 5), torch.float32)
    compiled, _ = compile_cases(lambda t: t * 2, [(x,)])
    y = make((5, 6), torch.float32).t()
    torch.testing.assert_close(compiled(y)[0], y * 2)


def test_inputs_needing_grad_run_eagerly():
    x = make((4, 4), torch.float32).requires_grad_()
    compiled, _ = compile_cases(lambda t: (t * 2).sum(), [(x,)])
    out = compiled(x)[0]
    out.backward()
    torch.testing.assert_close(x.grad, torch.full((4, 4), 2.0))


def test_compiled_under_no_grad_runs_eagerly_with_grad_on():
    w = make((4, 4), torch.float32).requires_grad_()
    with torch.no_grad():
        compiled, _ = compile_cases(lambda t: t.exp(), [(w,)])
        assert not compiled(w)[0].requires_grad
    assert compiled(w)[0].requires_grad


def test_results_are_fresh_tensors():
    compiled = run_cases(lambda t: t.clone(), [(make((3, 3), torch.float32),)])
    x = make((3, 3), torch.float32)
    (out,) = compiled(x)
    assert out.data_ptr() != x.data_ptr()


def test_cached_library_of_another_key_is_rebuilt(fresh_cache, monkeypatch):
    other = SOURCE.replace("2 * x", "3 * x")
    cpp_build.load(SOURCE)
    cpp_build.load(other)
    path = os.path.join(fresh_cache, cpp_build.cache_key(SOURCE) + ".so")
    os.replace(os.path.join(fresh_cache, cpp_build.cache_key(other) + ".so"), path)
    monkeypatch.setattr(cpp_build, "_loaded", {})
    assert cpp_build.load(SOURCE).twice(5) == 10       # the impostor (3 * x) was detected and replaced


def test_compiler_error_warns_and_runs_eagerly(monkeypatch):
    from graphjit import config
    from graphjit.compiler import lowering
    monkeypatch.setattr(config, "raise_errors", 0)

    def broken(x):
        raise ValueError("a bug in a lowering")
    monkeypatch.setitem(lowering.LOWERINGS, torch.ops.aten.sin.default, broken)
    x = make((4,), torch.float32)
    with pytest.warns(RuntimeWarning, match="a bug in a lowering"):
        compiled, _ = compile_cases(lambda t: t.sin(), [(x,)])
    torch.testing.assert_close(compiled(x)[0], x.sin())


def test_other_dtype_runs_eagerly():
    x = make((6, 5), torch.float32)
    compiled, _ = compile_cases(lambda t: t * 2, [(x,)])
    y = make((6, 5), torch.float64)
    torch.testing.assert_close(compiled(y)[0], y * 2)


def test_generated_wrapper_lines_are_in_linecache():
    """A compiled wrapper runs under a file name of its own that linecache knows (codegen.wrapper.run_source):
    tracebacks, profilers and memory snapshots show its generated lines. Its result is eager's."""
    import linecache

    from graphjit.backends.registry import graphjit_backend

    def fn(x):
        return (x.sin() + 1).sum(-1)
    x = torch.randn(4, 8)
    call = graphjit_backend(torch.fx.symbolic_trace(fn), [x])
    torch.testing.assert_close(call(x), fn(x))
    code = getattr(call, "__code__", None)
    assert code is not None and code.co_filename.startswith("<graphjit wrapper "), code
    assert linecache.getline(code.co_filename, code.co_firstlineno).startswith("def call("), code.co_filename


def test_a_check_that_returns_nothing_is_not_dead_code():
    """linalg.cholesky traces to linalg_cholesky_ex and aten._linalg_check_errors, which returns nothing
    and raises eager's LinAlgError; fx on torch 2.11 took it for dead code and the compiled graph returned a
    factor of a matrix that is not positive definite."""
    compiled, inputs = compile_cases(lambda a: torch.linalg.cholesky(a * 2), [(-torch.eye(4),)])
    with pytest.raises(torch.linalg.LinAlgError):
        compiled(*inputs)


def test_a_cache_folder_that_cant_be_written_still_builds_kernels(tmp_path, monkeypatch):
    """A read-only cache (an image's, a read-only mount) serves what it holds; a library it lacks is built in
    a folder of this process's own (the build wrote into the cache folder, and the graph ran eagerly)."""
    (tmp_path / "a_file").write_text("")
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "a_file" / "cache"))    # makedirs fails there
    monkeypatch.setattr(cpp_build, "_loaded", {})
    monkeypatch.setattr(cpp_build, "_private", [])
    with pytest.warns(RuntimeWarning, match="can't be written"):
        assert cpp_build.load(SOURCE).twice(21) == 42
    assert cpp_build.built_path(SOURCE).startswith(cpp_build._private[0])


def test_link_arguments_with_spaces_reach_the_linker(fresh_cache):
    """A `// link:` line is shell-quoted: a library in a cache folder whose path has a space links."""
    import shlex
    folder = fresh_cache / "with space"
    folder.mkdir()
    config.cache_dir = str(folder)
    helper = prelude() + 'extern "C" int helper_twice(int x) { return 2 * x; }\n'
    path = cpp_build.built_path(helper)
    assert " " in path
    user = (f"// link: {shlex.quote(path)}\n" + prelude() +
            'extern "C" int helper_twice(int);\nextern "C" int four_times(int x) { return helper_twice(2 * x); }\n')
    assert cpp_build.load(user).four_times(3) == 12
