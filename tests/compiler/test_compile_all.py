"""triton_build.compile_all without a GPU: kernels compile for an sm_90 target through a stand-in driver
(ptxas ships with Triton), and each is handed to the loader (binary onto the GPU, launcher built; here a
recording stand-in) as soon as its own compile is done, in a second pool, while later kernels are still
being submitted. A failing autotuning candidate drops out; any other kernel's failure is raised."""
import contextlib
import os
import textwrap
import threading

import pytest
import torch

triton = pytest.importorskip("triton")

from graphjit.compiler.runtime import triton_build  # noqa: E402

from .sm90 import KERNELS, Launch, sm90_module  # noqa: E402

# the shared kernels, and one that fails to compile (its block is not a power of two)
SOURCE = KERNELS + textwrap.dedent('''

    @triton.jit
    def gj_test_sized(in_ptr0, out_ptr0, xnumel, step, XBLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + xindex * step, tl.load(in_ptr0 + xindex, mask=xindex < xnumel), mask=xindex < xnumel)


    @triton.jit
    def gj_test_broken(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, 3)
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex))
''')


@pytest.fixture
def sm90(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())   # no CUDA here
    loaded, fail_to_load = [], set()

    def load(device, kernel):                 # stands in for the GPU load: records, may fail on request
        loaded.append((kernel.name, threading.current_thread().name))
        return RuntimeError("out of shared memory") if kernel.name in fail_to_load else None
    monkeypatch.setattr(triton_build, "_load", load)
    with sm90_module(tmp_path, monkeypatch, SOURCE, "gj_compile_all_kernels") as (module, _):
        yield module, loaded, fail_to_load


def run(module, names, optional=()):
    examples = {name: [torch.float32, torch.float32] for name in names}
    phases = {}
    compiled = triton_build.compile_all(module, [Launch(n) for n in names], torch.device("cuda", 0), examples,
                                        threads=2, optional=set(optional), phases=phases)
    return compiled, phases


def test_every_kernel_is_compiled_and_loaded_once_off_the_main_thread(sm90):
    module, loaded, _ = sm90
    compiled, phases = run(module, ["gj_test_scale", "gj_test_shift"])
    assert set(compiled) == {"gj_test_scale", "gj_test_shift"}
    assert all(kernel.asm.get("cubin") for kernel in compiled.values())
    assert sorted(name for name, _ in loaded) == ["gj_test_scale", "gj_test_shift"]
    assert all(thread != threading.main_thread().name for _, thread in loaded)
    assert {"submit", "wait"} <= set(phases) and all(v >= 0 for v in phases.values())


def test_a_candidate_that_fails_to_compile_or_load_drops_out(sm90):
    module, loaded, fail_to_load = sm90
    fail_to_load.add("gj_test_shift")
    compiled, _ = run(module, ["gj_test_scale", "gj_test_shift", "gj_test_broken"],
                      optional=["gj_test_shift", "gj_test_broken"])
    assert set(compiled) == {"gj_test_scale"}


def test_a_required_kernel_that_fails_is_raised(sm90):
    module, _, fail_to_load = sm90
    with pytest.raises(Exception):
        run(module, ["gj_test_scale", "gj_test_broken"])
    fail_to_load.add("gj_test_shift")
    with pytest.raises(RuntimeError, match="shared memory"):
        run(module, ["gj_test_scale", "gj_test_shift"])


def test_compile_all_waits_for_the_prewarm_thread_instead_of_hashing_triton_again(sm90, monkeypatch):
    # Triton's lru_cache'd triton_key() lets a second caller compute it again while the first is still
    # at it; compile_all must wait for graphjit's prewarm thread (up to its ready event) so that it is
    # computed once, and not for the thread's later work.
    module, loaded, _ = sm90
    release, order = threading.Event(), []

    ready, later = threading.Event(), threading.Event()

    def prewarm_work():
        release.wait(5)
        order.append("prewarm done")
        ready.set()
        later.wait(5)           # the thread's later work (the first kernel) is not waited for
    thread = threading.Thread(target=prewarm_work, daemon=True)
    thread.start()
    monkeypatch.setattr(triton_build, "_prewarm_thread", thread)
    monkeypatch.setattr(triton_build, "_prewarm_ready", ready)
    threading.Timer(0.2, release.set).start()
    real_load = triton_build._load

    def load(device, kernel):
        order.append("load")
        return real_load(device, kernel)
    monkeypatch.setattr(triton_build, "_load", load)
    compiled, _ = run(module, ["gj_test_scale", "gj_test_shift"])
    assert thread.is_alive()
    later.set()
    assert set(compiled) == {"gj_test_scale", "gj_test_shift"}
    assert order == ["prewarm done", "load", "load"]


def test_wait_prewarm_gives_up_after_its_timeout(monkeypatch):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(10,), daemon=True)
    thread.start()
    monkeypatch.setattr(triton_build, "_prewarm_thread", thread)
    monkeypatch.setattr(triton_build, "_prewarm_ready", threading.Event())
    try:
        triton_build.wait_prewarm(timeout=0.05)
        assert thread.is_alive()
    finally:
        stop.set()


def test_the_prewarm_threads_first_kernel_compiles_into_tritons_cache(sm90):
    """prewarm compiles one small kernel, so MLIR, LLVM and ptxas are set up before a graph's own compile;
    a second process finds it in Triton's cache."""
    from triton.runtime.driver import driver
    target = driver.active.get_current_target()
    triton_build._compile_first_kernel(target)
    cache = os.environ["TRITON_CACHE_DIR"]
    assert any(name.endswith(".cubin") for _, _, files in os.walk(cache) for name in files)


def test_a_launcher_built_ahead_is_the_one_the_load_builds(sm90, monkeypatch):
    """compile_all builds each kernel's launcher from the specialization Triton's JIT hands its cache hook,
    while the kernel compiles; its C source must be the one Triton's CudaLauncher makes after the compile
    (then the load finds it in Triton's cache), here for pointers, an int and an int specialized to 1."""
    module, _, _ = sm90
    from triton import knobs
    from triton.backends.nvidia import driver as nvidia
    if not hasattr(nvidia, "compile_module_from_src"):
        pytest.skip("this Triton's launcher is one module for every signature: nothing is built per kernel")
    seen = []

    def hook(*, fn, compile, **_):
        seen.append((fn.jit_function, compile["signature"], compile["constants"]))
        return False
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", hook)
    examples = {"gj_test_sized": [torch.float32, torch.float32, 1000, 1]}
    compiled = triton_build.compile_all(module, [Launch("gj_test_sized")], torch.device("cuda", 0), examples,
                                        threads=2)
    sources = []

    class Built:
        launch = None
    monkeypatch.setattr(nvidia, "compile_module_from_src", lambda src, **kwargs: sources.append(src) or Built())
    monkeypatch.setattr(nvidia, "library_dirs", lambda: [])
    triton_build._build_launcher(*seen[0])
    kernel = compiled["gj_test_sized"]
    nvidia.CudaLauncher(kernel.src, kernel.metadata)
    assert len(sources) == 2 and sources[0] == sources[1]
