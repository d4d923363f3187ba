"""graphjit: a JIT compiler for PyTorch, written in Python.

    model = graphjit.compile(model)

See docs/ARCHITECTURE.md for how it works.
"""
from . import config
from .api import (compile, compile_regions, explain, reset, disable, allow_in_graph, ExplainOutput,
                  save_cache_artifacts, load_cache_artifacts)
from .backends.registry import register_backend, list_backends
from .capture.dynamic import mark_dynamic, maybe_mark_dynamic, mark_static
from .exc import Unsupported
from .reporting import report

__version__ = "0.1.0"
__all__ = ["compile", "compile_regions", "explain", "reset", "disable", "allow_in_graph", "register_backend", "list_backends",
           "Unsupported", "ExplainOutput", "config", "mark_dynamic", "maybe_mark_dynamic", "mark_static", "report",
           "save_cache_artifacts", "load_cache_artifacts"]

from .reporting import start_from_environment as _start_report
_start_report()             # GRAPHJIT_REPORT=path
