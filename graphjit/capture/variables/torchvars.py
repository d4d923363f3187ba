"""torch functions and Tensor methods called as functions (recorded as graph ops), and the global-state
context managers: no_grad, enable_grad, set_grad_enabled, autocast."""
import types

import torch

from . import numpyvars

from ...exc import Unsupported
from .base import Variable, ConstantVariable, unsupported
from .tensor import TensorVariable, record
from ..guards import lit

# Python-level torch modules whose functions are ops to record whole (the rest of torch is inlined).
_OP_MODULES = {"torch.nn.functional", "torch.functional", "torch._tensor", "torch.fft", "torch.linalg",
               "torch.special", "torch.nn.modules.utils"}

# Functions that change global state or need real data: never recorded, never folded.
_REFUSED = {torch.manual_seed: "torch.manual_seed() changes the global RNG state",
            torch.set_default_dtype: "torch.set_default_dtype() changes global state",
            torch.use_deterministic_algorithms: "changes global state",
            torch.set_printoptions: "changes global state"}

# Asked while tracing: "am I being compiled?" -- yes.
_COMPILING_QUERIES = {torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling,
                      torch._utils.is_compiling}


# Getters of process-wide flags that user code toggles (torch.use_deterministic_algorithms,
# set_float32_matmul_precision, torch.backends.*.enabled ...): answered while tracing and guarded to
# give the same answer at each call.
_STATE_QUERIES = {getattr(torch._C, name) for name in (
    "_get_deterministic_algorithms", "_get_deterministic_algorithms_warn_only",
    "_get_deterministic_fill_uninitialized_memory", "_get_float32_matmul_precision", "_get_cudnn_enabled",
    "_get_cudnn_benchmark", "_get_cudnn_deterministic", "_get_cudnn_allow_tf32", "_get_cublas_allow_tf32",
    "_get_cublas_allow_fp16_reduced_precision_reduction", "_get_cublas_allow_bf16_reduced_precision_reduction",
    "_get_mkldnn_enabled", "_get_flash_sdp_enabled", "_get_mem_efficient_sdp_enabled", "_get_math_sdp_enabled",
    "_get_cudnn_sdp_enabled", "_get_warnAlways", "get_num_threads", "get_num_interop_threads",
    "_are_functorch_transforms_active", "_len_torch_function_stack")
    if hasattr(torch._C, name)}

# Modules of the builtins that are ATen ops (torch.add's is "torch"); any other builtin of torch._C is one of
# torch's C helpers (functorch's nesting levels, saved-tensor hooks, forward AD's levels, the profiler ...)
_OP_NAMESPACES = frozenset({"torch", "torch._C._nn", "torch._C._fft", "torch._C._linalg", "torch._C._special",
                            "torch._C._nested", "torch._C._sparse"})


def is_state_query(fn):
    """A getter of process-wide state (the list above, or any function of torch._C, also reached as torch.*,
    named _get_*, is_* or _is_*: is_anomaly_enabled, is_autocast_cache_enabled, _get_fp32_precision_getter(backend, op) ...):
    answered while tracing and guarded on its answer for those arguments."""
    if fn in _STATE_QUERIES:
        return True
    if not isinstance(fn, types.BuiltinFunctionType) or getattr(fn, "__module__", None) not in ("torch._C", "torch") \
            or getattr(torch._C, fn.__name__, None) is not fn:
        return False
    name = fn.__name__
    return name.startswith(("_get_", "is_", "_is_")) and name not in _NOT_STATE


# torch._C getters that are not process-wide state a guard can re-read: tracing's own, or per tensor
_NOT_STATE = frozenset({"_get_tracing_state", "is_grad_enabled", "is_inference_mode_enabled",
                        "_is_torch_function_enabled", "_is_torch_function_mode_enabled",
                        "is_autocast_enabled", "_is_any_autocast_enabled"})


def is_torch_op(value):
    if isinstance(value, type):
        return False
    if any(value is q for q in _COMPILING_QUERIES):
        return True
    if isinstance(value, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        module = getattr(value, "__module__", None) or ""
        if module == "torch" or module.startswith("torch."):
            return True
        owner = getattr(value, "__self__", None)
        return isinstance(owner, types.ModuleType) and owner.__name__.startswith("torch")
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType,
                          types.MethodWrapperType, types.ClassMethodDescriptorType)):
        owner = getattr(value, "__objclass__", None)
        return owner is not None and issubclass(owner, torch._C.TensorBase)
    if isinstance(value, types.FunctionType):
        return value.__module__ in _OP_MODULES
    return False


# names of torch._C helpers that only answer a question (functorch's is_batchedtensor(t), maybe_current_level):
# traced as before, a fake tensor's answer being a real one's outside torch.func's transforms
_QUERY_PREFIXES = ("is_", "_is_", "get_", "_get_", "has_", "_has_", "_are_", "maybe_")


def _c_helper(fn):
    """One of torch._C's builtins that is not an ATen op and not a state query: the trace can't see what it
    changes, and calling it while tracing would change the process once, at trace time (torch.func.grad's
    _grad_increment_nesting left every later tensor a functorch wrapper)."""
    module = getattr(fn, "__module__", None) or ""
    return isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)) and \
        module.startswith("torch._C") and module not in _OP_NAMESPACES and not is_state_query(fn) and \
        not fn.__name__.startswith(_QUERY_PREFIXES)


def _sets_global_state(fn):
    """A torch._C setter of process state (_set_default_dtype, _set_cudnn_enabled, set_autocast_enabled
    ...): the trace's fake ops would not see its effect, and a graph node of it would run it again. The
    grad mode's setter is modelled (Tracer.set_grad_mode)."""
    name = getattr(fn, "__name__", "")
    return isinstance(fn, types.BuiltinFunctionType) and getattr(fn, "__module__", None) == "torch._C" and \
        name.startswith(("_set_", "set_")) and fn is not torch._C._set_grad_enabled


class TorchOpVariable(Variable):
    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.fn)

    """torch.cat, F.linear, torch.Tensor.add, torch.ops.aten.*, and graphjit.allow_in_graph functions."""

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def call(self, tx, args, kwargs):
        fn = self.fn
        if fn in _REFUSED:
            unsupported(_REFUSED[fn])
        if _sets_global_state(fn):
            unsupported(f"torch._C.{fn.__name__}() changes global state (what torch.set_default_dtype, "
                        "set_float32_matmul_precision and the backends' flags call)")
        if fn in _COMPILING_QUERIES:
            return ConstantVariable(True)
        if is_state_query(fn) and all(a.is_constant() for a in (*args, *kwargs.values())):
            cargs = tuple(a.as_python_constant() for a in args)
            ckwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
            value = fn(*cargs, **ckwargs)
            if type(value) in (bool, int, float, str, type(None)):
                call = f"{tx.guards.obj(fn)}(*{tx.guards.obj(cargs)}, **{tx.guards.obj(ckwargs)})"
                tx.guards.add_state(f"{call} == {value!r}", f"torch._C.{fn.__name__}{cargs!r} == {value!r}")
                return ConstantVariable(value)
        if fn is torch._C._set_grad_enabled:
            tx.set_grad_mode(bool(args[0].as_python_constant()))
            return ConstantVariable(None)
        if fn is torch._C._log_api_usage_once:      # a usage log (nn.Module.__init__'s): nothing to trace
            return ConstantVariable(None)
        if _c_helper(fn):
            unsupported(f"{fn.__module__}.{fn.__name__}() is one of torch's C helpers, not a tensor op: what "
                        "it changes (functorch's levels, saved-tensor hooks, forward AD) is not traced",
                        hint="the call runs in CPython, as in eager")
        if args and isinstance(args[0], (numpyvars.NdarrayVariable, numpyvars.ArrayConstantVariable)):
            return numpyvars.to_torch(tx, fn, args, kwargs)
        if fn is torch.tensor and args and isinstance(args[0], ConstantVariable) and numpyvars.is_scalar(args[0].value):
            return numpyvars.scalar_tensor(tx, fn, args, kwargs)
        name = getattr(fn, "__name__", "")
        mutates = name.endswith("_") and not name.endswith("__") or "out" in kwargs
        if isinstance(kwargs.get("out"), TensorVariable):
            _refuse_out_of_another_dtype(tx, fn, args, kwargs)
        if fn in _POOL_1D:
            pooled = _max_pool_1d_as_2d(tx, fn, args, kwargs)
            if pooled is not None:
                return pooled
        return record(tx, "call_function", fn, list(args), dict(kwargs), mutates=mutates)

    def getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))
        unsupported(f"attribute {name!r} of {self.fn}")

    def __repr__(self):
        return f"TorchOp({getattr(self.fn, '__name__', self.fn)})"


# the 1-d max pools -> whether they return indices (None: their return_indices argument says)
_POOL_1D = {torch.max_pool1d: False, torch.max_pool1d_with_indices: True,
            torch.nn.functional.max_pool1d: None, torch.nn.functional.max_pool1d_with_indices: True}
_POOL_1D_PARAMS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_POOL_1D_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _max_pool_1d_as_2d(tx, fn, args, kwargs):
    """max_pool1d over a symbolic length as max_pool2d over a height of 1 (the same maxima and indices):
    torch's 1-d kernel reads the length as an int, which specializes it (a recompile per length, as
    torch.compile does), while the 2-d meta keeps it symbolic. None where the call is not that case."""
    try:
        bound = dict(zip(_POOL_1D_PARAMS, args))
        if len(args) > len(_POOL_1D_PARAMS) or set(kwargs) - set(_POOL_1D_PARAMS) or set(kwargs) & set(bound):
            return None
        bound.update(kwargs)
        x = bound.pop("input")
        if not isinstance(x, TensorVariable) or x.fake.dim() not in (2, 3) or \
                not isinstance(x.fake.shape[-1], torch.SymInt) or x.fake.dtype not in _POOL_1D_DTYPES:
            return None         # (integer inputs: eager's 1-d kernel refuses them, the 2-d one does not)
        values = {k: v.as_python_constant() for k, v in bound.items()}
    except Exception:       # noqa: BLE001 -- an argument that is not a constant: the call as written
        return None

    def pair(name, default, first):
        value = values.get(name, default)
        if isinstance(value, (list, tuple)):
            if len(value) != 1 or type(value[0]) is not int:
                raise ValueError
            value = value[0]
        if type(value) is not int:
            raise ValueError
        return (first, value)
    try:
        kernel = pair("kernel_size", None, 1)
        stride = values.get("stride", ())
        stride = kernel if stride in ((), [], None) else pair("stride", None, 1)
        padding, dilation = pair("padding", 0, 0), pair("dilation", 1, 1)
        ceil_mode = values.get("ceil_mode", False)
        indices = _POOL_1D[fn]
        if indices is None:
            indices = values.get("return_indices", False)
        elif "return_indices" in values:
            return None
        if type(ceil_mode) is not bool or type(indices) is not bool:
            return None
    except ValueError:
        return None
    const = ConstantVariable
    pool = torch.nn.functional.max_pool2d_with_indices if indices else torch.nn.functional.max_pool2d
    rows = record(tx, "call_method", "unsqueeze", [x, const(-2)], {})
    pooled = record(tx, "call_function", pool, [rows, const(kernel), const(stride), const(padding),
                                                const(dilation), const(ceil_mode)], {})
    if not indices:
        out = record(tx, "call_method", "squeeze", [pooled, const(-2)], {})
        if x.fake.device.type == "cpu" and not (x.fake.requires_grad and torch.is_grad_enabled()):
            # where eager takes its own 1-d CPU kernel, the result is contiguous whatever the input's
            # layout (elsewhere eager pools in 2-d too, and keeps the layout as this does)
            out = record(tx, "call_method", "contiguous", [out], {})
        return out
    from .containers import TupleVariable
    return TupleVariable([record(tx, "call_method", "squeeze", [item, const(-2)], {})
                          for item in pooled.unpack(tx)])


def _refuse_out_of_another_dtype(tx, fn, args, kwargs):
    """A graph break at a call with an `out=` tensor of another dtype than the call returns without it: eager's
    reductions compute in out's dtype (torch.sum(x, 0, out=<int64>) truncates each element first), where
    the functionalized graph computes in the input's and casts the result."""
    from .tensor import to_fake_args
    out = kwargs["out"].fake
    try:
        result = tx.graph.run_fake(fn, [to_fake_args(a) for a in args],
                                   {k: to_fake_args(v) for k, v in kwargs.items() if k != "out"})
    except Exception:   # noqa: BLE001 -- the call itself will say
        return
    if isinstance(result, torch.Tensor) and result.dtype != out.dtype:
        unsupported(f"{getattr(fn, '__name__', fn)}(out=) of dtype {out.dtype} where the call returns "
                    f"{result.dtype}: eager computes in out's dtype", hint="the call runs in CPython")


# ---- context managers ----

class GradModeVariable(Variable):
    """no_grad / enable_grad / set_grad_enabled(mode): a _set_grad_enabled node on enter and exit."""

    def __init__(self, mode):
        self.mode = mode
        self.previous = None
        self.applied = False     # set_grad_enabled(m) applies at construction; __enter__ is then a no-op

    def python_type(self):
        return torch.no_grad if not self.mode else torch.enable_grad

    def enter(self, tx):
        if not self.applied:
            self.previous = torch.is_grad_enabled()
            tx.set_grad_mode(self.mode)
            self.applied = True
        return ConstantVariable(None)

    def exit(self, tx):
        tx.set_grad_mode(self.previous)
        self.applied = False
        return ConstantVariable(None)

    def getattr(self, tx, name):
        from .base import MethodOf
        if name == "__class__":
            from .objects import ClassVariable
            return ClassVariable(self.python_type())
        return MethodOf(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "clone":
            return GradModeVariable(self.mode)
        if name == "__class__":
            from .objects import ClassVariable
            return ClassVariable(self.python_type())
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        unsupported(f"method {name!r} of a grad-mode context manager")

    def call(self, tx, args, kwargs):
        # used as a decorator: @torch.no_grad() def f(...)
        (fn,) = args
        return _DecoratedVariable(self, fn)


class _DecoratedVariable(Variable):
    def __init__(self, ctx, fn):
        self.ctx, self.fn = ctx, fn

    def call(self, tx, args, kwargs):
        ctx = GradModeVariable(self.ctx.mode) if isinstance(self.ctx, GradModeVariable) else self.ctx
        ctx.enter(tx)
        result = self.fn.call(tx, args, kwargs)
        ctx.exit(tx)
        return result


class _ContextVariable(Variable):
    """A context manager modelled by enter(tx) and exit(tx)."""

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        unsupported(f"method {name!r} of {self.python_type().__name__}")


class AutocastVariable(_ContextVariable):
    """torch.autocast(...): _enter_autocast/_exit_autocast nodes, and the real mode entered while tracing
    so fake tensors see the same dtypes."""

    def __init__(self, args, kwargs):
        self.args = args
        self.kwargs = kwargs
        self.node = None
        self.real = None
        self.params = None      # _enter_autocast's arguments, once entered

    def python_type(self):
        return torch.autocast

    def enter(self, tx):
        from torch.amp.autocast_mode import _enter_autocast
        cargs = [a.as_python_constant() for a in self.args]
        ckw = {k: v.as_python_constant() for k, v in self.kwargs.items()}
        self.real = torch.autocast(*cargs, **ckw)
        # _enter_autocast takes torch.autocast's arguments positionally
        cargs = [self.real.device, self.real.fast_dtype, self.real._enabled, self.real._cache_enabled]
        self.params = tuple(cargs)
        self.real.__enter__()
        tx.push_cleanup(self._real_exit)
        self.node = tx.graph.create_node("call_function", _enter_autocast, cargs, {}, None)
        return ConstantVariable(None)

    def _real_exit(self):
        if self.real is not None:
            self.real.__exit__(None, None, None)
            self.real = None

    def exit(self, tx):
        from torch.amp.autocast_mode import _exit_autocast
        tx.graph.create_node("call_function", _exit_autocast, [self.node], {}, None)
        tx.pop_cleanup(self._real_exit)
        self._real_exit()
        return ConstantVariable(None)

    def close_at_break(self, tx):
        """A graph break inside the block: the graph leaves the mode at its end (its _enter_autocast gets
        its _exit_autocast); the entry enters it for real around the break's instruction
        (WithExitVariable.reconstruct), and the resume function enters it again (ReenterAutocast)."""
        self.exit(tx)


    def call(self, tx, args, kwargs):
        (fn,) = args
        return _DecoratedVariable(self, fn)


class WithExitVariable(Variable):
    """What BEFORE_WITH pushes as the `__exit__` callable."""

    def __init__(self, ctx):
        self.ctx = ctx

    def call(self, tx, args, kwargs):
        return self.ctx.exit(tx)

    def reconstruct(self, cg):
        # at a graph break inside `with torch.no_grad():` the graph has already switched the mode; the
        # resume function's with-exit must switch it back
        if isinstance(self.ctx, GradModeVariable) and self.ctx.applied:
            return cg.obj(RestoreGradMode(self.ctx.previous))
        if isinstance(self.ctx, AutocastVariable) and self.ctx.params is not None:
            return f"{cg.obj(_enter_autocast_again)}(*{cg.obj(self.ctx.params)})"
        if isinstance(self.ctx, NullContextVariable):
            return cg.obj(_exit_nothing)
        unsupported(f"a graph break inside a `with {self.ctx.python_type().__name__}` block")


def _enter_autocast_again(device, dtype, enabled, cache_enabled):
    """At a graph break inside `with torch.autocast(...)`: the mode entered again for the break's
    instruction; returns its with-exit (called once the instruction has run, or if it raises)."""
    ctx = torch.autocast(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    ctx.__enter__()
    return ctx.__exit__


class ReenterAutocast:
    """Handed to a resume function in place of the with-exit of an autocast block open at the break: its
    prologue calls enter(), which enters the mode and returns the with-exit. In CPython that is a real
    autocast; traced, an AutocastVariable entered in the resume function's own graph (ReenterVariable),
    so the mode starts and ends inside that graph as it did in the original frame's."""

    def __init__(self, params):
        self.params = params

    def enter(self):
        return _enter_autocast_again(*self.params)


class ReenterVariable(Variable):
    def __init__(self, value, source):
        self.value, self.source = value, source

    @classmethod
    def create(cls, tx, value, source):
        if source is not None:
            tx.guards.add_type(source, ReenterAutocast)
            tx.guards.add(3, f"{{0}}.params == {tx.guards.obj(value.params)}", None, (source,))
        return cls(value, source)

    def python_type(self):
        return ReenterAutocast

    def getattr(self, tx, name):
        from .base import MethodOf
        if name != "enter":
            unsupported(f"attribute {name!r} of an autocast re-entry")
        return MethodOf(self, name)

    def call_method(self, tx, name, args, kwargs):
        device, dtype, enabled, cache_enabled = self.value.params
        ctx = AutocastVariable([ConstantVariable(device)],
                               {"dtype": ConstantVariable(dtype), "enabled": ConstantVariable(enabled),
                                "cache_enabled": ConstantVariable(cache_enabled)})
        ctx.enter(tx)
        return WithExitVariable(ctx)


def _exit_nothing(*exc_info):
    return None


class NullContextVariable(_ContextVariable):
    """A context manager with no effect on what the traced code computes: torch.profiler.record_function
    (its profiler annotation is dropped from compiled code, as torch.compile drops it), or an inference_mode
    block that sets the mode the graph runs in (guarded)."""

    def __init__(self, cls):
        self.cls = cls

    def python_type(self):
        return self.cls

    def enter(self, tx):
        return self

    def exit(self, tx):
        return ConstantVariable(None)



class RestoreGradMode:
    """The `__exit__` handed to a resume function for a grad-mode block entered before the break."""

    def __init__(self, mode):
        self.mode = mode

    def __call__(self, *exc_info):
        torch._C._set_grad_enabled(self.mode)


def wrap_restore_grad_mode(tx, value, source):
    """A RestoreGradMode on a resume function's stack: the with-exit of the grad-mode block it resumes
    in (so a break further inside that block resumes again)."""
    if source is not None:
        tx.guards.add_type(source, RestoreGradMode)
        tx.guards.add(1, f"{{0}}.mode is {lit(value.mode)}", None, (source,))
    ctx = GradModeVariable(torch.is_grad_enabled())
    ctx.previous, ctx.applied = value.mode, True
    return WithExitVariable(ctx)


def make_context_manager(tx, cls, args, kwargs):
    """torch.no_grad() and friends called in the frame; None when `cls` isn't one of them."""
    if cls is torch.no_grad:
        return GradModeVariable(False)
    if cls is torch.enable_grad:
        return GradModeVariable(True)
    if cls is torch.set_grad_enabled:
        (mode,) = args
        var = GradModeVariable(bool(mode.as_python_constant()))
        # set_grad_enabled(False) as a plain call takes effect at once
        var.enter(tx)
        return var
    if cls in (torch.autocast, torch.amp.autocast) or cls is getattr(torch.cpu.amp, "autocast", None):
        if cls is not torch.autocast and cls is not torch.amp.autocast:
            args = [ConstantVariable("cpu"), *args]
        return AutocastVariable(list(args), dict(kwargs))
    if cls is torch.autograd.profiler.record_function:
        return NullContextVariable(cls)
    if cls is torch.inference_mode:
        mode = bool((args[0] if args else kwargs.get("mode", ConstantVariable(True))).as_python_constant())
        if mode == torch.is_inference_mode_enabled():       # the mode the graph runs in: the block changes nothing
            tx.guards.add_state(f"__gj_torch.is_inference_mode_enabled() is {mode}",
                                f"inference mode is {'on' if mode else 'off'}")
            return NullContextVariable(cls)
        # the tensors made inside are inference tensors (is_inference(), no in-place update outside the
        # mode, no autograd): a graph's outputs are made in the mode of its caller
        reason = "torch.inference_mode() inside a compiled function: a graph can't make the inference tensors " \
                 "its block makes"
        raise Unsupported(reason, no_break=reason,
                          hint="call the compiled function under torch.inference_mode() instead, or compile the "
                               "code inside the block as a function of its own")
    return None


def wrap_context_object(tx, value, source):
    """A real no_grad()/enable_grad() object read from outside (e.g. a decorator's closure)."""
    if isinstance(value, torch.no_grad):
        return GradModeVariable(False)
    if isinstance(value, torch.enable_grad):
        return GradModeVariable(True)
    return None
