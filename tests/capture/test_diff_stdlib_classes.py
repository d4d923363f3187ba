"""Python that real libraries use (issue 19's classes): values of os.environ, time and random that change
between calls, collections.ChainMap, operator.length_hint and sys.intern, isinstance/issubclass with
collections.abc ABCs and runtime-checkable Protocols, str/bytes methods and f-strings of shapes, and
pure-Python standard-library code (unittest assertions, copy.copy, dataclasses helpers) called from the
compiled function. Each case runs compiled against eager (results, arguments after the call, graph count)
and against torch.compile with a counting backend: graphjit's graph count is at or under torch.compile's.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import collections
import collections.abc as cabc
import contextlib
import copy
import dataclasses
import operator
import os
import random
import sys
import time
import typing
import unittest
import warnings

import pytest
import torch

from graphjit import testing
from graphjit.testing import CompileCounter, check, check_raises, check_steps

from .harness import Cases, r

cases = Cases()


def r3():
    return (r(3),)


def torch_graphs(fn, make_args, calls, context=None, before=None):
    """Graphs torch.compile hands a counting backend over the calls `check` makes (arguments made under
    the same seeds); None when torch.compile itself fails on the function."""
    counter = CompileCounter()
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=counter)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call in range(calls):
                if before is not None:
                    before(call)
                torch.manual_seed(call)
                args = make_args()
                with (context() if context is not None else contextlib.nullcontext()):
                    compiled(*args)
    except Exception:  # noqa: BLE001 - torch.compile failing is recorded as "no count"
        return None
    finally:
        torch._dynamo.reset()
    return counter.frame_count


def assert_at_most_torch(counter, fn, make_args, calls, context=None, before=None):
    """graphjit's graph count is at or under torch.compile's, where torch.compile captured something (no
    graph at all is its frame run eagerly, e.g. sys.version_info on torch 2.11)."""
    theirs = torch_graphs(fn, make_args, calls, context, before)
    if theirs:
        assert counter.frame_count <= theirs, f"graphjit {counter.frame_count} graphs, torch.compile {theirs}"
    return theirs


def check_bounded(fn, *, calls=6, settled_after=2, context=None):
    """check(fn) over `calls` calls, without fullgraph, and assert the graph count stops growing after
    the first `settled_after` calls: a value that changes on every call costs no recompile per call (a
    float seen twice with two values is made symbolic once)."""
    inner = CompileCounter()
    before_call = []

    def make_args(call):
        before_call.append(inner.frame_count)
        return r3()
    counter = check(fn, make_args, calls=calls, graphs=None, backend=inner, fallback=True, compile_kwargs={},
                    context=context)
    before_call.append(counter.frame_count)
    assert len(set(before_call[settled_after:])) == 1, f"graphs before each call: {before_call}"
    return counter


# ------------------------------------------------------------------------------- os.environ, time, random

def environ_reads(x):
    v = os.environ.get("GJ_TEST_STDLIB", "ab")
    return x * len(v), v, "GJ_TEST_STDLIB" in os.environ, os.getenv("GJ_TEST_STDLIB", "none").upper()


@pytest.fixture
def env_var():
    old = os.environ.get("GJ_TEST_STDLIB")
    yield
    if old is None:
        os.environ.pop("GJ_TEST_STDLIB", None)
    else:
        os.environ["GJ_TEST_STDLIB"] = old


ENV_VALUES = ["x", "yyy", None, "x", "yyy", None]


def set_env(i):
    value = ENV_VALUES[i]
    if value is None:
        os.environ.pop("GJ_TEST_STDLIB", None)
    else:
        os.environ["GJ_TEST_STDLIB"] = value


def test_environ_values_that_change_between_calls(env_var):
    """Each key read is guarded on its value: one graph per distinct value, none more as values repeat."""
    steps = [testing.Step(r3, before=lambda i=i: set_env(i)) for i in range(len(ENV_VALUES))]
    counter = check_steps(environ_reads, steps, graphs=3, compile_kwargs={"fullgraph": True})
    assert_at_most_torch(counter, environ_reads, r3, len(ENV_VALUES), before=set_env)


def test_environ_missing_key_raises_as_in_eager(env_var):
    os.environ.pop("GJ_TEST_STDLIB", None)
    check_raises(lambda x: x * len(os.environ["GJ_TEST_STDLIB"]), r3)


def clock_reads(x):
    t0 = time.perf_counter()
    y = x.sin()
    t1 = time.perf_counter()
    now = time.time()
    return y * 2, t1 >= t0, now > 1e9


def test_time_values_cost_no_recompile_per_call():
    counter = check_bounded(clock_reads)
    assert_at_most_torch(counter, clock_reads, r3, 6)


def test_time_is_read_on_every_call():
    """time.time() is not a constant of the graph: each call of the compiled function reads the clock."""
    testing.compiler().reset()
    counter = CompileCounter()
    compiled = testing.compiler().compile(lambda x: (x + 1, time.time()), backend=counter)
    for _ in range(4):
        before = time.time()
        _, now = compiled(r(3))
        assert before <= now <= time.time()
    assert counter.frame_count <= 2


class SeededRandom:
    """A context for `check`'s eager and compiled runs of one call: both start from the same Python random
    state (seeded by the call), and the state each leaves is recorded, to compare afterwards."""

    def __init__(self):
        self.entered = 0
        self.states = []

    def __call__(self):
        return self

    def __enter__(self):
        random.seed(self.entered // 2)
        self.entered += 1

    def __exit__(self, *exc):
        self.states.append(random.getstate())

    def assert_states_match(self):
        for i in range(0, len(self.states), 2):
            assert self.states[i] == self.states[i + 1], f"call {i // 2}: random's state differs from eager's"


def random_draws(x):
    scale = random.random()
    k = random.randint(1, 10)
    picked = random.choice([1, 2, 3])
    return x * scale + k, picked, random.uniform(0, 1) < 2


def random_state_only(x):
    random.random()                 # drawn and dropped: the state still advances
    return x + 1


@pytest.mark.parametrize("fn", [random_draws, random_state_only], ids=lambda f: f.__name__)
def test_random_values_and_state_as_in_eager(fn):
    """The entry draws before its graph runs, on random's own generator and in the frame's order: values
    and state are eager's, and the drawn values are graph inputs, so no call recompiles."""
    seeded = SeededRandom()
    check_bounded(fn, context=seeded)
    seeded.assert_states_match()


@pytest.mark.parametrize("fn", [random_draws, random_state_only], ids=lambda f: f.__name__)
def test_random_graph_count_at_most_torch(fn):
    counter = check_bounded(fn, context=SeededRandom())
    assert counter.frame_count == 1
    assert_at_most_torch(counter, fn, r3, 6, context=SeededRandom())


# ------------------------------------------------------------------------------------------ ChainMap

@cases.add(r3)
def chainmap_lookups_and_children(x):
    base = {"a": 1, "b": 3}
    cm = collections.ChainMap({"a": 2}, base)
    child = cm.new_child({"c": 4})
    child["d"] = 5                   # writes go to the first map
    cm["b"] = 7
    return (x * cm["a"] + cm["b"] + child["c"] + len(child), sorted(child), "b" in cm, cm.get("z", 7),
            child.maps[0], base, cm.parents["a"])


@cases.add(lambda: (r(3), {"scale": 2.0}))
def chainmap_over_an_argument(x, config):
    cm = collections.ChainMap({}, config, {"shift": 1.0})
    cm["seen"] = True
    return x * cm["scale"] + cm["shift"], config, cm.maps[0]


class Lookups(cabc.Mapping):
    """A user Mapping: dict() of it calls keys(), then reads each key with __getitem__."""

    def __init__(self):
        self.data, self.reads = {"a": 1, "b": 2}, []

    def __getitem__(self, key):
        self.reads.append(key)
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


@cases.add(r3)
def dict_of_a_chainmap_and_a_mapping(x):
    cm = collections.ChainMap({"a": 2}, {"b": 3, "a": 0})
    merged = {"z": 0}
    merged.update(cm)
    lookups = Lookups()
    return x * dict(cm)["b"], dict(cm), merged, list(dict(cm)), dict(lookups), lookups.reads


@cases.add(lambda: (r(3), {"a": 1, "c": 2}))
def chainmap_writes_and_deletes_reach_the_first_map(x, d):
    cm = collections.ChainMap(d, {"b": 1})
    cm["k"] = 3
    del cm["a"]
    child = cm.new_child()
    child["z"] = x
    return x * cm["k"], cm.pop("k"), len(cm), child.parents.maps[0] is d, repr(cm.maps[1])


def chainmap_delete_of_a_key_in_a_later_map(x):
    cm = collections.ChainMap({}, {"a": 1})
    del cm["a"]                    # KeyError: only the first map is written
    return x


def test_chainmap_delete_raises_as_in_eager():
    check_raises(chainmap_delete_of_a_key_in_a_later_map, r3)


# -------------------------------------------------------------------------- length_hint, sys.intern

SENTINEL = object()


@cases.add(r3)
def length_hint_of_sized_values_and_iterators(x):
    it = iter(range(4))
    next(it)
    return (x * operator.length_hint([1, 2, 3]) + operator.length_hint((x, x)) + operator.length_hint({}, 4),
            operator.length_hint(it), operator.length_hint(iter("abc")), operator.length_hint(SENTINEL, 2),
            operator.length_hint(5), next(it))


@cases.add(r3)
def intern_and_friends(x):
    name = sys.intern("hidden_" + "states")
    return x * len(name), name, name == sys.intern("hidden_states")


@cases.add(r3)
def sys_version_info_and_float_info(x):
    new = sys.version_info >= (3, 8)
    return (x * new + sys.version_info.major, sys.version_info[:2] < (4, 0), sys.version_info,
            sys.float_info.epsilon, sys.version_info == tuple(sys.version_info), sys.maxsize > 2 ** 31)


# ------------------------------------------------------------------------------------------ typing

@cases.add(r3)
def abc_isinstance_and_issubclass(x):
    return (x * isinstance([1], cabc.Sequence) + isinstance({}, cabc.Mapping) + isinstance(x, cabc.Iterable),
            isinstance(len, cabc.Callable), isinstance(x, cabc.Sequence), issubclass(list, cabc.Sequence),
            issubclass(dict, cabc.MutableMapping), isinstance((1,), typing.Sequence), isinstance(x, typing.Callable),
            isinstance("s", cabc.Sized), isinstance(iter([x]), cabc.Iterator))


NUMBER = typing.Union[int, float]
MAYBE_INT = typing.Optional[int]          # typing's subscription in the frame reads typing's caches


@cases.add(r3)
def isinstance_with_unions(x):
    return (x * isinstance(3, int | str) + isinstance(2.5, NUMBER), isinstance(None, MAYBE_INT),
            issubclass(bool, int | None), isinstance("s", NUMBER))


@typing.runtime_checkable
class Closeable(typing.Protocol):
    def close(self): ...


class File:
    def close(self):
        return None


@cases.add(lambda: (r(3), File()))
def method_protocols(x, f):
    return x * isinstance(f, Closeable) + isinstance(x, Closeable), isinstance(3, Closeable)


NOT_A_CLASS = File()


def isinstance_with_an_instance(x):
    y = x + 1
    return y * isinstance(y, NOT_A_CLASS)


def test_isinstance_with_an_instance_raises_at_a_graph_break():
    """The trace can't model the call (its second argument is no class): a graph break at the call, not
    the whole frame run eagerly; the graph before it is kept and CPython raises eager's TypeError."""
    check_raises(isinstance_with_an_instance, r3, graphs=1)


@typing.runtime_checkable
class HasShape(typing.Protocol):
    shape: object


def data_protocol(x):
    return x * isinstance(x, HasShape) + isinstance(3, HasShape)


def test_data_protocol_isinstance_of_a_tensor():
    """isinstance with a Protocol that has data members can't be decided from the class (issubclass raises
    TypeError): a graph break at the call, which runs in CPython. torch 2.11 and 2.13 fail on it
    (InternalTorchDynamoError: no count to compare with); torch 2.14 captures one graph, as graphjit."""
    counter = check(data_protocol, r3, graphs="first", compile_kwargs={})
    assert counter.frame_count >= 1
    assert_at_most_torch(counter, data_protocol, r3, 4)


# ---------------------------------------------------------------------------------------- str, bytes

@cases.add(r3)
def str_methods(x):
    s = "{}-{:>3}".format("a", 3)
    parts = "a,b,c".split(",")
    joined = "-".join(parts)
    return (x * len(s) + len(joined) + s.startswith("a") + joined.upper().count("B"), s, parts,
            "  pad ".strip(), "a_b".replace("_", "."), "x".endswith(("x", "y")), "%s:%d" % ("k", 2),
            "ab".partition("a"), "Title".lower().title(), "3".zfill(3), "k=v".split("=", 1),
            "abc".translate(str.maketrans("a", "b")), bytes.fromhex("4142"), int.from_bytes(b"\x01\x00", "little"))


@cases.add(lambda: (r(3), {"lr": 0.1, "steps": 3}))
def join_of_iterators_and_generators(x, config):
    pulled = []

    def names():
        for k in sorted(config):
            pulled.append(k)
            yield k
    return (x * len(", ".join(f"{k}={v}" for k, v in config.items())), "".join(reversed("abc")),
            "-".join(names()), pulled, b"".join(iter([b"a", b"b"])), "/".join(map(str, x.shape)))


@cases.add(lambda: (r(2, 3),))
def format_specs(x):
    return (x + 1, "%r" % (tuple(x.shape),), "{0!r:>10}".format("a"), f"{x.shape!r}", f"{x.dtype!s:>20}",
            f"{3.14159:.3e}", format(x.shape[0], "b"), "{:%}".format(0.5))


@cases.add(r3)
def bytes_methods(x):
    b = "héllo-wörld".encode("utf-8")
    return (x * len(b), b.decode("utf-8"), b.split(b"-"), b.startswith(b"h"), b.hex(), bytes([65, 66]), bytes(2),
            b"%d" % 5, b"-".join([b"a", b"b"]), "abc".encode().upper())


@cases.add(lambda: (r(2, 3),))
def fstrings_of_shapes(x):
    return x + 1, f"{x.shape}", f"{tuple(x.shape)}", f"{x.shape[0]:03d}x{x.size(1)}", f"{x.dtype}", repr(x.shape), str(x.device)


# -------------------------------------------------------------------------------- pure-Python stdlib

class Asserts(unittest.TestCase):
    def runTest(self):
        pass


@cases.add(r3)
def unittest_assertions_that_pass(x):
    t = Asserts()
    t.assertEqual(x.shape, (3,))
    t.assertTrue(x.numel() == 3)
    t.assertIn("a", ["a", "b"])
    t.assertIsInstance(x, torch.Tensor)
    t.assertGreater(x.dim(), 0)
    return x + 1


@cases.add(r3)
def more_unittest_assertions(x):
    t = Asserts()
    t.assertAlmostEqual(1.0, 1.0 + 1e-9)
    t.assertSequenceEqual([1, 2], (1, 2))
    t.assertDictEqual({"a": 1}, {"a": 1})
    t.assertIsNone(None)
    t.assertNotEqual(1, 2)
    return x + 1


def unittest_assertion_that_fails(x):
    Asserts().assertEqual(x.shape[0], 4)
    return x + 1


def unittest_assertion_with_a_message(x):
    Asserts().assertTrue(x.shape[0] == 4, msg=f"bad shape {tuple(x.shape)}")
    return x


def unittest_dict_assertion_that_fails(x):
    Asserts().assertDictEqual({"a": 1}, {"a": 2})      # the message is a diff of the two dicts
    return x


@pytest.mark.parametrize("fn", [unittest_assertion_that_fails, unittest_assertion_with_a_message,
                                unittest_dict_assertion_that_fails], ids=lambda f: f.__name__)
def test_failing_unittest_assertion_raises_as_in_eager(fn):
    check_raises(fn, r3)


@dataclasses.dataclass
class Point:
    a: int
    b: float = 1.0
    tags: list = dataclasses.field(default_factory=list)


@cases.add(r3)
def dataclasses_replace_and_asdict(x):
    p = Point(1, 2.0)
    q = dataclasses.replace(p, b=3.0)
    d = dataclasses.asdict(q)
    return x * q.b + d["a"], d, dataclasses.astuple(p), dataclasses.fields(p)[0].name, p == Point(1, 2.0)


@dataclasses.dataclass
class Inner:
    t: torch.Tensor
    n: int = 1


@dataclasses.dataclass
class Outer:
    inner: Inner
    items: list


@cases.add(r3, graphs="first", compile_kwargs={})
def dataclasses_asdict_of_tensors(x):
    """asdict deep-copies each field: a tensor's deepcopy is a graph break (torch.compile breaks too)."""
    o = Outer(Inner(x, 2), [Inner(x * 2)])
    d = dataclasses.asdict(o)
    r = dataclasses.replace(o.inner, n=5)
    return d["inner"]["t"] + d["items"][0]["t"], r.n, r.t is o.inner.t, dataclasses.astuple(o.inner)[1]


@cases.add(lambda: (r(3), {"t": r(2)}))
def copy_and_deepcopy(x, d):
    c = copy.copy(d)
    c["new"] = x
    nested = copy.deepcopy([1, [2, 3]])
    nested[1].append(4)
    return c["t"] * 2, sorted(d), nested


@cases.add(lambda: (r(3), [1, 2], {"k": 1}))
def copy_copy(x, items, mapping):
    shallow = copy.copy(items)
    shallow.append(x)                  # the copy, not the argument
    m = copy.copy(mapping)
    m["new"] = 2
    p = copy.copy(Point(1, 2.0, [x]))
    p.b = 5.0
    return len(items), len(shallow), m, mapping, p.b, p.tags[0] * 2


@pytest.mark.parametrize("case", cases.params())
def test_stdlib_class(case):
    counter = case.run()
    calls = case.options.get("calls", 4)
    assert_at_most_torch(counter, case.fn, case.make_args, calls)


# ------------------------------------------------------------------------- identity of interned strings

def interned_identity(x):
    same = sys.intern("hidden_" + "states") is sys.intern("hidden_states")
    return x * same, sys.intern("a") is sys.intern("b"), sys.intern("a") is not sys.intern("a")


def test_identity_of_interned_strings():
    """sys.intern returns the interned table's one str for its value, so `is` between two of its results
    is ==: answered in the graph, the frame not run eagerly (fullgraph)."""
    counter = check(interned_identity, r3)
    assert assert_at_most_torch(counter, interned_identity, r3, 4) == 1


def built_str_is_interned(x, suffix="states"):
    name = "hidden_" + suffix
    return x * (name is sys.intern("hidden_states"))


def test_identity_of_a_built_str_and_an_interned_one_is_refused():
    """A str sys.intern did not return may or may not be the interned object (a concatenation is a new
    one, a code constant the compiler interned is it): `is` with it is refused, and the frame runs eagerly."""
    counter = check(built_str_is_interned, r3, graphs=0, compile_kwargs={})
    assert_at_most_torch(counter, built_str_is_interned, r3, 4)
