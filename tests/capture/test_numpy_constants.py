"""NumPy on constants (variables/numpyvars.py, "NumPy arrays made while tracing"): NumPy called on numbers,
lists, tuples, dtypes and arrays made that way runs while tracing, on real arrays the trace owns. Views,
writes through them, `is`, iteration and in-place operators behave as in eager; `torch.tensor(a)` is a
constant tensor in the graph; an array that leaves the frame is a new copy on every call. numpy.random,
NumPy's settings and files, calls that warn or meet a floating-point error, and such an array meeting a
tensor are graph breaks, with eager's results, warnings and random state.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import warnings

import numpy as np
import pytest
import torch

import graphjit
from graphjit.testing import CompileCounter, check, check_raises


def r3():
    return (torch.randn(3),)


@graphjit.disable
def opaque(v):
    return v


# ------------------------------------------------------------------------------------ one graph

def attention_plan(x):
    """BigBird's block-sparse plan (transformers' modeling_big_bird.py): block counts from a list of lengths,
    an all-zero adjacency per head, sliced, stacked and read as a long tensor."""
    plan_from_length, plan_num_rand_blocks = [7, 12], [1, 0]
    plan_block_length = np.array(plan_from_length) // 1
    max_plan_idx = plan_from_length.index(7)
    rand_attn = [np.zeros((7, np.sum(plan_num_rand_blocks[: max_plan_idx + 1])), dtype=np.int32)
                 for _ in range(2)]
    for nh in range(2):
        rand_attn[nh] = rand_attn[nh][1: 7 - 1, :]
    rand_attn = np.stack(rand_attn, axis=0)
    rand_attn = torch.tensor(rand_attn, device=x.device, dtype=torch.long)
    return x + rand_attn.sum() + int(plan_block_length[1]), rand_attn.unsqueeze(0).expand(2, *rand_attn.shape)


def views_and_writes(x):
    a = np.zeros((3, 4))
    row = a[1]
    row[:] = 5                      # through a view
    a += 1                          # in place: `row` sees it
    np.add(a, 1, out=a)
    a[0, ::2] = [7, 8]
    a.T[3] = -1                     # through a transposed view
    return x + torch.tensor(a).sum(), torch.tensor(row)


def live_iteration(x):
    a = np.arange(4)
    for v in a:                     # each item read when the loop gets to it
        a[-1] += v
    return x + int(a[-1])


def identities(x):
    a = np.arange(3)
    b = np.asarray(a)
    c = a[1:]
    return x + (b is a) + 2 * (c.base is a) + 4 * (c is a) + 8 * np.shares_memory(a, c)


def queries(x):
    a = np.array([[1, 2], [3, 0]])
    r = 0
    if a.any():
        r += 1
    if 3 in a:
        r += 10
    if not (a > 5).any():
        r += 100
    r += len(a) + a.shape[1] + a.ndim + a.size + a[0, 1] + a.sum() + a.tolist()[1][0] + a.max().item()
    r += sum(a[0]) + max(a[1]) + sorted(a[:, 0])[0]
    return x + r, a.dtype, a.tolist(), isinstance(a, np.ndarray), a.dtype == np.int64


def functions_and_methods(x):
    a = np.linspace(0, 1, 5).reshape(5, 1) @ np.ones((1, 2))
    idx = np.nonzero(a[:, 0] > 0.3)[0]
    u, counts = np.unique(np.array([3, 1, 3, 2]), return_counts=True)
    s = np.concatenate([a.ravel(), np.sqrt(np.arange(4.0))]).astype(np.float32)
    s.sort()
    inv = np.linalg.inv(np.array([[2.0, 0.0], [0.0, 4.0]]))
    return (x + torch.tensor(s[:3]), torch.tensor(idx), torch.tensor(u * counts), torch.tensor(inv),
            np.float32(2) * a.mean(), -np.arange(3).max())


def ufunc_methods(x):
    a = np.arange(6).reshape(2, 3).copy()     # returned: an array that owns its memory
    np.add.at(a, (0, [0, 0]), 10)       # in place, the repeated index counted twice
    return (x + torch.tensor(np.add.reduce(a, axis=0)), np.maximum.accumulate(np.array([1, 3, 2])),
            np.multiply.outer(np.arange(2), np.arange(3)), np.add.identity, np.add.nin, a)


def dtypes_to_tensors(x):
    return (torch.tensor(np.array([1.5, float("nan"), float("inf"), -0.0], dtype=np.float32)),
            torch.tensor(np.array([1, 2], dtype=np.float16)), torch.tensor(np.array([True, False])),
            torch.tensor(np.array([1 + 2j])), torch.tensor(np.array([250], dtype=np.uint8)),
            torch.tensor(np.zeros((0, 3))), torch.tensor(np.array(3.5)),
            torch.tensor(np.ones((2, 0, 3)), dtype=torch.float32),
            torch.tensor(np.arange(3.0), requires_grad=True), torch.tensor(np.arange(3, dtype=np.int32), dtype=None),
            torch.tensor(np.float64(2.0)), torch.tensor(np.int32(3), dtype=torch.float32), torch.tensor(np.bool_(True)),
            x)


def returned_arrays(x):
    a = np.arange(3) * 2
    a[0] = 9
    return a, a, [np.ones(2)], x + 1


def written_through_a_view_then_returned(x):
    a = np.arange(6)
    b = a[2:]
    b[0] = 9                        # a sees it; b is not returned, so a alone leaves (a copy)
    return a, x + 1


def closure_over_an_array(x):
    a = np.arange(3)

    def total():
        return a.sum()
    a[0] = 10
    return x + total()


@pytest.mark.parametrize("fn", [attention_plan, views_and_writes, live_iteration, identities, queries,
                                functions_and_methods, ufunc_methods, dtypes_to_tensors, returned_arrays,
                                written_through_a_view_then_returned, closure_over_an_array])
def test_numpy_on_constants_is_one_graph(fn):
    check(fn, r3, graphs=1)


def constant_tensors(x):
    return (x + torch.tensor(np.array([1.5, float("nan"), float("inf")], dtype=np.float32)),
            torch.tensor(np.zeros((0, 3))), torch.tensor(np.array(3.5)), torch.tensor(np.array([True, False])),
            torch.tensor(np.array([1, 2], dtype=np.float16)), torch.tensor(np.array([250], dtype=np.uint8)))


def converted_constant_tensors(x):
    """torch.tensor(a, dtype=) converts the array's values in one rounding, as eager: an int64 next to a
    power of two read as float32 (through a double it would round twice), uint64 and int64 to float32 and
    complex64, floats to int32, complex to float32."""
    big = np.array([2**62 + 2**38 + 1])
    return (x + torch.tensor(big, dtype=torch.float32),
            torch.tensor(np.array([2**64 - 2**39 - 1], dtype=np.uint64), dtype=torch.float32),
            torch.tensor(big, dtype=torch.complex64), torch.tensor(np.array([1.5, -2.7]), dtype=torch.int32),
            torch.tensor(np.array([2**62 + 2**38 + 1, 3]), dtype=torch.bfloat16),
            # a NumPy scalar with dtype= is read as a Python number: through a double, as eager does
            torch.tensor(np.int64(2**62 + 2**38 + 1), dtype=torch.float32))


def test_constant_tensors_with_a_dtype_round_once():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(converted_constant_tensors, r3, graphs=1)
        check(converted_constant_tensors, r3, graphs=1, backend="graphjit")


def test_through_the_compiler():
    for fn in (attention_plan, views_and_writes, constant_tensors, lifted):
        check(fn, r3, graphs=1, backend="graphjit")


def test_tensor_of_an_array_over_a_tensor_with_a_dtype_and_device_is_a_copy():
    def fn(x, a):
        t = torch.tensor(x.numpy() * 2, dtype=torch.float64, device=x.device)
        x.add_(1)                       # t is a copy: it keeps the old values
        return t, torch.tensor(a, dtype=torch.long), torch.tensor(a, device="cpu")

    check(fn, lambda: (torch.randn(3), np.arange(3, dtype=np.int32)), graphs=1)
    a = np.arange(3, dtype=np.int32)
    _, u, v = graphjit.compile(fn, backend="eager")(torch.zeros(3), a)
    a[0] = 100
    assert u.dtype == torch.long and v.dtype == torch.int32 and u[0] == v[0] == 0


def lifted(x):
    a = x.numpy()
    c = np.arange(3.0)
    r = a + c                       # c read here: the write below doesn't reach r
    c[0] = 100
    return (torch.from_numpy(r * np.array([1.0, 2.0, 3.0])), np.concatenate([a, np.zeros(2)]),
            a[np.array([2, 0])], np.maximum(c[:3], a), c)


def test_arrays_made_while_tracing_meet_arrays_over_tensors_as_graph_constants():
    check(lifted, r3, graphs=1, atol=1e-6, rtol=1e-6)


def test_a_view_of_a_lifted_array_breaks():
    def row(x):
        c = np.arange(6.0).reshape(2, 3)
        r = c[x.numpy()[:2].argmax()]   # a view of c in NumPy: c's write below reaches it
        c[:] = 0
        return r

    def written_from_a_tensor(x):
        c = np.zeros(3, dtype=np.float32)
        c[:] = x.numpy()
        return c

    for fn in (row, written_from_a_tensor):
        check(fn, r3, graphs=None)
    reasons = [e.reason for e in _explain(row, torch.randn(3)).break_reasons]
    assert any("a view of a NumPy array made while tracing" in r for r in reasons), reasons


def test_a_large_constant_array_is_not_written_into_the_graph():
    def fn(x):
        return x + torch.tensor(np.full((3, 4), 2.0))

    with graphjit.config.patch(numpy_constant_limit=8):
        counter = check(fn, lambda: (torch.randn(3, 4),), graphs=None)
        reasons = [e.reason for e in _explain(fn, torch.zeros(3, 4)).break_reasons]
    assert counter.frame_count == 1 and reasons and "numpy_constant_limit" in reasons[0], reasons
    check(fn, lambda: (torch.randn(3, 4),), graphs=1)


def test_a_returned_array_is_a_new_one_each_call():
    compiled = graphjit.compile(returned_arrays, backend="eager")
    first = compiled(torch.zeros(3))
    assert first[0] is first[1] and first[0].tolist() == [9, 2, 4] and first[0].flags.owndata
    first[0][1] = -5
    second = compiled(torch.zeros(3))
    assert second[0] is not first[0] and second[0].tolist() == [9, 2, 4] and second[2][0] is not first[2][0]
    a, b, _ = graphjit.compile(view_and_base_returned, backend="eager")(torch.zeros(3))
    assert b.base is a                  # a view leaves the frame only as eager's own


def test_stored_arrays_are_new_each_call_and_keep_later_writes():
    class Planner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.plan = [1, 2]

        def forward(self, x):
            a = np.array(self.plan)
            self.cache = a
            a[0] = 5                    # after the store: the stored array sees it
            return x + torch.tensor(a)

    eager, model = Planner(), Planner()
    counter = CompileCounter()
    compiled = graphjit.compile(model, backend=counter)
    assert torch.equal(compiled(torch.zeros(2)), eager(torch.zeros(2)))
    first = model.cache
    assert type(first) is np.ndarray and first.tolist() == eager.cache.tolist() == [5, 2]
    compiled(torch.zeros(2))
    assert model.cache is not first and model.cache.tolist() == [5, 2]
    model.plan.append(3)                # the list's contents are guarded: a new trace
    eager.plan.append(3)
    assert torch.equal(compiled(torch.zeros(3)), eager(torch.zeros(3)))
    assert model.cache.tolist() == eager.cache.tolist() == [5, 2, 3]
    assert counter.frame_count == 2


PLAN = [2, 3]


def from_a_global(x):
    return x + torch.tensor(np.array(PLAN) * 2).sum()


def test_constants_from_outside_are_guarded():
    counter = CompileCounter()
    compiled = graphjit.compile(from_a_global, backend=counter)
    assert torch.equal(compiled(torch.zeros(1)), from_a_global(torch.zeros(1)))
    PLAN[0] = 10
    try:
        assert torch.equal(compiled(torch.zeros(1)), from_a_global(torch.zeros(1)))
    finally:
        PLAN[0] = 2
    assert counter.frame_count == 2


def test_symbolic_sizes_break_instead_of_recompiling_per_size():
    def zeros_like_x(x):
        return x + torch.tensor(np.zeros(x.shape[0]))

    def arange_n(x, n):
        return x + torch.tensor(np.arange(n)).sum()

    counter = CompileCounter()
    compiled = graphjit.compile(zeros_like_x, backend=counter)
    for n in range(2, 8):
        assert torch.equal(compiled(torch.ones(n)), zeros_like_x(torch.ones(n)))
    assert counter.frame_count == 4     # static first; then symbolic, broken at np.zeros, and its resume
    counter = CompileCounter()
    compiled = graphjit.compile(arange_n, backend=counter)
    for n in range(2, 8):
        assert torch.equal(compiled(torch.zeros(1), n), arange_n(torch.zeros(1), n))
    assert counter.frame_count == 3


# ------------------------------------------------------------------------------------ graph breaks

def _explain(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphjit.explain(fn)(*args)


def random_numbers(x):
    np.random.seed(0)
    p = np.random.permutation(np.arange(3))
    return x + torch.tensor(p), np.random.rand(2)


def unseeded_random_numbers(x):
    return x + torch.tensor(np.random.permutation(np.arange(3))), np.random.randint(0, 9, size=2)


def test_numpy_random_runs_in_cpython_with_eager_state():
    for fn in (random_numbers, unseeded_random_numbers):
        compiled = graphjit.compile(fn, backend="eager")
        for seed in range(3):
            np.random.seed(seed)
            got = compiled(torch.zeros(3))
            after_compiled = np.random.get_state()[1].copy()
            np.random.seed(seed)
            expected = fn(torch.zeros(3))
            assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
            assert np.array_equal(np.random.get_state()[1], after_compiled)
        reasons = [e.reason for e in _explain(fn, torch.zeros(3)).break_reasons]
        assert any("global random state" in r for r in reasons), reasons


def test_a_generator_argument_draws_as_in_eager():
    def draw(x, rng):
        return x + torch.tensor(rng.permutation(np.arange(3)))

    compiled = graphjit.compile(draw, backend="eager")
    mine, theirs = np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(3):
        assert torch.equal(compiled(torch.zeros(3), mine), draw(torch.zeros(3), theirs))


def divide_by_zero(x):
    return x + torch.tensor(np.array([1.0, 2.0]) / 0)


def test_a_call_that_warns_runs_in_cpython_and_warns_every_call():
    compiled = graphjit.compile(divide_by_zero, backend="eager")
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="divide by zero"):
            got = compiled(torch.zeros(2))
        assert torch.equal(got, torch.full((2,), float("inf"), dtype=torch.float64))
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError):
            compiled(torch.zeros(2))
    reasons = [e.reason for e in _explain(divide_by_zero, torch.zeros(2)).break_reasons]
    assert any("FloatingPointError" in r for r in reasons), reasons


def test_scalar_arithmetic_that_warns_runs_in_cpython_and_warns_every_call():
    def overflow(x):
        return x + float(np.int64(2 ** 62) * 4), -np.int64(-2 ** 63)

    compiled = graphjit.compile(overflow, backend="eager")
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(torch.zeros(1))
        assert sorted(str(w.message) for w in caught) == ["overflow encountered in scalar multiply",
                                                            "overflow encountered in scalar negative"]
        assert got[1] == np.int64(-2 ** 63)


def scalars_and_dtypes(x):
    return (x * (np.float32(2) * 3), np.int64(2) * [1, 2], np.float64(1.5) > 1, np.arange(2).dtype == np.int64,
            np.dtype("int64") == np.int64, np.zeros(2, dtype=np.dtype("float32")), np.dtype("float16").itemsize)


def test_scalars_and_dtypes_on_constants_are_constants():
    check(scalars_and_dtypes, r3, graphs=1)


def test_an_error_numpy_raises_is_raised():
    def mismatched(x):
        return x + torch.tensor(np.array([1, 2]) + np.array([1, 2, 3]))

    check_raises(mismatched, r3)


def meets_a_tensor(x):
    return x + np.ones(3)


def shared_with_torch(x):
    a = np.ones(3)
    t = torch.from_numpy(a)
    a[0] = 5                       # t sees it in eager
    return x + t


def list_extended(x):
    items = [1]
    items += np.arange(2)
    return x + len(items), items


def live_at_a_break(x):
    a = np.arange(3)
    y = opaque(x + 1)
    a[0] = 7
    return y + torch.tensor(a)


def view_live_at_a_break(x):
    a = np.arange(6)
    b = a[2:]
    y = opaque(x + 1)
    b[0] = 9                       # a sees it: a copy of each would not
    return y + torch.tensor(a).sum()


def ufunc_method_on_an_array_over_a_tensor(x):
    return np.add.reduce(x.numpy())


def view_and_base_returned(x):
    a = np.arange(6)
    b = a[2:]
    return a, b, x + 1


def passed_to_a_break(x):
    a = np.zeros(3)
    opaque_fill(a)
    return x + torch.tensor(a)


@graphjit.disable
def opaque_fill(a):
    a[:] = 4


@pytest.mark.parametrize("fn", [meets_a_tensor, shared_with_torch, list_extended, live_at_a_break,
                                view_live_at_a_break, view_and_base_returned, passed_to_a_break,
                                ufunc_method_on_an_array_over_a_tensor])
def test_what_is_not_run_while_tracing_has_eager_results(fn):
    check(fn, r3, graphs=None)


def test_a_view_that_leaves_the_frame_breaks_where_it_is_made():
    def fn(x):
        y = x * 2
        a = np.arange(6).reshape(2, 3)      # a view of the arange
        return a, y + 1

    check(fn, r3, graphs=2)
    explained = _explain(fn, torch.zeros(3))
    assert explained.graph_count == 2 and explained.graph_break_count == 1
    assert "a view of another array" in explained.break_reasons[0].reason
    assert explained.break_reasons[0].lineno == fn.__code__.co_firstlineno + 2
    a, _ = graphjit.compile(fn, backend="eager")(torch.zeros(3))
    assert a.base is not None and a.base.shape == (6,)


def test_breaks_say_why():
    cases = {meets_a_tensor: "meets only constants", shared_with_torch: "would share its memory",
             list_extended: "of a list and a NumPy array"}
    for fn, words in cases.items():
        reasons = [e.reason for e in _explain(fn, torch.zeros(3)).break_reasons]
        assert any(words in r for r in reasons), (fn.__name__, reasons)


def test_settings_files_and_python_ufuncs_are_not_run_while_tracing(tmp_path):
    path = str(tmp_path / "a.npy")

    def settings(x):
        old = np.seterr(all="ignore")
        np.seterr(**old)
        return x + 1

    def files(x):
        np.save(path, np.arange(3))
        return x + torch.tensor(np.load(path))

    def python_ufunc(x):
        plus_one = np.frompyfunc(lambda v: v + 1, 1, 1)
        return x + float(plus_one(np.arange(3)).sum())

    def strings(x):
        return x + len(np.array(["a", "bc"]))

    for fn in (settings, files, python_ufunc, strings):
        compiled = graphjit.compile(fn, backend="eager")
        assert torch.equal(compiled(torch.zeros(3)), fn(torch.zeros(3)))
        assert _explain(fn, torch.zeros(3)).graph_break_count >= 1, fn.__name__
