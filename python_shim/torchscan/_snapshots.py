"""Snapshots of a layer call's inputs and outputs, taken in crawl_module's
hooks, and the metadata (metadata.describe's objects) built from them when
the report is built (Note [Input snapshots])."""

from __future__ import annotations

from typing import Optional

import torch

from torchscan._modules import safe_text
from torchscan.metadata import _device_name, _dtype_name, describe


def _described_inputs(args: tuple, kwargs: dict):
    """The inputs metadata of one module call (a forward hook's args and kwargs)."""
    if not kwargs:
        return describe(tuple(args))
    return {"kind": "call", "args": describe(tuple(args)), "kwargs": describe(kwargs)}


# Note [Input snapshots]
# A layer call's inputs are described as metadata.describe gives them at call
# time, but building those dicts in the hook costs more than the rest of its
# work: the hook takes a snapshot of what describe reads, and the report
# builds the dicts from it (_described_snapshot). A snapshot of an argument
# is (shape, dtype, device, requires_grad), a plain tuple, for a plain dense
# tensor (torch.Size is immutable; no tensor is kept); the value itself for
# None, bool, int, float and str (immutable); _Items for a plain tuple of
# such arguments; _Object(type) for what describe names by its type alone.
# Anything else (tensor subclasses, nested tensors, lists and dicts, which
# may change after the call, subclasses of the types above) is not
# snapshotted: the whole call is described at once.


class _Items(tuple):
    """The snapshot of a tuple argument: its items' snapshots."""


class _Object(tuple):
    """The snapshot of an argument describe names by its type alone: (type,)."""


class _Call(tuple):
    """The snapshot of a call with keyword arguments: (its positional
    arguments' snapshots, ((keyword, snapshot), ...))."""


_NOT_SNAPSHOTTED = object()
_DESCRIBED_TYPES = (torch.Tensor, str, int, float, tuple, list, dict)  # isinstance checks of describe


def _snapshot(value):
    """A value's snapshot (Note [Input snapshots]), or _NOT_SNAPSHOTTED."""
    t = type(value)
    if t is torch.Tensor:
        return _NOT_SNAPSHOTTED if value.is_nested else (value.shape, value.dtype, value.device, value.requires_grad)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    if t is tuple:
        items = _snapshots(value)
        return _NOT_SNAPSHOTTED if items is None else _Items(items)
    if isinstance(value, _DESCRIBED_TYPES):
        return _NOT_SNAPSHOTTED
    return _Object((t,))


def _snapshots(args: tuple) -> Optional[list]:
    """Each argument's snapshot, taken now (Note [Input snapshots]), or None
    where one cannot be taken (describe them now)."""
    out = []
    for a in args:
        item = _snapshot(a)
        if item is _NOT_SNAPSHOTTED:
            return None
        out.append(item)
    return out


def _call_snapshot(args: tuple, kwargs: dict) -> Optional[_Call]:
    """The snapshot of a call with keyword arguments, or None (describe it now)."""
    positional = _snapshots(args)
    if positional is None:
        return None
    keywords = []
    for k, v in kwargs.items():
        item = _snapshot(v)
        if item is _NOT_SNAPSHOTTED or type(k) is not str:
            return None
        keywords.append((k, item))
    return _Call((positional, tuple(keywords)))


def _described_snapshot(snapshot):
    """What describe gave for the value when the snapshot was taken."""
    t = type(snapshot)
    if t is tuple:
        return _tensor_metadata(*snapshot)
    if t is _Items:
        return {"kind": "tuple", "items": [_described_snapshot(s) for s in snapshot]}
    if t is str:
        return safe_text(snapshot)
    if t is _Object:
        return {"kind": "object", "type": safe_text(snapshot[0].__qualname__)}
    return snapshot


def _described_call(snapshots):
    """What _described_inputs gave for the call when its snapshot was taken."""
    if type(snapshots) is _Call:
        positional, keywords = snapshots
        return {"kind": "call", "args": {"kind": "tuple", "items": [_described_snapshot(s) for s in positional]},
                "kwargs": {"kind": "mapping", "items": {safe_text(k): _described_snapshot(s) for k, s in keywords}}}
    return {"kind": "tuple", "items": [_tensor_metadata(*s) if type(s) is tuple else _described_snapshot(s)
                                       for s in snapshots]}


class _TupleOutput(tuple):
    """An output snapshot of a tuple of plain dense tensors and Nones (what
    attention layers return: the output and None for the weights), each
    item a snapshot or None; described when the report is built."""


def _tuple_snapshot(output) -> Optional[_TupleOutput]:
    if type(output) is not tuple:
        return None
    items: list = []
    for x in output:
        if x is None:
            items.append(None)
        elif type(x) is torch.Tensor and not x.is_nested:
            items.append((x.shape, x.dtype, x.device, x.requires_grad))
        else:
            return None
    return _TupleOutput(items)


_TENSOR_NAMES: dict = {}  # (dtype, device) -> their names (few pairs in a process)


def _tensor_metadata(shape, dtype, device, requires_grad) -> dict:
    """What metadata.describe gives for a dense tensor with this snapshot
    (test_crawl_fast_paths checks the two agree)."""
    n = _TENSOR_NAMES.get((dtype, device))
    if n is None:
        n = _TENSOR_NAMES[(dtype, device)] = (_dtype_name(dtype), _device_name(device))
    return {"kind": "tensor", "shape": list(shape), "dtype": n[0], "device": n[1], "requires_grad": requires_grad}
