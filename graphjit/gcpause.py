"""The cyclic garbage collector paused while graphjit translates or compiles.

Capture and compile allocate many short-lived objects (variables, sources, fake tensors, fx nodes); each
allocation burst triggers the collector, whose older generations walk the caller's whole heap (a model,
torch's modules). On a lent H100, ResNet-50's warm-start capture took 0.32-0.33 s with the pause and
0.47-0.48 s without (benchmarks/RESULTS.md, "Lent H100, 2026-12-07 07:37-08:06 UTC"). One
pause covers every overlapping translation and compile, in any thread; the collector is turned on again
when the last one ends, if it was on before the first."""
import contextlib
import gc
import threading

_lock = threading.Lock()
_state = [0, False]         # pauses running, whether the collector was on before the first


@contextlib.contextmanager
def paused():
    with _lock:
        if _state[0] == 0:
            _state[1] = gc.isenabled()
            gc.disable()
        _state[0] += 1
    try:
        yield
    finally:
        with _lock:
            _state[0] -= 1
            if _state[0] == 0 and _state[1]:
                gc.enable()
