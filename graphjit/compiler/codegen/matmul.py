"""Triton matmul templates for mode="max-autotune": an `mm` or `addmm` extern call may become a tiled Triton
kernel, if one of a few block configurations beats cuBLAS on the real shapes.

    plan = plan_for(extern_item)            # None unless a 2-d mm/addmm in 16-bit or fp32
    for cfg in candidates(plan): source(name, plan, cfg)   # @triton.jit text, printed into the module
    launch = TemplateLaunch(...)            # how the wrapper calls it instead of the ATen op

The kernel (one program per BLOCK_M x BLOCK_N tile of the output, programs grouped GROUP_M rows at a time
so neighbouring programs share tiles of B in L2): loads A and B tiles masked at the edges, accumulates
`tl.dot` in float32 (fp32 inputs at IEEE precision, as torch's default matmul), adds addmm's bias in
float32, rounds once to the output dtype, stores. Strides are arguments, so transposed weights
(`x @ w.t()`) need no copy. Which one wins (cuBLAS or a configuration) is timed by compile_graph and
cached with the Triton kernels' choices (compiler/autotune.py), keyed by op, shapes, strides, dtype, GPU.
Epilogue fusion: when the product's only reader is the pointwise kernel right after it (a GELU, a
residual add, a scale), that kernel's body (an `Epilogue`, printed by TritonKernel.epilogue) runs on the
accumulator tile instead of a store: the product is rounded to its dtype as the store and reload would,
then the epilogue's loads, math and stores follow, masked to the tile; the product itself is never
written. The contest then times the fused template against cuBLAS plus that kernel.
"""
import dataclasses

import torch

from ..ir import StorageView

aten = torch.ops.aten
DTYPES = {torch.bfloat16: "tl.bfloat16", torch.float16: "tl.float16", torch.float32: "tl.float32"}


@dataclasses.dataclass
class Epilogue:
    """A pointwise kernel folded into a template (see TritonKernel.epilogue)."""
    item: str               # the scheduler Kernel's name (the wrapper skips it)
    lines: list             # its body: reads `acc_in` (the rounded product) and `xindex`/`xmask`
    args: tuple             # buffer names of its pointer parameters, in order
    params: tuple           # their parameter names (by role: in_ptr0, out_ptr0 ...)
    written: tuple          # the args it stores to
    allocated: tuple        # the kernel's nodes the wrapper allocates (before the template's launch)
    launch: object          # the kernel's own Launch (timed with cuBLAS when the contest runs)

    def text(self):
        return "\n".join(self.lines)


@dataclasses.dataclass
class MatmulPlan:
    item: object            # the ExternKernel
    kind: str               # "mm" or "addmm"
    a: StorageView
    b: StorageView
    bias: object            # StorageView (addmm) or None
    out: object             # the ExternOutput
    M: int
    N: int
    K: int
    epilogue: object = None     # an Epilogue, or None

    def strides(self):
        """The stride arguments, in the kernel's order."""
        a, b, out = self.a.strides, self.b.strides, self.out.layout.strides
        found = [int(a[0]), int(a[1]), int(b[0]), int(b[1])]
        if self.bias is not None:
            found += list(_bias_strides(self.bias, self.M, self.N))
        return found + [int(out[0]), int(out[1])]

    def key_text(self):
        text = f"{self.kind} M{self.M} N{self.N} K{self.K} {self.a.dtype} strides {self.strides()}"
        return text + (f" epilogue:\n{self.epilogue.text()}" if self.epilogue is not None else "")


def _bias_strides(bias, M, N):
    """(row stride, column stride) of addmm's bias broadcast to [M, N]: 0 along broadcast dims."""
    sizes = [int(s) for s in bias.sizes]
    strides = [int(s) for s in bias.strides]
    sizes, strides = [1] * (2 - len(sizes)) + sizes, [0] * (2 - len(strides)) + strides
    return (strides[0] if sizes[0] == M else 0), (strides[1] if sizes[1] == N else 0)


def plan_for(item):
    """The MatmulPlan of an extern item that a template could compute, else None."""
    if getattr(item, "op", None) not in (aten.mm.default, aten.addmm.default) or len(item.outputs) != 1:
        return None
    (out,) = item.outputs
    kind = "mm" if item.op == aten.mm.default else "addmm"
    if out.path != () or len(out.layout.sizes) != 2 or out.layout.dtype not in DTYPES:
        return None
    if kind == "addmm":
        if any(item.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) or len(item.args) != 3:
            return None
        bias, a, b = item.args
    else:
        if item.kwargs or len(item.args) != 2:
            return None
        bias, (a, b) = None, item.args
    views = [v for v in (a, b, bias) if v is not None]
    if not all(isinstance(v, StorageView) and v.dtype == out.layout.dtype for v in views):
        return None
    if len(a.sizes) != 2 or len(b.sizes) != 2 or (bias is not None and len(bias.sizes) not in (1, 2)):
        return None
    try:
        M, K = (int(s) for s in a.sizes)
        N = int(b.sizes[1])
        if any(int(s) < 0 for v in views for s in v.strides) or min(M, N, K) <= 0:
            return None
    except TypeError:        # symbolic sizes
        return None
    return MatmulPlan(item, kind, a, b, bias, out, M, N, K)


def _pow2(n, low):
    return max(low, 1 << max(0, int(n) - 1).bit_length())


def candidates(plan):
    """Block configurations to time: a few of the usual GEMM tiles, shrunk to small M/N/K."""
    found = []
    small_m = plan.M <= 16
    tiles = ([(16, 64, 128, 4, 4), (16, 128, 64, 4, 4), (16, 32, 256, 4, 3), (16, 128, 128, 4, 3)] if small_m else
             [(64, 64, 32, 4, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 32, 8, 3),
              (128, 128, 64, 8, 3), (64, 64, 64, 4, 4)])
    for bm, bn, bk, warps, stages in tiles:
        cfg = dict(BLOCK_M=min(bm, _pow2(plan.M, 16)), BLOCK_N=min(bn, _pow2(plan.N, 16)),
                   BLOCK_K=min(bk, _pow2(plan.K, 16)), GROUP_M=8, num_warps=warps, num_stages=stages)
        shared = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * plan.a.dtype.itemsize * stages
        if cfg not in found and shared <= 160 * 1024:     # pipelined tiles must fit in shared memory
            found.append(cfg)
    return found


def gemv_config(plan):
    """The one-row template's block sizes for plan (M == 1: decode at batch 1), from benchmarks/probes/gemv_probe.py
    on the H200: 8 warps; with the weight contiguous along K (x @ w.t()), long runs of K per
    program; contiguous along N (GPT-2's Conv1D), 16 columns per program for wide outputs, 8 for narrow
    ones (more programs), and shorter K steps for long K. Within 10% of the best block sizes measured on
    every shape, and faster than cuBLAS on all but one (GPT-2's c_attn: a tie)."""
    if int(plan.b.strides[0]) == 1 and int(plan.b.strides[1]) != 1:
        block_n, block_k = (8, 512) if plan.K >= 2048 else (16, 256)
    else:
        block_n = 16 if plan.N >= 2048 else 8
        block_k = 256 if plan.K <= 1024 else 128
    return _gemv_cfg(plan, block_n, block_k)


def _gemv_cfg(plan, block_n, block_k):
    """A one-row configuration, its blocks shrunk to small N and K."""
    return dict(GEMV=1, BLOCK_N=min(block_n, _pow2(plan.N, 8)), BLOCK_K=min(block_k, _pow2(plan.K, 16)),
                num_warps=8)


def gemv_candidates(plan):
    """max-autotune's one-row configurations to race against cuBLAS (M == 1)."""
    found = [gemv_config(plan)]
    for block_n, block_k in ((8, 128), (8, 256), (16, 256), (16, 64), (8, 512)):
        cfg = _gemv_cfg(plan, block_n, block_k)
        if cfg not in found:
            found.append(cfg)
    return found


def valid(cfg, plan=None):
    """Whether a cached choice is a configuration source() can print (for `plan`: a one-row configuration
    only for a product of one row)."""
    if isinstance(cfg, dict) and cfg.get("GEMV") == 1:
        if plan is not None and plan.M != 1:
            return False
        return cfg.keys() == {"GEMV", "BLOCK_N", "BLOCK_K", "num_warps"} and all(
            isinstance(cfg[k], int) and cfg[k] > 0 and cfg[k] & (cfg[k] - 1) == 0
            for k in ("BLOCK_N", "BLOCK_K", "num_warps")) and cfg["BLOCK_N"] >= 8 and cfg["BLOCK_K"] >= 16
    keys = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"}
    return isinstance(cfg, dict) and cfg.keys() == keys and all(
        isinstance(v, int) and v > 0 for v in cfg.values()) and all(
        cfg[k] & (cfg[k] - 1) == 0 and cfg[k] >= 16 for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))


def source(name, plan, cfg, interpret=False):
    """The @triton.jit kernel of plan in configuration cfg (block sizes are constexpr parameters).
    interpret: for Triton's CPU interpreter, whose tl.dot can't multiply 16-bit tiles: they are widened
    to float32 first (the same products: a bf16 x bf16 product is exact in float32)."""
    bias = plan.bias is not None
    precision = '"ieee"' if plan.a.dtype == torch.float32 or interpret else '"tf32"'
    widen = ".to(tl.float32)" if interpret and plan.a.dtype != torch.float32 else ""
    out = DTYPES[plan.out.layout.dtype]
    epilogue = plan.epilogue
    outputs = list(epilogue.params) if epilogue is not None else ["c_ptr"]
    gemv = cfg.get("GEMV") == 1
    constexprs = ("M", "N", "K", "BLOCK_N", "BLOCK_K") if gemv else \
        ("M", "N", "K", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
    params = ["a_ptr", "b_ptr"] + (["x_ptr"] if bias else []) + outputs + ["sam", "sak", "sbk", "sbn"] + \
        (["sxm", "sxn"] if bias else []) + ["scm", "scn"] + [f"{p}: tl.constexpr" for p in constexprs]
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"    # {plan.kind} {'one-row ' if gemv else ''}template: [{plan.M}, {plan.K}] @ [{plan.K}, {plan.N}]" +
        (" + bias" if bias else "") + (" -> epilogue" if epilogue is not None else ""),
    ]
    lines += _gemv_loop() if gemv else _tiled_loop(precision, widen)
    if bias:
        lines.append("    acc += tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)"
                     ".to(tl.float32)")
    if epilogue is None:
        lines.append(f"    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to({out}), mask=mask)")
        return "\n".join(lines)
    # the epilogue reads the product as the unfused kernel would: stored in its dtype, loaded as float32
    rounded = "acc" if plan.out.layout.dtype == torch.float32 else f"acc.to({out}).to(tl.float32)"
    lines += [f"    acc_in = {rounded}",
              f"    xindex = rm[:, None] * {plan.N} + rn[None, :]",
              "    xmask = mask"]
    lines += ["    " + line for line in epilogue.lines]
    return "\n".join(lines)


def _gemv_loop():
    """One row: each program owns BLOCK_N output columns and walks K in BLOCK_K steps, multiplying in
    float32 and summing once at the end (no tensor-core tile padded from 1 row to 16)."""
    # part [BLOCK_K, BLOCK_N]: the weight tile's products, summed over K once after the loop
    return [
        "    pid = tl.program_id(0)",
        "    rm = tl.full([1], 0, tl.int32)",
        "    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    rk = tl.arange(0, BLOCK_K)",
        "    part = tl.full((BLOCK_K, BLOCK_N), 0.0, tl.float32)",
        "    for k in range(0, K, BLOCK_K):",
        "        kk = k + rk",
        "        a = tl.load(a_ptr + kk * sak, mask=kk < K, other=0.0).to(tl.float32)",
        "        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)",
        "        part += a[:, None] * b.to(tl.float32)",
        "    acc = tl.reduce(part, 0, gj_add)[None, :]",     # the module prelude's add (runs in the interpreter)
        "    mask = (rm[:, None] < M) & (rn[None, :] < N)",
    ]


def _tiled_loop(precision, widen):
    return [
        "    pid = tl.program_id(0)",
        "    grid_m = (M + BLOCK_M - 1) // BLOCK_M",
        "    grid_n = (N + BLOCK_N - 1) // BLOCK_N",
        "    width = GROUP_M * grid_n",
        "    group = pid // width",
        "    group_size = tl.minimum(grid_m - group * GROUP_M, GROUP_M)",
        "    pid_m = group * GROUP_M + (pid % group_size)",
        "    pid_n = (pid % width) // group_size",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    rk = tl.arange(0, BLOCK_K)",
        "    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)",
        "    for k in range(0, K, BLOCK_K):",
        "        kk = k + rk",
        "        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)",
        "        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)",
        f"        acc += tl.dot(a{widen}, b{widen}, input_precision={precision})",
        "    mask = (rm[:, None] < M) & (rn[None, :] < N)",
    ]


@dataclasses.dataclass
class TemplateLaunch:
    """How the wrapper launches a template instead of calling the ATen op (compile_all reads the same
    fields as from a Launch)."""
    name: str
    plan: MatmulPlan
    grid: int
    constexprs: dict
    num_warps: int
    num_stages: int
    kind: str = "matmul template"
    cfg: dict = None        # the configuration it was made from (what max-autotune caches when it wins)


def launch(name, plan, cfg):
    if cfg.get("GEMV") == 1:
        constexprs = dict(M=plan.M, N=plan.N, K=plan.K, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"])
        return TemplateLaunch(name, plan, -(-plan.N // cfg["BLOCK_N"]), constexprs, cfg["num_warps"], 3,
                              cfg=dict(cfg))
    grid = -(-plan.M // cfg["BLOCK_M"]) * -(-plan.N // cfg["BLOCK_N"])
    constexprs = dict(M=plan.M, N=plan.N, K=plan.K, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                      BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"])
    return TemplateLaunch(name, plan, grid, constexprs, cfg["num_warps"], cfg["num_stages"], cfg=dict(cfg))


def views(plan):
    """The input tensor arguments, in the kernel's order (the output, or the epilogue's buffers, follow)."""
    return [plan.a, plan.b] + ([plan.bias] if plan.bias is not None else [])
