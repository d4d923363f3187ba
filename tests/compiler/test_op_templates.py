"""decompose by templates (compiler/op_templates.py): the ATen graph built from one make_fx trace per distinct
call is make_fx's trace of the whole graph, node for node: the same ops on the same arguments in the same
order, the same fake values (sizes, strides, offsets, dtypes) sharing memory exactly where the whole trace's
share it, and the same constants. Checked on the zoo's models and on programs written to reach each case the
templates handle: writes (into intermediates, through views, into inputs), an op returning its own argument,
arguments that are one tensor or share memory, tensors passed by keyword, tuple and named-tuple results,
constants, random ops and decompose's own forms and layouts. Compiled results against eager for the writing
programs."""
import copy
import operator

import pytest
import torch

import graphjit
from graphjit import config as gj_config
from graphjit.compiler import decompose, op_templates
from graphjit.testing import assert_same

from ..models.zoo import ZOO, build, missing


def captured(fn, *args, **kwargs):
    """The graphs (gm, example_inputs) graphjit's frontend hands its backend for fn(*args, **kwargs)."""
    got = []

    def backend(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward
    with torch.no_grad():
        graphjit.compile(fn, backend=backend)(*args, **kwargs)
    assert got, "nothing was captured"
    return got


def signature(gm):
    """Every node of gm as (op, target, arguments with nodes as positions, meta keys, value), values with
    the index of their memory (in the order first seen), its size and their flags; constants by value."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    first = {}

    def value(v):
        if isinstance(v, torch.Tensor):
            shared = first.setdefault(v.untyped_storage()._cdata, len(first))
            return ("tensor", tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, v.device.type, shared,
                    v.untyped_storage().nbytes(), v.requires_grad, v._is_view())
        if isinstance(v, (tuple, list)):
            return tuple(value(x) for x in v)
        return repr(v)

    out = []
    for n in nodes:
        def arg(a):
            return ("node", index[a])
        target = n.target
        if n.op == "get_attr":
            constant = getattr(gm, n.target)
            target = ("constant", tuple(constant.shape), constant.dtype, constant.tolist()) \
                if isinstance(constant, torch.Tensor) else repr(constant)
        elif n.op == "placeholder":
            target = None
        out.append((n.op, str(target), repr(torch.fx.node.map_arg(n.args, arg)),
                    repr(torch.fx.node.map_arg(n.kwargs, arg)), sorted(n.meta), value(n.meta.get("val"))))
    return out


def first_traces(gm, example_inputs):
    """decompose's first trace of gm, by make_fx whole and by templates (None where they don't apply)."""
    gm = copy.deepcopy(gm)
    decompose.fold_constant_attention_masks(gm)
    trace = decompose.tracer()
    with torch.no_grad():
        whole = decompose.first_trace(gm, example_inputs, trace, templates=False)
        ours = op_templates.trace_by_templates(gm, example_inputs, trace, decompose._call_layouts, always=True)
    return whole, ours


def assert_same_graphs(graphs):
    """For each captured graph: templates give the whole trace's graph. Returns how many they built."""
    built = 0
    for gm, example_inputs in graphs:
        whole, ours = first_traces(gm, example_inputs)
        if ours is None:
            continue
        built += 1
        expected, got = signature(whole), signature(ours)
        assert len(got) == len(expected), (len(got), len(expected))
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a == b, f"node {i}:\n  templates  {a}\n  whole      {b}"
    return built


# ------------------------------------------------------------------------------------------- programs

def repeated_layers(x, w, b):
    for _ in range(4):
        x = torch.nn.functional.layer_norm(x @ w + b, (x.shape[-1],))
        x = torch.nn.functional.gelu(x) * torch.tensor(0.5) + torch.tensor(1.0)
        q, k = x.split(x.shape[-1] // 2, dim=-1)
        x = torch.cat([q * k, k], dim=-1)
    return x


def write_into_intermediates(x):
    for _ in range(5):
        y = x * 2
        y.relu_()
        x = y.add_(1) - x
    return x


def write_through_views(x):
    for _ in range(5):
        y = x + 1
        v = y.view(-1)
        v.mul_(2)
        x = y.sum(0, keepdim=True) + y
    return x


def write_into_an_input(x, y):
    for _ in range(4):
        x.add_(1)
        y.mul_(x)
    return x * y


def write_by_setitem(x, idx, v):
    for _ in range(3):
        x[idx] = v                  # index_put_ into x, returning None: later reads read its node
        x = x * 2
        x[x > 1] = 0.5
        y = x + 1
    return x, y


def write_through_a_view_by_setitem(x, idx, v):
    y = x.view(-1, 3)
    for _ in range(3):
        y[idx] = v
        z = y.t() + 1
        y = y * z.t()
    return y, z


def own_argument_returned(x):
    for _ in range(5):
        y = (x + 1).contiguous().to(x.dtype)
        y.sub_(0.5)
        x = y * x
    return x


def one_tensor_twice_and_shared_memory(x):
    for _ in range(5):
        x = torch.cat([x, x], dim=0)[: x.shape[0]] + x[0] * x[1]
        x = x + x.t()
    return x


def by_keyword(a, index):
    out = a
    for _ in range(5):
        out = torch.gather(input=out, dim=1, index=index) + torch.where(out > 0, out, other=torch.zeros_like(out))
    return out


def tuple_results(x):
    for _ in range(5):
        values, indices = torch.topk(x, 2, dim=-1)
        best = torch.max(x, dim=-1)
        x = x + values.sum(-1, keepdim=True) + best.values.unsqueeze(-1) + indices[..., :1].to(x.dtype)
    return x


def random_ops(x):
    for _ in range(6):
        x = torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)
    return x


def in_place_view(x):
    for _ in range(4):
        y = x * 2
        y.t_()
        x = y.unsqueeze_(0).squeeze(0)
    return x


def forms_and_layouts(labels, x):
    out = []
    for _ in range(5):
        out.append(torch.nn.functional.one_hot(labels, 5))
        out.append(torch.nn.functional.max_pool1d(x, 2))
    return out


PROGRAMS = {
    "repeated_layers": (repeated_layers, lambda: (torch.randn(2, 8, 16), torch.randn(16, 16), torch.randn(16))),
    "write_into_intermediates": (write_into_intermediates, lambda: (torch.randn(4, 5),)),
    "write_through_views": (write_through_views, lambda: (torch.randn(4, 5),)),
    "write_into_an_input": (write_into_an_input, lambda: (torch.randn(4, 5), torch.randn(4, 5))),
    "write_by_setitem": (write_by_setitem, lambda: (torch.randn(5, 3), torch.tensor([0, 2]), torch.randn(3))),
    "write_through_a_view_by_setitem": (write_through_a_view_by_setitem,
                                        lambda: (torch.randn(5, 3), torch.tensor([0, 2]), torch.randn(3))),
    "own_argument_returned": (own_argument_returned, lambda: (torch.randn(4, 5),)),
    "one_tensor_twice_and_shared_memory": (one_tensor_twice_and_shared_memory, lambda: (torch.randn(5, 5),)),
    "by_keyword": (by_keyword, lambda: (torch.randn(4, 6), torch.randint(0, 6, (4, 6)))),
    "tuple_results": (tuple_results, lambda: (torch.randn(3, 7),)),
    "random_ops": (random_ops, lambda: (torch.randn(4, 5),)),
    "in_place_view": (in_place_view, lambda: (torch.randn(3, 3),)),
    "forms_and_layouts": (forms_and_layouts, lambda: (torch.randint(0, 5, (6,)), torch.randn(2, 3, 8))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_templates_give_the_whole_trace(name):
    fn, make = PROGRAMS[name]
    built = assert_same_graphs(captured(fn, *make()))
    if name not in ("in_place_view",):
        assert built, "the templates built no graph"


def test_a_call_changing_sizes_in_place_is_traced_whole():
    (gm, example_inputs), = captured(in_place_view, torch.randn(3, 3))
    assert first_traces(gm, example_inputs)[1] is None
    (gm, example_inputs), = captured(write_into_intermediates, torch.randn(3, 3))     # what it does build
    assert first_traces(gm, example_inputs)[1] is not None


@pytest.mark.parametrize("name", ["write_into_intermediates", "write_through_views", "write_into_an_input",
                                  "write_by_setitem", "write_through_a_view_by_setitem",
                                  "own_argument_returned", "by_keyword", "tuple_results"])
def test_compiled_writing_programs_match_eager(name, monkeypatch):
    monkeypatch.setattr(gj_config, "decompose_by_templates", 2)
    fn, make = PROGRAMS[name]
    compiled = graphjit.compile(fn)
    for seed in range(3):
        torch.manual_seed(seed)
        args = make()
        mine = tuple(a.clone() for a in args)
        expected = fn(*args)
        got = compiled(*mine)
        assert_same(got, expected)
        assert_same(mine, args, where="the arguments after the call")


@pytest.mark.parametrize("key", sorted(ZOO))
def test_zoo_graphs(key):
    spec = ZOO[key]
    reason = missing(spec)
    if reason:
        pytest.skip(reason)
    model, inputs = build(spec)
    model.eval()
    graphs = captured(model, **inputs)
    assert assert_same_graphs(graphs) == len(graphs)


def test_a_repeated_model_is_built_from_few_traces(monkeypatch):
    """Two-layer GPT-2: every distinct call traced once, in the one batch the captured values foresee."""
    spec = ZOO["gpt2"]
    if missing(spec):
        pytest.skip(missing(spec))
    model, inputs = build(spec)
    (gm, example_inputs), = captured(model.eval(), **inputs)
    traces = []
    real = decompose.make_fx

    def counted(*args, **kwargs):
        traced = real(*args, **kwargs)

        def run(*a):
            traces.append(1)
            return traced(*a)
        return run
    monkeypatch.setattr(decompose, "make_fx", counted)
    aten = decompose.decompose(gm, example_inputs)
    assert len(traces) == 1
    calls = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method") and n.target is not operator.getitem)
    assert calls > 40 and len([n for n in aten.graph.nodes if n.op == "call_function"]) > 40
