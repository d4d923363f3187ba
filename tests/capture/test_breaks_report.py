"""What users see of graph breaks: exceptions raised around breaks reach the caller unchanged;
fullgraph=True raises graphjit.Unsupported at the first break with its reason, file:line and a hint;
explain() counts graphs and breaks and locates each break (reason, filename, lineno, source line, hint).

Break lines are found through marker comments (`# BREAK: name`) so the expectations follow the code.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import io

import pytest
import torch
import torch.nn as nn

import graphjit
from graphjit.testing import check_raises
from .harness import gj, r
from .test_breaks_support import check_break, line_of

from graphjit.testing import CompileCounter


SINK = io.StringIO()


@graphjit.disable
def disabled_noop(v):
    return v


# ------------------------------------------------------------------------------ exceptions

def value_error_after_break(x):
    y = x * 2
    print("before raising", file=SINK)
    if y.shape[0] == 3:
        raise ValueError(f"bad shape {tuple(y.shape)}")
    return y


def value_error_in_branch_resume(x):
    if x.sum() > 0:
        raise ValueError("positive sum")
    return x


@graphjit.disable
def boom(v):
    raise KeyError(f"no key for {tuple(v.shape)}")


def error_in_disabled_call(x):
    y = x + 1
    return boom(y) * 2


class FailingSink:
    def write(self, text):
        raise OSError("disk full")

    def flush(self):
        pass


def error_in_print_write(x):
    y = x.sin()
    print("to a full disk", file=FailingSink())
    return y


def _helper_raises(v):
    w = v * 3
    print("helper before raising", file=SINK)
    raise RuntimeError(f"helper failed on {w.dim()}-d input")


def error_in_intercepted_helper(x):
    a = x.cos()
    return _helper_raises(a) + 1


def index_error_after_two_breaks(x):
    y = x + 1
    print("one", file=SINK)
    z = y * 2
    print("two", file=SINK)
    return [y, z][5]


def assertion_after_break(x):
    y = x.exp()
    disabled_noop(y)
    assert y.dim() == 2, f"expected 2-d, got {y.dim()}-d"
    return y


ERRORS = [value_error_after_break, error_in_disabled_call, error_in_print_write, error_in_intercepted_helper,
          index_error_after_two_breaks, assertion_after_break]


@pytest.mark.parametrize("fn", ERRORS, ids=lambda f: f.__name__)
def test_exception_same_type_and_message(fn):
    check_raises(fn, lambda: (r(3),), calls=3)


def test_exception_in_branch_resume_and_normal_return_on_other_side():
    check_raises(value_error_in_branch_resume, lambda: (torch.ones(3),), calls=2)
    compiled = gj.compile(value_error_in_branch_resume, backend=CompileCounter())
    x = -torch.ones(3)
    torch.testing.assert_close(compiled(x), x)


@graphjit.disable
def fail_if_logged(log):
    if log:
        raise ValueError(f"log has {len(log)} entries")


def side_effects_before_failing_call(x, log):
    log.append("first")
    y = x * 2
    log.append(y.shape[0])
    fail_if_logged(log)                    # sees both appends, raises
    log.append("never")
    return y


def test_side_effects_before_an_exception_are_applied():
    """The effects recorded before the failing call are replayed before it runs: the call sees them and
    they stay applied after the exception, as in eager."""
    gj.reset()
    compiled = gj.compile(side_effects_before_failing_call, backend=CompileCounter())
    for _ in range(2):
        eager_log, compiled_log = [], []
        with pytest.raises(ValueError) as eager_error:
            side_effects_before_failing_call(torch.ones(3), eager_log)
        with pytest.raises(ValueError) as compiled_error:
            compiled(torch.ones(3), compiled_log)
        assert str(compiled_error.value) == str(eager_error.value)
        assert compiled_log == eager_log == ["first", 3]


@graphjit.disable
def maybe_fails(v, fail):
    if fail:
        raise ValueError("requested failure")
    return v + 1


def try_except_around_break(x, fail):
    y = x * 2
    try:
        z = maybe_fails(y, fail)
    except ValueError as e:
        return y * 0, str(e)
    return z, "ok"


def try_finally_around_break(x, log):
    y = x.sin()
    try:
        print("in try", file=SINK)
        y = y + 1
    finally:
        log.append("finally")
    return y


def test_try_except_around_a_break_catches():
    """The exception of the call made at the break must reach the frame's own except handler."""
    for fail in (False, True, False, True):
        check_break(try_except_around_break, lambda: (r(3), fail), graphs=None, calls=1)


def test_try_finally_around_a_break():
    check_break(try_finally_around_break, lambda: (r(3), []), graphs=None)


class ExitLog:
    def __init__(self, log, swallow=False):
        self.log, self.swallow = log, swallow

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", exc[0].__name__ if exc[0] else None))
        return self.swallow


def with_block_around_break(x, log, fail, swallow):
    y = x + 1
    with ExitLog(log, swallow):
        y = maybe_fails(y, fail)
        y = y * 3
    return y * 2


def test_user_context_manager_around_break():
    """No exception. A break inside a user context manager's with-block is refused (its __exit__ must see an
    exception the call might raise): the frame falls back, graphs=None."""
    check_break(with_block_around_break, lambda: (r(3), [], False, False), graphs=None)


def _compare_raising(fn, *args):
    """Eager and compiled on copies of args: same exception (or result), same mutated arguments."""
    from graphjit.testing import assert_same, clone_tree
    gj.reset()
    compiled = gj.compile(fn, backend=CompileCounter())
    outcomes = []
    for f in (fn, compiled):
        copied = clone_tree(args)
        try:
            result = ("returned", f(*copied))
        except Exception as e:  # noqa: BLE001
            result = ("raised", type(e).__name__, str(e))
        outcomes.append((result, copied))
    assert_same(outcomes[1], outcomes[0], where="(outcome, arguments)")


def test_user_context_manager_exit_runs_when_break_call_raises():
    _compare_raising(with_block_around_break, r(3), [], True, False)


def test_user_context_manager_swallows_exception_of_break_call():
    _compare_raising(with_block_around_break, r(3), [], True, True)


def no_grad_block_around_failing_break(x, fail):
    y = x * 2
    with torch.no_grad():
        z = maybe_fails(y, fail)
    return z + y, torch.is_grad_enabled()


def test_no_grad_block_restored_when_break_call_raises():
    """torch.no_grad's exit runs when the call made inside it raises: grad mode is on again afterwards."""
    for fail in (False, True):
        _compare_raising(no_grad_block_around_failing_break, r(3).requires_grad_(), fail)
        assert torch.is_grad_enabled()


# ------------------------------------------------------------------------------ fullgraph=True

def fg_print(x):
    y = x.sin()
    print("fullgraph", file=SINK)  # BREAK: print
    return y


def fg_branch(x):
    y = x * 2
    if y.sum() > 0:  # BREAK: branch
        return y
    return -y


def fg_item(x):
    v = x.sum().item()  # BREAK: item
    return x * v


def fg_disabled(x):
    y = x + 1
    return disabled_noop(y)  # BREAK: disabled


def _fg_helper(v):
    w = v * 2
    print("inside helper", file=SINK)  # BREAK: helper
    return w


def fg_callee(x):
    return _fg_helper(x + 1)


FULLGRAPH = [(fg_print, fg_print, "print", "print"), (fg_branch, fg_branch, "branch", "tensor"),
             (fg_item, fg_item, "item", "item"), (fg_disabled, fg_disabled, "disabled", "disable"),
             (fg_callee, _fg_helper, "helper", "print")]


@pytest.mark.parametrize("fn, where, marker, word", FULLGRAPH, ids=[f[0].__name__ for f in FULLGRAPH])
def test_fullgraph_raises_at_the_first_break(fn, where, marker, word):
    gj.reset()
    counter = CompileCounter()
    compiled = gj.compile(fn, backend=counter, fullgraph=True)
    with pytest.raises(graphjit.Unsupported) as info:
        compiled(r(3))
    e = info.value
    line = line_of(where, f"# BREAK: {marker}")
    assert word in e.reason.lower(), e.reason
    assert e.filename == __file__, e.filename
    assert e.lineno == line, (e.lineno, line)
    assert f"BREAK: {marker}" in e.source_line, e.source_line
    message = str(e)
    assert e.reason in message and f"{__file__}:{line}" in message, message
    assert counter.frame_count == 0, "fullgraph must not compile a partial graph"


def test_fullgraph_branch_hint_mentions_torch_where():
    gj.reset()
    with pytest.raises(graphjit.Unsupported) as info:
        gj.compile(fg_branch, backend=CompileCounter(), fullgraph=True)(r(3))
    assert info.value.hint and "torch.where" in info.value.hint, info.value.hint
    assert "torch.where" in str(info.value)


def test_fullgraph_print_hint_is_current():
    """The hint of a print break should describe what graphjit does now (run it in CPython at a break),
    not call graph breaks a later feature."""
    gj.reset()
    with pytest.raises(graphjit.Unsupported) as info:
        gj.compile(fg_print, backend=CompileCounter(), fullgraph=True)(r(3))
    assert info.value.hint and "later feature" not in info.value.hint, info.value.hint


def fg_effects(x, log):
    log.append("traced, never run")
    y = x * 2
    print("fullgraph", file=SINK)
    return y


def test_fullgraph_error_runs_nothing():
    gj.reset()
    log = []
    with pytest.raises(graphjit.Unsupported):
        gj.compile(fg_effects, backend=CompileCounter(), fullgraph=True)(r(3), log)
    assert log == []


class FullgraphModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        print("module", file=SINK)  # BREAK: module
        return h


def test_fullgraph_module():
    gj.reset()
    with pytest.raises(graphjit.Unsupported) as info:
        gj.compile(FullgraphModule(), backend=CompileCounter(), fullgraph=True)(r(2, 3))
    assert info.value.lineno == line_of(FullgraphModule.forward, "# BREAK: module")


def test_fullgraph_false_same_functions_run():
    """Without fullgraph the same functions break and give eager's results."""
    for fn, *_ in FULLGRAPH:
        check_break(fn, lambda: (torch.rand(3) + 0.5,), graphs=None, calls=2)


# ------------------------------------------------------------------------------ explain()

def ex_none(x):
    return x.sin().cos()


def ex_one(x):
    y = x.sin()
    print("one", file=SINK)  # BREAK: one
    return y.cos()


def ex_three(x):
    a = x + 1
    print("a", file=SINK)  # BREAK: a
    b = a * 2
    disabled_noop(b)  # BREAK: b
    c = b - 1
    print("c", file=SINK)  # BREAK: c
    return c.exp()


def ex_start(x):
    print("start", file=SINK)  # BREAK: start
    return x * 2


def ex_branch(x):
    y = x * 2
    if y.sum() > 0:  # BREAK: branch
        return y + 1
    return y - 1


def ex_callee(x):
    return _fg_helper(x.abs()) * 2


EXPLAIN = [(ex_none, 1, []), (ex_one, 2, ["one"]), (ex_three, 4, ["a", "b", "c"]), (ex_start, 1, ["start"]),
           (ex_branch, 2, ["branch"])]


@pytest.mark.parametrize("fn, graphs, markers", EXPLAIN, ids=[e[0].__name__ for e in EXPLAIN])
def test_explain_counts_and_locations(fn, graphs, markers):
    gj.reset()
    out = graphjit.explain(fn)(torch.rand(3) + 0.1)
    assert out.graph_count == graphs, str(out)
    assert out.graph_break_count == len(markers), str(out)
    assert len(out.break_reasons) == len(markers)
    text = str(out)
    for reason, marker in zip(out.break_reasons, markers):
        line = line_of(fn, f"# BREAK: {marker}")
        assert reason.filename == __file__, reason.filename
        assert reason.lineno == line, (reason.lineno, line, reason.reason)
        assert f"BREAK: {marker}" in reason.source_line, reason.source_line
        assert reason.reason in text and f"{__file__}:{line}" in text


def test_explain_reasons_name_the_cause():
    gj.reset()
    out = graphjit.explain(ex_three)(r(3))
    reasons = [b.reason for b in out.break_reasons]
    assert "print" in reasons[0] and "disable" in reasons[1] and "print" in reasons[2], reasons
    assert "print" in str(out)


def test_explain_branch_hint():
    gj.reset()
    out = graphjit.explain(ex_branch)(r(3))
    assert out.break_reasons[0].hint and "torch.where" in out.break_reasons[0].hint
    assert "torch.where" in str(out)


def test_explain_break_in_callee():
    """ex_callee breaks at its call of _fg_helper; the helper, captured as its own frame, breaks at its print:
    graphs: ex_callee [abs], helper [mul] (nothing after its print), ex_callee's resume [mul]."""
    gj.reset()
    out = graphjit.explain(ex_callee)(r(3))
    assert out.graph_count == 3, str(out)
    lines = [b.lineno for b in out.break_reasons]
    assert line_of(_fg_helper, "# BREAK: helper") in lines, str(out)


def test_explain_does_not_run_twice_or_change_results():
    gj.reset()
    global SINK
    SINK = io.StringIO()
    graphjit.explain(ex_one)(r(3))
    assert SINK.getvalue() == "one\n"


def test_explain_twice_same_answer():
    """explain() reports a fresh translation each time, not what an earlier explain() left in the caches."""
    gj.reset()
    first = graphjit.explain(ex_one)(r(3))
    second = graphjit.explain(ex_one)(r(3))
    assert (second.graph_count, second.graph_break_count) == (first.graph_count, first.graph_break_count), \
        f"first: {first.graph_count} graphs, {first.graph_break_count} breaks; second: {second.graph_count}, " \
        f"{second.graph_break_count}"



def test_explain_module():
    gj.reset()
    out = graphjit.explain(FullgraphModule())(r(2, 3))
    assert out.graph_count == 1 and out.graph_break_count == 1, str(out)
    assert out.break_reasons[0].lineno == line_of(FullgraphModule.forward, "# BREAK: module")


def test_an_optimizer_step_breaks_at_its_tensor_keyed_state_and_says_so():
    """optimizer.state is a defaultdict keyed by the parameters: the break names that (it said a missing
    key was read, of a key that is there), and the step runs as in eager."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    twin = nn.Linear(3, 2)
    twin.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    step = graphjit.compile(opt.step)
    for i in range(3):
        x = torch.randn(4, 3)
        model(x).sum().backward()
        twin(x).sum().backward()
        step()
        twin_opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p, q), i
    report = str(graphjit.explain(opt.step)())
    assert "keyed by tensors" in report and "missing key" not in report, report
