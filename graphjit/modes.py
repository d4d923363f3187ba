"""compile(mode=...): the named modes, as in torch.compile, and what each turns on.

    mode                          CUDA graphs   autotuning    backend when none is given
    None / "default"              no            no            config.default_backend
    "reduce-overhead"             yes           no            "graphjit"
    "max-autotune"                yes           yes           "graphjit"
    "max-autotune-no-cudagraphs"  no            yes           "graphjit"

CUDA graphs (backends/cudagraphs.py) wrap whatever callable the backend returns, so they apply to any
backend; autotuning is a knob of graphjit's own compiler, which reads it from `current()` while a graph
compiles. On the CPU both degrade to the default mode (the reason is logged under GRAPHJIT_LOGS=cudagraphs).
"""
import contextlib
import dataclasses


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    cudagraphs: bool = False
    autotune: bool = False


MODES = {
    "default": Mode("default"),
    "reduce-overhead": Mode("reduce-overhead", cudagraphs=True),
    "max-autotune": Mode("max-autotune", cudagraphs=True, autotune=True),
    "max-autotune-no-cudagraphs": Mode("max-autotune-no-cudagraphs", autotune=True),
}

_DEFAULT = MODES["default"]
_current = _DEFAULT
_guarded = False
_static = None


def lookup(name):
    """The Mode called `name` (None is "default"); a ValueError naming the known modes otherwise."""
    if name is None:
        return _DEFAULT
    if not isinstance(name, str) or name not in MODES:
        raise ValueError(f"graphjit.compile: unknown mode {name!r}; known modes: {', '.join(MODES)}")
    return MODES[name]


def current():
    """The mode of the graph being compiled right now (the default mode outside a compile)."""
    return _current


def inputs_guarded():
    """Whether the graph being compiled comes from graphjit's frontend, whose guards check every tensor
    input's dtype, device, shape and strides before the compiled graph runs (so the compiled wrapper need
    not check them again)."""
    return _guarded


def static_inputs():
    """Per graph input, whether it is a module's parameter or buffer (as the frontend knows it; None when
    the graph did not come from it). Those rarely move between calls: checks on their addresses can be
    cached."""
    return _static


@contextlib.contextmanager
def active(mode, guarded=False, static=None):
    global _current, _guarded, _static
    saved = _current, _guarded, _static
    _current, _guarded, _static = mode, guarded, static
    try:
        yield
    finally:
        _current, _guarded, _static = saved
