"""A GPU target without a GPU, for tests of Triton's compile path: Triton's driver replaced by the stand-in
the compile workers use (an sm_90 target; ptxas ships with Triton), a fresh Triton cache, and a kernel
module written from source and imported as Triton's JIT needs it (a real file, in sys.modules)."""
import contextlib
import importlib.util
import os
import sys
import textwrap

import pytest

from graphjit.compiler.runtime import triton_workers

# Two small kernels for the tests to compile: each reads in_ptr0 and writes out_ptr0, XBLOCK at a time.
KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def gj_test_scale(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex) * 2.0)


    @triton.jit
    def gj_test_shift(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex) + 1.0)
''')


class Launch:
    """What the compile paths read of a graphjit Launch: the kernel's name, constexprs, warps, stages."""

    def __init__(self, name):
        self.name, self.constexprs, self.num_warps, self.num_stages = name, {"XBLOCK": 256}, 4, 1


@contextlib.contextmanager
def sm90_module(tmp_path, monkeypatch, source, stem):
    """(module, Triton cache folder) while the stand-in driver is active; skips without an NVIDIA backend."""
    try:
        from triton.runtime.driver import driver
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
        from triton.backends.compiler import GPUTarget
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no NVIDIA backend in this Triton ({e})")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    saved = driver._active
    driver.set_active(triton_workers.StandInDriver(GPUTarget("cuda", 90, 32)))
    path = tmp_path / f"{stem}.py"
    path.write_text(source)
    name = f"{stem}_{os.getpid()}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module, tmp_path / "triton-cache"
    finally:
        driver._active = saved
        sys.modules.pop(name, None)
