"""Errors graphjit raises, each carrying the reason string users see in explain() and the logs."""


class Unsupported(RuntimeError):
    """Something in the traced code can't be captured (yet).

    Carries the reason, the user's file:line where it happened, the source line and a hint. With
    fullgraph=True it reaches the user; otherwise the frame runs eagerly and explain() reports it.
    no_break: why no graph break may run the instruction in CPython (frame.breakable): the whole frame runs
    eagerly instead.
    """

    def __init__(self, reason, *, hint=None, filename=None, lineno=None, no_break=None):
        self.reason = reason
        self.hint = hint
        self.no_break = no_break
        self.filename = filename
        self.lineno = lineno
        super().__init__(reason)

    @property
    def source_line(self):
        if not (self.filename and self.lineno):
            return None
        import linecache
        return linecache.getline(self.filename, self.lineno).strip() or None

    def __str__(self):
        parts = [self.reason]
        if self.filename:
            parts.append(f"  at {self.filename}:{self.lineno}")
            if self.source_line:
                parts.append(f"    {self.source_line}")
        callers = getattr(self, "user_stack", [])[1:]
        for filename, lineno in callers[:6]:
            parts.append(f"  called from {filename}:{lineno}")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


class UserError(Unsupported):
    """A Python exception the traced code itself raises (KeyError from a dict, AttributeError, raise ...).

    The interpreter delivers it to the frame's own except/finally handlers; if none catches it, the
    frame runs eagerly, where CPython raises it for real.
    """

    def __init__(self, exc, hint=None):
        self.exc = exc
        super().__init__(f"{type(exc).__name__}: {exc}", hint=hint)
