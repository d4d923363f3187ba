"""Exceptions raised and handled in captured code: `raise ... from`, the implicit `__context__` of a raise
inside a handler, bare `raise`, messages of builtin errors, exception classes with Python `__init__`, the caller's exception
(guarded to be none, refused where there is one), and what capture refuses (a traceback, a graph break
inside a handler).
Each case runs compiled (fullgraph) against plain Python; refused cases assert Unsupported under
fullgraph and Python's result without it.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import sys
import types

import pytest
import torch

from .harness import Cases, assert_refused, gj, r

cases = Cases()


def one():
    return (r(3),)


@cases.add(one)
def raise_from_sets_cause(x):
    try:
        try:
            raise ValueError("a")
        except ValueError as e:
            raise KeyError("b") from e
    except KeyError as e2:
        cause = e2.__cause__
        return x + 1, type(cause).__name__, str(cause), e2.__suppress_context__, e2.__context__ is cause


@cases.add(one)
def raise_from_none_suppresses_context(x):
    try:
        try:
            raise ValueError("a")
        except ValueError:
            raise KeyError("b") from None
    except KeyError as e2:
        return x + 1, e2.__cause__ is None, e2.__suppress_context__, type(e2.__context__).__name__


@cases.add(one)
def raise_in_handler_sets_context(x):
    try:
        try:
            raise ValueError("a")
        except ValueError:
            raise KeyError("b")
    except KeyError as e2:
        return x + 1, type(e2.__context__).__name__, e2.__cause__ is None, e2.__suppress_context__


@cases.add(one)
def error_of_a_builtin_in_handler_gets_context(x):
    d = {}
    try:
        try:
            raise ValueError("a")
        except ValueError:
            d["missing"]
    except KeyError as e2:
        return x + 1, type(e2.__context__).__name__


def _raises_in_handler():
    try:
        raise ValueError("inner")
    except ValueError:
        raise TypeError("callee")


@cases.add(one)
def context_across_an_inlined_call(x):
    try:
        _raises_in_handler()
    except TypeError as e:
        return x * 2, str(e.__context__)


@cases.add(one)
def a_finished_handler_restores_the_outer_one(x):
    try:
        raise TypeError("outer")
    except TypeError:
        try:
            raise ValueError("a")
        except ValueError:
            pass
        try:
            raise KeyError("b")
        except KeyError as e:
            return x + 1, type(e.__context__).__name__


@cases.add(one)
def bare_raise_reraises_the_handled_exception(x):
    try:
        try:
            raise ValueError("v")
        except ValueError:
            x = x + 1
            raise
    except ValueError as e:
        return x, str(e)


@cases.add(lambda: (r(3), (1, 2)))
def tuple_index_error_message(x, t):
    try:
        return t[5]
    except IndexError as e:
        return x + 1, str(e)


@cases.add(lambda: (r(3), [1, 2]))
def list_index_error_message(x, t):
    try:
        return t[5]
    except IndexError as e:
        return x + 1, str(e)


@cases.add(one)
def errors_of_operators_on_builtin_values_are_caught(x):
    out = []
    for call in (lambda: 1 / 0, lambda: int("abc"), lambda: "a" < 1, lambda: (1, 2) + [3], lambda: abs("a"),
                 lambda: [v for v in 5], lambda: "abc"[7]):
        try:
            out.append(call())
        except (ZeroDivisionError, ValueError, TypeError, IndexError) as e:
            out.append((type(e).__name__, str(e)))
    return x + 1, out


@cases.add(one)
def failed_asserts_are_caught(x):
    out = []
    for n in (3, 4):
        try:
            assert x.shape[0] == n, f"size {x.shape[0]} is not {n}"
            out.append("held")
        except AssertionError as e:
            out.append(e.args)
    try:
        assert x.dim() == 2
    except AssertionError as e:
        out.append(e.args)
    return x + 1, out


class _MatchesAll(type):
    def __instancecheck__(cls, instance):
        return True

    def __subclasscheck__(cls, subclass):
        return True


class _ClaimsAll(Exception, metaclass=_MatchesAll):
    pass


@cases.add(one)
def except_matches_by_the_class_not_its_metaclass(x):
    out = []
    for exc in (KeyError("k"), _ClaimsAll("c")):
        try:
            try:
                raise exc
            except _ClaimsAll:
                out.append("claims")
        except KeyError:
            out.append("key")
    try:
        try:
            raise KeyError("k")
        except (5, KeyError):
            out.append("tuple")
    except TypeError as e:
        out.append(str(e))
    return x + 1, out


def _handled_in_a_generator():
    try:
        raise IndexError("g")
    except IndexError:
        yield sys.exception().args
    yield sys.exc_info()[1].args


@cases.add(one)
def exc_info_in_handlers(x):
    out = []
    try:
        raise ValueError("in")
    except ValueError as e:
        t, v, tb = sys.exc_info()
        out.append((t is ValueError, v is e, tb is None, t.__name__, sys.exception() is e))
        try:
            raise KeyError("k")
        except KeyError:
            out.append(sys.exc_info()[0].__name__)
        out.append(type(sys.exception()).__name__)
        out.append(list(_handled_in_a_generator()))
    return x + 1, out


def _reads_with_context(d):
    try:
        return d["missing"]
    except KeyError as e:
        e.args = (f"while reading: {e.args[0]}",) + e.args[1:]
        raise


@cases.add(one)
def reraise_after_changing_args(x):
    out = []
    try:
        _reads_with_context({})
    except KeyError as e:
        out.append((str(e), e.args))
    try:
        try:
            raise ValueError("a", 1)
        except ValueError as e:
            e.args = [2, 3]
            raise
    except ValueError as e:
        out.append(e.args)
    return x + 1, out


class _Passes:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


@cases.add(one)
def with_block_reraise_restores_the_handled_exception(x):
    try:
        raise TypeError("outer")
    except TypeError:
        try:
            with _Passes():
                raise IndexError("i")
        except IndexError as e:
            inner = e.args
        try:
            raise KeyError("k")
        except KeyError as e:
            return x + 1, inner, type(e.__context__).__name__


class _Remembers:
    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        self.seen = (typ is None, tb is None)
        self.tb = tb
        return True


@cases.add(one)
def exit_gets_a_traceback(x):
    c = _Remembers()
    with c:
        raise KeyError("k")
    return x + 1, c.seen, c.tb is None


@pytest.mark.parametrize("case", cases.params())
def test_exceptions(case):
    case.run()


# ------------------------------------------------------------------------------------ refused

LOG = []


class LoggingError(Exception):
    def __init__(self, message):
        LOG.append(message)
        super().__init__(message)


def _user_exception_init_has_effects(x):
    try:
        raise LoggingError("m")
    except LoggingError as e:
        return x + 1, str(e)


def _context_is_the_callers_exception(x):
    try:
        raise ValueError("in")
    except ValueError as e:
        return x, type(e.__context__).__name__


def _caught_exception_returned(x):
    try:
        raise ValueError("a")
    except ValueError as e:
        return x, e


def _exc_info_outside_a_handler(x):
    return x + 1, sys.exception() is None


def _imports_a_missing_module(x):
    try:
        import graphjit_no_such_module  # noqa: F401
        return x
    except ImportError:
        return x + 1


REFUSED = [_user_exception_init_has_effects, _caught_exception_returned, _imports_a_missing_module]

# what the caller handles: known (and guarded) where it handles nothing, refused where it handles one
CALLERS = [_context_is_the_callers_exception, _exc_info_outside_a_handler]


def _outcome(fn, x):
    """fn(x) called while the caller handles a KeyError, as (result repr, LOG)."""
    LOG.clear()
    try:
        raise KeyError("outer")
    except KeyError:
        out = [fn(x.clone()) for _ in range(2)]
    return repr([(o[0], str(o[1]) if isinstance(o[1], BaseException) else o[1]) for o in out]), list(LOG)


def _traceback_of_a_caught_exception(x):
    try:
        raise ValueError("a")
    except ValueError as e:
        tb = e.__traceback__
        return x + 1, tb is None


def test_a_raised_exceptions_traceback_is_there_and_opaque():
    """Never None once raised (contextlib.ExitStack passes it to the callbacks); its contents are refused."""
    from graphjit.testing import check
    check(_traceback_of_a_caught_exception, lambda: (r(3),))


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__.lstrip("_"))
def test_refused(fn):
    assert_refused(fn, r(3))
    x = r(3)
    assert _outcome(gj.compile(fn, backend="eager"), x) == _outcome(fn, x)


def _bare_raise_outside_a_handler(x):
    try:
        raise
    except (RuntimeError, KeyError) as e:
        return x + 1, repr(e)


CALLERS.append(_bare_raise_outside_a_handler)


@pytest.mark.parametrize("fn", CALLERS, ids=lambda f: f.__name__.lstrip("_"))
def test_the_callers_exception(fn):
    from graphjit.exc import Unsupported
    gj.reset()
    compiled = gj.compile(fn, backend="eager", fullgraph=True)
    x = r(3)
    expected, actual = fn(x), compiled(x)
    assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
    try:
        raise KeyError("outer")
    except KeyError:
        with pytest.raises(Unsupported):
            compiled(x)
    gj.reset()
    assert _outcome(gj.compile(fn, backend="eager"), x) == _outcome(fn, x)


def _breaks_in_handler(x):
    try:
        raise ValueError("in")
    except ValueError:
        print("handling")
        return x + 1, repr(sys.exc_info()[1])


def test_a_graph_break_inside_a_handler_runs_the_frame_eagerly(capsys):
    gj.reset()
    x = r(3)
    assert _outcome(gj.compile(_breaks_in_handler, backend="eager"), x) == _outcome(_breaks_in_handler, x)


_MODULE = types.ModuleType("graphjit_test_module")


def _from_import(x):
    try:
        from graphjit_test_module import helper
        return x * helper
    except ImportError as e:
        return x + 1, str(e), e.name, e.path


def test_from_import_of_a_missing_name_raises_cpythons_import_error():
    """`from m import name` where m lacks it: CPython's ImportError (message, name, path), caught in the
    frame; guarded on the module still lacking it, so setting it recompiles."""
    sys.modules["graphjit_test_module"] = _MODULE
    try:
        gj.reset()
        compiled = gj.compile(_from_import, backend="eager", fullgraph=True)
        x = r(3)
        for change in (None, lambda: setattr(_MODULE, "helper", 3), lambda: delattr(_MODULE, "helper")):
            if change is not None:
                change()
            expected, actual = _from_import(x), compiled(x)
            assert type(actual) is type(expected)
            if isinstance(expected, tuple):
                assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
            else:
                assert torch.equal(actual, expected)
    finally:
        del sys.modules["graphjit_test_module"]
        gj.reset()


_PREFIX = ["a"]


class _CodedError(Exception):
    code = 3


class _WordyError(Exception):
    def __str__(self):
        return _PREFIX[0] + ":" + super().__str__()


def _reads_the_class(x):
    try:
        raise _CodedError("m")
    except _CodedError as e:
        return x * e.code, str(e), getattr(e, "extra", None)


def _formats_through_its_str(x):
    try:
        raise _WordyError("m")
    except _WordyError as e:
        return x + 1, str(e), f"{e}"


def test_a_user_exception_class_is_read_as_it_is_at_each_call():
    """A user exception class's data attributes are guarded (reassigned, added, deleted: recompiles); one
    that defines methods (__str__ reading a global) is refused: its methods would run once while tracing."""
    gj.reset()
    compiled = gj.compile(_reads_the_class, backend="eager", fullgraph=True)
    x = r(3)
    for change in (None, lambda: setattr(_CodedError, "code", 5), lambda: setattr(_CodedError, "extra", "x"),
                   lambda: delattr(_CodedError, "extra")):
        if change is not None:
            change()
        expected, actual = _reads_the_class(x), compiled(x)
        assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
    _CodedError.code = 3
    assert_refused(_formats_through_its_str, x)
    compiled = gj.compile(_formats_through_its_str, backend="eager")
    for prefix in ("a", "b"):
        _PREFIX[0] = prefix
        assert compiled(x)[1:] == _formats_through_its_str(x)[1:]
    gj.reset()
