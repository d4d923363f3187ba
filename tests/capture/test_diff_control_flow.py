"""Python control flow that is decided at capture time: branches on constant arguments, shapes, dims,
dtypes and None-ness; loops unrolled over constant ranges; break/continue; short-circuit logic; asserts.
The compiled frame keeps only the taken path (guarded), so each case is still one graph.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch

from .harness import Cases, r

cases = Cases()


@cases.add(lambda: (r(3), 2), name="if_elif_int_arg_2")
@cases.add(lambda: (r(3), 0), name="if_elif_int_arg_0")
@cases.add(lambda: (r(3), -5), name="if_elif_int_arg_neg")
def if_elif_int_arg(x, n):
    if n > 1:
        return x * n
    elif n == 0:
        return x - 1
    else:
        return x.abs()


@cases.add(lambda: (r(4, 2),), name="if_shape0_big")
@cases.add(lambda: (r(2, 2),), name="if_shape0_small")
def if_on_shape(x):
    if x.shape[0] > 3:
        return x[:3] * 2
    return x + 1


@cases.add(lambda: (r(2, 3),), name="if_dim_2")
@cases.add(lambda: (r(2, 3, 4),), name="if_dim_3")
def if_on_dim(x):
    if x.dim() == 3:
        x = x.flatten(0, 1)
    elif x.ndim == 2 and x.size(1) == 3:
        x = x.t()
    return x.sum(-1)


@cases.add(lambda: (r(3),), name="if_dtype_float")
@cases.add(lambda: (torch.arange(3),), name="if_dtype_int")
def if_on_dtype(x):
    if x.dtype == torch.float32:
        return x * 0.5
    if x.dtype in (torch.int64, torch.int32):
        return x.float() + 1
    return x


@cases.add(lambda: (r(3), None), name="if_is_none_none")
@cases.add(lambda: (r(3), r(3)), name="if_is_none_tensor")
def if_is_none(x, bias):
    y = x * 2
    if bias is not None:
        y = y + bias
    return y if bias is None else y - 1


@cases.add(lambda: (r(3), True), name="if_bool_arg_true")
@cases.add(lambda: (r(3), False), name="if_bool_arg_false")
def if_bool_arg(x, flag):
    if flag:
        return x.sin()
    return x.cos()


@cases.add(lambda: (r(3), "relu"), name="if_str_arg_relu")
@cases.add(lambda: (r(3), "tanh"), name="if_str_arg_tanh")
def if_str_arg(x, act):
    if act == "relu":
        return torch.relu(x)
    elif act.startswith("ta"):
        return torch.tanh(x)
    raise ValueError(act)


@cases.add(lambda: (r(3),))
def while_counter(x):
    i = 0
    while i < 4:
        x = x * 2 + i
        i += 1
    return x


@cases.add(lambda: (r(3), 5))
def for_range_unrolled(x, n):
    acc = torch.zeros_like(x)
    for i in range(n):
        acc = acc + x * i
    return acc


@cases.add(lambda: (r(3),))
def for_range_step_reversed(x):
    out = []
    for i in range(10, 0, -3):
        out.append(x + i)
    for i in reversed(range(2)):
        out.append(x * i)
    return out


@cases.add(lambda: (r(3),))
def break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x + i
    return x


@cases.add(lambda: (r(3),))
def while_true_break(x):
    n = 0
    while True:
        x = x.cos()
        n += 1
        if n == 3:
            break
    return x, n


@cases.add(lambda: (r(2, 2),))
def nested_loops(x):
    out = x
    for i in range(3):
        for j in range(i):
            if j == 1:
                continue
            out = out + x * (i * 10 + j)
    return out


@cases.add(lambda: (r(3), 3))
def for_else(x, n):
    for i in range(n):
        if i == 10:
            break
    else:
        x = x + 100
    return x


@cases.add(lambda: (r(4),))
def ternary(x):
    a = x * 2 if x.shape[0] == 4 else x
    b = 1 if a.dtype is torch.float64 else 2
    return a + b


@cases.add(lambda: (r(3), 0, None))
def and_or_short_circuit(x, k, none):
    a = k or 5          # 5
    b = none and x.sin()  # None, x.sin() not evaluated
    c = (k == 0) and x.cos()
    d = none or x * 2
    e = 3 and 4
    return x + a, b, c, d, e


@cases.add(lambda: (r(3), r(3)))
def not_and_chained_compare(x, y):
    n = x.shape[0]
    if not (0 < n <= 3) or n == 7:
        return x
    if not None and n is not None:
        return x + y
    return y


@cases.add(lambda: (r(2, 3),))
def assert_on_shapes(x):
    assert x.dim() == 2, "expected a matrix"
    assert x.shape[1] == 3
    assert isinstance(x, torch.Tensor)
    return x.sum(1)


@cases.add(lambda: (r(4, 4), 2))
def loop_over_shape(x, k):
    for _ in range(x.shape[0] // k):
        x = x @ x.t() / 4
    return x


@cases.add(lambda: (r(3),))
def loop_over_tensor_rows_free(x):
    total = 0
    for i in range(len(x)):
        total = total + x[i]
    return total


@cases.add(lambda: (r(3, 2),))
def iterate_tensor_rows(x):
    outs = []
    for row in x:
        outs.append(row * 2)
    return outs


@cases.add(lambda: (r(3),))
def match_statement(x):
    out = []
    for cmd in ("double", ("add", 3), "other"):
        match cmd:
            case "double":
                out.append(x * 2)
            case ("add", n):
                out.append(x + n)
            case _:
                out.append(x)
    return out


@cases.add(lambda: (r(3),))
def walrus(x):
    if (n := x.shape[0]) > 2:
        return x * n
    return x


@pytest.mark.parametrize("case", cases.params())
def test_control_flow(case):
    case.run()
