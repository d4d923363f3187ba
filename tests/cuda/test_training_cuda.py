"""Training steps through graphjit's compiler on a CUDA GPU (skipped elsewhere): forward and backward
halves as Triton kernels, against eager over several steps (graphjit.testing.check_training), with
float32 weights, with bf16 autocast, and with an input whose address is not 16-byte aligned (the halves
are compiled from fake inputs: the alignment they assume must be checked per call)."""
import pytest
import torch

from graphjit.backends.registry import graphjit_backend
from graphjit.testing import check_training
from tests.compiler.test_training import MLP, ConvBN, TinyAttention, token_args

pytestmark = pytest.mark.gpu
TOL = dict(atol=1e-4, rtol=1e-3)      # TF32 is off; fused reductions round otherwise than cuBLAS/eager


def cuda(factory):
    return lambda: factory().cuda()


def on_cuda(make):
    return lambda call: tuple(t.cuda() for t in make(call))


def assert_triton(counter):
    halves = counter.compiled_functions()
    assert len(halves) >= 2 and all(hasattr(h, "launches") for h in halves), halves


def test_mlp():
    counter, *_ = check_training(cuda(MLP), lambda: (torch.randn(6, 16, device="cuda"),),
                                 backend=graphjit_backend, **TOL)
    assert_triton(counter)


def test_conv_batchnorm():
    counter, *_ = check_training(cuda(ConvBN), lambda: (torch.randn(4, 3, 8, 8, device="cuda"),),
                                 backend=graphjit_backend, **TOL)
    assert_triton(counter)


@pytest.mark.parametrize("sdpa", [False, True], ids=["by-hand", "sdpa"])
def test_attention(sdpa):
    counter, *_ = check_training(cuda(lambda: TinyAttention(sdpa)), on_cuda(token_args), loss=lambda out: out,
                                 backend=graphjit_backend, **TOL)
    assert_triton(counter)


def test_bf16_autocast():
    counter, *_ = check_training(cuda(MLP), lambda: (torch.randn(6, 16, device="cuda"),),
                                 backend=graphjit_backend, atol=3e-2, rtol=3e-2,
                                 context=lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    assert_triton(counter)


def unaligned(module):
    """module with fc1's weight moved to an address 4 bytes past a 16-byte boundary."""
    w = module.fc1.weight
    storage = torch.empty(w.numel() + 1, device=w.device)
    view = storage[1:].view(w.shape)
    view.copy_(w.detach())
    module.fc1.weight = torch.nn.Parameter(view)
    assert module.fc1.weight.data_ptr() % 16
    return module


def test_unaligned_parameter():
    """A parameter that starts 4 bytes past an aligned address: the halves are compiled from fake inputs,
    whose offset into their storage must decide what the kernels assume."""
    counter, *_ = check_training(lambda: unaligned(MLP().cuda()), lambda: (torch.randn(6, 16, device="cuda"),),
                                 backend=graphjit_backend, **TOL)
    assert_triton(counter)


def test_parameter_moved_to_an_unaligned_address():
    """Compiled while aligned, then the parameter moves 4 bytes off: the per-call check must notice."""
    import copy
    import graphjit
    torch.manual_seed(0)
    eager = MLP().cuda()
    model = copy.deepcopy(eager)
    compiled = graphjit.compile(model, backend=graphjit_backend)
    for step in range(3):
        if step == 2:
            unaligned(eager), unaligned(model)
        x = torch.randn(6, 16, device="cuda")
        for fn in (compiled, eager):
            fn(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL, msg=f"step {step}: {name}.grad")
            p.grad = q.grad = None
