"""Value-free metadata of call inputs and outputs (report schema "Input
metadata"): structure, scalars and tensor shape/dtype/device/requires_grad;
never tensor contents, filenames or object representations."""

from __future__ import annotations

from typing import Any

import torch

from torchscan._modules import safe_text


def describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return {"kind": "nested_tensor", "dtype": str(value.dtype).replace("torch.", ""),
                    "device": str(value.device), "requires_grad": value.requires_grad}
        return {"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                "device": str(value.device), "requires_grad": value.requires_grad}
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
