"""crawl_module's layer rows, read from the engine's one layer-row writer
(reports/layers.cc, Note [One layer-row writer]) rather than rebuilt here,
and the memory report's per-call figures."""

from __future__ import annotations

import ctypes
import json
import pickle

_FIELDS = ("receptive_field", "effective_stride", "effective_padding")


def _memory_metrics(session, layers: list) -> dict:
    """Sets peak_memory and allocated_bytes of every layer (the memory
    report's per-call figures, in the layers' order) and returns the scan's
    memory report without them."""
    report = json.loads(session.memory_report())
    for layer, figures in zip(layers, report.pop("layers")):
        layer["metrics"].update(figures)
    return report


def _native_rows():
    """The library's C entry point torchscan_module_layers_pickle
    (integrations/bindings.cc) through ctypes, or None (the rows' JSON text
    instead)."""
    from torchscan._library import entry_point

    return entry_point("torchscan_module_layers_pickle")


def _module_rows(session, handle: int = 0) -> list:
    """The module analysis's rows (no operator view) as the engine writes
    them: loaded from its pickle stream when the session has a native
    handle (Note [Row encodings] in reports/row_encoders.h: the same
    objects as the JSON text gives, in half the time), else from the JSON
    text. The stream is the library's own output, made in this process."""
    fn = _native_rows() if handle else None
    if fn is not None:
        data, size = ctypes.c_void_p(), ctypes.c_int64()
        if fn(handle, ctypes.byref(data), ctypes.byref(size)) == 0 and data.value:
            return pickle.loads(ctypes.string_at(data.value, size.value))
    return json.loads(session.module_layers())
