"""Mutations of Python state made during a captured region, replayed after the graph runs.

Reads during the trace see the pending values; the entry function applies the final values after the
graph call, in the order they were first made, having read every target and value before the first write.
If the graph raises, nothing has been applied yet, so a failure never leaves state half-applied.

    self.calls += 1          ->  setattr(self, 'calls', 4)            (attribute store on an input object)
    cfg_list.append(t)       ->  cfg_list[:] = [..., __gj_out[0]]     (outside list mutated in place)
    global STEP; STEP += 1   ->  __gj_G['STEP'] = 8
"""
from .variables.base import unsupported

_DELETED = object()


class SideEffects:
    def __init__(self):
        # (id(obj), name) -> (obj_var, value_var or _DELETED, raw): raw stores are object.__setattr__'s
        # (a class's own __setattr__ already ran in the trace), replayed without it
        self.attr_stores = {}
        self.global_stores = {}      # name -> value_var
        self.cell_stores = {}        # id(cell) -> (cell_var, value_var)
        self.mutated = {}            # id(var) -> container Variable with a source, mutated in place
        self.deferred_calls = []     # (callable Variable, args, kwargs): logging calls run after the graph
        self.keepalive = []

    # ---- attributes of objects that came from outside ----
    def store_attr(self, obj_var, real_obj, name, value, raw=False):
        self.keepalive.append(real_obj)
        self.attr_stores[(id(real_obj), name)] = (obj_var, value, raw)

    def delete_attr(self, obj_var, real_obj, name, raw=False):
        self.attr_stores[(id(real_obj), name)] = (obj_var, _DELETED, raw)

    def pending_attr(self, real_obj, name):
        """(found, value Variable) for an attribute stored earlier in the trace."""
        hit = self.attr_stores.get((id(real_obj), name))
        if hit is None:
            return False, None
        if hit[1] is _DELETED:
            from .variables.builtins import AttributeMissing
            raise AttributeMissing(f"attribute {name!r} was deleted")
        return True, hit[1]

    # ---- globals and closure cells ----
    def store_global(self, name, value):
        self.global_stores[name] = value

    def pending_global(self, name):
        return self.global_stores.get(name)

    def store_cell(self, cell_var, value):
        self.cell_stores[id(cell_var)] = (cell_var, value)

    # ---- containers read from outside, mutated in place ----
    def mark_mutated(self, container_var):
        if container_var.source is None:
            return
        self.mutated[id(container_var)] = container_var

    def defer_call(self, fn, args, kwargs):
        self.deferred_calls.append((fn, args, kwargs))

    def only_deferred_calls(self):
        return not (self.attr_stores or self.global_stores or self.cell_stores or self.mutated)

    def is_empty(self):
        return not (self.attr_stores or self.global_stores or self.cell_stores or self.mutated or
                    self.deferred_calls)

    # ---- codegen ----
    def replay_lines(self, cg):
        """Python lines applying every effect, values reconstructed through `cg` (tensors -> outputs).
        Every target and every value is read into a temporary before the first write: an expression
        reaching through a container the replay writes (`lst[0]` after `del lst[0]`, `outer[0]` after
        `outer.insert(0, ...)`) must give the object the traced code saw, not what the container holds
        once an earlier effect has been applied."""
        reads = _Reads(cg)
        writes = []
        for var in self.mutated.values():
            target = reads.bind(var.source.expr())
            if hasattr(var, "replay_lines"):              # a set: its own operations, in order
                writes += var.replay_lines(target, reads.value)
            elif var.python_type() in (list,):
                items = reads.bind(f"[{', '.join(cg.expr(v) for v in var.items)}]")
                writes.append(f"{target}[:] = {items}")
            elif issubclass(var.python_type(), dict):
                items = reads.bind("{" + ", ".join(f"{cg.expr(var.key_var(k))}: {cg.expr(v)}"
                                                   for k, v in var.items.items()) + "}")
                writes += [f"{target}.clear()", f"{target}.update({items})"]
            else:
                unsupported(f"replaying a mutation of {var}")
        for (_, name), (obj_var, value, raw) in self.attr_stores.items():
            target = reads.bind(obj_var.reconstruct(cg))
            if value is _DELETED:
                writes.append(f"{'object.__delattr__' if raw else 'delattr'}({target}, {name!r})")
            else:
                setter = "object.__setattr__" if raw else "setattr"
                writes.append(f"{setter}({target}, {name!r}, {reads.value(value)})")
        for name, value in self.global_stores.items():
            writes.append(f"__gj_G[{name!r}] = {reads.value(value)}")
        for cell_var, value in self.cell_stores.values():
            writes.append(f"{reads.bind(cell_var.source.expr())}.cell_contents = {reads.value(value)}")
        for fn, args, kwargs in self.deferred_calls:      # only when there is no other effect
            arguments = [cg.expr(a) for a in args] + [f"{k}={cg.expr(v)}" for k, v in kwargs.items()]
            writes.append(f"{cg.expr(fn)}({', '.join(arguments)})")
        return reads.lines + writes


class _Reads:
    """The read half of a replay: each expression bound to a temporary `__gj_w<n>`, in order. A plain
    name needs none: the replay assigns no name the expressions read."""

    def __init__(self, cg):
        self.cg = cg
        self.lines = []

    def bind(self, text):
        if text.isidentifier():
            return text
        name = f"__gj_w{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return name

    def value(self, var):
        return self.bind(self.cg.expr(var))
