"""Helpers for testing graphjit: a backend that counts what it is handed.

    >>> counter = CompileCounter()
    >>> f = graphjit.compile(lambda x: x.sin() + 1, backend=counter)
    >>> _ = f(torch.ones(3)); (counter.frame_count, counter.op_count)
    (1, 2)

Depends on torch only, so the same counter also works as a torch.compile backend (handy to check a test's
expectations against a mature frontend).
"""
import torch

# fx node kinds that do work; placeholders, get_attr and output don't count as ops.
OP_KINDS = ("call_function", "call_method", "call_module")


class CompileCounter:
    """A backend (`backend(gm, example_inputs) -> callable`) that records each graph and runs it as is.

    frame_count: how many graphs it was handed (one per compiled graph, so one per (re)compile of a frame
                 without graph breaks).
    op_count:    call_function/call_method/call_module nodes summed over all those graphs.
    graphs:      the GraphModules, in the order received.
    """

    def __init__(self):
        self.clear()

    def clear(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs = []
        self.example_inputs = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.frame_count += 1
        self.op_count += sum(1 for node in gm.graph.nodes if node.op in OP_KINDS)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    def __repr__(self):
        return f"CompileCounter(frame_count={self.frame_count}, op_count={self.op_count})"
