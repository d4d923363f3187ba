"""What graphjit knows about torch's ops by name, and how eager converts Python scalars, shared by capture and
the compiler."""
import contextlib
import operator

import torch

# Words in the name of an op or function that draws random numbers (torch.rand, F.dropout, aten.bernoulli,
# normal_, multinomial ...): such ops are neither folded into constants nor recomputed.
RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential", "cauchy",
                "geometric", "poisson", "rrelu", "binomial", "_standard_gamma", "_sample_dirichlet", "gumbel")


def is_random_name(name):
    return any(word in name for word in RANDOM_WORDS)


# The operators of augmented assignments (`x += y` is operator.iadd in a captured graph): on a tensor they
# write in place.
AUGMENTED_ASSIGNMENTS = frozenset((
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
    operator.irshift))


def scalar_as(value, dtype):
    """value as eager's kernels convert a Python scalar argument for an integer or bool dtype (c10's
    Scalar.to): bool(value) for bool; for integers truncated toward zero, a RuntimeError where it does not
    fit (unsigned types take ints from -max..max, negatives wrapping, and floats from 0..max). Floating
    dtypes: value as is."""
    if dtype.is_floating_point or dtype.is_complex:
        return value
    if dtype == torch.bool:
        return bool(value)
    if isinstance(value, bool):
        return value
    info = torch.iinfo(dtype)
    # an int wraps into an unsigned type from -max; a float must lie in the type's range (-0.5 into uint8
    # overflows, as does 255.9)
    low = -info.max if info.min == 0 and not isinstance(value, float) else info.min
    if not low <= value <= info.max:
        raise RuntimeError(f"value cannot be converted to type {dtype} without overflow")
    return int(value) % (info.max + 1) if info.min == 0 else int(value)


def function_modes():
    """The torch function modes on the stack, bottom first: ("device", "meta") for a default device
    (torch.set_default_device, `with torch.device(...)`), ("mode", class name) for any other."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    return tuple(("device", str(m.device)) if isinstance(m, DeviceContext) else ("mode", type(m).__qualname__)
                 for m in _get_current_function_mode_stack())


@contextlib.contextmanager
def function_modes_suspended():
    """The torch function modes off the stack for the block (a compile: graphjit's own tensors go to the
    CPU whatever the caller's default device), back on after it."""
    modes = []
    while torch._C._len_torch_function_stack():
        modes.append(torch._C._pop_torch_function_stack())
    try:
        yield
    finally:
        for mode in reversed(modes):
            torch._C._push_on_torch_function_stack(mode)


def autocast_state():
    """Hashable summary of autocast settings (guarded per entry, and part of the compiled-graph cache's key:
    the compiler traces under them): None where none is on, else the enabled devices and their dtypes."""
    if not torch._C._is_any_autocast_enabled():
        return None
    state = []
    for device in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device):
            state.append((device, str(torch.get_autocast_dtype(device))))
    return tuple(state)
