"""crawl_module's layer rows: the session's rows (Session::LayerRows,
flattened by the binding) as the layers' JSON writes them, and the memory
report's per-call figures added to them."""

from __future__ import annotations

import json
import math


def _memory_metrics(session, layers: list) -> dict:
    """Adds peak_memory and allocated_bytes to every layer (the memory
    report's per-call figures, in Session::LayerRows order, as the layers)
    and returns the scan's memory report without them."""
    report = json.loads(session.memory_report())
    for layer, figures in zip(layers, report.pop("layers")):
        layer["metrics"].update(figures)
    return report


def _number(v: float):
    """A receptive-field value as the layers' JSON holds it (reports/layers.cc,
    Number): whole values as ints, others as floats; JSON has no NaN or
    infinity (null)."""
    if not math.isfinite(v):
        return None
    return int(v) if abs(v) < 9e15 and v.is_integer() else v


_STATUS = ("complete", "partial", "unavailable")  # MetricStatus order
_FIELDS = ("receptive_field", "effective_stride", "effective_padding")


def _counts(scope: str, s1: int, c1: int, s2: int, c2: int, s3: int, c3: int) -> dict:
    """The module view's three MetricResults of a row (status codes in MetricStatus order)."""
    return {
        "module_flops": {"known_value": None if s1 == 2 else c1, "method": "module_formulas", "scope": scope,
                         "status": _STATUS[s1], "unit": "FLOPs", "value": c1 if s1 == 0 else None},
        "macs": {"known_value": None if s2 == 2 else c2, "method": "module_formulas", "scope": scope,
                 "status": _STATUS[s2], "unit": "MACs", "value": c2 if s2 == 0 else None},
        "dmas": {"known_value": None if s3 == 2 else c3, "method": "module_formulas", "scope": scope,
                 "status": _STATUS[s3], "unit": "accesses", "value": c3 if s3 == 0 else None},
    }


def _plane_fields(values: dict, scope: str, flat) -> None:
    """Adds the three complete fields of a row with two spatial axes to
    `values`; `flat` is (dim0, dim1, then value, axis0, axis1 per field)."""
    d0, d1, v0, a0, b0, v1, a1, b1, v2, a2, b2 = flat
    for name, v, a, b in zip(_FIELDS, (v0, v1, v2), (a0, a1, a2), (b0, b1, b2)):
        values[name] = {"axes": [{"dim": d0, "value": a}, {"dim": d1, "value": b}], "known_value": v,
                        "method": "data_flow", "scope": scope, "status": "complete", "unit": "positions", "value": v}


def _layer_rows(session, scope: str, metrics: bool) -> list:
    """(path, call_index, depth, failed, metrics) per layer call, in scope
    order: the session's layer rows (Session::LayerRows, flattened by the
    binding: FlatLayerRows in torchscan_dispatch/integrations/bindings.cc says how), with
    the module view's and the receptive field's MetricResults as the layers'
    JSON (Session::LayersJson) writes them, keys in its (sorted) order.
    metrics False: None instead of the metrics."""
    texts, ints, reals = session.layer_rows()
    rows: list = []
    t = i = r = 0
    end = len(ints)
    while i < end:
        call_index, depth, failed, s1, c1, s2, c2, s3, c3, f0, f1, f2, not_applicable, n, whole = ints[i:i + 15]
        if n == 2 and whole and metrics and not (f0 or f1 or f2) and c1 >= 0 and c2 >= 0 and c3 >= 0:
            # The common case (two spatial axes, every field complete, whole
            # numbers, counts below 2^63): its dims and numbers in one slice.
            values = _counts(scope, s1, c1, s2, c2, s3, c3)
            _plane_fields(values, scope, ints[i + 15:i + 26])
            i += 26
            rows.append((texts[t], call_index, depth, bool(failed), values))
            t += 1
            continue
        i += 15
        path = texts[t]
        t += 1
        if c1 < 0 or c2 < 0 or c3 < 0:  # past 2^63 - 1: their digits, in metric order
            if c1 < 0:
                c1, t = int(texts[t]), t + 1
            if c2 < 0:
                c2, t = int(texts[t]), t + 1
            if c3 < 0:
                c3, t = int(texts[t]), t + 1
        dims = ints[i:i + n]
        i += n
        k = (f0 == 0) + (f1 == 0) + (f2 == 0) + 3 * n  # the row's numbers
        if whole:
            numbers = ints[i:i + k]
            i += k
        else:
            numbers = [_number(v) for v in reals[r:r + k]]
            r += k
        if not metrics:
            t += (f0 == 2) + (f1 == 2) + (f2 == 2)  # the reasons
            rows.append((path, call_index, depth, bool(failed), None))
            continue
        values = _counts(scope, s1, c1, s2, c2, s3, c3)
        if n == 2 and not (f0 or f1 or f2):  # two spatial axes, complete (counts past 2^63 or real numbers)
            _plane_fields(values, scope, list(dims) + list(numbers))
            rows.append((path, call_index, depth, bool(failed), values))
            continue
        q = 0
        for name, status in zip(_FIELDS, (f0, f1, f2)):
            if not n:  # no axes: unavailable
                values[name] = {"known_value": None, "method": "not_applicable" if not_applicable else "data_flow",
                                "reason": texts[t], "scope": scope, "status": "unavailable", "unit": "positions",
                                "value": None}
                t += 1
                continue
            value = None
            if status == 0:
                value = numbers[q]
                q += 1
            axes = [{"dim": d, "value": v} for d, v in zip(dims, numbers[q:q + n])]
            q += n
            if status == 0:
                values[name] = {"axes": axes, "known_value": value, "method": "data_flow", "scope": scope,
                                "status": "complete", "unit": "positions", "value": value}
            else:  # the axes differ
                values[name] = {"axes": axes, "known_value": None, "method": "data_flow", "reason": texts[t],
                                "scope": scope, "status": "unavailable", "unit": "positions", "value": None}
                t += 1
        rows.append((path, call_index, depth, bool(failed), values))
    return rows
