"""The kernel binaries a Triton graph's cache entry keeps (runtime/triton_build.binary_record) and the checks
load_binary makes before loading one: a record that does not fit this process (another Triton build or
cache-invalidating environment, a signature in another order, another kernel's binary, damaged base64,
another binary type) is refused with ValueError, so the entry's kernels compile through Triton instead.
No GPU needed: the checks come before the driver (tests/cuda/test_graph_cache_cuda.py loads real ones)."""
import json
from collections import namedtuple
from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from graphjit.compiler.runtime import triton_build  # noqa: E402


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)


@triton.jit
def other(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    pass


class Reached(Exception):
    """load_binary got past its checks to the driver."""


def compiled_kernel(tmp_path, fn=scale, name="scale", signature=None, constants=None):
    """A stand-in for the CompiledKernel compile_all returns: metadata as Triton writes it, a binary."""
    metadata = {"name": name, "hash": "abc123", "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
                "num_warps": 4, "shared": 0, "debug": False, "instrumentation_mode": ""}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(metadata))
    meta = dict(metadata, target=GPUTarget("cuda", 90, 32))
    signature = signature or {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return SimpleNamespace(metadata=namedtuple("KernelMetadata", sorted(meta))(**meta),
                           metadata_group={f"{name}.json": str(path), f"{name}.cubin": str(tmp_path / "x")},
                           src=SimpleNamespace(fn=fn, signature=signature,
                                               constants=constants if constants is not None else {(3,): 128}),
                           asm={"cubin": b"\x7fELF binary"}, kernel=b"\x7fELF binary", hash="abc123")


@pytest.fixture
def reach(monkeypatch):
    def reached():
        raise Reached
    monkeypatch.setattr(triton_build, "_driver_ready", reached)


def test_a_fitting_record_passes_every_check(tmp_path, reach):
    record = triton_build.binary_record(compiled_kernel(tmp_path))
    assert record is not None and record["signature"][0] == ["x_ptr", "*fp32"]
    json.dumps(record, allow_nan=False)
    with pytest.raises(Reached):
        triton_build.load_binary(scale, json.loads(json.dumps(record)), "cuda")


def _reordered(r):
    r["signature"] = r["signature"][::-1]


def _another_build(r):
    r["triton"] = r["triton"] + "x"


def _another_environment(r):
    r["environment"] = dict(r["environment"], TRITON_DEFAULT_FP_FUSION="0")


def _damaged(r):
    r["binary"] = r["binary"][:-4] + "!!!!"


def _another_type(r):
    r["ext"] = "hsaco"


def _another_format(r):
    r["format"] = 1


@pytest.mark.parametrize("fault", [_reordered, _another_build, _another_environment, _damaged, _another_type,
                                   _another_format])
def test_a_record_that_does_not_fit_is_refused(tmp_path, reach, fault):
    record = triton_build.binary_record(compiled_kernel(tmp_path))
    fault(record)
    with pytest.raises(ValueError):
        triton_build.load_binary(scale, record, "cuda")


def test_another_kernels_record_is_refused(tmp_path, reach):
    """other's arguments are not scale's; and a binary named for another kernel is refused even where the
    arguments agree."""
    record = triton_build.binary_record(compiled_kernel(tmp_path))
    with pytest.raises(ValueError, match="arguments"):
        triton_build.load_binary(other, record, "cuda")
    renamed = triton_build.binary_record(compiled_kernel(tmp_path, name="other_name"))
    with pytest.raises(ValueError, match="binary of other_name"):
        triton_build.load_binary(scale, renamed, "cuda")


def test_a_debug_process_refuses_a_binary_made_without_debug(tmp_path, reach, monkeypatch):
    from triton import knobs
    record = triton_build.binary_record(compiled_kernel(tmp_path))
    monkeypatch.setattr(knobs.runtime, "debug", True)
    with pytest.raises(ValueError, match="debug"):
        triton_build.load_binary(scale, record, "cuda")


@pytest.mark.parametrize("signature, constants", [
    ({"x_ptr": ("*fp32", "i32"), "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, None),   # a tuple
    (None, {(3,): float("inf")}),
    (None, {(3,): object()}),
])
def test_what_json_cannot_hold_exactly_is_not_kept(tmp_path, signature, constants):
    assert triton_build.binary_record(compiled_kernel(tmp_path, signature=signature, constants=constants)) is None
