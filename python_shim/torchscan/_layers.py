"""crawl_module's layer rows, read from the engine's one layer-row writer
(reports/layers.cc, Note [One layer-row writer]) rather than rebuilt here,
their parameter figures, and the memory report's per-call figures."""

from __future__ import annotations

import ctypes
import json
import pickle
from typing import Dict

import torch
import torch.nn as nn

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


# Fewer layer calls than this: the streams take less time to write than a
# thread takes to start.
PREPARE_MIN_CALLS = 24


def prepare(handle: int, which: int) -> bool:
    """Starts the library writing the stopped scan's streams on a thread of
    its own while Python builds its part of the report (Note [Reports
    prepared on a second thread] in integrations/bindings.cc): which bit 0
    its FlopReport and bit 1 its module report (_native_reports' `which`),
    bit 2 its rows (_module_rows). _module_rows and _native_reports then
    take them. False where it was not started (they write them then)."""
    from torchscan._library import entry_point

    fn = entry_point("torchscan_reports_prepare") if handle else None
    return fn is not None and fn(handle, which) == 0


def _native_reports(handle: int, which: int = 3):
    """Reports of the stopped scan whose native handle is `handle`: which=1
    its FlopReport, 2 its module report, 3 both (a list in that order): the
    objects json.loads gives for session.flop_report() and
    session.module_report(), loaded from the library's pickle stream
    (torchscan_reports_pickle). None where that entry point is missing or
    refuses (the caller then reads the texts, which say why)."""
    from torchscan._library import entry_point

    fn = entry_point("torchscan_reports_pickle") if handle else None
    if fn is None:
        return None
    data, size = ctypes.c_void_p(), ctypes.c_int64()
    if fn(handle, which, ctypes.byref(data), ctypes.byref(size)) != 0 or not data.value:
        return None
    return pickle.loads(ctypes.string_at(data.value, size.value))


class Parameters:
    """Parameter and buffer figures of a module tree, from one pass over
    every module's own tensors: each module's (each tensor once per module:
    its layer rows' figures) and the tree's (each tensor once: the totals,
    where tied weights count once)."""

    def __init__(self, modules: list) -> None:
        # One loop with the sums in locals: a crawl builds this for every
        # module of the tree (parameters(recurse=False) and buffers(recurse=
        # False) are read directly: their generators cost more than the sums).
        by_module: Dict[nn.Module, dict] = {}
        tree: Dict[int, torch.Tensor] = {}  # id -> the tree's distinct parameters
        tree_buffers: Dict[int, torch.Tensor] = {}
        registered = 0  # parameter registrations (more than distinct parameters: some are tied)
        parameters = trainable_parameters = parameter_bytes = buffer_elements = buffer_bytes = 0
        for m in modules:
            params, buffers = m._parameters, m._buffers
            if not params and not buffers:  # most modules of a network (activations, containers)
                by_module[m] = _NO_PARAMETERS
                continue
            count = trainable = nbytes = 0
            seen = set()  # a tensor registered twice in one module counts once for it
            for p in params.values():
                if p is None:
                    continue
                registered += 1
                key = id(p)
                if key in seen:
                    continue
                seen.add(key)
                n = p.numel()
                size = n * p.element_size()
                count += n
                nbytes += size
                grad = p.requires_grad
                if grad:
                    trainable += n
                if key not in tree:
                    tree[key] = p
                    parameters += n
                    parameter_bytes += size
                    if grad:
                        trainable_parameters += n
            own_elements = own_bytes = 0
            seen.clear()
            for b in buffers.values():
                if b is None:
                    continue
                key = id(b)
                if key in seen:
                    continue
                seen.add(key)
                n = b.numel()
                size = n * b.element_size()
                own_elements += n
                own_bytes += size
                if key not in tree_buffers:
                    tree_buffers[key] = b
                    buffer_elements += n
                    buffer_bytes += size
            by_module[m] = {"parameters": count, "trainable_parameters": trainable, "parameter_bytes": nbytes,
                            "buffers": own_elements, "buffer_bytes": own_bytes}
        self.by_module = by_module
        self.parameters = tree
        self.buffers = tree_buffers
        self.registered = registered
        self.totals = {"parameters": parameters, "trainable_parameters": trainable_parameters,
                       "frozen_parameters": parameters - trainable_parameters, "parameter_bytes": parameter_bytes,
                       "buffer_elements": buffer_elements, "buffer_bytes": buffer_bytes}


# Read only (its items are copied into each row).
_NO_PARAMETERS = {"parameters": 0, "trainable_parameters": 0, "parameter_bytes": 0, "buffers": 0, "buffer_bytes": 0}
