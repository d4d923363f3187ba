"""What graphjit's compiler knows about a graph besides its nodes and example inputs.

The mode comes as the backend's `mode` argument; facts about the graph's inputs come in
gm.meta["graphjit"], where a caller that knows them puts them (graphjit's frontend does: see
capture/frame.compile_graph). A graph without them, from torch.compile or built by hand, gets the safe
defaults. They travel with the one compile and never through module state, so graphs compiling at the
same time, in two threads and in different modes, each get their own.

    gm.meta["graphjit"] = {"inputs_guarded": True,          # guards check every tensor input's layout
                           "static_inputs": [False, True],  # per input: a module's parameter or buffer
                           "name": "forward",               # for logs
                           "boxed": False,                  # call(args: list), see GraphFacts.boxed
                           "autograd": False,               # a half from AOTAutograd, GraphFacts.autograd
                           "differentiated_again": False}   # create_graph=True after it (compiler/training.py)
"""
import dataclasses

META_KEY = "graphjit"


@dataclasses.dataclass(frozen=True)
class GraphFacts:
    # mode max-autotune(-no-cudagraphs): race kernel configurations and matmul templates
    autotune: bool = False
    # the caller's guards check every tensor input's dtype, device, shape and strides before each call
    inputs_guarded: bool = False
    # per graph input: a module's parameter or buffer, which rarely moves between calls
    static_inputs: tuple = ()
    # the compiled callable takes one list of arguments, which it empties, and drops each input after its
    # last use (AOTAutograd's boxed convention: a backward frees saved activations as it goes)
    boxed: bool = False
    # a half of a training graph from AOTAutograd (compiler/training.py): what it computes is held to the
    # tolerance of gradients, so a fused op may compute what eager's kernel does in another order (batch
    # norm's batch statistics as reductions); elsewhere such ops keep eager's kernel and its exact rounding
    autograd: bool = False
    # the graph's name in logs, reports and profiles (the captured function's qualified name)
    name: str = "graph"

    @classmethod
    def of(cls, gm, mode=None):
        from .. import modes
        meta = getattr(gm, "meta", {}).get(META_KEY) or {}
        return cls(autotune=modes.lookup(mode).autotune, inputs_guarded=bool(meta.get("inputs_guarded")),
                   static_inputs=tuple(meta.get("static_inputs") or ()), boxed=bool(meta.get("boxed")),
                   autograd=bool(meta.get("autograd")), name=str(meta.get("name") or "graph"))

    def check_inputs(self):
        """Whether the compiled wrapper checks each input's shape and strides per call (config.check_inputs;
        its -1 means: only where the caller's guards don't)."""
        from .. import config
        if config.check_inputs != -1:
            return bool(config.check_inputs)
        return not self.inputs_guarded

    def is_static(self, position):
        return position < len(self.static_inputs) and bool(self.static_inputs[position])
