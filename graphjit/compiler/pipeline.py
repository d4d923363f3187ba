"""The compiler's one driver: every graph, for either device, goes through these stages in this order.

    decompose   fx graph -> functional core-ATen graph                     decompose.py
    lower       ATen graph -> LoopGraph (pointwise/reduction nodes, externs) lowering.py, ir.py
    schedule    LoopGraph -> kernels and extern calls                      scheduler.py
    plan        the device's choices: kernel checks, autotuning            device
    codegen     kernels -> source (and matmul templates)                    device
    build       source -> loaded kernels (compile, autotune)                device
    wrapper     the Python `call` that allocates, launches and returns      device

A device is a class built per compile from the Job, with plan(), codegen() -> source, build() and
wrapper() -> callable: codegen/cpp.CppDevice (C++/OpenMP on the CPU) and codegen/triton.TritonDevice
(CUDA, or the CPU under GRAPHJIT_TRITON_CPU=1). Everything before `plan` is shared, written once.
"""
import dataclasses
import time

import torch

from .. import config, logs, reporting
from ..progress import Progress


STAGES = ("decompose", "lower", "schedule", "plan", "codegen", "build", "wrapper")


@dataclasses.dataclass
class Job:
    """One graph's compile: what comes in, what the shared stages made, and the seconds each stage took
    (`lap`; also kept on the compiled callable as `call.timings`)."""
    gm: object
    example_inputs: list               # fake tensors and SymInts where the graph has size symbols
    facts: object                      # facts.GraphFacts
    concrete_inputs: list = None       # the real example inputs (autotuning runs kernels on them)
    aten_gm: object = None
    graph: object = None               # ir.LoopGraph
    items: list = None                 # scheduler output: Kernels and extern calls
    source: str = None
    timings: dict = dataclasses.field(default_factory=dict)
    _clock: float = dataclasses.field(default_factory=time.perf_counter)

    def lap(self, phase):
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - self._clock
        self._clock = now


def device_for(example_inputs):
    """The device class that compiles a graph with these example inputs."""
    from .codegen import cpp, triton
    return triton.TritonDevice if triton.TritonDevice.wants(example_inputs) else cpp.CppDevice


def symbolic_example(gm):
    """(the fake example inputs, their ShapeEnv) of a graph whose placeholders carry size symbols in
    meta["example_value"] (capture/dynamic.py, or torch.compile's dynamic graphs); (None, None) if none do."""
    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    env = None
    for v in values:
        sizes = (v,) if isinstance(v, (torch.SymInt, torch.SymFloat)) else \
            (*v.shape, *v.stride()) if isinstance(v, torch.Tensor) else ()
        for s in sizes:
            if isinstance(s, (torch.SymInt, torch.SymFloat)) and s.node.shape_env is not None and \
                    not s.node.is_constant():
                env = s.node.shape_env
    if env is None or any(v is None for v in values):
        return None, None
    return values, env


def _check_as_given(fakes, example_inputs):
    """StaticOnly unless each fake input has its example's sizes and strides: capture's fake values are
    the trace's own, which an in-place metadata change (x.unsqueeze_(0), x.t_()) rewrote."""
    from .ir import StaticOnly, as_expr, size_hint
    from torch._subclasses.fake_tensor import FakeTensor
    for i, (fake, real) in enumerate(zip(fakes, example_inputs)):
        if not isinstance(fake, torch.Tensor) or not isinstance(real, torch.Tensor) or isinstance(real, FakeTensor):
            continue        # (a fake example, AOTAutograd's for a half of a symbolic training graph, is the trace's)
        if fake.dim() != real.dim() or \
                [size_hint(as_expr(n)) for n in (*fake.shape, *fake.stride())] != [*real.shape, *real.stride()]:
            raise StaticOnly(f"input {i}'s traced sizes are not those it comes in with (an in-place "
                             f"change of its shape)")


def compile_graph(gm, example_inputs, facts):
    """The compiled callable of gm (gm.forward's signature), or gm.forward where the device refuses the
    graph (the reason logged under GRAPHJIT_LOGS=fusion). Errors propagate (compiler/__init__ decides).

    A graph with size symbols (symbolic_example) is compiled once for all its sizes: kernels take the
    symbols as arguments, the wrapper reads them off its inputs. Where a stage needs a concrete size it
    raises ir.StaticOnly, which the caller answers by compiling per size (backends/dynamic.PerSize)."""
    from torch._guards import tracing
    from . import ir
    fakes, shape_env = symbolic_example(gm)
    if fakes is None:
        # concrete sizes: the trace makes its own fake tensors, whatever fake mode a caller's tracing
        # context holds (torch.compile calls backends inside one, whose ShapeEnv would make sizes symbolic)
        with tracing(None), ir.sizes_of(None):
            return _compile(gm, _runnable(example_inputs, facts), example_inputs, facts)
    from torch._dispatch.python import enable_python_dispatcher
    # under the Python dispatcher, as capture traced: decompositions registered in Python see the symbols
    # (without it, CPU attention's on torch 2.11 specialized every size)
    with ir.sizes_of(shape_env), enable_python_dispatcher():
        _check_as_given(fakes, example_inputs)
        try:
            return _compile(gm, example_inputs, fakes, facts)
        except TypeError as e:
            # a stage that compares or converts a size as if it were concrete (sympy refuses: "cannot
            # determine truth value of Relational", "Cannot convert symbols to int"): compile per size
            if "Relational" in str(e) or "symbols to int" in str(e) or "expression to" in str(e):
                raise ir.StaticOnly(f"a compiler stage needs concrete sizes ({e}, at {_where(e)})") from e
            raise


def _runnable(example_inputs, facts):
    """The example inputs, with real tensors in place of fake ones where autotuning will run kernels on
    them (AOTAutograd hands its compilers fake inputs): random floats, zeros otherwise (an index read
    from one stays in range). The floats come from a generator of their own: a compile leaves torch's
    generators where the user's program left them."""
    from torch._subclasses.fake_tensor import FakeTensor
    if not facts.autotune or not any(isinstance(t, FakeTensor) for t in example_inputs):
        return example_inputs
    generators = {}

    def real(t):
        if not isinstance(t, FakeTensor):
            return t
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        if not out.is_floating_point():
            return out.zero_()
        if t.device not in generators:
            generators[t.device] = torch.Generator(device=t.device).manual_seed(0)
        return out.normal_(generator=generators[t.device])
    return [real(t) for t in example_inputs]


def _where(error):
    """file:line of the innermost graphjit frame an error passed through."""
    import os
    import traceback
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # the graphjit package
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(root)]
    return f"{os.path.relpath(frames[-1].filename, root)}:{frames[-1].lineno}" if frames else "?"


def _compile(gm, concrete_inputs, example_inputs, facts):
    with reporting.compiling():       # a profiled compile report leaves compile work out of run times
        return _run_stages(gm, concrete_inputs, example_inputs, facts)


def _run_stages(gm, concrete_inputs, example_inputs, facts):
    from .runtime import graph_cache
    device = device_for(concrete_inputs)
    reason = device.unsupported_reason(gm, example_inputs)
    if reason:
        logs.log("fusion", f"graphjit compiler ({device.name}): running the graph eagerly: {reason}")
        reporting.emit("refused", name=_name(gm), device=device.name, reason=str(reason))
        return gm.forward
    start = time.perf_counter()
    # the on-disk cache of compiled graphs: a graph compiled by an earlier process is loaded, not compiled
    cache_key = graph_cache.key_for(device, gm, concrete_inputs, example_inputs, facts)
    if cache_key is not None:
        call = graph_cache.load(cache_key, gm, facts)
        if call is not None:
            logs.log("fusion", f"graph {facts.name} loaded from the compiled-graph cache "
                               f"({time.perf_counter() - start:.3f} s: {call.kernel_count} kernels)")
            if reporting.active():
                reporting.compile_event({"name": _name(gm), "device": device.name, "language": device.name,
                                         "stages": dict(call.timings), "kernels": call.kernels, "externs": [],
                                         "source": reporting._clip(call.source), "cached": True,
                                         "wrapper": reporting._clip(call.wrapper_source)})
            return call
    from . import decompose, lowering, scheduler     # not imported where the cache serves every graph
    env = graph_cache.shape_env()
    known_guards = len(env.guards) if env is not None else 0
    job = Job(gm, list(example_inputs), facts, concrete_inputs=list(concrete_inputs))
    # a compile past a second shows its stage on stderr (progress.py: a terminal redraws one line)
    progress = Progress(f"compiling {facts.name} ({device.name})", total=len(STAGES), after=1.0, start=start)

    def lap(stage):
        job.lap(stage)
        done = STAGES.index(stage) + 1
        progress.update(done, f"next: {STAGES[done]}" if done < len(STAGES) else "")
    unit = device(job)
    job.aten_gm = decompose.decompose(gm, example_inputs, traced_by_aot=facts.autograd)
    if device.name == "Triton" and config.conv_channels_last and not facts.autograd and \
            not decompose._writes(job.aten_gm) and decompose.channels_last_convolutions(job.aten_gm):
        logs.log("fusion", f"{facts.name}: convolutions computed channels-last")
    lap("decompose")
    logs.log("graph", lambda: f"graphjit compiler, ATen graph:\n{job.aten_gm.code}")
    job.graph = lowering.lower(job.aten_gm, example_inputs, autograd=facts.autograd)
    job.graph.verify()
    lap("lower")
    logs.log("fusion", lambda: f"loop IR:\n{job.graph}")
    job.items = scheduler.schedule(job.graph)
    lap("schedule")
    unit.plan()
    lap("plan")
    job.source = unit.codegen()
    lap("codegen")
    unit.build()
    lap("build")
    call = unit.wrapper()
    lap("wrapper")
    progress.finish()
    n_kernels = sum(isinstance(i, scheduler.Kernel) for i in job.items)
    logs.log("fusion", f"compiled in {time.perf_counter() - start:.2f} s: {n_kernels} {device.name} kernels, "
                       f"{len(job.items) - n_kernels} extern calls ({len(job.graph.fallbacks)} fallbacks)")
    call.graph, call.items, call.source, call.timings = job.graph, job.items, job.source, job.timings
    call.kernel_count = n_kernels
    if cache_key is not None:
        graph_cache.store(cache_key, job, unit, call, env.guards[known_guards:] if env is not None else ())
    if reporting.active():
        _report(gm, device, job, call)
    return call


def _name(gm):
    return gm.meta.get("graphjit", {}).get("name", "graph")


def _report(gm, device, job, call):
    """The compile report's event for one compiled graph (reporting.py)."""
    from . import scheduler
    kernels = [{"name": i.name, "text": str(i)} for i in job.items if isinstance(i, scheduler.Kernel)]
    externs = [{"name": i.name, "op": str(i.op), "reason": str(getattr(i, "reason", ""))}
               for i in job.items if not isinstance(i, scheduler.Kernel)]
    reporting.compile_event({"name": _name(gm), "device": device.name, "language": device.name,
                             "stages": {k: round(v, 6) for k, v in job.timings.items()},
                             "kernels": kernels, "externs": externs,
                             "fallbacks": [str(f) for f in getattr(job.graph, "fallbacks", ())],
                             "source": reporting._clip(job.source),
                             "wrapper": reporting._clip(getattr(call, "wrapper_source", None))})
