"""In-place writes through views, compiled vs eager (outputs, inputs after the call, over several calls), on
the C++ codegen and (where Triton is installed) the Triton interpreter.

Causes covered: writes through a select, slice or unsqueeze of a broadcasting expand (functionalization
writes back through an expand as base + sum_to(new - base): nan for inf, an error for bool, and on torch
2.11 a scatter into the expand whose meta function lays it out expanded while its kernel returns it
dense); writes through other views of such an expand (refused); an in-place op whose other operand views
memory it writes (refused, unless no element is shared); a write through a view chain made with as_strided
(refused: functionalization can't replay it), or into part of an as_strided whose elements share memory
(refused: functionalization writes the whole view back); a write through an unfold (as slice, view, slice and
permute, or refused where windows overlap or leave an uneven gap)."""
import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from graphjit.compiler import decompose

from .test_aliasing import check


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- writes through a select, slice or unsqueeze of an expand: the view of the input they are ----

def add_through_sliced_expand(x):
    x.expand(2, *x.shape)[:-1, 0, -2:, ..., :-1] += -3
    return (x,)


def fill_through_unsqueezed_expand(x):
    x.expand(2, *x.shape)[None, 1:] = 1e20
    return (x * 2 + x.sum(),)


def copy_through_stepped_expand(x):
    v = torch.nn.functional.relu6(torch.div(x, x, rounding_mode="trunc"))
    x.expand(2, *x.shape)[1::3] = v
    return (v,)


def fill_bool_through_expand(x):
    mask = (x == x).logical_not()
    mask.expand(2, *mask.shape)[-1, ..., ::3] = True
    return (mask, mask.sum())


def add_through_expand_of_infinities(x):
    x.expand(3, *x.shape)[1, 1:] += 1           # inf + 1 is inf, not inf - inf = nan
    return (x * 1,)


def _with_infinities(shape, seed):
    x = torch.randn(shape, generator=_gen(seed))
    x.view(-1)[::3] = float("inf")
    x.view(-1)[1::5] = float("-inf")
    return x


@pytest.mark.parametrize("fn,make", [
    (add_through_sliced_expand, lambda: [torch.rand(3, 4, 5, 2, generator=_gen(1)) * 2 + 0.5]),
    (fill_through_unsqueezed_expand, lambda: [torch.randn(8, 2, 4, generator=_gen(2))]),
    (copy_through_stepped_expand, lambda: [torch.randn(6, generator=_gen(3))]),
    (fill_bool_through_expand, lambda: [torch.randn(5, 7, generator=_gen(4))]),
    (add_through_expand_of_infinities, lambda: [_with_infinities((4, 3), 5)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_write_through_view_of_expand(fn, make, backend):
    check(fn, make, calls=3)
    decompose.decompose(make_fx(fn)(*make()), make())        # compiled, not refused


def fill_through_transposed_expand(x):
    x.expand(2, *x.shape).transpose(0, 2)[0, :, 1] = 5.0       # x[:, 0], through a transpose of the expand
    return (x + 1,)


def test_write_through_other_views_of_expand_is_refused(backend):
    make = lambda: [torch.randn(3, 4, generator=_gen(6))]   # noqa: E731
    check(fill_through_transposed_expand, make, calls=3)
    with pytest.raises(decompose.Refused, match="broadcasting expand"):
        decompose.decompose(make_fx(fill_through_transposed_expand)(*make()), make())


def scatter_into_expand(x, y):
    return (torch.slice_scatter(x.expand(2, 3), y, 0, 0, 1) * 1,
            torch.select_scatter(x.expand(2, 3), y[0], 0, 1).cumsum(0))


def test_scatter_into_expand_reads_the_dense_result(backend):
    check(scatter_into_expand, lambda: [torch.randn(3, generator=_gen(7)), torch.randn(1, 3, generator=_gen(8))],
          calls=3)


# ---- an in-place op reading memory it writes through another view ----

def mul_by_own_diagonal(x):
    v = x.diagonal()
    x[1:, None] *= v                 # x[1, 1] is written, then read again for row 2
    return (x[:, 1:] * 1,)


def add_other_column(x):
    x[:, 0] += x[:, 1]               # same memory, no element in common
    return (x,)


def shift_columns_in_place(x):
    x[:, 1:].copy_(x[:, :-1])        # eager copies in order: column 0 smeared over the row
    return (x + 0,)


@pytest.mark.parametrize("fn,make", [
    (mul_by_own_diagonal, lambda: [torch.randn(3, 2, generator=_gen(9)).to(torch.bfloat16)]),
    (mul_by_own_diagonal, lambda: [torch.randn(6, 5, generator=_gen(10))]),
    (shift_columns_in_place, lambda: [torch.randn(4, 4, generator=_gen(11))]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_operand_overlapping_written_tensor_is_refused(fn, make, backend):
    check(fn, make, calls=3)
    with pytest.raises(decompose.Refused, match="reads elements it writes"):
        decompose.decompose(make_fx(fn)(*make()), make())


def test_operand_sharing_no_written_element_compiles(backend):
    make = lambda: [torch.randn(5, 3, generator=_gen(12))]    # noqa: E731
    check(add_other_column, make, calls=3)
    decompose.decompose(make_fx(add_other_column)(*make()), make())


# ---- a write through a chain of views with an as_strided ----

def add_through_as_strided(x):
    v = torch.as_strided((x * 2).movedim(0, 0), (1,), (1,)).squeeze(0)
    v.add_(v, alpha=2)
    return (v,)


def test_write_through_as_strided_view_chain_is_refused(backend):
    """Functionalization refuses to replay a write through views made with as_strided; the graph runs as
    captured with that reason, where the compiler warned that it had failed (Triton fuzz 11101416)."""
    make = lambda: [torch.randn((), generator=_gen(13))]    # noqa: E731
    check(add_through_as_strided, make, calls=3)
    with pytest.raises(decompose.Refused, match="as_strided"):
        decompose.decompose(make_fx(add_through_as_strided)(*make()), make())


def as_strided_after_a_write(x):
    x += -3
    return x.as_strided((2,), (2,), 4) * 1, x.as_strided((2,), (2,), 2) + 0


def as_strided_of_an_earlier_view_after_a_write(x):
    v = x.as_strided((3, 1), (0, 3), 2)
    x += -3
    return (torch.as_strided(v, (2,), (2,)) * 1,)


@pytest.mark.parametrize("fn", [as_strided_after_a_write, as_strided_of_an_earlier_view_after_a_write],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_as_strided_of_an_input_after_a_write_reads_the_written_values(fn, dynamic, backend):
    """An as_strided of an input's memory after the graph wrote the input (an input that views its storage
    from element 3): functionalization, and the symbolic graphs' own write rewrite, replayed the view on the
    written value, whose storage starts at the input's first element, so its absolute offset read other
    elements, or the old ones (fuzz seed 200, 20001551). Refused: the graph runs as captured."""
    from .test_aliasing import assert_matches_eager
    import graphjit
    make = lambda: [torch.arange(12.0)[3:].view(3, 3)]    # noqa: E731
    compiled = graphjit.compile(fn, backend="graphjit", dynamic=dynamic)
    for _ in range(2):
        assert_matches_eager(fn, compiled, make)


def sub_one_element_of_an_overlapping_as_strided(x):
    v = (x * 1).as_strided((1, 3), (0, 0), 1)
    v[:, 0].sub_(1.5)
    return (v, x * 2)


def test_write_into_part_of_an_as_strided_whose_elements_share_memory_is_refused(backend):
    """One element of an as_strided view whose three elements are one memory location, written: eager
    writes it once; functionalization writes the whole view back with as_strided_scatter, which eager's
    kernel refuses (the error eager does not raise; fuzz 16301109). Refused: the graph runs as captured."""
    make = lambda: [torch.randn(2, 1, generator=_gen(14))]    # noqa: E731
    check(sub_one_element_of_an_overlapping_as_strided, make, calls=3)
    with pytest.raises(decompose.Refused, match="as_strided whose elements share memory"):
        decompose.decompose(make_fx(sub_one_element_of_an_overlapping_as_strided)(*make()), make())


# ---- a write through an unfold: functionalization's inverse (unfold_backward) is not the base ----

def scale_windows_of_a_value(x):
    y = x * 1
    y.unfold(3, 2, 2).mul_(2)        # y[..., 4] is in no window: it keeps x's values
    return (y,)


def add_to_windows_of_the_input(x):
    x.unfold(-1, 2, 2).add_(1)
    return (x * 1,)


def scale_one_of_overlapping_windows(x):
    y = x + 1
    y.unfold(1, 3, 1)[:, 1].mul_(3)  # windows overlap; one window does not
    return (y,)


def negate_windows_with_gaps(x):
    y = x * 2
    y.unfold(1, 2, 3)[:, 0].neg_()   # windows at 0 and 3 of 5: two steps overrun the dim
    return (y,)


def zero_the_one_window_of_a_transpose(x):
    y = x * 2
    y.t().unfold(0, 3, 2).zero_()    # one window: step 2 never taken
    return (y,)


def add_to_a_chunk_of_windows(x):
    y = x * 1
    y.unfold(1, 2, 2).chunk(2, 1)[1].add_(100)   # through getitem of chunk, to the unfold
    return (y,)


def negate_a_split_of_windows_of_the_input(x):
    x.unfold(0, 2, 3).split(1, 0)[0].neg_()
    return (x.sum(),)


def scale_a_split_of_overlapping_windows(x):
    y = x + 1
    y.unfold(1, 3, 1).split(1, 1)[1].mul_(3)
    return (y,)


@pytest.mark.parametrize("fn,make", [
    (add_to_a_chunk_of_windows, lambda: [torch.randn(3, 5, generator=_gen(20))]),
    (negate_a_split_of_windows_of_the_input, lambda: [torch.randn(7, generator=_gen(21))]),
    (scale_a_split_of_overlapping_windows, lambda: [torch.randn(3, 5, generator=_gen(22))]),
    (scale_windows_of_a_value, lambda: [torch.randn(2, 4, 4, 5, generator=_gen(14))]),
    (add_to_windows_of_the_input, lambda: [torch.randn(3, 7, generator=_gen(15))]),
    (scale_one_of_overlapping_windows, lambda: [torch.randn(3, 5, generator=_gen(16))]),
    (negate_windows_with_gaps, lambda: [torch.randn(3, 5, generator=_gen(17))]),
    (zero_the_one_window_of_a_transpose, lambda: [torch.randn(4, 3, generator=_gen(18))]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_write_through_unfold_keeps_what_no_window_reaches(fn, make, backend):
    check(fn, make, calls=3)


@pytest.mark.parametrize("fn,compiled", [
    (scale_windows_of_a_value, True), (add_to_windows_of_the_input, True),
    (zero_the_one_window_of_a_transpose, True),
    (scale_one_of_overlapping_windows, False), (negate_windows_with_gaps, False)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_write_through_unfold_is_a_view_chain_or_refused(fn, compiled):
    shape = {scale_windows_of_a_value: (2, 4, 4, 5), zero_the_one_window_of_a_transpose: (4, 3)}.get(fn, (3, 5))
    make = lambda: [torch.randn(shape, generator=_gen(19))]      # noqa: E731
    if compiled:
        traced = decompose.decompose(make_fx(fn)(*make()), make())
        assert not any(n.target in (torch.ops.aten.unfold_backward.default, torch.ops.aten.unfold.default)
                       for n in traced.graph.nodes)
    else:
        with pytest.raises(decompose.Refused, match="unfold"):
            decompose.decompose(make_fx(fn)(*make()), make())


def add_through_a_split_of_an_expand(x):
    x.expand(2, *x.shape).split(1, 0)[1].add_(1)     # inf + 1 is inf
    return (x * 1,)


def fill_bool_through_a_chunk_of_an_expand(x):
    m = x > 0
    m.expand(2, *m.shape).chunk(2, 0)[0].fill_(True)
    return (m, m.sum())


@pytest.mark.parametrize("fn", [add_through_a_split_of_an_expand, fill_bool_through_a_chunk_of_an_expand],
                         ids=lambda f: f.__name__)
def test_write_through_a_piece_of_an_expand_is_refused(fn, backend):
    """A write through a split or chunk piece (getitem) of a broadcasting expand is seen as one through the
    expand."""
    make = lambda: [_with_infinities((3, 4), 23)]      # noqa: E731
    check(fn, make, calls=3)
    with pytest.raises(decompose.Refused, match="broadcasting expand"):
        decompose.decompose(make_fx(fn)(*make()), make())
