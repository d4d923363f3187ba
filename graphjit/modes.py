"""compile(mode=...): the named modes, as in torch.compile, and what each turns on.

    mode                          CUDA graphs   autotuning    backend when none is given
    None / "default"              no            no            config.default_backend
    "reduce-overhead"             yes           no            "graphjit"
    "max-autotune"                yes           yes           "graphjit"
    "max-autotune-no-cudagraphs"  no            yes           "graphjit"

A mode belongs to one compile() call: backends.registry.lookup_backend(backend, mode) gives the callable
that compiles in it. CUDA graphs (backends/cudagraphs.py) wrap whatever callable the backend returns, so
they apply to any backend; autotuning is an option of graphjit's own compiler, which gets the mode as its
`mode` argument. Nothing here is process state: two models compiled in different modes, in one thread or
two, each keep their own. On the CPU both degrade to the default mode (the reason is logged under
GRAPHJIT_LOGS=cudagraphs).
"""
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


def lookup(name):
    """The Mode called `name` (None is "default"); a ValueError naming the known modes otherwise."""
    if name is None:
        return _DEFAULT
    if not isinstance(name, str) or name not in MODES:
        raise ValueError(f"graphjit.compile: unknown mode {name!r}; known modes: {', '.join(MODES)}")
    return MODES[name]

