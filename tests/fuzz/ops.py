"""The tensor-mode op table: each entry makes one candidate statement from the generator's state.

    OPS = {name: (weight, make)}     make(g) -> Stmt or None (g: generator.Gen)

A candidate only has to be plausible: the generator runs it eagerly in every variant and drops it if eager
raises. Sizes that vary between variants are read from `.shape` in the program text. Floats cast to an
integer dtype go through nan_to_num and clamp first (NaN or out-of-range casts are undefined behaviour,
eager's result is no reference), and integer divisors through clamp(min=1) (eager raises on zero).
"""
import torch

FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT = (torch.int64, torch.int32, torch.uint8)
DTYPES = ("F32", "F16", "BF16", "torch.float64", "torch.int64", "torch.int32", "torch.uint8", "torch.bool")
INT_RANGE = {"torch.uint8": (0, 255), "torch.int32": (-1e9, 1e9), "torch.int64": (-1e15, 1e15)}
SCALARS = ("2", "-3", "0.5", "-1.5", "1e-3", "3.0", "True", "float('inf')", "float('nan')", "1e20", "0", "-0.0")


def isfloat(t):
    return t.dtype in FLOAT


def isint(t):
    return t.dtype in INT


def broadcastable(x, y):
    try:
        torch.broadcast_shapes(x.shape, y.shape)
        return True
    except RuntimeError:
        return False


def scalar(g):
    """A Python number in the program text, or at times the program's float argument (a value per call)."""
    names = g.scalar_inputs()
    if names and g.rng.random() < 0.4:
        return g.rng.choice(names)
    return g.rng.choice(SCALARS)


def operand(g, a, pred=None):
    """A second operand for a: a variable broadcastable with it, a scalar, or a itself."""
    r = g.rng.random()
    if r < 0.6:
        b = g.pick_like(a, lambda x, y: broadcastable(x, y) and (pred is None or pred(y)))
        if b is not None:
            return b
    return scalar(g) if r < 0.85 else a


def divisor(g, b):
    """b as a divisor: integer tensors clamped to >= 1, zero int scalars replaced."""
    if b in g.scalar_inputs():
        return b
    if b[:1] in "xv" and b[1:].isdigit() and not isfloat(g.first(b)) and g.first(b).dtype != torch.bool:
        return f"{b}.clamp(min=1)"
    return "2" if b in ("0", "True", "-0.0") else b


# ------------------------------------------------------------------------------------------------ pointwise

UNARY = ["{a}.neg()", "{a}.abs()", "{a}.exp()", "{a}.log()", "{a}.sqrt()", "{a}.rsqrt()", "{a}.sin()", "{a}.cos()",
         "{a}.tanh()", "{a}.sigmoid()", "{a}.relu()", "{a}.floor()", "{a}.ceil()", "{a}.round()", "{a}.trunc()",
         "{a}.frac()", "{a}.sign()", "{a}.sgn()", "{a}.reciprocal()", "{a}.erf()", "{a}.log1p()", "{a}.expm1()",
         "{a}.square()", "{a}.exp2()", "{a}.atan()", "{a}.asin()", "{a}.lgamma()", "{a}.digamma()", "{a}.log2()",
         "{a}.sinh()", "{a}.acosh()", "{a}.erfinv()", "{a}.bitwise_not()", "{a}.logical_not()", "{a}.isnan()",
         "{a}.isinf()", "{a}.isfinite()", "{a}.signbit()", "-{a}", "~{a}", "abs({a})", "{a}.pow(2)", "{a}.pow(0.5)",
         "{a} ** 3", "{a}.round(decimals=1)", "torch.nan_to_num({a}, nan=0.0, posinf=1.0, neginf=-1.0)",
         "{a}.nan_to_num()", "F.gelu({a})", "F.gelu({a}, approximate='tanh')", "F.silu({a})", "F.relu6({a})",
         "F.hardtanh({a}, -1.5, 2.0)", "F.leaky_relu({a}, 0.1)", "F.elu({a})", "F.softplus({a})",
         "F.hardsigmoid({a})", "F.hardswish({a})", "F.mish({a})", "{a}.clamp(min=-0.5, max=0.75)",
         "{a}.clamp(min=0)", "{a}.clamp(max=1)", "torch.clamp({a}, 2, -1)", "{a}.logit(eps=1e-3)",
         "torch.special.expit({a})", "{a}.deg2rad()", "{a}.heaviside({a}.abs())"]

OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "==", "!=", "<", "<=", ">", ">="]
FUNCS2 = ["torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.fmax({a}, {b})", "torch.fmin({a}, {b})",
          "torch.atan2({a}, {b})", "torch.copysign({a}, {b})", "torch.hypot({a}, {b})", "torch.logaddexp({a}, {b})",
          "torch.remainder({a}, {d})", "torch.fmod({a}, {d})", "torch.bitwise_and({a}, {b})",
          "torch.logical_and({a}, {b})", "torch.logical_or({a}, {b})", "torch.logical_xor({a}, {b})",
          "torch.xlogy({a}, {b})", "torch.add({a}, {b}, alpha=2)", "torch.sub({a}, {b}, alpha=0.5)",
          "torch.div({a}, {b}, rounding_mode='floor')", "torch.div({a}, {b}, rounding_mode='trunc')",
          "torch.true_divide({a}, {b})", "torch.floor_divide({a}, {d})", "torch.bitwise_left_shift({a}, 1)",
          "torch.eq({a}, {b})", "{a}.lt({b})", "{a}.ge({b})", "torch.isclose({a}, {b})", "{a}.pow({b})"]


def unary(g):
    a = g.pick()
    v = g.new()
    return g.stmt(f"{v} = {g.rng.choice(UNARY).format(a=a)}", [v], "unary")


def binary(g):
    a = g.pick()
    b = operand(g, a)
    v = g.new()
    if g.rng.random() < 0.5:
        op = g.rng.choice(OPERATORS)
        rhs = divisor(g, b) if op in ("//", "%") else b
        expr = f"{a} {op} {rhs}" if g.rng.random() < 0.85 or rhs[:1] in "xv" else f"{rhs} {op} {a}"
    else:
        expr = g.rng.choice(FUNCS2).format(a=a, b=b, d=divisor(g, b))
    return g.stmt(f"{v} = {expr}", [v], "binary")


def where(g):
    a = g.pick()
    c = g.pick_like(a, lambda x, y: y.dtype == torch.bool and broadcastable(x, y))
    cond = c if c and g.rng.random() < 0.6 else g.rng.choice([f"{a} > 0", f"{a}.isnan()", f"{a} == {a}.amax()"])
    other = operand(g, a)
    v = g.new()
    form = g.rng.choice(["torch.where({c}, {a}, {b})", "torch.where({c}, {b}, {a})", "{a}.where({c}, {b})"])
    return g.stmt(f"{v} = {form.format(c=cond, a=a, b=other)}", [v], "where")


def ternary(g):
    a = g.pick()
    b, c = operand(g, a), operand(g, a)
    v = g.new()
    form = g.rng.choice(["torch.addcmul({a}, {b}, {c}, value=0.5)", "torch.addcdiv({a}, {b}, {c}, value=2)",
                         "torch.lerp({a}, {b}, 0.25)", "torch.lerp({a}, {b}, {c})", "torch.clamp({a}, {b}, {c})",
                         "{a}.clamp(min={b})", "torch.where({a} > {b}, {a}, {c})"])
    return g.stmt(f"{v} = {form.format(a=a, b=b, c=c)}", [v], "ternary")


def cast(g):
    a = g.pick()
    dt = g.rng.choice(DTYPES)
    v = g.new()
    src = a
    if isfloat(g.first(a)) and dt in INT_RANGE:
        lo, hi = INT_RANGE[dt]
        src = f"{a}.nan_to_num(0.0).clamp({lo:g}, {hi:g})"
    form = g.rng.choice(["{s}.to({dt})", "{s}.to(dtype={dt})", "{s}.to({dt}).to({a}.dtype)"])
    if dt in ("F32", "torch.int64") and g.rng.random() < 0.3:
        # .float() is float32 in the float64 reference run too, where F32 is float64: there it converts to F32
        form = "{s}.float() if F32 == torch.float32 else {s}.to(F32)" if dt == "F32" else "{s}.long()"
    return g.stmt(f"{v} = {form.format(s=src, dt=dt, a=a)}", [v], "cast")


def type_as(g):
    a = g.pick()
    b = g.pick()
    v = g.new()
    src = a
    if isfloat(g.first(a)) and not isfloat(g.first(b)):
        src = f"{a}.nan_to_num(0.0).clamp(0, 100)"
    return g.stmt(f"{v} = {src}.type_as({b})", [v], "type_as")


# ------------------------------------------------------------------------------------------------ reductions

REDUCE = ["sum", "mean", "amax", "amin", "prod", "all", "any", "argmax", "argmin", "max", "min", "var", "std",
          "logsumexp", "nansum", "norm", "count_nonzero", "sum_f64", "median", "nanmean"]


def reduce(g):
    a = g.pick()
    op = g.rng.choice(REDUCE)
    d, r = g.dim(a, scalar_ok=True), g.rank(a)
    keep = g.rng.choice(["", ", keepdim=True", ", keepdim=False"])
    v = g.new()
    many = f"({d}, {(d + 1) % r if r else 0})" if r >= 2 and (d + 1) % r != d % r else str(d)
    if op in ("max", "min", "median"):
        pick = g.rng.choice([".values", ".indices", "[0]"]) if op != "median" else ".values"
        expr = g.rng.choice([f"{a}.{op}({d}{keep}){pick}", f"{a}.{op}()"])
    elif op in ("argmax", "argmin"):
        expr = g.rng.choice([f"{a}.{op}()", f"{a}.{op}({d}{keep})", f"torch.{op}({a}, dim={d}{keep})"])
    elif op == "sum_f64":
        expr = f"{a}.sum({d}, dtype=torch.float64{keep})"
    elif op in ("var", "std"):
        expr = f"{a}.{op}({d}, correction={g.rng.choice([0, 1])}{keep})"
    elif op in ("logsumexp", "prod", "count_nonzero"):
        expr = f"{a}.{op}({d}{keep if op != 'count_nonzero' else ''})"
    elif op in ("all", "any"):
        expr = g.rng.choice([f"{a}.{op}()", f"{a}.{op}({d}{keep})"])
    else:
        expr = g.rng.choice([f"{a}.{op}()", f"{a}.{op}({d}{keep})", f"{a}.{op}({many}{keep})",
                             f"{a}.{op}(dim={many}{keep})"])
    return g.stmt(f"{v} = {expr}", [v], "reduce")


def softmax(g):
    a = g.pick(isfloat)
    if a is None:
        return None
    d = g.dim(a, scalar_ok=True)
    v = g.new()
    form = g.rng.choice(["{a}.softmax({d})", "F.log_softmax({a}, dim={d})", "{a}.log_softmax({d})",
                         "torch.softmax({a}, {d}, dtype=torch.float64)", "F.softmin({a}, {d})"])
    return g.stmt(f"{v} = {form.format(a=a, d=d)}", [v], "softmax")


def scan(g):
    a = g.pick()
    d = g.dim(a, scalar_ok=True)
    v = g.new()
    form = g.rng.choice(["{a}.cumsum({d})", "{a}.cumprod({d})", "torch.cummax({a}, {d}).values",
                         "torch.cummin({a}, {d})[1]", "torch.logcumsumexp({a}, {d})", "{a}.cumsum({d}, dtype=F32)"])
    return g.stmt(f"{v} = {form.format(a=a, d=d)}", [v], "scan")


def sort(g):
    a = g.pick()
    d = g.dim(a, scalar_ok=True)
    v = g.new()
    form = g.rng.choice(["{a}.sort({d}).values", "{a}.sort({d}, descending=True, stable=True).indices",
                         "torch.topk({a}, 1, {d}).values", "{a}.flip({d}).sort({d}, stable=True)[1]",
                         "torch.kthvalue({a}, 1, {d}).values", "{a}.msort()"])
    return g.stmt(f"{v} = {form.format(a=a, d=d)}", [v], "sort")


# ------------------------------------------------------------------------------------------------ views

def _slice(g, r):
    parts = [g.rng.choice([":", ":", "::2", "1:", ":-1", "1::3", "::3", "-2:", "0", "-1", "None", "2:5"])
             for _ in range(g.rng.randint(1, max(1, r)))]
    if g.rng.random() < 0.3:
        parts.insert(g.rng.randrange(len(parts) + 1), "...")
    return ", ".join(parts)


def _perm(g, r):
    p = list(range(r))
    g.rng.shuffle(p)
    return ", ".join(map(str, p))


def view(g):
    a = g.pick()
    r = g.rank(a)
    d = g.dim(a, scalar_ok=True)
    d2 = g.dim(a, scalar_ok=True)
    v = g.new()
    s = f"{a}.shape[{d}]"
    forms = ["{a}.view(-1)", "{a}.reshape(-1)", "{a}.view({a}.shape[0], -1)", "{a}.reshape(-1, {a}.shape[-1])",
             "{a}.reshape({a}.shape[::-1])", "{a}.flatten()", "{a}.flatten({lo}, {hi})",
             "{a}.unflatten({d}, (1, {s}))", "{a}.transpose({d}, {d2})", "{a}.t()", "{a}.mT", "{a}.permute({perm})",
             "{a}.movedim({d}, {d2})", "{a}.unsqueeze({d})", "{a}.squeeze({d})", "{a}.squeeze()", "{a}[None]",
             "{a}[..., None]", "{a}.expand(2, *{a}.shape)", "{a}.expand({ex})", "{a}.narrow({d}, 0, 1)",
             "{a}.narrow({d}, 1, {s} - 1)", "{a}.narrow({d}, {s} // 2, {s} - {s} // 2)", "{a}.select({d}, 0)",
             "{a}.select({d}, -1)", "{a}[{sl}]", "{a}[{sl}]", "{a}[{sl}]", "{a}.as_strided({astr})",
             "torch.as_strided({a}, {astr2})", "{a}.contiguous()", "{a}.clone()", "{a}.detach()", "{a}.flip({d})",
             "{a}.roll(1, {d})", "{a}.tril()", "{a}.triu(1)", "{a}.diagonal()", "{a}.diagonal(0, {d}, {d2})",
             "{a}.repeat({rep})", "{a}.tile((2,))", "{a}.repeat_interleave(2, dim={d})", "{a}.unfold({d}, 2, 1)",
             "{a}.clone(memory_format=torch.channels_last)", "{a}.contiguous(memory_format=torch.channels_last)",
             "{a}.swapaxes({d}, {d2})", "{a}.view({a}.dtype)", "{a}.expand_as({b})", "{a}.reshape_as({c})",
             "{a}.to(torch.float32).view(torch.int32) if {a}.dtype == F32 else {a}", "torch.atleast_2d({a})", "{a}.ravel()"]
    b = g.pick_like(a, lambda x, y: broadcastable(x, y) and torch.broadcast_shapes(x.shape, y.shape) == y.shape)
    c = g.pick_like(a, lambda x, y: x.numel() == y.numel())
    ex = ", ".join(str(g.rng.choice([2, 3])) if n == 1 else "-1" for n in g.first(a).shape) or "()"
    lo = g.rng.randrange(r) if r else 0
    astr = "({}, {}), ({}, {}), {}".format(*(g.rng.choice([1, 2, 3]) for _ in range(2)),
                                          *(g.rng.choice([0, 1, 2, 3]) for _ in range(2)), g.rng.choice([0, 1, 2]))
    astr2 = "({},), ({},)".format(g.rng.choice([1, 2, 4]), g.rng.choice([1, 2]))
    form = g.rng.choice(forms)
    if "view(torch.int32)" in form and not g.exact(a):
        form = "{a}.view({a}.dtype)"       # a rounded float's bits: one ulp is no float tolerance apart
    code = form.format(a=a, d=d, d2=d2, s=s, lo=lo, hi=g.rng.randrange(lo, r) if r else 0, perm=_perm(g, r),
                       ex=ex, sl=_slice(g, r), astr=astr, astr2=astr2, rep=", ".join(["2"] * max(r, 1)),
                       b=b or a, c=c or a)
    return g.stmt(f"{v} = {code}", [v], "view")


def join(g):
    a = g.pick()
    r = g.rank(a)
    d = g.dim(a, scalar_ok=True)
    b = g.pick_like(a, lambda x, y: y.dim() == x.dim() and y.dtype == x.dtype) or a
    v = g.new()
    s = f"{a}.shape[{d}]"
    forms = ["torch.cat([{a}, {b}], {d})", "torch.cat(({a}, {b}, {a}), dim={d})", "torch.cat([{a}, {a}[:0]])",
             "torch.stack([{a}, {b}], {sd})", "torch.stack(({a}, {a}))", "{a}.split(2, {d})[-1]",
             "{a}.split(2, {d})[0]", "{a}.chunk(3, {d})[0]", "{a}.chunk(2, {d})[-1]",
             "torch.split({a}, [1, {s} - 1], {d})[1]", "{a}.unbind({d})[0]", "torch.tensor_split({a}, 3, {d})[1]",
             "{a}.tensor_split(({s} // 3,), {d})[1]", "torch.cat([{a}, {a}.flip({d})], {d})",
             "torch.cat([{a}.split(1, {d})[-1], {b}], {d})"]
    code = g.rng.choice(forms).format(a=a, b=b, d=d, s=s, sd=g.rng.randint(-r - 1, r))
    return g.stmt(f"{v} = {code}", [v], "join")


# ------------------------------------------------------------------------------------------------ layers

def _kind(t):
    from .generator import DTYPE_KIND
    return DTYPE_KIND[t.dtype]


def _weight(g, a, dims):
    """A new argument of a's dtype with the given dims (tokens), or None if a dim has no token."""
    if any(d is None for d in dims):
        return None
    return g.add_input(_kind(g.first(a)), dims, g.rng.choice(["c", "c", "t", "s"]))


def matmul(g):
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return None
    v = g.new()
    last = g.token(a, -1)
    b = g.pick_like(a, lambda x, y: y.dim() >= 2 and x.shape[-1] == y.shape[-2] or y.dim() == 1 and
                    x.shape[-1] == y.shape[0])
    form = g.rng.choice(["mm", "mm", "mT", "bmm", "linear", "addmm", "einsum", "baddbmm"])
    if form == "mm":
        return g.stmt(f"{v} = {a} @ {b or a + '.mT'}", [v], "matmul")
    if form == "mT":
        return g.stmt(f"{v} = torch.matmul({a}.mT, {a})", [v], "matmul")
    if form in ("bmm", "baddbmm"):
        pre = f"{a}, " if form == "baddbmm" else ""
        return g.stmt(f"{v} = torch.{form}({pre}{a}, {a}.transpose(1, 2))", [v], "matmul")
    if form == "einsum":
        return g.stmt(f"{v} = torch.einsum('...ij,...kj->...ik', {a}, {a})", [v], "matmul")
    out = g.rng.choice(["a", "b", "c", 1, 3])
    w = _weight(g, a, (out, last))
    if w is None:
        return None
    bias = _weight(g, a, (out,)) if g.rng.random() < 0.6 else "None"
    if form == "addmm":
        return g.stmt(f"{v} = torch.addmm({bias if bias != 'None' else 0}, {a}, {w}.t(), beta=0.5)", [v], "matmul")
    return g.stmt(f"{v} = F.linear({a}, {w}, {bias})", [v], "linear")


def conv(g):
    a = g.pick(lambda t: t.dim() in (3, 4) and isfloat(t))
    if a is None:
        return None
    r = g.rank(a)
    c, o, k = g.token(a, 1), g.rng.choice(["a", "b", 1, 2, 4]), g.rng.choice([1, 2, 3])
    depthwise = g.rng.random() < 0.25
    w = _weight(g, a, (c, 1, *[k] * (r - 2)) if depthwise else (o, c, *[k] * (r - 2)))
    if w is None:
        return None
    bias = _weight(g, a, (c if depthwise else o,)) if g.rng.random() < 0.5 else "None"
    stride, dil = g.rng.choice([1, 1, 2]), g.rng.choice([1, 1, 2])
    pad = g.rng.choice([0, 1, "'same'"]) if stride == 1 else g.rng.choice([0, 1])
    if k == 1:
        # dilation spaces a kernel's taps, a 1-wide kernel has one: eager (torch 2.13, CPU) segfaults on
        # conv1d of transposed [2, 7, 1] operands with stride 2, padding 1, dilation 2 (fuzz triton 8300863)
        dil = 1
    groups = f", groups={a}.shape[1]" if depthwise else ""
    v = g.new()
    return g.stmt(f"{v} = F.conv{r - 2}d({a}, {w}, {bias}, stride={stride}, padding={pad}, dilation={dil}{groups})",
                  [v], "conv")


def norm(g):
    a = g.pick(lambda t: t.dim() >= 2 and isfloat(t))
    if a is None:
        return None
    v = g.new()
    form = g.rng.choice(["layer", "layer", "batch", "batch", "group", "normalize", "instance"])
    if form == "layer":
        n = g.rng.choice([1, 1, 2])
        w = _weight(g, a, [g.token(a, -i) for i in range(n, 0, -1)]) if g.rng.random() < 0.7 else "None"
        b = _weight(g, a, [g.token(a, -i) for i in range(n, 0, -1)]) if g.rng.random() < 0.5 else "None"
        return w and b and g.stmt(f"{v} = F.layer_norm({a}, {a}.shape[-{n}:], {w}, {b}, eps=1e-5)", [v], "layer_norm")
    if form == "normalize":
        return g.stmt(f"{v} = F.normalize({a}, dim={g.dim(a)})", [v], "normalize")
    c = g.token(a, 1)
    if c is None:
        return None
    w = _weight(g, a, (c,)) if g.rng.random() < 0.6 else "None"
    b = _weight(g, a, (c,)) if g.rng.random() < 0.4 else "None"
    if form == "group":
        groups = g.rng.choice(["1", f"{a}.shape[1]"])
        return g.stmt(f"{v} = F.group_norm({a}, {groups}, {w}, {b})", [v], "group_norm")
    return batch_norm(g, a, v, c, w, b, form)


def batch_norm(g, a, v, c, w, b, form):
    kind = _kind(g.first(a))
    stats = g.rng.random() < 0.85
    mean = g.add_input(kind, (c,)) if stats else "None"
    var = g.add_input("fpos" if kind == "f" else kind, (c,)) if stats else "None"
    if var != "None" and kind != "f":
        var = f"{var}.abs()"
    training = g.rng.choice([True, True, False]) if stats else True
    mom = g.rng.choice([0.1, 0.5, None]) if training else 0.1
    fn = "batch_norm" if form == "batch" else "instance_norm"
    flag = "training" if fn == "batch_norm" else "use_input_stats"
    return g.stmt(f"{v} = F.{fn}({a}, {mean}, {var}, {w}, {b}, {flag}={training}, momentum={mom}, eps=1e-5)",
                  [v], fn)


def pool(g):
    a = g.pick(lambda t: t.dim() in (2, 3, 4) and isfloat(t))
    if a is None:
        return None
    r, v = g.rank(a), g.new()
    n = g.rng.choice([1, 2]) if r >= 3 else 1
    k = g.rng.choice([1, 2, 3])
    stride, pad = g.rng.choice(["None", "1", "2"]), g.rng.choice([0, 0, 1])
    ceil = g.rng.choice([False, True])
    forms = [f"F.max_pool{n}d({a}, {k}, {stride}, {pad}, dilation={g.rng.choice([1, 2])}, ceil_mode={ceil})",
             f"F.avg_pool{n}d({a}, {k}, {stride}, {pad}, ceil_mode={ceil}, count_include_pad={g.rng.random() < 0.5})",
             f"F.adaptive_avg_pool{n}d({a}, {g.rng.choice([1, 2, 3])})", f"F.adaptive_max_pool{n}d({a}, 2)",
             f"F.max_pool{n}d({a}, {k}, return_indices=True)[1]", f"F.lp_pool{n}d({a}, 2, {k})",
             f"F.interpolate({a}, scale_factor=2, mode='nearest')" if r == n + 2 else f"{a}.sum()",
             f"F.avg_pool2d({a}, {k}, divisor_override=3)" if r >= 3 else f"{a}.mean()"]
    return g.stmt(f"{v} = {g.rng.choice(forms)}", [v], "pool")


def pad(g):
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return None
    r, v = g.rank(a), g.new()
    mode = g.rng.choice(["constant", "constant", "reflect", "replicate", "circular"])
    if mode == "constant":
        pads = [g.rng.choice([-1, 0, 1, 2]) for _ in range(2 * g.rng.randint(1, r))]
        return g.stmt(f"{v} = F.pad({a}, {tuple(pads)}, value={scalar(g)})", [v], "pad")
    pairs = g.rng.choice([1, 2, 3])
    pads = [g.rng.choice([0, 1, 2]) for _ in range(2 * pairs)]
    return g.stmt(f"{v} = F.pad({a}, {tuple(pads)}, mode='{mode}')", [v], "pad")


# ------------------------------------------------------------------------------------------------ indexing

def _index(g, a, d):
    """A 1-D int64 index into dim d of a, in range in every variant."""
    s = f"{a}.shape[{d}]"
    return g.rng.choice([f"torch.arange({s} - 1, -1, -1)", f"torch.arange(0, {s}, 2)",
                         f"(torch.arange(4) * 3 + 1) % {s}", f"torch.tensor([0, {s} - 1])"])


def _perm_index(a, d, r):
    """a's shape, with a rotation of dim d as the index: unique along d (a deterministic scatter)."""
    view = ", ".join("-1" if i == d % r else "1" for i in range(r))
    return f"((torch.arange({a}.shape[{d}]) + 1) % {a}.shape[{d}]).view({view}).expand({a}.shape)"


def _gather_index(a, d):
    return f"((torch.arange({a}.numel()) * 5 + 2) % max({a}.shape[{d}], 1)).view({a}.shape)"


def index(g):
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return None
    d, r, v = g.dim(a), g.rank(a), g.new()
    idx = _index(g, a, d)
    src = g.pick_like(a, lambda x, y: y.shape == x.shape and y.dtype == x.dtype) or f"{a}.neg()"
    mask = g.pick_like(a, lambda x, y: y.dtype == torch.bool and broadcastable(x, y)) or f"{a} > 0"
    forms = [f"{a}.index_select({d}, {idx})", f"{a}[{_index(g, a, 0)}]", f"{a}[..., {_index(g, a, -1)}]",
             f"{a}[{mask}]" if mask != f"{a} > 0" or g.rng.random() < 0.2 else f"{a}.masked_fill({mask}, 0.5)",
             f"torch.gather({a}, {d}, {_gather_index(a, d)})", f"{a}.scatter({d}, {_perm_index(a, d, r)}, {src})",
             f"{a}.scatter({d}, {_perm_index(a, d, r)}, {scalar(g)})",
             f"{a}.scatter_add({d}, {_gather_index(a, d)}, {src})",
             f"{a}.scatter_reduce({d}, {_gather_index(a, d)}, {src}, "
             f"reduce='{g.rng.choice(['amax', 'amin', 'sum', 'prod', 'mean'])}', include_self={g.rng.random() < 0.5})",
             f"{a}.index_fill({d}, {idx}, {scalar(g)})", f"{a}.masked_fill({mask}, {scalar(g)})",
             f"torch.take_along_dim({a}, {_gather_index(a, d)}, {d})",
             f"{a}.index_add({d}, torch.arange({a}.shape[{d}]).flip(0), {src}, alpha=2)",
             f"{a}.index_copy({d}, torch.arange({a}.shape[{d}]).roll(1), {src})",
             f"F.embedding({_index(g, a, 0)}, {a})" if r == 2 else f"{a}.take(torch.tensor([0, -1]))"]
    return g.stmt(f"{v} = {g.rng.choice(forms)}", [v], "index")


def factory(g):
    a = g.pick()
    v = g.new()
    forms = ["torch.zeros_like({a})", "torch.ones_like({a}, dtype=F32)", "torch.full_like({a}, 2.5)",
             "torch.arange({a}.shape[0]).to({a}.dtype)", "torch.empty_like({a}).fill_(1)",
             "torch.zeros({a}.shape[-1], dtype={a}.dtype)", "{a}.new_ones(3)", "torch.eye({a}.shape[-1])",
             "torch.linspace(0, 1, {a}.shape[0])", "{a}.new_full((2, 1), 7)", "torch.ones(()) + {a}",
             "torch.tensor(1.5) * {a}", "torch.scalar_tensor(3, dtype={a}.dtype) - {a}"]
    return g.stmt(f"{v} = {g.rng.choice(forms).format(a=a)}", [v], "factory")


# ------------------------------------------------------------------------------------------------ mutation

INPLACE = ["{t}.add_({b})", "{t}.add_({b}, alpha=2)", "{t}.sub_({s})", "{t}.mul_({b})", "{t}.div_({s})",
           "{t}.copy_({b})", "{t}.fill_({s})", "{t}.zero_()", "{t}.clamp_(-1, 1)", "{t}.clamp_(min=0.5)",
           "{t}.relu_()", "{t}.neg_()", "{t}.sigmoid_()", "{t}.exp_()", "{t}.abs_()", "{t}.masked_fill_({m}, {s})",
           "{t}.index_fill_(0, torch.tensor([0]), {s})", "{t}[{sl}] = {b}", "{t}[{sl}] += {s}", "{t}[{sl}] *= {b}",
           "{t} += {b}", "{t} *= {s}", "{t}[{m}] = {s}", "{t}.addcmul_({b}, {b}, value=0.5)", "{t}.lerp_({b}, 0.3)",
           "{t}.t_()", "{t}.unsqueeze_(0)", "{t}.floor_()", "{t}.bitwise_not_()", "{t}.logical_not_()",
           "{t}.copy_({b}.flip(0))", "{t}.scatter_({d}, {perm}, {s})", "{t}.index_put_(({idx},), {b}[0])"]
VIEW_TARGETS = ["{t}[::2]", "{t}[0]", "{t}.view(-1)", "{t}.t()", "{t}[..., 1:]", "{t}.diagonal()",
                "{t}.narrow(0, 0, 1)", "{t}.expand(2, *{t}.shape)", "{t}.unsqueeze(0)", "{t}[:, 0]"]


def inplace(g):
    t = g.pick(prefer_recent=g.rng.random() < 0.5)
    if g.rng.random() < 0.3:
        t = g.rng.choice(VIEW_TARGETS).format(t=t)
    base = t.split("[")[0].split(".")[0]
    r = g.rank(base)
    b = operand(g, base)
    m = g.pick_like(base, lambda x, y: y.dtype == torch.bool and broadcastable(x, y)) or f"{base} > 0"
    d = g.dim(base) or 0
    form = g.rng.choice(INPLACE)
    code = form.format(t=t, b=b, s=scalar(g), m=m, sl=_slice(g, r), d=d, perm=_perm_index(base, d, max(r, 1)),
                       idx=f"torch.arange({base}.shape[0]).roll(1)")
    if g.rng.random() < 0.2 and "=" not in code:
        v = g.new()
        return g.stmt(f"{v} = {code}", [v], "inplace")
    return g.stmt(code, [], "inplace")


# ------------------------------------------------------------------------------------------------ breaks

def graph_break(g):
    a = g.pick()
    v = g.new()
    forms = [(f"print('{v}', {a}.shape, {a}.dtype, file=_G_out)", []),
             (f"{v} = {a} * 2 if {a}.sum().item() > 0 else {a} - 1", [v]),
             (f"{v} = {a}.sin() if bool(({a} > 0).any()) else {a}.cos()", [v]),
             (f"{v} = {a} + {a}.float().mean().nan_to_num().item()", [v]),
             (f"{v} = {a}[:{a}.shape[0] // 2] if {a}.dim() else {a}", [v]),
             (f"{v} = {a} * int({a}.numel() % 3)", [v])]
    code, defs = g.rng.choice(forms)
    return g.stmt(code, defs, "break")


# Ops reading the program's float argument (a value per call: a symbolic input after the first recompile)
FLOAT_ARG = ["{a} * {s}", "{a} + {s} * 2", "{a}.add({b}, alpha={s})", "torch.clamp({a}, min=-abs({s}))",
             "{a}.pow({s})", "F.leaky_relu({a}, {s})", "torch.full_like({a}, {s})", "torch.where({a} > {s}, {a}, {s})",
             "{a} / ({s} - 0.25)", "{a}.lerp({b}, {s})", "{a}.clamp(max={s}) * ({s} > 0)", "{s} - {a}",
             "torch.addcmul({a}, {b}, {b}, value={s})", "{a}.masked_fill({a} < 0, {s})", "{a}.fill_({s})"]


def float_arg(g):
    names = g.scalar_inputs()
    a = g.pick(isfloat)
    if not names or a is None:
        return None
    b = g.pick_like(a, lambda x, y: broadcastable(x, y) and isfloat(y)) or a
    form = g.rng.choice(FLOAT_ARG)
    v = g.new()
    if form.endswith("fill_({s})"):
        return g.stmt(f"{v} = {a}.clone()\n{v}.fill_({g.rng.choice(names)})", [v], "float_arg")
    return g.stmt(f"{v} = {form.format(a=a, b=b, s=g.rng.choice(names))}", [v], "float_arg")


OPS = {  # name: (weight, make)
    "unary": (10, unary), "binary": (12, binary), "where": (3, where), "ternary": (2, ternary), "cast": (4, cast),
    "type_as": (1, type_as), "reduce": (6, reduce), "softmax": (2, softmax), "scan": (2, scan), "sort": (1, sort),
    "view": (10, view), "join": (3, join), "matmul": (3, matmul), "conv": (2, conv), "norm": (3, norm),
    "pool": (2, pool), "pad": (2, pad), "index": (4, index), "factory": (1, factory), "inplace": (8, inplace),
    "break": (1, graph_break),
}
FLOAT_ARG_OPS = {**OPS, "float_arg": (6, float_arg)}    # programs with a float argument (float_args=True)


def choose(rng, float_args=False):
    table = FLOAT_ARG_OPS if float_args else OPS
    names = list(table)
    return table[rng.choices(names, weights=[table[n][0] for n in names])[0]][1]