"""Value-free metadata of call inputs and outputs (report schema "Input
metadata"): structure, scalars and tensor shape/dtype/device/requires_grad;
never tensor contents, filenames or object representations."""

from __future__ import annotations

from typing import Any

import torch

from torchscan._modules import safe_text


# dtype and device names, memoized: crawl_module describes every layer call's
# inputs and output, and str() of a dtype or device costs more than the rest
# of a tensor's entry.
_DTYPE_NAMES: dict = {}
_DEVICE_NAMES: dict = {}


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _device_name(device) -> str:
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return {"kind": "nested_tensor", "dtype": _dtype_name(value.dtype),
                    "device": _device_name(value.device), "requires_grad": value.requires_grad}
        return {"kind": "tensor", "shape": list(value.shape), "dtype": _dtype_name(value.dtype),
                "device": _device_name(value.device), "requires_grad": value.requires_grad}
    if isinstance(value, str):
        return safe_text(value)  # JSON needs valid UTF-8
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, tuple):
        return {"kind": "tuple", "items": [describe(v) for v in value]}
    if isinstance(value, list):
        return {"kind": "list", "items": [describe(v) for v in value]}
    if isinstance(value, dict):
        return {"kind": "mapping", "items": {safe_text(str(k)): describe(v) for k, v in value.items()}}
    # Anything else: its type only (a repr could leak private values).
    return {"kind": "object", "type": safe_text(type(value).__qualname__)}
