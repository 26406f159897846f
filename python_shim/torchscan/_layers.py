"""crawl_module's layer rows, read from the engine's one layer-row writer
(reports/layers.cc, Note [One layer-row writer]) rather than rebuilt here,
and the memory report's per-call figures."""

from __future__ import annotations

import json

_FIELDS = ("receptive_field", "effective_stride", "effective_padding")


def _memory_metrics(session, layers: list) -> dict:
    """Sets peak_memory and allocated_bytes of every layer (the memory
    report's per-call figures, in the layers' order) and returns the scan's
    memory report without them."""
    report = json.loads(session.memory_report())
    for layer, figures in zip(layers, report.pop("layers")):
        layer["metrics"].update(figures)
    return report


_NO_OWNERS: dict = {}  # read only


def _layer_rows(session, metrics: bool) -> list:
    """(path, call_index, depth, failed, metrics, owners) per layer call, in
    call order, as the layers' JSON (Session::LayersJson) writes them. The
    operator view's per-row figure is left out (the engine neither computes
    nor writes it): crawl_module reports that view once, as a whole.
    metrics False: None instead of the metrics.
    owners: the row's metric_owners and metric_ownership (custom module
    handlers), an empty mapping for most rows."""
    rows = json.loads(session.module_layers())
    out = []
    for row in rows:
        values = row["metrics"]
        owners = _NO_OWNERS
        if "metric_owners" in row or "metric_ownership" in row:
            owners = {k: row[k] for k in ("metric_owners", "metric_ownership") if k in row}
        out.append((row["path"], row["call_index"], row["depth"], row["failed"], values if metrics else None, owners))
    return out
