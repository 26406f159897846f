"""Activation checkpointing inside a scan.

Non-reentrant checkpointing stops recomputation early by raising its own
exception from the hook that saves a recomputed tensor, once the last tensor
backward needs exists. That is PyTorch's control flow, not a failure. The
engine is told just before the exception unwinds the open calls, with the
tensor being saved where the recomputation hook can be wrapped: whether the
innermost call ran its kernel follows from it (Note [Calls a control-flow stop
unwinds] in torchscan_dispatch/core/recorder.cc). Without it that call's work
is unknown, and said so.

Selective checkpointing recomputes under a dispatch mode that answers some
operators from the results it saved: the engine is told of each such answer,
and the call adds nothing of its own.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import torch.utils.checkpoint as _checkpoint

from torchscan._library import Session


_lock = threading.Lock()  # scans start in any thread: one marking


def prepare() -> None:
    """Called as a scan starts; marks checkpoint's stop signal once."""
    stop = getattr(_checkpoint, "_StopRecomputationError", None)
    if stop is None or getattr(stop, "_torchscan_noted", False):
        return
    with _lock:
        if not getattr(stop, "_torchscan_noted", False):
            _note(stop, getattr(_checkpoint, "_recomputation_hook", None))


def _note(stop, hook) -> None:
    init = stop.__init__

    def noted_init(self, *args, **kwargs):
        Session.note_control_flow_stop()
        init(self, *args, **kwargs)

    stop.__init__ = noted_init
    if isinstance(hook, type):
        _note_saved(hook, stop)
    cached = getattr(_checkpoint, "_CachedTorchDispatchMode", None)
    if isinstance(cached, type):
        _note_cached(cached, getattr(_checkpoint, "_sac_storage_key", None))
    stop._torchscan_noted = True


def _note_saved(hook: Any, stop) -> None:
    """Wraps the pack hook of each recomputation hook object (a
    saved_tensors_hooks, which keeps it as `pack_hook`), so that the stop is
    noted again with the tensor it was saving."""
    init = hook.__init__

    def noted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        pack = getattr(self, "pack_hook", None)
        if not callable(pack):
            return

        def pack_hook(x):
            try:
                return pack(x)
            except stop:
                Session.note_control_flow_stop_saving(x)
                raise

        self.pack_hook = pack_hook

    hook.__init__ = noted_init


def _note_cached(mode: Any, key_of: Any) -> None:
    """Wraps the dispatch of selective checkpointing's recomputation mode,
    which answers the operators whose results it saved from its storage
    (Note [Calls a cache answers] in torchscan_dispatch/core/recorder.cc):
    an answer taken from the storage leaves one entry fewer there. Entries
    are kept per operator (and per call site where `key_of` exists), as a
    list that is popped or as a dict whose answered entries are replaced by
    a marker. Storage kept any other way cannot be watched: each call the
    mode dispatches is then told as an answer of unknown origin, and counts
    as unknown. A subclass's own dispatch (one that may not call the
    mode's) is wrapped the same way, whether the subclass exists already or
    is defined later."""
    consumed = getattr(_checkpoint, "_CONSUMED", None)
    recompute = getattr(_checkpoint, "_RECOMPUTE", None)

    def available(storage, key) -> Optional[int]:
        """Entries left for `key`; None for a layout not known here."""
        if not isinstance(storage, dict):
            return None
        entries = storage.get(key)  # (get: a defaultdict adds no entry)
        if entries is None:
            return 0
        if isinstance(entries, dict):
            return sum(1 for e in entries.values() if e is not consumed and e is not recompute)
        return len(entries) if isinstance(entries, list) else None

    def noted(dispatch):
        def noted_dispatch(self, func, types, args=(), kwargs=None):
            storage = getattr(self, "storage", None)
            try:
                key = key_of(func, args) if key_of is not None else func
                before = available(storage, key)
            except Exception:  # noqa: BLE001 - an unexpected layout: not watched
                before = None
            out = dispatch(self, func, types, args, kwargs)
            after = available(storage, key) if before is not None else None
            if after is None:
                # Whether the answer came from the storage is not known: a
                # name no operator has makes the open call's work unknown.
                Session.note_answered_from_cache("")
            elif after < before:
                schema = func._schema
                Session.note_answered_from_cache(
                    schema.name + (f".{schema.overload_name}" if schema.overload_name else ""))
            return out

        noted_dispatch._torchscan_noted = True  # type: ignore[attr-defined]
        return noted_dispatch

    def watch(cls) -> None:
        own = cls.__dict__.get("__torch_dispatch__")
        if callable(own) and not getattr(own, "_torchscan_noted", False):
            cls.__torch_dispatch__ = noted(own)

    def init_subclass(cls, **kwargs):
        super(mode, cls).__init_subclass__(**kwargs)
        watch(cls)

    pending = [mode]
    while pending:
        cls = pending.pop()
        watch(cls)
        pending += cls.__subclasses__()
    mode.__init_subclass__ = classmethod(init_subclass)
