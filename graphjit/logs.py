"""GRAPHJIT_LOGS=graph_breaks,recompiles,dynamic,guards,bytecode,graph prints those artifacts to stderr.

Each artifact is a name; `enabled(name)` is cheap, so call sites check it before building a long string.
"""
import sys

from . import config, reporting

ARTIFACTS = ("graph_breaks", "recompiles", "dynamic", "guards", "bytecode", "graph", "output_code", "fusion", "cudagraphs",
             "autotune", "onnxrt")


_PARSED = {}     # config.logs -> the artifacts it names (one warning per unknown name)


def enabled_set():
    raw = config.logs
    names = _PARSED.get(raw)
    if names is None:
        names = {n.strip() for n in raw.split(",") if n.strip()}
        unknown = sorted(names - set(ARTIFACTS) - {"all"})
        if unknown:
            import warnings
            warnings.warn(f"graphjit: GRAPHJIT_LOGS names no artifact {', '.join(map(repr, unknown))} (the "
                          f"artifacts: all, {', '.join(ARTIFACTS)})", RuntimeWarning, stacklevel=3)
        names = frozenset(ARTIFACTS) if "all" in names else frozenset(names) & frozenset(ARTIFACTS)
        _PARSED[raw] = names
    return names


def enabled(artifact):
    return artifact in enabled_set()


def wanted(artifact):
    """Whether a log of `artifact` is read: printed (enabled) or kept by an open compile report."""
    return enabled(artifact) or reporting.active()


def log(artifact, text):
    """Print `text` under a header naming the artifact, if that artifact is enabled, and keep it in an open
    compile report (reporting.py). `text` may be a function returning the text, for texts that cost time to
    build (a graph's listing)."""
    # a report keeps guards with their translation's event, not twice
    shown, kept = enabled(artifact), reporting.active() and artifact != "guards"
    if not (shown or kept):
        return
    text = text() if callable(text) else text
    if shown:
        print(f"[graphjit:{artifact}] {text}", file=sys.stderr)
    if kept:
        reporting.emit("log", artifact=artifact, text=reporting._clip(str(text)))


class quiet_meta_failures:
    """A context: torch's fake-tensor logger does not print the traceback of an op whose meta function
    raised (`failed while attempting to run meta for ...`). The error itself propagates: capture runs the
    code in CPython, where the user sees eager's own error (`-bool_tensor`), and a compile that fails
    reports it; the traceback on stderr only made a user's mistake look like a crash inside torch."""

    _logger = None          # torch's fake-tensor logger, looked up at the first use (capture enters this per op)

    def __enter__(self):
        logger = quiet_meta_failures._logger
        if logger is None:
            import logging
            logger = quiet_meta_failures._logger = logging.getLogger("torch._subclasses.fake_tensor")
        logger.addFilter(self)
        return self

    def __exit__(self, *exc):
        quiet_meta_failures._logger.removeFilter(self)

    @staticmethod
    def filter(record):
        return not str(record.msg).startswith("failed while attempting to run meta")
