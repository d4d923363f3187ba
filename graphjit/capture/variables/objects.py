"""nn.Modules, Python modules, classes, user objects and super()."""
import collections
import functools
import logging
import os
import dataclasses
import enum
import sys
import types
import weakref

import torch

from ..sources import AttrSource, DictItemSource, ItemSource, ObjectSource, module_attr_source
from ...exc import UserError
from .base import Variable, ConstantVariable, unsupported
from .builtins import AttributeMissing, SlotMethodVariable
from .containers import (TupleVariable, ListVariable, DictVariable, NamedTupleVariable, ListIteratorLike,
                         IteratorVariable)

from .dunders import MISSING as _MISSING, is_library_class, is_library_name, lookup
from .functions import BoundMethodVariable, UserFunctionVariable
from ..guards import lit


def _instance_dict(obj):
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}


def _class_lookup(cls, name):
    """The attribute `name` on cls's MRO, read from the class __dicts__ (no __get__), or _MISSING."""
    return lookup(cls, name)[1]


class ObjectLikeVariable(Variable):
    """Shared attribute logic for things with an instance dict and a class."""

    def has_dunder(self, name):
        return _class_lookup(self.python_type(), name) is not _MISSING and \
            _class_lookup(self.python_type(), name) is not _class_lookup(object, name)

    def call_dunder(self, tx, name, args, kwargs=None):
        """type(self).<name>(self, *args): the implicit lookup of Python's protocols, which skips the
        instance dict, __getattribute__ and __getattr__."""
        cls = self.python_type()
        if _class_lookup(cls, name) is _MISSING:
            unsupported(f"{cls.__name__} has no {name}")
        guard_class_attribute(tx, cls, name)
        return builder.wrap_class_attribute(tx, self, cls, name).call(tx, args, kwargs or {})

    def class_attribute(self, tx, name, through_class=False):
        """through_class: the instance's own attribute is gone in the trace (deleted, or popped from its
        __dict__), so `obj.name` read in a guard would see the instance's value as it was: read `cls.name`."""
        cls = self.python_type()
        src = AttrSource(self.source, name) if self.source is not None and not through_class else \
            _class_value_source(tx, cls, name)
        if _class_lookup(cls, name) is _MISSING:
            getattr_hook = _class_lookup(cls, "__getattr__")
            if getattr_hook is not _MISSING and not isinstance(self, NNModuleVariable):
                guard_class_attribute(tx, cls, "__getattr__")
                hook = builder.wrap_class_attribute(tx, self, cls, "__getattr__")
                return hook.call(tx, [ConstantVariable(name)], {})
            if (self.source is None or through_class) and _class_source(cls, name) is not None:
                tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (_class_source(cls, name).base,))
            raise AttributeMissing(f"{cls.__name__!r} object has no attribute {name!r}")
        guard_class_attribute(tx, cls, name)
        return builder.wrap_class_attribute(tx, self, cls, name, src)

    def guard_not_shadowed(self, tx, name, instance_dict):
        """A method, classmethod, property or non-data descriptor with a Python __get__ of an object from
        outside, read from its class: the instance must not hold `name` next call either (`obj.f = other` after compiling)."""
        attr = _class_lookup(self.python_type(), name)
        if self.source is not None and attr is not _MISSING and not _is_data_descriptor(attr) and \
                (_guarded_class_attribute(attr) is not None or isinstance(attr, classmethod) or
                 _has_python_get(attr)) and instance_dict is not None:
            tx.guards.add(3, f"{lit(name)} not in {{0}}.__dict__", f"{self.source.expr()} does not shadow {name!r}",
                          (self.source,))


def _refuse_changed_containers(tx, module):
    """A graph break where the frame stored into the module's _modules, _parameters or _buffers
    (ModuleList.append, ModuleDict.update ...) before reading them as containers: the real dicts, which
    len, indexing and iteration read, do not hold the change yet (at the break it is applied)."""
    d = _instance_dict(module)
    for owner in ("_modules", "_parameters", "_buffers"):
        if _stored_into(tx, d.get(owner)) is not None:
            unsupported(f"reading the {owner[1:]} of a {type(module).__name__} the frame changed")


def _stored_into(tx, d):
    """The traced DictVariable of a real dict the frame has stored into, else None."""
    traced = tx.object_vars.get(id(d)) if d is not None else None
    return traced if isinstance(traced, DictVariable) and traced.mutated else None


class NNModuleVariable(ObjectLikeVariable):
    """An nn.Module read through a source, guarded by type: parameters and buffers become graph inputs."""

    def __init__(self, module, source=None):
        self.module = module
        self.source = source

    def python_type(self):
        return type(self.module)

    def getattr(self, tx, name):
        m = self.module
        found, value = tx.side_effects.pending_attr(m, name)
        if found:
            return value
        d = _instance_dict(m)
        for owner in ("_parameters", "_buffers", "_modules"):
            table = d.get(owner, {})
            traced = _stored_into(tx, d.get(owner))
            if traced is not None:
                # the frame stored into this dict (torch.func.functional_call swaps parameters through
                # module._parameters[name] = t): read it as the trace left it, not the real one
                if name in traced.items:
                    return traced.items[name]
                continue
            if name in table:
                src = module_attr_source(self.source, owner, name) if self.source is not None else None
                if src is not None:
                    tx.guards.add_key_set(AttrSource(self.source, owner), tuple(table.keys()))
                value = table[name]
                if value is None:        # Linear(bias=False): a later `m.bias = Parameter(...)` must miss
                    if src is not None:
                        tx.guards.add(1, "{0} is None", None, (src,))
                    return ConstantVariable(None, src)
                return builder.wrap(tx, value, src)
        if name in ("_parameters", "_buffers", "_modules") and \
                any(tx.side_effects.attr_present(m, key) is not None for key in d.get(name) or ()):
            # the frame assigned one of them (`self.b = x`): Module.__setattr__ puts it in this dict, which
            # the trace reads as it was
            unsupported(f"reading {name} of a {type(m).__name__} after the frame assigned one of its entries")
        if name in d:
            return builder.wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        if name == "__class__":
            return ClassVariable(type(m))
        if name == "__dict__":
            return InstanceDictView.of(tx, self, m)
        if name != "forward":       # forward's absence is checked with the hooks (see call)
            self.guard_not_shadowed(tx, name, d)
        if self.source is not None and _class_lookup(type(m), name) is _MISSING:
            self._guard_missing(tx, name, d)
        return self.class_attribute(tx, name)

    def _guard_missing(self, tx, name, d):
        """`name` is missing from the module next call too: not in its instance dict, its parameters,
        buffers and submodules, nor on its class (cheap membership checks: `hasattr` would raise and
        format an AttributeError in nn.Module.__getattr__ on every call)."""
        guard_in_instance_dict(tx, self.source, name, False)
        for owner in ("_parameters", "_buffers", "_modules"):
            if owner in d:
                tx.guards.add(3, f"{lit(name)} not in {{0}}", None, (AttrSource(self.source, owner),))
        guard_mro_lookup(tx, type(self.module), name)

    def setattr(self, tx, name, value):
        if self._rebinds_itself(tx, name, value):
            return
        if isinstance(value, NNModuleVariable) or name in self.module._modules:
            unsupported(f"assigning submodule {name!r} inside the compiled frame")
        if self.source is None:
            unsupported(f"assigning attribute {name!r} of a module with no source")
        d = _instance_dict(self.module)
        if name in d.get("_buffers", ()) or name in d.get("_parameters", ()):
            self._guard_no_registration_hooks(tx, name)
        tx.side_effects.store_attr(self, self.module, name, value)

    def _guard_no_registration_hooks(self, tx, name):
        """nn.Module.__setattr__ hands a buffer or parameter being assigned to the global registration hooks,
        which may replace it (what a read in the frame would see): guarded absent, else a graph break."""
        from torch.nn.modules import module as nn_module
        for hooks in ("_global_buffer_registration_hooks", "_global_parameter_registration_hooks"):
            if getattr(nn_module, hooks, None):
                unsupported(f"assigning {name!r} of a module while a global {hooks.split('_')[2]} registration "
                            "hook is registered")
            if hasattr(nn_module, hooks):
                tx.guards.add(3, "not {0}", f"no global {hooks.split('_')[2]} registration hooks",
                              (AttrSource(ObjectSource(nn_module), hooks),))

    def _rebinds_itself(self, tx, name, value):
        """Whether `module.name = value` stores back the submodule read from that very slot (`self.classifier =
        self.classifier.to(dtype)` where .to() changed nothing and returned it): nn.Module.__setattr__
        then changes nothing but calls the global module registration hooks, guarded absent."""
        from torch.nn.modules import module as nn_module
        if not isinstance(value, NNModuleVariable) or self.source is None or value.source is None or \
                self.module._modules.get(name) is not value.module or \
                tx.side_effects.pending_attr(self.module, name)[0]:
            return False
        if value.source != module_attr_source(self.source, "_modules", name) or \
                nn_module._global_module_registration_hooks:
            return False
        tx.guards.add(3, "not {0}", "no global module registration hooks",
                      (AttrSource(ObjectSource(nn_module), "_global_module_registration_hooks"),))
        return True

    def delattr(self, tx, name):
        m = self.module
        if _class_lookup(type(m), "__delattr__") is not torch.nn.Module.__delattr__:
            unsupported(f"deleting {name!r} of a {type(m).__name__}: it overrides nn.Module.__delattr__")
        if self.source is None:
            unsupported(f"deleting attribute {name!r} of a module with no source")
        present = tx.side_effects.attr_present(m, name)
        if present is None:
            d = _instance_dict(m)
            if any(name in d.get(owner, {}) for owner in ("_parameters", "_buffers", "_modules")):
                unsupported(f"deleting parameter, buffer or submodule {name!r} inside the compiled frame")
            present = name in d
            guard_in_instance_dict(tx, self.source, name, present)
        if not present:
            raise UserError(_attribute_error(type(m), name, _class_lookup(type(m), name), delattr))
        tx.side_effects.delete_attr(self, m, name)

    def identity_key(self):
        return ("object", id(self.module))

    def call(self, tx, args, kwargs):
        call = _class_lookup(type(self.module), "__call__")
        guard_class_attribute(tx, type(self.module), "__call__")
        if call is not _class_lookup(torch.nn.Module, "__call__"):
            # the class's own __call__ (transformers' GradientCheckpointingLayer has one), inlined; its
            # super().__call__(...) is nn.Module's, which comes back to module_call
            return builder.wrap_class_attribute(tx, self, type(self.module), "__call__").call(tx, args, kwargs)
        return self.module_call(tx, args, kwargs)

    def module_call(self, tx, args, kwargs):
        """nn.Module.__call__: the module's forward pre-hooks, forward, its forward hooks, as
        nn.Module._call_impl runs them; the hooks are traced like any call and guarded to stay the same
        functions. Backward hooks, global hooks and always_call hooks are not captured."""
        m = self.module
        if m.__dict__.get("_graphjit_disable", False):
            unsupported(f"call to {type(m).__qualname__} module, which is marked graphjit.disable",
                        hint="graphjit.disable modules always run in CPython")
        if not (getattr(m, "_forward_hooks", None) or getattr(m, "_forward_pre_hooks", None)):
            self.guard_no_hooks(tx)
            return self.getattr(tx, "forward").call(tx, args, kwargs)
        pre, post = self._guard_forward_hooks(tx)
        # as nn.Module._call_impl: every hook sees the same args tuple and kwargs dict (a hook's in-place
        # change to kwargs reaches forward and later hooks); a pre-hook's tuple result (a namedtuple too)
        # replaces the args, any other result becomes a 1-tuple
        args, kwargs = TupleVariable(list(args)), DictVariable(kwargs)
        for hook, with_kwargs in pre:
            if with_kwargs:
                result = hook.call(tx, [self, args, kwargs], {})
                if not _is_none(result):
                    pair = result.unpack(tx) if issubclass(result.python_type(), tuple) else ()
                    if len(pair) != 2 or not isinstance(pair[1], DictVariable):
                        unsupported("a forward pre-hook with kwargs returned something other than (args, kwargs)")
                    args, kwargs = pair
            else:
                result = hook.call(tx, [self, args], {})
                if not _is_none(result):
                    args = result if issubclass(result.python_type(), tuple) else TupleVariable([result])
        out = self.getattr(tx, "forward").call(tx, list(args.unpack(tx)), _string_keyed(kwargs))
        for hook, with_kwargs in post:
            passed = [self, args] + ([kwargs] if with_kwargs else []) + [out]
            result = hook.call(tx, passed, {})
            if not _is_none(result):
                out = result
        return out

    def _guard_forward_hooks(self, tx):
        """The module's forward pre-hooks and forward hooks as (Variable, takes kwargs) pairs, in order,
        guarded: the same hook ids, each the same function, the same kwargs flags, and no backward
        hooks."""
        m = self.module
        if self.source is None:
            unsupported(f"{type(m).__name__} has hooks registered and no source to guard them by")
        if m._backward_hooks or m._backward_pre_hooks:
            unsupported(f"{type(m).__name__} has backward hooks registered",
                        hint="compile the module whose hooks you want run (graphjit.compile keeps top-level hooks)")
        if m._forward_hooks_always_called:
            unsupported(f"{type(m).__name__} has a forward hook registered with always_call=True")
        for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            if _stored_into(tx, getattr(m, h, None)) is not None:
                unsupported(f"{type(m).__name__} has hooks registered in the compiled frame")
        src = self.source
        for name in ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
                     "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
            tx.guards.add_keys(AttrSource(src, name), tuple(getattr(m, name).keys()))
        own_forward = "" if "forward" in _instance_dict(m) else " or 'forward' in {0}.__dict__"
        tx.guards.add(3, "not ({0}._backward_hooks or {0}._backward_pre_hooks" + own_forward + ")",
                      f"{src.expr()} has no backward hooks", (src,))
        tx.guard_no_global_module_hooks()

        def hooks(name, with_kwargs):
            return [(builder.wrap(tx, hook, ItemSource(AttrSource(src, name), key)), key in with_kwargs)
                    for key, hook in getattr(m, name).items()]
        return (hooks("_forward_pre_hooks", m._forward_pre_hooks_with_kwargs),
                hooks("_forward_hooks", m._forward_hooks_with_kwargs))

    def guard_no_hooks(self, tx):
        """No hooks on the module, and (read from the same instance dict) no `forward` of its own
        unless it had one while tracing."""
        m = self.module
        hook_dicts = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
        if any(getattr(m, h, None) for h in hook_dicts):
            unsupported(f"{type(m).__name__} has hooks registered",
                        hint="compile the module whose hooks you want run (graphjit.compile keeps top-level hooks)")
        for h in hook_dicts:        # a hook dict the frame stored into: as the trace left it
            traced = _stored_into(tx, getattr(m, h, None))
            if traced is not None and traced.items:
                unsupported(f"{type(m).__name__} has hooks registered in the compiled frame")
        if self.source is not None:
            d = _instance_dict(m)
            if all(type(d.get(h)) is collections.OrderedDict for h in hook_dicts) and \
                    type(m).__getattribute__ is object.__getattribute__:
                # read from the instance dict: a third faster than four attribute lookups (GPT-2: 150 modules)
                checks = " or ".join(["(__gj_hd := {0}.__dict__)[%r]" % hook_dicts[0]] +
                                     [f"__gj_hd[{h!r}]" for h in hook_dicts[1:]])
                own_forward = "'forward' in __gj_hd"
            else:
                checks = " or ".join(f"{{0}}.{h}" for h in hook_dicts)
                own_forward = "'forward' in {0}.__dict__"
            if "forward" not in d:
                checks += " or " + own_forward
            tx.guards.add(3, f"not ({checks})", f"{self.source.expr()} has no hooks", (self.source,))
        tx.guard_no_global_module_hooks()

    def truth(self, tx):
        """bool(module): its __bool__, else its __len__ (the containers'), else True (the type is guarded)."""
        cls = type(self.module)
        containers = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
        if _class_lookup(cls, "__bool__") is _MISSING and \
                any(_class_lookup(cls, "__len__") is c.__dict__["__len__"] for c in containers):
            guard_class_attribute(tx, cls, "__len__")
            return bool(self._children(tx))
        for name in ("__bool__", "__len__"):
            if _class_lookup(cls, name) is not _MISSING:
                guard_class_attribute(tx, cls, name)
                result = self.class_attribute(tx, name).call(tx, [], {})
                return result.truth(tx) if name == "__bool__" else bool(result.as_python_constant())
        return True

    # containers: ModuleList, Sequential, ModuleDict
    def _children(self, tx):
        _refuse_changed_containers(tx, self.module)
        mods = self.module._modules
        if self.source is not None:
            tx.guards.add_keys(AttrSource(self.source, "_modules"), tuple(mods.keys()))
        return list(mods.keys())

    def _child(self, tx, key):
        _refuse_changed_containers(tx, self.module)
        src = module_attr_source(self.source, "_modules", key) if self.source is not None else None
        return builder.wrap(tx, self.module._modules[key], src)

    def unpack(self, tx):
        if isinstance(self.module, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in self._children(tx)]
        if isinstance(self.module, (torch.nn.ModuleList, torch.nn.Sequential)):
            return [self._child(tx, k) for k in self._children(tx)]
        if isinstance(self.module, torch.nn.ParameterList):
            return [self.getattr(tx, k) for k in self._parameter_keys(tx)]
        if isinstance(self.module, torch.nn.ParameterDict):
            return [ConstantVariable(k) for k in self._parameter_keys(tx)]
        return super().unpack(tx)

    def _parameter_keys(self, tx):
        _refuse_changed_containers(tx, self.module)
        keys = tuple(self.module._parameters.keys())
        if self.source is not None:
            tx.guards.add_keys(AttrSource(self.source, "_parameters"), keys)
        return keys

    def getitem(self, tx, index):
        idx = index.as_python_constant()
        if isinstance(self.module, torch.nn.ParameterDict):
            return self.getattr(tx, idx)
        if isinstance(self.module, torch.nn.ParameterList):
            return self.getattr(tx, self._parameter_keys(tx)[idx])
        keys = self._children(tx)
        if isinstance(self.module, torch.nn.ModuleDict):
            return self._child(tx, idx)
        if isinstance(idx, slice):
            if isinstance(self.module, torch.nn.Sequential):
                unsupported("slicing an nn.Sequential (a new module)")
            return TupleVariable([self._child(tx, k) for k in keys[idx]])
        return self._child(tx, keys[idx])

    def call_method(self, tx, name, args, kwargs):
        m = self.module
        if name == "__len__" or (name == "__getitem__"):
            if name == "__len__":
                if isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict)):
                    return ConstantVariable(len(self._parameter_keys(tx)))
                return ConstantVariable(len(self._children(tx)))
            return self.getitem(tx, args[0])
        if isinstance(m, torch.nn.ModuleDict) and name in ("keys", "values", "items"):
            keys = self._children(tx)
            if name == "keys":
                return ListIteratorLike([ConstantVariable(k) for k in keys])
            if name == "values":
                return ListIteratorLike([self._child(tx, k) for k in keys])
            return ListIteratorLike([TupleVariable([ConstantVariable(k), self._child(tx, k)]) for k in keys])
        if name in ("children", "modules", "parameters", "named_parameters", "buffers", "named_children",
                    "named_modules", "named_buffers") and _class_lookup(type(m), name) is \
                _class_lookup(torch.nn.Module, name):
            return self._module_iterator(tx, name, args, kwargs)
        if name == "__call__":
            return self.call(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def _module_iterator(self, tx, name, args, kwargs):
        if self.source is None:
            unsupported(f"{name}() of a module without a source")
        if name in ("children", "named_children"):
            keys = self._children(tx)
            items = [self._child(tx, k) for k in keys]
            if name == "named_children":
                items = [TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, items)]
            return IteratorVariable(items)
        # parameters()/buffers()/modules(): walk the real module, each reached through a source path
        kind = {"parameters": "_parameters", "named_parameters": "_parameters", "buffers": "_buffers",
                "named_buffers": "_buffers", "modules": None, "named_modules": None}[name]
        items = []
        for path, mod in self.module.named_modules():
            _refuse_changed_containers(tx, mod)
            src = self.source
            for part in path.split(".") if path else []:
                src = module_attr_source(src, "_modules", part)
            tx.guards.add_keys(AttrSource(src, "_modules"), tuple(mod._modules.keys()))
            if kind is None:
                var = builder.wrap(tx, mod, src)
                items.append(TupleVariable([ConstantVariable(path), var]) if name.startswith("named") else var)
                continue
            tx.guards.add_keys(AttrSource(src, kind), tuple(getattr(mod, kind).keys()))
            for pname, p in getattr(mod, kind).items():
                if p is None:
                    continue
                var = builder.wrap(tx, p, module_attr_source(src, kind, pname))
                full = f"{path}.{pname}" if path else pname
                items.append(TupleVariable([ConstantVariable(full), var]) if name.startswith("named") else var)
        return IteratorVariable(items)

    def __repr__(self):
        return f"Module({type(self.module).__name__})"


class UserObjectVariable(ObjectLikeVariable):
    """A Python object: read from outside (value, source) or made in the frame (cls, attrs)."""

    def __init__(self, value=None, source=None, cls=None):
        self.value = value
        self.source = source
        self.cls = cls if cls is not None else type(value)
        self.attrs = {}          # attributes stored during the trace (objects made in the frame)
        self.is_new = value is None
        self._dict_part = DictVariable({}) if self.is_new and issubclass(self.cls, dict) else None

    def dict_part(self, tx):
        """The dict contents of an instance of a dict subclass (ModelOutput, registries ...)."""
        if self._dict_part is None:
            if not isinstance(self.value, dict):
                unsupported(f"{self.cls.__name__} is not a dict")
            keys = tuple(dict.keys(self.value))
            if self.source is not None:
                tx.guards.add(4, f"tuple(dict.keys({{0}})) == {tx.guards.obj(keys)}",
                              f"keys of {self.source.expr()} == {keys!r}", (self.source,))
            items = {k: builder.wrap(tx, dict.__getitem__(self.value, k),
                                     DictItemSource(self.source, k) if self.source is not None else None)
                     for k in keys}
            self._dict_part = DictVariable(items)
        return self._dict_part

    def call_dict_method(self, tx, name, args, kwargs):
        """A C method of dict/OrderedDict applied to this object's dict contents."""
        part = self.dict_part(tx)
        if name == "__init__":
            if args:
                part.merge(tx, args[0])
            for k, v in kwargs.items():
                part.items[k] = v
            return ConstantVariable(None)
        if name == "__iter__":
            from .containers import IteratorVariable
            return IteratorVariable(part.unpack(tx))
        if name in ("__getitem__", "get", "__contains__", "setdefault", "pop") and args and \
                any(isinstance(k, torch.Tensor) for k in part.items):
            # its keys are the tensors themselves, a key Variable stands for a graph value: no lookup matches
            unsupported(f"a {self.cls.__name__} keyed by tensors (an optimizer's state): looking a tensor up in "
                        f"it is not traced", hint="the code runs in CPython")
        if name == "__getitem__" and len(args) == 1:
            from .containers import constant_key
            if constant_key(tx, args[0]) not in part.items:
                missing = _class_lookup(self.cls, "__missing__")
                if missing is not _MISSING:
                    return self._missing(tx, args[0], missing)
        if name in _DICT_MUTATORS and not self.is_new:
            unsupported(f"mutating the dict contents of a {self.cls.__name__} from outside the frame")
        if name in _DICT_MUTATORS:
            part.source = None
        return part.call_method(tx, name, args, kwargs)

    def _missing(self, tx, key, missing):
        """dict.__getitem__ of a missing key calls the class's __missing__ (defaultdict's factory,
        Counter's 0, a user's): a Python one is traced; defaultdict's inserts the factory's value."""
        if missing is collections.defaultdict.__missing__:
            if self.is_new:      # made in the frame: call its factory, insert the value, as __missing__
                factory = self.attrs.get("default_factory")
                if factory is None or isinstance(factory, ConstantVariable) and factory.value is None:
                    from .containers import raise_key_error
                    raise_key_error(key)
                value = factory.call(tx, [], {})
                self.call_dict_method(tx, "__setitem__", [key, value], {})
                return value
            factory = getattr(self.value, "default_factory", None)
            if factory is None:
                from .containers import raise_key_error
                raise_key_error(key)
            unsupported(f"a missing key read from the {self.cls.__name__} {self.source or ''}: its default_factory "
                        "would insert a value into a dict from outside the frame")
        if not isinstance(missing, types.FunctionType):
            unsupported(f"{self.cls.__name__}.__missing__ is not a Python function")
        return UserFunctionVariable(missing).call(tx, [self, key], {})

    def python_type(self):
        return self.cls

    def as_python_constant(self):
        from .base import NotConstant
        if self.value is not None and isinstance(self.value, (types.BuiltinFunctionType,)):
            return self.value
        raise NotConstant(self)

    def getattr(self, tx, name):
        python_hook = isinstance(_class_lookup(self.cls, "__getattribute__"), types.FunctionType)
        if python_hook and (self.is_new or tx.side_effects.has_attr_stores(self.value)):
            # the class customizes attribute lookup (e.g. attribute_map) and the object is made in the frame,
            # or the frame set attributes on it: the hook is traced, so it reads the object as the frame
            # left it (the real one would read it as it was before the stores)
            hook = self.class_attribute(tx, "__getattribute__")
            return hook.call(tx, [ConstantVariable(name)], {})
        return self.raw_getattr(tx, name)

    def raw_getattr(self, tx, name):
        """object.__getattribute__ semantics (plus __getattr__ as the fallback)."""
        if self.is_new:
            return self._new_object_attr(tx, name)
        if not self.is_new:
            written = _stored_into(tx, _instance_dict(self.value))
            if written is not None:         # the frame wrote through obj.__dict__ (or vars(obj))
                if tx.side_effects.has_attr_stores(self.value):
                    unsupported(f"attributes of a {self.cls.__name__} both set and written through its "
                                f"__dict__ in one frame")
                if name in written.items and not _is_data_descriptor(_class_lookup(self.cls, name)):
                    return written.items[name]
                if name not in written.items:
                    return self.class_attribute(tx, name, through_class=True)
            if tx.side_effects.attr_present(self.value, name) is False and \
                    not _is_data_descriptor(_class_lookup(self.cls, name)):   # deleted from the instance dict
                return self.class_attribute(tx, name, through_class=True)
            found, value = tx.side_effects.pending_attr(self.value, name)
            if found:
                return value
            if isinstance(self.value, logging.Logger) and name in DEFERRED_LOGGER_METHODS:
                return DeferredCallVariable(self, name)
        if name == "__class__":
            return ClassVariable(self.cls)
        if not self.is_new and self.source is not None and \
                isinstance(_class_lookup(self.cls, "__getattribute__"), types.FunctionType):
            # a Python __getattribute__ (e.g. transformers' configs): read the real attribute, guard it
            try:
                value = getattr(self.value, name)
            except AttributeError as e:
                tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (self.source,))
                tx.guards.note_attribute(self.source, self.value, name, _MISSING)
                raise AttributeMissing(str(e))
            tx.guards.note_attribute(self.source, self.value, name, value)
            if type(value) in (list, dict, set) and _computes(_class_lookup(self.cls, name)) and \
                    name not in _instance_dict(self.value):
                return _computed_container(tx, AttrSource(self.source, name), value)
            return builder.wrap(tx, value, AttrSource(self.source, name))
        if name == "__dict__" and type(_class_lookup(self.cls, name)) is types.GetSetDescriptorType:
            return InstanceDictView.of(tx, self, self.value)
        d = _instance_dict(self.value)
        descriptor = _class_lookup(self.cls, name)
        if name in d and not _is_data_descriptor(descriptor):
            return builder.wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        if descriptor is _MISSING and name not in d and self.source is not None:
            if _has_instance_dict(self.cls) and _class_lookup(self.cls, "__getattr__") is not _MISSING:
                # answered by the class's __getattr__ (inlined by class_attribute), which hasattr would
                # call, side effects and all, and which answers: missing from the instance dict
                tx.guards.add(3, f"{lit(name)} not in {{0}}.__dict__", f"{self.source.expr()} lacks {name!r}",
                              (self.source,))
            else:
                tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (self.source,))
        self.guard_not_shadowed(tx, name, d if _has_instance_dict(self.cls) else None)
        return self.class_attribute(tx, name)

    def class_attribute(self, tx, name, through_class=False):
        """The class's attribute bound to this object; a descriptor written in Python (its type defines
        __get__ as a function) is inlined: type(d).__get__(d, obj, cls)."""
        descriptor = _class_lookup(self.cls, name)
        if isinstance(descriptor, functools.cached_property):
            guard_mro_lookup(tx, self.cls, name)
            return cached_property_get(tx, self, self.cls, name, descriptor)
        getter = getattr(type(descriptor), "__get__", None) if descriptor is not _MISSING else None
        if isinstance(getter, types.FunctionType) and not isinstance(descriptor, type):
            guard_mro_lookup(tx, self.cls, name)
            return builder.wrap(tx, getter, None).call(tx, [_descriptor_var(tx, descriptor), self,
                                                           ClassVariable(self.cls)], {})
        return super().class_attribute(tx, name, through_class)

    def _new_object_attr(self, tx, name):
        """object.__getattribute__ of an object made in the frame: data descriptors, then its own
        attributes (`attrs`, which also hold its __slots__ values), then the class."""
        descriptor = _class_lookup(self.cls, name)
        if isinstance(descriptor, types.MemberDescriptorType):
            if name in self.attrs:
                return self.attrs[name]
            if _class_lookup(self.cls, "__getattr__") is not _MISSING:
                unsupported(f"unset slot {name!r} of a {self.cls.__name__} with __getattr__")
            raise AttributeMissing(str(_attribute_error(self.cls, name, descriptor, getattr)))
        if name == "__class__":
            return ClassVariable(self.cls)
        if name == "__dict__" and _has_instance_dict(self.cls):
            if _slot_names(self.cls):
                unsupported(f"__dict__ of a {self.cls.__name__} made in the frame (its __slots__ share attrs)")
            view = DictVariable({})
            view.items = self.attrs          # the object's own dict: writes through it are its attributes
            return view
        if not _is_data_descriptor(descriptor) and name in self.attrs:
            return self.attrs[name]
        return self.class_attribute(tx, name)

    def identity_key(self):
        """A dict key / set member hashed and compared by identity: object's __hash__ and __eq__ only."""
        for name in ("__hash__", "__eq__"):
            owner = lookup(self.cls, name)[0] or object
            if owner is not object:
                unsupported(f"a {self.cls.__name__} as a dict key or set member: its {name} comes from "
                            f"{owner.__name__}, not object")
        return ("object", id(self.value) if not self.is_new else id(self))

    def delattr(self, tx, name):
        hook = _class_lookup(self.cls, "__delattr__")
        if isinstance(hook, types.FunctionType):
            self.call_dunder(tx, "__delattr__", [ConstantVariable(name)])
            return
        if hook is not object.__delattr__:
            unsupported(f"deleting {name!r} of a {self.cls.__name__}: its __delattr__ is {hook!r}")
        self.raw_delattr(tx, name)

    def raw_delattr(self, tx, name):
        """object.__delattr__: a property's deleter, a slot, else the instance dict."""
        descriptor = _class_lookup(self.cls, name)
        if isinstance(descriptor, property):
            if descriptor.fdel is None:
                raise UserError(_attribute_error(self.cls, name, descriptor, delattr))
            builder.wrap(tx, descriptor.fdel, None).call(tx, [self], {})
            return
        if _is_data_descriptor(descriptor) and not isinstance(descriptor, types.MemberDescriptorType):
            unsupported(f"deleting {name!r} through a {type(descriptor).__name__} descriptor")
        if self.is_new:
            if name not in self.attrs:
                raise UserError(_attribute_error(self.cls, name, descriptor, delattr))
            del self.attrs[name]
            return
        if self.source is None:
            unsupported(f"deleting attribute {name!r} of an object with no source")
        present = tx.side_effects.attr_present(self.value, name)
        if present is None:
            present = self._guard_own_attribute(tx, name, descriptor)
        if not present:
            raise UserError(_attribute_error(self.cls, name, descriptor, delattr))
        tx.side_effects.delete_attr(self, self.value, name, raw=True)

    def _guard_own_attribute(self, tx, name, descriptor):
        """Whether this object from outside holds `name` in its slot or instance dict (what
        object.__delattr__ removes), guarded to hold it, or not, next call."""
        if isinstance(descriptor, types.MemberDescriptorType):
            present = slot_is_set(descriptor, self.value)
            guard_slot(tx, self.source, name, descriptor, present)
            return present
        if not _has_instance_dict(self.cls):
            return False
        present = name in _instance_dict(self.value)
        guard_in_instance_dict(tx, self.source, name, present)
        return present

    def setattr(self, tx, name, value):
        hook = _class_lookup(self.cls, "__setattr__")
        if isinstance(hook, types.FunctionType):
            # the class's own __setattr__ (validation, name mapping, frozen dataclasses) is inlined; the
            # object.__setattr__ it ends in is the store (recorded, for an object from outside)
            self.call_dunder(tx, "__setattr__", [ConstantVariable(name), value])
            return
        if hook is not object.__setattr__:
            unsupported(f"assigning {name!r} of a {self.cls.__name__}: its __setattr__ is {hook!r}")
        self.raw_setattr(tx, name, value)

    def raw_setattr(self, tx, name, value):
        """object.__setattr__: a data descriptor's __set__ (a property's setter, a slot, a Python
        descriptor's __set__), else the instance dict; AttributeError where CPython raises one."""
        descriptor = _class_lookup(self.cls, name)
        if isinstance(descriptor, property):
            if descriptor.fset is None:
                raise UserError(_attribute_error(self.cls, name, descriptor, setattr))
            builder.wrap(tx, descriptor.fset, None).call(tx, [self, value], {})
            return
        setter = getattr(type(descriptor), "__set__", None) if descriptor is not _MISSING else None
        if isinstance(setter, types.FunctionType):
            builder.wrap(tx, setter, None).call(tx, [_descriptor_var(tx, descriptor), self, value], {})
            return
        if setter is not None and not isinstance(descriptor, types.MemberDescriptorType):
            unsupported(f"assigning {name!r} through a {type(descriptor).__name__} descriptor")
        if setter is None and not _has_instance_dict(self.cls):
            raise UserError(_attribute_error(self.cls, name, descriptor, setattr))
        if self.is_new:
            self.attrs[name] = value
            return
        if self.source is None:
            unsupported(f"assigning attribute {name!r} of an object with no source")
        tx.side_effects.store_attr(self, self.value, name, value, raw=True)

    def call(self, tx, args, kwargs):
        if _class_lookup(self.cls, "__call__") is _MISSING:
            raise UserError(TypeError(f"{self.cls.__name__!r} object is not callable"))
        if self.cls is weakref.ref and not self.is_new and self.source is not None and not args and not kwargs:
            return self._referent(tx)
        return self.call_dunder(tx, "__call__", list(args), kwargs)

    def _referent(self, tx):
        """`ref()` of a weak reference read from outside (nn.RNN's `_flat_weight_refs`, checked against its
        weights on every forward): the object it refers to now, read through `ref()` (guarded like any value
        from outside), or None, guarded to stay None."""
        from ..sources import WeakRefSource
        source = WeakRefSource(self.source)
        referent = self.value()
        if referent is None:
            tx.guards.add(1, "{0} is None", f"{source.expr()} is None", (source,))
            return ConstantVariable(None)
        return builder.wrap(tx, referent, source)

    def unpack(self, tx):
        if _class_lookup(self.cls, "__iter__") is _MISSING:
            if _class_lookup(self.cls, "__getitem__") is not _MISSING:
                unsupported(f"iterating over a {self.cls.__name__} through __getitem__")
            raise UserError(TypeError(f"{self.cls.__name__!r} object is not iterable"))
        iterator = self.call_dunder(tx, "__iter__", [])
        if isinstance(iterator, ObjectLikeVariable):
            # its __next__ would run ahead of the loop body (all items produced before the first one is used)
            unsupported(f"iterating over a {self.cls.__name__} whose __iter__ returns a "
                        f"{iterator.python_type().__name__} (a user iterator)")
        return iterator.unpack(tx)

    def getitem(self, tx, index):
        if _class_lookup(self.cls, "__getitem__") is _MISSING:
            raise UserError(TypeError(f"{self.cls.__name__!r} object is not subscriptable"))
        return self.call_dunder(tx, "__getitem__", [index])

    def call_method(self, tx, name, args, kwargs):
        return self.getattr(tx, name).call(tx, args, kwargs)

    def length(self, tx):
        """len(obj): type(obj).__len__, whose result must be a non-negative int."""
        if _class_lookup(self.cls, "__len__") is _MISSING:
            raise UserError(TypeError(f"object of type {self.cls.__name__!r} has no len()"))
        result = self.call_dunder(tx, "__len__", [])
        if not result.is_constant():
            unsupported(f"{self.cls.__name__}.__len__ returned {result}")
        value = result.as_python_constant()
        if not isinstance(value, int):
            raise UserError(TypeError(f"{type(value).__name__!r} object cannot be interpreted as an integer"))
        if value < 0:
            raise UserError(ValueError("__len__() should return >= 0"))
        return ConstantVariable(int(value))

    def truth(self, tx):
        """bool(obj): type(obj).__bool__ (which must return a bool), else __len__, else True."""
        if _class_lookup(self.cls, "__bool__") is not _MISSING:
            result = self.call_dunder(tx, "__bool__", [])
            if not result.is_constant():
                unsupported(f"{self.cls.__name__}.__bool__ returned {result}")
            value = result.as_python_constant()
            if type(value) is not bool:
                raise UserError(TypeError(f"__bool__ should return bool, returned {type(value).__name__}"))
            return value
        if _class_lookup(self.cls, "__len__") is not _MISSING:
            return self.length(tx).value != 0
        return True

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.expr()
        if not self.is_new:
            return cg.obj(self.value)     # an existing object reached without an access path
        fields = ", ".join(f"{k!r}: {cg.expr(v)}" for k, v in self.attrs.items())
        if self._dict_part is not None:
            items = ", ".join(f"{cg.expr(self._dict_part.key_var(k))}: {cg.expr(v)}"
                              for k, v in self._dict_part.items.items())
            return f"__gj_new_object({cg.obj(self.cls)}, {{{fields}}}, {{{items}}})"
        return f"__gj_new_object({cg.obj(self.cls)}, {{{fields}}})"

    def __repr__(self):
        return f"Object({self.cls.__name__})"


_DICT_MUTATORS = {"__setitem__", "__delitem__", "update", "pop", "popitem", "setdefault", "clear",
                  "move_to_end"}


def _guarded_class_attribute(attr):
    """What `cls.name` evaluates to for a method, a staticmethod or a property found on the class (the
    object a guard compares), or None for attributes guarded otherwise (plain values by value)."""
    if isinstance(attr, staticmethod):
        return attr.__func__
    if isinstance(attr, (types.FunctionType, property)):
        return attr
    return None


def _class_source(cls, name):
    """`cls.name` as a source, for a user class reached without one (an object made in the frame,
    `type(self)`): a class attribute read there is guarded like any other read."""
    if not isinstance(cls, type) or is_library_class(cls):
        return None
    return AttrSource(ObjectSource(cls), name)


def _class_value_source(tx, cls, name):
    """The source to wrap a user class's attribute with, read through a class reached without one:
    `cls.name`, so the value is guarded as any value read from outside (an immutable one by value, a dict
    or list by what the trace reads of it) and changes to it (a class-level registry appended to) are
    applied to the class's object. None for a descriptor (reading `cls.name` would call its __get__)."""
    source = _class_source(cls, name)
    value = _class_lookup(cls, name)
    if source is None or value is _MISSING or _guarded_class_attribute(value) is not None:
        return None                 # missing, or a method / property: see guard_class_attribute
    if hasattr(type(value), "__get__"):
        return None
    return source


def guard_class_attribute(tx, cls, name):
    """A method or property the trace found on `cls`: the same one next call (once per class and name,
    whichever instance it was reached through), so replacing it on the class recompiles. A classmethod
    or a descriptor with a Python __get__ (where `cls.name` would make a new bound method or run __get__)
    is guarded by guard_mro_lookup instead."""
    attr = _class_lookup(cls, name)
    expected = _guarded_class_attribute(attr)
    if expected is not None:
        tx.guards.add_id(AttrSource(ObjectSource(cls), name), expected)
    elif isinstance(attr, classmethod) or _has_python_get(attr):
        guard_mro_lookup(tx, cls, name)


def _has_python_get(attr):
    return attr is not _MISSING and not isinstance(attr, type) and \
        isinstance(getattr(type(attr), "__get__", None), types.FunctionType)


def guard_mro(tx, cls):
    """cls's MRO is the same next call. `C.__bases__ = ...` (on cls or any class it derives from) gives
    cls a new __mro__ tuple: a trace that relied on it (a type guard, isinstance, a lookup along it)
    checks that tuple's identity. Builtin classes can't change; library classes aren't rebased."""
    if isinstance(cls, type) and cls.__flags__ & _HEAPTYPE and not is_library_class(cls):
        tx.guards.add_same_tuple(AttrSource(ObjectSource(cls), "__mro__"), cls.__mro__)


def guard_mro_lookup(tx, cls, name, start=0):
    """A lookup of `name` along cls.__mro__[start:] (all of it, or the tail that super() searches) finds
    what it found now: the same MRO, no class before the owner holds `name`, the owner still holds the
    same object; where no class holds it, none does next call. Builtin (non-heap) classes can't change
    and are not checked."""
    guard_mro(tx, cls)
    for klass in cls.__mro__[start:]:
        owns = name in klass.__dict__
        if not klass.__flags__ & _HEAPTYPE:
            if owns:
                return
            continue
        dict_source = AttrSource(ObjectSource(klass), "__dict__")
        if owns:
            tx.guards.add_id(ItemSource(dict_source, name), klass.__dict__[name])
            return
        tx.guards.add(1, f"{lit(name)} not in {{0}}", f"{klass.__qualname__} does not define {name!r}",
                      (dict_source,))


_HEAPTYPE = 1 << 9      # Py_TPFLAGS_HEAPTYPE: a class made by a class statement or type()


def _descriptor_var(tx, descriptor):
    """A descriptor object found on a class, read through a source (its own state may change)."""
    tx.keepalive.append(descriptor)
    return builder.wrap(tx, descriptor, ObjectSource(descriptor))


def _computes(descriptor):
    """Whether a class attribute computes its value in Python on each read: a property, or a descriptor
    whose __get__ is a Python function (not a C slot such as __dict__'s, which returns the same object)."""
    return isinstance(descriptor, property) or \
        isinstance(getattr(type(descriptor), "__get__", None), types.FunctionType)


def _computed_container(tx, source, value):
    """A list, dict or set that a property computes on each read (JambaConfig.layer_types builds a new list),
    read through a Python __getattribute__: not an object stored at `source`, so the frame gets a copy of its
    own (its mutations and identity are those of a fresh object, as in Python), and the entry guards that a
    read there gives an equal container. Only containers of constants: others break the graph."""
    items = list(value.items()) if isinstance(value, dict) else list(value)
    leaves = [leaf for item in items for leaf in (item if isinstance(value, dict) else (item,))]
    if not all(type(leaf) in (str, int, float, bool, type(None)) for leaf in leaves):
        unsupported(f"{source.expr()} is computed on every read (a new {type(value).__name__} of non-constant "
                    f"items each time, through a Python __getattribute__)")
    tx.guards.add_equals(source, value)
    return builder.wrap(tx, type(value)(value) if not isinstance(value, dict) else dict(value), None)


def _is_data_descriptor(attr):
    return attr is not _MISSING and hasattr(type(attr), "__set__")


def slot_is_set(descriptor, obj):
    """Whether the __slots__ member `descriptor` holds a value on obj."""
    try:
        descriptor.__get__(obj, type(obj))
        return True
    except AttributeError:
        return False


def guard_slot(tx, source, name, descriptor, present):
    """The __slots__ member `name` of the object at `source` is set next call too (or, not present, unset)."""
    if source is None:
        unsupported(f"slot {name!r} of an object with no source")
    tx.guards.add(3, f"{tx.guards.obj(slot_is_set)}({tx.guards.obj(descriptor)}, {{0}}) is {present}",
                  f"slot {name!r} of {source.expr()} is {'' if present else 'not '}set", (source,))


def guard_in_instance_dict(tx, source, name, present):
    """The object at `source` holds `name` in its instance dict next call too (or, not present, doesn't)."""
    tx.guards.add(3, f"{lit(name)} {'in' if present else 'not in'} {{0}}.__dict__", None, (source,))


def _has_instance_dict(cls):
    return cls.__dictoffset__ != 0


def _slot_names(cls):
    return [n for k in cls.__mro__ for n in k.__dict__ if isinstance(k.__dict__[n], types.MemberDescriptorType)]


def _attribute_error(cls, name, descriptor, operation):
    """The AttributeError CPython raises for this read, store or delete (an unset slot, no setter or
    deleter, no __dict__, read-only), raised by CPython itself on a stand-in class of the same name."""
    slots = (name,) if isinstance(descriptor, types.MemberDescriptorType) else ()
    slots += ("__dict__",) if _has_instance_dict(cls) else ()
    namespace = {"__slots__": slots, "__qualname__": cls.__qualname__, "__module__": cls.__module__}
    if isinstance(descriptor, property):
        namespace[name] = property(descriptor.fget)
    elif descriptor is not _MISSING and not isinstance(descriptor, types.MemberDescriptorType):
        namespace[name] = descriptor
    probe = object.__new__(type(cls.__name__, (), namespace))
    try:
        operation(probe, name, None) if operation is setattr else operation(probe, name)
    except AttributeError as e:
        return e
    return AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")


def new_object(cls, attrs, dict_items=None):
    """Rebuild an object made in the frame: allocate without __init__, then set its attributes (and, for
    dict subclasses, its dict contents)."""
    obj = cls.__new__(cls)
    if dict_items:
        # the C base's __setitem__: dict.update would bypass OrderedDict's own bookkeeping
        base = next(b for b in cls.__mro__ if b in (collections.OrderedDict, dict))
        for k, v in dict_items.items():
            base.__setitem__(obj, k, v)
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)
    return obj


# Logger methods whose calls are deferred until after the graph instead of breaking it: they only write
# to handlers, so running them after the graph is indistinguishable except when the graph itself raises.
DEFERRED_LOGGER_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log",
                           "warning_once", "info_once", "warning_advice"}


class InstanceDictView(Variable):
    """`obj.__dict__` of an object from outside, read only: membership tests and reads of string keys, which
    see the frame's own stores to obj's attributes (nn.Module.register_buffer asks `"_buffers" in
    self.__dict__`). Anything else (iteration, len, stores through the view) is a graph break."""

    def __init__(self, owner, real, source):
        self.owner, self.real, self.source = owner, real, source

    @staticmethod
    def of(tx, owner, real):
        if owner.source is None:
            unsupported(f"__dict__ of a {type(real).__name__} without a source")
        if _stored_into(tx, _instance_dict(real)) is not None:
            unsupported(f"__dict__ of a {type(real).__name__} the frame wrote through its __dict__")
        return InstanceDictView(owner, real, AttrSource(owner.source, "__dict__"))

    def python_type(self):
        return dict

    def __repr__(self):
        return f"InstanceDictView({type(self.real).__name__})"

    def _key(self, key):
        name = key.as_python_constant() if key.is_constant() else None
        if type(name) is not str:
            unsupported(f"{self} read at a key that is not a constant string: {key}")
        return name

    def _stored(self, tx, name):
        """Whether the frame set or deleted `name` in the instance dict (None: it did not touch it)."""
        stored = tx.side_effects.attr_present(self.real, name)
        if stored is None or _is_data_descriptor(_class_lookup(type(self.real), name)):
            return None         # a slot's or another data descriptor's store does not reach the dict
        if isinstance(self.owner, NNModuleVariable):
            unsupported(f"{self} read at {name!r}, which the frame set (nn.Module.__setattr__ may put it in "
                        f"_parameters, _buffers or _modules instead)")
        return stored

    def _in_real_dict(self, tx, name):
        present = name in _instance_dict(self.real)
        guard_in_instance_dict(tx, self.owner.source, name, present)
        return present

    def _present(self, tx, name):
        stored = self._stored(tx, name)
        return stored if stored is not None else self._in_real_dict(tx, name)

    def method___contains__(self, tx, key):
        return ConstantVariable(self._present(tx, self._key(key)))

    def getitem(self, tx, key):
        name = self._key(key)
        stored = self._stored(tx, name)
        if stored:
            return tx.side_effects.pending_attr(self.real, name)[1]
        if stored is False or not self._in_real_dict(tx, name):
            raise UserError(KeyError(name))
        return builder.wrap(tx, _instance_dict(self.real)[name], ItemSource(self.source, name))

    def call_method(self, tx, name, args, kwargs):
        if name not in ("get", "__contains__", "__getitem__") or kwargs:
            unsupported(f"{self}.{name}()")
        return getattr(self, "getitem" if name == "__getitem__" else "method_" + name)(tx, *args)

    def method_get(self, tx, key, default=None):
        name = self._key(key)
        if not self._present(tx, name):
            return default if default is not None else ConstantVariable(None)
        return self.getitem(tx, key)


class DeferredCallVariable(Variable):
    """`logger.warning` and friends: recorded during the trace, called after the graph has run."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs):
        if not tx.defer_logging or not all(a.is_constant() for a in [*args, *kwargs.values()]):
            unsupported(f"logging call {self.name}() (deferred past the graph only with constant arguments "
                        "and no other side effects in the frame)", hint="it runs in CPython at a graph break")
        tx.side_effects.defer_call(self, list(args), dict(kwargs))
        return ConstantVariable(None)

    def reconstruct(self, cg):
        return f"{cg.expr(self.obj)}.{self.name}"


class EnvironVariable(Variable):
    """os.environ: each key read is guarded on its own value (not the whole environment)."""

    def __init__(self, source):
        self.source = source

    def python_type(self):
        return type(os.environ)

    def _read(self, tx, key):
        k = key.as_python_constant()
        value = os.environ.get(k)
        tx.guards.add(3, f"{{0}}.get({lit(k)}) == {lit(value)}", None, (self.source,))
        return k, value

    def call_method(self, tx, name, args, kwargs):
        if name == "get":
            k, value = self._read(tx, args[0])
            if value is None:
                return args[1] if len(args) > 1 else kwargs.get("default", ConstantVariable(None))
            return ConstantVariable(value)
        if name == "__getitem__":
            k, value = self._read(tx, args[0])
            if value is None:
                from ...exc import UserError
                raise UserError(KeyError(k))
            return ConstantVariable(value)
        if name == "__contains__":
            return self.method___contains__(tx, args[0])
        unsupported(f"os.environ.{name}()")

    def method___contains__(self, tx, key):
        """`key in os.environ` (the `in` operator comes here too)."""
        return ConstantVariable(self._read(tx, key)[1] is not None)

    def getattr(self, tx, name):
        from .base import MethodOf
        return MethodOf(self, name)

    def getitem(self, tx, key):
        return self.call_method(tx, "__getitem__", [key], {})


class ClassVariable(ObjectLikeVariable):
    def __init__(self, cls, source=None):
        self.cls = cls
        self.source = source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def python_type(self):
        return type(self.cls)

    def as_python_constant(self):
        return self.cls

    def getattr(self, tx, name):
        attr = _class_lookup(self.cls, name) if isinstance(self.cls, type) else _MISSING
        if attr is _MISSING:
            try:
                value = getattr(self.cls, name)
            except AttributeError:
                self._guard_missing(tx, name)
                raise AttributeMissing(f"type object {self.cls.__name__!r} has no attribute {name!r}")
            base = self._mutable_source()
            return builder.wrap(tx, value, AttrSource(base, name) if base is not None else None)
        if name == "apply" and _is_autograd_function(self.cls):
            guard_class_attribute(tx, self.cls, name)
            return AutogradFunctionApply(self.cls)
        if isinstance(attr, classmethod):
            guard_class_attribute(tx, self.cls, name)
            return BoundMethodVariable(builder.wrap(tx, attr.__func__, None), self)
        if isinstance(attr, staticmethod):
            guard_class_attribute(tx, self.cls, name)
            return builder.wrap(tx, attr.__func__, None)
        return builder.wrap(tx, getattr(self.cls, name), self._attribute_source(tx, name))

    def _mutable_source(self):
        """Where to read (and guard) this class's attributes on every call: its source, else the class
        object itself; None for a builtin class with a builtin metaclass, whose attributes can't change."""
        if self.source is not None:
            return self.source
        if any(k.__flags__ & _HEAPTYPE for k in (self.cls, type(self.cls)) if isinstance(k, type)):
            return ObjectSource(self.cls)
        return None

    def _guard_missing(self, tx, name):
        """The class still lacks `name` next call (`getattr(cls, name, default)`, then `cls.name = v`)."""
        source = self._mutable_source()
        if source is not None:
            tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (source,))

    def _attribute_source(self, tx, name):
        if self.source is not None:
            return AttrSource(self.source, name)
        return _class_value_source(tx, self.cls, name)

    def _enum_members(self):
        """An enum class's members (fixed when the class was made), or None for another class or an enum
        whose metaclass iterates otherwise."""
        meta = type(self.cls)
        if isinstance(self.cls, enum.EnumMeta) and meta.__iter__ is enum.EnumMeta.__iter__ and \
                meta.__len__ is enum.EnumMeta.__len__:
            return list(self.cls)
        return None

    def unpack(self, tx):
        members = self._enum_members()
        if members is None:
            return super().unpack(tx)
        return [ConstantVariable(m) for m in members]

    def length(self, tx):
        members = self._enum_members()
        if members is None:
            return self.call_method(tx, "__len__", [], {})
        return ConstantVariable(len(members))

    def call(self, tx, args, kwargs):
        from .classes import construct
        return construct(tx, self, args, kwargs)

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.cls)

    def __repr__(self):
        return f"Class({getattr(self.cls, '__qualname__', self.cls)})"


def cached_property_get(tx, obj_var, cls, name, descriptor):
    """A functools.cached_property missing from the instance dict (which is read first): computed, then
    stored there, as its __get__ does (3.11's takes a lock to do so, which the trace need not)."""
    if cls.__setattr__ is not object.__setattr__ or not hasattr(obj_var, "setattr"):
        unsupported(f"cached_property {name!r} of a class with its own __setattr__")
    value = builder.wrap(tx, descriptor.func, None).call(tx, [obj_var], {})
    obj_var.setattr(tx, descriptor.attrname or name, value)
    return value


def _is_autograd_function(cls):
    """A torch.autograd.Function subclass that keeps Function's own `apply` (a classmethod in Python on
    some torch versions, a C one on others)."""
    return isinstance(cls, type) and issubclass(cls, torch.autograd.Function) and \
        _class_lookup(cls, "apply") is _class_lookup(torch.autograd.Function, "apply")


class AutogradFunctionApply(Variable):
    """`MyFunction.apply(...)` of a torch.autograd.Function subclass: one node of the graph calling it, so
    the backend traces its forward, and autograd (or AOTAutograd's joint trace) uses its backward. Its
    forward runs once on fake tensors while tracing, so one that could do anything else than compute
    tensors from its arguments breaks instead: Python stores (other than to ctx), writes to its inputs
    (`ctx.mark_dirty`), calls of `print`, `.item()` and the like (a data-dependent forward fails on fake
    tensors and breaks too)."""

    def __init__(self, cls):
        self.cls = cls

    def python_type(self):
        return types.MethodType

    def call(self, tx, args, kwargs):
        from .tensor import record
        why, reads = _impure_autograd_function(self.cls)
        if why is not None:
            unsupported(f"{self.cls.__qualname__}.apply: {why}",
                        hint="graphjit traces an autograd.Function's forward and backward once; keep them to "
                             "tensor computation, or call it outside the compiled region")
        for source, value in reads:     # what they read from outside: the same next call
            if type(value) in (int, float, bool, str, bytes, type(None)):
                tx.guards.add_equals(source, value)
            else:
                tx.guards.add_id(source, value)
        return record(tx, "call_function", _apply_of(self.cls), list(args), dict(kwargs))

    def __repr__(self):
        return f"{self.cls.__qualname__}.apply"


def _apply_of(cls):
    """A plain function calling cls.apply, the graph node's target (torch.fx writes a target from a torch
    module, as the bound `apply` is, as an import path, which does not name this class's). Kept on the class
    (a cycle through it, which gc frees with a class made at run time)."""
    stored = cls.__dict__.get("_graphjit_apply")
    if stored is not None:
        return stored.__func__

    def fn(*args, **kwargs):
        return cls.apply(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = f"{cls.__name__}_apply"
    cls._graphjit_apply = staticmethod(fn)
    return fn


_IMPURE_CALLS = frozenset({"print", "item", "tolist", "numpy", "mark_dirty", "backward", "register_hook",
                           "input", "open", "setattr", "delattr", "exec", "eval", "set_materialize_grads"})
_HELPER_DEPTH = 3       # calls of Python functions followed from forward/backward (deeper: refused)


def _impure_autograd_function(cls):
    """(why, reads): why `cls`'s forward, setup_context or backward may do more than compute tensors from
    their arguments, or None; and (source, value) for each global and closure variable they (and the Python
    functions they call) read, which the entry guards. They are traced once, when the graph is compiled, so
    anything else they read or change would be baked in: a store into a global, a closure cell, an attribute
    of anything but ctx in forward (of anything at all in backward, which may run more than once), a
    container; a call with effects; a read of a value that could change in place (a list, a module of the
    user's, whose attributes could be rebound)."""
    reads = []
    for name in ("forward", "setup_context", "backward", "vjp"):
        fn = _class_lookup(cls, name)
        fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
        if getattr(fn, "__code__", None) is None:
            continue
        why = _impure_code(fn, name, reads, set(), 0)
        if why is not None:
            return f"its {name} {why}", reads
    return None, reads


def _impure_code(fn, role, reads, seen, depth):
    import inspect
    from ..bytecode import read
    code = fn.__code__
    if code in seen:
        return None
    seen.add(code)
    if code.co_flags & inspect.CO_GENERATOR:
        return "is a generator"
    first = code.co_varnames[0] if code.co_argcount and depth == 0 else None
    previous = None
    for ins in read(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"):
            return f"stores {ins.argval!r} outside itself"
        if ins.opname in ("STORE_ATTR", "DELETE_ATTR") and not (
                role in ("forward", "setup_context") and previous is not None and previous.opname == "LOAD_FAST"
                and previous.argval == first):
            return f"stores attribute {ins.argval!r}" + \
                (" of an object other than ctx" if role in ("forward", "setup_context") else "")
        if ins.opname in ("STORE_SUBSCR", "DELETE_SUBSCR"):
            return "stores into a container"
        if ins.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_NAME") and ins.argval in _IMPURE_CALLS:
            return f"calls {ins.argval}()"
        if ins.opname in ("LOAD_GLOBAL", "LOAD_DEREF"):
            value, source = _loaded_value(fn, ins)
            if value is _MISSING:
                pass
            elif not _is_stateless(value):
                return f"reads {ins.argval!r}, a {type(value).__name__} it could change"
            elif isinstance(value, types.ModuleType) and not _is_library_module(value):
                return f"reads module {value.__name__!r}, whose attributes could be rebound"
            else:
                if source is not None:
                    reads.append((source, value))
                if isinstance(value, types.FunctionType) and not _is_library_module(value):
                    if depth >= _HELPER_DEPTH:
                        return f"calls {ins.argval}(), too deep to follow"
                    why = _impure_code(value, "helper", reads, seen, depth + 1)
                    if why is not None:
                        return f"calls {ins.argval}(), which {why}"
        previous = ins
    return None


def _is_library_module(value):
    """Whether a module (or a function's module) is torch's or the standard library's."""
    return is_library_name(value.__name__) if isinstance(value, types.ModuleType) else is_library_class(value)


def _loaded_value(fn, ins):
    """(the value a LOAD_GLOBAL or LOAD_DEREF of fn reads now, a source for it) (_MISSING if unbound; the
    source None for a builtin, which no global shadows: rebinding builtins is not followed)."""
    if ins.opname == "LOAD_GLOBAL":
        import builtins
        if ins.argval in fn.__globals__:
            return fn.__globals__[ins.argval], ItemSource(ObjectSource(fn.__globals__), ins.argval)
        return getattr(builtins, ins.argval, _MISSING), None
    names = fn.__code__.co_freevars
    if ins.argval in names and fn.__closure__:
        cell = fn.__closure__[names.index(ins.argval)]
        try:
            return cell.cell_contents, AttrSource(ObjectSource(cell), "cell_contents")
        except ValueError:
            return _MISSING, None
    return _MISSING, None


def _is_stateless(value):
    """Modules, classes, functions and constants: what a pure forward reads from outside."""
    return isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                              int, float, bool, str, bytes, type(None), torch.dtype, torch.device)) or \
        callable(value) and type(value).__module__.split(".")[0] == "torch"


class SysModulesVariable(Variable):
    """sys.modules: membership and lookups of constant names, each guarded on its own (`'json' in
    sys.modules`, the module's identity), not the whole dict: modules imported while a graph compiles
    would change its keys between the trace and the entry's first call. Anything else breaks."""

    def __init__(self, source):
        self.source = source

    def python_type(self):
        return dict

    def method___contains__(self, tx, key):
        name = key.as_python_constant() if key.is_constant() else None
        if not isinstance(name, str):
            unsupported("`in sys.modules` with a name that is not a constant string")
        present = name in sys.modules
        tx.guards.add(3, f"({lit(name)} in {{0}}) is {present}", f"{name!r} {'in' if present else 'not in'} "
                      "sys.modules", (self.source,))
        return ConstantVariable(present)

    def getitem(self, tx, key):
        if not self.method___contains__(tx, key).value:
            raise UserError(KeyError(key.as_python_constant()))
        name = key.as_python_constant()
        return builder.wrap(tx, sys.modules[name], ItemSource(self.source, name))

    def call_method(self, tx, name, args, kwargs):
        if name == "__contains__" and len(args) == 1 and not kwargs:
            return self.method___contains__(tx, args[0])
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name == "get" and 1 <= len(args) <= 2 and not kwargs:
            if self.method___contains__(tx, args[0]).value:
                return self.getitem(tx, args[0])
            return args[1] if len(args) == 2 else ConstantVariable(None)
        unsupported(f"sys.modules.{name}()")

    def getattr(self, tx, name):
        from .base import MethodOf
        if name in ("get", "__contains__", "__getitem__"):
            return MethodOf(self, name)
        unsupported(f"sys.modules.{name}")

    def reconstruct(self, cg):
        return self.source.expr()

    def __repr__(self):
        return "sys.modules"


class PythonModuleVariable(Variable):
    def __init__(self, module, source=None):
        self.value = module
        self.source = source

    @classmethod
    def create(cls, tx, value, source):
        return cls(value, source)

    def python_type(self):
        return types.ModuleType

    def as_python_constant(self):
        return self.value

    def setattr(self, tx, name, value):
        if self.source is None:
            unsupported(f"assigning attribute {name!r} of module {self.value.__name__} (no source)")
        tx.side_effects.store_attr(self, self.value, name, value)

    def getattr(self, tx, name):
        found, pending = tx.side_effects.pending_attr(self.value, name)
        if found:
            return pending
        frozen = builder.is_frozen_module(self.value)
        try:
            value = getattr(self.value, name)
        except AttributeError:
            if not frozen:
                source = self.source if self.source is not None else ObjectSource(self.value)
                tx.guards.add(3, f"not hasattr({{0}}, {lit(name)})", None, (source,))
            raise AttributeMissing(f"module {self.value.__name__!r} has no attribute {name!r}")
        if type(self.value) is not types.ModuleType and _is_data_descriptor(_class_lookup(type(self.value), name)):
            # a property of a module subclass (torch.backends.cudnn.enabled): process state, guarded
            source = self.source if self.source is not None else ObjectSource(self.value)
            return builder.wrap(tx, value, AttrSource(source, name))
        if frozen or self.source is None:
            tx.guards.add_module_attr(self.value, name, value)
            return builder.wrap(tx, value, None)
        return builder.wrap(tx, value, AttrSource(self.source, name))

    def reconstruct(self, cg):
        return self.source.expr() if self.source is not None else cg.obj(self.value)

    def __repr__(self):
        return f"PyModule({self.value.__name__})"


class ModuleCall(Variable):
    """`super().__call__` of a module class with a __call__ of its own: nn.Module.__call__ (its forward
    hooks, then forward: `NNModuleVariable.module_call`)."""

    def __init__(self, module):
        self.module = module

    def call(self, tx, args, kwargs):
        return self.module.module_call(tx, args, kwargs)

    def __repr__(self):
        return f"{self.module!r}.__call__ (nn.Module's)"


class SuperVariable(Variable):
    def __init__(self, cls, obj):
        self.cls = cls
        self.obj = obj

    def getattr(self, tx, name):
        owner = self.obj.python_type() if not isinstance(self.obj, ClassVariable) else self.obj.cls
        mro = owner.__mro__
        start = mro.index(self.cls) + 1
        guard_mro_lookup(tx, owner, name, start)
        for klass in mro[start:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if attr is torch.nn.Module.__call__ and isinstance(self.obj, NNModuleVariable):
                    return ModuleCall(self.obj)
                if isinstance(attr, types.FunctionType):
                    return BoundMethodVariable(UserFunctionVariable(attr), self.obj)
                if isinstance(attr, classmethod):
                    return BoundMethodVariable(builder.wrap(tx, attr.__func__, None),
                                               ClassVariable(self.obj.python_type()))
                if isinstance(attr, staticmethod):
                    return builder.wrap(tx, attr.__func__, None)
                if isinstance(attr, property):
                    return builder.wrap(tx, attr.fget, None).call(tx, [self.obj], {})
                if isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
                    return SlotMethodVariable(self.obj, name, attr)
                unsupported(f"super().{name} of type {type(attr).__name__}")
        raise AttributeMissing(f"'super' object has no attribute {name!r}")


def _is_none(var):
    return isinstance(var, ConstantVariable) and var.value is None


def _string_keyed(var):
    """The items of a DictVariable of keyword arguments, as {name: Variable}."""
    if not all(isinstance(k, str) for k in var.items):
        unsupported("keyword arguments with keys that are not strings")
    return dict(var.items)


# bound once importable (builder imports this module): read at call time, without an import statement on
# each attribute read
from . import builder  # noqa: E402
