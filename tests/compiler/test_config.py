"""graphjit.config: one module holds every knob (comment, type, default, environment variable), read once;
patch() scopes a change; knobs that change generated code are part of the on-disk cache keys."""
import os
import re
import subprocess
import sys

import pytest
import torch

import graphjit
from graphjit import config
from graphjit.compiler import autotune
from graphjit.compiler.runtime import cpp_build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_patch_sets_and_restores_even_on_error():
    before = config.max_fusion_size
    with config.patch(max_fusion_size=3, vector_math=0):
        assert (config.max_fusion_size, config.vector_math) == (3, 0)
    assert config.max_fusion_size == before and config.vector_math == 1
    with pytest.raises(RuntimeError), config.patch(max_fusion_size=5):
        raise RuntimeError
    assert config.max_fusion_size == before
    with pytest.raises(AttributeError, match="no knob max_fusion; known: recompile_limit"):
        with config.patch(max_fusion=1):
            pass


def test_every_knob_is_declared_once_with_a_comment():
    source = open(config.__file__).read().splitlines()
    for name, knob in config.KNOBS.items():
        lines = [i for i, line in enumerate(source) if re.match(rf"{name} = _knob\(", line)]
        assert len(lines) == 1, name
        above = source[lines[0] - 1]
        assert above.startswith("#") or re.match(r"\w+ = _knob\(", above), f"{name} has no comment"
        assert knob.env.startswith("GRAPHJIT_") and isinstance(knob.default, knob.type)


def test_no_other_module_reads_graphjit_environment_variables():
    package = os.path.dirname(graphjit.__file__)
    readers = []
    for folder, _, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != config.__file__ and \
                    re.search(r"environ(\.get)?\s*[\[(]\s*[\"']GRAPHJIT_", open(path).read()):
                readers.append(os.path.relpath(path, package))
    assert readers == []


def _import_config(env):
    code = "from graphjit import config; print(config.recompile_limit, config.cxx_flags, config.triton_gemv)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})


def test_environment_is_parsed_by_type_and_bad_values_name_their_variable():
    out = _import_config({"GRAPHJIT_RECOMPILE_LIMIT": "3", "GRAPHJIT_CXX_FLAGS": "-O1 -shared",
                          "GRAPHJIT_TRITON_GEMV": "0"})
    assert out.stdout.split("\n")[0] == "3 ('-O1', '-shared') 0", out.stderr
    bad = _import_config({"GRAPHJIT_MAX_FUSION_SIZE": "many"})
    assert bad.returncode != 0 and "GRAPHJIT_MAX_FUSION_SIZE='many' is not a valid int" in bad.stderr


@pytest.mark.parametrize("raw,value", [("0", False), ("false", False), ("No", False), ("off", False),
                                       ("1", True), ("TRUE", True), ("yes", True), ("on", True)])
def test_boolean_knobs_parse_words_and_digits(raw, value):
    assert config._parse(bool, raw) is value


def test_a_bad_boolean_names_its_variable():
    code = "from graphjit import config; print(config.strict_fresh_guards)"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT, "GRAPHJIT_STRICT_FRESH_GUARDS": "0"})
    assert run.stdout.strip() == "False", run.stderr
    bad = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT, "GRAPHJIT_STRICT_FRESH_GUARDS": "maybe"})
    assert bad.returncode != 0 and "GRAPHJIT_STRICT_FRESH_GUARDS='maybe' is not a valid bool" in bad.stderr


def test_flipping_a_codegen_knob_misses_the_kernel_cache(tmp_path, monkeypatch):
    """The same graph compiled again hits the on-disk kernel cache; with a codegen knob flipped (one that
    leaves this C++ source as it is) it misses."""
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(config, "triton_cpu", 0)
    builds = []
    real_build = cpp_build._build
    monkeypatch.setattr(cpp_build, "_build", lambda *args: builds.append(args[1]) or real_build(*args))

    def compile_and_run():
        graphjit.reset()
        cpp_build._loaded.clear()

        def f(x):
            return (x.sin() * 3).relu()
        x = torch.randn(64)
        torch.testing.assert_close(graphjit.compile(f, backend="graphjit")(x), f(x))
    compile_and_run()
    compile_and_run()
    assert len(builds) == 1                     # the second compile found the first's library
    with config.patch(triton_split_rows=config.triton_split_rows + 1):
        compile_and_run()
    assert len(builds) == 2 and builds[0] != builds[1]


def test_autotuning_choices_are_keyed_by_codegen_knobs():
    pytest.importorskip("triton")
    key = autotune.cache_key("kernel source", "k", None)
    with config.patch(triton_mm_epilogues=0):
        assert autotune.cache_key("kernel source", "k", None) != key
    with config.patch(triton_compile_threads=config.triton_compile_threads + 1):   # how fast, not what
        assert autotune.cache_key("kernel source", "k", None) == key
