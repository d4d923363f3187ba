"""On-disk cache of compiled graphs (the C++ and Triton devices): a graph captured again in a later process (a
restarted server, the next job) skips decompose, lower, schedule and codegen, and loads what they made.

    key = key_for(device, gm, concrete_inputs, example_inputs, facts)   # None: not cacheable
    call = load(key, gm, facts)                                         # None: not there, or unusable
    store(key, job, unit, call)                                         # after a compile

The key hashes everything the generated code depends on: the captured graph's code, each input's size,
strides, offset, dtype, device, requires_grad and negative/conjugate bits, which inputs share memory, the
content of its tensor constants, the graph facts, the versions of graphjit (and a hash of its source), torch
and Python, config.codegen_key(), the C++ compiler, its flags and the CPU, and the process state the
compiler reads (default dtype, matmul precision, deterministic mode, the caller's autocast). A graph with size symbols is keyed by its inputs' symbolic sizes and by what
its ShapeEnv knows before the compile (guards, ranges, replacements), not by the example sizes: its entry
serves every size, and keeps the guards the compile added (`shape_guards`, as expression trees). A load
checks them on this process's sizes (an entry whose guards fail is for other sizes: compiled again) and
records them in the ShapeEnv, as the compile would have, so that capture puts them into the entry's
guards. A graph is not cached where a part of the key cannot be read: a SymFloat or SymBool input, a call
of a function from outside torch or of a custom op (its code could change between processes), a submodule,
a constant too large to keep.

An entry is one JSON file, `cache_dir/graphs/<key>.json`, holding the kernels' source (C++: its library is
runtime/cpp_build.py's, cached by its own key; Triton: the module and each launched kernel's binary, which a
load puts on the GPU directly (triton_build.load_binary), or, where a binary does not fit this process,
compiles again for what it was compiled for the first time, a hit of Triton's own cache), the wrapper's
Python source, and a recipe for each global the wrapper names (an op by its qualified name, a dtype, a
small constant's bytes, a Triton kernel's launcher ...), with a SHA-256 of the rest. No pickle: nothing read back is unpickled. It is written under a temporary name and renamed into
place (readers never see half a file; two processes writing one entry both write a whole one). A file that
does not parse, whose digest, format or key differs, or whose recipes do not rebuild is reported with one
warning, removed, and the graph compiled again. The folder is created private to the user (0700).
"""
import base64
import ctypes
import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import time
import warnings

import torch
from torch.utils import _pytree as pytree

from ...cache_files import discard, write_whole
from ... import config, logs
from ...ops import autocast_state

FORMAT = 1
CONSTANT_BYTES = 1 << 20      # tensor constants larger than this are not kept in an entry


class NotCacheable(Exception):
    """What keeps a graph out of the cache (logged under GRAPHJIT_LOGS=fusion)."""


def key_for(device, gm, concrete_inputs, example_inputs, facts):
    """The graph's cache key, or None where it is not cached (config.graph_cache off, another device, or
    something NotCacheable)."""
    if not config.graph_cache or device.name not in ("C++", "Triton"):
        return None
    try:
        return _key(gm, concrete_inputs, example_inputs, facts, device.name)
    except Exception as e:   # noqa: BLE001 -- NotCacheable, or a graph the key can't read: compile it
        logs.log("fusion", f"graph {facts.name} is not cached on disk: {e}")
        return None


@functools.lru_cache(maxsize=None)
def _source_fingerprint():
    """A hash of graphjit's own source: a compiler changed in any way (a fix, a checkout of another commit)
    makes new keys, so no entry made by other code is ever loaded. Read once per process (a few ms)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                digest.update(os.path.relpath(os.path.join(folder, name), package).encode())
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:16]


_TORCH_MODULES = ("torch", "_operator", "operator", "math", "builtins", "_functools", "functools")
# op namespaces whose kernels come with torch (or graphjit, whose source the key hashes); another namespace's
# ops are registered by the user's code, whose kernels and meta functions may differ in the next process
_TORCH_OP_NAMESPACES = {"aten", "prims", "graphjit", "_c10d_functional", "c10d_functional",
                        "_c10d_functional_autograd", "quantized", "_quantized", "rngprims", "profiler"}


def shape_env():
    """The ShapeEnv of the graph being compiled (compiler/ir.py's sizes_of), None for concrete sizes."""
    from .. import ir
    return ir._shape_envs[-1] if ir._shape_envs else None


def _key(gm, concrete_inputs, example_inputs, facts, language="C++"):
    from .cpp_build import _cpu_id, compiler_id
    import graphjit
    symbolic = any(isinstance(s, torch.SymInt) for v in example_inputs
                   for s in ((v,) if not isinstance(v, torch.Tensor) else (*v.shape, *v.stride(), v.storage_offset())))
    env = shape_env()
    if symbolic and env is None:
        raise NotCacheable("size symbols without their ShapeEnv")
    parts = [f"format {FORMAT}", language, *_triton_parts(language, concrete_inputs),
             graphjit.__version__, _source_fingerprint(), torch.__version__,
             sys.version.split()[0],
             config.codegen_key(), compiler_id()[1], " ".join(config.cxx_flags), _cpu_id(),
             str(torch.get_default_dtype()),
             torch.get_float32_matmul_precision(), str(torch.are_deterministic_algorithms_enabled()),
             f"autocast {autocast_state()!r}", repr(dataclasses.replace(facts, name=""))]
    for value in example_inputs:
        parts.append(_input_part(value, symbolic))
    if symbolic:
        parts.append(_shape_env_part(env))
    storages = {}
    for value in concrete_inputs:        # which inputs share memory (real tensors, or AOT's fake ones)
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()._cdata
            parts.append(f"storage {storages.setdefault(storage, len(storages))}")
        else:
            parts.append("storage -")
    parts.append(gm.code)
    reason = uncacheable_reason(gm)
    if reason is not None:
        raise NotCacheable(reason)
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            parts.append(f"{node.target}: {_constant_part(_attr(gm, node.target), node.target)}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def uncacheable_reason(gm):
    """Why gm's code does not say all it computes (so no disk cache may key on it), or None: a submodule,
    a custom op or a function from outside torch (their code is the user's, which may change, and its
    name is all the code shows), an argument the code names but does not print."""
    for node in gm.graph.nodes:
        if node.op == "call_module":
            return f"the graph calls a submodule ({node.target})"
        if node.op == "call_function" and _op_namespace(node.target) not in (None, *_TORCH_OP_NAMESPACES):
            return f"the graph calls the custom op {node.target} (its kernels, registered in Python, may change)"
        if node.op == "call_function" and not isinstance(node.target, torch._ops.OpOverload):
            module = getattr(node.target, "__module__", None) or ""
            if not module.split(".")[0] in _TORCH_MODULES:
                return (f"the graph calls {getattr(node.target, '__qualname__', node.target)} of "
                        f"{module or 'no module'}, whose code may change")
        for leaf in pytree.tree_leaves((node.args, node.kwargs)):
            if not isinstance(leaf, _PRINTED_EXACTLY):      # the code names it; its value would not be keyed
                return f"an argument of type {type(leaf).__name__} ({node.format_node()})"
    return None


def _triton_parts(language, concrete_inputs):
    """What Triton kernels depend on besides their source: Triton's version, and the GPU (its name and
    compute capability) or Triton's interpreter."""
    if language != "Triton":
        return []
    import triton
    parts = [f"triton {triton.__version__}"]
    for device in sorted({str(t.device) for t in concrete_inputs if isinstance(t, torch.Tensor)}):
        if device.startswith("cuda"):
            index = torch.device(device).index or 0
            parts.append(f"{device} {torch.cuda.get_device_name(index)} {torch.cuda.get_device_capability(index)} "
                         f"cuda {torch.version.cuda}")
        else:
            parts.append(f"{device} interpreted")
    return parts


# node arguments whose value the graph's printed code spells out in full
_PRINTED_EXACTLY = (torch.fx.Node, type(None), bool, int, float, complex, str, torch.dtype, torch.device,
                    torch.layout, torch.memory_format, slice, type(Ellipsis), torch.Size)


def _op_namespace(target):
    """The namespace of an op (`aten` of torch.ops.aten.add and of torch.ops.aten.add.Tensor), else None."""
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[0]
    return None


def _input_part(value, symbolic=False):
    """An input as the key reads it; with `symbolic`, sizes and ints as their expressions over the size
    symbols (so the key holds for every size)."""
    if isinstance(value, torch.Tensor):
        return (f"tensor {tuple(str(s) for s in value.shape)} {tuple(str(s) for s in value.stride())} "
                f"{value.storage_offset()} {value.dtype} {value.device} {value.requires_grad} {value.layout} "
                f"{value.is_neg()} {value.is_conj()}")
    if isinstance(value, torch.SymInt):
        return f"symint {value}"
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise NotCacheable(f"a {type(value).__name__} input")
    if value is None or isinstance(value, (bool, int, float)):
        return f"value {value!r}"
    raise NotCacheable(f"an input of type {type(value).__name__}")


def _shape_env_part(env):
    """What a symbolic compile may decide by besides the graph: the ShapeEnv's guards (from the trace),
    its symbols' ranges and its replacements."""
    guards = [str(g.expr) for g in env.guards]
    ranges = sorted(f"{s} in [{r.lower}, {r.upper}]" for s, r in env.var_to_range.items())
    replaced = sorted(f"{s} = {e}" for s, e in env.replacements.items())
    return "shape env " + "; ".join(guards) + " | " + "; ".join(ranges) + " | " + "; ".join(replaced)


@functools.lru_cache(maxsize=None)
def _expression_classes():
    """Name -> class of the sympy and torch size functions a stored guard may be built of."""
    import inspect
    import sympy
    from torch.utils._sympy import functions
    classes = {c.__name__: c for c in (sympy.Add, sympy.Mul, sympy.Pow, sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le,
                                       sympy.Gt, sympy.Ge, sympy.And, sympy.Or, sympy.Not, sympy.Abs)}
    classes.update({name: c for name, c in vars(functions).items()
                    if inspect.isclass(c) and issubclass(c, sympy.Function) and c.__module__ == functions.__name__})
    return classes


def expression_tree(expr):
    """A size expression as JSON: ["int", n], ["sym", name], ["bool", b] or [class name, [arguments]]."""
    import sympy
    if isinstance(expr, sympy.Integer):
        return ["int", int(expr)]
    if isinstance(expr, sympy.Rational):
        return ["rational", int(expr.p), int(expr.q)]
    if isinstance(expr, sympy.Symbol):
        return ["sym", expr.name]
    if expr is sympy.true or expr is sympy.false:
        return ["bool", bool(expr)]
    name = type(expr).__name__
    if _expression_classes().get(name) is not type(expr):
        raise NotCacheable(f"a size guard of {name} ({expr})")
    return [name, [expression_tree(a) for a in expr.args]]


def expression_from_tree(tree, symbols):
    """The expression of an expression_tree, over `symbols` (name -> Symbol); ValueError for anything else."""
    import sympy
    kind = tree[0]
    if kind == "int":
        return sympy.Integer(int(tree[1]))
    if kind == "rational":
        return sympy.Rational(int(tree[1]), int(tree[2]))
    if kind == "sym":
        if tree[1] not in symbols:
            raise ValueError(f"a size guard names {tree[1]!r}, which this trace has no symbol for")
        return symbols[tree[1]]
    if kind == "bool":
        return sympy.true if tree[1] else sympy.false
    cls = _expression_classes().get(kind)
    if cls is None:
        raise ValueError(f"a size guard of unknown function {kind!r}")
    return cls(*(expression_from_tree(a, symbols) for a in tree[1]))


def _attr(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _constant_part(value, target):
    if not isinstance(value, torch.Tensor):
        raise NotCacheable(f"the graph reads {target}, a {type(value).__name__}")
    return f"{tuple(value.shape)} {value.stride()} {value.dtype} {value.device} {_digest(value)}"


def _tensor_bytes(t):
    if t.layout != torch.strided or t.device.type not in ("cpu", "cuda") or \
            t.numel() * t.element_size() > CONSTANT_BYTES * 64:
        raise NotCacheable("a tensor constant that is not a dense CPU or CUDA tensor of modest size")
    t = t.detach().contiguous().cpu()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def _digest(t):
    return hashlib.sha256(_tensor_bytes(t)).hexdigest()


# ---- entries ----

def _path(key):
    return os.path.join(config.cache_dir, "graphs", f"{key}.json")


def _helpers():
    """Globals of generated wrappers that are fixed functions and modules, by the names they are bound to."""
    from ..codegen import cpp, wrapper
    helpers = {"empty_strided": torch.empty_strided, "reinterpret": wrapper._reinterpret, "as_view": wrapper._as_view,
               "torch": torch,
               "math": math, "grad_enabled": torch.is_grad_enabled, "kernel_error": cpp.kernel_error,
               "as_traced": wrapper._as_traced, "_unflatten": pytree.tree_unflatten,
               "_record_function": torch.profiler.record_function}
    helpers.update({f"empty_{device}": fn for device, fn in wrapper._FAST_EMPTY.items()})
    helpers.update(_pad=torch.constant_pad_nd, zeros=torch.zeros, _int32=torch.int32)
    if torch.cuda.is_available():
        helpers.update(get_device=torch._C._cuda_getDevice, device_guard=torch.cuda.device,
                       get_stream=torch._C._cuda_getCurrentRawStream)
    try:
        from ..codegen.triton import _interpreting
        helpers["interpreting"] = _interpreting
    except ImportError:
        pass
    return helpers


def store(key, job, unit, call, shape_guards=()):
    """Write the entry of a graph compiled under `key` (nothing where a global has no recipe).
    shape_guards: the guards on size symbols the compile added to the ShapeEnv."""
    code = getattr(call, "wrapper_code", None)
    if code is None:
        return
    try:
        guards = [expression_tree(g.expr) for g in shape_guards]
        helpers = _helpers()
        triton = _triton_part(unit) if getattr(unit, "name", "") == "Triton" else None
        kernels = set(unit.signatures or ()) if triton is None else set(triton["module_names"]) | \
            {f"{launch['name']}_{part}" for launch in triton["launches"] for part in ("fn", "meta", "launch", "run")}
        constants = {id(_attr(job.gm, n.target)): n.target for n in job.gm.graph.nodes if n.op == "get_attr"}
        recipes = {}
        for name, value in code.globals.items():
            if name in kernels:
                continue
            if name == "eager":
                recipes[name] = ["eager"]
            elif name in code.op_names:
                recipes[name] = ["op_fn", _op_name(code.op_names[name])]
            elif name in helpers and helpers[name] is value:
                recipes[name] = ["helper", name]
            else:
                recipes[name] = _recipe(value, constants)
    except Exception as e:   # noqa: BLE001 -- NotCacheable, or a global no recipe reads: not stored
        logs.log("fusion", f"graph {job.facts.name} is not cached on disk: {e}")
        return
    from .. import scheduler
    body = {"format": FORMAT, "key": key,
            "kernel_source": job.source if (triton is not None or unit.signatures) else "",
            "signatures": {n: [len(s.args), len(s.sizes)] for n, s in (getattr(unit, "signatures", None) or {}).items()},
            "triton": triton, "shape_guards": guards,
            "wrapper_source": call.wrapper_source, "globals": recipes,
            "kernels": [{"name": i.name, "text": str(i)} for i in job.items if isinstance(i, scheduler.Kernel)],
            "externs": sum(not isinstance(i, scheduler.Kernel) for i in job.items)}
    text = json.dumps({"digest": _body_digest(body), "body": body})
    path = _path(key)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_whole(path, text.encode("utf-8"), prefix=f".{key}.")
    except OSError as e:        # a read-only or full disk costs the next process a compile, nothing more
        logs.log("fusion", f"could not write the compiled-graph cache entry {path}: {e}")


def _triton_part(unit):
    """A Triton graph's kernels as an entry keeps them: the module's names the wrapper reads, and each
    launched kernel's compile options, the arguments it was compiled for (tensors by dtype and 16-byte
    alignment, which is what Triton specializes on) and how the wrapper calls its launcher."""
    from ..codegen.triton import _direct_launch
    from .triton_build import binary_record
    launches = dict(unit.by_name)
    launches.update({t.name: t for t in unit.templates.values()})
    out = []
    for name in sorted(unit.launchers):
        launch = launches[name]
        run = unit.launchers[name][0]
        direct = _direct_launch(run)
        out.append({"name": name, "constexprs": dict(launch.constexprs), "num_warps": launch.num_warps,
                    "num_stages": launch.num_stages, "debug": bool(getattr(launch, "debug", False)),
                    "args": [_warmup_spec(a) for a in unit.examples[name]],
                    "direct": None if direct is None else [direct[1], direct[2]],
                    "binary": binary_record(unit.kernels[name]) if name in unit.kernels else None})
    return {"interpret": bool(unit.interpret), "device": str(unit.device), "module_names": list(launches),
            "launches": out}


def _warmup_spec(value):
    if isinstance(value, torch.Tensor):
        return ["tensor", str(value.dtype).replace("torch.", ""), value.data_ptr() % 16 == 0]
    if isinstance(value, torch.dtype):
        return ["dtype", str(value).replace("torch.", "")]
    if isinstance(value, (bool, int)):
        return ["value", value]
    if isinstance(value, float):
        return ["float", repr(value)]
    raise NotCacheable(f"a Triton kernel compiled for a {type(value).__name__}")


def _warmup_value(spec, device):
    kind, *args = spec
    if kind == "tensor":
        dtype = _dtype(args[0])
        # what Triton specializes on: the address's 16-byte alignment (allocations are aligned)
        return torch.empty(1, dtype=dtype, device=device) if args[1] else _misaligned(dtype, device)
    if kind == "dtype":
        return _dtype(args[0])
    if kind == "value":
        return args[0]
    if kind == "float":
        return float(args[0])
    raise ValueError(f"unknown kernel argument {kind!r}")


def _dtype(name):
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"torch.{name} is not a dtype")
    return dtype


def _misaligned(dtype, device):
    """A one-element tensor of dtype whose address is not 16-byte aligned."""
    size = torch.empty((), dtype=dtype).element_size()
    if size >= 16:
        raise ValueError(f"no misaligned {dtype} tensor to compile for")
    return torch.empty(16 // size + 1, dtype=dtype, device=device)[1:2]


def _body_digest(body):
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _op_name(op):
    if not isinstance(op, torch._ops.OpOverload):
        raise NotCacheable(f"an extern call of {op!r}, not an ATen op")
    return op.name()


def _op(name):
    namespace, rest = name.split("::")
    if namespace == "graphjit":
        from .. import decompose        # noqa: F401 -- registers graphjit's own ops
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def _recipe(value, constants):
    from ..codegen.triton import StaticAlignment
    from ..codegen.wrapper import DisjointInputs
    if value is None or isinstance(value, (bool, int, str)):
        return ["value", value]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, tuple) and type(value) is tuple:
        return ["tuple", [_recipe(v, constants) for v in value]]
    if isinstance(value, torch.dtype):
        return ["dtype", str(value).replace("torch.", "")]
    if isinstance(value, torch.device):
        return ["device", str(value)]
    if isinstance(value, torch.memory_format):
        return ["memory_format", str(value).replace("torch.", "")]
    if isinstance(value, torch.layout):
        return ["layout", str(value).replace("torch.", "")]
    if isinstance(value, torch._ops.OpOverload):
        return ["op", value.name()]
    if isinstance(value, pytree.TreeSpec):
        try:
            return ["spec", pytree.treespec_dumps(value)]
        except Exception as e:   # noqa: BLE001 -- a node type pytree can't serialize
            raise NotCacheable(f"an output structure pytree can't serialize ({e})") from None
    if isinstance(value, DisjointInputs):
        return ["disjoint", [list(value.written), list(value.moving), list(value.fixed)]]
    if isinstance(value, StaticAlignment):
        return ["static_aligned", len(value.indices)]
    if isinstance(value, torch.Tensor):
        if id(value) in constants:
            return ["attr", constants[id(value)]]
        if value.numel() * value.element_size() > CONSTANT_BYTES:
            raise NotCacheable(f"a tensor constant of {value.numel() * value.element_size()} bytes")
        if value.storage_offset() or not value.is_contiguous() or value.requires_grad:
            raise NotCacheable("a tensor constant that is a view")
        return ["tensor", str(value.dtype).replace("torch.", ""), list(value.shape),
                base64.b64encode(_tensor_bytes(value)).decode(), str(value.device)]
    raise NotCacheable(f"a wrapper global of type {type(value).__name__}")


def _triton_globals(part, source):
    """The wrapper's globals a Triton entry rebuilds: its kernels (the module imported again), and on a GPU
    each launched kernel compiled for what it was compiled for before (Triton's cache has the binary) with
    its launcher, called as the wrapper's source calls it."""
    from . import triton_build
    from ..codegen.triton import _direct_launch
    from types import SimpleNamespace
    module = triton_build.load(source, interpret=part["interpret"])
    namespace = {name: getattr(module, name) for name in part["module_names"]}
    if not part["launches"]:
        return namespace
    device = torch.device(part["device"])
    compiled = _stored_binaries(module, part["launches"], device)
    if compiled is None:
        launches = [SimpleNamespace(name=l["name"], constexprs=l["constexprs"], num_warps=l["num_warps"],
                                    num_stages=l["num_stages"], debug=l["debug"]) for l in part["launches"]]
        examples = {l["name"]: [_warmup_value(a, device) for a in l["args"]] for l in part["launches"]}
        compiled = triton_build.compile_all(module, launches, device, examples, config.triton_compile_threads)
    for launch in part["launches"]:
        name = launch["name"]
        kernel = compiled[name]
        namespace[f"__kernel_{name}"] = kernel          # held while the wrapper is: it owns the loaded module
        direct = _direct_launch(kernel.run)
        if (direct is None) != (launch["direct"] is None) or \
                (direct is not None and [direct[1], direct[2]] != launch["direct"]):
            raise ValueError(f"the launcher of {name} is not called as the entry's wrapper calls it")
        namespace[f"{name}_fn"], namespace[f"{name}_meta"] = kernel.function, kernel.packed_metadata
        if direct is not None:
            namespace[f"{name}_launch"] = direct[0]
        else:
            namespace[f"{name}_run"] = kernel.run
    return namespace


def _stored_binaries(module, launches, device):
    """name -> kernel, each loaded from the binary the entry keeps (no Triton JIT, compile or cache key; with
    Triton 3.6 a launcher its cache lacks is still built by the host compiler); None where a launch has no
    binary or one does not load here (another GPU or Triton: said under GRAPHJIT_LOGS=output_code), and the
    kernels then compile through Triton's cache of binaries."""
    from . import triton_build
    if not all(launch.get("binary") for launch in launches):
        return None
    try:
        return triton_build.load_binaries(module, {launch["name"]: launch["binary"] for launch in launches}, device)
    except Exception as e:  # noqa: BLE001 -- not loadable here: compiled through Triton instead
        logs.log("output_code", f"the entry's kernel binaries do not load here ({type(e).__name__}: {e}); "
                                f"compiling them through Triton")
        return None


def _rebuild(recipe, gm):
    from ..codegen.wrapper import DisjointInputs
    kind, *args = recipe
    if kind == "value":
        return args[0]
    if kind == "float":
        return float(args[0])
    if kind == "tuple":
        return tuple(_rebuild(r, gm) for r in args[0])
    if kind in ("dtype", "memory_format", "layout"):
        value = getattr(torch, args[0])
        expected = {"dtype": torch.dtype, "memory_format": torch.memory_format, "layout": torch.layout}[kind]
        if not isinstance(value, expected):
            raise ValueError(f"torch.{args[0]} is not a {kind}")
        return value
    if kind == "device":
        return torch.device(args[0])
    if kind == "op":
        return _op(args[0])
    if kind == "op_fn":
        op = _op(args[0])
        return getattr(op, "_op", op)
    if kind == "spec":
        return pytree.treespec_loads(args[0])
    if kind == "disjoint":
        return DisjointInputs(*args[0])
    if kind == "static_aligned":
        from ..codegen.triton import StaticAlignment
        return StaticAlignment(int(args[0]), torch._C._tensors_data_ptrs_at_indices_equal)
    if kind == "attr":
        value = _attr(gm, args[0])
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{args[0]} is not a tensor")
        return value
    if kind == "tensor":
        dtype, shape, data = _dtype(args[0]), args[1], base64.b64decode(args[2], validate=True)
        flat = torch.empty(math.prod(shape), dtype=dtype)
        if len(data) != flat.numel() * flat.element_size():
            raise ValueError("a constant's bytes do not match its size")
        if data:
            ctypes.memmove(flat.data_ptr(), data, len(data))
        return flat.reshape(shape).to(torch.device(args[3]) if len(args) > 3 else "cpu")
    raise ValueError(f"unknown recipe {kind!r}")


def load(key, gm, facts):
    """The compiled callable of the entry under `key`, or None (not there; unusable: warned and removed)."""
    path = _path(key)
    if not os.path.exists(path):
        return None
    start = time.perf_counter()
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        body = stored["body"]
        if stored["digest"] != _body_digest(body):
            raise ValueError("its digest does not match its content (truncated or altered)")
        if body["format"] != FORMAT or body["key"] != key:
            raise ValueError(f"it is of format {body.get('format')} for key {body.get('key')}")
        guards = _shape_guards(body.get("shape_guards") or [])
        if guards is None:
            return None
        call = _instantiate(body, gm, facts)
        env = shape_env()
        for guard in guards:                # as the compile recorded them: capture adds them to the entry
            env.evaluate_expr(guard)
    except Exception as e:   # noqa: BLE001 -- any fault of the file: compile again
        discard(path, f"graphjit: the compiled-graph cache entry {path} is unusable ({type(e).__name__}: {e}); "
                      f"it is removed and the graph compiled again")
        return None
    call.timings = {"cache load": time.perf_counter() - start}
    return call


def _shape_guards(trees):
    """The stored size guards over this compile's symbols; None where one fails on this process's sizes
    (the entry was compiled under assumptions these sizes break: they compile again)."""
    if not trees:
        return []
    env = shape_env()
    if env is None:
        raise ValueError("it has size guards, but the graph has no size symbols")
    symbols = {s.name: s for s in env.var_to_range}
    guards = [expression_from_tree(t, symbols) for t in trees]
    from .. import ir
    hints = ir.example_values(env)
    for guard in guards:
        if not bool(guard.xreplace(hints)):
            logs.log("fusion", f"the compiled-graph cache entry assumes {guard}, which these sizes break: "
                               f"compiling again")
            return None
    return guards


def _instantiate(body, gm, facts):
    from ..codegen.wrapper import run_source
    from .cpp_build import load as load_library
    namespace = {name: (gm.forward if recipe == ["eager"] else
                        _helpers()[recipe[1]] if recipe[0] == "helper" else _rebuild(recipe, gm))
                 for name, recipe in body["globals"].items()}
    if body["signatures"]:
        lib = load_library(body["kernel_source"])
        for name, (n_args, n_sizes) in body["signatures"].items():
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.c_void_p] * n_args + [ctypes.c_int64] * n_sizes
            fn.restype = ctypes.c_int
            namespace[name] = fn
    if body.get("triton") is not None:
        namespace.update(_triton_globals(body["triton"], body["kernel_source"]))
    run_source(body["wrapper_source"], "graphjit wrapper", namespace)
    call = namespace["call"]
    call.wrapper_source = body["wrapper_source"]
    call.source = body["kernel_source"]
    call._boxed_call = facts.boxed
    call.items, call.graph = [], None
    call.kernels = body["kernels"]
    call.kernel_count = len(body["kernels"])
    call.extern_count = body["externs"]
    call.cached = True
    return call


# ---- artifacts: the cache's entries in one file, from a build machine to the machines that serve ----

ARTIFACTS_FORMAT = 1


def _environment():
    """What the keys of this process's entries depend on besides the graphs: a file made elsewhere is only
    of use where this matches."""
    from .cpp_build import _cpu_id, compiler_id
    import graphjit
    return {"graphjit": graphjit.__version__, "torch": torch.__version__, "python": sys.version.split()[0],
            "cxx": compiler_id()[1], "cpu": _cpu_id(), "codegen": config.codegen_key()}


def _valid_key(key):
    return isinstance(key, str) and len(key) == 40 and all(c in "0123456789abcdef" for c in key)


def save_artifacts(path):
    """Write every usable entry of the compiled-graph cache into one JSON file at `path` (atomically);
    returns how many."""
    folder = os.path.join(config.cache_dir, "graphs")
    entries = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        key = name[:-5]
        if not name.endswith(".json") or not _valid_key(key):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                stored = json.load(f)
            if stored["digest"] == _body_digest(stored["body"]) and stored["body"]["key"] == key:
                entries.append(stored)
        except (OSError, ValueError, KeyError, TypeError):
            continue                        # a damaged entry stays behind (load() rebuilds it)
    document = {"graphjit_artifacts": ARTIFACTS_FORMAT, "environment": _environment(), "entries": entries}
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    write_whole(path, json.dumps(document).encode("utf-8"), prefix=".graphjit-artifacts.")
    return len(entries)


def load_artifacts(path):
    """Put the entries of a file written by save_artifacts into this machine's cache; returns how many.
    Each entry is checked (digest, format, key) as load() checks it; a file made under other versions, C++
    compiler or CPU is loaded with a warning saying its graphs compile again here (their keys differ)."""
    with open(os.fspath(path), encoding="utf-8") as f:
        try:
            document = json.load(f)
        except ValueError as e:
            raise ValueError(f"graphjit.load_cache_artifacts: {path} is not an artifacts file ({e})") from None
    if not isinstance(document, dict) or document.get("graphjit_artifacts") != ARTIFACTS_FORMAT or \
            not isinstance(document.get("entries"), list):
        raise ValueError(f"graphjit.load_cache_artifacts: {path} is not a graphjit artifacts file of format "
                         f"{ARTIFACTS_FORMAT}")
    here, there = _environment(), document.get("environment")
    if not isinstance(there, dict):
        there = {}
    differ = [k for k in here if there.get(k) != here[k]]
    if differ:
        warnings.warn(f"graphjit: the artifacts in {path} were made with another {', '.join(differ)} "
                      f"({'; '.join(f'{k}: {there.get(k)!r} there, {here[k]!r} here' for k in differ)}): "
                      f"their graphs compile again here", RuntimeWarning)
    folder = os.path.join(config.cache_dir, "graphs")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    written = 0
    for stored in document["entries"]:
        try:
            body = stored["body"]
            key = body["key"]
            if stored["digest"] != _body_digest(body) or body["format"] != FORMAT or not _valid_key(key):
                raise ValueError("digest, format or key")
        except (KeyError, TypeError, ValueError) as e:
            warnings.warn(f"graphjit: an entry of {path} is damaged ({e}); it is skipped", RuntimeWarning)
            continue
        write_whole(os.path.join(folder, f"{key}.json"), json.dumps(stored).encode("utf-8"), prefix=f".{key}.")
        written += 1
    return written
