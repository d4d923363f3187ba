"""Per-trace memo of fake-tensor results: an op called again on arguments of the same metadata gets fresh
fake outputs of the metadata it gave the first time, without running the op again.

Models repeat their blocks: GPT-2's 12 layers run the same ops on the same sizes. torch's own FakeTensor
cache still costs a dispatch per aten op on a hit, more for composites (`F.linear`: transpose, view, addmm
each dispatched) and much more with size symbols, where each hit rebuilds its outputs' sizes by SymInt
arithmetic (a `view` of a [s0, s1, 256] tensor: ~0.8 ms a hit in torch's cache, ~0.05 ms rebuilt here).

The memo is exact or it stays out:
- key: the function, every argument (a fake tensor by its sizes, strides, offset, dtype, device, layout,
  requires_grad, conj/neg bits, inference-ness; size symbols by their expressions; constants by type and
  value), grad/inference mode, autocast, the default dtype, and the ShapeEnv's replacement state;
- only results that are fake tensors (or a tuple/list of them), none requiring grad or holding a constant,
  no argument's version counter moved (in-place ops and `out=` run every time); each output either fresh
  (a storage of its own), a positional argument itself (`x.to(x.dtype)`: the same argument on a hit), or,
  with grad mode off, a view of a positional argument;
- the first call builds its outputs' replacements the way a hit will (fresh: a meta `empty_strided` wrapped
  as a FakeTensor; a view: `as_strided` of the argument, `_AsStrided`) and compares every piece of
  metadata (storage size, view base and storage included); any difference: never memoized.
A function is memoized only if it is torch's (a Tensor method, a function of a torch module) or an operator.
"""
import contextlib
import operator

import torch
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager
from torch.utils._python_dispatch import TorchDispatchMode


enabled = True           # False: every call runs on fake tensors (tests compare the two)


class _NoMemo(Exception):
    pass


_REFUSED = object()      # a key whose op is not memoizable
_SCALARS = (int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout,
            torch.memory_format, type(Ellipsis))
_SYMS = (torch.SymInt, torch.SymFloat, torch.SymBool)
_OPERATORS = {id(f) for f in vars(operator).values() if callable(f)} | {id(getattr)}


def _sym(x):
    if type(x) is int:
        return x
    if isinstance(x, torch.SymInt):
        return ("s", x.node.expr)
    raise _NoMemo


def _tensor_key(t):
    if type(t) is not FakeTensor or t.constant is not None or t.layout != torch.strided:
        raise _NoMemo       # (a sparse tensor has no strides nor storage to key on)
    return ("T", tuple(_sym(x) for x in t.shape), tuple(_sym(x) for x in t.stride()),
            _sym(t.storage_offset()), t.dtype, t.device, t.layout, t.requires_grad, t.is_conj(), t.is_neg(),
            t.is_inference())


def _arg_key(v):
    t = type(v)
    if t is FakeTensor:
        return _tensor_key(v)
    if t in _SCALARS:
        return (t, v)
    if t in (tuple, list, torch.Size):
        return (t, tuple(_arg_key(x) for x in v))
    if t is slice:
        return (t, _arg_key(v.start), _arg_key(v.stop), _arg_key(v.step))
    if isinstance(v, _SYMS):
        return (t, v.node.expr)
    raise _NoMemo


def _fn_key(fn):
    target = getattr(fn, "method_name", None)     # record()'s wrapper of a Tensor method
    if target is not None:
        return ("method", target)
    module = getattr(fn, "__module__", None) or ""
    if id(fn) in _OPERATORS or module == "torch" or module.startswith("torch."):
        return fn
    raise _NoMemo


def _state_key(shape_env):
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_default_dtype(),
            torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
            shape_env and shape_env._get_key())


def _outputs(result):
    """The result's fake tensors and how to rebuild its container, or _NoMemo."""
    if type(result) is FakeTensor and result.layout == torch.strided:
        return [result], None
    if type(result) in (tuple, list) and result and \
            all(type(r) is FakeTensor and r.layout == torch.strided for r in result):
        return list(result), type(result)
    raise _NoMemo


def _no_guards(mode):
    """Rebuilding an output the first call made records no guards: that call already checked its sizes
    (torch's FakeTensor cache rebuilds its hits the same way)."""
    return mode.shape_env.suppress_guards() if mode.shape_env is not None else contextlib.nullcontext()


def _fresh(spec, mode, args):
    size, stride, dtype, device = spec
    with _no_guards(mode):
        return FakeTensor(mode, torch.empty_strided(size, stride, dtype=dtype, device="meta"), device)


class _AsStrided(TorchDispatchMode):
    """Runs aten.as_strided on a fake tensor as FakeTensorMode runs a view op it has no cached entry for
    (the meta kernel on the fake as a meta tensor, the result wrapped as a FakeTensor), without its cache
    key and without rebuilding sizes from a cache entry. Autograd's view bookkeeping happens outside the
    mode, as for any view op: the result is a view of the argument (`_is_view()`, `_base`, one storage)."""

    def __init__(self, mode):
        super().__init__()
        self.fake_mode = mode

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.prim.device.default:       # autograd asks the argument's device
            return args[0].fake_device
        if func is not torch.ops.aten.as_strided.default:
            raise _NoMemo
        with in_kernel_invocation_manager(self.fake_mode):
            out = func(*args, **(kwargs or {}))
        return FakeTensor(self.fake_mode, out, args[0].fake_device)


def _argument(index, mode, args):
    return args[index]


def _view(spec, mode, args):
    index, size, stride, offset = spec
    with _AsStrided(mode), _no_guards(mode):
        return torch.as_strided(args[index], size, stride, offset)


def _same(a, b):
    if type(a) is int or type(b) is int:
        return type(a) is type(b) and a == b
    return a.node.expr == b.node.expr


def _same_sizes(a, b):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def _metadata_equal(out, new, view):
    return (type(new) is type(out) and _same_sizes(out.shape, new.shape)
            and _same_sizes(out.stride(), new.stride()) and _same(out.storage_offset(), new.storage_offset())
            and _same(out.untyped_storage().nbytes(), new.untyped_storage().nbytes())
            and out.dtype == new.dtype and out.device == new.device and out.layout == new.layout
            and out.requires_grad == new.requires_grad and out.grad_fn is None and new.grad_fn is None
            and out.is_conj() == new.is_conj() and out.is_neg() == new.is_neg()
            and out.is_inference() == new.is_inference() and out._is_view() == new._is_view()
            and (out._base is new._base and _storage(out) == _storage(new) if view else out._base is None)
            and out.constant is None and vars(out).keys() == vars(new).keys())


def _storage(t):
    return t.untyped_storage()._cdata


def _versions(tensors):
    """Version counters (inference tensors keep none: their writes show in no metadata)."""
    return [None if t.is_inference() else t._version for t in tensors]


class FakeMemo:
    """key -> (container type or None, [(rebuild, spec)] per output) or _REFUSED, for one FakeTensorMode."""

    def __init__(self, fake_mode):
        self.mode = fake_mode
        self.entries = {}

    def key(self, fn, args, kwargs):
        """The memo key of a call, or None where it can't be memoized (modes active, unknown arguments)."""
        if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
            return None
        try:
            return (_fn_key(fn), tuple(_arg_key(a) for a in args),
                    tuple((k, _arg_key(v)) for k, v in kwargs.items()), _state_key(self.mode.shape_env))
        except (_NoMemo, TypeError):       # TypeError: an unhashable function
            return None

    def lookup(self, key, args):
        entry = self.entries.get(key)
        if entry is None or entry is _REFUSED:
            return None
        container, recipes = entry
        outs = [make(spec, self.mode, args) for make, spec in recipes]
        return outs[0] if container is None else container(outs)

    def versions(self, args, kwargs):
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        return tensors, _versions(tensors)

    def record(self, key, args, result, tensors, versions):
        """Remember the first call's result if a hit can rebuild it exactly."""
        if key in self.entries:
            return
        self.entries[key] = _REFUSED
        try:
            outs, container = _outputs(result)
        except _NoMemo:
            return
        if _versions(tensors) != versions:
            return
        recipes = []
        for o in outs:
            index = next((i for i, a in enumerate(args) if a is o), None)
            if index is not None:       # the argument itself (x.to(its own dtype), x.contiguous() of a contiguous x)
                recipes.append((_argument, index))
            elif any(o is t for t in tensors):
                return                  # an argument inside a container, or a keyword argument
            else:
                recipes.append(self._recipe(o, args, tensors))
        fresh = [_storage(o) for o, r in zip(outs, recipes) if r is not None and r[0] is _fresh]
        if None in recipes or len(set(fresh)) < len(fresh):
            return
        try:
            if not all(make is _argument or _metadata_equal(o, make(spec, self.mode, args), make is _view)
                       for o, (make, spec) in zip(outs, recipes)):
                return
        except Exception:       # a rebuild torch refuses (_AsStrided meeting another op, ...): not memoized
            return
        self.entries[key] = (container, recipes)

    def _recipe(self, out, args, tensors):
        """How a hit rebuilds `out`: a fresh tensor, or (grad mode off) a view of a positional argument;
        None: it can't."""
        storage = _storage(out)
        if all(_storage(t) != storage for t in tensors):
            return _fresh, (tuple(out.shape), tuple(out.stride()), out.dtype, out.device)
        if torch.is_grad_enabled():
            return None      # a multi-output view's autograd metadata (split, chunk) is not as_strided's
        if sum(_storage(t) == storage for t in tensors) > 1:
            # several arguments share the storage (`broadcast_tensors(x, x, z)`, `meshgrid(x, x)`): which one
            # `out` views is not known, and a hit on arguments that don't alias would view the wrong one
            return None
        for index, arg in enumerate(args):
            if type(arg) is FakeTensor and _storage(arg) == storage:
                return _view, (index, tuple(out.shape), tuple(out.stride()), out.storage_offset())
        return None
