"""Activation checkpointing inside a scan.

Non-reentrant checkpointing stops recomputation early by raising its own
exception from the hook that saves a recomputed tensor, once the last tensor
backward needs exists. That is PyTorch's control flow, not a failure: the calls
it unwinds have done their work (Recorder::ControlFlowStop says why), and are
counted as finished. The engine is told just before the exception unwinds them.
"""

from __future__ import annotations

import threading

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
            _note(stop)


def _note(stop) -> None:
    init = stop.__init__

    def noted_init(self, *args, **kwargs):
        Session.note_control_flow_stop()
        init(self, *args, **kwargs)

    stop.__init__ = noted_init
    stop._torchscan_noted = True
