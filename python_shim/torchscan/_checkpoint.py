"""Activation checkpointing inside a scan.

Non-reentrant checkpointing stops recomputation early by raising its own
exception from the hook that saves a recomputed tensor, once the last tensor
backward needs exists. That is PyTorch's control flow, not a failure. The
engine is told just before the exception unwinds the open calls, with the
tensor being saved where the recomputation hook can be wrapped: whether the
innermost call ran its kernel follows from it (Note [Calls a control-flow stop
unwinds] in torchscan_dispatch/core/recorder.cc). Without it that call's work
is unknown, and said so.
"""

from __future__ import annotations

import threading
from typing import Any

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
