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

from .. import logs


@dataclasses.dataclass
class Job:
    """One graph's compile: what comes in, what the shared stages made, and the seconds each stage took
    (`lap`; also kept on the compiled callable as `call.timings`)."""
    gm: object
    example_inputs: list
    facts: object                      # facts.GraphFacts
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


def compile_graph(gm, example_inputs, facts):
    """The compiled callable of gm (gm.forward's signature), or gm.forward where the device refuses the
    graph (the reason logged under GRAPHJIT_LOGS=fusion). Errors propagate (compiler/__init__ decides)."""
    from . import decompose, lowering, scheduler
    device = device_for(example_inputs)
    reason = device.unsupported_reason(gm, example_inputs)
    if reason:
        logs.log("fusion", f"graphjit compiler ({device.name}): running the graph eagerly: {reason}")
        return gm.forward
    start = time.perf_counter()
    job = Job(gm, list(example_inputs), facts)
    unit = device(job)
    job.aten_gm = decompose.decompose(gm, example_inputs)
    job.lap("decompose")
    logs.log("graph", lambda: f"graphjit compiler, ATen graph:\n{job.aten_gm.code}")
    job.graph = lowering.lower(job.aten_gm, example_inputs)
    job.graph.verify()
    job.lap("lower")
    logs.log("fusion", lambda: f"loop IR:\n{job.graph}")
    job.items = scheduler.schedule(job.graph)
    job.lap("schedule")
    unit.plan()
    job.lap("plan")
    job.source = unit.codegen()
    job.lap("codegen")
    unit.build()
    job.lap("build")
    call = unit.wrapper()
    job.lap("wrapper")
    n_kernels = sum(isinstance(i, scheduler.Kernel) for i in job.items)
    logs.log("fusion", f"compiled in {time.perf_counter() - start:.2f} s: {n_kernels} {device.name} kernels, "
                       f"{len(job.items) - n_kernels} extern calls ({len(job.graph.fallbacks)} fallbacks)")
    call.graph, call.items, call.source, call.timings = job.graph, job.items, job.source, job.timings
    return call
