"""The capture suite's cases: a function plus a factory of its arguments, checked with graphjit.testing's
differential `check` (compiled vs eager on fresh arguments, several calls; outputs, arguments after the
call, identities and graph counts compared; graphs run as captured).

    cases = Cases()

    @cases.add(lambda: (torch.randn(3), torch.randn(3)))
    def add(x, y):
        return (x + y).relu()

The compiler under test is graphjit, reached through `gj`: graphjit's API, or the namespace
graphjit.testing.use_compiler chose (e.g. a shim over torch.compile, to validate the suite's expectations).
"""
import dataclasses

import torch

from graphjit import testing


class _Compiler:
    """`gj.compile`, `gj.reset`, ... : the compiler graphjit.testing's checks use."""

    def __getattr__(self, name):
        return getattr(testing.compiler(), name)


gj = _Compiler()


# ----------------------------------------------------------------------------------------------- cases

@dataclasses.dataclass
class Case:
    """One differential case: `check(fn, make_args, **options)` under a readable test id."""
    name: str
    fn: object
    make_args: object
    options: dict

    def run(self):
        return testing.check(self.fn, self.make_args, **self.options)


class Cases:
    """A list of cases, filled by decorating module-level functions:

        cases = Cases()

        @cases.add(lambda: (torch.randn(3), torch.randn(3)))
        def add(x, y):
            return x + y

        @pytest.mark.parametrize("case", cases.params())
        def test_ops(case):
            case.run()

    The decorator returns the function unchanged. `add(make_args, name=..., **check_options)`;
    `add_fn(fn, make_args, ...)` registers a function made elsewhere (a closure from a factory).
    """

    def __init__(self):
        self.cases = []

    def add(self, make_args, *, name=None, **options):
        def register(fn):
            self.add_fn(fn, make_args, name=name, **options)
            return fn
        return register

    def add_fn(self, fn, make_args, *, name=None, **options):
        name = name or fn.__name__
        if any(c.name == name for c in self.cases):
            raise ValueError(f"duplicate case name {name!r}")
        self.cases.append(Case(name, fn, make_args, options))
        return fn

    def params(self):
        import pytest
        return [pytest.param(c, id=c.name) for c in self.cases]

    def __len__(self):
        return len(self.cases)


def assert_refused(fn, *args):
    """Capture refuses fn(*args): compiled with fullgraph=True it raises Unsupported. Resets the caches
    before and after, so the caller's next compile starts fresh."""
    import pytest
    from graphjit.exc import Unsupported
    gj.reset()
    with pytest.raises(Unsupported):
        gj.compile(fn, backend="eager", fullgraph=True)(*args)
    gj.reset()


def r(*shape):
    """torch.randn(*shape): the cases' arguments (check seeds each call)."""
    return torch.randn(*shape)
