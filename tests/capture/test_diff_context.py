"""Context managers inside the frame (grad modes, autocast), f-strings, try/except/finally that raise
nothing, and user generator functions consumed by a loop.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib

import pytest
import torch

from .harness import Cases, r

cases = Cases()


def rg(*shape):
    return torch.randn(*shape).requires_grad_()


# ------------------------------------------------------------------------------------ grad modes

@cases.add(lambda: (rg(3), rg(3)))
def no_grad_block(x, y):
    with torch.no_grad():
        a = x * y
    b = x * y
    return a, b, a.requires_grad, b.requires_grad


@cases.add(lambda: (rg(3),))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
        c = x * 4
    return a, b, c


@cases.add(lambda: (rg(3),))
def set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        a = x.exp()
    with torch.set_grad_enabled(True):
        b = x.exp()
    return a, b, torch.is_grad_enabled()


@cases.add(lambda: (rg(3),))
def no_grad_then_detach(x):
    with torch.no_grad():
        stats = x.mean()
    return (x - stats) * 2, x.detach() * 3


@cases.add(lambda: (rg(3),), graphs=None)  # optional feature: only results are checked
def inference_mode_block(x):
    with torch.inference_mode():
        a = x * 2
    return a.clone(), x * 3


@cases.add(lambda: (rg(3),))
def is_grad_enabled_branch(x):
    if torch.is_grad_enabled():
        return x * 2
    return x * 3


# ------------------------------------------------------------------------------------ autocast

@cases.add(lambda: (r(4, 8), r(8, 4)), atol=1e-2, rtol=1e-2)
def autocast_cpu_bf16(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.relu(y)
    return y, z, y.dtype, (z.float() + 1).dtype


@cases.add(lambda: (r(4, 8), r(8, 4)), atol=1e-2, rtol=1e-2)
def autocast_nested_disabled(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = x @ w
    return a, b


@cases.add(lambda: (r(4, 8), r(8, 4)), atol=1e-2, rtol=1e-2)
def autocast_amp_namespace(x, w):
    with torch.amp.autocast(device_type="cpu", dtype=torch.bfloat16):
        return torch.mm(x, w).sum(), torch.is_autocast_enabled("cpu")


# ------------------------------------------------------------------------------------ f-strings and strings

@cases.add(lambda: (r(3), r(3)))
def fstring_keys(x, y):
    out = {}
    for i, t in enumerate((x, y)):
        out[f"layer_{i}.out"] = t * i
    name = f"{len(out)}:{x.shape[0]:03d}|{'abc'!r}|{1.5:.2f}"
    return out, name, out[f"layer_{1}.out"] + 1


@cases.add(lambda: (r(2, 3),))
def fstring_of_shape_and_dtype(x):
    key = f"{tuple(x.shape)}-{x.dtype}"
    table = {"(2, 3)-torch.float32": 2.0}
    return x * table.get(key, -1.0), key


# ------------------------------------------------------------------------------------ try/except/finally

@cases.add(lambda: (r(3),))
def try_except_not_raised(x):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    except (ValueError, TypeError) as e:
        y = x + len(str(e))
    else:
        y = y + 1
    return y


@cases.add(lambda: (r(3),))
def try_finally(x):
    log = []
    try:
        y = x.sin()
        log.append("body")
    finally:
        log.append("finally")
        y = y + 1
    return y, log


@cases.add(lambda: (r(3),))
def try_in_loop_with_continue(x):
    for i in range(3):
        try:
            if i == 1:
                continue
            x = x * 2
        finally:
            x = x + 1
    return x


@cases.add(lambda: (r(3),))
def exception_caught_constant(x):
    try:
        raise KeyError("k")
    except KeyError:
        x = x * 5
    try:
        {}["missing"]
    except KeyError:
        x = x + 1
    return x


@cases.add(lambda: (r(3), {"a": 1}))
def getattr_fallback_through_exception(x, cfg):
    try:
        scale = cfg["scale"]
    except KeyError:
        scale = 3
    return x * scale


# ------------------------------------------------------------------------------------ user context managers

class Recorder:
    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


@cases.add(lambda: (r(3),))
def user_context_manager_class(x):
    rec = Recorder()
    with rec as r_:
        y = x * 2
        r_.events.append("body")
    return y, rec.events


@contextlib.contextmanager
def scaled(store, k):
    store.append(k)
    yield k * 2
    store.append(-k)


@cases.add(lambda: (r(3),))
def contextlib_contextmanager(x):
    store = []
    with scaled(store, 3) as k:
        y = x * k
    return y, store


@cases.add(lambda: (r(3),))
def nullcontext_and_suppress(x):
    with contextlib.nullcontext():
        y = x + 1
    return y


# ------------------------------------------------------------------------------------ generators

def gen_powers(x, n):
    t = x
    for _ in range(n):
        yield t
        t = t * x


def gen_pairs(items):
    for i, item in enumerate(items):
        yield i, item


@cases.add(lambda: (r(3),))
def generator_for_loop(x):
    out = torch.zeros_like(x)
    for p in gen_powers(x, 3):
        out = out + p
    return out


@cases.add(lambda: (r(3), r(3)))
def generator_unpacking_and_list(x, y):
    pairs = list(gen_pairs([x, y]))
    total = sum(i * t for i, t in gen_pairs([x, y]))
    return pairs, total


@cases.add(lambda: (r(3),))
def generator_local_with_yield_from(x):
    def inner(t):
        yield t + 1
        yield t + 2

    def outer(t):
        yield from inner(t)
        yield t * 10

    return [v for v in outer(x)]


@cases.add(lambda: (r(3),))
def generator_next_and_early_exit(x):
    g = gen_powers(x, 10)
    first = next(g)
    second = next(g)
    for p in g:
        if p is not None:
            break
    return first + second


@pytest.mark.parametrize("case", cases.params())
def test_context_and_misc(case):
    case.run()
