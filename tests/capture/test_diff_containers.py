"""Containers built and consumed inside the frame, and passed in or returned: tuples, lists, dicts, sets,
comprehensions (inlined since 3.12, PEP 709), generator expressions, star-unpacking, nested outputs.

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode, without pytest's assert
rewriting.
"""
import pytest
import torch

from .harness import Cases, r

cases = Cases()


def two():
    return r(3), r(3)


# ------------------------------------------------------------------------------------ tuples and lists

@cases.add(two)
def tuple_build_index(x, y):
    t = (x, y, x + y)
    return t[2] * t[0], t[-1], t[1:], len(t)


@cases.add(two)
def list_append_extend(x, y):
    xs = [x]
    xs.append(y)
    xs.extend([x * 2, y * 2])
    xs += [x + y]
    xs.insert(0, x - y)
    last = xs.pop()
    return xs, last


@cases.add(two)
def list_index_slice(x, y):
    xs = [x, y, x * y, x - y]
    return xs[0] + xs[-1], xs[1:3], xs[::-1], xs[::2], [3, 4, 5].index(5)


@cases.add(two)
def list_setitem_delete(x, y):
    xs = [x, y, x + 1]
    xs[1] = xs[1] * 10
    del xs[0]
    xs[0:1] = [y, y]
    return xs


@cases.add(lambda: (r(4),))
def unpacking(x):
    a, b = x.chunk(2)
    (c, d), e = (a, b), x
    f, *g = [x, a, b]
    *h, i = (x, a, b, e)
    j, *k, m = range(5)
    return a, b, c, d, e, f, g, h, i, j, k, m


@cases.add(lambda: ([r(3), r(3), r(3)],))
def star_unpack_input_list(xs):
    first, *rest = xs
    return first * sum(rest)


@cases.add(two)
def star_args_in_calls(x, y):
    parts = [x, y]
    shape = (3, 1)
    return torch.stack([*parts, x + y]), x.view(*shape), torch.cat((*parts,))


@cases.add(lambda: ([r(2), r(2)], (r(2), r(2))))
def list_and_tuple_inputs(xs, ys):
    return [a + b for a, b in zip(xs, ys)], tuple(xs) + ys


@cases.add(two)
def list_methods(x, y):
    xs = [3, 1, 2]
    xs.sort()
    xs.reverse()
    n = xs.count(2)
    ys = xs.copy()
    ys.remove(1)
    return x * xs[0] + y * n, ys, xs


@cases.add(two)
def list_in_contains(x, y):
    names = ["a", "b"]
    k = 2 if "b" in names else 3
    k += 1 if "z" not in names else 0
    return x * k + y


@cases.add(two)
def list_equality_and_mult(x, y):
    a = [1, 2] * 2
    b = (0,) * 3
    return x + len(a) + len(b), a == [1, 2, 1, 2], [y] * 2


# ------------------------------------------------------------------------------------ dicts

@cases.add(two)
def dict_build_getitem(x, y):
    d = {"x": x, "y": y}
    d["z"] = d["x"] + d["y"]
    return d["z"], d


@cases.add(two)
def dict_methods(x, y):
    d = {"a": x, "b": y}
    keys = list(d.keys())
    vals = [v * 2 for v in d.values()]
    items = {k: v + 1 for k, v in d.items()}
    got = d.get("a"), d.get("missing"), d.get("missing", 3)
    return keys, vals, items, got, len(d), "a" in d


@cases.add(two)
def dict_update_pop_setdefault(x, y):
    d = {"a": x}
    d.update({"b": y})
    d.update(c=x * y)
    popped = d.pop("a")
    d.setdefault("e", y - 1)
    d.setdefault("b", x)
    del d["c"]
    return d, popped


@cases.add(lambda: ({"w": r(3, 3), "b": r(3)}, r(3)))
def dict_input(params, x):
    return params["w"] @ x + params["b"], {k: params[k].sum() for k in sorted(params)}


@cases.add(two)
def dict_int_keys_and_merge(x, y):
    d = {0: x, 1: y}
    e = {**d, 2: x + y}
    f = d | {3: x}
    return sum(e[i] for i in range(3)), f


@cases.add(two)
def dict_iteration_order(x, y):
    d = {}
    for i, name in enumerate(["c", "a", "b"]):
        d[name] = x * i + y
    return [k for k in d], list(d.values())


@cases.add(two)
def dict_constructor(x, y):
    d = dict(a=x, b=y * 2)
    e = dict([("c", x), ("d", y)])
    f = dict(zip(["p", "q"], [x, y]))
    return d, e, f


# ------------------------------------------------------------------------------------ sets

@cases.add(two)
def set_of_constants(x, y):
    s = {1, 2, 3}
    s.add(4)
    s.discard(1)
    t = s | {10}
    u = s & {2, 4, 99}
    return x * len(t) + y * sum(u), 3 in s, 1 not in s, sorted(s - {2})


@cases.add(two)
def frozenset_and_set_comprehension(x, y):
    s = {i % 3 for i in range(10)}
    fs = frozenset(["a", "b"])
    return x * len(s) + ("a" in fs) * y


# ------------------------------------------------------------------------------------ comprehensions

@cases.add(lambda: (r(3),))
def list_comprehension(x):
    return [x * i for i in range(4) if i != 2]


@cases.add(lambda: (r(3),))
def nested_comprehension(x):
    return [[x + i * j for j in range(2)] for i in range(3)]


@cases.add(lambda: (r(3),))
def comprehension_closes_over_locals(x):
    scale = 3
    ys = [x * scale + i for i in range(2)]
    i = 100  # 3.12 inlines comprehensions: their `i` must not leak into this one
    return ys, x + i


@cases.add(lambda: (r(3), r(3)))
def dict_comprehension(x, y):
    return {f"k{i}": x * i + y for i in range(3)}


@cases.add(lambda: ([r(2), r(2), r(2)],))
def generator_expressions(xs):
    total = sum(x.sum() for x in xs)
    flags = any(x.shape[0] == 2 for x in xs), all(x.dim() == 2 for x in xs)
    return total, flags, tuple(x * 2 for x in xs), list(x + 1 for x in xs)


@cases.add(lambda: (r(3),))
def sum_with_start(x):
    return sum([x, x * 2, x * 3], torch.zeros(3)), sum(range(5)) + x


# ------------------------------------------------------------------------------------ nested outputs

@cases.add(two)
def return_nested_containers(x, y):
    return {"a": [x, (y, {"b": x + y})], "c": (None, 1, "s")}, [[x]]


@cases.add(two)
def return_list_of_same_tensor(x, y):
    z = x + y
    return [z, z, (z,)]


@cases.add(lambda: ({"a": [r(2), r(2)], "b": (r(2), {"c": r(2)})},))
def nested_input(tree):
    a0, a1 = tree["a"]
    b0, inner = tree["b"]
    return a0 + a1 + b0 + inner["c"]


@cases.add(lambda: ([r(2), r(2)], {"k": r(2)}))
def mutate_input_containers(xs, d):
    xs.append(xs[0] + xs[1])
    d["new"] = d["k"] * 2
    del d["k"]
    return len(xs), d["new"]


@cases.add(lambda: (r(3),))
def slice_objects(x):
    s = slice(1, None)
    items = [x, x + 1, x + 2]
    return items[s], x[s], x[slice(None, None, 2)]


@cases.add(lambda: (r(3),))
def dict_from_bad_pairs_raises_cpythons_errors(x):
    out = []
    for pairs in ([("a", x), (1,)], [("a", 1), 5], ["ab", ("c", x)]):
        try:
            out.append(dict(pairs))
        except (TypeError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
    return x + 1, out


def _size_concatenations(x):
    s = x.shape
    out = [(1,) + s, () + s, (x.shape[0],) + s, s + (1,)]
    for call in (lambda: s + [1], lambda: [1] + s):
        try:
            out.append(call())
        except TypeError as e:
            out.append(str(e))
    return x + 1, out, [type(v).__name__ for v in out]


cases.add_fn(_size_concatenations, lambda: (r(3, 2),), name="size_concatenations")
cases.add_fn(_size_concatenations, lambda: (r(3, 2),), name="size_concatenations_dynamic",
             compile_kwargs={"dynamic": True, "fullgraph": True})


@pytest.mark.parametrize("case", cases.params())
def test_containers(case):
    case.run()
