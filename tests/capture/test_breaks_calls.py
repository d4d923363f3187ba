"""Graph breaks at calls graphjit can't capture: print, logging, time.perf_counter, copy.deepcopy, C
functions, warnings, and user functions marked @graphjit.disable. At a break the graph so far is compiled,
the call runs in CPython, and the rest of the frame continues in a resume function that is captured too.

Each case asserts eager's results and mutated arguments on several calls with fresh inputs, the text the
call printed (or the records it logged) on each call, and the number of graphs the backend was handed:
a graph is compiled for each region of tensor work between breaks; a region without tensor ops is not.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import contextlib
import copy
import io
import logging
import math
import time
import warnings

import pytest
import torch

import graphjit
from .harness import Cases, r
from .test_breaks_support import World, check_break


# ------------------------------------------------------------------------------ print to a sink

SINK = io.StringIO()


def _new_sink():
    global SINK
    SINK = io.StringIO()


def printed():
    """The text printed to SINK during each run (a fresh StringIO per run)."""
    return World(_new_sink, lambda: SINK.getvalue(), nonempty=True)


@contextlib.contextmanager
def _stdout_run(world):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    world.runs.append(buffer.getvalue())


class Stdout(World):
    """The text printed to sys.stdout during each run (redirect_stdout to a fresh buffer)."""

    def __init__(self):
        super().__init__(None, None, nonempty=True)

    def __call__(self):
        return _stdout_run(self)


sink_cases = Cases()   # (fn, make_args, graphs): output, arguments and printed text compared


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_between_two_regions(x):
    y = x.sin()
    print("between", file=SINK)
    return y.cos()


@sink_cases.add(lambda: (r(2, 3),), graphs=2)
def print_shape_and_dtype(x):
    y = x @ x.t()
    print("shape", y.shape, y.dtype, y.dim(), file=SINK)
    return y.relu()


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_tensor_value(x):
    y = x * 2
    print(y, file=SINK)                       # the real tensor, computed by the first graph
    return y + 1


@sink_cases.add(lambda: (r(3),), graphs=1)
def print_at_start(x):
    print("start", x.shape, file=SINK)
    return (x * 2).sum()


@sink_cases.add(lambda: (r(3),), graphs=1)
def print_at_end(x):
    y = (x * 2).exp()
    print("end", y.shape, file=SINK)
    return y


@sink_cases.add(lambda: (r(3),), graphs=0)
def print_only(x):
    print("only", x.shape, file=SINK)
    return x


@sink_cases.add(lambda: (r(3),), graphs=3)
def three_prints_in_a_row(x):
    a = x + 1
    print("a", file=SINK)
    b = a * 2
    print("b", file=SINK)
    c = b - 1
    print("c", file=SINK)
    return c                                  # no tensor op after the last print: 3 graphs, not 4


@sink_cases.add(lambda: (r(3),), graphs=2)
def adjacent_prints(x):
    y = x + 1
    print("one", file=SINK)
    print("two", file=SINK)                   # the region between the prints has no ops: no graph
    return y * 2


@sink_cases.add(lambda: (r(3),), graphs=4)
def four_regions(x):
    y = x.sin()
    print(1, file=SINK)
    y = y.cos()
    print(2, file=SINK)
    y = y.tanh()
    print(3, file=SINK)
    return y.exp()


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_keywords(x):
    y = x.abs()
    print("a", "b", y.shape[0], sep="-", end="!\n", file=SINK)
    return y.sqrt()


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_star_args(x):
    y = x * 3
    parts = ["star", y.shape, len(y)]
    print(*parts, file=SINK)
    return y - 1


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_star_args_and_kwargs(x):
    y = x * 3
    options = {"sep": "|", "file": SINK}
    print("p", "q", *[y.dim()], **options)
    return y - 1


@sink_cases.add(lambda: (r(3), r(3)), graphs=2)
def print_live_temporaries(x, w):
    a = x * w
    b = x + w
    print("live", file=SINK)                  # a, b, x, w all live across the break
    return a - b, x * w


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_between_returns_tuple(x):
    y = x.sum(0, keepdim=True)
    print("tuple", file=SINK)
    return y, y * 2, (x, [y])


@sink_cases.add(lambda: (r(4),), graphs=2)
def print_with_python_locals(x):
    n = x.shape[0]
    names = ["a", "b"]
    scale = 1.5
    y = x * scale
    print(names, n, file=SINK)
    return y * n, names, scale


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_result_used(x):
    y = x + 1
    result = print("r", file=SINK)            # None, carried into the resume function
    return y * 2, result


@sink_cases.add(lambda: (r(3), 2), graphs=2)
def print_with_int_argument(x, k):
    y = x * k
    print("k", k, file=SINK)
    return y + k


@sink_cases.add(lambda: (r(3),), graphs=2)
def print_in_else_of_static_branch(x):
    y = x * 2
    if x.dim() == 2:                          # static: decided at trace time, no break
        y = y + 1
    else:
        print("1-d", file=SINK)
    return y.neg()


def _with_defaults(x, scale=2.0, *, shift=1):
    y = x * scale
    print("defaults", scale, shift, file=SINK)
    return y + shift


sink_cases.add_fn(_with_defaults, lambda: (r(3),), name="print_defaults_and_kwonly", graphs=2)


def _varargs(*xs):
    total = xs[0] + xs[1]
    print("varargs", len(xs), file=SINK)
    return total * len(xs), xs[2]


sink_cases.add_fn(_varargs, lambda: (r(3), r(3), r(3)), name="print_varargs", graphs=2)


def _varkw(x, **kw):
    y = x * kw["a"]
    print("kw", sorted(kw), file=SINK)
    return y + kw["b"]


sink_cases.add_fn(_varkw, lambda: (r(3),), name="print_varkw", graphs=2, kwargs_factory=lambda: {"a": 2, "b": 3})


def _make_closure(scale):
    def closure_scale(x):
        y = x * scale
        print("closure", scale, file=SINK)
        return y + scale
    return closure_scale


sink_cases.add_fn(_make_closure(3), lambda: (r(3),), name="print_in_closure_with_free_var", graphs=2)


def _make_tensor_closure():
    bias = torch.arange(3.0)

    def closure_tensor(x):
        y = x + bias
        print("bias", file=SINK)
        return y * bias
    return closure_tensor


sink_cases.add_fn(_make_tensor_closure(), lambda: (r(3),), name="print_in_closure_with_tensor", graphs=2)


@pytest.mark.parametrize("case", sink_cases.params())
def test_print_to_sink(case):
    check_break(case.fn, case.make_args, world=printed(), **case.options)


def print_to_stdout(x):
    y = x.sin()
    print("stdout", y.shape)
    return y.cos()


def print_to_stdout_twice(x):
    print("first")
    y = x.sin() * 2
    print("second", y.shape[0])
    return y


@pytest.mark.parametrize("fn, graphs", [(print_to_stdout, 2), (print_to_stdout_twice, 1)],
                         ids=["print_to_stdout", "print_to_stdout_twice"])
def test_print_to_redirected_stdout(fn, graphs):
    check_break(fn, lambda: (r(3),), graphs=graphs, world=Stdout())


# ------------------------------------------------------------------------------ logging

RECORDS = []


class ListHandler(logging.Handler):
    def emit(self, record):
        RECORDS.append((record.levelname, record.getMessage()))


LOGGER = logging.getLogger("graphjit.tests.breaks")
LOGGER.addHandler(ListHandler())
LOGGER.setLevel(logging.DEBUG)
LOGGER.propagate = False


def logged():
    return World(RECORDS.clear, lambda: list(RECORDS), nonempty=True)


# Logger calls are not breaks: they are deferred until after the graph, so the records must come out as in
# eager (same messages, same order relative to other effects, values as they were at the call).

def log_between(x):
    y = x.relu()
    LOGGER.info("relu of %s", tuple(y.shape))
    return y * 2


def log_two_levels(x):
    y = x + 1
    LOGGER.debug("debug %d", y.dim())
    z = y * y
    LOGGER.warning("warn %s", z.shape[0])
    return z - y


def log_with_item(x):
    y = x * 2
    LOGGER.info("mean %.4f", y.mean().item())  # .item() breaks
    return y + 1


def log_level_changes(x):
    LOGGER.debug("shown")
    LOGGER.setLevel(logging.INFO)
    LOGGER.debug("suppressed, as in eager")
    LOGGER.setLevel(logging.DEBUG)
    return x * 2


def log_around_a_break(x):
    LOGGER.info("a")
    y = x.sin()
    print("b", file=SINK)
    LOGGER.info("c")
    return y


def log_then_raise(x):
    LOGGER.info("before raising")
    y = x * 2
    if y.shape[0] == 3:
        raise ValueError("raised after a log call")
    return y


@pytest.mark.parametrize("fn, graphs", [(log_between, 1), (log_two_levels, 1), (log_with_item, None),
                                        (log_level_changes, 1), (log_around_a_break, 1)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_logging(fn, graphs):
    check_break(fn, lambda: (r(3),), graphs=graphs, world=logged())


def test_logging_then_exception():
    """A deferred log record made before user code raises is still emitted, once, as in eager."""
    graphjit.reset()
    compiled = graphjit.compile(log_then_raise, backend="eager")
    world = logged()
    for _ in range(2):
        for fn in (log_then_raise, compiled):
            with world():
                with pytest.raises(ValueError, match="raised after a log call"):
                    fn(r(3))
    world.assert_same()


def log_order_with_appends(x, log):
    log.append(1)
    LOGGER.info("two")
    log.append(3)
    RECORDS.append(("list", list(log)))        # the records list itself: the log record must be before this
    return x * 2


def log_tensor_then_mutate(x):
    LOGGER.info("x=%s", x)
    x.add_(1)                                  # eager formats the record before this add
    return x


def log_list_then_mutate(x, log):
    LOGGER.info("log=%s", log)
    log.append(1)
    return x * 2


def test_logging_order_with_other_effects():
    check_break(log_order_with_appends, lambda: (r(3), []), graphs=None, world=logged())


def test_logging_tensor_mutated_later():
    check_break(log_tensor_then_mutate, lambda: (r(3),), graphs=None, world=logged())


def test_logging_list_mutated_later():
    check_break(log_list_then_mutate, lambda: (r(3), []), graphs=None, world=logged())


# A frame that sets an attribute and puts its value back (transformers' output collector around a model's
# forward: `compiling = True ... compiling = False`) leaves nothing to replay, so a logger call after it is
# still deferred: one graph. The value it restores is guarded; a handler that reads the attribute between
# the two stores sees what eager shows it.

class Flags:
    def __init__(self):
        self.busy = False


FLAGS = Flags()
STATE_RECORDS = []


class StateHandler(logging.Handler):
    def emit(self, record):
        STATE_RECORDS.append((record.getMessage(), FLAGS.busy))


STATE_LOGGER = logging.getLogger("graphjit.tests.breaks.state")
STATE_LOGGER.addHandler(StateHandler())
STATE_LOGGER.setLevel(logging.DEBUG)
STATE_LOGGER.propagate = False


def log_after_restored_flag(x):
    FLAGS.busy = True
    y = x.sin()
    FLAGS.busy = False
    STATE_LOGGER.info("done %d", 3)
    return y * 2


def log_inside_restored_flag(x):
    FLAGS.busy = True
    STATE_LOGGER.info("inside")
    y = x.sin()
    FLAGS.busy = False
    return y * 2


def state_logged():
    def reset():
        STATE_RECORDS.clear()
        FLAGS.busy = False
    return World(reset, lambda: (list(STATE_RECORDS), FLAGS.busy), nonempty=True)


def test_logging_after_a_restored_attribute_is_deferred():
    check_break(log_after_restored_flag, lambda: (r(3),), graphs=1, world=state_logged())


def test_logging_between_a_store_and_its_restore_sees_the_stored_value():
    check_break(log_inside_restored_flag, lambda: (r(3),), graphs=None, world=state_logged())


def test_a_restored_attribute_is_guarded():
    """Compiled while FLAGS.busy was False; called while it is True, the frame still leaves it False."""
    graphjit.reset()
    compiled = graphjit.compile(log_after_restored_flag, backend="eager")
    FLAGS.busy = False
    compiled(r(3))
    FLAGS.busy = True
    STATE_RECORDS.clear()
    out = compiled(x := r(3))
    torch.testing.assert_close(out, x.sin() * 2)
    assert FLAGS.busy is False
    assert STATE_RECORDS == [("done 3", False)]


# ------------------------------------------------------------------------------ time, copy, math, warnings

def perf_counter_between(x):
    t0 = time.perf_counter()
    y = x * 2
    t1 = time.perf_counter()
    return y + 1, t1 >= t0


def test_perf_counter():
    # Each perf_counter() value differs: if a float crossing a break were specialized, the regions after
    # it would recompile on every call. graphs=None: the results are what's asserted.
    check_break(perf_counter_between, lambda: (r(3),), graphs=None)


def test_perf_counter_regions_recompile_once():
    """The perf_counter() values the breaks hand to the resume functions change every call: each resume
    function recompiles once, with them as symbolic floats, and later calls reuse those entries (4 graphs
    after 2 calls and after 8, as torch.compile's automatic dynamic floats give)."""
    check_break(perf_counter_between, lambda: (r(3),), graphs=4, calls=2)
    check_break(perf_counter_between, lambda: (r(3),), graphs=4, calls=8)


def deepcopy_tensor(x):
    y = x * 2
    z = copy.deepcopy(y)
    z.add_(1)
    return y, z


def deepcopy_list(x):
    items = [x + 1, x - 1]
    clone = copy.deepcopy(items)
    clone[0].mul_(3)
    return items[0] + clone[0], clone


def deepcopy_dict_of_tensors_argument(state, x):
    saved = copy.deepcopy(state)
    state["w"].add_(x)
    return saved["w"] * 2, state["w"]


def frexp_of_item(x):
    y = x.abs().sum() + 1
    mantissa, exponent = math.frexp(y.item())
    return x * mantissa, exponent


def frexp_of_shape(x):
    y = x.exp()
    m, e = math.frexp(float(y.shape[0]))   # a C function on a constant: may fold, no break needed
    return y * m + e


WARNED = []


def _new_warning_log():
    WARNED.clear()


def warn_between(x):
    y = x.sigmoid()
    warnings.warn(f"saw {y.shape[0]} values", UserWarning)
    return y * 2


@contextlib.contextmanager
def _warnings_run(world):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    world.runs.append([(w.category.__name__, str(w.message)) for w in caught])


class Warned(World):
    def __init__(self):
        super().__init__(None, None, nonempty=True)

    def __call__(self):
        return _warnings_run(self)


other_cases = Cases()
other_cases.add_fn(deepcopy_tensor, lambda: (r(3),), graphs=2)
other_cases.add_fn(deepcopy_list, lambda: (r(3),), graphs=2)
other_cases.add_fn(deepcopy_dict_of_tensors_argument, lambda: ({"w": r(3)}, r(3)), graphs=1)
other_cases.add_fn(frexp_of_item, lambda: (r(3),), graphs=None)
other_cases.add_fn(frexp_of_shape, lambda: (r(3),), graphs=1)


@pytest.mark.parametrize("case", other_cases.params())
def test_library_calls(case):
    check_break(case.fn, case.make_args, **case.options)


def test_warnings_warn():
    check_break(warn_between, lambda: (r(3),), graphs=2, world=Warned())


# ------------------------------------------------------------------------------ @graphjit.disable

@graphjit.disable
def record_shape(v, log):
    log.append(tuple(v.shape))
    return v * 3                              # runs in CPython: not part of any graph


@graphjit.disable
def count_calls(log):
    log.append("called")
    return len(log)


@graphjit.disable
def scaled(v, *, factor=2.0, log=None):
    if log is not None:
        log.append(factor)
    return v * factor


class Recorder:
    def __init__(self):
        self.seen = []

    @graphjit.disable
    def record(self, v):
        self.seen.append(float(v.sum()))
        return v.neg()


disable_cases = Cases()


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_between_regions(x, log):
    y = x + 1
    z = record_shape(y, log)
    return z.sin()


@disable_cases.add(lambda: (r(3), []), graphs=1)
def disabled_at_start(x, log):
    z = record_shape(x, log)
    return z * 2


@disable_cases.add(lambda: (r(3), []), graphs=1)
def disabled_at_end(x, log):
    y = x.exp()
    return record_shape(y, log)


@disable_cases.add(lambda: (r(3), []), graphs=4)
def disabled_three_in_a_row(x, log):
    a = record_shape(x + 1, log)
    b = record_shape(a * 2, log)
    c = record_shape(b - 1, log)
    return c.relu()


@disable_cases.add(lambda: (r(3), ["start"]), graphs=2)
def disabled_returns_int(x, log):
    y = x * 2
    n = count_calls(log)                      # 2 on every call: fresh log each call
    return y * n


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_with_keywords(x, log):
    y = x.cos()
    z = scaled(y, factor=0.5, log=log)
    return z + y


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_in_middle_of_expression(x, log):
    return (x + 1) * record_shape(x, log) + 2   # x + 1 is on the stack across the break


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_inside_call_arguments(x, log):
    return torch.cat([x * 2, record_shape(x, log), x * 4])


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_inside_tuple_and_dict_display(x, log):
    out = {"a": x.abs(), "b": (x.neg(), record_shape(x, log))}
    return out, out["b"][1] + out["a"]


@disable_cases.add(lambda: (r(3), Recorder()), graphs=2)
def disabled_method(x, rec):
    y = x.tanh()
    z = rec.record(y)
    return z * y


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_through_star_call(x, log):
    y = x * 5
    args = (y, log)
    z = record_shape(*args)
    return z - y


@disable_cases.add(lambda: (r(3), []), graphs=2)
def disabled_twice_same_callee(x, log):
    y = x + 1
    record_shape(y, log)
    record_shape(y, log)
    return y * 2


@pytest.mark.parametrize("case", disable_cases.params())
def test_disabled_call(case):
    check_break(case.fn, case.make_args, **case.options)


@graphjit.disable
def _glue(v):
    return _inner_work(v)


def _inner_work(v):
    return v.sin() * 2                       # called from disabled code: runs in CPython, never captured


def calls_disabled_glue(x):
    y = x + 1
    z = _glue(y)
    return z * 3


def test_function_called_only_from_disabled_code_is_not_captured():
    counter = check_break(calls_disabled_glue, lambda: (r(3),), graphs=2)
    ops = [[n.target for n in g.graph.nodes if n.op.startswith("call")] for g in counter.graphs]
    assert all(torch.sin not in o and "sin" not in o for o in ops), ops


def test_disabled_function_compiled_directly_is_not_compiled():
    assert graphjit.compile(record_shape) is record_shape


# ------------------------------------------------------------------------------ closures of one factory

def _int_factory(scale):
    def int_factory_made(x):
        y = x * 2
        print("factory", scale, file=SINK)
        return y + scale
    return int_factory_made


def _tensor_factory(bias):
    def tensor_factory_made(x):
        y = x * 2
        print("factory", file=SINK)
        return y + bias
    return tensor_factory_made


# Each factory's code is used by this test only: the stale resume functions it exposes survive
# graphjit.reset() (the resume cache is not cleared by it) and would leak into other tests.
@pytest.mark.parametrize("factory, cells", [(_int_factory, (2, 3)),
                                            (_tensor_factory, (torch.full((3,), 2.0), torch.full((3,), 3.0)))],
                         ids=["int_cells", "tensor_cells"])
def test_two_closures_of_one_factory(factory, cells):
    for cell in cells:
        check_break(factory(cell), lambda: (r(3),), graphs=2, world=printed())


# ------------------------------------------------------------------------------ break in a method call's arguments

class Scaler:
    def __init__(self, k):
        self.k = k

    def scale(self, v):
        return v * self.k


def python_method_with_breaking_argument(x, log, s):
    y = x + 1
    return s.scale(record_shape(y, log)) - y


def tensor_method_with_breaking_argument(x, log):
    y = x * 2
    return y.mul(record_shape(x, log))


def torch_function_with_breaking_argument(x, log):
    y = x * 2
    return torch.mul(y, record_shape(x, log))


def test_break_in_python_method_arguments():
    # [y = x + 1]; record_shape in CPython; the resume traces s.scale(...) - y: [mul, sub]
    check_break(python_method_with_breaking_argument, lambda: (r(3), [], Scaler(3)), graphs=2)


def test_break_in_torch_function_arguments():
    check_break(torch_function_with_breaking_argument, lambda: (r(3), []), graphs=2)


def test_break_in_tensor_method_arguments_results():
    check_break(tensor_method_with_breaking_argument, lambda: (r(3), []), graphs=None)


def test_break_in_tensor_method_arguments_graphs():
    check_break(tensor_method_with_breaking_argument, lambda: (r(3), []), graphs=2)


# ------------------------------------------------------------------------------ recompiles and call forms

def test_new_shape_recompiles_each_region_once():
    """A new input shape fails the guards of both regions: each recompiles once; old shapes still hit."""
    from graphjit.testing import Step
    from .test_breaks_support import check_break_steps
    steps = [Step(lambda: (r(3),), graphs=2), Step(lambda: (r(5),), graphs=4), Step(lambda: (r(3),), graphs=4),
             Step(lambda: (r(5),), graphs=4)]
    check_break_steps(print_between_two_regions, steps, world=printed())


def test_arguments_by_keyword():
    check_break(disabled_between_regions, lambda: (), kwargs_factory=lambda: {"log": [], "x": r(3)}, graphs=2)


def test_compiled_bound_method_with_break():
    class Holder:
        def __init__(self):
            self.calls = 0

        def run(self, x):
            self.calls += 1
            y = x.sin()
            print("method", self.calls, file=SINK)
            return y * self.calls

    holder = Holder()
    eager_holder = Holder()
    graphjit.reset()
    compiled = graphjit.compile(holder.run, backend="eager")
    for seed in range(3):
        torch.manual_seed(seed)
        x = r(3)
        torch.testing.assert_close(compiled(x), eager_holder.run(x))
    assert holder.calls == eager_holder.calls == 3


# ------------------------------------------------------------------------------ kinds of values live at a break

class Color:
    RED = "red"


def many_kinds_of_locals(x):
    dt = torch.float64
    dev = x.device
    size = x.shape
    sl = slice(1, None)
    ell = ...
    typ = float
    mod = math
    op = torch.mul
    none = None
    cplx = 1 + 2j
    fz = frozenset({1})
    raw = b"ab"
    cls = Color
    print("zoo", file=SINK)
    return (x.to(dt), dev, size, x[sl], x[ell], typ(2), mod.pi, op(x, 2), none, cplx, fz, raw, cls.RED)


def bound_tensor_method_local(x):
    add_one = x.add
    print("bound", file=SINK)
    return add_one(1)      # the resume can't call the bound C method in a graph: it runs in CPython


def lambda_local(x):
    f = lambda t: t * 3    # noqa: E731  a function made in the frame can't cross a break: the frame falls back
    print("lambda", file=SINK)
    return f(x)


def partial_local(x):
    import functools
    f = functools.partial(torch.add, alpha=2)   # falls back, like the lambda
    print("partial", file=SINK)
    return f(x, x)


@pytest.mark.parametrize("fn, graphs", [(many_kinds_of_locals, 1), (bound_tensor_method_local, None),
                                        (lambda_local, None), (partial_local, None)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_values_live_at_a_break(fn, graphs):
    check_break(fn, lambda: (r(3),), graphs=graphs, world=printed())
