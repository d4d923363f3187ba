"""Compiling and loading kernels, and their caches (C++ today; Triton, CUDA graphs, autotuning next)."""
from .cpp_build import CompileError, load

__all__ = ["CompileError", "load"]
