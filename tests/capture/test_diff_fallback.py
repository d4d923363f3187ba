"""Correctness where capture is not (yet) possible: functions with prints, data-dependent Python control
flow (.item(), .tolist(), bool(tensor)), data-dependent shapes, must still return eager's results and raise
no exception; with fullgraph=True they must raise graphjit.Unsupported. Graph counts are not asserted here
(graph breaks are a later feature). Also: exceptions raised by user code surface unchanged.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import io
import contextlib

import pytest
import torch

from graphjit.testing import check_raises
from .harness import Cases, gj, r

from graphjit.testing import CompileCounter

cases = Cases()


_sink = io.StringIO()


@cases.add(lambda: (r(3),), graphs=None)
def print_in_middle(x):
    y = x * 2
    print("value", y.shape, file=_sink)
    return y + 1


@cases.add(lambda: (r(3),), graphs=None)
def item_in_control_flow(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 2


@cases.add(lambda: (r(4),), graphs=None)
def tolist_loop(x):
    total = x * 0
    for v in x.tolist():
        total = total + v
    return total


@cases.add(lambda: (r(4),), graphs=None)
def tensor_bool_branch(x):
    if (x > 0).any():
        return x.relu()
    return x.abs()


@cases.add(lambda: (r(6),), graphs=None)
def data_dependent_shape(x):
    pos = x[x > 0]
    return pos.sum() + pos.numel(), torch.nonzero(x > 0)


@cases.add(lambda: (r(6),), graphs=None)
def item_as_python_number(x):
    k = int(x.argmax())
    return x * k, float(x.max())


@cases.add(lambda: (r(3), [0]), graphs=None)
def mutation_after_unsupported(x, log):
    y = x.cos()
    print("step", file=_sink)
    log.append(len(log))
    log[0] += 1
    return y * len(log)


@cases.add(lambda: (r(3),), graphs=None)
def numpy_roundtrip(x):
    arr = x.numpy()
    return torch.from_numpy(arr * 2) + 1


@cases.add(lambda: (r(3),), graphs=None)
def logging_and_warnings_free(x):
    import logging
    logging.getLogger("graphjit.tests.quiet").debug("x=%s", x.shape)
    return x * 2


@pytest.mark.parametrize("case", cases.params())
def test_fallback_results_match_eager(case):
    with contextlib.redirect_stdout(io.StringIO()):
        case.run()


@pytest.mark.parametrize("fn", [print_in_middle, item_in_control_flow, tolist_loop, tensor_bool_branch],
                         ids=lambda f: f.__name__)
def test_fullgraph_raises_unsupported(fn):
    gj.reset()
    compiled = gj.compile(fn, backend=CompileCounter(), fullgraph=True)
    with pytest.raises(gj.Unsupported):
        compiled(r(3))


# ------------------------------------------------------------------------------------ user exceptions

def raise_value_error(x):
    y = x * 2
    if y.shape[0] == 3:
        raise ValueError(f"bad shape {tuple(y.shape)}")
    return y


def assert_fails(x):
    assert x.dim() == 2, f"expected 2-d, got {x.dim()}-d"
    return x


def key_error(x):
    return {"a": x}["b"]


def index_error(x):
    return [x, x][5]


def shape_error(x):
    return x @ torch.ones(7, 2)


def attribute_error(x):
    return x.not_an_attribute


@pytest.mark.parametrize("fn", [raise_value_error, assert_fails, key_error, index_error, attribute_error],
                         ids=lambda f: f.__name__)
def test_user_exception_same_as_eager(fn):
    check_raises(fn, lambda: (r(3),))


def test_tensor_shape_error_same_type_as_eager():
    """A shape mismatch in a tensor op raises RuntimeError eagerly; compiled must raise RuntimeError too
    (the message may name the op differently, so only the type is compared)."""
    gj.reset()
    compiled = gj.compile(shape_error, backend=CompileCounter())
    with pytest.raises(RuntimeError):
        shape_error(r(3))
    with pytest.raises(RuntimeError):
        compiled(r(3))


def test_exception_then_success_on_other_input():
    gj.reset()
    compiled = gj.compile(raise_value_error, backend=CompileCounter())
    with pytest.raises(ValueError, match="bad shape"):
        compiled(r(3))
    x = r(4)
    torch.testing.assert_close(compiled(x), x * 2)
