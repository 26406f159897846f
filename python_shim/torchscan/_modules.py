"""Module labels for the operator view's `by_module`.

Labels follow torch.utils.module_tracker.ModuleTracker, so `by_module` keys
read like FlopCounterMode's: the first module seen is named by its class
("Sequential"), its children by attribute path ("Sequential.0"), and "Global"
is always present. A call counts for every label active while it runs,
forward and backward. Built on public hooks only.
"""

from __future__ import annotations

import weakref

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten


class ModuleLabels:
    def __init__(self, session):
        self._session = session
        self._active: dict[str, int] = {}  # label -> depth of entries (re-entrant modules)
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._handles: list = []
        self._reset_queued = False

    # -- naming (ModuleTracker's scheme)
    def _name(self, mod) -> str:
        if mod not in self._names:
            self._names[mod] = type(mod).__name__
            self._name_children(mod)
        return self._names[mod]

    def _name_children(self, mod) -> None:
        for child_name, child in mod.named_children():
            if child not in self._names:
                self._names[child] = f"{self._names[mod]}.{child_name}"
                self._name_children(child)

    # -- the active set, mirrored into the C++ session
    def _publish(self) -> None:
        self._session.set_module_labels(["Global", *self._active])

    def _enter(self, label: str) -> None:
        self._active[label] = self._active.get(label, 0) + 1
        self._publish()

    def _exit(self, label: str) -> None:
        depth = self._active.get(label, 0)
        if depth <= 1:
            self._active.pop(label, None)
        else:
            self._active[label] = depth - 1
        self._publish()

    def _backward_enter(self, label: str) -> None:
        if not self._reset_queued:
            # After the backward pass nothing is running: back to "Global".
            def reset():
                self._active.clear()
                self._reset_queued = False
                self._publish()

            torch.autograd.Variable._execution_engine.queue_callback(reset)
            self._reset_queued = True
        self._enter(label)

    @staticmethod
    def _grad_tensors(values):
        flat, _ = tree_flatten(values)
        return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]

    def _pre_hook(self, mod, args):
        label = self._name(mod)
        self._enter(label)
        tensors = self._grad_tensors(args)
        if tensors:  # backward leaves the module when its inputs' grads are done
            self._handles.append(register_multi_grad_hook(tensors, lambda *_: self._exit(label)))

    def _post_hook(self, mod, args, output):
        label = self._name(mod)
        self._exit(label)
        tensors = self._grad_tensors(output)
        if tensors:  # backward enters the module when its outputs' grads arrive
            self._handles.append(register_multi_grad_hook(tensors, lambda *_: self._backward_enter(label)))

    def install(self) -> None:
        self._publish()
        self._handles.append(register_module_forward_pre_hook(self._pre_hook))
        self._handles.append(register_module_forward_hook(self._post_hook, always_call=True))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
