"""The kernel triton_build's prewarm thread compiles first (its own module: Triton reads a kernel's
source from its file, and triton_build must not import Triton when it is imported)."""
import triton
import triton.language as tl


@triton.jit
def first_kernel(out):
    tl.store(out, 0.0)
