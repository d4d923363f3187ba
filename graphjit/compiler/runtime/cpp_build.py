"""Compile C++ source into a shared library (cached on disk) and load it with ctypes.

The cache key hashes the source, the compiler's version, the flags, the CPU (-march=native code may
not run elsewhere) and config.codegen_key(). A library is written under a temporary name and renamed into place, so readers never
see half a file; each library exports gj_cache_key() returning its key, and a cached file whose load fails
or whose key differs is rebuilt, never trusted. Beside each library, `<key>.so.sha256` holds the SHA-256 of
its bytes, checked before the library is loaded: a truncated or damaged file (which the dynamic loader may
crash on, SIGBUS, rather than refuse) is rebuilt too.

    lib = load(source)            # ctypes.CDLL
"""
import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import warnings

from ...cache_files import write_whole
from ... import logs
from ... import config


class CompileError(RuntimeError):
    """The C++ compiler is missing or failed; the message says which, and how to reproduce."""


_loaded = {}          # cache key -> CDLL (this process)
_paths = {}           # cache key -> the path its library was loaded from
_private = []         # this process's own folder for libraries, where the cache folder can't be written
_dlopened = set()     # paths dlopen()ed by this process: dlopen returns the old handle for a known path
_compiler_ids = {}


def compiler_id():
    """The first line of `$CXX --version`; CompileError if there is no such compiler."""
    cxx = config.cxx
    if cxx not in _compiler_ids:
        path = shutil.which(cxx)
        if path is None:
            raise CompileError(f"C++ compiler {cxx!r} not found on PATH (set GRAPHJIT_CXX to use another)")
        out = subprocess.run([path, "--version"], capture_output=True, text=True)
        _compiler_ids[cxx] = (path, out.stdout.splitlines()[0] if out.stdout else path)
    return _compiler_ids[cxx]


def _cpu_id():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return os.uname().machine
    keep = [line for line in info.splitlines() if line.startswith(("model name", "flags"))][:2]
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:16]


def cache_key(source):
    _, version = compiler_id()
    text = "\0".join([source, version, " ".join(config.cxx_flags), _cpu_id(), config.codegen_key()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load(source):
    """The loaded library of `source`, compiled (or found in the cache) as needed."""
    key = cache_key(source)
    if key in _loaded:
        return _loaded[key]
    path = os.path.join(config.cache_dir, f"{key}.so")
    lib = _try_load(path, key) if os.path.exists(path) else None
    if lib is None:
        if os.path.exists(path):
            logs.log("output_code", f"cached kernel library {path} is unusable; rebuilding it")
        if not _writable(config.cache_dir):
            path = os.path.join(_private_dir(), f"{key}.so")
        _build(source, key, path)
        lib = _try_load(path, key)
        if lib is None:
            raise CompileError(f"compiled {path} but could not load it")
    _loaded[key] = lib
    _paths[key] = path
    return lib


def built_path(source):
    """The path of source's library, built (or found in the cache) and loaded, for another library to link."""
    key = cache_key(source)
    if not os.path.exists(_paths.get(key, "")):
        _loaded.pop(key, None)
    load(source)
    return _paths[key]


def _writable(folder):
    """Whether libraries can be written into folder (made where missing): a read-only cache (an image's, a
    read-only mount) still serves the libraries it holds, and the rest are built in a folder of this
    process's own."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _private_dir():
    if not _private:
        _private.append(tempfile.mkdtemp(prefix="graphjit-kernels-"))
        warnings.warn(f"graphjit: the cache folder {config.cache_dir} can't be written; kernels built in this "
                       f"process go to {_private[0]} and are not kept for later processes", RuntimeWarning)
    return _private[0]


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _intact(path, load_path):
    """Whether load_path (the library at path, or a copy of it) has the bytes path's .sha256 file names."""
    try:
        with open(path + ".sha256") as f:
            return f.read().strip() == _digest(load_path)
    except OSError:
        return False


def _try_load(path, key):
    """CDLL of path if it is intact, loads and reports `key`, else None (and the bad file is removed)."""
    load_path = path
    if path in _dlopened:                  # a fresh file at a path loaded before: load it via a copy
        load_path = f"{path}.{os.getpid()}.{time.monotonic_ns()}.so"
        shutil.copyfile(path, load_path)
    try:
        if not _intact(path, load_path):
            raise OSError("damaged")
        lib = ctypes.CDLL(load_path)
        _dlopened.add(load_path)
        get_key = lib.gj_cache_key
        get_key.restype = ctypes.c_char_p
        if get_key().decode() == key:
            return lib
    except (OSError, AttributeError, UnicodeDecodeError):
        pass
    finally:
        if load_path != path:
            os.unlink(load_path)
    for bad in (path, path + ".sha256"):
        try:
            os.unlink(bad)
        except OSError:
            pass
    return None


def _build(source, key, path):
    cxx, _ = compiler_id()
    source = source + f'\nextern "C" const char* gj_cache_key() {{ return "{key}"; }}\n'
    folder = os.path.dirname(path)
    cpp_path = os.path.join(folder, f"{key}.cpp")
    write_whole(cpp_path, source.encode())
    fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".so", dir=folder)
    os.close(fd)
    link = [flag for line in source.splitlines() if line.startswith("// link:")
            for flag in shlex.split(line[len("// link:"):])]
    cmd = [cxx, *config.cxx_flags, cpp_path, "-o", tmp, *link]
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        try:
            os.unlink(tmp)
        except FileNotFoundError:      # a failed link has removed its output already
            pass
        raise CompileError(f"C++ compile failed (exit {result.returncode}); reproduce with:\n  {shlex.join(cmd)}\n"
                           + result.stderr[-4000:])
    try:
        write_whole(path + ".sha256", _digest(tmp).encode())     # before the library: a whole one always has it
        os.replace(tmp, path)
    except OSError:
        os.unlink(tmp)
        raise
    logs.log("output_code", f"compiled {cpp_path} in {time.perf_counter() - start:.2f} s")


