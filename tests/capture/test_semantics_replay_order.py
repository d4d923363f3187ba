"""Python semantics of capture: mutations of lists, dicts, objects and globals from outside the frame,
replayed by the entry after the graph, where a value or a target of one effect is reached through a
container another effect changes (`v = lst[0]; del lst[0]; d["k"] = v`). The replay must leave exactly
the state plain Python leaves, whatever order the effects come in, and list iterators must keep CPython's
index-based behaviour over a list the frame mutates. Each case runs compiled against plain Python, several
calls on fresh inputs, comparing results and mutated arguments (and globals, where a case writes them).

PYTEST_DONT_REWRITE: the functions under test must be plain Python bytecode.
"""
import pytest
import torch

import graphjit
from graphjit.testing import assert_same, clone_tree
from .harness import Cases, gj, r
from .test_breaks_support import World, check_break

cases = Cases()


def tensors(n):
    return [r(2) for _ in range(n)]


class Box:
    def __init__(self, a):
        self.a = a


# --------------------------------------------------------------- values read through a mutated container

@cases.add(lambda: (r(2), tensors(3), {}), graphs=0)
def item_read_then_deleted_then_stored_in_dict(t, lst, d):
    it = iter(lst)
    v = next(it, t)
    if lst:
        del lst[0]
    d["k"] = v
    if lst:
        del lst[-1]
    return ()


@cases.add(lambda: (r(2), tensors(4), {"k": 0}), graphs=0)
def items_read_then_popped_and_reordered(t, lst, d):
    first, last = lst[0], lst[-1]
    lst.pop(0)
    lst.reverse()
    d["first"], d["last"] = first, last
    d["k"] = lst[1]
    del lst[1]
    return d["k"] is first


@cases.add(lambda: (r(2), tensors(3), Box(None)), graphs=0)
def attribute_set_to_item_then_popped(t, lst, box):
    box.a = lst[1]
    lst.pop(1)
    lst.insert(0, t)
    return len(lst)


@cases.add(lambda: (r(2), [tensors(1), tensors(2)]), graphs=1)
def inner_list_mutated_after_outer_shifted(t, outer):
    inner = outer[0]
    outer.insert(0, [t])
    inner.append(t + 1)
    outer[-1].append(t * 2)
    return len(inner)


@cases.add(lambda: (r(2), {"a": tensors(2), "b": tensors(1)}), graphs=0)
def list_in_dict_mutated_after_key_replaced(t, d):
    a = d["a"]
    d["a"] = d.pop("b")
    a.append(t)
    a.pop(0)
    return len(d)


@cases.add(lambda: (r(2), tensors(3), {"x": 1}), graphs=0)
def dict_values_swapped_with_list_items(t, lst, d):
    d["x"], lst[0] = lst[0], d["x"]
    del lst[1]
    d["y"] = lst[-1]
    lst.clear()
    return ()


# ------------------------------------------------------------------- list iterators over a mutated list

@cases.add(lambda: (r(2), tensors(5)), graphs=0)
def iterator_follows_index_after_deletes(t, lst):
    it = iter(lst)
    a = next(it)
    del lst[0]
    b = next(it)                     # index 1 of the shortened list
    lst.insert(0, t)
    c = next(it, None)
    del lst[-2:]
    rest = list(it)
    return a, b, c, rest, next(it, "done")


@cases.add(lambda: (r(2), tensors(3)), graphs=0)
def iterator_past_end_stays_exhausted(t, lst):
    it = iter(lst)
    seen = list(it)
    lst.append(t)
    return len(seen), next(it, "exhausted")


@cases.add(lambda: (r(2), tensors(4)), graphs=0)
def reversed_iterator_after_deletes(t, lst):
    it = reversed(lst)
    a = next(it)
    del lst[0]
    b = next(it)                     # index len - 2 of the original list, now one further
    lst.append(t)
    return a, b, list(it)


@pytest.mark.parametrize("case", cases.params())
def test_mutations_read_through_containers(case):
    case.run()


# --------------------------------------------------------------- iterators that outlive the frame

def advance_then_delete(lst, steps):
    it = iter(lst)
    for _ in range(steps):
        next(it)
    del lst[0]
    return it


def advance_reversed_then_delete(lst, steps):
    it = reversed(lst)
    for _ in range(steps):
        next(it)
    del lst[-1]
    return it


@pytest.mark.parametrize("fn", [advance_then_delete, advance_reversed_then_delete])
@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_returned_iterator_continues_over_the_mutated_list(fn, steps):
    """The iterator the compiled frame returns yields what CPython's would from the final list."""
    gj.reset()
    compiled = gj.compile(fn, backend="eager")
    for call in range(3):
        lst = tensors(3 + call)
        eager_lst, comp_lst = clone_tree(lst), clone_tree(lst)
        eager_it, comp_it = fn(eager_lst, steps), compiled(comp_lst, steps)
        assert type(comp_it) is type(eager_it)
        comp_lst.append(r(2))                # the iterator sees later appends, as CPython's does
        eager_lst.append(comp_lst[-1])
        assert_same(list(comp_it), list(eager_it), where=f"rest of the iterator, call {call}")
        assert_same(comp_lst, eager_lst, where=f"the list, call {call}")


# ----------------------------------------------------------------------------- globals and graph breaks

G_LIST = []
G_DICT = {}


def _reset_globals():
    G_LIST[:] = [torch.full((2,), float(i)) for i in range(3)]
    G_DICT.clear()


def _globals():
    return clone_tree((G_LIST, G_DICT))


def global_item_read_then_deleted(t):
    v = G_LIST[0]
    del G_LIST[0]
    G_DICT["k"] = v
    del G_LIST[-1]
    return t + 1


@graphjit.disable
def host_double(v):
    return v * 2                              # runs in CPython: a graph break


def item_passed_to_a_break_after_delete(t, lst):
    v = lst[0]
    del lst[0]
    return host_double(v) + t, len(lst)


def item_doubled_at_break_after_reorder(t, lst, d):
    v = lst[-1]
    lst.reverse()
    d["v"] = host_double(v)
    lst.pop()
    return t + d["v"]


def test_global_list_item_stored_in_global_dict():
    check_break(global_item_read_then_deleted, lambda: (r(2),), graphs=1,
                world=World(_reset_globals, _globals, nonempty=True))


@pytest.mark.parametrize("fn, make_args", [
    (item_passed_to_a_break_after_delete, lambda: (r(2), tensors(3))),
    (item_doubled_at_break_after_reorder, lambda: (r(2), tensors(3), {})),
], ids=["passed_to_break", "after_reorder"])
def test_break_operands_are_the_traced_objects(fn, make_args):
    """The instruction run in CPython at a graph break gets the objects the traced code had on its stack,
    not what a container the replayed effects changed holds now."""
    check_break(fn, make_args, graphs=None)
