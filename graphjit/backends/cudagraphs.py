"""mode="reduce-overhead": a compiled graph's GPU work recorded once as a CUDA graph, then replayed.

At small batch a GPU model waits on the CPU: Python, the wrapper and one launch per kernel cost more than
the kernels themselves. A CUDA graph replays all of a graph's kernels with one launch.

    runner = wrap(compiled, example_inputs, static, pool)   # compiled: any backend's callable

The first call runs `compiled` as it is (the warm-up: lazy initialization, cuBLAS workspaces; its outputs
are ordinary tensors), then records it into a CUDA graph on a side stream, reading its inputs from static
buffers. Later calls copy the inputs that change between calls into those buffers and replay.

The rules (also in the README):
- Parameters and buffers of modules, and tensors marked with torch._dynamo.mark_static_address (a static
  KV cache: transformers marks its key and value tensors), are read in place (`static`), never copied. If
  one's memory moves (a parameter reassigned, model.to(...), a new cache), the graph is recorded again;
  a runner keeps its `max_recordings` most recently used recordings, and gives up recording (plain
  launches) when its recordings are replayed fewer than `min_replays` times each on average (memory that
  moves at every call).
- Inputs the graph writes to (a KV cache the model keeps) are read in place too until they move; then
  those totalling at most config.cudagraph_copy_bytes are copied in and written back at every replay (one
  multi-tensor copy each way), larger ones stay in place and the graph is recorded again.
- Outputs live in the memory pool of the compiled model (one pool per compile() call, shared by its graphs).
  A replay of a graph overwrites the outputs of the previous replay of that graph and of every graph
  recorded after it. Outputs still referenced when that happens are invalidated: using one raises an error
  that says so; clone outputs you keep across calls. Outputs of graphs recorded *before* it (the graph
  before a graph break, whose outputs feed this one) stay valid.
- A graph that can't be recorded runs as plain launches, with the reason logged under
  GRAPHJIT_LOGS=cudagraphs: CPU tensors, non-tensor inputs, inputs that need gradients, outputs that alias
  inputs, and work a CUDA graph can't capture (a host synchronization such as .item()).
- A graph compiled for all sizes (dynamic shapes) gets a recording per distinct set of its sized inputs'
  sizes and int values (PerSize; its int inputs are constants of each recording), up to
  config.cudagraph_sizes_limit; other sizes run as plain launches.
"""
import sys
import warnings
import weakref

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils import _pytree as pytree

from .. import logs
from ..ops import AUGMENTED_ASSIGNMENTS

_warned = set()

INVALIDATED = ("graphjit: this tensor was an output of a CUDA graph replay (compile mode \"{mode}\") and "
               "has been overwritten by a later call of the compiled model ({name}). Outputs stay valid only "
               "until the next call: clone the ones you keep across calls (out = model(x).clone()), or "
               "compile with mode=\"default\".")


class GraphPool:
    """The CUDA memory pool shared by the CUDA graphs of one compiled model, and which of its graphs have
    handed out outputs that a replay may overwrite."""

    def __init__(self, mode_name):
        self.mode_name = mode_name
        self.handle = None
        self.streams = {}
        self.recorded = 0          # graphs recorded so far: each runner's `order`
        self.live = set()          # recordings whose last replay's outputs were handed out
        self.recordings = weakref.WeakSet()     # the recordings still alive (their CUDA graphs use the pool)

    def memory(self):
        """The memory pool id for the next capture. torch's allocator keeps a pool while a CUDA graph uses
        it; once every recording in it is gone (dropped, or its runner freed) the id can't be used again
        (an internal assert), so a new pool starts."""
        if self.handle is None or not self.recordings:
            self.handle = torch.cuda.graph_pool_handle()
        return self.handle

    def stream(self, device):
        if device not in self.streams:
            self.streams[device] = torch.cuda.Stream(device)
        return self.streams[device]

    def invalidate_from(self, recording):
        """Before `recording` replays: invalidate the outputs it may overwrite (its own, and those of graphs
        recorded after it, whose memory may overlap its temporaries)."""
        for other in [r for r in self.live if r.order >= recording.order]:
            other.invalidate_outputs()


def reason_not_to_record(example_inputs, ints=False):
    """Why a graph with these inputs runs without CUDA graphs, or None. ints: int inputs are sizes a
    recording is made for (PerSize), constants of it."""
    devices = set()
    for value in example_inputs:
        if ints and type(value) is int:
            continue
        if not isinstance(value, torch.Tensor):
            return f"a graph input is a {type(value).__name__}, not a tensor"
        devices.add(value.device)
        if value.requires_grad and torch.is_grad_enabled():
            return "an input requires grad (training runs without CUDA graphs)"
    if any(d.type != "cuda" for d in devices):
        return f"inputs on {', '.join(sorted(str(d) for d in devices if d.type != 'cuda'))}, not only CUDA"
    if len(devices) > 1:
        return f"inputs on several devices ({', '.join(sorted(map(str, devices)))})"
    if not devices:
        return "the graph has no tensor inputs"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if not all(hasattr(torch._C, f) for f in ("_construct_CUDA_Tensor_From_Storage_And_Metadata",
                                               "_set_storage_data_ptr_access_error_msg")):
        return f"this torch ({torch.__version__}) lacks the storage functions the output rules need"
    return None


def wrap(fn, example_inputs, static, pool, name="graph", mutated=(), gm=None, sized=()):
    """fn as a CUDA graph runner, or fn itself (with the reason logged) when it can't be recorded.
    static[i]: input i is a parameter or buffer, read in place. mutated: positions of inputs the graph
    writes to (copied back from the static buffers after each replay, unless read in place). sized: the
    positions of inputs with symbolic sizes (fn was compiled for all sizes): a recording is made per
    distinct set of their sizes (PerSize)."""
    reason = reason_not_to_record(example_inputs, ints=bool(sized))
    syncing = syncing_op(gm) if reason is None and gm is not None else None
    if syncing:
        reason = f"{syncing}: the GPU would wait for the host (data-dependent output shape or a host copy)"
    if reason:
        logs.log("cudagraphs", f"{name}: no CUDA graph: {reason}")
        return fn
    if sized:
        return PerSize(fn, static, pool, name, mutated, sized)
    return CUDAGraphRunner(fn, example_inputs, static, pool, name, mutated)


class PerSize:
    """A graph compiled once for all sizes, in a CUDA-graph mode: a CUDA graph is recorded for fixed
    shapes, so each distinct set of the sized inputs' sizes, strides and int values gets a runner of its
    own, all in the compile() call's one pool. Past config.cudagraph_sizes_limit sets, other sizes run
    the compiled graph as plain launches (one warning), never a recording per call."""

    def __init__(self, fn, static, pool, name, mutated, sized):
        self.fn, self.static, self.pool, self.name, self.mutated = fn, static, pool, name, mutated
        self.sized = list(sized)
        self.runners = {}
        self.last = (None, None)          # (key, runner) of the last call: decode steps repeat a size

    def key(self, args):
        return tuple((tuple(a.shape), a.stride(), a.storage_offset()) if isinstance(a, torch.Tensor) else a
                     for a in (args[i] for i in self.sized))

    def __call__(self, *args):
        key = self.key(args)
        last_key, runner = self.last
        if key != last_key:
            runner = self.runners.get(key)
            if runner is None:
                runner = self._runner(key, args)
            self.last = (key, runner)
        return runner(*args)

    def _runner(self, key, args):
        from .. import config
        if len(self.runners) >= config.cudagraph_sizes_limit:
            if (self.name, "sizes") not in _warned:
                _warned.add((self.name, "sizes"))
                warnings.warn(f"graphjit: compile mode \"{self.pool.mode_name}\": {self.name} has CUDA graphs "
                              f"for {len(self.runners)} sets of sizes (config.cudagraph_sizes_limit); other sizes "
                              f"run without CUDA graphs", RuntimeWarning, stacklevel=4)
            return self.fn
        logs.log("cudagraphs", f"{self.name}: a CUDA graph for sizes {key}")
        runner = CUDAGraphRunner(self.fn, args, self.static, self.pool, f"{self.name} {key}", self.mutated)
        self.runners[key] = runner
        return runner


_VIEW_METHODS = {"view", "reshape", "transpose", "permute", "__getitem__", "getitem", "select", "narrow", "expand",
                 "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "t", "as_strided", "view_as",
                 "detach", "split", "chunk", "unbind", "movedim", "swapaxes", "diagonal", "contiguous"}


def mutated_inputs(gm):
    """Positions of gm's inputs that an in-place op may write (through views of them): x.add_(1),
    x[0] = y, torch.relu_(x), F.relu(x, inplace=True), out=x."""
    import operator
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    position = {n: i for i, n in enumerate(placeholders)}
    found = set()

    def root(node):
        while isinstance(node, torch.fx.Node) and node not in position:
            if _op_name(node) not in _VIEW_METHODS or not node.args:
                return None
            node = node.args[0]
        return position.get(node) if isinstance(node, torch.fx.Node) else None

    for node in gm.graph.nodes:
        targets = []
        if node.op in ("call_method", "call_function"):
            name = _op_name(node)
            inplace = (name.endswith("_") and not name.startswith("_")) or node.target is operator.setitem or \
                node.target in AUGMENTED_ASSIGNMENTS
            if (inplace or node.kwargs.get("inplace") is True) and node.args:
                targets.append(node.args[0])
            if isinstance(node.kwargs.get("out"), torch.fx.Node):
                targets.append(node.kwargs["out"])
        elif node.op == "call_module":
            module = gm.get_submodule(node.target)
            if getattr(module, "inplace", False) and node.args:
                targets.append(node.args[0])
        for target in targets:
            index = root(target)
            if index is not None:
                found.add(index)
    return sorted(found)


def _op_name(node):
    """A call_method's method name, or a call_function's function name."""
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", "")


def _span(t):
    """Elements of t's storage from its first element to its last (t's strides are non-negative)."""
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) if t.numel() else 0


def _repair_generators(device):
    """After a failed capture, the device's default random generator still believes a capture is running
    (every later random op raises "Offset increment outside graph capture"). Give it a fresh copy of its
    own state (seed and offset kept), which is not capturing."""
    try:
        generator = torch.cuda.default_generators[device.index or 0]
        generator.graphsafe_set_state(generator.clone_state())
    except Exception as e:   # noqa: BLE001
        logs.log("cudagraphs", f"could not reset the CUDA generator after a failed capture: {e}")


# Ops that wait for the GPU (or copy to the host) on every call: a CUDA graph can't capture them, and a
# failed capture costs a warm-up; the graph runs as plain launches instead.
_SYNCING = {"nonzero", "masked_select", "item", "tolist", "unique", "unique_consecutive", "cpu", "numpy",
            "argwhere", "repeat_interleave", "bincount", "histc", "_local_scalar_dense", "synchronize"}


def syncing_op(gm):
    """The first op of gm that synchronizes with the host (or copies a CPU tensor to the GPU, which a
    capture refuses for pageable memory), by name, or None."""
    import operator
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if any(_on_cpu(a) for a in node.all_input_nodes) and not _on_cpu(node) and \
                isinstance(node.meta.get("example_value"), torch.Tensor):
            return "a copy of a CPU tensor to the GPU"
        name = _op_name(node)
        if name in _SYNCING:
            return name
        if node.target is operator.getitem and len(node.args) == 2:
            index = node.args[1]
            for part in index if isinstance(index, (tuple, list)) else (index,):
                value = part.meta.get("example_value") if isinstance(part, torch.fx.Node) else None
                if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
                    return "indexing with a boolean mask"
    return None


def _on_cpu(node):
    value = node.meta.get("example_value")
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0


def _copy_pair(view, base, span, x):
    """(static side, caller's side) of the copy between a caller's input x and its static copy (`view`, over
    `base` of `span` elements): the elements themselves when x is dense (base None), else the whole storage
    span, gaps and overlaps kept; (None, None) when there is nothing to copy."""
    if base is None:
        return view, x
    if span:
        return base, torch.as_strided(x, (span,), (1,), x.storage_offset())
    return None, None


_foreach_copy = getattr(torch, "_foreach_copy_", None)


def _copy_all(destinations, sources):
    """Each source into its destination (None pairs skipped): one multi-tensor launch for many (a static
    KV cache is two tensors a layer), else a copy each."""
    pairs = [(d, src) for d, src in zip(destinations, sources) if d is not None]
    if len(pairs) > 1 and _foreach_copy is not None:
        _foreach_copy([d for d, _ in pairs], [src for _, src in pairs])
    else:
        for d, src in pairs:
            d.copy_(src)


def _share_memory(tensors):
    """Whether two of the tensors (None skipped) have one storage."""
    storages = [t.untyped_storage().data_ptr() for t in tensors if t is not None]
    return len(set(storages)) < len(storages)


_tensors_at_pointers = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _same_pointers(args, table, indices):
    """Whether args[i].data_ptr() == table[i] for every i in indices (one C++ loop where torch has it)."""
    if _tensors_at_pointers is not None:
        return _tensors_at_pointers(list(args), table, indices)
    return all(args[i].data_ptr() == table[i] for i in indices)


class CUDAGraphRunner:
    """One compiled graph's CUDA graphs: one recording per set of addresses of the inputs read in place
    (two instances of a model class share compiled graphs but not parameters; each new static KV cache
    has its own memory), the `max_recordings` most recently used of them kept."""
    max_recordings = 8
    min_replays = 4

    def __init__(self, fn, example_inputs, static, pool, name, mutated=()):
        self.fn = fn
        self.pool = pool
        self.name = name
        self.device = next(x for x in example_inputs if isinstance(x, torch.Tensor)).device
        self.tensors = [isinstance(x, torch.Tensor) for x in example_inputs]
        self.mutated = [i for i in mutated if self.tensors[i]]
        # Inputs the graph writes to are read in place too, tentatively (a KV cache the caller keeps at one
        # address: copying it in and back out would cost two copies of the cache a call); when they move,
        # small ones are copied from then on (_demote_moved).
        self.tentative = {i for i in self.mutated if not static[i]}
        self.static = [bool(s) and t for s, t in zip(static, self.tensors)]
        self._place()
        self.recordings = {}          # tuple of static inputs' data_ptr -> Recording, least recently used first
        self.last = None              # the recording used last (checked first)
        self.failed = None
        self.recorded = self.replays = 0

    def _place(self):
        """Which inputs a recording reads in place (static_idx) and which it copies (copied_idx)."""
        in_place = [s or i in self.tentative for i, s in enumerate(self.static)]
        self.static_idx = [i for i, s in enumerate(in_place) if s]
        # int inputs (sizes, under PerSize) are constants of the recording: neither copied nor checked
        self.copied_idx = [i for i, s in enumerate(in_place) if not s and self.tensors[i]]
        # (position in args, position in copied_idx) of the copied inputs the graph writes to
        self.written_back = [(i, self.copied_idx.index(i)) for i in self.mutated if not in_place[i]]

    def _demote_moved(self, args):
        """After a miss: the tentatively in-place inputs whose address differs from the last recording's
        are copied from now on (their recordings are dropped), when they total at most
        config.cudagraph_copy_bytes (else the graph is recorded again for the new addresses). Whether
        they were."""
        from .. import config
        last = self.last or next(reversed(self.recordings.values()), None)
        moved = {i for i in self.tentative if last is not None and args[i].data_ptr() != last.pointer_table[i]}
        if not moved or sum(args[i].numel() * args[i].element_size() for i in moved) > config.cudagraph_copy_bytes:
            return False
        logs.log("cudagraphs", f"{self.name}: written inputs {sorted(moved)} moved; copying them from now on")
        self.tentative -= moved
        self._drop_all()
        self._place()
        return True

    def __call__(self, *args):
        if self.failed:
            return self.fn(*args)
        recording = self.last
        if recording is None or not _same_pointers(args, recording.pointer_table, self.static_idx):
            recording = self.recordings.pop(tuple([args[i].data_ptr() for i in self.static_idx]), None)
            if recording is None:
                if self.tentative and self.recordings and self._demote_moved(args):
                    return self(*args)
                return self._record(args)
            self.recordings[recording.static_ptrs] = recording      # now the most recently used
            self.last = recording
        self.replays += 1
        ours, theirs = [], []
        for i, (view, base, span, meta) in zip(self.copied_idx, recording.copies):
            x = args[i]
            if (x.shape, x.stride()) != meta:   # the frontend's guards make this rare: run it plainly
                logs.log("cudagraphs", f"{self.name}: input {i} changed layout; running without the graph")
                return self.fn(*args)
            static_side, caller_side = _copy_pair(view, base, span, x)
            ours.append(static_side)
            theirs.append(caller_side)
        _copy_all(ours, theirs)
        recording.graph.replay()
        # After the launch, so that the GPU starts sooner: these checks are host-side only, no user code runs
        # in between, and the replay's writes land after everything the caller queued before this call.
        self.pool.invalidate_from(recording)
        if self.written_back:               # the graph wrote the static copies: write the callers' tensors
            back = [k for _, k in self.written_back]
            destinations = [theirs[k] for k in back]
            if len(back) > 1 and _share_memory(destinations):
                for k in back:              # one after another, in order, as eager's writes
                    if ours[k] is not None:
                        theirs[k].copy_(ours[k])
            else:
                _copy_all(destinations, [ours[k] for k in back])
        return recording.hand_out()

    def _record(self, args):
        out = self.fn(*args)                   # the warm-up, and this call's result
        why = "first call" if not self.recordings else "inputs read in place at new addresses"
        if len(self.recordings) >= self.max_recordings:
            if self.replays < self.min_replays * self.recorded:
                self._fail(f"{self.recorded} recordings for different addresses of the parameters, buffers "
                           f"or static-address inputs, replayed {self.replays} times in all")
                return out
            self._drop(self.recordings.pop(next(iter(self.recordings))))
        try:
            recording = Recording(self, args)
        except Exception as e:   # noqa: BLE001 -- a graph that can't be captured still runs, as plain launches
            message = str(e).strip().splitlines()[0] if str(e).strip() else ""
            self._fail(f"recording failed ({type(e).__name__}: {message})")
            return out
        self.recordings[recording.static_ptrs] = recording
        self.last = recording
        self.recorded += 1
        logs.log("cudagraphs", f"{self.name}: recorded a CUDA graph ({why}): {len(self.copied_idx)} inputs "
                               f"copied per call, {len(self.static_idx)} read in place, "
                               f"{len(recording.out_storages)} output buffers")
        return out

    def _fail(self, reason):
        logs.log("cudagraphs", f"{self.name}: no CUDA graph: {reason}")
        key = (self.name, reason.split(":")[0])
        if key not in _warned:      # a mode that silently does nothing would be a mystery: say it once
            _warned.add(key)
            warnings.warn(f"graphjit: compile mode \"{self.pool.mode_name}\": {self.name} runs without CUDA "
                          f"graphs: {reason}", RuntimeWarning, stacklevel=3)
        self.failed = reason
        self._drop_all()

    def _drop_all(self):
        for recording in self.recordings.values():
            self._drop(recording)
        self.recordings = {}
        self.last = None

    def _drop(self, recording):
        """Forget a recording: the outputs it handed out become invalid, its memory returns to the pool."""
        recording.invalidate_outputs()
        self.pool.live.discard(recording)


class Recording:
    """One CUDA graph of a runner: static input buffers, the graph, and its outputs in the pool."""

    def __init__(self, runner, args):
        self.pool = pool = runner.pool
        self.name = runner.name
        self.device = device = runner.device
        self.static_ptrs = tuple(args[i].data_ptr() for i in runner.static_idx)
        self.pointer_table = [0] * len(args)      # _same_pointers' layout: position -> data_ptr
        for i, ptr in zip(runner.static_idx, self.static_ptrs):
            self.pointer_table[i] = ptr
        self.cached = None            # (storages, leaves, tensors, references) of the outputs handed out
        static_args = list(args)
        self.copies = []
        for i in runner.copied_idx:
            x = args[i]
            span = _span(x)
            base = torch.empty(max(span, 1), dtype=x.dtype, device=x.device)
            view = torch.as_strided(base, x.shape, x.stride(), 0)
            dense = is_non_overlapping_and_dense_or_false(x)
            self.copies.append((view, None if dense else base, span, (x.shape, x.stride())))
            static_side, caller_side = _copy_pair(view, None if dense else base, span, x)
            if static_side is not None:
                static_side.copy_(caller_side)
            static_args[i] = view
        stream = pool.stream(device)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(device)
        with torch.cuda.device(device), torch.cuda.stream(stream):
            try:
                graph.capture_begin(pool=pool.memory(), capture_error_mode="thread_local")
            except Exception:
                _repair_generators(device)
                raise
            try:
                static_out = runner.fn(*static_args)
            finally:
                try:
                    graph.capture_end()
                except Exception:
                    _repair_generators(device)
                    raise
        inputs = {x.untyped_storage().data_ptr() for x in static_args if isinstance(x, torch.Tensor)}
        self._describe_outputs(static_out, inputs)
        self.static_out = static_out          # keeps the outputs' pool memory allocated
        self.static_args = static_args
        self.graph = graph
        self.order = pool.recorded
        pool.recorded += 1
        pool.recordings.add(self)

    def _describe_outputs(self, static_out, input_storages=()):
        """What hand_out needs to rebuild the outputs over the pool memory: each output storage (address,
        size) once, and each leaf's storage index and metadata."""
        leaves, self.out_spec = pytree.tree_flatten(static_out)
        storages, self.out_leaves = {}, []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                self.out_leaves.append((None, leaf))
                continue
            storage = leaf.untyped_storage()
            if storage.data_ptr() in input_storages:
                raise RuntimeError("an output aliases an input (a view or the input itself)")
            if leaf.device != self.device or leaf.requires_grad:
                raise RuntimeError("an output is not a plain tensor on the graph's device")
            key = storage.data_ptr()
            if key not in storages:
                storages[key] = (len(storages), storage.nbytes())
            meta = {"nbytes": storage.nbytes(), "data_ptr": key, "size": leaf.shape, "stride": leaf.stride(),
                    "dtype": leaf.dtype, "device": leaf.device, "storage_offset": leaf.storage_offset()}
            self.out_leaves.append((storages[key][0], meta))
        self.out_storages = [(ptr, nbytes) for ptr, (_, nbytes) in storages.items()]
        self.out_metas = [(m["size"], m["stride"], m["storage_offset"]) for k, m in self.out_leaves if k is not None]
        spec = self.out_spec
        # a flat tuple or list of outputs (what compiled graphs return) is rebuilt without pytree
        self.flat_type = spec.type if spec.type in (tuple, list) and all(
            c.is_leaf() for c in spec.children()) else None

    def hand_out(self):
        """This replay's outputs: tensors over non-owning storages of the pool memory, separate from the
        ones the graph itself holds, so that a later replay can invalidate exactly what the user still
        holds. When nothing of the previous replay's outputs is still referenced, its tensors are handed
        out again (building ~25 tensors costs more than the replay of a small model)."""
        if self.cached is None:
            make_storage = torch._C._construct_storage_from_data_pointer
            make_tensor = torch._C._construct_CUDA_Tensor_From_Storage_And_Metadata
            device = self.device
            storages = [make_storage(ptr, device, nbytes) for ptr, nbytes in self.out_storages]
            leaves = [value if k is None else make_tensor(value, storages[k]) for k, value in self.out_leaves]
            tensors = [leaf for (k, _), leaf in zip(self.out_leaves, leaves) if k is not None]
            self.cached = (storages, leaves, tensors, self._references(storages, tensors))
        self.pool.live.add(self)
        if self.flat_type is not None:
            return self.flat_type(self.cached[1])
        return pytree.tree_unflatten(self.cached[1], self.out_spec)

    @staticmethod
    def _references(storages, tensors):
        """How much each output storage and tensor is referenced: by us alone right after hand_out builds
        them; more while the caller holds an output, a view of one, or a structure containing one."""
        use_count, refs = torch._C._storage_Use_Count, sys.getrefcount
        return [use_count(s._cdata) for s in storages], [refs(t) for t in tensors]

    def invalidate_outputs(self):
        """The outputs handed out by the last replay are about to be overwritten. If nothing of them is
        referenced outside, they are kept to be handed out again; otherwise every storage is marked so that
        using any tensor over it raises (`INVALIDATED`), and the next hand_out builds new ones."""
        self.pool.live.discard(self)
        if self.cached is None:
            return
        storages, leaves, tensors, expected = self.cached
        if self._references(storages, tensors) == expected and \
                [(t.shape, t.stride(), t.storage_offset()) for t in tensors] == self.out_metas:
            return
        message = INVALIDATED.format(mode=self.pool.mode_name, name=self.name)
        for storage in storages:
            torch._C._set_storage_data_ptr_access_error_msg(storage._cdata, message)
        self.cached = None
