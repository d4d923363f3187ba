"""Floats that change between calls: a float argument, attribute, or value a graph break hands to its
resume function becomes a symbolic graph input (a SymFloat) on its first recompile, as torch.compile's
automatic dynamic floats do, so a changing scale, temperature or time value does not recompile every call.

Each case runs a sequence of calls, compiled against eager (results, mutated attributes), and asserts the
graph count: the frontend alone (a counting backend that runs the captured graph), graphjit's compiler,
aot_eager and Inductor (the last two compile per set of float values behind one captured graph).
"""
import math
import time

import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, assert_same


def run(fn, calls, graphs, backend="eager", dynamic=None):
    """fn compiled over `calls` (argument tuples, or callables making them), each result equal to eager's;
    `graphs` captured graphs in all (None: not checked)."""
    counter = CompileCounter(backend)
    compiled = graphjit.compile(fn, backend=counter, dynamic=dynamic)
    for args in calls:
        args = args() if callable(args) else args
        want, got = fn(*args), compiled(*args)
        torch.testing.assert_close(got, want, equal_nan=True)
    if graphs is not None:
        assert counter.frame_count == graphs, (counter.frame_count, graphs)
    return counter


def scaled(x, s):
    return (x * s).relu() + s * 2


X = torch.randn(4, 5)
SCALES = [(X, s) for s in (0.5, 1.5, 2.5, -3.25, 1e-30, 7.0)]


@pytest.mark.parametrize("backend", ["eager", "graphjit", "aot_eager"])
def test_a_changing_float_argument_compiles_twice(backend):
    run(scaled, SCALES, graphs=2, backend=backend)


def test_dynamic_true_makes_a_float_argument_symbolic_from_the_first_call():
    run(scaled, SCALES, graphs=1, dynamic=True)


def test_dynamic_false_compiles_per_value():
    run(scaled, SCALES[:4], graphs=4, dynamic=False)


def test_inductor_runs_a_graph_with_a_float_input_per_value():
    pytest.importorskip("torch._inductor")
    run(scaled, SCALES[:3], graphs=2, backend="inductor")


def test_nan_and_infinities_are_constants_guarded_as_such():
    calls = [(X, s) for s in (0.5, 1.5, float("nan"), 2.5, float("inf"), float("nan"), -float("inf"), 3.5)]
    counter = run(scaled, calls, graphs=None)
    # 0.5 static, then one symbolic graph for the finite floats; NaN and each infinity constants of their own
    assert counter.frame_count <= 5, counter.frame_count


def branching(x, s):
    if s > 1.0:
        return x * s
    return x - s


def test_a_branch_on_a_symbolic_float_guards_the_branch_not_the_value():
    calls = [(X, s) for s in (2.0, 3.0, 4.0, 0.5, 0.25, 5.0, 0.125)]
    run(branching, calls, graphs=3)


def specialized(x, s):
    return x * math.sqrt(s) + len(f"{s:.3f}") + torch.tensor(s)


def test_a_float_used_where_it_must_be_a_number_specializes_and_stays_right():
    calls = [(X, s) for s in (2.0, 3.0, 4.0, 3.0)]
    run(specialized, calls, graphs=None)


def made_from_float(x, s):
    return torch.full((3,), s) + x[0, :3] * (s ** 2) - x[1, :3].clamp(min=-s, max=s) / (s + 1) + int(s)


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_tensors_made_from_a_symbolic_float(backend):
    run(made_from_float, [(X, s) for s in (0.5, 1.5, 2.5, 3.5)], graphs=2, backend=backend)


def test_floats_in_an_argument_list():
    def f(x, scales):
        return x * scales[0] + scales[1]
    run(f, [(X, [0.5, 1.0]), (X, [1.5, 2.0]), (X, [2.5, -1.0]), (X, [0.25, 0.75])], graphs=2)


class Decaying(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)
        self.scale = 1.0
        self.steps = 0

    def forward(self, x):
        self.scale *= 0.9
        self.steps += 1
        return self.lin(x) * self.scale + self.steps


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_a_float_attribute_the_module_updates_every_call(backend):
    """The frame reads self.scale, multiplies it, and writes it back: after the first recompile the float
    is symbolic, the new value is a graph output written to the attribute, and no call recompiles."""
    torch.manual_seed(0)
    model, reference = Decaying(), Decaying()
    reference.load_state_dict(model.state_dict())
    counter = CompileCounter(backend)
    compiled = graphjit.compile(model, backend=counter)
    for _ in range(6):
        torch.testing.assert_close(compiled(X), reference(X))
        assert model.scale == reference.scale and type(model.scale) is float
        assert model.steps == reference.steps and type(model.steps) is int
    assert counter.frame_count == 2, counter.frame_count


def timed(x):
    start = time.perf_counter()
    y = x.sin()
    return y * (time.perf_counter() >= start)


def test_a_time_value_a_break_hands_on_does_not_recompile_every_call():
    """perf_counter() is a graph break; the float it returns reaches the resume function as an argument:
    symbolic after one recompile, so later calls reuse the entries."""
    counter = run(timed, [(X,)] * 6, graphs=None)
    assert counter.frame_count <= 4, counter.frame_count


def test_a_float_needing_gradients_through_the_compiler():
    """A graph needing gradients with a symbolic float (AOTAutograd's trace takes it as a scalar input)."""
    w = torch.randn(5, 5, requires_grad=True)

    def f(x, s):
        return ((x @ w) * s).tanh().sum()
    counter = CompileCounter("graphjit")
    compiled = graphjit.compile(f, backend=counter)
    for s in (0.5, 1.5, 2.5, 3.5):
        want = torch.autograd.grad(f(X, s), w)[0]
        got = torch.autograd.grad(compiled(X, s), w)[0]
        torch.testing.assert_close(got, want)
    assert counter.frame_count == 2


def test_integer_tensors_times_a_symbolic_float_promote_as_with_a_python_float():
    """int tensor * float is the default float dtype (a Python scalar), not float64 (a 0-d tensor)."""
    def f(n, s):
        return n * s
    ints = torch.arange(6, dtype=torch.int32)
    counter = run(f, [(ints, s) for s in (0.5, 1.5, 2.5)], graphs=2, backend="graphjit")
    assert graphjit.compile(f)(ints, 4.5).dtype == torch.float32
    assert counter.frame_count == 2


def rounded(x, s):
    return x * math.floor(s * 10) + math.ceil(s) - math.trunc(-s), math.sqrt(s)


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_floor_ceil_trunc_and_sqrt_of_a_symbolic_float_stay_symbolic(backend):
    """No guard on the value: floor/ceil/trunc are SymInts, sqrt a SymFloat with a guard that its argument
    is not negative (where CPython raises)."""
    run(rounded, [(X, s) for s in (0.5, 1.25, 2.75, 9.0, 0.0, 3.5)], graphs=2, backend=backend)


def test_sqrt_of_a_negative_symbolic_float_raises_as_in_eager():
    compiled = graphjit.compile(rounded, backend=CompileCounter())
    for s in (0.5, 1.5):
        compiled(X, s)
    with pytest.raises(ValueError, match="math domain error"):
        compiled(X, -1.0)


def cosine_schedule(p, g, step, total):
    lr = 0.05 * (1 + math.cos(math.pi * step / total))
    warm = math.sin(step / 3.0) + math.tan(step / (4 * total)) + math.tanh(step / total) + math.atan(step)
    return p - lr * g, p * (warm + math.log2(step + 1) + math.acos(step / (total + 1)) + math.asin(0.5 / step))


@pytest.mark.parametrize("backend", ["eager", "graphjit"])
def test_a_cosine_schedule_over_a_step_counter_is_one_dynamic_graph(backend):
    """math.cos/sin/tan/tanh/atan/log2/acos/asin of a symbolic step stay symbolic (they were folded, with a
    guard on the value: a recompile per step until the limit, then eager), each with a guard that its
    argument is one CPython takes."""
    p, g = torch.randn(6), torch.randn(6)
    run(cosine_schedule, [(p, g, step, 20) for step in range(1, 12)], graphs=2, backend=backend)


def test_floats_computed_from_symbols_round_as_in_python():
    """A float the graph computes from a symbolic int or float (returned, or a scale of a tensor op) is
    computed by the compiled graph's wrapper in the graph's order of operations: sympy's form of it
    (0.05*c + 0.05 for 0.05 * (1 + c)) rounded differently in the last bit."""
    from graphjit.backends.registry import graphjit_backend

    def f(x, step, s):
        lr = 0.05 * (1 + math.cos(step / 7))
        return x * lr, lr, (s + 0.1) * 0.7, -s / 3 + step ** 2

    compiled = graphjit.compile(f, backend=graphjit_backend)
    for step, s in ((1, 0.5), (2, 1.25), (3, 3.3), (5, 7.1), (9, 2.7), (13, 0.3), (21, 5.5)):
        x = torch.randn(3)
        got, want = compiled(x, step, s), f(x, step, s)
        assert got[1:] == want[1:], (step, s, got[1:], want[1:])
        assert torch.equal(got[0], want[0]), step


def test_math_functions_outside_their_domain_raise_as_in_eager():
    compiled = graphjit.compile(lambda x, s: x * math.acos(s) + math.log2(s), backend=CompileCounter())
    for s in (0.5, 0.25):
        assert_same(compiled(X, s), X * math.acos(s) + math.log2(s))
    for s, error in ((1.5, ValueError), (-0.5, ValueError), (0.0, ValueError)):
        with pytest.raises(error, match="math domain error"):
            compiled(X, s)
    trig = graphjit.compile(lambda x, s: x * math.cos(s), backend=CompileCounter())
    for s in (0.5, 0.25):
        trig(X, s)
    with pytest.raises(ValueError, match="math domain error"):
        trig(X, float("inf"))
    assert_same(trig(X, float("nan")), X * math.cos(float("nan")))


def formatted_after_a_break(x):
    total = x.sum().item()          # a graph break: the float goes to the resume function
    return x * 2, f"{total:.2f}|{total!r:>30}"


def test_an_f_string_of_a_changing_float_settles():
    """The resume function's float becomes symbolic on its first recompile; formatting it is then a graph
    break of its own (not a guard on the value), and the frame after that has no graph and, its guard on
    the string failing, runs in CPython: the graph count stops growing after the second call."""
    counter = CompileCounter()
    compiled = graphjit.compile(formatted_after_a_break, backend=counter)
    seen = []
    for _ in range(6):
        x = torch.randn(3)
        assert_same(compiled(x), formatted_after_a_break(x))
        seen.append(counter.frame_count)
    assert seen[1:] == [seen[1]] * 5 and seen[1] <= 3, seen


def test_fullgraph_specializes_a_changing_float_where_it_must_be_a_number():
    """With fullgraph=True there is no graph break to make: the float is guarded on its value, as before
    floats stayed symbolic, rather than the call failing."""
    counter = CompileCounter()
    compiled = graphjit.compile(lambda x, s: (x * s, round(s, 1)), backend=counter, fullgraph=True)
    for s in (0.25, 0.5, 0.75):
        assert_same(compiled(X, s), (X * s, round(s, 1)))
    assert counter.frame_count == 3


def branch_on_truth(x, s):
    return x * bool(s), not s


def test_infinities_and_zeros_are_constants():
    """A float traced at inf or at a zero is a constant, guarded as one (a zero with its sign): a symbol
    traced at inf lost its branch guard, and `s == 0.0` admits -0.0."""
    values = (0.5, 1.5, float("inf"), 0.0, -0.0, -float("inf"), 2.5, 0.0)
    counter = CompileCounter()
    compiled = graphjit.compile(branch_on_truth, backend=counter)
    for s in values:
        assert_same(compiled(X, s), branch_on_truth(X, s))
    fstring = graphjit.compile(lambda x, s: (x * s, f"{s}"), backend=CompileCounter(), fullgraph=True)
    for s in (0.5, 1.5, 0.0, -0.0):
        assert_same(fstring(X, s), (X * s, f"{s}"))


def power_of_a_minimum(x, s):
    return x * s, 2 ** min(s, 3), max(1, s)


def test_min_and_max_of_an_int_and_a_symbolic_float_return_the_winner_itself():
    """CPython returns the smaller object as it is (the int 3, so 2 ** 3 is an int); sym_min would give a
    float."""
    run(power_of_a_minimum, [(X, s) for s in (0.5, 1.5, 4.0, 7.5, 0.25)], graphs=None)
    compiled = graphjit.compile(power_of_a_minimum, backend=CompileCounter())
    for s in (0.5, 4.0, 7.5):
        assert type(compiled(X, s)[1]) is type(power_of_a_minimum(X, s)[1])


def test_fullgraph_raises_the_codes_own_exception_as_eager():
    compiled = graphjit.compile(lambda x, s: x * math.sqrt(s), backend=CompileCounter(), fullgraph=True)
    compiled(X, 2.0)
    with pytest.raises(ValueError, match="math domain error"):
        compiled(X, -1.0)


def branch_on_infinity(x, s):
    if s == math.inf:
        return x + 1
    return x - 1 + (s - s)


def test_an_infinity_reaching_a_symbolic_float_entry_misses():
    """The ShapeEnv folds `s == inf` and `s - s` as for a finite real: an entry with a symbolic float is
    guarded on it being finite, so inf traces again (as a constant)."""
    run(branch_on_infinity, [(X, s) for s in (1.5, 2.5, math.inf, -math.inf, 3.5, math.inf)], graphs=None)
