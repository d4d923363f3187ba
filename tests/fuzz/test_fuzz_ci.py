"""A short seeded fuzz run: random tensor programs through graphjit's compiler (the C++ path, and the Triton
path in Triton's interpreter where triton is installed) and random Python programs through capture only
(backend="eager"), each against eager PyTorch / plain Python.

A failing seed prints its reproducer (shrunk a little; saved under pytest's tmp dir) and the command that
reruns it. Longer runs by hand (shrunk reproducers go to /tmp/fuzz_out):

    python -m tests.fuzz --seed 1 --minutes 30 [--mode python] [--triton]

FOUND holds the programs longer runs found failing, one or two per cause: they run here from then on, as
regression tests of their fixes. KNOWN_OPEN marks the seeds that fail on a bug still open (xfail, not
strict: an XPASS means the bug is gone and the entry can go). A seed's program changes when the generator
does: after a change to generator.py, ops.py or pyprog.py, rerun the FOUND seeds' causes by their own
tests (each cause has one in tests/compiler or tests/capture) rather than trusting the seeds.
"""
import functools

import pytest

from ..conftest import runs_here
from . import generator, pyprog, shrink
from .runner import FAILURES, describe
from .worker import Worker

# Programs longer runs found failing, and what they found (shrunk reproducers: python -m tests.fuzz
# --seed 0 --start SEED --count 1 [--mode python | --triton]).
FOUND = {
    ("tensor", 600361): "bool index_add(alpha=2) raised: alpha not converted to self's dtype",
    ("tensor", 600106): "16-bit training batch_norm: running stats read in the traced dtype",
    ("tensor", 600375): "a float -> int -> float round trip kept -0.0",
    ("tensor", 600449): "a bfloat16 value cast to int64 from its unrounded float32 value",
    ("tensor", 1100163): "outputs viewing one intermediate came back as separate tensors",
    ("tensor", 1100256): "a clamp bound on a bfloat16 tensor not rounded to bfloat16",
    ("tensor", 1100373): "an in-place op reading, through another view, elements it writes",
    ("tensor", 1100455): "var/std overflowed in float32 where eager accumulates in float64",
    ("tensor", 1400552): "argmax of a lazy 16-bit value compared unrounded (index out of range)",
    ("tensor", 1500001): "16-bit instance_norm running stats",
    ("tensor", 1500413): "a write through a slice of an expanded input applied twice",
    ("tensor", 1600155): "clamp to a NaN number bound",
    ("tensor", 1700525): "a write through an expand of a bool tensor subtracted bools",
    ("tensor", 1900261): "a resume function's stack parameters clashed with its entry's temporaries",
    ("triton", 800700): "Triton: integer pow computed in floating point",
    ("triton", 800463): "Triton: a negative Python int with a uint8 tensor raised OverflowError",
    ("triton", 800438): "Triton: sign/sgn of a bool tensor (numpy boolean subtract)",
    ("triton", 800097): "Triton: a float64 -> bfloat16 cast gave 0",
    ("triton", 2200124): "Triton: int32 pow overflow did not wrap",
    ("triton", 2200323): "Triton: std overflowed in float32",
    ("triton", 2200328): "Triton interpreter: bfloat16 subnormals widened to 0 (remainder gave nan)",
    ("triton", 2300392): "Triton: argmax of a lazy bfloat16 value compared unrounded",
    ("triton", 8300727): "group_norm of one-element groups: eager and compiled both rounding noise times "
                         "1/sqrt(eps), in different elements (triage: noise_dominated)",
    ("python", 300151): "a class attribute the frame writes was not guarded (getattr(cls, name, default))",
    ("python", 702099): "an attribute set, then deleted in one frame: AttributeError",
    ("python", 701421): "dict del of a key the frame read: KeyError in the replay",
    ("python", 702328): "setattr(obj, name, d[k]) then d[k] = other: the attribute got the new value",
    ("python", 3101402): "the replay read a value after an earlier effect overwrote its source",
    ("python", 3300224): "del lst[0] replayed before a later effect read lst[0]",
    ("tensor", 1600373): "bool_tensor ** True: int64 (torch's meta function) where eager's is bool",
    ("tensor", 1700416): "bfloat16 eval batch_norm rounds once where eager rounds each step",
    ("tensor", 1800481): "float32 sin differs by 1 ulp from eager's, read by a float64 sum",
    ("tensor", 19401698): "max pooling kept the last of equal elements (0.0 after -0.0), eager the first",
    ("tensor", 19802297): "bool tensor ** True: the fake kernel's dtype (int64) read while tracing, eager's bool",
    ("tensor", 1900407): "the sign of layer_norm's zero results (copysign reads it)",
    ("tensor", 7000041): "float32 atan2 one ulp from eager's, compared == to its amax (rounding replay)",
    ("tensor", 7100188): "signbit of log2's NaN, whose sign IEEE leaves open (rounding replay)",
    ("tensor", 20200845): "signbit of a NaN converted to bfloat16: eager's conversion of a 0-d tensor gives "
                          "+NaN, its vector loop keeps the sign (rounding replay)",
    ("tensor", 7100142): "bfloat16 logit(eps): 1 - eps not rounded to bfloat16 (6.9 for eager's inf)",
    ("tensor", 4800082): "softmax of a fused product: gcc contracted a * b - max into an fma (a NaN row)",
    ("tensor", 4800733): "layer_norm's shifted mean overflowed float32 for a row starting at -3e38",
    ("triton", 9700896): "Triton: a kernel without elements deleted buffers it kept in registers, never "
                         "allocated (UnboundLocalError)",
    ("tensor", 9400919): "the float64 replay viewed a float64 tensor as int32 (a 0-d one raised), so eager's "
                         "layer_norm overflow could not be judged (the program now views float32 in both runs)",
    ("tensor", 10000042): "copy_(1e20) into int64: the C++ literal kept int(1e20)'s digits and wrapped, where "
                          "eager's cast gives the lowest int64",
    ("triton", 10300938): "clamp(min=nan) where eager ignores the bound (torch 2.11): compiled returned the "
                          "input itself, eager a new tensor",
    ("triton", 10302233): "the mean of -3e38, -3e38 and inf: float32's sum is inf or NaN by the order it adds "
                          "in (triage: the overflow replay of the inputs' finite part)",
    ("grad-tensor", 10100671): "group_norm of a constant group: every gradient is 1/sqrt(eps) times rounding "
                               "error, a scalar's sum of it closer to 0 in eager's run by chance (triage: "
                               "the graph's gradient noise)",
    ("grad-tensor", 10100884): "masked_fill_ through an expand in a graph needing gradients: AOTAutograd "
                               "added the write once per element sharing memory (now: runs as captured)",
    ("grad-tensor", 10101142): "floor_divide of values needing gradients, live across a break: AOTAutograd "
                               "raised for its missing derivative, and at new sizes into the program (now: runs "
                               "as captured; a PerSize compile failure runs the graph as captured)",
    ("grad-tensor", 10100668): "x.msort() and x.sort(0).values merged by AOTAutograd's CSE: one tensor for two "
                               "outputs eager returns separately (now: the lone one is copied)",
    ("dynamic-tensor", 20001551): "as_strided of an input the graph wrote earlier: replayed on the written value",
    ("dynamic-tensor", 12801162): "signbit of minimum(x, x) at a NaN: eager's vector loop gives a NaN with the "
                                  "sign bit set, ours the operand (triage: min/max NaNs have a random sign)",
    ("dynamic-tensor", 12201763): "a piece of a tensor_split of width n // 3 (1 while tracing), reshaped to its "
                                  "reversed shape: eager's view of the input came back as a copy (the view's "
                                  "strides were not found with the width symbolic)",
    ("dynamic-tensor", 12000101): "copy_ into a tensor the graph made, then a slice of it returned, with "
                                  "symbolic sizes: the rewritten copy's views kept the old storage in their "
                                  "metas and the output was returned as a slice of the tensor before the copy",
    ("dynamic-tensor", 10402015): "a view of an input, returned and read by an extern op: the copy made in "
                                  "the op's traced strides replaced the view for the output too",
    ("triton", 10800862): "a CPU convolution on one thread laid its result out contiguously where its meta "
                          "function said otherwise; the wrapper viewed it with the meta's strides",
    ("tensor", 10501619): "the finite-part overflow replay wrote through an expanded input and raised, so "
                          "pow's float32 overflow went untriaged (it now zeroes non-finite values through "
                          "the storage)",
    ("grad-tensor", 10600281): "a saved transpose of a value laid out like its transposed input: realized in "
                               "dense strides, and the backward's flat view of it raised",
    ("grad-tensor", 11000352): "sgn's gradient, an efficient zero tensor (no storage), scaled and summed by a "
                               "backward kernel that read its null data pointer: a segfault",
    ("grad-tensor", 11000913): "F.normalize's gradient, a column sum over two rows of ten columns: gcc 12's "
                               "straight-line vectorizer dropped a row from the last column (now "
                               "-fno-tree-slp-vectorize)",
    ("triton", 11101709): "a store of s // 2 - 1 elements (0 for s = 3) fused into a full reduction's kernel: "
                          "the row count, guarded to be at most 1, was taken as 1 and the store wrote into an "
                          "empty buffer (a segfault)",
    ("triton", 11101416): "a write through a view chain with an as_strided: functionalization refused it and "
                          "the compiler warned it had failed (now: runs as captured, the reason logged)",
    ("triton", 11300032): "sign of all()'s bool result: the reduction's result had no dtype noted, so the "
                          "bool form of sign was not taken and the interpreter refused a bool subtract",
    ("triton", 11300937): "signbit(-x) of a NaN input: Triton's neg as x * -1.0 kept the NaN's sign (now a "
                          "sign-bit flip, gj_neg)",
    ("triton", 11600443): "frac(-0.0) through torch's decomposition x - floor(|x|) * sign(x): -0.0 where "
                          "eager's x - trunc(x) gives +0.0",
    ("triton", 11701313): "an amax kept in registers whose only reader was an output without elements: the "
                          "kernel took no buffer and its launch was printed with an empty argument list",
    ("triton", 11701683): "nansum of a 0-d -0.0: Triton's sum of a row of one element was the element (-0.0), "
                          "eager's starts from +0.0",
    ("triton", 11702166): "einsum of an [n, n] input, then a graph break: the graph returned the size n "
                          "twice and the wrapper wrapped the second as a fresh view (aten.alias of an int)",
    ("triton", 12300406): "a masked write into a tensor the graph made, then a piece of a split of it, at "
                          "the second size (symbolic): the split's items kept metas on the tensor before the "
                          "write and the output was read from the old value",
    ("grad-tensor", 10100058): "abs_ of an input needing gradients: AOTAutograd saved the input, then wrote "
                               "back into it, and the backward raised (now: runs as captured)",
    ("grad-tensor", 4000075): "norm(0) clamped in place: AOTAutograd's joint trace refused it and the backend "
                              "warned it failed (now: runs as captured, the reason logged)",
    ("grad-tensor", 4100007): "pow(x, -0.5) at -0.0: inf where eager's 1/sqrt gives -inf (pow(x, 0.5)'s "
                              "gradient)",
    ("grad-tensor", 4100065): "a training graph writing into an input that shares memory with another: "
                              "AOTAutograd's write-back differed from eager's (now: runs as captured)",
    ("grad-tensor", 4100205): "layer_norm of a row near -3e38: eager's float32 variance overflows to NaN, "
                              "compiled's is finite, so its zero gradient stays 0 (triage: overflow)",
    ("grad-tensor", 8101105): "a write through an expanded bool tensor in a graph needing gradients: "
                              "AOTAutograd's functionalization raised and the backend warned it failed "
                              "(now: runs as captured, the reason logged; torch.compile raises)",
    ("grad-tensor", 9100128): "sgn's gradient, an efficient zero tensor traced into a backward constant: "
                              "AOTAutograd's deepcopy of the backward raised (torch.compile raises too)",
    ("grad-tensor", 9100827): "a boolean mask of layer_norm over a row near 1e30 (eager's float32 variance NaN, "
                              "compiled's 0): the mask's size differed (triage: overflow covers shapes)",
    ("grad-tensor", 9100852): "group_norm of an empty input needing gradients: torch's backward decomposition "
                              "divided by H * W = 0 while AOTAutograd traced (now: runs as captured)",
    ("tensor", 12900248): "log_softmax over a dim of size 1 of softplus(x), then sgn: the max pass recomputed "
                          "softplus in a scalar loop, the output pass in a vectorized one (glibc's vector exp "
                          "and log1p), so x - max was 1 ulp, not 0 (now stored before the passes)",
    ("grad-tensor", 12501666): "min() of sin(x) needing gradients: the backward recomputes sin(x) (AOTAutograd's "
                               "partition) in a kernel of another loop shape; libmvec's vector sin and libm's "
                               "scalar sin of the tail differ in the last bit, so no element equals the saved "
                               "min and min's evenly-distributed gradient divides by a count of 0 (NaN; "
                               "GRAPHJIT_EAGER_MATH=1 passed); the partition now saves what the "
                               "backward compares for equality",
    ("grad-tensor", 12700259): "bfloat16 pow(x, 0.5)'s gradient, pow(x, -0.5) at x = -inf: eager's kernel "
                               "computes 1/sqrt (NaN), ours computed pow (0)",
    ("grad-tensor", 12700945): "a graph output that the graph's backward saves (abs(median(x)), saved for "
                               "var's backward), written in place after the graph: autograd's version check "
                               "fails for the loss on another output, which eager's separate nodes never "
                               "check (Inductor through the same capture fails alike); such saved values are "
                               "now checked only where the backward reads them",
    ("tensor", 13001325): "argmax of a log_softmax beside an isfinite of its input: the max pass recomputed "
                          "the log in one loop, the index pass in another of a different vector width, no "
                          "element equalled the max and the index was 4 of 4 (now stored before the passes)",
    ("grad-tensor", 13400122): "a detached view of a view of an intermediate beside another view of it: "
                               "AOTAutograd's replay of output views applied the view twice (a wrong size; "
                               "chunk read out of bounds: a segfault, torch.compile too); now detached after "
                               "the compiled call",
    ("grad-tensor", 13500172): "softmin of a norm, its output alone reached: logcumsumexp's gradient, not linear "
                               "node by node (exp of log of the gradient plus x), was taken for a gradient plus "
                               "x where its output's gradient was missing: a NaN-bearing gradient where eager "
                               "has None",
    ("grad-tensor", 13801144): "rsqrt(-0.0) = -inf, then prod over that one element: eager's gradient is NaN "
                               "(its prod backward divides the product by each element where none is zero), the "
                               "traced formula's the product of the others; now prod is an autograd Function "
                               "whose backward chooses as eager's does",
    ("grad-tensor", 14600852): "sgn of an addcdiv of x with a -inf, sgn's output alone reached: eager hands sgn's "
                               "zero gradient to addcdiv's formula (0 * inf is NaN there); the missing output "
                               "gradients were symbolic zeros, pruned; now zeros in the formulas of the forward "
                               "ops sgn's zero reaches (by seq_nr)",
    ("grad-tensor", 13801457): "logcumsumexp of a log_softmax, its float32 bits viewed as int32: values near 0 "
                               "a few ulps from eager's and of the other sign, as eager's from the float64 "
                               "reference (the generator now bit-views only values no op rounded)",
    ("grad-tensor", 4700416): "bfloat16 rsqrt one ulp from eager's (which rounds sqrt, then 1/x), cubed by "
                              "its gradient (triage: gradient rounding replay)",
    ("grad-tensor", 14200762): "copysign's zero gradient for `other` beside an unreached softmin of the same "
                               "input: the zero tensor the reached output's formula made was taken for a "
                               "symbolic zero, so the input got None where eager's gets zeros",
    ("grad-tensor", 14200053): "div(rounding_mode='trunc') of a bfloat16 tensor by a 0-d float64 tensor: the "
                               "divisor was rounded to bfloat16, eager's CPU kernel reads a second 0-d operand "
                               "as an unrounded float32 (mul and div alike; 4 of 169 quotients 1 off)",
    ("grad-tensor", 14200276): "median of a triu of an index_fill of elu(x), x with a NaN: eager's vectorized CPU "
                               "kernel of elu's gradient takes the exponential branch for a NaN x (NaN times the "
                               "zero the index_fill passes), torch's decomposition the positive one (0); now as "
                               "eager's CPU kernel",
    ("grad-tensor", 15000094): "a prod of a prod: the rewrite of prods into _ProdAsEager made the second read the "
                               "erased first (the backend failed; the graph ran as captured)",
    ("grad-tensor", 15004238): "log of a group norm over one-element groups: eager's CPU kernel computes x * a + b "
                               "with fused multiply-adds (a rounding residual, log -9.2), our C++ lowering "
                               "(x - mean) * rstd (0, log -inf); group norm is now lowered in Triton only",
    ("grad-tensor", 14200674): "x ** x.min(): the exponent's NaN gradient (log of negative x) reached every "
                               "element of x through min's backward, eager's only the argmin (its CPU kernel "
                               "masked_fills; the traced formula multiplies by the mask); now where(mask, ...) "
                               "on the CPU",
    ("grad-tensor", 15003709): "an unfold's overlapping windows as an output: AOTAutograd (torch >= 2.13) traced "
                               "the tangent in those strides and copied the incoming gradient into them, one "
                               "value kept per shared element; such tangents are now traced dense",
    ("grad-tensor", 15003834): "a 1-D unfold (strides (1, 1)) of a reshaped log_softmax: its tangent traced in "
                               "the overlapping strides (as 15003709)",
    ("grad-tensor", 15002272): "a bfloat16 unfold of a hardtanh: its tangent traced in the overlapping strides "
                               "(as 15003709)",
    ("grad-tensor", 15003344): "hardswish's gradient at a NaN x: eager's vectorized CPU kernel takes the middle "
                               "branch (NaN), torch's decomposition the last (the incoming gradient); now as "
                               "eager's CPU kernel",
    ("grad-tensor", 15002999): "layer_norm of x.float() with float64 weights in the float64 replay raised "
                               "\"mixed dtype\", so eager's float32 overflow (NaN where compiled gives the bias) "
                               "could not be judged; the program now casts to F32 in both runs",
    ("grad-tensor", 15100652): "addcdiv by an int64 tensor, its value live across a break but never "
                               "differentiated: eager's formula for the dividend's gradient divides an int64 "
                               "tensor in place and raises, AOTAutograd's joint trace at once (the backend "
                               "failed); now runs as captured where eager's backward on fakes raises too",
    ("grad-tensor", 15900120): "replicate pad's advanced index read in part, with symbolic sizes: the added check of "
                               "its indices negated the size symbol with aten.neg (a tensor op) and the backend "
                               "failed",
    ("grad-tensor", 15900114): "sgn of an einsum needing gradients: sgn's zero gradient, an efficient zero tensor, "
                               "reached einsum's permutes in AOTAutograd's joint trace, which asserted on a real "
                               "tensor (torch.compile raises) and the backend warned it failed (now: runs as "
                               "captured, the reason logged)",
    ("grad-tensor", 15901146): "layer_norm of -3e38 beside a lerp overflowing float32: eager's NaN gradients came "
                               "from its variance's overflow, but the overflow replay's logs parted in the "
                               "backward and the reference's non-finite loss hid it (triage: logs compared as "
                               "far as their ops agree)",
    ("grad-tensor", 16200784): "sgn of var(correction=1) over one element (NaN): eager's ZeroTensor kernels keep "
                               "sgn's zero gradient a zero tensor through var's formula (times 2 / 0), the traced "
                               "formula on plain zeros gave NaN; the AOTAutograd-only replay with eager halves "
                               "segfaulted on the efficient zero tensor (aot_eager too); now ZeroTensor rules in "
                               "the joint graph",
    ("tensor", 16301109): "sub_ of one element of an as_strided((1, 3), (0, 0)) view: functionalization wrote the "
                          "whole view back with as_strided_scatter, which eager's kernel refuses (an error eager "
                          "does not raise); now refused, runs as captured",
    ("grad-tensor", 16500121): "floor_divide of values needing gradients, every result detached: AOTAutograd's "
                               "joint trace raised for its missing derivative, which eager's backward never "
                               "reaches (the backend failed); now runs as captured",
    ("grad-tensor", 16800347): "x * 2 and a view of it returned before a break, then written through the view: "
                               "the compiled forward returned the product as a view of the view's buffer, made "
                               "inside AOTAutograd's Function, and the write raised (a view created inside a "
                               "custom Function); the output that is no view now keeps the buffer",
    ("grad-tensor", 16800502): "elu's gradient at a NaN input of two elements: eager's scalar tail gives the incoming "
                               "gradient, the compiled kernel (as eager's vectorized loop) NaN (triage: the branch a "
                               "NaN takes, NAN_BRANCH_OPS)",
    ("triton", 17100027): "Triton interpreter: uint8 x.add_(x) raised 'int8 overflow detected': the debug option "
                          "that makes device_asserts live also checked integer overflow (now off, as on the GPU)",
    ("triton", 17100025): "Triton interpreter: an int32 cube past 2**31 raised 'int32 overflow detected' (as "
                          "17100027)",
    ("grad-tensor", 17700591): "`v += 3.0` through an as_strided view of a graph value, inputs needing gradients: "
                               "AOTAutograd's functionalization refuses the write (the backend failed with a "
                               "warning); training._in_place did not count augmented assignments (operator.iadd) "
                               "as writes, so the refusal was not recognized as one; now runs as captured",
    ("grad-tensor", 18700349): "logit(x, eps)'s gradient at a NaN x: torch's decomposition gives 0 (it keeps "
                               "lo <= x <= hi, which NaN fails), eager's kernels NaN; and dy / (x (1 - x)) at "
                               "-0.0 gave -inf where eager gives dy * inf",
    ("grad-tensor", 18700552): "log_softmax of a 0-d value needing gradients: the row-statistics rewrite read "
                               "its size at dim -1 and raised (the backend failed with a warning)",
}
# Seeds failing on a bug still open.
KNOWN_OPEN = {}


def _plus_found(mode, seeds):
    return list(seeds) + [s for m, s in FOUND if m == mode]


TENSOR_SEEDS = _plus_found("tensor", range(100))
PYTHON_SEEDS = _plus_found("python", range(200))
TRITON_SEEDS = _plus_found("triton", range(30))    # the Triton path in Triton's interpreter, where installed
# one_python (3.12): the same random programs become the same kernels on every Python (the generator and
# our codegen are plain Python); they hunt for new bugs, where the FOUND seeds, run on every Python with
# Triton, guard the known ones.
TRITON_RANDOM_SEEDS = range(30)
# compile(dynamic=True): one symbolic graph from the first call, run on every variant's sizes (seeds of
# their own, so these are other programs than the static runs')
DYNAMIC_TENSOR_SEEDS = _plus_found("dynamic-tensor", range(5000, 5020))
DYNAMIC_PYTHON_SEEDS = _plus_found("dynamic-python", range(5000, 5030))
# programs that also take a Python float, another value each call: a symbolic float input from the first
# recompile on (generator.generate(float_args=True))
FLOAT_ARG_SEEDS = _plus_found("float-tensor", range(6000, 6024))
# floating arguments require grad and gradients are compared too (training graphs: compiler/training.py)
GRAD_TENSOR_SEEDS = _plus_found("grad-tensor", range(4000000, 4000020))
# tensor programs with decompose by templates on every graph (the small graphs of random programs would
# otherwise be traced whole): compiler/op_templates.py against eager
TEMPLATE_TENSOR_SEEDS = _plus_found("templates-tensor", range(7000, 7030))


def _seeds(mode, seeds, one_python=()):
    """pytest params of seeds: xfail where KNOWN_OPEN names them, one_python for those in `one_python`. The
    random seeds (all but FOUND's) are spread over the test matrix, each run on one Python (runs_here):
    they hunt for new bugs, where FOUND's, run on every Python, guard the known ones."""
    def marks(s):
        xfail = [pytest.mark.xfail(reason=KNOWN_OPEN[(mode, s)], strict=False)] if (mode, s) in KNOWN_OPEN else []
        if s in one_python:
            return xfail + [pytest.mark.one_python]
        if (mode, s) not in FOUND and not runs_here(s):
            return xfail + [pytest.mark.skip(reason="a random program of the fuzz run spread over the test "
                                                    "matrix: another Python runs it")]
        return xfail
    return [pytest.param(s, marks=marks(s)) for s in seeds]


@pytest.fixture(scope="module")
def worker():
    with Worker() as w:
        yield w


@pytest.fixture(scope="module")
def templates_worker():
    with Worker(knobs={"decompose_by_templates": 2}) as w:
        yield w


@pytest.fixture(scope="module")
def triton_worker():
    pytest.importorskip("triton")
    with Worker(triton=True) as w:
        yield w


def _check(key, prog, backend, worker, tmp_path):
    run = functools.partial(worker.run, backend=backend, timeout=120)
    res = run(prog.source())
    if res["status"] not in FAILURES and res["status"] != "harness_error":
        return
    small, small_res = prog, res
    if res["status"] not in ("hang", "harness_error") and key not in KNOWN_OPEN:
        small, small_res = shrink.shrink(prog, res, run, budget=20, seconds=60)
    path = shrink.save(small, small_res, str(tmp_path / f"{prog.mode}_{prog.seed}_{small_res['status']}.py"),
                       original=prog)
    pytest.fail(f"{prog.mode} program, seed {prog.seed}: {describe(res)}\n\nreproducer ({path}; rerun from the "
                f"project root: python {path}):\n\n{open(path).read()}", pytrace=False)


@pytest.mark.parametrize("seed", _seeds("tensor", TENSOR_SEEDS))
def test_tensor_program(seed, worker, tmp_path):
    _check(("tensor", seed), generator.generate(seed), "graphjit", worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("templates-tensor", TEMPLATE_TENSOR_SEEDS))
def test_tensor_program_by_templates(seed, templates_worker, tmp_path):
    _check(("templates-tensor", seed), generator.generate(seed), "graphjit", templates_worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("triton", TRITON_SEEDS, one_python=TRITON_RANDOM_SEEDS))
def test_triton_program(seed, triton_worker, tmp_path):
    _check(("triton", seed), generator.generate(seed, triton=True), "graphjit", triton_worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("python", PYTHON_SEEDS))
def test_python_program(seed, worker, tmp_path):
    _check(("python", seed), pyprog.generate(seed), "eager", worker, tmp_path)


def _with(prog, **options):
    """prog with the Program options given (dynamic=True, grad=True)."""
    for name, value in options.items():
        setattr(prog, name, value)
    return prog


@pytest.mark.parametrize("seed", _seeds("dynamic-tensor", DYNAMIC_TENSOR_SEEDS))
def test_dynamic_tensor_program(seed, worker, tmp_path):
    _check(("dynamic-tensor", seed), _with(generator.generate(seed), dynamic=True), "graphjit", worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("dynamic-python", DYNAMIC_PYTHON_SEEDS))
def test_dynamic_python_program(seed, worker, tmp_path):
    _check(("dynamic-python", seed), _with(pyprog.generate(seed), dynamic=True), "eager", worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("grad-tensor", GRAD_TENSOR_SEEDS))
def test_grad_tensor_program(seed, worker, tmp_path):
    _check(("grad-tensor", seed), generator.generate(seed, grad=True), "graphjit", worker, tmp_path)


@pytest.mark.parametrize("seed", _seeds("float-tensor", FLOAT_ARG_SEEDS))
def test_float_argument_program(seed, worker, tmp_path):
    _check(("float-tensor", seed), generator.generate(seed, float_args=True), "graphjit", worker, tmp_path)
