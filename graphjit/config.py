"""Every knob and threshold of graphjit, in one place, each with a comment.

Values can be overridden with environment variables (GRAPHJIT_<NAME>) at import time, or by assigning the
module attribute at run time (`graphjit.config.recompile_limit = 16`).
"""
import os


def _env_int(name, default):
    value = os.environ.get("GRAPHJIT_" + name)
    return int(value) if value else default


def _env_str(name, default):
    return os.environ.get("GRAPHJIT_" + name, default)


# How many cache entries one code object may collect before graphjit stops translating it and runs it
# eagerly (with one warning naming the guard that kept failing). torch.compile uses 8 as well.
recompile_limit = _env_int("RECOMPILE_LIMIT", 8)

# The backend used when compile() is given none: graphjit's own compiler (fused C++/OpenMP kernels on the
# CPU, Triton kernels on NVIDIA GPUs; graphs it can't compile, or that need gradients, run as captured).
# GRAPHJIT_BACKEND=eager runs every captured graph as it is (capture only).
default_backend = _env_str("BACKEND", "graphjit")

# How deep the interpreter inlines user function calls before giving up on the frame (guards against
# unbounded recursion during tracing).
max_inline_depth = _env_int("MAX_INLINE_DEPTH", 64)

# Upper bound on instructions interpreted for one frame, including inlined calls and unrolled loops.
# A frame above it runs eagerly: unrolling a loop of a million iterations is not capture.
max_instructions = _env_int("MAX_INSTRUCTIONS", 2_000_000)

# Comma-separated artifacts to print: graph_breaks, recompiles, guards, graph, bytecode, output_code.
logs = _env_str("LOGS", "")
