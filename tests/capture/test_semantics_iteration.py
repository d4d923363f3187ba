"""Python semantics of capture: live dict views, lazy iterators, sets and dicts keyed by tensors, and the
identity of tensors through in-place ops. Each case runs compiled with fullgraph=True (capture only: the
harness's backend runs the graph as is) against plain Python, several calls on fresh inputs, comparing
results, mutated arguments and the calls made by side-effecting functions (recorded in a `log` argument).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import collections
import contextlib

import pytest
import torch

from graphjit.testing import clone_tree
from .harness import Cases, assert_refused, gj, r

cases = Cases()


def x_log():
    return r(3), []


def x_dict():
    return r(2), {"a": r(2), "b": 1}


# ------------------------------------------------------------------------------------------- dict views

@cases.add(lambda: (r(2),))
def views_see_later_mutation(x):
    d = {"a": 1}
    k, v, it = d.keys(), d.values(), d.items()
    d["b"] = 2
    d["a"] = x + 1
    del_before = len(k)
    del d["b"]
    return x + 1, list(k), list(v), list(it), len(k), del_before, "a" in k, "b" in k, ("b", 2) in it


@cases.add(x_dict)
def views_of_input_dict(x, d):
    k, items = d.keys(), d.items()
    d["new"] = x * 2
    d.pop("b")
    return list(k), [key for key, _ in items], len(items), "new" in k, "b" in k


@cases.add(lambda: (r(2),))
def keys_view_set_operations(x):
    d = {"a": 1, "b": 2}
    k = d.keys()
    d["c"] = 3
    return (x + 1, k & {"a", "z"}, k | {"z"}, k - {"a"}, k ^ {"b", "q"}, {"a", "c"} & k, k == {"a", "b", "c"},
            k <= {"a", "b", "c", "d"}, k.isdisjoint(["q"]), d.items() & {("a", 1), ("c", 4)},
            sorted(k | ["y", "x"]), list(k - {"b"}), list(k | {"w", "v"}))


@cases.add(lambda: (r(2),))
def reversed_views(x):
    d = {"a": 1}
    k = d.keys()
    d["b"] = 2
    return x + 1, list(reversed(k)), list(reversed(d.items())), list(reversed(d.values())), list(reversed(d))


@cases.add(lambda: (r(2),))
def views_in_loops_and_comprehensions(x):
    d = {"a": x, "b": x * 2}
    v = d.values()
    d["c"] = x * 3
    total = sum(v)
    return total, [value * 2 for value in v], {key: value for key, value in d.items()}


@cases.add(lambda: (r(2),))
def dict_size_change_while_iterating(x):
    d = {"a": 1, "b": 2}
    it = iter(d)
    first = next(it)
    d["c"] = 3
    messages = []
    for _ in range(2):              # the error is sticky, as CPython's
        try:
            next(it)
        except RuntimeError as e:
            messages.append(str(e))
    try:
        for key in d.items():
            d.pop("a")
    except RuntimeError as e:
        messages.append(str(e))
    return x + 1, first, messages


@cases.add(lambda: (r(2),))
def dict_value_update_while_iterating(x):
    d = {"a": 1, "b": 2}
    for key in d:
        d[key] = d[key] * 10         # no size change: allowed
    return x + 1, d


@cases.add(lambda: (r(2),))
def returned_views(x):
    d = {"a": 1}
    k, it = d.keys(), d.items()
    d["b"] = 2
    return x + 1, k, it


# ------------------------------------------------------------------------------------------- lazy iterators

@cases.add(x_log)
def map_pulls_only_what_is_asked(x, log):
    def g(v):
        log.append(v)
        return v * 2
    m = map(g, [1, 2, 3, 4])
    a = next(m)
    b = next(m)
    return x + a + b, len(log)


@cases.add(x_log)
def map_in_loop_with_break(x, log):
    def g(v):
        log.append(v)
        return v
    for v in map(g, range(10)):
        if v == 2:
            break
        x = x + v
    return x


@cases.add(x_log)
def zip_stops_at_first_exhausted(x, log):
    def g(v):
        log.append(v)
        return v
    short_first = list(zip([1, 2], map(g, [10, 20, 30, 40])))     # the map is pulled twice
    short_second = list(zip(map(g, [5, 6, 7]), [1, 2]))           # pulled three times
    return x + 1, short_first, short_second


@cases.add(x_log)
def zip_strict_errors(x, log):
    messages = []
    for args in (([1, 2], [1]), ([1], [1, 2]), ([1], [1], [1, 2]), ([1, 2], [1, 2], [1])):
        try:
            list(zip(*args, strict=True))
        except ValueError as e:
            messages.append(str(e))
    return x + 1, messages, list(zip([1], [2], strict=True))


@cases.add(x_log)
def filter_and_enumerate_are_lazy(x, log):
    def keep(v):
        log.append(v)
        return v % 2 == 1
    f = filter(keep, [2, 3, 4, 5, 6, 7])
    first = next(f)
    e = enumerate(f, start=10)
    second = next(e)
    return x * first, second, len(log), list(filter(None, [0, 1, "", "a"]))


@cases.add(x_log)
def any_all_short_circuit(x, log):
    def g(v):
        log.append(v)
        return v
    return x + 1, any(map(g, [0, 0, 3, 4, 5])), all(map(g, [1, 0, 2])), 3 in map(g, [1, 3, 9])


@cases.add(x_log)
def consumers_of_iterators(x, log):
    def g(v):
        log.append(v)
        return v + 1
    m = map(g, [3, 1, 2])
    first = next(m)
    return (x + 1, first, sorted(map(g, [3, 1, 2])), sum(map(g, [1, 2]), 10), max(map(g, [4, 9, 2])),
            min([5, 3, 8], key=g), list(m), tuple(m), dict(zip("ab", map(g, [1, 2]))), set(map(g, [1, 1])))


@cases.add(x_log)
def extend_with_map_over_the_same_list(x, log):
    xs = [1, 2]
    xs.extend(map(lambda v, i: v * 10, xs, range(3)))     # the map sees the items extend appends
    ys = [1, 2]
    ys.extend(ys)                                        # an exact list is copied first
    ys += (v for v in range(2))
    return x + 1, xs, ys


@cases.add(lambda: (r(2), [1, 2]))
def list_iterator_sees_appends(x, xs):
    for v in xs:
        if len(xs) < 6:
            xs.append(v + 10)
    it = iter(xs)
    rest = list(it)
    xs.append(99)
    return x + 1, rest, list(it), next(it, "done")       # an exhausted iterator stays exhausted


@cases.add(lambda: (r(2), [1, 2, 3]))
def reversed_list_is_live(x, xs):
    rev = reversed(xs)
    first = next(rev)
    xs[0] = 100
    return x + 1, first, list(rev), list(reversed((1, 2, 3))), list(reversed(range(3))), list(reversed("ab"))


@cases.add(x_log)
def iter_with_sentinel(x, log):
    values = [3, 2, 1, 0, 5]

    def pop():
        log.append(values[0])
        return values.pop(0)
    it = iter(pop, 0)
    got = list(it)
    return x + 1, got, list(it), values


@cases.add(x_log)
def stop_iteration_inside_map_ends_the_loop(x, log):
    def g(v):
        if v == 3:
            raise StopIteration
        log.append(v)
        return v
    return x + 1, [v for v in map(g, [1, 2, 3, 4])]


@cases.add(x_log)
def generator_through_zip_and_enumerate(x, log):
    def gen():
        for i in range(5):
            log.append(i)
            yield i
    g = gen()
    pairs = list(zip(g, "ab"))
    return x + 1, pairs, next(g), list(enumerate(g))


@cases.add(lambda: (r(2),))
def set_iteration_order(x):
    s = {"pear", "apple", "fig"}
    s.add("kiwi")
    s.discard("apple")
    t = {3, 1, 2} | {"b", "a"}
    return x + 1, list(s), [v for v in t], sorted(s), list(s - {"fig"}), list(set("hello")), s.pop(), list(s)


@cases.add(lambda: (r(2), {"a", "b"}))
def input_set_mutated(x, s):
    found = "a" in s
    order = list(s)
    s.add("c")
    s.discard("a")
    s.remove("b")
    return x + 1, found, order, len(s)


@cases.add(x_log)
def returned_iterators_have_their_types(x, log):
    def g(v):
        log.append(v)
        return v * 2
    xs = [1, 2, 3]
    it = iter(xs)
    next(it)
    m = map(g, [5, 6, 7])
    next(m)
    return (x + 1, type(it).__name__, type(m).__name__, type(zip()).__name__, type(enumerate([])).__name__,
            type(reversed(xs)).__name__, type(iter({})).__name__, type(iter("a")).__name__)


def _closes_with_finally(x, log):
    try:
        yield 1
        yield 2
    finally:
        x.add_(1)
        log.append("closed")


@cases.add(x_log)
def generator_close_runs_its_finally(x, log):
    it = _closes_with_finally(x, log)
    first = next(it)
    it.close()
    it.close()
    return x * first, list(log), next(it, "done")


def _ignores_exit():
    try:
        yield 1
    except GeneratorExit:
        yield 2


@cases.add(lambda: (r(2),))
def generator_close_ignored_raises(x):
    it = _ignores_exit()
    next(it)
    try:
        it.close()
    except RuntimeError as e:
        return x + 1, str(e)


def _catches(log):
    try:
        yield 1
        yield 2
    except KeyError as e:
        log.append(e.args)
        yield 10
    finally:
        log.append("fin")


@cases.add(x_log)
def generator_throw(x, log):
    it = _catches(log)
    a = next(it)
    b = it.throw(KeyError("t"))
    try:
        it.throw(ValueError("u"))
    except ValueError as e:
        c = e.args
    fresh = _catches(log)
    try:
        fresh.throw(KeyError("unstarted"))
    except KeyError as e:
        d = e.args
    return x + a + b, list(log), c, next(it, "end"), d, next(fresh, "closed")


def _raises_then_yields():
    yield 1
    raise ValueError("v")
    yield 2


def _returns_seven():
    yield 1
    return 7


def _leaks_stop_iteration():
    yield 1
    next(iter([]))
    yield 2


@cases.add(lambda: (r(2),))
def generator_finished_by_an_exception_or_a_return(x):
    it = _raises_then_yields()
    next(it)
    try:
        next(it)
    except ValueError:
        pass
    after_raise = next(it, "done"), list(it)
    it = _returns_seven()
    next(it)
    try:
        next(it)
    except StopIteration as e:
        first = e.value
    try:
        next(it)
    except StopIteration as e:
        later = e.value
    try:
        list(_leaks_stop_iteration())
    except RuntimeError as e:
        leaked = str(e), type(e.__cause__).__name__, type(e.__context__).__name__
    return x + 1, after_raise, first, later, leaked


@contextlib.contextmanager
def _managed(log):
    log.append("enter")
    try:
        yield 5
    except KeyError as e:
        log.append(("caught", e.args))
    finally:
        log.append("exit")


@contextlib.contextmanager
def _converts():
    try:
        yield
    except KeyError:
        raise ValueError("converted")


@cases.add(x_log)
def contextmanager_body_raises(x, log):
    with _managed(log) as v:
        x = x + v
        raise KeyError("k")
    try:
        with _managed(log):
            raise IndexError("i")
    except IndexError as e:
        propagated = e.args
    try:
        with _converts():
            raise KeyError("k")
    except ValueError as e:
        converted = e.args, type(e.__context__).__name__
    return x, list(log), propagated, converted


def _paused_in_managed_block(log):
    with _managed(log):
        try:
            raise ValueError("handled")
        except ValueError:
            yield 1
            yield 2


@cases.add(x_log)
def generator_close_runs_with_exits_and_nested_managers(x, log):
    it = _paused_in_managed_block(log)
    next(it)
    it.close()
    try:
        with _managed(log), _managed(log):
            x = x + 1
            raise IndexError("both")
    except IndexError as e:
        propagated = e.args
    return x, list(log), propagated


# ------------------------------------------------------------------------------------------- tensor identity

@cases.add(lambda: (r(3), r(3)))
def inplace_result_is_the_same_tensor(x, y):
    a = x.add_(1)
    b = x.mul_(2)
    z = y
    z += 1
    out = torch.empty(3)
    c = torch.add(x, y, out=out)
    s = {x, a, b}
    d = {x: 1}
    d[a] = 2
    return (a is x, b is x, z is y, c is out, len(s), len(d), d[x], x in [b], a in s, x.view(-1) is x,
            len({x, x.view(-1)}), y.requires_grad_(False) is y, x.to(x.dtype) is x)


@cases.add(lambda: (r(3),))
def tensor_keyed_containers_rebuilt(x):
    y = x * 2
    d = {}
    d.setdefault(y, "first")
    d.update([(x, "second")])
    s = {x}
    s.add(y)
    s |= {x}
    keys = list(d)
    return [k is x for k in keys], [k is y for k in keys], len(s), x in s, y in s, list(d.values())


# ------------------------------------------------------------------------------------------- cases must refuse

def _refuse_set_of_tensors(x):
    return [t.shape for t in {x, x + 1}]


def _refuse_same_size_key_change(x):
    d = {"a": 1, "b": 2}
    for k in d:
        del d["b"]
        d["c"] = 3
    return x


def _refuse_input_set_mutated_then_iterated(x, s):
    s.add("new")
    return x + 1, list(s)


def _refuse_returned_zip_over_generator(x):
    z = zip((i for i in range(3)), [1, 2, 3])
    next(z)
    return x + 1, z


def _paused_in_try(log):
    try:
        yield 1
        yield 2
    finally:
        log.append("closed")


def _refuse_generator_left_paused_in_try(x, log):
    # the generator is closed when the loop drops it: its finally runs before the return reads the log
    for v in _paused_in_try(log):
        break
    return x + v, list(log)


REFUSED = [
    (_refuse_generator_left_paused_in_try, lambda: (r(2), [])),
    (_refuse_set_of_tensors, lambda: (r(2),)),
    (_refuse_same_size_key_change, lambda: (r(2),)),
    (_refuse_input_set_mutated_then_iterated, lambda: (r(2), {"a", "b"})),
    (_refuse_returned_zip_over_generator, lambda: (r(2),)),
]


# ------------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("case", cases.params())
def test_iteration_semantics(case):
    case.run()


def _drain(value):
    """An iterator returned from the frame: its type, and what it still yields."""
    return type(value), list(value)


def _plain(value):
    """A result with its iterators drained (their repr holds an address)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "__next__"):
        return _drain(value)
    return value


class Recorder:
    """Records the values its method is called with (a bound method the entry can rebuild)."""

    def __init__(self):
        self.log = []

    def double(self, v):
        self.log.append(v)
        return v * 2


def _escape_check(fn, make_args, after=None, calls=3):
    """Compile fn (fullgraph); its result is (iterators ...); compare their types and remaining items,
    and the arguments after draining them, with plain Python. `after(args)` runs before draining."""
    gj.reset()
    compiled = gj.compile(fn, backend="eager", fullgraph=True)
    for i in range(calls):
        torch.manual_seed(i)
        args = make_args()
        eager_args, comp_args = clone_tree(args), clone_tree(args)
        expected, actual = fn(*eager_args), compiled(*comp_args)
        if after is not None:
            after(eager_args), after(comp_args)
        assert [_drain(v) for v in expected] == [_drain(v) for v in actual]
        assert repr(_state(eager_args)) == repr(_state(comp_args))


def _state(args):
    return [vars(a) if isinstance(a, Recorder) else a for a in args]


def test_returned_lazy_iterators_keep_state_and_type():
    def fn(rec, xs):
        m = map(rec.double, xs)
        next(m)
        z = zip(iter(xs), map(rec.double, [7, 8, 9]))
        f = filter(None, [0, 1, 0, 2])
        next(f)
        e = enumerate(iter(xs), 5)
        next(e)
        c = iter(range(4))
        next(c)
        done = iter([1])
        next(done), next(done, None)
        return m, z, f, e, c, done, iter("xyz"), reversed(xs), iter((1, 2))
    # appended after the call: the rebuilt list iterators read the live list, as CPython's
    _escape_check(fn, lambda: (Recorder(), [1, 2, 3]), after=lambda args: args[1].append(4))


def test_returned_dict_and_set_iterators():
    def fn(d):
        it = iter(d)
        next(it)
        items = iter(d.items())
        s = {"a", "b", "c"}
        si = iter(s)
        next(si)
        return it, items, reversed(d.values()), si
    _escape_check(fn, lambda: ({"a": 1, "b": 2, "c": 3},))


@pytest.mark.parametrize("fn,make_args", REFUSED, ids=[f.__name__ for f, _ in REFUSED])
def test_refused_under_fullgraph_and_eager_without(fn, make_args):
    assert_refused(fn, *make_args())
    compiled = gj.compile(fn, backend="eager")
    for i in range(2):
        torch.manual_seed(i)
        args = make_args()
        eager_args, comp_args = clone_tree(args), clone_tree(args)
        try:
            expected = ("ok", _plain(fn(*eager_args)))
        except Exception as e:  # noqa: BLE001 - the exception is the thing compared
            expected = ("raised", type(e))
        try:
            actual = ("ok", _plain(compiled(*comp_args)))
        except Exception as e:  # noqa: BLE001
            actual = ("raised", type(e))
        assert repr(expected) == repr(actual)
        assert repr(eager_args) == repr(comp_args)
