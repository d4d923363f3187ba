"""C functions of the standard library that capture traces through pure-Python equivalents
(graphjit/capture/polyfills.py: itertools, functools.reduce, Counter's counting loop, heapq), min/max with a key
over tensors, functools.partial's attributes, OrderedDict.move_to_end and popitem: compiled vs eager, one graph, with the laziness and
side effects of the originals (which items an iterator pulls, and when)."""
import collections
import enum
import functools
import heapq
import inspect
import itertools
import operator

import pytest
import torch

import graphjit
from graphjit import testing
from graphjit.capture import polyfills

from .harness import Cases, assert_refused, r

cases = Cases()


@cases.add(lambda: (r(3), r(3)))
def chain_of_lists_and_a_generator(x, y):
    return sum(itertools.chain([x, y], (t * 2 for t in (x, y))))


@cases.add(lambda: (r(3),))
def chain_is_lazy(x):
    pulled = []

    def items():
        for i in range(5):
            pulled.append(i)
            yield x * i
    first = next(itertools.chain(items()))
    return first, len(pulled)


@cases.add(lambda: (r(2), r(2)))
def product_and_repeat(x, y):
    pairs = list(itertools.product([x, y], [1, 2], repeat=1))
    return sum(t * k for t, k in pairs), len(list(itertools.product(range(2), repeat=3)))


@cases.add(lambda: (r(4),))
def accumulate_with_and_without_func(x):
    parts = [x, x * 2, x * 3]
    return list(itertools.accumulate(parts)), list(itertools.accumulate(parts, torch.maximum, initial=x - 1))


@cases.add(lambda: (r(3),))
def islice_pulls_what_cpython_pulls(x):
    it = iter([x * i for i in range(8)])
    taken = list(itertools.islice(it, 1, 6, 2))
    return taken, next(it), list(itertools.islice(range(10), 3))


@cases.add(lambda: (r(3), r(3)))
def zip_longest_pairwise_starmap(x, y):
    out = [a * b for a, b in itertools.zip_longest([x, y, x], [y], fillvalue=1.0)]
    pairs = [a - b for a, b in itertools.pairwise([x, y, x + y])] if hasattr(itertools, "pairwise") else []
    return out, pairs, list(itertools.starmap(torch.add, [(x, y), (y, x)]))


@cases.add(lambda: (r(5),))
def takewhile_dropwhile(x):
    values = [1, 2, 3, 0, 4]
    return (sum(x * v for v in itertools.takewhile(lambda v: v > 0, values)),
            [x * v for v in itertools.dropwhile(lambda v: v > 0, values)])


@cases.add(lambda: (r(3), r(3)))
def reduce_over_tensors(x, y):
    return functools.reduce(operator.add, [x, y, x * y]), functools.reduce(torch.mul, [], x)


@cases.add(lambda: (r(3),))
def counter_counts(x):
    counts = collections.Counter("abracadabra")
    counts.update(["a", "z"])
    return x * counts["a"] + counts["z"], sorted(counts.items())


@cases.add(lambda: (r(3), r(5)))
def max_and_min_with_a_key_over_tensors(x, y):
    return max([x, y], key=lambda t: t.numel()) * 2, min(x, y, key=lambda t: t.shape[0]) + 1


def scaled(x, scale=1.0, shift=0.0):
    return x * scale + shift


PARTIAL = functools.partial(scaled, scale=2.0)


@cases.add(lambda: (r(3),))
def partial_attributes(x):
    p = functools.partial(scaled, x, shift=1.0)
    return p.func(x), p.args[0] * 2, PARTIAL.keywords["scale"] * x, PARTIAL(x)


@cases.add(lambda: (r(3),))
def keywords_of_a_partial_made_in_the_frame(x):
    p = functools.partial(scaled, shift=1.0)
    k = p.keywords
    before = p(x)
    k["shift"] = 3.0                 # the partial's own dict: the next call sees it
    return before, p(x), p.keywords["shift"], sorted(k), p.keywords is k


@cases.add(lambda: (r(3),))
def a_partial_of_a_partial_is_flattened(x):
    inner = functools.partial(scaled, x, shift=1.0)
    k = inner.keywords
    k["shift"] = 2.0                 # the inner partial's dict as it is when the outer one is made
    p = functools.partial(inner, 3.0)
    return p(), p.func is scaled, len(p.args), p.args[1], p.keywords, p.keywords is k


def test_a_partial_over_an_outside_partial_keeps_its_attributes_opaque():
    """partial(PARTIAL, x) flattens PARTIAL only if it has no instance dict, which can't be read without
    making one: its func, args and keywords are refused, a call is captured."""
    assert_refused(lambda x: functools.partial(PARTIAL, x).func(x), r(3))
    testing.check(lambda x: functools.partial(PARTIAL, x, shift=1.0)(), lambda: (r(3),))


@cases.add(lambda: (r(3),))
def defaultdicts_made_in_the_frame(x):
    groups = collections.defaultdict(list)
    for i, t in enumerate([x, x * 2, x * 3]):
        groups[i % 2].append(t)
    zeros = collections.defaultdict(lambda: x * 0)      # a factory that makes a tensor
    zeros["a"] += x
    counts = collections.defaultdict(int, {"z": 5})
    counts["q"] += 1
    plain = collections.defaultdict()                     # no factory: a missing key raises KeyError
    try:
        plain["k"]
        missed = False
    except KeyError:
        missed = True
    return (sum(groups[0]), len(groups[1]), zeros["a"], zeros["b"], sorted(zeros), dict(counts), missed,
            groups.default_factory is list, counts)


@cases.add(lambda: (r(3),))
def deques_made_in_the_frame(x):
    bounded = collections.deque([1, 2, 3], maxlen=3)
    bounded.append(4)                   # drops 1
    bounded.appendleft(0)               # drops 4
    window = collections.deque(maxlen=2)
    for t in (x, x * 2, x * 3):
        window.append(t)
    q = collections.deque()
    q.extend([x, x + 1])
    q.extendleft([x - 1])
    first, last = q.popleft(), q.pop()
    rotated = collections.deque(range(5))
    rotated.rotate(2)
    rotated.rotate(-1)
    try:
        collections.deque()[0:1]
        sliced = True
    except TypeError:
        sliced = False
    return (list(bounded), sum(window), first, last, list(rotated), len(q), bounded.maxlen, bounded[0],
            bounded[-1], 2 in bounded, sliced, [t * 2 for t in reversed(window)], list(window), bounded)


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Access(enum.Flag):
    READ = 1
    WRITE = 2


class Split(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@cases.add(lambda: (r(3),))
def enum_members_by_value(x):
    green = Color(2)
    try:
        Color(7)
        unknown = False
    except ValueError:
        unknown = True
    return (x * green.value, green.name, green is Color.GREEN, Access(3) == Access.READ | Access.WRITE,
            Split("eval") is Split.EVAL, unknown)


@cases.add(lambda: (r(3),))
def enum_classes_iterated_and_measured(x):
    return (x * len(Color), [c.name for c in Color], list(Access), Split.EVAL in Split,
            sum(c.value for c in Color), sorted(Split, reverse=True))


@cases.add(lambda: (r(3), "abcd"))
def itertools_combinatorics(x, s):
    pairs = itertools.combinations(s, 2)       # the iterable is consumed when called, as the C functions
    return (x + len(list(pairs)), list(itertools.permutations(s[:3])), list(itertools.permutations(s, 2)),
            list(itertools.combinations_with_replacement(s[:2], 2)), list(itertools.repeat(x, 2))[1] is x,
            list(itertools.chain.from_iterable([[1], (2, 3), "ab"])),
            sorted(collections.Counter(s + "aa").elements()),
            list(itertools.islice(itertools.repeat(7), 3)), list(itertools.combinations(range(3), 5)))


@cases.add(lambda: (r(3),))
def itertools_repeat_times(x):
    out = [list(zip("ab", itertools.repeat(x))), list(itertools.repeat(2, times=2)), list(itertools.repeat(3, -2))]
    try:
        out.append(list(zip("ab", itertools.repeat(1, None))))
    except TypeError as e:
        out.append(str(e))
    return x + 1, out


@cases.add(lambda: (r(3), {"a": 1}))
def isinstance_with_typing_aliases(x, d):
    import typing
    return (x + 1, isinstance(d, typing.Mapping), isinstance(d, (typing.List, typing.Tuple)),
            isinstance(x, typing.Hashable), isinstance(scaled, typing.Callable),
            issubclass(dict, typing.MutableMapping), isinstance([1], typing.Sequence))


@cases.add(lambda: (r(3),))
def ordered_dict_move_to_end_and_popitem(x):
    d = collections.OrderedDict(a=x, b=x * 2, c=x * 3)
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    first = d.popitem(last=False)
    plain = {"p": x, "q": x + 1}
    return list(d.keys()), first, d.popitem(), plain.popitem(), hasattr(plain, "move_to_end"), len(plain)


def reorder_outside(x, d):
    d.move_to_end("a")
    key, value = d.popitem(last=False)
    return x * value, key


@cases.add(lambda: (r(3), collections.OrderedDict(a=1, b=2, c=3)))
def an_outside_ordered_dict_keeps_its_new_order(x, d):
    return reorder_outside(x, d)


class Registry(dict):
    def __missing__(self, key):
        return len(key)


def lookup_or_100(table, key):
    try:
        return table[key]
    except KeyError:
        return 100


@cases.add(lambda: (r(3), collections.Counter("ab")))
def a_missing_counter_key_is_0(x, counter):
    """dict.__getitem__ of a missing key calls the class's __missing__; capture raised KeyError, so the
    except branch ran: a silent wrong result (100 for 0)."""
    return x * lookup_or_100(counter, "zz"), lookup_or_100(collections.Counter("a"), "b")


@cases.add(lambda: (r(3), Registry(a=1)))
def a_user_missing_is_traced(x, registry):
    return x * lookup_or_100(registry, "abc"), lookup_or_100(Registry(), "ab")


@cases.add(lambda: (r(3), collections.defaultdict(list)), graphs=None)
def a_defaultdict_inserts_its_default(x, table):
    """defaultdict's __missing__ inserts into a dict from outside the frame: the graph breaks there."""
    found = lookup_or_100(table, "k")
    return x * len(found), len(table)


@cases.add(lambda: (r(3), collections.defaultdict(None, a=1)))
def a_defaultdict_without_a_factory_raises_key_error(x, table):
    return x * lookup_or_100(table, "k"), x * lookup_or_100(table, "a")


class Tracked:
    """An item whose comparisons are counted, in order: the heap functions must compare what the C ones
    compare (a user __lt__ with effects sees the same calls)."""
    log = []

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        Tracked.log.append((self.v, other.v))
        return self.v < other.v

    def __repr__(self):
        return f"T{self.v}"


@cases.add(lambda: (r(3),))
def heap_functions_on_a_list(x):
    heap = [9, 4, 7, 1, 8, 2, 6]
    heapq.heapify(heap)
    heapq.heappush(heap, 3)
    low = heapq.heappop(heap)
    replaced = heapq.heapreplace(heap, 5)
    kept = heapq.heappushpop(heap, 0)
    return x * low + replaced + kept, list(heap)


@cases.add(lambda: (r(3),))
def heap_comparisons_are_the_c_functions(x):
    Tracked.log.clear()
    heap = [Tracked(v) for v in (5, 3, 8, 1, 9, 2)]
    heapq.heapify(heap)
    heapq.heappush(heap, Tracked(0))
    top = heapq.heappop(heap)
    return x * top.v, [t.v for t in heap], list(Tracked.log)


@cases.add(lambda: (r(3),))
def heap_errors_match(x):
    out = []
    for call in (lambda: heapq.heappop([]), lambda: heapq.heapreplace([], 1), lambda: heapq.heappush((), 1),
                 lambda: heapq.heappop((1,)), lambda: heapq.heapify((1,)), lambda: heapq.heappushpop((), 1)):
        try:
            call()
        except (IndexError, TypeError) as e:
            out.append((type(e).__name__, str(e)))
    return x + len(out), out


@cases.add(lambda: (r(3), ["a", "b", "a", "c", "b", "a", "d"]))
def counter_most_common_and_nlargest(x, words):
    top = collections.Counter(words).most_common(2)
    largest = heapq.nlargest(3, [(2, "x"), (5, "y"), (2, "z"), (7, "w")], key=lambda p: p[0])
    smallest = heapq.nsmallest(2, iter([4, 1, 3, 1]))
    return x * top[0][1], top, largest, smallest, heapq.nlargest(0, [1, 2]), heapq.nlargest(-1, [1, 2])


def _scaled(x, scale=2.0, *, shift=0):
    return x * scale + shift


@cases.add(lambda: (r(3),))
def signature_parameters_and_their_views(x):
    # diffusers' Attention.forward: set(inspect.signature(processor.__call__).parameters.keys())
    params = inspect.signature(_scaled).parameters
    names = set(params.keys())
    return (x * len(names) if "scale" in names else x, sorted(names), list(params), list(params.keys()),
            "shift" in params.keys(), len(params.keys()), type(params.keys()).__name__)


@pytest.mark.parametrize("case", cases.params())
def test_stdlib(case):
    case.run()


def test_a_signature_follows_the_functions_defaults():
    """inspect.signature of a function read from outside the frame is guarded on its code and defaults:
    `h.__defaults__ = None` makes every parameter required, and the compiled function sees it."""
    def required(x, fn):
        params = inspect.signature(fn).parameters
        return x * sum(1 for name in params if params[name].default is inspect.Parameter.empty)

    def h(a, b=1):
        pass
    counter = testing.CompileCounter("eager")
    compiled = graphjit.compile(required, backend=counter)
    x = torch.ones(1)
    assert compiled(x, h).item() == required(x, h).item() == 1.0
    h.__defaults__ = None
    assert compiled(x, h).item() == required(x, h).item() == 2.0
    assert counter.frame_count == 2


def test_a_partials_keywords_written_in_the_frame_reach_the_partial():
    """p.keywords is the partial's own dict: a write in the frame is replayed on it; calling p after the
    write is refused (the call would use the keywords as traced), so the frame breaks there."""
    p = functools.partial(scaled, scale=2.0)

    def f(x):
        p.keywords["shift"] = 5.0
        return x * 2, p(x)
    testing.check(f, lambda: (r(3),), graphs=None)
    assert p.keywords == {"scale": 2.0, "shift": 5.0}


@pytest.mark.parametrize("name", ["combinations", "combinations_with_replacement", "permutations"])
def test_combinatoric_polyfills_emit_what_itertools_emits(name):
    for pool in ("", "a", "abcd", range(5)):
        for n in range(6):
            assert list(getattr(polyfills, name)(pool, n)) == list(getattr(itertools, name)(pool, n)), (pool, n)


def test_each_polyfill_is_registered_for_its_c_original():
    assert polyfills.POLYFILLS[itertools.chain] is polyfills.chain
    assert polyfills.POLYFILLS[functools.reduce] is polyfills.reduce
    assert polyfills.POLYFILLS[itertools.combinations] is polyfills.combinations
    assert polyfills.polyfill_of([]) is None            # unhashable values have none


# ---- functools.lru_cache / cache: the wrapped function is traced, the cache left alone ----

@functools.lru_cache(maxsize=None)
def cached_scale(n, offset=0.5):
    return n * 2 + offset


@functools.cache
def cached_pattern(n):
    return tuple(i % 2 for i in range(n))


class Cached:
    def __init__(self, k):
        self.k = k

    @functools.lru_cache(maxsize=4)
    def factor(self, n):
        return self.k * n


def test_lru_cached_functions_are_traced():
    obj = Cached(3)

    def f(x):
        mask = torch.tensor(cached_pattern(x.shape[0]), dtype=x.dtype)
        return x * cached_scale(3) * mask + obj.factor(2) + cached_scale(1, offset=1.0)
    testing.check(f, lambda: (r(4),), graphs=1)


BUILDS = []


@functools.lru_cache(maxsize=None)
def cached_with_effect(n):
    BUILDS.append(n)                 # eager runs this once per n: the compiled call must not replay it
    return n + 1


def test_lru_cached_function_with_effects_breaks():
    BUILDS.clear()
    cached_with_effect.cache_clear()

    def f(x):
        return x * cached_with_effect(2)
    compiled = graphjit.compile(f)
    for _ in range(3):
        testing.assert_same(compiled(r(3) * 0 + 1), torch.ones(3) * 3)
    assert BUILDS == [2], BUILDS
    explained = graphjit.explain(f)(r(3))
    assert any("lru_cache" in e.reason for e in explained.break_reasons), explained.break_reasons


_STATE = [2]


@functools.lru_cache(maxsize=None)
def cached_from_state(k):
    return _STATE[0] * k


def _scaled_by_cached_state(x):
    return x * cached_from_state(1)


@pytest.mark.parametrize("compiled_first", [False, True])
def test_lru_cached_value_from_an_earlier_state_is_what_eager_returns(compiled_first):
    """The cache keeps the value computed when it was filled: after the state the body reads changes
    (its guards retrace), the traced body's value is not the cached one, so the call is refused."""
    _STATE[0] = 2
    cached_from_state.cache_clear()
    graphjit.reset()
    compiled = graphjit.compile(_scaled_by_cached_state, backend="eager")
    x = torch.ones(2)
    for step in range(3):
        if step == 1:
            _STATE[0] = 5
        calls = (compiled, _scaled_by_cached_state) if compiled_first else (_scaled_by_cached_state, compiled)
        results = [fn(x) for fn in calls]
        assert torch.equal(results[0], results[1]) and results[0][0].item() == 2.0
    graphjit.reset()


class Lazy:
    def __init__(self, k):
        self.k = k

    @functools.cached_property
    def table(self):
        return [self.k * i for i in range(3)]


def test_cached_property_computed_and_stored():
    outside = Lazy(2)

    def f(x):
        made = Lazy(3)
        return x * made.table[2] + made.table[1] + outside.table[1], "table" in outside.__dict__
    compiled = graphjit.compile(f)
    x = r(3)
    testing.assert_same(compiled(x), (x * 6 + 3 + 2, True))
    assert outside.__dict__["table"] == [0, 2, 4]
    outside.__dict__["table"] = [0, 10, 0]          # what the instance dict holds wins, as in CPython
    testing.assert_same(compiled(x), (x * 6 + 3 + 10, True))
