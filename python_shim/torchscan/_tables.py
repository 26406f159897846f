"""Text tables of the saved documents the library's renderer does not read:
a ReportDiff (compare_reports, `python3 -m torchscan diff`) and a C++ scan
report (kind "torchscan_scan_report": ScanReportJson, the attach launcher).
Counts are exact with thousands separators in diffs (a delta is read to the
unit) and in SI units (as the summary table) in scan reports."""

from __future__ import annotations

import json
from typing import Any, Callable, List, Mapping, Optional, Sequence

__all__ = ["is_report_diff", "is_scan_report", "render_diff", "render_scan_report"]

_MAX_ROWS = 200  # per section; the JSON (--json, or the saved file) has every row


class _Malformed(ValueError):
    pass


def _need(value: Any, path: str, kind=Mapping) -> Any:
    if not isinstance(value, kind):
        what = {Mapping: "an object", list: "an array"}.get(kind, kind.__name__)
        raise _Malformed(f"{path} is {type(value).__name__}, expected {what}")
    return value


def is_report_diff(value: Any) -> bool:
    """Whether `value` is shaped as a ReportDiff: totals holding {before, after} pairs."""
    if not isinstance(value, Mapping) or "kind" in value:
        return False
    totals = value.get("totals")
    return (isinstance(totals, Mapping) and bool(totals)
            and all(isinstance(d, Mapping) and "before" in d and "after" in d for d in totals.values()))


def is_scan_report(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("kind") == "torchscan_scan_report"


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _exact(n: int) -> str:
    return f"{n:,}"


def _n(v: Any) -> str:
    """A count with thousands separators; "?" for anything else."""
    return _exact(v) if _count(v) is not None else "?"


def _si(n: Any) -> str:
    """Like the summary table: plain below 1000, then k, M, G, ... with two decimals."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "?"
    v = float(n)
    if abs(v) < 1000:
        return str(n) if isinstance(n, int) else f"{v:.2f}"
    for prefix in ("k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q"):
        v /= 1000
        if abs(v) < 1000 or prefix == "Q":
            return f"{v:.2f}{prefix}"
    return "?"  # unreachable


def _value_text(snapshot: Any, number: Callable[[Any], str]) -> str:
    """A MetricResult (or a diff's before/after snapshot) as text: the value
    when complete, ">= known" when partial, n/a when unavailable or absent."""
    if not isinstance(snapshot, Mapping):
        return "-"
    status = snapshot.get("status")
    if status == "complete" and snapshot.get("value") is not None:
        return number(snapshot["value"])
    if status == "partial" and snapshot.get("known_value") is not None:
        return ">= " + number(snapshot["known_value"])
    return "n/a"


def _change_text(d: Mapping) -> str:
    delta = d.get("delta")
    if delta is None or isinstance(delta, bool) or not isinstance(delta, (int, float)):
        return f"n/a ({d.get('status', '?')})"
    text = f"{delta:+,}" if isinstance(delta, int) else f"{delta:+.4g}"
    before = d.get("before")
    base = before.get("value") if isinstance(before, Mapping) else None
    if isinstance(base, (int, float)) and not isinstance(base, bool) and base:
        text += f" ({100 * delta / base:+.1f}%)"
    return text


def _table(rows: List[List[str]], right_from: int = 1) -> List[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        cells = [cell.ljust(widths[c]) if c < right_from else cell.rjust(widths[c]) for c, cell in enumerate(r)]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("-" * len(out[0]))
    return out


def _capped(items: Sequence, what: str) -> tuple:
    if len(items) <= _MAX_ROWS:
        return items, []
    return items[:_MAX_ROWS], [f"... and {len(items) - _MAX_ROWS:,} more {what} (the JSON lists every one)"]


def _exact_number(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return _exact(v)
    return f"{v:.4g}" if isinstance(v, float) else "?"


# The summary table's order; other metrics (memory, receptive fields) after them, by name.
_METRIC_ORDER = ("module_flops", "macs", "dmas", "operator_flops", "parameters", "trainable_parameters",
                 "frozen_parameters", "parameter_bytes", "buffer_elements", "buffer_bytes")


def _diff_rows(diffs: Mapping, path: str, label: Optional[str] = None) -> List[List[str]]:
    """[name, before, after, change] per metric diff; with a label (a layer):
    [label on the first row only, metric, before, after, change]."""
    rows = []
    order = {name: i for i, name in enumerate(_METRIC_ORDER)}
    items = sorted(diffs.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    for i, (name, d) in enumerate(items):
        _need(d, f"{path}.{name}")
        cells = [_value_text(d.get("before"), _exact_number), _value_text(d.get("after"), _exact_number),
                 _change_text(d)]
        rows.append([name] + cells if label is None else [label if i == 0 else "", name] + cells)
    return rows


def _layer_name(layer: Mapping) -> str:
    path = layer.get("path")
    name = "(root)" if path == "" else str(path)
    call = layer.get("call_index")
    return name + (f" #{call}" if isinstance(call, int) and call else "")


def render_diff(diff: Mapping) -> str:
    """Text of a ReportDiff: totals before, after and change, then the
    layers changed (each changed metric), added and removed (two
    AnalysisReports), or the operators whose FLOPs differ (two FlopReports)."""
    try:
        return _render_diff(diff)
    except _Malformed as e:
        raise ValueError(f"torchscan.render_diff: {e}; pass a ReportDiff as compare_reports returns it") from None


def _render_diff(diff: Mapping) -> str:
    if not is_report_diff(diff):
        raise _Malformed("this is not a ReportDiff (totals with before/after pairs)")
    lines = ["Report diff (before -> after; a change only where both sides are complete)", ""]
    lines += _table([["Total", "Before", "After", "Change"]] + _diff_rows(diff["totals"], "totals"))
    layers = diff.get("layers")
    if layers is not None:
        _need(layers, "layers")
        changed = _need(layers.get("changed", []), "layers.changed", list)
        added = _need(layers.get("added", []), "layers.added", list)
        removed = _need(layers.get("removed", []), "layers.removed", list)
        lines += ["", f"Layer calls (matched by path and call index): {len(changed):,} changed, "
                      f"{len(added):,} added, {len(removed):,} removed"]
        if changed:
            rows = [["Changed layer", "Metric", "Before", "After", "Change"]]
            shown, more = _capped(changed, "changed layers")
            for i, layer in enumerate(shown):
                _need(layer, f"layers.changed[{i}]")
                metrics = _need(layer.get("metrics", {}), f"layers.changed[{i}].metrics")
                layer_rows = _diff_rows(metrics, f"layers.changed[{i}].metrics", _layer_name(layer))
                if "token_dependencies" in layer:
                    layer_rows.append(["" if layer_rows else _layer_name(layer), "token_dependencies", "", "",
                                       "differ"])
                rows += layer_rows
            lines += [""] + _table(rows, 2) + more
        for title, items, key in (("Added layer", added, "added"), ("Removed layer", removed, "removed")):
            if not items:
                continue
            rows = [[title, "FLOPs", "MACs", "DMAs"]]
            shown, more = _capped(items, f"{key} layers")
            for i, layer in enumerate(shown):
                _need(layer, f"layers.{key}[{i}]")
                metrics = _need(layer.get("metrics", {}), f"layers.{key}[{i}].metrics")
                rows.append([_layer_name(layer)] + [_value_text(metrics.get(m), _exact_number)
                                                    for m in ("module_flops", "macs", "dmas")])
            lines += [""] + _table(rows) + more
    by_operator = diff.get("by_operator")
    if by_operator is not None:
        _need(by_operator, "by_operator")
        lines += ["", f"Operators whose FLOPs differ: {len(by_operator):,}"]
        if by_operator:
            items = sorted(by_operator.items(), key=lambda kv: -abs(kv[1].get("delta") or 0)
                           if isinstance(kv[1], Mapping) and isinstance(kv[1].get("delta"), (int, float)) else 0)
            shown, more = _capped(items, "operators")
            rows = [["Operator", "Before", "After", "Change"]]
            for op, d in shown:
                _need(d, f"by_operator.{op}")
                rows.append([op, _value_text(d.get("before"), _exact_number),
                             _value_text(d.get("after"), _exact_number), _change_text(d)])
            lines += [""] + _table(rows) + more
    return "\n".join(lines) + "\n"


_VIEWS = (("operator_flops", "Op FLOPs"), ("module_flops", "FLOPs"), ("macs", "MACs"), ("dmas", "DMAs"))


def _metric_cells(metrics: Any) -> List[str]:
    metrics = metrics if isinstance(metrics, Mapping) else {}
    return [_value_text(metrics.get(m), _si) if m in metrics else "-" for m, _ in _VIEWS]


def _input_text(meta: Any) -> str:
    if isinstance(meta, Mapping) and isinstance(meta.get("shape"), list):
        return "[" + ", ".join(str(d) for d in meta["shape"]) + "]" + (f" {meta['dtype']}" if meta.get("dtype") else "")
    return "-"


def _layer_table(rows: Sequence, path: str, aggregated: bool) -> List[str]:
    header = ["Layer"] + (["Calls", "Input"] if aggregated else []) + [title for _, title in _VIEWS]
    table = [header]
    shown, more = _capped(rows, "layer rows")
    for i, row in enumerate(shown):
        _need(row, f"{path}[{i}]")
        depth = row.get("depth") if isinstance(row.get("depth"), int) else 0
        label = "  " * min(max(depth, 0), 32) + _layer_name(row)
        extra = [_n(row.get("calls")),
                 _input_text(row.get("input"))] if aggregated else []
        table.append([label] + extra + _metric_cells(row.get("metrics")))
    return _table(table, 3 if aggregated else 1) + more


def _distribution_text(d: Any) -> str:
    if not isinstance(d, Mapping) or d.get("min") is None:
        return "n/a"
    unit = d.get("unit", "")
    number = (lambda v: f"{v / 1e6:.3f} ms" if _count(v) is not None else "?") if unit == "ns" else _si
    text = ", ".join(f"{k} {number(d.get(k))}" for k in ("min", "median", "p99", "max"))
    return text + ("" if d.get("exact", True) else " (within about 1.1%)")


def render_scan_report(report: Mapping) -> str:
    """Text of a C++ scan report: context, both views' totals, the layer
    rows (aggregated across requests, or one per call), the distribution of
    per-request totals and the request classes, the threads, and the
    operator view's table (its operator_flops, a FlopReport, rendered as
    render_report does)."""
    try:
        return _render_scan_report(report)
    except _Malformed as e:
        raise ValueError(f"torchscan.render_scan_report: {e}") from None


def _render_scan_report(report: Mapping) -> str:
    from torchscan._summary import render_report

    if not is_scan_report(report):
        raise _Malformed('kind is not "torchscan_scan_report"')
    if report.get("schema_version") != 1:
        raise _Malformed(f"schema_version is {report.get('schema_version')!r}; this TorchScan reads version 1")
    context = _need(report.get("context", {}), "context")
    flops = _need(report.get("operator_flops"), "operator_flops")
    module = _need(report.get("module_report", {}), "module_report")
    lines = [f"TorchScan scan report (C++): threads {context.get('threads', '?')}, "
             f"torch {context.get('torch_version', '?')}, torchscan {context.get('torchscan_version', '?')}"]
    if context.get("snapshot"):
        lines.append(f"A snapshot taken while the scan ran: {_n(context.get('in_flight_calls', 0))} calls still "
                     "running are left out")
    totals = module.get("totals", {}) if isinstance(module.get("totals"), Mapping) else {}
    lines.append("Module view (TorchScan conventions): " + ", ".join(
        f"{_value_text(totals.get(m), _si)} {unit}" for m, unit in (("module_flops", "FLOPs"), ("macs", "MACs"),
                                                                    ("dmas", "DMAs"))))
    lines.append(f"Operator view (PyTorch dispatch): {_value_text(flops.get('total'), _si)} FLOPs")
    aggregate = report.get("aggregate")
    if aggregate is not None:
        _need(aggregate, "aggregate")
        layers = _need(aggregate.get("layers", []), "aggregate.layers", list)
        grouped = aggregate.get("grouped_by")
        grouped = grouped if isinstance(grouped, list) else ["path", "call_index", "signature"]
        lines += ["", f"Requests: {_n(aggregate.get('requests', 0))}. Layer rows aggregated across requests "
                      f"(one per {', '.join(map(str, grouped))}: calls of other shapes are separate rows); "
                      "each row sums its calls' own work (not its sublayers')"]
        if layers:
            lines += _layer_table(layers, "aggregate.layers", True)
        request_totals = aggregate.get("request_totals")
        if isinstance(request_totals, Mapping) and request_totals:
            lines += ["", "Per-request totals:"]
            order = {name: i for i, name in enumerate(_METRIC_ORDER)}
            for name, d in sorted(request_totals.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])):
                lines.append(f"  {name}: {_distribution_text(d)}")
        classes = aggregate.get("request_classes")
        if isinstance(classes, list) and classes:
            rows = [["Request class", "Requests", "Input", "Calls"] + [t for _, t in _VIEWS]]
            shown, more = _capped(classes, "request classes")
            for i, c in enumerate(shown):
                _need(c, f"aggregate.request_classes[{i}]")
                name = "common" if c.get("common") else f"{c.get('first_request', '?')} .. {c.get('last_request', '?')}"
                rows.append([name, _n(c.get("requests")),
                             _input_text(c.get("input")),
                             _n(c.get("calls"))]
                            + _metric_cells(c.get("totals")))
            lines += [""] + _table(rows) + more
            omitted = aggregate.get("requests_in_omitted_classes")
            if omitted:
                lines.append(f"... and {_n(omitted)} requests in classes not listed")
    kept = _need(report.get("layers", []), "layers", list)
    if kept:
        title = ("Layer rows of the last requests kept whole" if aggregate is not None
                 else "Layer rows (one per module call; each its own work, not its sublayers')")
        lines += ["", title] + _layer_table(kept, "layers", False)
    requests = _need(report.get("requests", []), "requests", list)
    if requests:
        rows = [["Request", "Calls"] + [t for _, t in _VIEWS]]
        shown, more = _capped(requests, "requests")
        for i, r in enumerate(shown):
            _need(r, f"requests[{i}]")
            rows.append([str(r.get("request", "?")), _n(r.get("calls"))]
                        + _metric_cells(r.get("totals")))
        lines += [""] + _table(rows) + more
    threads = _need(report.get("threads", []), "threads", list)
    if threads:
        rows = [["Thread", "Name", "Calls"] + [t for _, t in _VIEWS]]
        for i, t in enumerate(threads[:_MAX_ROWS]):
            _need(t, f"threads[{i}]")
            rows.append([str(t.get("thread", "?")), str(t.get("name", "")) or "-",
                         _n(t.get("calls"))]
                        + _metric_cells(t.get("totals")))
        lines += [""] + _table(rows, 2)
    try:
        operator_table = render_report(json.loads(json.dumps(flops)))
    except (TypeError, ValueError) as e:
        raise _Malformed(f"operator_flops: {str(e).split(': ', 1)[-1]}") from None
    return "\n".join(lines) + "\n\n" + operator_table
