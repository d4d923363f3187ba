"""Known-open bug classes, as hints for a failure's summary line: W/C/F from the first fuzz campaign
(/work/shared/fuzz_findings/INDEX.md), N (compiler) and P (capture) from this fuzzer's own runs.

    hint(prog_source_body, res)  ->  "W13?"   (or "" when nothing matches)

A hint is a guess from the failure kind, the program text and the error message, shown next to a finding
so that a long run's summary groups what is already known; it never hides a failure. Remove an entry
when its bug is fixed.
"""
import re

WRONG = ("wrong", "wrong_mutation", "wrong_meta")

# id: (failure kinds, regex over f's body, regex over the failure's messages, the bug)
KNOWN = {
    "W1": (WRONG, r"mode='circular'", "", "F.pad(mode='circular') of a 3-D input"),
    "W2": (WRONG, r"batch_norm\(.*training=True", "", "batch_norm(training=True) running stats / values"),
    "W4": (WRONG, r"copysign", "", "copysign with a non-contiguous operand"),
    "W5": (WRONG, r"", r"eager (True|False|-?[01](\.0)?) compiled (-?2(\.0)?|True|False)\b",
           "bool arithmetic not normalized in fused kernels"),
    "W6": (WRONG, r"amax|amin|\.all\(|\.any\(", "", "uint8 amax/all"),
    "W8": (WRONG, r"type_as", "", "x.type_as(x) treated as a copy"),
    "W9": (WRONG, r"\.contiguous\(", "", "contiguous() of a mutated strided input treated as an alias"),
    "W10": (WRONG, r"\.item\(\)|print\(|bool\(", "", "a view taken before a graph break reads stale data"),
    "W11": (WRONG, r"expand\(.*_\(|expand\(.*\] [+*]?=", "", "in-place on an expanded view of an input"),
    "W12": (WRONG, r"as_strided", "", "as_strided on a view with a storage offset"),
    "W13": (WRONG, r"//|floor_divide|rounding_mode='floor'", "", "float floor division with +-inf"),
    "W14": (WRONG, r"relu6|hardtanh", "", "relu6/hardtanh(-0.0) returns +0.0"),
    "W15": (WRONG, r"\.sign\(|\.sgn\(", "", "Triton: sign(NaN)"),
    "C1": (("crash",), r"", r"more than one element of the written-to tensor", "in-place on an expanded input"),
    "C2": (("crash",), r"max_pool1d", r"mask has unsupported dtype", "Triton: max_pool1d(ceil_mode=True)"),
    "C3": (("segv",), r"", r"", "Triton: segfault with a zero-size output"),
    "F1": (("fallback", "crash"), r"", r"Modulo by zero|ZeroDivisionError", "zero-size / 0-d tensors"),
    "F2": (("fallback", "crash"), r"", r"CompileError|error: |--0x", "generated C++ does not compile"),
    "F3": (("fallback", "crash"), r"", r"with two bool tensors", "in-place add on a bool tensor"),
    "F4": (("fallback", "crash"), r"addcmul", r"ValueError", "addcmul_ on int64 with a float value"),
    "F5": (("fallback", "crash"), r"", r"KeyError: '?r\d", "Triton: KeyError 'r0' with tensor_split"),
    "N1": (("alias_outputs",), r"", r"", "outputs viewing one intermediate come back as separate tensors"),
    "N2": (("crash", "fallback"), r"index_add", r"source and destination dtypes match", "bool index_add(alpha=2)"),
    "N4": (WRONG, r"\.to\(torch\.int(64|32)\)\.to\(", r"", "float -> int -> float keeps -0.0 (folded to trunc)"),
    "N5": (WRONG, r"F16|BF16", r"", "a 16-bit value used unrounded inside a fused kernel"),
    "N6": (WRONG, r"gelu", r"eager nan compiled inf", "gelu(inf) is inf compiled, nan eager"),
    "N7": (WRONG, r"\.std\(|\.var\(", r"compiled inf", "var/std overflow for |x| > 1e19 (eager: Welford)"),
    "N8": (("fallback",), r"unfold", r"internal overlap", "in-place on an overlapping view (unfold)"),
    "N10": (WRONG, r"\*\*|\.pow\(", r"", "Triton: integer pow computed in floating point"),
    "N11": (("crash",), r"", r"out of bounds for uint8", "Triton: a negative constant with a uint8 tensor"),
    "G1": (("wrong_grad",), r"\belu\(|hardswish", r"NaN or infinities differ",
           "elu's or hardswish's gradient at a NaN x: eager's CPU kernel takes the exponential (middle) branch in "
           "its vectorized body, the positive (last) one in its scalar tail (which elements fall there depends on "
           "the size and the CPU)"),
    "N12": (WRONG, r"group_norm", r"", "Triton interpreter: group norm where x equals its group's mean (one-element "
            "groups): eager's CPU kernel leaves a fused multiply-add's rounding residual, the interpreter's "
            "unfused x * a + b gives 0 (a GPU's Triton contracts it, as CUDA's kernel does), and a discontinuity "
            "(remainder, log) amplifies it"),
    "P15": (WRONG + ("crash",), r"_Box\.shared", r"", "a class attribute the frame writes is not guarded"),
    "P16": (("crash",), r"del \w+\.\w+", r"has no attribute", "an attribute set then deleted in one frame"),
    "P17": (("crash",), r"del \w+\[|\.pop\(", r"KeyError", "dict del/pop replayed after the frame's read"),
    "P18": (("wrong_mutation",), r"setattr|\.\w+ = ", r"", "an attribute stored from a dict entry written later"),
}


def messages(res):
    parts = [res.get("msg", ""), res.get("exc", "")] + [str(m) for m in res.get("mismatches", [])]
    return "\n".join(parts + list(res.get("fallbacks", [])))


def hint(body, res):
    """Ids of the known classes this failure may belong to, e.g. "W13 W10", or ""."""
    text = messages(res)
    found = [key for key, (kinds, code_re, msg_re, _) in KNOWN.items()
             if res["status"] in kinds and re.search(code_re, body) and re.search(msg_re, text)]
    return " ".join(found)
