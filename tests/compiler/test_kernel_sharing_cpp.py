"""Repeated layers share one C++ body: a kernel whose text, with its name and pointer parameters renamed by
position, equals an earlier kernel's is printed as a call of that kernel (codegen/cpp.py `_positional`), so
gcc optimizes the loop once. Results match eager, and kernels that differ in a constant keep their own
bodies."""
import re

import torch

import graphjit
from graphjit.compiler.codegen import cpp

from .test_kernel_sharing import blocks, scheduled     # (that module's tests need Triton; these don't)


def scaled_blocks(x, ws):
    for i, w in enumerate(ws):                     # each block scales by its own constant
        h = torch.nn.functional.layer_norm(x, x.shape[-1:]) * (i + 2)
        x = x + torch.nn.functional.gelu(h @ w)
    return x.softmax(-1)


def generated(fn, *args):
    graph, items, _ = scheduled(fn, *args)
    return cpp.generate(graph, items)


def arguments():
    return torch.randn(4, 32), [torch.randn(32, 32) * 0.2 for _ in range(3)]


def test_copies_of_a_layer_call_the_first_ones_body_and_match_eager():
    source, signatures = generated(blocks, *arguments())
    exported = re.findall(r'extern "C" int (kernel\d+)\(', source)
    forwarding = dict(re.findall(r'extern "C" int (kernel\d+)\([^)]*\)\n\{\n    return (kernel\d+)\(', source))
    assert sorted(exported) == sorted(signatures) and len(set(exported)) == len(exported)
    assert forwarding, source                                   # some kernels share a body
    for copy, first in forwarding.items():
        assert exported.index(first) < exported.index(copy) and first not in forwarding
        assert len(signatures[copy].args) == len(signatures[first].args)
    compiled = graphjit.compile(blocks, backend="graphjit")
    for _ in range(2):
        x, ws = arguments()
        torch.testing.assert_close(compiled(x, ws), blocks(x, ws), rtol=1e-5, atol=1e-5)


def test_kernels_differing_in_a_constant_keep_their_own_bodies():
    plain, _ = generated(blocks, *arguments())
    scaled, _ = generated(scaled_blocks, *arguments())
    assert len(re.findall(r"\n    return kernel\d+\(", scaled)) < len(re.findall(r"\n    return kernel\d+\(", plain))
    compiled = graphjit.compile(scaled_blocks, backend="graphjit")
    for _ in range(2):
        x, ws = arguments()
        torch.testing.assert_close(compiled(x, ws), scaled_blocks(x, ws), rtol=1e-5, atol=1e-5)
