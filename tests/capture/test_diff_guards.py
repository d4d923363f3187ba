"""Guards and recompiles, with explicit expectations: what must recompile (shapes, dtypes, ints that steer
control flow, grad mode, globals and module attributes that changed) and what must not (fresh tensors of the
same shapes), and the recompile limit past which a frame runs eagerly with a warning.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import warnings

import pytest
import torch
import torch.nn as nn

from graphjit.testing import check, check_steps, Step
from .harness import assert_refused, gj, r

from graphjit.testing import CompileCounter


def _mlp(x, y):
    return (x @ y.t()).relu().sum(-1)


def test_same_shapes_fresh_tensors_no_recompile():
    check(_mlp, lambda: (r(3, 4), r(5, 4)), calls=6, graphs=1)


def test_different_shape_recompiles():
    check_steps(_mlp, [
        Step(lambda: (r(3, 4), r(5, 4)), graphs=1),
        Step(lambda: (r(3, 4), r(5, 4)), graphs=1),
        Step(lambda: (r(2, 4), r(6, 4)), graphs=2),
    ])


def test_back_to_first_shape_hits_cache():
    check_steps(_mlp, [
        Step(lambda: (r(3, 4), r(5, 4)), graphs=1),
        Step(lambda: (r(7, 4), r(5, 4)), graphs=2),
        Step(lambda: (r(3, 4), r(5, 4)), graphs=2),
    ], compile_kwargs={"dynamic": False})


def test_static_shapes_recompile_per_shape():
    check_steps(_mlp, [Step(lambda n=n: (r(n, 4), r(5, 4)), graphs=i + 1) for i, n in enumerate((2, 3, 4))],
                compile_kwargs={"dynamic": False})


def test_different_rank_recompiles():
    def fn(x):
        return x.sum(-1) * x.dim()

    check_steps(fn, [Step(lambda: (r(3, 4),), graphs=1), Step(lambda: (r(3, 4, 5),), graphs=2)])


def test_different_dtype_recompiles():
    def fn(x):
        return (x * 2).sum(0)

    check_steps(fn, [
        Step(lambda: (r(3, 4),), graphs=1),
        Step(lambda: (r(3, 4).double(),), graphs=2),
        Step(lambda: (torch.randint(0, 5, (3, 4)),), graphs=3),
        Step(lambda: (r(3, 4),), graphs=3),
    ])


def test_requires_grad_change_recompiles():
    def fn(x):
        return x.sin() * 2

    check_steps(fn, [
        Step(lambda: (r(3),), graphs=1),
        Step(lambda: (r(3).requires_grad_(),), graphs=2),
        Step(lambda: (r(3),), graphs=2),
    ])


def _int_branch(x, n):
    if n > 2:
        return x * 2
    return x + 1


def test_int_steering_branch_recompiles():
    check_steps(_int_branch, [
        Step(lambda: (r(3), 1), graphs=1),
        Step(lambda: (r(3), 1), graphs=1),
        Step(lambda: (r(3), 5), graphs=2),
    ])


def _int_loop(x, n):
    for _ in range(n):
        x = x.cos()
    return x


def test_int_steering_loop_recompiles():
    check_steps(_int_loop, [Step(lambda: (r(3), 2), graphs=1), Step(lambda: (r(3), 3), graphs=2)])


def test_bool_and_none_arguments_guarded():
    def fn(x, flag, bias):
        y = x * 2 if flag else x * 3
        return y if bias is None else y + bias

    check_steps(fn, [
        Step(lambda: (r(3), True, None), graphs=1),
        Step(lambda: (r(3), False, None), graphs=2),
        Step(lambda: (r(3), False, r(3)), graphs=3),
        Step(lambda: (r(3), True, None), graphs=3),
    ])


def test_grad_mode_is_guarded():
    """The same compiled function under no_grad, then with grad enabled: the second must recompile and give
    outputs that require grad, as eager does."""
    def fn(x, w):
        return (x @ w).tanh()

    args = lambda: (r(2, 3), r(3, 3).requires_grad_())  # noqa: E731
    check_steps(fn, [
        Step(args, context=torch.no_grad, graphs=1),
        Step(args, context=torch.no_grad, graphs=1),
        Step(args, graphs=2),
        Step(args, context=torch.no_grad, graphs=2),
    ])


SCALE = 2


def _uses_global(x):
    return x * SCALE


def _set_scale(value):
    def set_():
        global SCALE
        SCALE = value
    return set_


def test_global_constant_change_followed():
    try:
        check_steps(_uses_global, [
            Step(lambda: (r(3),), before=_set_scale(2), graphs=1),
            Step(lambda: (r(3),), before=_set_scale(3), graphs=2),
            Step(lambda: (r(3),), graphs=2),
        ])
    finally:
        _set_scale(2)()


GLOBAL_TABLE = {"mode": "a"}


def _uses_global_dict(x):
    return x + 1 if GLOBAL_TABLE["mode"] == "a" else x - 1


def test_global_dict_entry_change_followed():
    def set_mode(m):
        return lambda: GLOBAL_TABLE.__setitem__("mode", m)
    try:
        check_steps(_uses_global_dict, [
            Step(lambda: (r(3),), before=set_mode("a"), graphs=1),
            Step(lambda: (r(3),), before=set_mode("b"), graphs=2),
        ])
    finally:
        GLOBAL_TABLE["mode"] = "a"


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2
        self.use_act = True

    def forward(self, x):
        y = self.lin(x) * self.scale
        return y.relu() if self.use_act else y


def test_module_attribute_change_followed():
    torch.manual_seed(0)
    model = Scaled()
    counter = CompileCounter()
    gj.reset()
    compiled = gj.compile(model, backend=counter)
    x = r(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    model.scale = 3
    torch.testing.assert_close(compiled(x), (model.lin(x) * 3).relu())
    model.use_act = False
    torch.testing.assert_close(compiled(x), model.lin(x) * 3)
    assert counter.frame_count == 3, counter


def test_module_train_eval_switch_followed():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0), nn.BatchNorm1d(4))
    counter = CompileCounter()
    gj.reset()
    compiled = gj.compile(model, backend=counter)
    reference = __import__("copy").deepcopy(model)
    x = r(8, 4)
    for mode in ("train", "eval", "train"):
        getattr(model, mode)()
        getattr(reference, mode)()
        torch.testing.assert_close(compiled(x), reference(x))
        assert compiled.training == reference.training, mode
    torch.testing.assert_close(model.state_dict()["2.running_mean"], reference.state_dict()["2.running_mean"])
    assert counter.frame_count == 2, counter


def test_module_parameter_replaced_followed():
    model = nn.Linear(4, 4)
    gj.reset()
    compiled = gj.compile(model, backend=CompileCounter())
    x = r(2, 4)
    compiled(x)
    with torch.no_grad():
        model.weight.mul_(2)        # in place: same tensor, new values
    torch.testing.assert_close(compiled(x), model(x))
    model.weight = nn.Parameter(torch.ones(4, 4))  # a new Parameter object
    torch.testing.assert_close(compiled(x), x @ torch.ones(4, 4) + model.bias)


def test_closure_cell_change_followed():
    def make(k):
        def fn(x):
            return x * k
        return fn

    gj.reset()
    counter = CompileCounter()
    f2, f5 = gj.compile(make(2), backend=counter), gj.compile(make(5), backend=counter)
    x = r(3)
    torch.testing.assert_close(f2(x), x * 2)
    torch.testing.assert_close(f5(x), x * 5)
    torch.testing.assert_close(f2(x), x * 2)
    assert counter.frame_count == 2, counter


def test_recompile_limit_falls_back_to_eager_with_warning():
    """After 8 cache entries for one code object, further new shapes run eagerly, with a warning."""
    def fn(x):
        return x.sin() + x.shape[0]

    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(fn, backend=counter, dynamic=False)
    for n in range(1, 9):
        x = r(n)
        torch.testing.assert_close(compiled(x), fn(x))
    assert counter.frame_count == 8, counter
    x = r(20)
    with pytest.warns(Warning):
        out = compiled(x)
    torch.testing.assert_close(out, fn(x))
    for n in (21, 22, 3):  # still correct, no more compiles (and the cached shapes still hit)
        x = r(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(compiled(x), fn(x))
    assert counter.frame_count == 8, counter


def test_reset_clears_cache():
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(_mlp, backend=counter)
    args = (r(3, 4), r(5, 4))
    compiled(*args)
    compiled(*args)
    assert counter.frame_count == 1, counter
    gj.reset()
    compiled(*args)
    assert counter.frame_count == 2, counter


def test_two_compiled_functions_independent():
    gj.reset()
    c1, c2 = CompileCounter(), CompileCounter()
    f = gj.compile(lambda x: x + 1, backend=c1)
    g = gj.compile(lambda x: x * 2, backend=c2)
    x = r(3)
    torch.testing.assert_close(f(x), x + 1)
    torch.testing.assert_close(g(x), x * 2)
    torch.testing.assert_close(f(x), x + 1)
    assert (c1.frame_count, c2.frame_count) == (1, 1), (c1, c2)


def test_decorator_forms():
    gj.reset()
    counter = CompileCounter()

    @gj.compile
    def plain(x):
        return x * 3

    @gj.compile(backend=counter, fullgraph=True)
    def with_args(x):
        return x - 3

    @gj.compile()
    def empty_parens(x):
        return x + 3

    x = r(3)
    torch.testing.assert_close(plain(x), x * 3)
    torch.testing.assert_close(with_args(x), x - 3)
    torch.testing.assert_close(empty_parens(x), x + 3)
    assert counter.frame_count == 1, counter
    assert plain.__name__ == "plain" or hasattr(plain, "__wrapped__")


def test_bound_method_of_plain_object():
    class Holder:
        def __init__(self):
            self.w = torch.randn(3)

        def apply(self, x):
            return x * self.w

    h = Holder()
    check(h.apply, lambda: (r(3),))


def test_the_sign_of_a_zero_float_argument_is_guarded():
    """-0.0 == 0.0, so a value guard alone reused 0.0's graph for -0.0: 1 / -0.0 is -inf."""
    import numpy as np

    def fn(x, c):
        return x * torch.copysign(torch.ones(1), torch.tensor(float(c)))

    import graphjit
    for zeros in ((0.0, -0.0), (np.float64(0.0), np.float64(-0.0)), (-0.0, 0.0)):
        compiled = graphjit.compile(fn, backend="eager")
        for z in zeros:
            assert torch.equal(compiled(torch.ones(1), z), fn(torch.ones(1), z)), zeros


def test_the_sign_of_a_zero_in_a_complex_argument_is_guarded():
    import math

    import graphjit

    def fn(x, z):
        return x * 0 + math.copysign(1.0, z.real)

    compiled = graphjit.compile(fn, backend="eager")
    for z in (0j, complex(-0.0, 0), complex(0, -0.0)):
        assert torch.equal(compiled(torch.ones(1), z), fn(torch.ones(1), z))


CASE_W = torch.randn(3)
CASE_w = torch.randn(3)


def test_globals_whose_names_differ_in_case_are_two_graph_inputs():
    """Both become argument `g_case_w` of the graph's forward: a duplicate argument (SyntaxError) made the
    whole frame run eagerly, without a warning."""
    import graphjit

    def fn(x):
        return x * CASE_w + CASE_W

    counter = CompileCounter("eager")
    compiled = graphjit.compile(fn, backend=counter)
    x = torch.randn(3)
    assert torch.equal(compiled(x), fn(x)) and counter.frame_count == 1


def _scaled_by_attribute(x):
    return x * getattr(x, "scale", 1), hasattr(x, "flag")


def test_attributes_set_on_a_tensor_input_are_read_and_guarded():
    """`t.scale = 3` on an input: read through the input (it was missing on the fake tensor); a missing one
    stays missing (guarded), so setting or deleting it between calls recompiles."""
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(_scaled_by_attribute, backend=counter, fullgraph=True)
    t = torch.ones(2)
    for change in (None, lambda: setattr(t, "scale", 3), lambda: setattr(t, "flag", True),
                   lambda: setattr(t, "scale", 4), lambda: delattr(t, "scale")):
        if change is not None:
            change()
        expected, actual = _scaled_by_attribute(t), compiled(t)
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1]
    assert counter.frame_count == 5


def _tensor_dunders(x):
    return x + 1, x.__dict__, x.__module__


def test_a_tensor_inputs_dunder_attributes_are_not_the_fake_tensors():
    """x.__dict__ (and other dunders of the tensor's class) would read the fake tensor's: refused, and the
    frame runs eagerly with the real one's."""
    assert_refused(_tensor_dunders, torch.ones(2))
    t = torch.ones(2)
    t.scale = 3
    out = gj.compile(_tensor_dunders, backend="eager")(t)
    assert out[1] == {"scale": 3} and out[2] == "torch"
    gj.reset()


def _reads_process_flags(x):
    return (x * 2, torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.enabled,
            torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)


def test_process_flags_read_in_the_frame_are_guarded():
    """torch's process-wide flags (deterministic algorithms, cudnn.enabled, the float32 matmul precision)
    read in the frame are answered at each call as eager does: guarded, a change recompiles."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.enabled,
             torch.get_float32_matmul_precision())
    try:
        gj.reset()
        compiled = gj.compile(_reads_process_flags, backend="eager", fullgraph=True)
        x = torch.ones(2)
        for change in (None, lambda: torch.use_deterministic_algorithms(True),
                       lambda: setattr(torch.backends.cudnn, "enabled", not saved[1]),
                       lambda: torch.set_float32_matmul_precision("high")):
            if change is not None:
                change()
            expected, actual = _reads_process_flags(x), compiled(x)
            assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.backends.cudnn.enabled = saved[1]
        torch.set_float32_matmul_precision(saved[2])
        gj.reset()
