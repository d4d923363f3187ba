"""A fuzz program: its inputs, statements and call plan, and the Python module it renders to.

A rendered program is a plain module: `make_inputs(seed, variant)` builds the arguments, `f(*args)` is
the function under test, `CALLS` is the call plan [(variant, seed), ...]. Variants "A" and "B" differ in
sizes (B forces a recompile), "L" has A's sizes in other memory layouts (a recompile on strides). "C",
the last call of a plan, has B's layouts and a third value of each size that differs between A and B:
it runs the graph made dynamic at B's recompile on sizes it was not traced with. The generator checks
statements on A, B and L only; a C call that eager refuses ends the plan without a verdict.

    prog = Program(mode="tensor", seed=1, sizes={"A": {"a": 3}, "B": {"a": 5}, "L": {"a": 3}},
                   inputs=[Input("x1", "f", ("a", 4), {"A": "t", "B": "t", "L": "c"})],
                   stmts=[Stmt("v2 = x1.sin() + 1", defs=("v2",), uses=("x1",))], returns=["v2"])
    ns = load(prog.source())
    ns["f"](*ns["make_inputs"](7, "A"))

Float dtypes are spelled F32/F16/BF16 in programs: `load(src, ref=True)` binds them to float64, which
turns the same program into its float64 reference run (inputs are rounded to their own dtype first).
"""
import dataclasses
import re

VARIANTS = ("A", "B", "L")

HEADER = '''\
import io
import math
import torch
import torch.nn.functional as F

# float dtypes by name: a float64 reference run binds all three to torch.float64
F32 = globals().get("F32", torch.float32)
F16 = globals().get("F16", torch.float16)
BF16 = globals().get("BF16", torch.bfloat16)
_G_out = io.StringIO()          # what the program prints (a graph break), compared like a global
'''

TENSOR_PRELUDE = '''
_KINDS = {  # kind: (dtype, dtype in a float64 reference run, values)
    "f": (torch.float32, F32, lambda g, s: torch.randn(s, generator=g) * 2),
    "fpos": (torch.float32, F32, lambda g, s: torch.rand(s, generator=g) * 2 + 0.5),
    "h": (torch.float16, F16, lambda g, s: torch.randn(s, generator=g)),
    "bf": (torch.bfloat16, BF16, lambda g, s: torch.randn(s, generator=g) * 2),
    "d": (torch.float64, torch.float64, lambda g, s: torch.randn(s, generator=g, dtype=torch.float64)),
    "i": (torch.int64, torch.int64, lambda g, s: torch.randint(-20, 20, s, generator=g)),
    "i32": (torch.int32, torch.int32, lambda g, s: torch.randint(-20, 20, s, generator=g)),
    "u8": (torch.uint8, torch.uint8, lambda g, s: torch.randint(0, 256, s, generator=g)),
    "b": (torch.bool, torch.bool, lambda g, s: torch.rand(s, generator=g) < 0.5),
}
_SPECIAL = {True: [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -3e38, 1e-40, 65504.0],
            False: [0, 1, -1, 127, 255, -2**31, 2**31 - 1]}

# layout: (shape of the base tensor, the argument as a view of the base)
_LAYOUTS = {
    "c": (lambda s: s, lambda b, s: b),
    "t": (lambda s: s[:-2] + (s[-1], s[-2]), lambda b, s: b.transpose(-1, -2)),       # transposed
    "s": (lambda s: s[:-1] + (s[-1] * 2,), lambda b, s: b[..., ::2]),                 # step 2
    "o": (lambda s: (math.prod(s) + 3,), lambda b, s: b[3:].view(s)),                 # storage offset
    "e": (lambda s: (1,) + s[1:], lambda b, s: b.expand(s)),                           # stride 0
    "p": (lambda s: (s[2], s[0], s[1]) + s[3:], lambda b, s: b.permute(1, 2, 0, *range(3, len(s)))),
    "cl": (lambda s: (s[0], s[2], s[3], s[1]), lambda b, s: b.permute(0, 3, 1, 2)),   # channels last
}
_MIN_RANK = {"c": 0, "t": 2, "s": 1, "o": 0, "e": 1, "p": 3, "cl": 4}


def _mk(shape, kind, seed, layout="c", special=0, perturb=None):
    """A deterministic input: values from `seed`, memory layout from `layout`, `special` odd values."""
    shape = tuple(shape)
    layout = layout if len(shape) >= _MIN_RANK[layout] and (layout != "cl" or len(shape) == 4) else "c"
    dtype, ref_dtype, values = _KINDS[kind]
    g = torch.Generator().manual_seed(seed)
    base_shape, as_view = _LAYOUTS[layout]
    base = values(g, base_shape(shape))
    floating = base.is_floating_point()
    if special and base.numel():
        pool = torch.tensor(_SPECIAL[floating], dtype=torch.float64 if floating else torch.int64)
        picks = torch.randint(0, base.numel(), (special,), generator=g)
        base.view(-1)[picks] = pool[torch.randint(0, len(pool), (special,), generator=g)].to(base.dtype)
    if perturb is not None and floating:   # relative noise, scaled up for 16-bit kinds to their rounding
        eps, k = perturb
        noise = torch.randn(base.shape, generator=torch.Generator().manual_seed(seed * 7 + 1000003 * (k + 1)))
        base = base * (1 + eps * {"h": 1000, "bf": 8000}.get(kind, 1) * noise.to(base.dtype))
    base = base.to(dtype).to(ref_dtype)
    return as_view(base, shape)


def _scalar(seed, special):
    """A Python float argument: a new value each call (so that it becomes a symbolic input); `special`
    makes some calls' values odd (NaN, an infinity, -0.0, huge)."""
    import random
    rng = random.Random(seed)
    if special and rng.random() < 0.3:
        return rng.choice([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, 1e-40])
    return round(rng.uniform(-3.0, 3.0), rng.choice([1, 2, 4, 7]))


def make_inputs(seed, variant="A", perturb=None):
    sizes, made = SIZES[variant], {}
    for name, kind, dims, layouts, special in INPUTS:
        if kind == "alias":     # a view of an earlier argument: two arguments, one storage
            made[name] = eval(dims[1].format(dims[0]), None, made)
        elif kind == "scalar":  # a Python float
            made[name] = _scalar(seed * 1000 + int(name[1:]), special)
        else:
            made[name] = _mk(tuple(sizes.get(d, d) for d in dims), kind, seed * 1000 + int(name[1:]),
                             layouts[variant], special, perturb)
    return list(made.values())
'''

FOOTER = '''

if __name__ == "__main__":      # rerun: python THIS_FILE [backend]   (exit 1 while the failure persists)
    import sys
    sys.path.insert(0, ".")     # run from the project root
    from tests.fuzz.runner import rerun
    sys.exit(rerun(__file__))
'''


@dataclasses.dataclass
class Input:
    """An argument: dims are ints or size symbols (keys of Program.sizes[variant]); kind "alias" is a
    view of an earlier argument, dims = (its name, an expression with {} for it); kind "scalar" is a Python
    float, another value each call (dims ())."""
    name: str
    kind: str                  # a key of _KINDS: f fpos h bf d i i32 u8 b; or "alias", "scalar"
    dims: tuple
    layouts: dict              # variant -> a key of _LAYOUTS
    special: int = 0           # how many odd values (NaN, inf, -0.0, huge; int extremes)

    def render(self):
        return f"    ({self.name!r}, {self.kind!r}, {self.dims!r}, {self.layouts!r}, {self.special}),"


@dataclasses.dataclass
class Stmt:
    """One or more lines of f's body, the names they bind and the names they read."""
    code: str
    defs: tuple = ()
    uses: tuple = ()
    tag: str = ""              # the op table entry that made it

    def lines(self, indent="    "):
        return [indent + line for line in self.code.splitlines()]


@dataclasses.dataclass
class Program:
    mode: str                  # "tensor" or "python"
    seed: int
    sizes: dict = dataclasses.field(default_factory=dict)
    inputs: list = dataclasses.field(default_factory=list)
    stmts: list = dataclasses.field(default_factory=list)
    returns: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)
    prelude: str = ""          # python mode: helpers, classes, globals and make_inputs
    params: list = dataclasses.field(default_factory=list)   # python mode: f's parameters
    triton: bool = False
    dynamic: object = None     # compile(dynamic=...) of the compiled run: None (automatic) or True
    grad: bool = False         # floating arguments require grad; gradients compared (runner.run's grad)

    def copy(self, **changes):
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields.update(inputs=[dataclasses.replace(i, layouts=dict(i.layouts)) for i in self.inputs],
                      stmts=list(self.stmts), returns=list(self.returns), calls=list(self.calls),
                      sizes={v: dict(s) for v, s in self.sizes.items()}, params=list(self.params))
        fields.update(changes)
        return Program(**fields)

    def arg_names(self):
        return [i.name for i in self.inputs] if self.mode == "tensor" else list(self.params)

    def body(self):
        lines = [line for s in self.stmts for line in s.lines()]
        ret = ", ".join(self.returns) + ("," if len(self.returns) == 1 else "")
        return lines + [f"    return ({ret})"]

    def source(self):
        parts = [HEADER]
        if self.mode == "tensor":
            parts.append(TENSOR_PRELUDE)
            parts.append(f"\nSIZES = {self.sizes!r}\nINPUTS = [  # name, kind, dims, layout per variant, "
                         "odd values\n" + "\n".join(i.render() for i in self.inputs) + "\n]\n")
        else:
            parts.append(self.prelude)
        parts.append(f"\n\ndef f({', '.join(self.arg_names())}):\n" + "\n".join(self.body()) + "\n")
        parts.append(f"\n\nCALLS = {self.calls!r}\nMODE = {self.mode!r}\nTRITON = {self.triton!r}\n")
        if self.dynamic is not None:
            parts.append(f"DYNAMIC = {self.dynamic!r}\n")
        if self.grad:
            parts.append("GRAD = True\n")
        return "".join(parts)

    def used_names(self):
        """Names f's body mentions, and the arguments the arguments it mentions are views of."""
        names = set(re.findall(r"[A-Za-z_]\w*", "\n".join(self.body())))
        for inp in reversed(self.inputs):
            if inp.kind == "alias" and inp.name in names:
                names.add(inp.dims[0])
        return names


def load(src, ref=False):
    """Executes a program's source in a fresh namespace (ref: the float64 reference, F32/F16/BF16 -> f64)."""
    import torch
    ns = {"__name__": "fuzzprog"}
    if ref:
        ns.update(F32=torch.float64, F16=torch.float64, BF16=torch.float64)
    exec(compile(src, "<fuzzprog>", "exec"), ns)
    return ns
