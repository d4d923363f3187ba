"""Graph breaks at data-dependent Python control flow: `if x.sum() > 0:`, `.item()`, `.tolist()`,
`.numpy()` values used by Python logic. The graph before the branch computes the condition; the branch is
decided in CPython; each side continues in its own resume function, compiled when first taken.

Inputs are chosen to take each side; after every step the count of graphs is asserted: prefix first, then
one more per side taken for the first time. Python values that cross a break (a float from .item()) are
specialized, so where they differ from call to call the resume function recompiles: those cases assert
results with graphs=None.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import math

import numpy as np
import pytest
import torch

from graphjit.testing import Step
from .harness import Cases, r
from .test_breaks_support import check_break, check_break_steps


def pos(*shape):
    return lambda: (torch.rand(*shape) + 0.1,)


def neg(*shape):
    return lambda: (-torch.rand(*shape) - 0.1,)


# ------------------------------------------------------------------------------ one branch, both sides

def sum_branch_returns(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def sum_branch_merge(x):
    y = x.sin()
    if x.sum() > 0:
        z = y + 1
    else:
        z = y - 1
    return z * 2                              # both resume functions run through the merge point


def any_branch(x):
    if (x > 0).any():
        return x.relu()
    return x.abs()


def all_branch(x):
    y = x.exp()
    if (x < 0).all():
        y = y * 10
    return y


def item_branch(x):
    y = x.cos()
    if x.sum().item() > 0:
        return y * 3
    return y / 3


def bool_call_branch(x):
    if bool(x.mean() > 0):
        return x + 100
    return x - 100


def ternary_branch(x):
    y = x * 2 if x.sum() > 0 else x * 3
    return y.neg()


def not_branch(x):
    if not (x.sum() > 0):
        return x * -1
    return x


def branch_with_python_locals(x):
    scale, names = 2.0, ["p", "n"]
    y = x * scale
    if y.sum() > 0:
        label = names[0]
    else:
        label = names[1]
    return y + scale, label


def branch_on_comparison_of_two_tensors(x):
    a, b = x[0], x[1:].mean()
    if a > b:
        return a - b
    return b - a


BOTH_SIDES = [sum_branch_returns, sum_branch_merge, any_branch, bool_call_branch, ternary_branch,
              branch_with_python_locals]


def _steps_both_sides(shape=(4,)):
    """positive, negative, positive, negative: graphs 2 (prefix, the positive side), 3, 3, 3."""
    return [Step(pos(*shape), graphs=2), Step(neg(*shape), graphs=3), Step(pos(*shape), graphs=3),
            Step(neg(*shape), graphs=3)]


@pytest.mark.parametrize("fn", BOTH_SIDES, ids=lambda f: f.__name__)
def test_branch_both_sides(fn):
    check_break_steps(fn, _steps_both_sides(), graphs=3)


@pytest.mark.parametrize("fn", [all_branch, not_branch], ids=lambda f: f.__name__)
def test_branch_one_side_without_ops(fn):
    """The side taken for positive inputs only returns a value: its resume function has no tensor op, so no
    graph is compiled for it."""
    check_break_steps(fn, [Step(pos(4), graphs=1), Step(neg(4), graphs=2), Step(pos(4), graphs=2),
                           Step(neg(4), graphs=2)])


def test_item_branch_both_sides():
    # The .item() value crosses the break and is specialized: each new value recompiles the resume.
    check_break_steps(item_branch, [Step(pos(4)), Step(neg(4)), Step(pos(4)), Step(neg(4))])


def test_item_branch_same_values_compile_once_per_side():
    one = lambda: (torch.ones(4),)      # noqa: E731
    minus = lambda: (-torch.ones(4),)   # noqa: E731
    check_break_steps(item_branch, [Step(one, graphs=2), Step(minus, graphs=3), Step(one, graphs=3),
                                    Step(minus, graphs=3)])


def test_branch_on_two_tensors_both_sides():
    up = lambda: (torch.tensor([5.0, 1.0, 2.0]),)      # noqa: E731
    down = lambda: (torch.tensor([-5.0, 1.0, 2.0]),)   # noqa: E731
    check_break_steps(branch_on_comparison_of_two_tensors,
                      [Step(up, graphs=2), Step(down, graphs=3), Step(up, graphs=3), Step(down, graphs=3)])


def test_branch_one_side_only_compiles_one_resume():
    check_break_steps(sum_branch_returns, [Step(pos(4), graphs=2)] * 4, graphs=2)


def test_branch_many_calls_random_inputs():
    """Random signs: results right on every call, and never more than prefix + two sides."""
    counter = check_break(sum_branch_merge, lambda: (r(5),), graphs=None, calls=10)
    assert counter.frame_count <= 3


def branch_on_tensor_argument(x, flag):
    if flag:                                   # a bool tensor argument: no op before the branch
        return x + 1
    return x - 1


def test_branch_on_tensor_argument():
    yes = lambda: (r(3), torch.tensor(True))    # noqa: E731
    no = lambda: (r(3), torch.tensor(False))    # noqa: E731
    check_break_steps(branch_on_tensor_argument, [Step(yes, graphs=1), Step(no, graphs=2), Step(yes, graphs=2),
                                                  Step(no, graphs=2)])


# ------------------------------------------------------------------------------ several branches

def nested_ifs(x):
    if x.sum() > 0:
        if x.mean() > 1:
            return x * 1
        return x * 2
    if x[0] > 0:
        return x * 3
    return x * 4


def test_nested_ifs_all_four_paths():
    # prefix [sum > 0]; true side [mean > 1] then [*1] or [*2]; false side [x[0] > 0] then [*3] or [*4]
    big = lambda: (torch.full((3,), 2.0),)               # noqa: E731  sum > 0, mean > 1
    small = lambda: (torch.full((3,), 0.5),)             # noqa: E731  sum > 0, mean <= 1
    first_pos = lambda: (torch.tensor([1.0, -2.0, -2.0]),)   # noqa: E731  sum <= 0, x[0] > 0
    all_neg = lambda: (torch.full((3,), -1.0),)          # noqa: E731  sum <= 0, x[0] <= 0
    check_break_steps(nested_ifs, [Step(big, graphs=3), Step(small, graphs=4), Step(first_pos, graphs=6),
                                   Step(all_neg, graphs=7), Step(big, graphs=7), Step(small, graphs=7),
                                   Step(first_pos, graphs=7), Step(all_neg, graphs=7)])


def elif_chain(x):
    s = x.sum()
    if s > 1:
        return x * 10
    elif s > -1:
        return x * 20
    else:
        return x * 30


def test_elif_chain_all_three_sides():
    # prefix [sum, > 1]; true side [*10]; false side [> -1] then [*20] or [*30]
    big = lambda: (torch.full((3,), 1.0),)     # noqa: E731
    mid = lambda: (torch.zeros(3),)            # noqa: E731
    low = lambda: (torch.full((3,), -1.0),)    # noqa: E731
    check_break_steps(elif_chain, [Step(big, graphs=2), Step(mid, graphs=4), Step(low, graphs=5),
                                   Step(big, graphs=5), Step(mid, graphs=5), Step(low, graphs=5)])


def two_ifs_in_sequence(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    z = y * 3
    if z.max() > 5:
        z = z - 5
    return z


def test_two_ifs_in_sequence():
    # Each side of the first if continues through the second if: its resume computes z and z.max() > 5.
    # high: prefix, the true side up to the second if, then `z - 5`: 3 graphs. low: the false side up to the
    # second if (+1); its false side only returns z: no ops, no graph.
    high = lambda: (torch.full((3,), 4.0),)     # noqa: E731  y.sum() > 0, z.max() > 5
    low = lambda: (torch.full((3,), -4.0),)     # noqa: E731  y.sum() <= 0, z.max() <= 5
    check_break_steps(two_ifs_in_sequence, [Step(high, graphs=3), Step(low, graphs=4), Step(high, graphs=4),
                                            Step(low, graphs=4)])


def test_two_ifs_mixed_paths_share_the_inner_resume_functions():
    """The second if's resume functions continue the original code at the same place whichever side of the
    first if led there: the mixed paths reuse them (no new graph) and still give eager's results."""
    high = lambda: (torch.full((3,), 4.0),)               # noqa: E731  true, true
    low = lambda: (torch.full((3,), -4.0),)               # noqa: E731  false, false
    true_false = lambda: (torch.full((3,), 0.1),)         # noqa: E731  y.sum() > 0, z.max() <= 5
    false_true = lambda: (torch.tensor([-10.0, -10.0, 5.0]),)   # noqa: E731  y.sum() <= 0, z.max() > 5
    check_break_steps(two_ifs_in_sequence, [Step(high, graphs=3), Step(low, graphs=4),
                                            Step(true_false, graphs=4), Step(false_true, graphs=4)])


def and_condition(x):
    if x.sum() > 0 and x.mean() < 1:          # short-circuit: a second break only when the first is true
        return x * 2
    return x * 3


def or_condition(x):
    if x.sum() > 0 or x.max() > 0.5:
        return x + 2
    return x + 3


@pytest.mark.parametrize("fn", [and_condition, or_condition], ids=lambda f: f.__name__)
def test_boolean_operators(fn):
    inputs = [lambda: (torch.full((3,), 0.5),), lambda: (torch.full((3,), 2.0),),
              lambda: (torch.full((3,), -1.0),), lambda: (torch.tensor([-3.0, 0.9, 0.1]),)]
    counter = check_break_steps(fn, [Step(m) for m in inputs * 2])
    assert counter.frame_count <= 6


def branch_with_side_effects(x, log):
    log.append("before")
    y = x + 1
    if y.sum() > 0:
        log.append("positive")
        y = y * 2
    else:
        log.append("negative")
    log.append("after")
    return y


def test_branch_with_side_effects_both_sides():
    check_break_steps(branch_with_side_effects,
                      [Step(lambda: (torch.ones(3), [])), Step(lambda: (-torch.ones(3) * 5, [])),
                       Step(lambda: (torch.ones(3), ["old"])), Step(lambda: (-torch.ones(3) * 5, ["old"]))])


# ------------------------------------------------------------------------------ values crossing a break

value_cases = Cases()


@value_cases.add(lambda: (torch.rand(4),), graphs=None)
def max_item_threshold(x):
    if x.max().item() > 0.5:
        return x * 2
    return x + 0.5


@value_cases.add(lambda: (r(4),), graphs=None)
def item_used_as_scale(x):
    s = x.abs().sum().item()
    return x * s, s


@value_cases.add(lambda: (r(4),), graphs=None)
def item_in_python_math(x):
    v = x.norm().item()
    steps = int(v * 10) % 3
    return x * steps, round(v, 3)


@value_cases.add(lambda: (r(5),), graphs=None)
def tolist_python_logic(x):
    values = x.tolist()
    positives = [v for v in values if v > 0]
    return x * len(positives), max(values)


@value_cases.add(lambda: (r(2, 3),), graphs=None)
def tolist_nested(x):
    rows = x.tolist()
    best = max(range(len(rows)), key=lambda i: sum(rows[i]))
    return x[best] * 2


@value_cases.add(lambda: (r(5),), graphs=None)
def numpy_values(x):
    arr = x.numpy()
    s = float(np.abs(arr).sum())
    return x + s, int((arr > 0).sum())


@value_cases.add(lambda: (r(5),), graphs=None)
def numpy_shares_memory_with_input(x):
    arr = x.numpy()
    x.mul_(2)                                 # arr sees the update: it is a view of x
    return torch.from_numpy(arr.copy()), x


@value_cases.add(lambda: (r(6),), graphs=None)
def argmax_int_indexes(x):
    k = int(x.argmax())
    return x[k] * 2, k


@value_cases.add(lambda: (r(4),), graphs=None)
def item_compared_with_python(x):
    y = x.sum()
    v = y.item()
    if v > 0:
        return y * 2, "pos"
    return y * 3, "neg"


@value_cases.add(lambda: (torch.randint(1, 4, (1,)),), graphs=None)
def item_drives_repeat(x):
    n = x.item()
    return torch.ones(2).repeat(n), n


@value_cases.add(lambda: (r(4), []), graphs=None)
def item_appended_to_list_argument(x, log):
    log.append(x.sum().item())
    return x * 2


@pytest.mark.parametrize("case", value_cases.params())
def test_values_crossing_a_break(case):
    check_break(case.fn, case.make_args, **case.options)


def test_same_item_value_does_not_recompile():
    """An .item() value that is the same on every call: the resume function is compiled once."""
    ones = lambda: (torch.ones(4),)   # noqa: E731
    check_break(item_used_as_scale, ones, graphs=2, calls=4)


def item_under_a_square_root(x):
    s = x.abs().sum().item()
    return x * math.sqrt(s), s


def item_as_digits(x):
    n = int(x.abs().sum().item() * 1e6)
    return x * len(str(n)), n


def test_recompile_limit_on_changing_item_values_still_correct():
    """A new int per call that the resume function needs as a number (str() specializes it) recompiles
    until the recompile limit, after which it runs eagerly (with a warning): results stay eager's
    throughout."""
    import graphjit
    with pytest.warns(RuntimeWarning, match="recompile limit"):
        check_break(item_as_digits, lambda: (r(4),), graphs=None, calls=graphjit.config.recompile_limit + 3)


def test_a_square_root_of_changing_item_values_stays_symbolic():
    """math.sqrt of the symbolic float guards only that it is not negative: no recompile per value."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counter = check_break(item_under_a_square_root, lambda: (r(4),), graphs=None, calls=8)
    assert counter.frame_count == 3, counter.frame_count


def test_changing_item_values_become_a_symbolic_float_of_the_resume_function():
    """The .item() value a break hands to the resume function changes every call: on the resume
    function's first recompile it becomes a symbolic float input, and later calls reuse that entry."""
    import warnings
    import graphjit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counter = check_break(item_used_as_scale, lambda: (r(4),), graphs=None,
                              calls=graphjit.config.recompile_limit + 3)
    assert counter.frame_count == 3, counter.frame_count
