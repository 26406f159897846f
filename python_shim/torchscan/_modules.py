"""Module labels for the operator view's `by_module`.

Labels follow torch.utils.module_tracker.ModuleTracker, so `by_module` keys
read like FlopCounterMode's: the first module seen is named by its class
("Sequential"), its children by attribute path ("Sequential.0"), and "Global"
is always present. A call counts for every label active while it runs,
forward and backward. Built on public hooks only.
"""

from __future__ import annotations

import sys
import threading
import weakref
from threading import get_ident
from typing import Literal

import torch
import torch.nn as nn
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten
from torch.utils.hooks import RemovableHandle

from torchscan._library import Session


class ModuleLabels:
    """The module hooks of one scan(modules=True). They are process-global,
    so they act only on the threads the scan covers: its own thread
    (threads="current") or every thread (threads="all", each with its own
    active set), and on none once removed; other threads' module calls pass
    through them untouched."""

    def __init__(self, session, all_threads: bool = False):
        self._session = session
        self._all = all_threads
        self._installed = False
        # Per covered thread: label -> depth of entries (re-entrant modules).
        # threads="current": the scanning thread only.
        self._active_by_thread: dict[int, dict[str, int]] = {}
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._naming = threading.Lock()
        self._handles: list = []
        self._reset_queued = False

    def _active(self):
        """This thread's active set, or None when the scan does not cover
        this thread (or is over)."""
        if not self._installed:
            return None
        active = self._active_by_thread.get(get_ident())
        if active is None and self._all:  # a thread's first module call in a threads="all" scan
            active = self._active_by_thread[get_ident()] = {}
        return active

    # -- naming (ModuleTracker's scheme)
    def _name(self, mod) -> str:
        name = self._names.get(mod)
        if name is None:
            # Under the lock: with threads="all", another thread must not
            # name a child as a root while this one names the tree.
            with self._naming:
                name = self._names.get(mod)
                if name is None:
                    name = self._names[mod] = safe_text(type(mod).__name__)
                    self._name_children(mod)
        return name

    def _name_children(self, mod) -> None:
        # ModuleTracker's recursive pre-order (a shared module keeps the first
        # name it is reached by), with an explicit stack so that chains deeper
        # than Python's recursion limit are named too.
        parents, pending = [mod], [iter(mod.named_children())]
        while pending:
            for child_name, child in pending[-1]:
                if child not in self._names:
                    self._names[child] = f"{self._names[parents[-1]]}.{safe_text(child_name)}"
                    parents.append(child)
                    pending.append(iter(child.named_children()))
                    break
            else:
                parents.pop()
                pending.pop()

    # -- the active set, mirrored into the C++ session one change at a time
    # (restating the whole set per module call costs O(depth) per call)
    def _reset(self) -> None:
        active = self._active()
        if active is None:
            return
        active.clear()
        self._session.set_module_labels(["Global"])

    def _enter(self, active: dict, label: str) -> None:
        depth = active.get(label, 0)
        active[label] = depth + 1
        if depth == 0:
            self._session.enter_module_label(label)

    def _exit(self, label: str, active=None) -> None:
        if active is None:
            active = self._active()
            if active is None:
                return
        depth = active.get(label, 0)
        if depth > 1:
            active[label] = depth - 1
        elif depth == 1:
            del active[label]
            self._session.exit_module_label(label)

    def _backward_enter(self, label: str) -> None:
        active = self._active()
        if active is None:
            return
        if not self._reset_queued:
            # After the backward pass nothing is running: back to "Global".
            def reset():
                self._reset_queued = False
                self._reset()

            torch.autograd.Variable._execution_engine.queue_callback(reset)
            self._reset_queued = True
        self._enter(active, label)

    @staticmethod
    def _grad_tensors(values):
        flat, _ = tree_flatten(values)
        return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]

    def _pre_hook(self, mod, args):
        active = self._active()
        if active is None:  # a thread the scan does not cover
            return
        label = self._name(mod)
        self._enter(active, label)
        tensors = self._grad_tensors(args)
        if tensors:  # backward leaves the module when its inputs' grads are done
            self._handles.append(register_multi_grad_hook(tensors, lambda *_: self._exit(label)))

    def _post_hook(self, mod, args, output):
        active = self._active()
        if active is None:  # a thread the scan does not cover
            return
        label = self._name(mod)
        self._exit(label, active)
        tensors = self._grad_tensors(output)
        if tensors:  # backward enters the module when its outputs' grads arrive
            self._handles.append(register_multi_grad_hook(tensors, lambda *_: self._backward_enter(label)))

    def install(self) -> None:
        """Installs the global module hooks. If this raises (Ctrl-C included),
        call remove(): whatever was installed is in self._handles."""
        self._active_by_thread[get_ident()] = {}
        self._installed = True
        self._reset()
        self._handles.append(register_module_forward_pre_hook(self._pre_hook))
        self._handles.append(register_module_forward_hook(self._post_hook, always_call=True))

    def remove(self) -> None:
        # First, with no call before it: hooks an interrupted removal leaves
        # behind do nothing from here on.
        self._installed = False
        remove_hooks(self._handles)


class ForwardHooks:
    """pre(module, args, kwargs) before and post(module, args, kwargs, output)
    after every forward call of the modules given to add(), also when the
    forward raises: on each module, what register_forward_pre_hook(pre,
    with_kwargs=True) and register_forward_hook(post, with_kwargs=True,
    always_call=True) do, at a fraction of their cost (crawl_module hooks
    every module: on MobileNetV3-Small's 209, the two registrations and
    their RemovableHandles took about five times as long as writing the
    entries).

    The entries are written into the module's hook dicts directly, under two
    ids taken from RemovableHandle's counter (so no other hook shares them),
    once a probe module has shown that the two public calls write exactly
    those entries; otherwise (another torch) through the public calls.
    remove() takes every entry out again, also after an interrupted add()."""

    __slots__ = ("_pre", "_post", "_ids", "_modules", "_handles")

    def __init__(self, pre, post):
        self._pre, self._post = pre, post
        self._ids = _hook_ids() if _direct_hook_entries() else None
        self._modules: list = []  # modules given entries (the last one possibly in part)
        self._handles: list = []  # public-call handles, when not direct

    def add(self, module: nn.Module) -> None:
        if self._ids is None:
            self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post, with_kwargs=True, always_call=True))
            return
        pre_id, post_id = self._ids
        self._modules.append(module)  # first: remove() cleans up a partial add
        # Each hook's flags before the hook (Note [Hooks other threads call]).
        module._forward_pre_hooks_with_kwargs[pre_id] = True
        module._forward_pre_hooks[pre_id] = self._pre
        module._forward_hooks_with_kwargs[post_id] = True
        module._forward_hooks_always_called[post_id] = True
        module._forward_hooks[post_id] = self._post

    def remove(self) -> None:
        """Removes every entry; an interrupt (Ctrl-C) during one module's
        removal does not leave the others' in place."""
        try:
            remove_hooks(self._handles)
            if self._ids is not None:
                while self._modules:
                    _remove_entries(self._modules[-1], self._ids)
                    self._modules.pop()
        finally:
            for module in self._modules:
                _remove_entries(module, self._ids)
            self._modules.clear()


_HOOK_DICTS = (("_forward_pre_hooks", 0), ("_forward_pre_hooks_with_kwargs", 0), ("_forward_hooks", 1),
               ("_forward_hooks_with_kwargs", 1), ("_forward_hooks_always_called", 1))
_DIRECT: list = []  # [bool], once probed


def _hook_ids() -> tuple:
    first = RemovableHandle.next_id
    RemovableHandle.next_id = first + 2
    return first, first + 1


def _remove_entries(module, ids) -> None:
    pre_id, post_id = ids
    # Each hook before its flags (Note [Hooks other threads call]).
    module._forward_pre_hooks.pop(pre_id, None)
    module._forward_pre_hooks_with_kwargs.pop(pre_id, None)
    module._forward_hooks.pop(post_id, None)
    module._forward_hooks_with_kwargs.pop(post_id, None)
    module._forward_hooks_always_called.pop(post_id, None)


# Note [Hooks other threads call]
# A module's hooks run for every thread's forward of it, and another thread
# may run one while a crawl adds or removes its hooks. PyTorch reads a hook
# and its with_kwargs flag from two dicts at two moments: a thread that took
# the hooks just before they were removed, or saw a hook before its flag
# (PyTorch's own registration writes the hook first), calls it without the
# kwargs: pre(module, args) and post(module, args, output). So the flags
# are written before their hook and removed after it, and every hook
# TorchScan adds takes both forms (its kwargs parameter defaults to None and
# its output parameter too) and returns at once on a thread it does not
# scan, the only one that can call it without them.


def _direct_hook_entries() -> bool:
    """Whether the two public registrations write exactly the entries
    ForwardHooks.add writes (checked once, on a probe module)."""
    if not _DIRECT:
        def pre(*_):
            return None

        def post(*_):
            return None

        probe = nn.Module()
        before = {k: dict(v) if isinstance(v, dict) else v for k, v in vars(probe).items()}
        h_pre = probe.register_forward_pre_hook(pre, with_kwargs=True)
        h_post = probe.register_forward_hook(post, with_kwargs=True, always_call=True)
        after = {k: dict(v) if isinstance(v, dict) else v for k, v in vars(probe).items()}
        expected = {name: {(h_pre.id, h_post.id)[which]: (pre, post)[which] if name in ("_forward_pre_hooks",
                                                                                        "_forward_hooks") else True}
                    for name, which in _HOOK_DICTS}
        changed = {k: {i: x for i, x in v.items() if i not in before.get(k, {})} if isinstance(v, dict) else v
                   for k, v in after.items() if v != before.get(k)}
        _DIRECT.append(changed == expected)
    return _DIRECT[0]


def remove_hooks(handles: list) -> None:
    """Removes every hook handle in `handles` and empties it. An interrupt
    (Ctrl-C) during one removal does not leave the others installed: they
    are removed before it propagates."""
    try:
        while handles:
            handles[-1].remove()  # RemovableHandle.remove is idempotent
            handles.pop()
    finally:
        for h in handles:
            h.remove()
        handles.clear()


class AnalysisPause:
    """The state one crawl's module hooks read, for one crawl (so crawls in
    other threads never see it): `thread`, the scanning thread (hooks do
    nothing on any other, and nothing once it is 0: the crawl is over), and
    `depth`, how deep TorchScan's own work inside the crawl (custom handlers,
    the token analysis) is nested. `with pause:` around that work pauses the
    session's recording and makes the hooks skip module calls made meanwhile,
    so a handler that calls a module adds no layer call, trace slice or token
    row.

    Interrupt-safe: the pause is one library call that records its owner, the
    crawl's scan; one that an interrupt (Ctrl-C) keeps from being resumed ends
    when that scan stops. `depth` is this crawl's alone, so a stale value
    dies with the crawl."""

    __slots__ = ("depth", "thread", "_pause", "_resume")

    def __init__(self):
        self.depth = 0
        self.thread = get_ident()
        self._pause, self._resume = _pause_calls()

    def __enter__(self):
        self.depth += 1
        self._pause()
        return self

    def __exit__(self, *exc) -> Literal[False]:
        self._resume()
        self.depth -= 1
        return False


def _pause_calls() -> tuple:
    """Pause and resume as the library's C entry points (one plain C call
    each; the custom class's static methods cost microseconds, and the token
    analysis pauses around every attention call), else as those methods."""
    from torchscan._library import entry_point

    pause = entry_point("torchscan_pause_thread_recording")
    resume = entry_point("torchscan_resume_thread_recording")
    if pause is None or resume is None:
        return Session.pause_thread_recording, Session.resume_thread_recording
    pause.restype = resume.restype = None
    return pause, resume


def forward_raised(output) -> bool:
    """In a forward hook that runs also when the forward raises
    (always_call): whether it raised. PyTorch then passes output None with
    the exception being handled; sys.exc_info() alone would also be set by an
    exception the caller is handling around a forward that returned."""
    return output is None and sys.exc_info()[0] is not None


def safe_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates (which str allows and UTF-8 and
    JSON do not) become backslash escapes such as \\udc80."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
