"""GRAPHJIT_LOGS=graph_breaks,recompiles,dynamic,guards,bytecode,graph prints those artifacts to stderr.

Each artifact is a name; `enabled(name)` is cheap, so call sites check it before building a long string.
"""
import sys

from . import config

ARTIFACTS = ("graph_breaks", "recompiles", "dynamic", "guards", "bytecode", "graph", "output_code", "fusion", "cudagraphs",
             "autotune", "onnxrt")


def enabled_set():
    names = {n.strip() for n in config.logs.split(",") if n.strip()}
    if "all" in names:
        return set(ARTIFACTS)
    return names


def enabled(artifact):
    return artifact in enabled_set()


def log(artifact, text):
    """Print `text` under a header naming the artifact, if that artifact is enabled. `text` may be a
    function returning the text, for texts that cost time to build (a graph's listing)."""
    if enabled(artifact):
        print(f"[graphjit:{artifact}] {text() if callable(text) else text}", file=sys.stderr)
