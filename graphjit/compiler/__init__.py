"""graphjit's optimizing backend: fx graph -> fused kernels (C++/OpenMP on the CPU, Triton on NVIDIA GPUs) + a
Python wrapper calling them.

pipeline.py runs the stages in order, for both devices (read it first):

    decompose.py       fx graph -> functional core-ATen graph (make_fx, fake tensors)
    lowering.py        ATen graph -> LoopGraph (ir.py): pointwise/reduction nodes, extern ATen calls
    scheduler.py       LoopGraph -> kernels: which nodes share a loop nest, and why not
    codegen/cpp.py     CppDevice: kernels -> one C++ translation unit, built by runtime/cpp_build.py
    codegen/triton.py  TritonDevice: kernels -> Triton source, built (and autotuned) by runtime/triton_build.py
    codegen/wrapper.py the Python function that allocates buffers and calls kernels and extern ops

    compiled = compile_graph(gm, example_inputs, mode=None)     # the `graphjit` backend

What the compiler is told about a graph besides its nodes (the mode, facts about its inputs) is a
facts.GraphFacts, made once per compile from the mode and gm.meta and handed down the stages.
"""
import contextlib
import threading
import warnings

import torch

from .. import gcpause, logs


_compile_lock = threading.RLock()   # one compile at a time: lowering keeps the node being lowered in module state


@contextlib.contextmanager
def compiling():
    """The state a compile runs in: out of inference mode, whatever the caller's (make_fx's fake-tensor
    tracing under inference mode took about twice as long: GPT-2 prefill's decompose on the H200 host went
    from 1.44 to 0.80 s, benchmarks/RESULTS.md 2026-11-30 08:05 UTC), and with the cyclic garbage collector paused
    (its full passes over the caller's heap, a model and the capture's objects, run often while make_fx
    allocates). Nothing a compile makes and keeps needs inference mode: its constants are ordinary
    tensors, usable under it. Grad mode stays the caller's. Fake copies of inference tensors are made as
    ordinary tensors (torch's own switch, as Dynamo does), so a graph that writes into an input created
    under inference mode (a KV cache) can still be traced with its write-back. The collector's pause is
    gcpause's, shared with translations.
    A fake-tensor mode the caller has active (AOTAutograd calls its compilers inside its own) is set
    aside: constant folding evaluates real tensors, and kernels must not be handed fake ones."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch._subclasses.meta_utils import disable_inference_mode_for_fake_prop
    grad = torch.is_grad_enabled()          # before leaving inference mode, which turns grad mode on
    with gcpause.paused(), torch.inference_mode(False), torch.set_grad_enabled(grad), \
            disable_inference_mode_for_fake_prop(), unset_fake_temporarily():
        yield


def compile_graph(gm, example_inputs, mode=None, options=None):
    """Compile an fx graph for its example inputs in `mode` (a name of modes.MODES; autotuning in the
    max-autotune modes), with `options` (graphjit.config knobs, backends.registry.check_options) set while
    it compiles; returns a callable with gm.forward's signature.
    Graphs the compiler can't handle (see graph_checks.py) run gm.forward, with the reason
    logged under GRAPHJIT_LOGS=fusion; a missing or failing C++ compiler, or an error in the compiler,
    warns once and runs the graph eagerly (GRAPHJIT_COMPILER_RAISE=1 raises instead)."""
    from .facts import GraphFacts
    facts = GraphFacts.of(gm, mode)
    from .. import config
    with _compile_lock, compiling(), config.patch(**(options or {})):
        return _compile_graph(gm, example_inputs, facts)


def _compile_graph(gm, example_inputs, facts):
    from .. import config
    from . import pipeline
    from .graph_checks import Refused
    from .ir import StaticOnly
    from .runtime import CompileError
    try:
        return pipeline.compile_graph(gm, example_inputs, facts)
    except StaticOnly:
        raise       # the caller compiles per size
    except Refused as e:
        # a graph whose semantics a compiled one would not keep: the graph as captured, the reason logged
        logs.log("fusion", f"graphjit compiler: running the graph eagerly: {e}")
    except CompileError as e:
        if config.raise_errors:      # generated code that doesn't compile is a graphjit bug: tests fail on it
            raise
        _warn_once(f"graphjit: {e}\nRunning this graph eagerly.")
    except Exception as e:
        if config.raise_errors:
            raise
        _warn_once(f"graphjit compiler failed ({type(e).__name__}: {e}); running this graph eagerly. "
                   "GRAPHJIT_COMPILER_RAISE=1 raises the error instead.")
    return gm.forward


_warned = set()


def _warn_once(message):
    key = message.splitlines()[0]
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
