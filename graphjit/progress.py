"""A one-line progress report on stderr for long compiles (Triton kernels, autotuning).

    progress = Progress("compiling Triton kernels", total=61)
    for done, ... in enumerate(work, 1):
        ...
        progress.update(done)
    progress.finish()

Nothing is printed unless the work has taken more than `after` seconds (2 by default): short compiles stay
quiet. On a terminal the line redraws in place; in a log file only the first and the final line appear.
GRAPHJIT_PROGRESS=0 (config.progress) turns it off.
"""
import sys
import time


class Progress:
    """A one-line progress report on stderr, shown only once the work has taken more than `after` seconds
    since `start` (time.perf_counter(); now by default)."""

    def __init__(self, label, total, after=2.0, start=None):
        self.label, self.total, self.after = label, total, after
        self.start = time.perf_counter() if start is None else start
        self.shown = self.ended = False
        from . import config
        self.enabled = bool(config.progress)

    def update(self, done, detail=""):
        """`done` of `total` steps finished; `detail` (the step under way) follows the count."""
        elapsed = time.perf_counter() - self.start
        if not self.enabled or self.ended or elapsed < self.after:
            return
        tty = sys.stderr.isatty()
        last = done >= self.total
        if not tty and self.shown and not last:
            return                      # a log file gets the first line and the last, not every step
        width = 30
        filled = int(width * min(done, self.total) / max(self.total, 1))
        line = f"graphjit: {self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} " \
               f"{elapsed:.1f} s" + (f" {detail}" if detail and not last else "")
        # on a terminal the line is redrawn in place; padding clears a longer line drawn before it
        pad = max(0, getattr(self, "_width", 0) - len(line)) if tty else 0
        self._width = len(line)
        sys.stderr.write(("\r" if tty else "") + line + " " * pad + ("\n" if last or not tty else ""))
        sys.stderr.flush()
        self.shown = True
        self.ended = last

    def finish(self):
        if self.shown:
            self.update(self.total)
