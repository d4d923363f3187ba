"""runtime/triton_workers: Triton kernels compiled in worker processes land in Triton's on-disk cache
under the key the parent's own compile looks up, so the parent then compiles nothing. Runs without a
GPU: a stand-in driver names an sm_90 target (ptxas ships with Triton), in this process as in the
workers."""
import os

import pytest
import torch

triton = pytest.importorskip("triton")

from graphjit.compiler.runtime import triton_workers  # noqa: E402

from .sm90 import KERNELS as SOURCE, Launch, sm90_module  # noqa: E402

@pytest.fixture
def sm90(tmp_path, monkeypatch):
    with sm90_module(tmp_path, monkeypatch, SOURCE, "gj_worker_test_kernels") as found:
        yield found


def cache_entries(root):
    return sorted(os.listdir(root)) if root.exists() else []


def test_workers_fill_the_cache_the_parent_reads(sm90):
    module, cache = sm90
    launches = [Launch("gj_test_scale"), Launch("gj_test_shift")]
    examples = {launch.name: [torch.float32, torch.float32] for launch in launches}
    options = lambda launch: dict(**launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages)
    specs = triton_workers.specializations(module, launches, examples, options)
    assert set(specs) == {"gj_test_scale", "gj_test_shift"}
    assert cache_entries(cache) == []                   # binding only: nothing compiled in this process
    pool = triton_workers.CompilePool(2)
    try:
        target = {"backend": "cuda", "arch": 90, "warp_size": 32}
        failures = pool.compile([(module.__file__, module.__name__, name, spec, target)
                                 for name, spec in specs.items()])
    finally:
        pool.close()
    assert failures == {}
    filled = cache_entries(cache)
    assert filled                                       # the workers compiled
    for launch in launches:                             # the parent's compile: cache hits, nothing new
        kernel = getattr(module, launch.name).warmup(*examples[launch.name], grid=(1,), **options(launch))
        assert kernel is not None and kernel.asm.get("cubin")
    assert cache_entries(cache) == filled


def test_a_failing_job_is_reported_not_raised(sm90):
    module, _ = sm90
    pool = triton_workers.CompilePool(1)
    try:
        failures = pool.compile([(module.__file__, module.__name__, "gj_test_scale", "{not json",
                                  {"backend": "cuda", "arch": 90, "warp_size": 32})])
    finally:
        pool.close()
    assert list(failures) == ["gj_test_scale"] and "Error" in failures["gj_test_scale"]


def test_a_dead_worker_is_started_again(sm90):
    module, _ = sm90
    specs = triton_workers.specializations(module, [Launch("gj_test_scale")],
                                           {"gj_test_scale": [torch.float32, torch.float32]},
                                           lambda launch: dict(**launch.constexprs, num_warps=4, num_stages=1))
    pool = triton_workers.CompilePool(1)
    try:
        pool.workers[0].process.kill()
        pool.workers[0].process.wait()
        job = (module.__file__, module.__name__, "gj_test_scale", specs["gj_test_scale"],
               {"backend": "cuda", "arch": 90, "warp_size": 32})
        assert pool.compile([job]) == {}
    finally:
        pool.close()
