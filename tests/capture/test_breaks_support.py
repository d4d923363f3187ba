"""Helpers shared by the graph-break suites (tests/capture/test_breaks_*.py); this file holds no tests.

Graph-break cases differ from whole-graph cases in two ways the plain harness doesn't cover:

  * they are compiled with fullgraph=False even when one graph is expected (a print at the very start or
    end leaves one graph, but the frame still breaks), and
  * much of what they must get right is Python state outside the arguments: text printed to a sink,
    globals, module attributes, closure cells, records of a logger. A `World` resets that state before
    every run and snapshots it after, so each compiled run is compared with the eager run of the same call:

        out = World(reset=lambda: SINK.truncate(0), snapshot=lambda: SINK.getvalue())
        check_break(fn, lambda: (torch.randn(3),), graphs=2, world=out)

PYTEST_DONT_REWRITE: keep this module's bytecode plain like the cases', in case a case uses a helper.
"""
import contextlib
import inspect

from graphjit.testing import assert_same, check, check_module, check_steps, Mismatch, Step


class World:
    """Python state outside the arguments, as a context factory for check(context=...).

    reset():    put the state back to its initial value (before every eager and every compiled run);
    snapshot(): a comparable copy of the state (after every run).
    check() runs eager then compiled for each call, so runs alternate eager, compiled, eager, ...
    """

    def __init__(self, reset, snapshot, *, nonempty=False):
        self.reset, self.snapshot, self.nonempty = reset, snapshot, nonempty
        self.runs = []

    def __call__(self):
        return self._run()

    @contextlib.contextmanager
    def _run(self):
        self.reset()
        try:
            yield
        finally:
            self.runs.append(self.snapshot())

    def assert_same(self):
        """Every compiled run left the state as the eager run of the same call did."""
        assert self.runs and len(self.runs) % 2 == 0, f"odd number of runs: {len(self.runs)}"
        for i in range(0, len(self.runs), 2):
            eager, compiled = self.runs[i], self.runs[i + 1]
            if self.nonempty and not eager:
                raise AssertionError(f"the case is wrong: call {i // 2} left no state to compare ({eager!r})")
            try:
                assert_same(compiled, eager, where=f"python state after call {i // 2}")
            except Mismatch as e:
                raise Mismatch(f"{e}\n  eager runs: {self.runs[0::2]}\n  compiled runs: {self.runs[1::2]}") \
                    from None


def breaking(compile_kwargs=None):
    """compile kwargs of a case that breaks: never fullgraph."""
    kwargs = dict(compile_kwargs or {})
    kwargs["fullgraph"] = False
    return kwargs


def check_break(fn, make_args, *, graphs, world=None, compile_kwargs=None, **options):
    """check() of a function with graph breaks; then, if given, the World's state after every run."""
    counter = check(fn, make_args, graphs=graphs, compile_kwargs=breaking(compile_kwargs), context=world,
                    **options)
    if world is not None:
        world.assert_same()
    return counter


def check_break_module(factory, make_args, *, graphs, compile_kwargs=None, attrs=(), **options):
    """check_module() of a module with graph breaks; `attrs` names plain attributes (counters, logs) that
    must also match between the eager and the compiled module after all calls."""
    counter, compiled, eager_module, compiled_module = check_module(
        factory, make_args, graphs=graphs, compile_kwargs=breaking(compile_kwargs), **options)
    for name in attrs:
        assert_same(getattr(compiled_module, name), getattr(eager_module, name), where=f"module.{name}")
    return counter, compiled, eager_module, compiled_module


def check_break_steps(fn, steps, *, graphs=None, compile_kwargs=None, world=None, **options):
    """check_steps() with fullgraph=False; the World (if any) wraps every step's run."""
    if world is not None:
        steps = [s if isinstance(s, Step) else Step(s) for s in steps]
        for s in steps:
            if s.context is not None:
                raise ValueError("a step with its own context and a World: combine them in the World")
            s.context = world
    counter = check_steps(fn, steps, graphs=graphs, compile_kwargs=breaking(compile_kwargs), **options)
    if world is not None:
        world.assert_same()
    return counter


def line_of(fn, marker):
    """The line number in fn's file of the (only) line of fn's source containing `marker` (a comment)."""
    lines, start = inspect.getsourcelines(fn)
    found = [start + i for i, text in enumerate(lines) if marker in text]
    if len(found) != 1:
        raise ValueError(f"marker {marker!r} occurs {len(found)} times in {fn.__qualname__}")
    return found[0]


def params(cases, xfail=None):
    """cases.params(), with `xfail` ({case name: reason}) marking known failures strict xfails."""
    import pytest
    xfail = dict(xfail or {})
    out = []
    for c in cases.cases:
        marks = [pytest.mark.xfail(strict=True, reason=xfail.pop(c.name))] if c.name in xfail else []
        out.append(pytest.param(c, id=c.name, marks=marks))
    if xfail:
        raise ValueError(f"xfail names no case: {sorted(xfail)}")
    return out


# ---- self-tests of the helpers (and so this file is never an empty test module)

def test_world_compares_eager_and_compiled_runs():
    import pytest
    state = []
    world = World(state.clear, lambda: list(state))
    for value in ("same", "same"):
        with world():
            state.append(value)
    world.assert_same()
    for value in ("eager", "compiled"):
        with world():
            state.append(value)
    with pytest.raises(Mismatch):
        world.assert_same()


def test_line_of_finds_the_marker():
    def marked():
        return 1  # MARKER: here
    assert line_of(marked, "# MARKER: here") == marked.__code__.co_firstlineno + 1
