"""Tensors: a node of the fx graph plus its fake tensor. Operations on them become graph nodes."""
import functools
import operator

import torch
import torch.utils._pytree as pytree

from ...exc import Unsupported
from ..sources import AttrSource
from . import numpyvars, symbolic
from .base import Variable, ConstantVariable, MethodOf, NotConstant, unsupported
from ..guards import lit

DATA_DEPENDENT_HINT = ("the value of a tensor is not known while tracing: use torch.where / tensor ops "
                       "instead of Python control flow, or mark the function graphjit.disable")

# Tensor attributes that are plain metadata: answered from the fake tensor, no graph node.
METADATA_ATTRS = {"dtype", "device", "ndim", "requires_grad", "is_cuda", "is_sparse", "is_quantized",
                  "layout", "is_meta", "is_nested", "is_mps", "is_cpu", "itemsize", "nbytes"}
# Autograd and storage state of a tensor that its guards do not check (an entry traced for a tensor at
# version 0 would be reused for one at version 2, a base for a view): read in CPython at a graph break
UNGUARDED_STATE = {"_version", "retains_grad", "output_nr", "_backward_hooks", "_post_accumulate_grad_hooks",
                   "_cdata", "_grad", "_grad_fn", "grad_dtype", "name", "volatile"}
UNGUARDED_STATE_METHODS = {"_is_view", "is_set_to", "is_shared", "is_pinned", "data_ptr", "untyped_storage", "storage",
                           "_typed_storage", "_use_count"}

# Methods whose result is a Python value that depends only on metadata.
METADATA_METHODS = {"dim", "ndimension", "numel", "nelement", "element_size", "is_contiguous",
                    "is_floating_point", "is_complex", "stride", "storage_offset", "get_device",
                    "is_signed", "is_inference", "has_names"}

# Methods that change autograd's state (the graph, hooks, which tensors require grad): a graph records
# tensor computations only, so they run in CPython at a graph break.
AUTOGRAD_METHODS = {"backward", "register_hook", "retain_grad", "register_post_accumulate_grad_hook",
                    "requires_grad_"}

# Methods that need the data: a graph can't answer them.
DATA_METHODS = {"item", "tolist", "numpy", "data_ptr", "__bool__", "__index__", "__int__", "__float__",
                "nonzero_static", "untyped_storage"}


class TensorVariable(Variable):
    def __init__(self, node, fake, source=None, cls=None, real=None):
        self.node = node
        self.fake = fake
        self.source = source
        self.cls = cls          # a graph input's class (nn.Parameter; guarded); made in the graph: Tensor
        self.real = real        # a graph input's tensor, while tracing (its .grad is read from it)

    def python_type(self):
        if self.cls is not None:
            return self.cls
        return type(self.fake) if not isinstance(self.fake, torch._subclasses.FakeTensor) else torch.Tensor

    def identity_key(self):
        return ("tensor", id(self.node))

    def setattr(self, tx, name, value):
        if name == "data" and value is self:
            # `t.data = t`: nn.Module._apply's write-back where `.to()` changed nothing (it returned t)
            return
        super().setattr(tx, name, value)

    def getattr(self, tx, name):
        if name == "shape":
            return containers.SizeVariable(symbolic.size_items(tx, self, self.fake.shape))
        if name in METADATA_ATTRS:
            return ConstantVariable(getattr(self.fake, name))
        if name == "is_leaf":
            return self._is_leaf(tx)
        if name in UNGUARDED_STATE:
            unsupported(f"tensor attribute {name!r}: autograd or storage state that the entry's guards do not "
                        f"check", hint="it is read in CPython at a graph break")
        if name == "grad" and self.real is not None and self.source is not None:
            # an input's gradient, as it is when the frame starts: nothing traced can change it before
            # this read (backward, hooks and stores to .grad are graph breaks); guarded like any input
            return builder.wrap(tx, self.real.grad, AttrSource(self.source, "grad"))
        if name in ("grad", "_base", "grad_fn"):
            unsupported(f"tensor attribute {name!r}")
        if name == "__class__":          # as type(x) (logging helpers read x.__class__.__name__)
            return objects.ClassVariable(self.python_type())
        if name in DATA_METHODS:
            return TensorMethodVariable(self, name)
        attr = getattr(type(self.fake), name, None)
        if attr is None and not hasattr(self.fake, name):
            return self._instance_attribute(tx, name)
        if callable(attr) and not isinstance(attr, property):
            return TensorMethodVariable(self, name)
        if name.startswith("__") and name.endswith("__"):
            # __dict__, __module__, __weakref__ ...: the fake tensor's are not the tensor's
            unsupported(f"tensor attribute {name!r}")
        # properties recorded as getattr nodes: .T, .mT, .H, .real, .imag, .data
        return record(tx, "call_function", getattr, [self, ConstantVariable(name)], {})

    def call_method(self, tx, name, args, kwargs):
        return TensorMethodVariable(self, name).call(tx, args, kwargs)

    def _is_leaf(self, tx):
        """x.is_leaf: an input's, guarded (a tensor requiring grad may or may not have a grad_fn, which the
        tensor guards do not check); a tensor the graph made: the fake tensor's, which follows from the
        inputs' requires_grad and grad mode."""
        if self.real is not None and self.source is not None:
            leaf = self.real.is_leaf
            tx.guards.add(3, f"{{0}}.is_leaf is {leaf}", None, (self.source,))
            return ConstantVariable(leaf)
        return ConstantVariable(self.fake.is_leaf)

    def _instance_attribute(self, tx, name):
        """An attribute the tensor's class lacks: one set on the tensor object (`t.scale = 3`, a
        parameter's flag), read through the input's source; missing, guarded to stay missing."""
        from .builtins import AttributeMissing
        if self.real is not None and self.source is not None:
            if name in vars(self.real):
                return builder.wrap(tx, vars(self.real)[name], AttrSource(self.source, name))
            tx.guards.add(3, f"{lit(name)} not in {{0}}.__dict__", None, (self.source,))
        raise AttributeMissing(f"'{self.python_type().__name__}' object has no attribute {name!r}")

    def unpack(self, tx):
        if self.fake.dim() == 0:
            unsupported("iterating over a 0-d tensor")
        return [record(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
                for i in range(self.fake.shape[0])]

    def truth(self, tx):
        unsupported("branching on a tensor value (data-dependent control flow)", hint=DATA_DEPENDENT_HINT)

    def reconstruct(self, cg):
        return cg.tensor(self)

    def __repr__(self):
        return f"Tensor({self.node.name}: {tuple(self.fake.shape)} {self.fake.dtype})"


class TensorMethodVariable(MethodOf):
    """`x.view` before it is called."""

    def __init__(self, tensor, name):
        super().__init__(tensor, name)
        self.tensor = tensor

    def call(self, tx, args, kwargs):
        name, fake = self.name, self.tensor.fake
        if name == "numpy" and not args and not kwargs.get("force", ConstantVariable(False)).value:
            return numpyvars.from_tensor(tx, self.tensor)
        if name in DATA_METHODS:
            unsupported(f"Tensor.{name}() needs the tensor's data", hint=DATA_DEPENDENT_HINT)
        if name in UNGUARDED_STATE_METHODS:
            unsupported(f"Tensor.{name}() reads autograd or storage state that the entry's guards do not check",
                        hint="it runs in CPython at a graph break")
        if name == "requires_grad_" and _requested_flag(args, kwargs) == fake.requires_grad:
            return self.tensor           # changes nothing: the tensor itself
        if name == "backward":
            from .functions import refuse_autograd_call
            refuse_autograd_call("Tensor.backward()", args, kwargs, 2)
        if name in AUTOGRAD_METHODS:
            unsupported(f"Tensor.{name}() changes autograd's state, which a graph does not record",
                        hint="it runs in CPython at a graph break")
        if name in ("size", "numel", "nelement") and not kwargs:
            sized = _symbolic_size(tx, self.tensor, name, args)
            if sized is not None:
                return sized
        if name == "storage_offset":
            _guard_storage_offsets(tx)
        if name in ("size", "stride") or name in METADATA_METHODS:
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            result = getattr(fake, name)(*cargs, **ckw)
            if isinstance(result, torch.Size):
                return containers.SizeVariable([ConstantVariable(s) for s in result])
            return builder.wrap_constant_result(tx, result)
        if name in PROMOTING_INPLACE and args:
            _refuse_uncastable_inplace(name, fake, args[0])
        if name == "__setitem__":
            return record(tx, "call_function", operator.setitem, [self.tensor, *args], kwargs, mutates=True)
        if name == "__getitem__":
            return record(tx, "call_function", operator.getitem, [self.tensor, *args], kwargs)
        return record(tx, "call_method", name, [self.tensor, *args], kwargs, mutates=name.endswith("_"))


def _guard_storage_offsets(tx):
    """A storage offset read while tracing is the fake tensor's: it follows from the storage offsets of the
    graph's tensor inputs, which the tensor guards do not check (a view of another slice of the same base
    has the same sizes and strides). Every tensor input wrapped so far (those the value can derive from)
    is guarded on its storage offset."""
    from ..guards import TENSOR
    for source, (t, _, _) in list(tx.guards.tensors.items()):
        offset = t.storage_offset()
        if isinstance(offset, int):
            tx.guards.add(TENSOR, f"{{0}}.storage_offset() == {offset}",
                          f"{source.expr()}.storage_offset() == {offset}", (source,))


def _requested_flag(args, kwargs):
    """requires_grad_(flag)'s flag when it is a constant (default True), else None."""
    value = args[0] if args else kwargs.get("requires_grad")
    if value is None:
        return True
    try:
        return bool(value.as_python_constant())
    except NotConstant:
        return None


def _symbolic_size(tx, tensor, name, args):
    """x.size(), x.size(d), x.numel() of a tensor with size symbols; None for a static one."""
    fake = tensor.fake
    if not any(symbolic.is_symbolic(s) for s in fake.shape):
        return None
    if name != "size":
        return symbolic.numel_of(tx, tensor)
    items = symbolic.size_items(tx, tensor, fake.shape)
    if not args:
        return containers.SizeVariable(items)
    d = args[0].as_python_constant()
    if not -fake.dim() <= d < max(fake.dim(), 1):
        return None                 # the fake op raises torch's own IndexError
    return items[d]


# ---- recording ops ----

def to_node_args(value):
    """Variables -> what an fx node holds as an argument (nodes, constants, nested containers)."""
    if isinstance(value, (TensorVariable, symbolic.SymNodeVariable)):
        return value.node
    if isinstance(value, containers.SliceVariable):
        return slice(*(to_node_args(p) for p in value.parts))
    if isinstance(value, containers.BaseListVariable):
        items = [to_node_args(v) for v in value.items]
        return list(items) if value.python_cls is list else tuple(items)
    if isinstance(value, containers.DictVariable):
        return {k: to_node_args(v) for k, v in value.items.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_node_args(v) for v in value)
    try:
        value = value.as_python_constant()
    except NotConstant:
        unsupported(f"passing {value} to a tensor operation")
    return _as_dtype(numpyvars.plain(value))      # a NumPy scalar as its Python number, as a Scalar argument reads it


# Python's number types where torch takes a dtype (torch.zeros(3, dtype=int), x.to(float)): the dtypes torch's
# argument parser reads them as (float is float64 whatever the default dtype)
PYTHON_TYPE_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}


def _as_dtype(value):
    return PYTHON_TYPE_DTYPES.get(value, value) if type(value) is type else value


def to_fake_args(value):
    if isinstance(value, TensorVariable):
        return value.fake
    if isinstance(value, symbolic.SymNodeVariable):
        return value.sym
    if isinstance(value, containers.SliceVariable):
        return slice(*(to_fake_args(p) for p in value.parts))
    if isinstance(value, containers.BaseListVariable):
        items = [to_fake_args(v) for v in value.items]
        return list(items) if value.python_cls is list else tuple(items)
    if isinstance(value, containers.DictVariable):
        return {k: to_fake_args(v) for k, v in value.items.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_fake_args(v) for v in value)
    return _as_dtype(numpyvars.plain(value.as_python_constant()))


def _contains_tensor(value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)
    return False


def record(tx, kind, target, args, kwargs, mutates=False):
    """Add one op to the graph: propagate fake tensors, create the node, wrap the result."""
    numpyvars.check_op_args(target, args, kwargs)
    if target in ("new", torch.Tensor.new) and len(args) == 2 and isinstance(args[1], containers.SizeVariable):
        # Tensor.new(torch.Size) makes a tensor of that size (a tuple would be its data): the node holds a tuple
        target = "new_empty" if kind == "call_method" else torch.Tensor.new_empty
    device = kwargs.get("device")
    if tx.default_device is not None and kind == "call_function" and target in _device_constructors() and \
            (device is None or isinstance(device, ConstantVariable) and device.value is None):
        # the caller's default device, as its DeviceContext mode passes it: the compile runs without the mode
        kwargs = dict(kwargs, device=ConstantVariable(tx.default_device))
    node_args = [to_node_args(a) for a in args]
    node_kwargs = {k: to_node_args(v) for k, v in kwargs.items()}
    fake_args = [to_fake_args(a) for a in args]
    fake_kwargs = {k: to_fake_args(v) for k, v in kwargs.items()}
    if kind == "call_method":
        def fn(self, *a, **k):
            return getattr(self, target)(*a, **k)
        fn.method_name = target
    else:
        fn = target
    refusal = EAGER_REFUSALS.get(target)
    if refusal is not None:
        refusal(*fake_args, **fake_kwargs)
    if _quantized(fake_args, fake_kwargs):
        unsupported(f"{_target_name(target)} making a quantized tensor (fake tensors do not model it)",
                    hint="the op runs in CPython, as in eager")
    if mutates and args and isinstance(args[0], TensorVariable):
        _refuse_inplace_on_special_view(args[0], fake_args, fake_kwargs)
    if _raises_on_data(target, fake_args) and getattr(tx, "error_would_be_handled", bool)():
        unsupported(f"{_target_name(target)} can raise on its tensors' values (an index out of range) where "
                    "an except handler or a with block that may suppress it would see the error: an error "
                    "raised by the graph would not reach the handler",
                    hint="the code runs in CPython, where the handler sees eager's error")
    try:
        example = tx.graph.run_fake(fn, fake_args, fake_kwargs, memo=not mutates)
    except Unsupported:
        raise
    except (torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException) as e:
        unsupported(f"{_target_name(target)} has a data-dependent output ({type(e).__name__})",
                    hint=DATA_DEPENDENT_HINT)
    except Exception as e:
        # The op would raise in eager too (wrong shapes ...): run the frame eagerly so the user sees
        # torch's own error, with its own message.
        raise Unsupported(f"{_target_name(target)} raised {type(e).__name__} while tracing: {e}") from e
    if not _contains_tensor(example) and not mutates:
        if isinstance(example, symbolic.SYM_TYPES):     # torch.numel(x), torch.sym_max(n, 1) ...
            return symbolic.wrap_sym(tx, example, lambda: tx.graph.create_node(
                kind, target, node_args, node_kwargs, example))
        return builder.wrap_constant_result(tx, example)
    node = tx.graph.create_node(kind, target, node_args, node_kwargs, example)
    return _same_objects(builder.wrap_fake_result(tx, node, example), [*args, *kwargs.values()])


# ops whose eager kernels check their tensor arguments' values and raise (an index or class out of range,
# a probability outside [0, 1]); compiled graphs check them too, but raise after the trace
_CHECKS_VALUES = frozenset({
    "gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
    "index_select", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_",
    "index_put", "index_put_", "index_reduce", "index_reduce_", "take", "take_along_dim", "put", "put_",
    "embedding", "embedding_bag", "nll_loss", "cross_entropy", "multi_margin_loss", "multilabel_margin_loss",
    "binary_cross_entropy", "bernoulli", "bernoulli_", "multinomial", "_assert_async", "masked_scatter",
    "masked_scatter_", "repeat_interleave", "bincount", "one_hot"})
_INDEXING = frozenset({"__getitem__", "getitem", "__setitem__", "setitem", "index"})


def _raises_on_data(target, fake_args):
    name = _target_name(target)
    if name in _CHECKS_VALUES:
        return True
    return name in _INDEXING and len(fake_args) > 1 and _has_integer_tensor(fake_args[1])


def _has_integer_tensor(index):
    if isinstance(index, torch.Tensor):
        return not (index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool)
    return isinstance(index, (tuple, list)) and any(_has_integer_tensor(i) for i in index)


def _device_constructors():
    from torch.utils._device import _device_constructors as constructors
    return constructors()


_QUANTIZED = frozenset({torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4})


def _quantized(args, kwargs):
    """Whether a call names a quantized dtype: it makes a quantized tensor (quantize_per_tensor), which
    fake tensors give as a float one. (Quantized tensors from outside the frame are modelled.)"""
    for v in (*args, *kwargs.values()):
        if type(v) is torch.dtype:
            if v in _QUANTIZED:
                return True
        elif type(v) in (list, tuple) and _quantized(v, {}):
            return True
    return False


# In-place ops that compute in the promoted type of self and their second operand: eager raises where that
# type can't be cast back to self's dtype (int64.mul_(2.7), float.add_(1j)); the fake kernels of some
# (mul_) do not check, and functionalization would write the value truncated
PROMOTING_INPLACE = {"add_", "sub_", "mul_", "div_", "true_divide_", "floor_divide_", "remainder_", "fmod_",
                     "pow_", "atan2_", "hypot_", "copysign_", "xlogy_", "lerp_", "addcmul_", "addcdiv_",
                     "bitwise_and_", "bitwise_or_", "bitwise_xor_", "maximum_", "minimum_", "fmax_", "fmin_"}


def _refuse_uncastable_inplace(name, fake, other):
    """A graph break at an in-place op whose result type self can't hold: CPython raises eager's error."""
    if isinstance(other, TensorVariable):
        other_value = other.fake
    elif isinstance(other, ConstantVariable) and isinstance(other.value, (bool, int, float, complex)):
        other_value = other.value
    else:
        return
    try:
        promoted = torch.result_type(fake, other_value)
    except Exception:   # noqa: BLE001 -- the op itself will say
        return
    if not torch.can_cast(promoted, fake.dtype):
        unsupported(f"Tensor.{name}() with a result of type {promoted} into a {fake.dtype} tensor: eager raises",
                    hint="the op runs in CPython, which raises eager's error")


def _refuse_inplace_on_special_view(written, fake_args, fake_kwargs):
    """An in-place op, with grad mode on and some argument requiring grad, on a view autograd cannot rebase
    (an output of split/unbind/chunk, a view made under no_grad or inference mode, in a custom Function):
    eager raises there ("... is a view and is being modified inplace"). The frame runs in CPython, which
    raises it.
    The creation kind of an input's view is the real tensor's (its fake tensor does not keep it)."""
    if not torch.is_grad_enabled():
        return
    tensors = [t for t in pytree.tree_leaves((fake_args, fake_kwargs)) if isinstance(t, torch.Tensor)]
    if not any(t.requires_grad for t in tensors):
        return
    view = written.real if written.real is not None else written.fake
    if not isinstance(view, torch.Tensor) or not view._is_view():
        return
    meta = torch._C._autograd._get_creation_meta(view)
    if meta != torch._C._autograd.CreationMeta.DEFAULT:
        # not at a graph break: the graph before it would hand the view on as a plain tensor, which takes it
        raise Unsupported(f"an in-place op on a view autograd cannot rebase ({meta.name}: an output of split, "
                          f"unbind or chunk, or a view made under no_grad): eager raises",
                          hint="the frame runs in CPython, which raises eager's error",
                          no_break="an in-place op eager refuses on a view")


def _sdpa_mask_enlarges(query, key, value, attn_mask=None, *args, **kwargs):
    """Eager's CPU attention adds the mask into the scores in place, so a mask whose broadcast would enlarge
    them (more batch dims, or a batch dim of its own) raises there (torch 2.11, 2.13; 2.14 accepts a
    leading 1), where the fake kernel broadcasts: such a call runs in CPython, as eager."""
    if not isinstance(attn_mask, torch.Tensor):
        return
    scores = (*query.shape[:-1], key.shape[-2])
    try:
        fits = tuple(torch.broadcast_shapes(attn_mask.shape, scores)) == scores
    except RuntimeError:
        fits = False
    if not fits:
        unsupported(f"scaled_dot_product_attention with an attn_mask of shape {tuple(attn_mask.shape)} for "
                    f"scores of shape {scores}: eager's kernels may refuse it",
                    hint="the call runs in CPython, which raises where eager does")


def _pow_refusal(swapped):
    """A power whose fake kernel disagrees with eager's: of booleans (a bool tensor to a Python bool
    stays bool in eager, int64 in the meta kernel; a bool tensor to a bool tensor, or a Python bool to a
    bool tensor, raises in eager), and an integer or bool tensor to a negative Python int or to a size
    symbol (eager raises "Integers to negative integer powers are not allowed"; the fake kernel and the
    compiled one compute a value). `swapped`: the method's self is the exponent (__rpow__)."""
    def check(*args, **kwargs):
        base = args[0] if args else kwargs.get("input", kwargs.get("self"))
        exponent = args[1] if len(args) > 1 else kwargs.get("exponent")
        if swapped:
            base, exponent = exponent, base
        if not isinstance(base, torch.Tensor) and not isinstance(exponent, torch.Tensor):
            return
        if _boolean(base) and _boolean(exponent):
            unsupported("a power of booleans: torch's fake kernel gives int64 where eager keeps bool or raises",
                        hint="the call runs in CPython, as in eager")
        if isinstance(base, torch.Tensor) and not base.is_floating_point() and not base.is_complex() and \
                (type(exponent) is int and exponent < 0 or isinstance(exponent, torch.SymInt) and
                 not _known_nonnegative(exponent)):
            unsupported("an integer tensor to a negative (or symbolic) integer power: eager raises for a "
                        "negative one, the compiled op would compute a value",
                        hint="the call runs in CPython, as in eager")
        if isinstance(base, torch.Tensor) and type(exponent) is int and not _scalar_fits(exponent, base.dtype):
            unsupported(f"an integer power that {base.dtype} cannot hold: eager raises",
                        hint="the call runs in CPython, as in eager")
    return check


def _known_nonnegative(n):
    """Whether the size symbol expression n is >= 0 for every value its ShapeEnv allows (a size, a sum of
    sizes), without adding a guard."""
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true
        return bool(statically_known_true(n >= 0))
    except Exception:   # noqa: BLE001 -- not decidable here: refuse as for any symbol
        return False


def _of_booleans(name):
    """A refusal of calls with a bool tensor argument: eager's kernel has none for bool and raises, where the
    fake kernel and the op's decomposition compute a value."""
    def check(*args, **kwargs):
        if any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in (*args, *kwargs.values())):
            unsupported(f"{name} of a bool tensor: eager raises, its decomposition computes a value",
                        hint="the call runs in CPython, as in eager")
    return check


def _boolean(value):
    return type(value) is bool or isinstance(value, torch.Tensor) and value.dtype == torch.bool


# ops whose eager kernels may refuse arguments their fake kernels accept, or give another dtype:
# fn(*fake args) raises Unsupported for such arguments, so the call runs in CPython at a graph break
# (raising where eager does)
def _scalar_fits(value, dtype, strict=False):
    """Whether eager's checked conversion of a Python scalar argument to dtype succeeds (c10's
    checked_convert: an integer in range, a finite float within the type's range). strict: as pad checks
    its value, with no wrapping of a negative int into an unsigned type."""
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return _symbol_fits(value, dtype, strict)
    if dtype == torch.bool or not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    if dtype.is_floating_point:
        if dtype == torch.float64 or value != value or abs(value) == float("inf"):
            return True
        return abs(float(value)) <= torch.finfo(dtype).max
    if dtype.is_complex:
        return True
    if strict:
        info = torch.iinfo(dtype)
        return info.min <= value <= info.max
    from ...ops import scalar_as
    try:
        scalar_as(value, dtype)
    except RuntimeError:
        return False
    return True


def _symbol_fits(value, dtype, strict):
    """_scalar_fits for a symbolic int or float (an argument that changes between calls): the range test
    is a guard on the symbol, so a later value on the other side of it traces again (and, out of range,
    takes eager's path, which raises). A symbolic float is finite (NaN and the infinities stay constants)
    and a symbolic int fits in int64 (builder's guard)."""
    is_float = isinstance(value, torch.SymFloat)
    if dtype == torch.bool or dtype.is_complex or dtype == torch.float64:
        return True
    if dtype.is_floating_point:
        if dtype == torch.float32 and not is_float:
            return True
        high = torch.finfo(dtype).max
        return bool(value <= high) and bool(value >= -high)
    info = torch.iinfo(dtype)
    if dtype == torch.int64 and not is_float:
        return True
    low = -info.max if info.min == 0 and not is_float and not strict else info.min
    return bool(value >= low) and bool(value <= info.max)


def _refuse_unconvertible_scalar(where, strict=False):
    """A refusal for ops that convert Python scalar arguments to a dtype with eager's overflow check
    ("value cannot be converted to type int8 without overflow"), where the compiled op would wrap:
    where(args, kwargs) -> (dtype, [scalars])."""
    def refusal(*args, **kwargs):
        try:
            dtype, scalars = where(args, kwargs)
        except (IndexError, KeyError, AttributeError, TypeError):
            return
        if dtype is not None and not all(_scalar_fits(v, dtype, strict) for v in scalars if v is not None):
            unsupported(f"a scalar argument that {dtype} cannot hold: eager raises",
                        hint="the op runs in CPython, which raises eager's error")
    return refusal


def _full_dtype(args, kwargs):
    """torch.full's dtype and fill value: the dtype given, else the one eager infers from a float or int."""
    dtype = kwargs.get("dtype")
    fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
    if dtype is None and isinstance(fill, float):
        dtype = torch.get_default_dtype()
    elif dtype is None and isinstance(fill, int) and not isinstance(fill, bool):
        dtype = torch.int64
    return dtype, [fill]


def _max_pool1d_of_integers(*args, **kwargs):
    """max_pool1d without indices on the CPU takes eager's 1-d kernel, which has none for integer or bool
    inputs (NotImplementedError), where the compiled graph's 2-d pool would return a value."""
    x = args[0] if args else kwargs.get("input")
    indices = args[6] if len(args) > 6 else kwargs.get("return_indices", False)
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and not x.is_floating_point() and \
            not x.is_complex() and indices is False:
        unsupported(f"max_pool1d of a {x.dtype} tensor: eager's CPU kernel has none for it and raises",
                    hint="the op runs in CPython, which raises eager's error")


EAGER_REFUSALS = {torch._C._nn.scaled_dot_product_attention: _sdpa_mask_enlarges}
EAGER_REFUSALS.update({target: _max_pool1d_of_integers for target in (torch.max_pool1d,
                                                                      torch.nn.functional.max_pool1d)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(
    lambda a, k: (a[0].dtype, [a[1] if len(a) > 1 else k.get("value")]))
    for target in ("fill_", torch.Tensor.fill_, torch.fill)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(
    lambda a, k: (a[0].dtype, [a[2] if len(a) > 2 else k.get("value")]))
    for target in ("masked_fill", "masked_fill_", torch.masked_fill, torch.Tensor.masked_fill,
                   torch.Tensor.masked_fill_)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(
    lambda a, k: (a[0].dtype, [a[1] if len(a) > 1 else k.get("min"), a[2] if len(a) > 2 else k.get("max")]))
    for target in ("clamp", "clamp_", "clip", "clip_", torch.clamp, torch.clip, torch.Tensor.clamp,
                   torch.Tensor.clamp_)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(_full_dtype) for target in (torch.full,)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(
    lambda a, k: (k.get("dtype") or a[0].dtype, [a[1] if len(a) > 1 else k.get("fill_value")]))
    for target in (torch.full_like,)})
EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(
    lambda a, k: (k.get("dtype") or a[0].dtype, [a[2] if len(a) > 2 else k.get("fill_value")]))
    for target in ("new_full", torch.Tensor.new_full)})


def _pad_value(args, kwargs):
    """F.pad's (and constant_pad_nd's) input dtype and constant value."""
    mode = args[2] if len(args) > 2 and isinstance(args[2], str) else kwargs.get("mode", "constant")
    value = kwargs.get("value", args[3] if len(args) > 3 else
                       args[2] if len(args) > 2 and not isinstance(args[2], str) else None)
    return (args[0].dtype if mode == "constant" else None), [value]


EAGER_REFUSALS.update({target: _refuse_unconvertible_scalar(_pad_value, strict=True) for target in (
    torch.nn.functional.pad, torch._C._nn.pad, torch.constant_pad_nd)})
EAGER_REFUSALS.update({target: _pow_refusal(False) for target in (
    operator.pow, operator.ipow, torch.pow, torch.Tensor.pow, torch.Tensor.pow_, torch.Tensor.__pow__,
    torch.Tensor.__ipow__, "pow", "pow_", "__pow__", "__ipow__")})
EAGER_REFUSALS.update({target: _pow_refusal(True) for target in (torch.Tensor.__rpow__, "__rpow__")})
EAGER_REFUSALS.update({target: _of_booleans("torch.trace") for target in (torch.trace, torch.Tensor.trace, "trace")})
EAGER_REFUSALS.update({target: _of_booleans("hardsigmoid") for target in (torch._C._nn.hardsigmoid,
                                                                           torch.nn.functional.hardsigmoid)})
EAGER_REFUSALS.update({target: _of_booleans("lerp") for target in (torch.lerp, torch.Tensor.lerp, torch.Tensor.lerp_,
                                                                     "lerp", "lerp_")})


# ops whose eager kernels require their tensor operands to share a dtype, which fake kernels do not check
# (a dead one would be dropped, a live one compiled to a value): a mixed call runs in CPython, which raises
# eager's error. Where autocast is on (it is entered for real while tracing), the ops it casts to one dtype
# are not checked: _AUTOCAST_CASTS, per device type (torch's autocast lists).
_AUTOCAST_CASTS = {"cpu": frozenset({"mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "linear", "conv1d",
                                     "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                                     "__matmul__", "__rmatmul__"})}
_AUTOCAST_CASTS["cuda"] = _AUTOCAST_CASTS["cpu"] | {"mv", "addmv", "chain_matmul", "lstm_cell", "gru_cell",
                                                    "rnn_tanh_cell", "rnn_relu_cell", "cross", "cdist"}


def _dtypes_agree(name, operands=lambda a, k: [*a, *k.values()], low_precision_input=False):
    """operands(args, kwargs) -> the values whose tensors must share a dtype. low_precision_input: the norms'
    CPU kernels also take a 16-bit input with float32 parameters."""
    def check(*args, **kwargs):
        try:
            tensors = [t for t in operands(args, kwargs) if isinstance(t, torch.Tensor)]
        except (IndexError, KeyError):
            return
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) < 2:
            return
        device = tensors[0].device.type
        if torch.is_autocast_enabled(device) and name in _AUTOCAST_CASTS.get(device, ()):
            return
        if low_precision_input and tensors[0].dtype in (torch.float16, torch.bfloat16) and \
                all(t.dtype in (tensors[0].dtype, torch.float32) for t in tensors[1:]):
            return
        unsupported(f"{name} of tensors of different dtypes ({', '.join(sorted(map(str, dtypes)))}): eager raises",
                    hint="the call runs in CPython, which raises eager's error")
    return check


def _index_dtype(name, position, keyword):
    """index_select's index must be int32 or int64 (its fake kernel takes any integer dtype)."""
    def check(*args, **kwargs):
        index = args[position] if len(args) > position else kwargs.get(keyword)
        if isinstance(index, torch.Tensor) and index.dtype not in (torch.int32, torch.int64):
            unsupported(f"{name} with a {index.dtype} index: eager raises",
                        hint="the call runs in CPython, which raises eager's error")
    return check


def _positions(*where):
    """operands for _dtypes_agree: the arguments at these (position, keyword) places (position None: a
    keyword-only argument)."""
    def operands(args, kwargs):
        return [args[i] if i is not None and len(args) > i else kwargs.get(k) for i, k in where]
    return operands


def _all_spellings(name):
    """name as a Tensor method (its string) and as the functions of torch, torch.Tensor, F, torch.linalg and
    torch._C._nn."""
    return (name, *[getattr(m, name) for m in (torch, torch.Tensor, torch.nn.functional, torch.linalg, torch._C._nn)
                    if callable(getattr(m, name, None))])


def _refuse_also(names, check):
    """check added, for every spelling of each name, after any refusal already registered for it."""
    for name in names:
        for target in _all_spellings(name):
            earlier = EAGER_REFUSALS.get(target)
            EAGER_REFUSALS[target] = check if earlier is None else _both(earlier, check)


def _both(*checks):
    def check(*args, **kwargs):
        for c in checks:
            c(*args, **kwargs)
    return check


for _names, _check in (
        (("mm", "bmm", "matmul", "mv", "dot", "vdot", "addmm", "addbmm", "baddbmm", "addmv",
          "inner", "linear", "bilinear", "cross", "cdist", "chain_matmul", "rnn_tanh_cell",
          "rnn_relu_cell", "lstm_cell", "gru_cell", "__matmul__", "__rmatmul__", "matmul_"),
         lambda n: _dtypes_agree(n)),
        (("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
         lambda n: _dtypes_agree(n, _positions((0, "input"), (1, "weight"), (2, "bias")))),
        (("grid_sample",), lambda n: _dtypes_agree(n, _positions((0, "input"), (1, "grid")))),
        (("index_put", "index_put_"), lambda n: _dtypes_agree(n, _positions((0, "input"), (2, "values")))),
        (("index_copy", "index_copy_"), lambda n: _dtypes_agree(n, _positions((0, "input"), (3, "source")))),
        (("layer_norm",), lambda n: _dtypes_agree(n, _positions((0, "input"), (2, "weight"), (3, "bias")), True)),
        (("group_norm",), lambda n: _dtypes_agree(n, _positions((0, "input"), (2, "weight"), (3, "bias")), True)),
        (("batch_norm",), lambda n: _dtypes_agree(n, _positions((0, "input"), (1, "running_mean"), (2, "running_var"),
                                                                (3, "weight"), (4, "bias")), True))):
    for _name in _names:
        EAGER_REFUSALS.update({t: _check(_name) for t in _all_spellings(_name) if t not in EAGER_REFUSALS})
EAGER_REFUSALS.update({t: _dtypes_agree("matmul") for t in (operator.matmul, operator.imatmul)})
EAGER_REFUSALS.update({t: _index_dtype("index_select", 2, "index")
                       for t in (torch.index_select, torch.Tensor.index_select, "index_select")})


def _of_non_floating(name):
    """A refusal of calls whose tensor arguments promote to an integer or bool dtype: eager's CPU kernel
    exists for floating dtypes only and raises, where the compiled op computes a value (a float tensor
    beside an integer one promotes to float, which eager computes)."""
    def check(*args, **kwargs):
        dtypes = [a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if dtypes:
            dtype = functools.reduce(torch.promote_types, dtypes)
            if not dtype.is_floating_point and not dtype.is_complex:
                unsupported(f"{name} of {dtype} tensors: eager's kernel has none and raises",
                            hint="the call runs in CPython, as in eager")
    return check


def _addcdiv_of_integers(*args, **kwargs):
    """addcdiv whose tensor1 and tensor2 are both integer or bool: eager raises ("Integer division with
    addcdiv is no longer supported"), whatever self's dtype."""
    if all(isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex()
           for t in _positions((1, "tensor1"), (2, "tensor2"))(args, kwargs)):
        unsupported("addcdiv of two integer tensors: eager raises", hint="the call runs in CPython, as in eager")


def _scalars_of(*where, condition=False, integral_only=False):
    """For _refuse_unconvertible_scalar: the tensor arguments' dtype (the first one's, or the result dtype of
    the first two; condition: after where's condition) and the Python numbers at these (position, keyword)
    places (_positions). integral_only: eager checks only an integer result's scalars (where and threshold
    of a float16 tensor and -1e9 give -inf), and a float scalar makes it float."""
    def find(args, kwargs):
        operands = [*args, *kwargs.values()]
        tensors = [a for a in operands[1 if condition else 0:] if isinstance(a, torch.Tensor)]
        if not tensors:
            return None, []
        dtype = tensors[0].dtype if len(tensors) == 1 else torch.result_type(*tensors[:2])
        values = [v for v in _positions(*where)(args, kwargs)
                  if isinstance(v, (int, float)) or isinstance(v, symbolic.SYM_TYPES)]
        if integral_only:
            if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or \
                    any(isinstance(v, (float, torch.SymFloat)) for v in values):
                return None, []
        return dtype, values
    return find


def _float_alpha_of_integers(*args, **kwargs):
    """add/sub with a float alpha on integer or bool tensors: eager raises ("For integral input tensors,
    argument alpha must not be a floating point number"), the compiled op rounds it."""
    alpha = kwargs.get("alpha")
    tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
    if isinstance(alpha, (float, torch.SymFloat)) and tensors and \
            not any(t.is_floating_point() or t.is_complex() for t in tensors):
        unsupported("a float alpha on integer tensors: eager raises", hint="the call runs in CPython, as in eager")


def _cumsum_to_bool(*args, **kwargs):
    if kwargs.get("dtype") == torch.bool:
        unsupported("a cumulative sum in bool: eager's kernel has none and raises",
                    hint="the call runs in CPython, as in eager")


def _softmax_of_integers(*args, **kwargs):
    """softmax / log_softmax of an integer or bool tensor without a floating dtype= to compute in: eager's
    kernel has none and raises (the compiled op's exp of an integer did not build)."""
    x = args[0] if args else kwargs.get("input")
    dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
    if isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex() and \
            not (isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex)):
        unsupported("softmax of an integer or bool tensor: eager's kernel has none and raises",
                    hint="the call runs in CPython, as in eager")


for _name in ("softplus", "hardswish", "hardswish_", "mish", "mish_", "hardsigmoid", "hardsigmoid_", "hardshrink",
              "softshrink", "celu", "celu_", "elu", "elu_", "selu", "selu_", "silu", "silu_", "gelu", "leaky_relu",
              "leaky_relu_", "rrelu", "rrelu_", "logsigmoid", "log_sigmoid", "glu", "prelu", "_prelu_kernel",
              "smooth_l1_loss", "huber_loss", "mse_loss", "l1_loss", "logaddexp", "logaddexp2", "lerp", "lerp_",
              "hypot", "hypot_", "nextafter", "nextafter_", "frac", "frac_", "dist", "renorm", "renorm_"):
    _refuse_also([_name], _of_non_floating(_name))
for _name in ("softsign", "tanhshrink", "relu6", "hardtanh", "hardtanh_", "threshold", "threshold_", "dot", "vdot",
              "addcmul", "addcmul_"):
    _refuse_also([_name], _of_booleans(_name))
for _names, _where in ((("threshold", "threshold_"),
                        _scalars_of((1, "threshold"), (2, "value"), integral_only=True)),
                       (("hardtanh", "hardtanh_"), _scalars_of((1, "min_val"), (2, "max_val"))),
                       (("where",), _scalars_of((1, "input"), (2, "other"), condition=True, integral_only=True)),
                       (("add", "add_", "sub", "sub_"), _scalars_of((None, "alpha")))):
    _refuse_also(_names, _refuse_unconvertible_scalar(_where))
_refuse_also(("add", "add_", "sub", "sub_"), _float_alpha_of_integers)
_refuse_also(("softmax", "log_softmax", "_softmax", "_log_softmax"), _softmax_of_integers)
_refuse_also(("addcdiv", "addcdiv_"), _addcdiv_of_integers)
_refuse_also(("cumsum", "cumsum_"), _cumsum_to_bool)
_refuse_also(("heaviside", "heaviside_"), _dtypes_agree("heaviside"))


def _same_objects(result, inputs):
    """Where the op returned one of its tensor arguments itself (in-place ops, `out=`, `x.to(x.dtype)`,
    `x.contiguous()` of a contiguous x: the fake op returns the very fake it was given, as the real op
    returns the very tensor), the result is that argument's Variable: `x.add_(1) is x`, and a set or
    dict keyed by the two holds one entry."""
    by_fake = {}
    for value in inputs:
        for tensor in _tensor_vars(value):
            by_fake.setdefault(id(tensor.fake), tensor)
    if not by_fake:
        return result
    if isinstance(result, TensorVariable):
        return by_fake.get(id(result.fake), result)
    if isinstance(result, containers.BaseListVariable):
        result.items = [by_fake.get(id(v.fake), v) if isinstance(v, TensorVariable) else v for v in result.items]
    return result


def _tensor_vars(value):
    if isinstance(value, TensorVariable):
        return [value]
    if isinstance(value, containers.BaseListVariable):
        return [t for v in value.items for t in _tensor_vars(v)]
    return []


def _target_name(target):
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))


# sibling modules bound at the end (they import this one, or are loading while it loads): read at call time,
# without an import statement on each op recorded
from . import builder, containers, objects  # noqa: E402
