"""Side effects around graph breaks. Mutations of Python state recorded while capturing a region are
replayed after that region's graph, before the breaking call runs, in program order: the call (and the
resume function) see the state eager would. Objects created before a break are built once and passed on,
so identity holds across it.

Covered: lists and dicts (arguments, globals, new ones), object attributes, module attributes, globals
(`global STEP`), nonlocal cells, nn.Module attributes (`self.calls += 1`) and buffers, in-place tensor ops on
inputs and buffers before and after breaks, BatchNorm2d in train mode with a print in forward. Python state
outside the arguments is reset before each run and compared after it (a World).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import collections
import dataclasses
import io
import sys

import pytest
import torch
import torch.nn as nn

import graphjit
from .harness import Cases, r
from .test_breaks_support import World, check_break, check_break_module, params


SINK = io.StringIO()
TRACE = []                 # what ran, in order: disabled functions and the cases append to it


@graphjit.disable
def mark(tag):
    TRACE.append(("mark", tag, len(TRACE)))


@graphjit.disable
def snapshot(*values):
    """Record the values as CPython sees them at the break (copies, so later mutations don't show)."""
    TRACE.append(("snapshot",) + tuple(_copy(v) for v in values))


def _copy(v):
    if isinstance(v, list):
        return [_copy(i) for i in v]
    if isinstance(v, dict):
        return {k: _copy(i) for k, i in v.items()}
    if isinstance(v, torch.Tensor):
        return v.clone()
    if hasattr(v, "__dict__") and not callable(v):
        return {k: _copy(i) for k, i in vars(v).items()}
    return v


def _reset_trace():
    global SINK
    TRACE.clear()
    SINK = io.StringIO()


def traced():
    return World(_reset_trace, lambda: (list(TRACE), SINK.getvalue()))


# ------------------------------------------------------------------------------ lists and dicts

list_cases = Cases()


@list_cases.add(lambda: (r(3), []), graphs=2)
def append_before_and_after(x, log):
    log.append(1)
    y = x + 1
    print("mid", file=SINK)
    log.append(2)
    return y * 2


@list_cases.add(lambda: (r(3), ["old"]), graphs=2)
def list_ops_seen_by_the_break(x, log):
    log.append("a")
    log.insert(0, "first")
    log.extend(["b", "c"])
    log.pop(1)
    y = x.sin()
    snapshot(log)                             # must see every mutation above
    log.remove("b")
    log.reverse()
    return y.cos()


@list_cases.add(lambda: (r(3), [3, 1, 2]), graphs=2)
def list_setitem_delitem_sort(x, log):
    log[0] = 10
    del log[1]
    y = x * len(log)
    snapshot(log)
    log.sort()
    log[:] = log + [len(log)]
    return y - 1


@list_cases.add(lambda: (r(3), {"a": 1}), graphs=2)
def dict_updates_around_break(x, d):
    d["b"] = 2
    d.update(c=3)
    d["a"] += 10
    y = x * d["a"]
    snapshot(d)
    d.pop("b")
    d.setdefault("z", [])
    d["z"].append(y.shape[0])
    return y + 1


@list_cases.add(lambda: (r(3), {"k": [1]}), graphs=1)
def dict_delete_and_clear(x, d):
    del d["k"]
    d["n"] = {"inner": 1}
    y = x.exp()
    snapshot(d)
    d["n"]["inner"] = 2
    return y


@list_cases.add(lambda: (r(3), []), graphs=2)
def new_dict_appended_then_mutated(x, log):
    entry = {"step": 0}
    log.append(entry)                         # the list holds the same object the frame keeps mutating
    y = x + 1
    print("entry", file=SINK)
    entry["step"] = 1
    entry["size"] = y.shape[0]
    return y * 2, log[0] is entry


@list_cases.add(lambda: (r(3),), graphs=2)
def new_list_identity_across_break(x):
    a = [x + 1]
    b = a
    print("alias", file=SINK)
    a.append(x * 2)
    return b, a is b, len(b)


@list_cases.add(lambda: (r(3),), graphs=2)
def new_list_contains_itself(x):
    a = [x.sin()]
    a.append(a)
    print("cycle", file=SINK)
    return a[1] is a, a[1][0] * 2


@list_cases.add(lambda: (r(3),), graphs=2)
def new_nested_containers(x):
    inner = [x + 1]
    outer = {"i": inner, "j": (inner, 5)}
    print("nested", file=SINK)
    inner.append(x * 3)
    return outer, outer["j"][0] is inner, outer["i"][1] - outer["i"][0]


@list_cases.add(lambda: (r(3), []), graphs=2)
def argument_list_item_mutated_before_break(x, log):
    log.append([])
    log[-1].append(x.shape[0])
    y = x * 2
    snapshot(log)
    log[-1].append(y.dim())
    return y + 1


@pytest.mark.parametrize("case", params(list_cases, xfail={
    "new_list_contains_itself": "reconstructing a self-containing list made in the frame recurses forever "
                                "(RecursionError in codegen)"}))
def test_containers(case):
    check_break(case.fn, case.make_args, world=traced(), **case.options)


# ------------------------------------------------------------------------------ objects

class Obj:
    def __init__(self, n=0):
        self.n = n


@dataclasses.dataclass
class Point:
    x: torch.Tensor
    y: int


Pair = collections.namedtuple("Pair", "a b")


object_cases = Cases()


@object_cases.add(lambda: (r(3), Obj(1)), graphs=2)
def attribute_stores_on_argument(x, obj):
    obj.n += 1
    obj.last = tuple(x.shape)
    y = x * obj.n
    snapshot(obj)
    obj.total = obj.n * 2
    del obj.last
    return y + obj.total


@object_cases.add(lambda: (r(3), Obj(0)), graphs=2)
def attribute_tensor_stored_before_break(x, obj):
    obj.t = x * 2                              # a graph output stored on an argument object
    print("stored", file=SINK)
    obj.t = obj.t + 1
    return obj.t.sum()


@object_cases.add(lambda: (r(3),), graphs=2)
def new_object_across_break(x):
    o = Obj(5)
    o.t = x + 1
    print("obj", file=SINK)
    o.n += 1
    return o.t * o.n, o


@object_cases.add(lambda: (r(3),), graphs=2)
def new_dataclass_across_break(x):
    p = Point(x * 2, 3)
    keep = p
    print("point", file=SINK)
    p.y += 1
    return p.x * p.y, p, keep is p


@object_cases.add(lambda: (r(3),), graphs=2)
def new_namedtuple_across_break(x):
    nt = Pair(x + 1, x - 1)
    print("pair", file=SINK)
    return nt.a * nt.b, nt, type(nt) is Pair


@object_cases.add(lambda: (r(3), []), graphs=2)
def new_object_stored_in_argument(x, holder):
    box = Obj(1)
    holder.append(box)
    y = x.relu()
    print("box", file=SINK)
    box.n = 7
    return y * 2, holder[0] is box


@object_cases.add(lambda: (r(3), Obj(0)), graphs=1)
def new_list_stored_on_argument_attribute(x, obj):
    items = []
    obj.items = items
    y = x + 1
    snapshot(obj)
    items.append(y.shape[0])
    return y, obj.items is items


@object_cases.add(lambda: (r(3),), graphs=2)
def new_set_and_tuple(x):
    s = {1, 2}
    t = (x * 2, s)
    print("set", file=SINK)
    s.add(3)
    return t[0] + 1, t[1], t[1] is s


@pytest.mark.parametrize("case", params(object_cases))
def test_objects(case):
    check_break(case.fn, case.make_args, world=traced(), **case.options)


# ------------------------------------------------------------------------------ order of effects

order_cases = Cases()


@order_cases.add(lambda: (r(3),), graphs=2)
def effects_in_program_order(x):
    TRACE.append("before")
    y = x * 2
    mark("during")                             # sees "before" already in TRACE
    TRACE.append("after")
    return y + 1


@order_cases.add(lambda: (r(3),), graphs=4)
def effects_between_three_breaks(x):
    TRACE.append(1)
    a = x + 1
    mark("a")
    TRACE.append(2)
    b = a * 2
    mark("b")
    TRACE.append(3)
    c = b - 3
    mark("c")
    TRACE.append(4)
    return c.exp()


@order_cases.add(lambda: (r(3), []), graphs=1)
def argument_list_seen_by_disabled_call(x, log):
    log.append("x")
    y = x.cos()
    snapshot(list(log), len(log))
    log.append("y")
    return y


@order_cases.add(lambda: (r(3),), graphs=1)
def effects_only_no_graph_before(x):
    TRACE.append("first")
    mark("m")
    return x * 2


@pytest.mark.parametrize("case", order_cases.params())
def test_order(case):
    check_break(case.fn, case.make_args, world=traced(), **case.options)


# ------------------------------------------------------------------------------ globals, module attributes

STEP = 0
MODE = "train"
CONFIG = Obj(0)
THIS = sys.modules[__name__]
THIS.COUNTER = 0


@graphjit.disable
def read_globals():
    TRACE.append(("globals", STEP, MODE, CONFIG.n, THIS.COUNTER))


def _reset_globals():
    global STEP, MODE
    _reset_trace()
    STEP, MODE = 0, "train"
    CONFIG.n = 0
    THIS.COUNTER = 0


def global_state():
    return World(_reset_globals, lambda: (STEP, MODE, CONFIG.n, THIS.COUNTER, list(TRACE)))


global_cases = Cases()


@global_cases.add(lambda: (r(3),), graphs=2)
def global_counter(x):
    global STEP
    STEP += 1
    y = x + STEP
    read_globals()
    STEP += 10
    return y * 2


@global_cases.add(lambda: (r(3),), graphs=1)
def global_rebound_to_string(x):
    global MODE
    MODE = "eval"
    y = x * 3
    read_globals()
    MODE = MODE + "!"
    return y


@global_cases.add(lambda: (r(3),), graphs=1)
def global_object_attribute(x):
    CONFIG.n += 2
    y = x - CONFIG.n
    print("cfg", CONFIG.n, file=SINK)
    CONFIG.n *= 5
    return y


@global_cases.add(lambda: (r(3),), graphs=None)
def module_attribute(x):
    # Falls back: storing an attribute on a Python module is not captured (a STORE_ATTR, where no break is
    # possible), so the whole frame runs eagerly; results and state are what's asserted.
    THIS.COUNTER += 1
    y = x.abs()
    read_globals()
    THIS.COUNTER += 100
    return y * THIS.COUNTER


@global_cases.add(lambda: (r(3),), graphs=3)
def globals_across_two_breaks(x):
    global STEP
    STEP = 1
    a = x + 1
    read_globals()
    STEP = 2
    b = a * 2
    read_globals()
    STEP = 3
    return b - 1


@pytest.mark.parametrize("case", global_cases.params())
def test_globals(case):
    check_break(case.fn, case.make_args, world=global_state(), **case.options)


def make_counter_closure():
    count = 0

    def counted(x):
        nonlocal count
        count += 1
        y = x * count
        print("count", count, file=SINK)
        count += 1
        return y + count

    def reset():
        nonlocal count
        count = 0
        _reset_trace()

    return counted, reset, lambda: (count, SINK.getvalue())


def test_nonlocal_counter_across_break():
    fn, reset, read = make_counter_closure()
    check_break(fn, lambda: (r(3),), graphs=2, world=World(reset, read))


def make_accumulator():
    seen = []

    def accumulate(x):
        seen.append(x.shape[0])                # mutates the list in the closure cell, no rebinding
        y = x.sum()
        snapshot(seen)
        seen.append(y.dim())
        return y * len(seen)

    return accumulate, seen


def test_closure_list_mutated_across_break():
    fn, seen = make_accumulator()

    def reset():
        seen.clear()
        _reset_trace()
    check_break(fn, lambda: (r(3),), graphs=2, world=World(reset, lambda: (list(seen), list(TRACE))))


# ------------------------------------------------------------------------------ modules

class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.calls = 0
        self.history = []

    def forward(self, x):
        self.calls += 1
        h = self.lin(x)
        print("calls", self.calls, file=SINK)
        self.calls += 1
        self.last_shape = tuple(h.shape)
        return h.relu()


def test_module_attribute_counter():
    # self.calls differs per call: it is read at the break (print) and after it; graphs=None, but the
    # attribute must match eager's after every call.
    check_break_module(Counting, lambda: (r(2, 3),), graphs=None, attrs=("calls", "last_shape"), atol=1e-6)


class CountingStatic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x):
        self.calls = self.calls + 1
        h = self.lin(x)
        mark("forward")
        return h * 2


def test_module_attribute_counter_graph_count():
    """self.calls is read before the break only: the first region is compiled with its value as a constant,
    then (the value changed) with the int as a symbolic input, which serves every later value; the resume
    does not read it and compiles once: 4 calls, 2 + 1 graphs."""
    check_break_module(CountingStatic, lambda: (r(2, 3),), graphs=3, attrs=("calls",), atol=1e-6)


class Buffered(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(3))
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.steps.add_(1)
        print("buffers", file=SINK)
        self.steps.mul_(2)
        self.total.add_(x.sum(0))
        return x + self.steps


def test_module_buffers_in_place_across_break():
    counter, *_ = check_break_module(Buffered, lambda: (r(2, 3),), graphs=2)


class BNPrint(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        h = self.bn(self.conv(x))
        print("bn", tuple(h.shape), file=SINK)
        return self.bn2(h.relu())


def test_batchnorm_train_mode_with_print():
    """Running stats (and num_batches_tracked) updated in both graphs equal eager's after every call."""
    world = World(_reset_trace, lambda: SINK.getvalue(), nonempty=True)
    check_break_module(BNPrint, lambda: (r(2, 3, 5, 5),), graphs=2, atol=1e-5, rtol=1e-5, context=world)
    world.assert_same()


def test_batchnorm_eval_mode_with_print():
    check_break_module(lambda: BNPrint().eval(), lambda: (r(2, 3, 5, 5),), graphs=2, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ in-place tensor ops

inplace_cases = Cases()


@inplace_cases.add(lambda: (r(3),), graphs=2)
def inplace_input_before_and_after(x):
    x.add_(1)
    print("inplace", file=SINK)
    x.mul_(2)
    return x                                   # the argument itself, in eager and compiled


@inplace_cases.add(lambda: (r(3),), graphs=2)
def inplace_input_seen_by_disabled_call(x):
    x.add_(5)
    snapshot(x)                                # must see the add
    x.sub_(1)
    return x * 2


@inplace_cases.add(lambda: (r(4, 4),), graphs=2)
def inplace_view_of_input_across_break(x):
    v = x[1:3]
    v.fill_(0.5)
    print("view", file=SINK)
    v.mul_(4)                                  # v is still a view of x after the break
    return x.sum(1), v


@inplace_cases.add(lambda: (r(3), r(3)), graphs=2)
def inplace_two_inputs_across_break(x, y):
    x.sub_(y)
    print("two", file=SINK)
    y.div_(2)
    return x + y


@inplace_cases.add(lambda: (r(3),), graphs=2)
def inplace_new_tensor_across_break(x):
    acc = torch.zeros(3)
    acc.add_(x)
    print("acc", file=SINK)
    acc.mul_(3)
    return acc, x


@inplace_cases.add(lambda: (r(3), [r(3)]), graphs=2)
def inplace_tensor_in_list_argument(x, xs):
    xs[0].add_(x)
    print("list tensor", file=SINK)
    xs[0].mul_(x)
    return xs[0].sum()


@inplace_cases.add(lambda: (r(3),), graphs=1)
def inplace_only_after_break(x):
    print("first", file=SINK)
    x.clamp_(min=0)
    return x


@inplace_cases.add(lambda: (r(3),), graphs=2)
def setitem_input_across_break(x):
    x[0] = 100.0
    print("setitem", file=SINK)
    x[1:] *= 3
    return x


@inplace_cases.add(lambda: (torch.arange(4.0),), graphs=2)
def view_of_intermediate_then_base_mutated(x):
    y = x * 2
    v = y[0:2]                                 # both graph outputs: v must stay a view of y
    print("view", file=SINK)
    y.mul_(10)
    return v


@inplace_cases.add(lambda: (torch.arange(4.0),), graphs=2)
def view_made_after_break_then_base_mutated(x):
    y = x * 2
    print("base", file=SINK)
    v = y[0:2]
    y.mul_(10)
    return v, y


@pytest.mark.parametrize("case", inplace_cases.params())
def test_inplace(case):
    check_break(case.fn, case.make_args, world=traced(), **case.options)


def test_inplace_on_non_leaf_that_requires_grad():
    """An input made by an op (not a leaf) that requires grad, mutated across a break."""
    def fn(w):
        h = w * 1
        h.add_(1)
        print("grad", file=SINK)
        h.mul_(2)
        return h.sum()
    check_break(fn, lambda: (r(3).requires_grad_(),), graphs=2, world=traced())


# ------------------------------------------------------------------------------ found while writing these

def test_dict_argument_replay_minimal():
    """Minimal form of the dict replay bug (no break needed): one key set, another never read."""
    def set_one_key(x, d):
        d["a"] = 5
        return x * 2
    check_break(set_one_key, lambda: (r(3), {"a": 1, "b": 2}), graphs=1)


def test_set_guard_does_not_alias_the_callers_set():
    def contains_three(x, s):
        y = x * 2
        print("set", file=SINK)
        if 3 in s:
            return y + 1
        return y - 1
    compiled = graphjit.compile(contains_three, backend="eager")
    x = torch.zeros(2)
    first = {1, 2}
    compiled(x, first)
    first.add(3)                               # the guard's constant is this very object now {1, 2, 3}
    torch.testing.assert_close(compiled(x, {1, 2, 3}), contains_three(x, {1, 2, 3}))


# ------------------------------------------------------------------------------ iterators and views

iter_cases = Cases()


@iter_cases.add(lambda: (torch.ones(2), [1, 2, 3, 4]), graphs=None)
def list_iterator_across_break(x, xs):
    it = iter(xs)
    a = next(it)
    print("it", file=SINK)
    b = next(it)
    return x + a + b, list(it)


@iter_cases.add(lambda: (r(2),), graphs=None)
def new_list_iterator_across_break(x):
    it = iter([x, x * 2, x * 3])
    a = next(it)
    print("it", file=SINK)
    return a + next(it), len(list(it))


@iter_cases.add(lambda: (r(2),), graphs=None)
def range_iterator_across_break(x):
    it = iter(range(5))
    next(it)
    print("range", file=SINK)
    return x * next(it)


@iter_cases.add(lambda: (r(2),), graphs=None)
def range_object_across_break(x):
    steps = range(1, 4)
    y = x * 2
    print("range obj", file=SINK)
    return y * len(steps), steps


@iter_cases.add(lambda: (r(2),), graphs=None)
def zip_partly_consumed_across_break(x):
    z = zip([1, 2, 3], [x, x, x])
    first = next(z)
    print("zip", file=SINK)
    return [a * t for a, t in z], first[1] * 2


@iter_cases.add(lambda: (r(2),), graphs=None)
def enumerate_partly_consumed_across_break(x):
    e = enumerate([x, x + 1])
    next(e)
    print("enumerate", file=SINK)
    i, t = next(e)
    return t * i


@iter_cases.add(lambda: (r(2),), graphs=None)
def zip_untouched_across_break(x):
    z = zip([1, 2], [x, x * 2])
    y = x + 1
    print("zip untouched", file=SINK)
    return [a * t for a, t in z], y


@iter_cases.add(lambda: (r(2),), graphs=None)
def generator_expression_across_break(x):
    g = (v * 2 for v in [x, x + 1, x + 2])
    a = next(g)
    print("genexpr", file=SINK)
    return a + next(g)


@iter_cases.add(lambda: (r(2), {"a": 1}), graphs=None)
def dict_keys_view_across_break(x, d):
    keys = d.keys()
    print("keys", file=SINK)
    d["new"] = 2                               # a view: sees the insertion
    return x * len(keys), list(keys)


@iter_cases.add(lambda: (r(2), {"a": 1, "b": 2}), graphs=None)
def dict_items_across_break(x, d):
    items = d.items()
    y = x * 2
    print("items", file=SINK)
    return y, sorted(items)


@iter_cases.add(lambda: (r(3),), graphs=None)
def reversed_and_map_across_break(x):
    rev = reversed([x, x * 2])
    m = map(lambda t: t + 1, [x, x * 3])
    print("rev map", file=SINK)
    return list(rev), list(m)


@pytest.mark.parametrize("case", params(iter_cases))
def test_iterators_across_break(case):
    check_break(case.fn, case.make_args, world=traced(), **case.options)


# ------------------------------------------------------------------------------ state changed by the break itself

@graphjit.disable
def set_key(d, key, value):
    d[key] = value


@graphjit.disable
def set_mode(mode):
    global MODE
    MODE = mode


@graphjit.disable
def set_flag(obj, value):
    obj.flag = value


changed_cases = Cases()


@changed_cases.add(lambda: (r(3),), graphs=2)
def new_dict_changed_by_break(x):
    cfg = {"k": 2}
    y = x * cfg["k"]                           # the first graph uses k == 2
    set_key(cfg, "k", 5)
    return y + x * cfg["k"]                    # the resume must read 5


@changed_cases.add(lambda: (r(3), []), graphs=2)
def argument_list_grown_by_break(x, log):
    y = x + 1
    set_key(log, slice(0, 0), ["a", "b"])      # log[0:0] = [...] in CPython
    return y * len(log)


@changed_cases.add(lambda: (r(3),), graphs=2)
def global_rebound_by_break(x):
    y = x * 2
    set_mode("eval")
    if MODE == "eval":
        return y + 1
    return y - 1


@changed_cases.add(lambda: (r(3), Obj(0)), graphs=2)
def attribute_set_by_break(x, obj):
    obj.flag = False
    y = x * 3
    set_flag(obj, True)
    if obj.flag:
        return y + 10
    return y


@changed_cases.add(lambda: (r(3), []), graphs=2)
def returns_argument_list_after_break(x, log):
    log.append(x.shape[0])
    y = x * 2
    print("list", file=SINK)
    return y + 1, log


@changed_cases.add(lambda: (r(3),), graphs=1)
def input_alias_across_break(x):
    alias = x
    print("alias", file=SINK)
    return alias is x, alias * 2


@changed_cases.add(lambda: (r(3),), graphs=2)
def graph_output_twice_across_break(x):
    y = x * 2
    pair = [y, y]
    print("pair", file=SINK)
    return pair[0] is pair[1], pair[0] + 1, pair


@pytest.mark.parametrize("case", changed_cases.params())
def test_state_changed_by_the_break(case):
    check_break(case.fn, case.make_args, world=global_state(), **case.options)


def test_returned_argument_is_the_argument():
    """An argument object returned after a break is the caller's object, not a rebuilt copy."""
    graphjit.reset()
    compiled = graphjit.compile(returns_argument_list_after_break, backend="eager")
    log = []
    _, out = compiled(r(3), log)
    assert out is log and log == [3]


GLOBAL_T = torch.zeros(3)


def global_tensor_inplace(x):
    GLOBAL_T.add_(x)
    print("global tensor", file=SINK)
    GLOBAL_T.mul_(2)
    return GLOBAL_T + 1


def test_global_tensor_mutated_in_place_across_break():
    def reset():
        _reset_trace()
        GLOBAL_T.zero_()
    world = World(reset, lambda: (GLOBAL_T.clone(), SINK.getvalue()))
    check_break(global_tensor_inplace, lambda: (r(3),), graphs=2, world=world)


# ------------------------------------------------------------------------------ random numbers

def rand_on_both_sides(x):
    a = torch.rand(3)
    print("rng", file=SINK)
    b = torch.rand(3)
    return a + x, b


def dropout_on_both_sides(x):
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    print("dropout", file=SINK)
    return y, torch.nn.functional.dropout(x, 0.5, training=True)


@pytest.mark.parametrize("fn", [rand_on_both_sides, dropout_on_both_sides], ids=lambda f: f.__name__)
def test_random_numbers_across_break(fn):
    """The generator state advances through both graphs as in eager: same seed, same numbers."""
    graphjit.reset()
    compiled = graphjit.compile(fn, backend="eager")
    for seed in range(3):
        x = torch.ones(3)
        torch.manual_seed(seed)
        expected = fn(x)
        expected_next = torch.rand(2)           # the generator's state after the call
        torch.manual_seed(seed)
        actual = compiled(x)
        actual_next = torch.rand(2)
        for a, e in zip(actual, expected):
            assert torch.equal(a, e)
        assert torch.equal(actual_next, expected_next)


def tensor_stored_then_mutated(x, log):
    y = x * 2
    log.append(y)
    print("stored", file=SINK)
    y.add_(1)                                   # log[0] is y: the list sees the update
    return log[0] is y, y.sum()


def test_tensor_stored_in_argument_then_mutated_after_break():
    check_break(tensor_stored_then_mutated, lambda: (r(3), []), graphs=2, world=traced())
