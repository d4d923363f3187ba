"""Builtins, and the math and operator modules, evaluated at capture time around tensor work.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import functools
import math
import operator

import pytest
import torch

from .harness import Cases, r

cases = Cases()


def two():
    return r(3), r(3)


@cases.add(lambda: ([r(2), r(2), r(2)],))
def len_range_enumerate(xs):
    out = xs[0] * len(xs)
    for i, x in enumerate(xs):
        out = out + x * i
    for i, x in enumerate(xs, start=10):
        out = out - i
    return out, list(range(len(xs)))


@cases.add(lambda: ([r(2), r(2)], [r(2), r(2)]))
def zip_(xs, ys):
    return [a * b for a, b in zip(xs, ys)], [t for t in zip(xs, ys, [1, 2])][1][2] + xs[0]


@cases.add(lambda: (r(3), 2, 1.5, "s"))
def isinstance_checks(x, n, f, s):
    out = x
    if isinstance(x, torch.Tensor):
        out = out + 1
    if isinstance(n, int) and not isinstance(n, bool):
        out = out * n
    if isinstance(f, (int, float)):
        out = out + f
    if isinstance(s, str) and isinstance([1], list) and isinstance((x,), tuple) and isinstance({}, dict):
        out = out - 1
    if isinstance(x, torch.nn.Parameter):
        out = out * 100
    return out


@cases.add(lambda: (r(3),))
def issubclass_type_checks(x):
    out = x
    if issubclass(torch.nn.Linear, torch.nn.Module):
        out = out + 1
    if issubclass(bool, int) and not issubclass(int, bool):
        out = out * 2
    if type(x) is torch.Tensor and type(3) is int and type(x) is not torch.nn.Parameter:
        out = out - 3
    return out


class Box:
    pass


@cases.add(lambda: (r(3),))
def getattr_hasattr_setattr(x):
    box = Box()
    setattr(box, "value", x * 2)
    box.other = 5
    a = getattr(box, "value")
    b = getattr(box, "missing", 7)
    has = hasattr(box, "other"), hasattr(box, "nope"), hasattr(x, "shape")
    return a + b + box.other, has, getattr(x, "ndim"), getattr(torch, "float32")


@cases.add(lambda: (r(3), 4, 9))
def min_max_python_numbers(x, a, b):
    return x * max(a, b) + min(a, b) + max([3, 1, 2]) + min(5, 6, 4) + max((1.5, 0.5)), max(x.shape)


@cases.add(lambda: (r(3),))
def min_max_call_shapes_and_errors(x):
    out = []
    for call in (lambda: max(), lambda: min(1, 2, default=0), lambda: max(5), lambda: max([]),
                 lambda: max([1, "a"]), lambda: min([2, 1.0, 1]), lambda: max([1, 3, 3.0])):
        try:
            out.append(call())
        except (TypeError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
    return x + 1, out, max([1, 3], key=None), min(4, 2, key=None), max([], default=None)


@functools.total_ordering
class Version:
    def __init__(self, major, minor, log):
        self.major, self.minor, self.log = major, minor, log

    def __eq__(self, other):
        return (self.major, self.minor) == (other.major, other.minor)

    def __lt__(self, other):
        self.log.append((self.minor, other.minor))
        return (self.major, self.minor) < (other.major, other.minor)


@cases.add(lambda: (r(3),))
def min_max_by_user_comparisons(x):
    log = []
    a, b, c = Version(1, 2, log), Version(1, 5, log), Version(1, 5, log)
    hi, lo = max(a, b, c), min([b, a, c])
    return x * hi.minor + lo.minor, hi is b, log, max([a, b], key=lambda v: -v.minor) is a


@cases.add(lambda: (r(3),))
def sum_any_all_on_constants(x):
    return x * sum([1, 2, 3]) + any([False, 0, 1]) + all([]) + all((1, 0))


@cases.add(lambda: ([r(2), r(2), r(2)],))
def sum_of_tensor_list(xs):
    return sum(xs), sum(x.sum() for x in xs)


@cases.add(lambda: (r(3),))
def sorted_reversed(x):
    order = sorted([3, 1, 2])
    rev = list(reversed(order))
    keyed = sorted(["bb", "a", "ccc"], key=len, reverse=True)
    return [x * i for i in order], rev, keyed, x * order[-1]


@cases.add(lambda: (r(3),))
def abs_round_divmod_pow(x):
    q, m = divmod(17, 5)
    return x * abs(-3) + round(2.6) + round(3.14159, 2) + q + m + pow(2, 5) + pow(2.0, -1) + x ** 2, divmod(x.shape[0], 2)


@cases.add(lambda: (r(3),))
def map_filter(x):
    doubled = list(map(lambda t: t * 2, [x, x + 1]))
    evens = list(filter(lambda n: n % 2 == 0, range(7)))
    scaled = list(map(operator.mul, [x, x], [1, 2]))
    return doubled, evens, scaled


@cases.add(lambda: (r(3),))
def numeric_conversions(x):
    a = int(3.7) + int("12") + float(2) + float("1.5") + bool(3) + int(True)
    b = str(5) + str(1.5) + str(None) + str(x.shape[0])
    return x * a, b, repr(3), int(x.shape[0] / 2)


@cases.add(lambda: (r(3),))
def constructors(x):
    t = tuple([x, x + 1])
    lst = list((x, x * 2))
    d = dict(a=1)
    s = set([1, 2, 2])
    e = tuple(), list(), dict()
    return t, lst, d, s, e, tuple(range(3)), list("ab")


@cases.add(lambda: (r(3),))
def chr_ord_len_str(x):
    name = "layer" + str(2)
    return x * ord("a") + len(name) + len("abc" * 2), chr(65), name.upper(), "-".join(["a", "b"])


@cases.add(lambda: (r(3), 3))
def range_object(x, n):
    rg = range(1, n * 2, 2)
    return x * len(rg) + rg[1] + (3 in rg), list(rg), rg[-1]


@cases.add(lambda: (r(2, 3),))
def iter_next(x):
    it = iter([x, x + 1, x + 2])
    a = next(it)
    b = next(it)
    c = next(it, None)
    d = next(it, None)
    return a + b + c, d


@cases.add(lambda: (r(3),))
def callable_and_type_builtins(x):
    return x * callable(len) + (type(x).__name__ == "Tensor") + callable(3), type(1.0).__name__


@cases.add(lambda: (r(3),))
def all_any_on_shapes(x):
    shapes = [x.shape, (3,), torch.Size([3])]
    if all(s[0] == 3 for s in shapes) and not any(len(s) > 1 for s in shapes):
        return x * 2
    return x


@cases.add(lambda: (r(3),))
def string_methods_and_format(x):
    name = "Block_{}".format(3)
    parts = "a.b.c".split(".")
    return x * len(parts), name.lower(), name.replace("_", "-"), "%d-%s" % (2, "x"), name.startswith("Bl")


# ------------------------------------------------------------------------------------ math and operator

@cases.add(lambda: (r(4, 9),))
def math_on_shapes_and_constants(x):
    d = x.shape[-1]
    scale = 1.0 / math.sqrt(d)
    return x * scale + math.pi + math.log(2.0) + math.exp(1) + math.floor(2.7) + math.ceil(d / 2) + math.inf * 0 * 0


@cases.add(lambda: (r(3),))
def math_functions(x):
    return x * math.cos(math.pi) + math.pow(2, 3) + math.fabs(-1.5) + math.isqrt(17) + math.gcd(12, 18), math.isfinite(1.0)


@cases.add(two)
def operator_functions(x, y):
    return (operator.add(x, y), operator.mul(x, y), operator.sub(x, 2), operator.truediv(x, 2),
            operator.neg(y), operator.getitem([x, y], 1), operator.getitem(x, 0), operator.pow(x, 2))


@cases.add(lambda: ({"a": r(2), "b": r(2)}, [r(2), r(2), r(2)]))
def operator_itemgetter(d, xs):
    get_ab = operator.itemgetter("a", "b")
    get1 = operator.itemgetter(1)
    a, b = get_ab(d)
    return a + b + get1(xs), operator.itemgetter(slice(0, 2))(xs)


@cases.add(lambda: (r(2, 3),))
def operator_attrgetter(x):
    get_shape = operator.attrgetter("shape")
    get_t = operator.attrgetter("T")
    return get_t(x) * 2, get_shape(x), operator.attrgetter("dtype", "ndim")(x)


@cases.add(two)
def operator_methodcaller_and_comparisons(x, y):
    add = operator.methodcaller("add", 1)
    return add(x), operator.lt(x, y), operator.eq(3, 3), operator.contains([1, 2], 2), operator.matmul(x, y)


@cases.add(two)
def operator_inplace(x, y):
    z = x.clone()
    z = operator.iadd(z, y)
    z = operator.imul(z, 2)
    return z


class Options(__import__("typing").TypedDict):
    scale: float


def _validate(value, expected):
    """huggingface_hub's Union validation: each member tried, the TypeError of an impossible check caught."""
    errors = []
    for t in expected:
        try:
            if not isinstance(value, t):
                raise TypeError(f"not a {t.__name__}")
            return t.__name__
        except TypeError as e:
            errors.append(str(e))
    return errors


@cases.add(lambda: (r(3),))
def isinstance_of_a_typeddict_raises_inside_the_frame(x):
    config = {"scale": 2.0}
    try:
        issubclass(dict, Options)
        subclass = "no error"
    except TypeError as e:
        subclass = str(e)
    return x * 2, _validate(config, (Options, dict)), _validate({"t": x}, (Options, list)), subclass


# ------------------------------------------------------------------------------------ no tensor ops: no graph

@cases.add(lambda: (r(3, 4),), graphs=0)
def only_metadata_no_graph(x):
    return x.shape[0] * 2, x.dtype, len(x), x.dim()


@cases.add(lambda: (r(3), [1, 2]), graphs=0)
def return_inputs_unchanged_no_graph(x, xs):
    xs.append(len(xs))
    return x, xs, {"x": x}


@pytest.mark.parametrize("case", cases.params())
def test_builtins(case):
    case.run()


def test_sys_intern_of_a_constant_is_folded():
    import sys

    from graphjit.testing import check

    def fn(x):
        return x + len(sys.intern("abc")), sys.intern("key")

    check(fn, lambda: (torch.randn(3),), graphs=1)
