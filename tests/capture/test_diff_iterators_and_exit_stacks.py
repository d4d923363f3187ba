"""itertools.count, cycle, groupby and tee (traced through polyfills.py's equivalents),
generator.throw()/close() into a generator paused in `yield from`, and contextlib.ExitStack: compiled vs
eager, one graph, several calls; what the iterators pull and when (a log argument records it), exceptions
raised in the middle, early exits, and the exception chains ExitStack builds.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib
import itertools
import math

import pytest

from .harness import Cases, assert_refused, r

cases = Cases()


def _logged(log, items):
    """A generator over items that records each pull (laziness is visible in the log)."""
    for item in items:
        log.append(("pull", item))
        yield item


def _failing(log, items, at):
    for i, item in enumerate(items):
        if i == at:
            log.append(("raise", i))
            raise ValueError(f"failed at {i}")
        log.append(("pull", item))
        yield item


# ---------------------------------------------------------------------------------------- count

@cases.add(lambda: (r(3),))
def count_zipped_with_a_range(x):
    return [x * c for _, c in zip(range(3), itertools.count(2, 3))]


@cases.add(lambda: (r(3),))
def count_with_float_steps_and_keywords(x):
    c = itertools.count(0.5, step=0.1)             # repeated addition, as the C version: 0.5 + 0.1 + 0.1 ...
    values = [next(c) for _ in range(4)]
    d = itertools.count(step=-2)
    return x * values[-1], values, next(d), next(d)


@cases.add(lambda: (r(3),))
def count_in_plain_ints_where_the_step_is_one(x):
    ones, twos, floats = itertools.count(True), itertools.count(True, 2), itertools.count(0, 1.0)
    return x + 1, [(next(c), next(c)) for c in (ones, twos, floats)]


@cases.add(lambda: (r(3),))
def count_from_a_tensor(x):
    c = itertools.count(x, 2)
    return next(c), next(c), next(c)


@cases.add(lambda: (r(3),))
def count_refuses_what_is_not_a_number(x):
    try:
        itertools.count("a")
    except TypeError as e:
        return x - 1, str(e)
    return x + 1, None


@cases.add(lambda: (r(3), []))
def count_stops_where_the_consumer_stops(x, log):
    for i in itertools.count():
        log.append(i)
        if i == 3:
            break
    return x * i


# ---------------------------------------------------------------------------------------- cycle

@cases.add(lambda: (r(3), []))
def cycle_pulls_its_source_once_and_lazily(x, log):
    c = itertools.cycle(_logged(log, [1, 2, 3]))
    first = next(c)
    log.append("after first")
    rest = [next(c) for _ in range(6)]
    return x * first, rest


@cases.add(lambda: (r(3),))
def cycle_of_nothing_stops(x):
    return list(itertools.cycle([])), list(itertools.islice(itertools.cycle("ab"), 5)), x * 2


@cases.add(lambda: (r(3), []))
def cycle_source_raising_in_the_middle(x, log):
    c = itertools.cycle(_failing(log, [1, 2, 3], at=2))
    seen = []
    try:
        while True:
            seen.append(next(c))
    except ValueError as e:
        return x * len(seen), seen, str(e)


# -------------------------------------------------------------------------------------- groupby

@cases.add(lambda: (r(3), []))
def groupby_with_a_key_that_logs(x, log):
    def key(v):
        log.append(("key", v))
        return v // 10
    return [(k, [x * v for v in g]) for k, g in itertools.groupby(_logged(log, [1, 5, 12, 14, 3]), key)]


@cases.add(lambda: (r(3),))
def groupby_groups_read_after_the_outer_moved_on_are_empty(x):
    groups = list(itertools.groupby("aabbbc"))
    return [(k, list(g)) for k, g in groups], x + 1


@cases.add(lambda: (r(3), []))
def groupby_a_group_left_half_read(x, log):
    out = []
    for k, g in itertools.groupby(_logged(log, [1, 1, 1, 2, 2, 3])):
        out.append((k, next(g)))              # the rest of the group is skipped by the outer iterator
        log.append(("group", k))
    return out, x + 1


@cases.add(lambda: (r(3), []))
def groupby_key_raising_in_the_middle(x, log):
    def key(v):
        if v == 3:
            raise KeyError(v)
        return v
    try:
        for k, g in itertools.groupby(_logged(log, [1, 1, 3]), key):
            log.append(("group", k, list(g)))
    except KeyError as e:
        return x - 1, repr(e)
    return x + 1, None


@cases.add(lambda: (r(3), []))
def groupby_grouper_outlives_its_turn(x, log):
    it = itertools.groupby(_logged(log, "aabb"))
    _, first = next(it)
    next(first)
    _, second = next(it)
    return list(first), list(second), x + 1


# ------------------------------------------------------------------------------------------ tee

@cases.add(lambda: (r(3), []))
def tee_pulls_each_item_once_when_the_first_copy_needs_it(x, log):
    a, b = itertools.tee(_logged(log, [1, 2, 3]))
    first = next(a)
    log.append("a took one")
    both = list(b)
    log.append("b done")
    return x * first, both, list(a)


@cases.add(lambda: (r(3), []))
def tee_three_copies_of_tensors(x, log):
    copies = itertools.tee(_logged(log, [x, x + 1]), 3)
    return [list(c) for c in reversed(copies)], len(copies)


class _Iterable:
    def __init__(self, log):
        self.log = log

    def __iter__(self):
        self.log.append("iter")
        return iter([1])


@cases.add(lambda: (r(3), []))
def tee_of_zero_copies_never_iterates(x, log):
    return itertools.tee(_Iterable(log), 0), len(itertools.tee(_Iterable(log), 1)), x + 1


@cases.add(lambda: (r(3), []))
def tee_source_raising_in_the_middle(x, log):
    a, b = itertools.tee(_failing(log, [1, 2, 3], at=1))
    first = next(a)
    try:
        next(a)
    except ValueError as e:
        return x * first, next(b), str(e)


@cases.add(lambda: (r(3),))
def tee_checks_its_count(x):
    try:
        itertools.tee([1], -1)
    except ValueError as e:
        return x + 1, str(e)


# -------------------------------------------------------------------- throw() into `yield from`

def _inner(log):
    try:
        yield 1
        yield 2
    except KeyError:
        log.append("inner caught")
        yield 10
    finally:
        log.append("inner finally")
    return "inner result"


def _outer(log):
    try:
        result = yield from _inner(log)
        log.append(("result", result))
        yield 20
    except KeyError:
        log.append("outer caught")
        yield 30
    finally:
        log.append("outer finally")


@cases.add(lambda: (r(3), []))
def throw_handled_by_the_sub_generator(x, log):
    g = _outer(log)
    next(g)
    caught = g.throw(KeyError("k"))           # the inner generator handles it and yields
    return x * caught, list(g)


def _inner_plain(log):
    try:
        yield 1
    finally:
        log.append("inner plain finally")


def _outer_catching(log):
    try:
        yield from _inner_plain(log)
    except ValueError as e:
        log.append(("outer caught", str(e)))
        yield 5
    yield 6


@cases.add(lambda: (r(3), []))
def throw_not_handled_by_the_sub_generator(x, log):
    g = _outer_catching(log)
    next(g)
    value = g.throw(ValueError("v"))          # leaves the inner generator, caught at the `yield from`
    return x * value, list(g)


def _inner_returning(log):
    try:
        yield 1
    except KeyError:
        log.append("inner returns")
        return 7


def _outer_collecting(log):
    got = yield from _inner_returning(log)
    log.append(("got", got))
    yield got * 2


@cases.add(lambda: (r(3), []))
def throw_makes_the_sub_generator_return(x, log):
    g = _outer_collecting(log)
    next(g)
    return x * g.throw(KeyError), list(g)


@cases.add(lambda: (r(3), []))
def throw_into_a_finished_chain_raises_at_the_caller(x, log):
    g = _outer_catching(log)
    next(g)
    try:
        g.throw(KeyError("k"))
    except KeyError:
        log.append("caller caught")
    return x + 1, list(g)


@cases.add(lambda: (r(3), []))
def close_closes_the_sub_generator_first(x, log):
    g = _outer(log)
    next(g)
    g.close()
    return x + 1, list(g)


def _outer_over(iterable, log):
    try:
        yield from iterable
    except KeyError:
        log.append("outer caught")
        yield -1


@cases.add(lambda: (r(3), []))
def throw_into_a_yield_from_over_a_list_iterator(x, log):
    g = _outer_over([1, 2, 3], log)
    next(g)
    return x * g.throw(KeyError), list(g)


@cases.add(lambda: (r(3), []))
def throw_into_a_yield_from_over_an_itertools_iterator(x, log):
    g = _outer_over(itertools.count(), log)     # a C iterator: no throw(), the exception stays outside it
    next(g)
    return x * g.throw(KeyError), list(g)


@cases.add(lambda: (r(3), []))
def throw_through_two_levels_of_yield_from(x, log):
    def middle():
        yield from _inner(log)
    g = _outer_over(middle(), log)
    next(g)
    first = g.throw(KeyError)                 # the innermost generator handles it
    return x * first, list(g)


@cases.add(lambda: (r(3), []))
def throw_stop_iteration_into_a_yield_from_over_a_list(x, log):
    """3.11 raises it in the outer frame (a RuntimeError, PEP 479); 3.12+ ends the `yield from`."""
    def outer():
        result = yield from [1, 2]
        log.append(("result", result))
        yield 3
    g = outer()
    next(g)
    try:
        return x + 1, g.throw(StopIteration("s"))
    except RuntimeError as e:
        return x - 1, str(e)


# ----------------------------------------------------------------------------------- ExitStack

class _Managed:
    def __init__(self, log, name, suppress=False, raise_in_exit=None):
        self.log, self.name, self.suppress, self.raise_in_exit = log, name, suppress, raise_in_exit

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self.name

    def __exit__(self, kind, value, traceback):
        self.log.append(("exit", self.name, kind.__name__ if kind else None))
        if self.raise_in_exit is not None:
            raise self.raise_in_exit
        return self.suppress


@cases.add(lambda: (r(3), []))
def exit_stack_exits_in_lifo_order(x, log):
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(_Managed(log, "a"))
        stack.callback(log.append, "callback")
        b = stack.enter_context(_Managed(log, "b"))
        x = x * 2
    return x, a, b


@cases.add(lambda: (r(3), []))
def exit_stack_exception_passes_through_every_exit(x, log):
    try:
        with contextlib.ExitStack() as stack:
            for name in "abc":
                stack.enter_context(_Managed(log, name))
            raise ValueError("boom")
    except ValueError as e:
        return x - 1, str(e)
    return x + 1, None


@cases.add(lambda: (r(3), []))
def exit_stack_an_exit_suppresses(x, log):
    with contextlib.ExitStack() as stack:
        stack.enter_context(_Managed(log, "a"))
        stack.enter_context(_Managed(log, "b", suppress=True))
        stack.enter_context(_Managed(log, "c"))
        raise ValueError("boom")
    return x + 1


@cases.add(lambda: (r(3), []))
def exit_stack_an_exit_raises_another_exception(x, log):
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_Managed(log, "a"))
            stack.enter_context(_Managed(log, "b", raise_in_exit=KeyError("k")))
            stack.enter_context(_Managed(log, "c"))
            raise ValueError("boom")
    except KeyError as e:
        return x - 1, type(e.__context__).__name__, str(e.__context__)
    return x + 1, None, None


@cases.add(lambda: (r(3), []))
def exit_stack_close_and_pop_all(x, log):
    stack = contextlib.ExitStack()
    stack.enter_context(_Managed(log, "a"))
    stack.callback(log.append, "first callback")
    y = x + 1
    stack.close()
    with contextlib.ExitStack() as outer:
        outer.enter_context(_Managed(log, "moved"))
        moved = outer.pop_all()              # the outer stack exits nothing
    log.append("before close")
    moved.close()
    return y


@cases.add(lambda: (r(3), []))
def exit_stack_push_and_early_return(x, log):
    with contextlib.ExitStack() as stack:
        stack.push(_Managed(log, "pushed"))   # its __exit__ only
        for i in range(3):
            stack.callback(log.append, ("callback", i))
            if i == 1:
                return x * i
    return x


@cases.add(lambda: (r(3), []))
def exit_stack_callback_raising(x, log):
    def fail():
        raise KeyError("callback")
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(log.append, "runs after the failing one")
            stack.callback(fail)
            x = x + 1
    except KeyError as e:
        return x, repr(e)


@contextlib.contextmanager
def _generator_managed(log, name, swallow):
    log.append(("enter", name))
    try:
        yield name
    except ValueError as e:
        log.append(("caught", name, str(e)))
        if not swallow:
            raise
    finally:
        log.append(("exit", name))


@cases.add(lambda: (r(3), []))
def exit_stack_over_generator_context_managers(x, log):
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_generator_managed(log, "outer", swallow=False))
            stack.enter_context(_generator_managed(log, "swallows", swallow=True))
            stack.enter_context(_generator_managed(log, "inner", swallow=False))
            raise ValueError("boom")
    except ValueError:
        return x - 1
    return x + 1


@cases.add(lambda: (r(3), []))
def exit_stack_enter_context_of_what_is_no_context_manager(x, log):
    with contextlib.ExitStack() as stack:
        stack.enter_context(_Managed(log, "a"))
        try:
            stack.enter_context(x)                     # a tensor is no context manager
        except (TypeError, AttributeError) as e:
            log.append((type(e).__name__, str(e)))
        x = x * 3
    return x


@pytest.mark.parametrize("case", cases.params())
def test_iterators_and_exit_stacks(case):
    case.run()


def _cycle_pulled_again(x):
    c = itertools.cycle(_failing([], [1, 2], at=1))
    next(c)
    try:
        next(c)
    except ValueError:
        pass
    return x * next(c)       # the C cycle pulls its source again; the equivalent generator has finished


def _tee_of_a_tee(x):
    a, b = itertools.tee([x, x])
    c, d = itertools.tee(a)   # CPython returns `a` itself and a copy of it
    return list(c), list(d), list(b)


def _count_throw(x):
    return itertools.count().throw(KeyError)


def _groupby_nan_keys(x):
    nan = math.nan      # CPython compares keys by identity first: one group of this nan, two of fresh ones
    return x, [k for k, _ in itertools.groupby([nan, nan, 1.0])]


@pytest.mark.parametrize("fn", [_cycle_pulled_again, _tee_of_a_tee, _count_throw, _groupby_nan_keys])
def test_what_the_equivalents_would_get_wrong_is_refused(fn):
    assert_refused(fn, r(3))
