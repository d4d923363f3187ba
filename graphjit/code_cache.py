"""Compiled generated sources, kept on disk: a later process execs the code object Python compiled from
the same source instead of compiling it again.

A GPT-2 entry's guard function is a few thousand lines; `compile()` takes 0.03-0.04 s of a warm start
for it, `marshal.loads` of its code object about 1 ms. The file is keyed by a hash of the source, its file
name and the interpreter's bytecode magic number, so it only ever holds what `compile(source, filename,
"exec")` gives in this interpreter. Each file is the SHA-256 of its payload followed by the payload
(marshal's bytes of the code object): a truncated or altered file is noticed, removed with a warning, and
the source compiled again. Files are written whole (a temporary file, then a rename) into a folder private
to the user, like the kernels beside them.
"""
import hashlib
import importlib.util
import marshal
import os
import types

from . import config, logs
from .cache_files import discard, write_whole

MIN_CHARS = 4000        # smaller sources compile in well under a millisecond: not worth a file


def _path(source, filename):
    h = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    h.update(filename.encode("utf-8", "surrogatepass") + b"\0")
    h.update(source.encode("utf-8", "surrogatepass"))
    return os.path.join(config.cache_dir, "code", h.hexdigest()[:40] + ".bin")


def compile_source(source, filename):
    """compile(source, filename, "exec"), through the on-disk cache where config.graph_cache is on."""
    if len(source) < MIN_CHARS or not config.graph_cache:
        return compile(source, filename, "exec")
    path = _path(source, filename)
    code = _read(path)
    if code is None:
        code = compile(source, filename, "exec")
        _write(path, code)
    return code


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        digest, payload = data[:32], data[32:]
        if len(digest) < 32 or hashlib.sha256(payload).digest() != digest:
            raise ValueError("its digest does not match its content (truncated or altered)")
        code = marshal.loads(payload)
        if type(code) is not types.CodeType:
            raise ValueError(f"it holds a {type(code).__name__}, not a code object")
        return code
    except Exception as e:   # noqa: BLE001 -- any fault of the file: compile again
        discard(path, f"graphjit: the compiled-source cache file {path} is unusable ({type(e).__name__}: {e}); "
                      f"it is removed and the source compiled again")
        return None


def _write(path, code):
    payload = marshal.dumps(code)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_whole(path, hashlib.sha256(payload).digest() + payload, prefix=".code.")
    except OSError as e:        # a read-only or full disk: the next process compiles the source again
        logs.log("fusion", f"could not write the compiled-source cache file {path}: {e}")
