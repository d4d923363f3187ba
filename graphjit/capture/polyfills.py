"""Pure-Python equivalents of C functions and classes that ordinary code calls, traced like user code.

Capture can't look inside a C function, so a call of `itertools.chain(...)` or `functools.reduce(...)`
used to break the graph. Where the C function's behaviour is a short, well-defined loop, capture traces
the equivalent below instead (the call site is guarded on the C function's identity, as any callee is).
Each equivalent keeps the original's laziness and order of evaluation (an iterator is pulled only when
the original would pull it), its results and its errors; what it returns is a generator where the
original returns an iterator object of its own type (`type(itertools.chain())` differs; iterating does
not).

    POLYFILLS[itertools.chain]      # -> chain below
"""
import collections
import functools
import heapq
import itertools
import math
import operator
import types

_MISSING = object()
_VALUE_TYPES = (int, float, complex, bool, str, bytes, tuple, type(None))


def chain(*iterables):
    for iterable in iterables:          # each iterable's iter() when it is reached, as the C version
        yield from iterable


def _chain_from_iterable(iterables):
    for iterable in iterables:          # the outer iterable is pulled lazily too
        yield from iterable


chain.from_iterable = _chain_from_iterable


def product(*iterables, repeat=1):
    if repeat < 0:
        raise ValueError("repeat argument cannot be negative")
    pools = [tuple(pool) for pool in iterables] * repeat      # consumed when called, as the C version does
    result = [()]
    for pool in pools:
        result = [x + (y,) for x in result for y in pool]
    return _items(result)


def _items(items):
    yield from items


def _repeat(value):
    while True:
        yield value


def repeat(obj, times=_MISSING):
    if times is _MISSING:
        return _repeat(obj)
    if times is None:                   # an argument of the C version, not its default
        raise TypeError("'NoneType' object cannot be interpreted as an integer")
    return _items([obj] * max(times if isinstance(times, int) else operator.index(times), 0))


def combinations(iterable, r):
    if r < 0:
        raise ValueError("r must be non-negative")
    pool = tuple(iterable)                  # consumed when called, as the C version does
    return _items([tuple(pool[i] for i in indices) for indices in _index_combinations(len(pool), r, False)])


def combinations_with_replacement(iterable, r):
    if r < 0:
        raise ValueError("r must be non-negative")
    pool = tuple(iterable)
    return _items([tuple(pool[i] for i in indices) for indices in _index_combinations(len(pool), r, True)])


def _index_combinations(n, r, replace):
    """Sorted index tuples of length r from range(n), in the order itertools' emits them."""
    result = [()]
    for _ in range(r):
        result = [c + (i,) for c in result for i in range(c[-1] + (0 if replace else 1) if c else 0, n)]
    return result


def permutations(iterable, r=None):
    pool = tuple(iterable)
    r = len(pool) if r is None else r
    if r < 0:
        raise ValueError("r must be non-negative")
    result = [()]
    for _ in range(r):
        result = [p + (i,) for p in result for i in range(len(pool)) if i not in p]
    return _items([tuple(pool[i] for i in p) for p in result])


def accumulate(iterable, func=None, *, initial=None):
    return _accumulate(iter(iterable), func, initial)


def _accumulate(it, func, initial):
    total = initial
    if initial is None:
        try:
            total = next(it)
        except StopIteration:
            return
    yield total
    for element in it:
        total = operator.add(total, element) if func is None else func(total, element)
        yield total


def islice(iterable, *args):
    if not 1 <= len(args) <= 3:
        raise TypeError(f"islice expected at least 2 arguments, got {len(args) + 1}" if not args else
                        f"islice expected at most 4 arguments, got {len(args) + 1}")
    bounds = slice(*args)
    start, stop, step = bounds.start, bounds.stop, bounds.step
    if not (stop is None or (isinstance(stop, int) and stop >= 0)):
        raise ValueError("Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    if not (start is None or (isinstance(start, int) and start >= 0)):
        raise ValueError("Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    if not (step is None or (isinstance(step, int) and step > 0)):
        raise ValueError("Step for islice() must be a positive integer or None.")
    return _islice(iter(iterable), start or 0, stop, step or 1)


def _islice(it, start, stop, step):
    """CPython's islice_next: skip to the next index taken, stop at `stop` (counted in items pulled)."""
    count, following = 0, start
    while True:
        while count < following:
            try:
                next(it)
            except StopIteration:
                return
            count += 1
        if stop is not None and count >= stop:
            return
        try:
            item = next(it)
        except StopIteration:
            return
        count += 1
        yield item
        following += step
        if stop is not None and following > stop:
            following = stop


def zip_longest(*iterables, fillvalue=None):
    return _zip_longest([iter(it) for it in iterables], fillvalue)


def _zip_longest(iterators, fillvalue):
    active = len(iterators)
    if not active:
        return
    while True:
        values = []
        for i, it in enumerate(iterators):
            try:
                value = next(it)
            except StopIteration:
                active -= 1
                if not active:
                    return
                iterators[i] = _repeat(fillvalue)
                value = fillvalue
            values.append(value)
        yield tuple(values)


def starmap(function, iterable):
    return _starmap(function, iter(iterable))


def _starmap(function, it):
    for args in it:
        yield function(*args)


def takewhile(predicate, iterable):
    return _takewhile(predicate, iter(iterable))


def _takewhile(predicate, it):
    for x in it:
        if not predicate(x):
            return
        yield x


def dropwhile(predicate, iterable):
    return _dropwhile(predicate, iter(iterable))


def _dropwhile(predicate, it):
    for x in it:
        if not predicate(x):
            yield x
            break
    yield from it


def pairwise(iterable):
    return _pairwise(iter(iterable))


def _pairwise(it):
    try:
        a = next(it)
    except StopIteration:
        return
    for b in it:
        yield a, b
        a = b


def count(start=0, step=1):
    if not (_is_number(start) and _is_number(step)):
        raise TypeError("a number is required")
    if isinstance(start, int) and isinstance(step, int) and operator.index(step) == 1:
        start = operator.index(start)   # the C version's fast mode counts in plain ints: count(True) gives 1
    return _count(start, step)


def _is_number(value):
    """CPython's PyNumber_Check: a complex, or a type with __index__, __int__ or __float__."""
    cls = type(value)
    return isinstance(value, complex) or hasattr(cls, "__index__") or hasattr(cls, "__int__") or \
        hasattr(cls, "__float__")


def _count(n, step):
    while True:
        yield n
        n = n + step                    # PyNumber_Add each step, as the C version (no multiplication)


def cycle(iterable):
    return _cycle(iter(iterable))


def _cycle(it):
    saved = []
    for element in it:                  # the first pass pulls the source lazily, saving what it yields
        saved.append(element)
        yield element
    if not saved:
        return
    while True:
        yield from saved


def groupby(iterable, key=None):
    # the state the groupby object and its groupers share, as CPython's groupbyobject:
    # [iterator, key function, target key, current key, current value, number of the live grouper]
    return _groupby([iter(iterable), key, _MISSING, _MISSING, _MISSING, 0])


def _groupby_step(state):
    """Pull the next value and its key (StopIteration passes through); a failing key function leaves the
    current value and key as they were."""
    value = next(state[0])
    key = value if state[1] is None else state[1](value)
    state[4], state[3] = value, key


def _same_or_equal(a, b):
    """PyObject_RichCompareBool(a, b, Py_EQ): identity first, then a == b made a bool. For values whose
    identity the trace does not model (strings, numbers, tuples) the same object is an equal one, but for
    a NaN, which is refused."""
    if type(a) in _VALUE_TYPES and type(b) in _VALUE_TYPES:
        if type(a) in (float, complex) and a != a or type(b) in (float, complex) and b != b:
            refuse("itertools.groupby with a NaN key (CPython compares keys by identity first)")
        return a == b
    return a is b or bool(a == b)


def _groupby(state):
    while True:
        state[5] += 1                   # a grouper made before this step stops
        while state[3] is _MISSING or state[2] is not _MISSING and _same_or_equal(state[2], state[3]):
            try:
                _groupby_step(state)
            except StopIteration:
                return
        state[2] = state[3]
        yield state[3], _grouper(state, state[2], state[5])


def _grouper(state, target, number):
    while state[5] == number:
        if state[4] is _MISSING:
            try:
                _groupby_step(state)
            except StopIteration:
                return
        if not _same_or_equal(target, state[3]):
            return
        value = state[4]
        state[4] = state[3] = _MISSING
        yield value


def tee(iterable, n=2):
    if type(n) is not int:
        n = operator.index(n)
    if n < 0:
        raise ValueError("n must be >= 0")
    if n == 0:
        return ()                       # the iterable is not even iterated, as in the C version
    it = iter(iterable)
    if made_by(it, _tee):
        refuse("itertools.tee of an iterator tee made: the C version returns that iterator itself and "
               "copies of it")
    head = [_MISSING, None]             # a linked list of the items pulled: [item, next link]
    return tuple([_tee(it, head) for _ in range(n)])


def _tee(it, link):
    while True:
        if link[1] is None:             # no tee has pulled this item yet
            link[0] = next(it, _MISSING)
            if link[0] is _MISSING:
                return
            link[1] = [_MISSING, None]
        value, link = link
        yield value


def made_by(iterator, generator_function):
    """Whether `iterator` is a generator that generator_function made (the trace answers it:
    functions.IntrinsicVariable)."""
    return getattr(iterator, "gi_code", None) is generator_function.__code__


def refuse(reason):
    """Where the C original does what its equivalent can't: the trace stops with `reason` (the trace
    answers it: functions.IntrinsicVariable)."""
    raise NotImplementedError(reason)


INTRINSICS = (made_by, refuse)


def reduce(function, iterable, initial=_MISSING):
    it = iter(iterable)
    if initial is _MISSING:
        try:
            value = next(it)
        except StopIteration:
            raise TypeError("reduce() of empty iterable with no initial value") from None
    else:
        value = initial
    for element in it:
        value = function(value, element)
    return value


def prod(iterable, /, *, start=1):
    """math.prod: the product from the left, so that symbolic ints (a size, an int argument) stay symbolic."""
    value = start
    for element in iterable:
        value = value * element
    return value


def count_elements(mapping, iterable):
    """collections.Counter's counting loop (`_count_elements`, in C)."""
    for element in iterable:
        mapping[element] = mapping.get(element, 0) + 1


# heapq's C functions (_heapq), as binary heaps over a list: `lower(a, b)` is the heap order (a < b for
# the min-heap functions, b < a for the max-heap ones heapq's nlargest uses), the only comparison made.

def _lt(a, b):
    return a < b


def _gt(a, b):
    return b < a


def _heap_list(heap, name):
    if not isinstance(heap, list):
        which = "argument" if name in ("heappop", "heapify", "heappop_max", "heapify_max") else "argument 1"
        raise TypeError(f"{name}() {which} must be list, not {type(heap).__name__}")   # as Argument Clinic words it
    return heap


def _toward_root(heap, start, pos, lower):
    """The item at pos moved up toward start while it is lower than its parent."""
    item = heap[pos]
    while pos > start:
        parent = (pos - 1) >> 1
        if not lower(item, heap[parent]):
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = item


def _toward_leaves(heap, pos, lower):
    """The item at pos sunk to a leaf along its lower children, then moved back up to its place (the
    order of comparisons of CPython's heapq)."""
    end, start, item = len(heap), pos, heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not lower(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _toward_root(heap, start, pos, lower)


def heappush(heap, item):
    _heap_list(heap, "heappush").append(item)
    _toward_root(heap, 0, len(heap) - 1, _lt)


def _pop(heap, lower, name):
    if not _heap_list(heap, name):
        raise IndexError("index out of range")
    last = heap.pop()
    if not heap:
        return last
    top, heap[0] = heap[0], last
    _toward_leaves(heap, 0, lower)
    return top


def heappop(heap):
    return _pop(heap, _lt, "heappop")


def _replace(heap, item, lower, name):
    if not _heap_list(heap, name):
        raise IndexError("index out of range")
    top, heap[0] = heap[0], item
    _toward_leaves(heap, 0, lower)
    return top


def heapreplace(heap, item):
    return _replace(heap, item, _lt, "heapreplace")


def heappushpop(heap, item):
    if _heap_list(heap, "heappushpop") and heap[0] < item:
        item, heap[0] = heap[0], item
        _toward_leaves(heap, 0, _lt)
    return item


def _heapify(heap, lower, name):
    for pos in reversed(range(len(_heap_list(heap, name)) // 2)):
        _toward_leaves(heap, pos, lower)


def heapify(heap):
    _heapify(heap, _lt, "heapify")


def heapify_max(heap):
    _heapify(heap, _gt, "_heapify_max")


def heappop_max(heap):
    return _pop(heap, _gt, "_heappop_max")


def heapreplace_max(heap, item):
    return _replace(heap, item, _gt, "_heapreplace_max")


def nlargest(n, iterable, key=None):
    """heapq.nlargest: documented as sorted(iterable, key=key, reverse=True)[:n] (ties in input order);
    nothing for n <= 0."""
    return sorted(iterable, key=key, reverse=True)[:n] if n > 0 else []


def nsmallest(n, iterable, key=None):
    """heapq.nsmallest: documented as sorted(iterable, key=key)[:n]; nothing for n <= 0."""
    return sorted(iterable, key=key)[:n] if n > 0 else []


POLYFILLS = {
    itertools.chain: chain,
    itertools.product: product,
    itertools.accumulate: accumulate,
    itertools.islice: islice,
    itertools.zip_longest: zip_longest,
    itertools.starmap: starmap,
    itertools.takewhile: takewhile,
    itertools.dropwhile: dropwhile,
    itertools.repeat: repeat,
    itertools.combinations: combinations,
    itertools.combinations_with_replacement: combinations_with_replacement,
    itertools.permutations: permutations,
    itertools.count: count,
    itertools.cycle: cycle,
    itertools.groupby: groupby,
    itertools.tee: tee,
    functools.reduce: reduce,
    math.prod: prod,
}
if hasattr(itertools, "pairwise"):
    POLYFILLS[itertools.pairwise] = pairwise
if getattr(collections, "_count_elements", None) is not None:
    POLYFILLS[collections._count_elements] = count_elements
POLYFILLS.update({heapq.heappush: heappush, heapq.heappop: heappop, heapq.heapreplace: heapreplace,
                  heapq.heappushpop: heappushpop, heapq.heapify: heapify, heapq.nlargest: nlargest,
                  heapq.nsmallest: nsmallest})
for _name, _fill in (("heapify_max", heapify_max), ("heappop_max", heappop_max), ("heapreplace_max", heapreplace_max)):
    for _attr in ("_" + _name, _name):          # private on Python 3.11-3.13, public from 3.14
        if getattr(heapq, _attr, None) is not None:
            POLYFILLS[getattr(heapq, _attr)] = _fill


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """torch._higher_order_ops.associative_scan, for a tensor or a tuple/list of tensors: a left fold over
    `dim` (from the end with reverse=True), combine_fn(accumulated, next) on each element's slices, the
    partial results stacked. The same values as torch's tree-shaped scan up to rounding, and the same
    operations in the same order as the recurrent loop callers fall back to (transformers' Mamba): a graph
    of `n` steps, unrolled. combine_fn must be associative, as torch requires; combine_mode only chooses
    torch's implementation."""
    import torch
    if isinstance(xs, torch.Tensor):
        leaves, rebuild = [xs], (lambda ls: ls[0])
    elif type(xs) in (tuple, list) and xs and all(isinstance(x, torch.Tensor) for x in xs):
        leaves, rebuild = list(xs), (lambda ls: type(xs)(ls))
    else:
        raise NotImplementedError("associative_scan over a tree other than a tensor or a tuple/list of them")
    if combine_mode not in ("pointwise", "generic"):
        raise ValueError(f"Combine_mode must either 'pointwise' or 'generic', but got {combine_mode}")
    if combine_mode == "pointwise" and not all(leaf.device.type in ("cuda", "xpu") for leaf in leaves):
        # torch versions differ here (refused, or run): the frame runs eagerly and torch decides
        raise NotImplementedError("associative_scan(combine_mode='pointwise') of CPU tensors")
    if any(leaf.ndim <= dim or leaf.shape[dim] == 0 for leaf in leaves):
        raise ValueError("All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0")
    count = leaves[0].shape[dim]
    order = range(count - 1, -1, -1) if reverse else range(count)
    acc, partials = None, []
    for i in order:
        current = rebuild([leaf.select(dim, i) for leaf in leaves])
        acc = current if acc is None else combine_fn(acc, current)
        partials.append([acc] if isinstance(acc, torch.Tensor) else list(acc))
    if reverse:
        partials.reverse()
    return rebuild([torch.stack([p[k] for p in partials], dim) for k in range(len(leaves))])


def polyfill_of(value):
    """The traced equivalent of value, or None."""
    if isinstance(value, types.FunctionType) and value.__name__ == "associative_scan" and \
            value.__module__ == "torch._higher_order_ops.associative_scan":
        return associative_scan     # (a user object's own __getattr__ is not asked for a __name__)
    try:
        return POLYFILLS.get(value)
    except TypeError:           # unhashable
        return None
