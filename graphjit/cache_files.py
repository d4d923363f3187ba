"""Files of graphjit's on-disk caches (compiled graphs, C++ libraries, compiled generated sources): written
whole, and discarded with a warning where damaged."""
import os
import tempfile
import warnings


def write_whole(path, data, prefix=".tmp."):
    """`data` (bytes) into a temporary file beside `path`, then renamed to it: a reader sees the whole file
    or none. On an error (raised again) the temporary file is removed."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def discard(path, message):
    """A damaged cache file: warned about (`message`), then removed, so the next use rebuilds it."""
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    try:
        os.unlink(path)
    except OSError:
        pass
