"""The Triton wrapper calls a kernel's C launch function directly only for a launcher it recognizes:
Triton 3.6's CudaLauncher, whose Python __call__ just allocates scratch memory, and only when the kernel
needs none. Anything else (another Triton's launcher, a kernel with scratch) goes through the launcher."""
from graphjit.compiler.codegen.triton import _direct_launch


def _launcher_class(call):
    return type("CudaLauncher", (), {"__call__": call})


def _triton_36_call(self, gridX, gridY, gridZ, stream, function, *args):
    pass


def make(call=_triton_36_call, scratch=0, profile=0, **extra):
    launcher = _launcher_class(call)()
    launcher.launch = lambda *args: args
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    launcher.global_scratch_size, launcher.profile_scratch_size = scratch, profile
    for name, value in extra.items():
        setattr(launcher, name, value)
    return launcher


def test_a_triton_36_launcher_without_scratch_is_called_directly():
    launcher = make()
    assert _direct_launch(launcher) == (launcher.launch, False, True)


def test_kernels_with_scratch_memory_go_through_the_launcher():
    assert _direct_launch(make(scratch=128)) is None
    assert _direct_launch(make(profile=64)) is None


def test_unrecognized_launchers_go_through_the_launcher():
    def other_call(self, grid, stream, function, *args):
        pass
    assert _direct_launch(make(call=other_call)) is None
    launcher = make()
    del type(launcher).__call__
    assert _direct_launch(launcher) is None
    renamed = type("SomeLauncher", (), {"__call__": _triton_36_call})()
    assert _direct_launch(renamed) is None
    bare = make()
    del bare.launch_pdl
    assert _direct_launch(bare) is None
