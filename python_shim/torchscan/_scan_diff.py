"""ReportDiff of two C++ scan reports (kind "torchscan_scan_report", an
attached server's or Session::ScanReportJson's): the totals of both views,
the request counts and medians, and the layer rows aggregated across
requests ("aggregate"), matched by path, call index and call signature.

Two scans of a server seldom serve the same number of requests, so a layer
row is compared per call: its sums over its calls divided by their count
(exact when every call did the same work, as calls of one signature do;
otherwise the mean, a float). Each diff is {"status", "delta", "before",
"after"} as in every ReportDiff: a delta only when both sides are complete.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from torchscan import _readers

KIND = "torchscan_scan_report"
METRICS = ("operator_flops", "module_flops", "macs", "dmas")


def _label(side: str, file: str) -> str:
    return f"the {side} report" + (f" ({file})" if file else "")


def _fail(side: str, file: str, where: str, what: str) -> ValueError:
    return ValueError(f"torchscan.compare_reports: {_label(side, file)}: {where}: {what}")


def _unavailable() -> Dict[str, Any]:
    return {"status": "unavailable", "value": None, "known_value": None}


def _snapshot(m: Any) -> Dict[str, Any]:
    if not isinstance(m, dict) or m.get("status") not in ("complete", "partial", "unavailable"):
        return _unavailable()
    return {"status": m["status"], "value": m.get("value"), "known_value": m.get("known_value")}


def _metric_diff(b: Dict[str, Any], a: Dict[str, Any]) -> Dict[str, Any]:
    statuses = {b["status"], a["status"]}
    status = "unavailable" if "unavailable" in statuses else "partial" if "partial" in statuses else "complete"
    both = b["status"] == a["status"] == "complete"
    return {"status": status, "delta": a["value"] - b["value"] if both else None, "before": b, "after": a}


def _per_call(m: Any, calls: int) -> Dict[str, Any]:
    s = _snapshot(m)
    if calls <= 0:
        return s

    def each(v):
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        return v // calls if v % calls == 0 else v / calls

    return {"status": s["status"], "value": each(s["value"]), "known_value": each(s["known_value"])}


def _aggregate_rows(report: Dict[str, Any], side: str, file: str) -> Dict[Tuple[str, int, str], Dict[str, Any]]:
    agg = report.get("aggregate")
    if not isinstance(agg, dict) or not isinstance(agg.get("layers"), list):
        raise _fail(side, file, "aggregate", "this scan report has no layer rows aggregated across requests "
                    "(a scan of one thread, or per-call rows); compare two reports of aggregated scans "
                    "(all-threads scans and attached servers write them)")
    rows = {}
    for i, row in enumerate(agg["layers"]):
        where = f"aggregate.layers[{i}]"
        if not isinstance(row, dict):
            raise _fail(side, file, where, "expected a layer row (an object)")
        path, index, signature = row.get("path"), row.get("call_index"), row.get("signature")
        calls = row.get("calls")
        if not isinstance(path, str) or not isinstance(index, int) or not isinstance(signature, str):
            raise _fail(side, file, where, "a row needs path (string), call_index (integer) and signature (string)")
        if not isinstance(calls, int) or isinstance(calls, bool) or calls < 0:
            raise _fail(side, file, f"{where}.calls", "expected a count of calls (a non-negative integer)")
        if not isinstance(row.get("metrics"), dict):
            raise _fail(side, file, f"{where}.metrics", "expected an object of MetricResults")
        key = (path, index, signature)
        if key in rows:
            raise _fail(side, file, where, f"the same row (path {path!r}, call_index {index}, signature {signature}) "
                        "appears twice; a row is one module call of a request and one call signature")
        rows[key] = row
    return rows


def _totals(report: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    flops = report.get("operator_flops")
    if isinstance(flops, dict):
        out["operator_flops"] = flops.get("total")
    module = report.get("module_report")
    if isinstance(module, dict) and isinstance(module.get("totals"), dict):
        for m in METRICS[1:]:
            out[m] = module["totals"].get(m)
    return out


def _snapshot_row(row: Dict[str, Any]) -> Dict[str, Any]:
    return {"path": row["path"], "call_index": row["call_index"], "signature": row["signature"],
            "input": row.get("input"), "calls": row["calls"],
            "metrics": {m: _per_call(row["metrics"].get(m), row["calls"]) for m in METRICS}}


def compare_scan_reports(before: Dict[str, Any], after: Dict[str, Any], before_file: str = "",
                         after_file: str = "") -> Dict[str, Any]:
    rows = {"before": _aggregate_rows(before, "before", before_file),
            "after": _aggregate_rows(after, "after", after_file)}
    bt, at = _totals(before), _totals(after)
    totals = {m: _metric_diff(_snapshot(bt.get(m)), _snapshot(at.get(m))) for m in METRICS if m in bt or m in at}
    b_rows, a_rows = rows["before"], rows["after"]
    added = [_snapshot_row(a_rows[k]) for k in a_rows if k not in b_rows]
    removed = [_snapshot_row(b_rows[k]) for k in b_rows if k not in a_rows]
    changed = []
    for key, a in a_rows.items():
        b = b_rows.get(key)
        if b is None:
            continue
        metrics = {}
        for m in METRICS:
            pb, pa = _per_call(b["metrics"].get(m), b["calls"]), _per_call(a["metrics"].get(m), a["calls"])
            if pb != pa:
                metrics[m] = _metric_diff(pb, pa)
        if metrics:
            changed.append({"path": key[0], "call_index": key[1], "signature": key[2], "metrics": metrics,
                            "calls": {"before": b["calls"], "after": a["calls"]}})

    def medians(report):
        totals = report["aggregate"].get("request_totals") or {}
        return {m: (totals.get(m) or {}).get("median") for m in METRICS}

    bm, am = medians(before), medians(after)
    return {"schema_version": 1,
            "totals": totals,
            "requests": {"before": before["aggregate"].get("requests"), "after": after["aggregate"].get("requests")},
            "request_medians": {m: {"before": bm[m], "after": am[m]} for m in METRICS},
            "layers": {"added": added, "removed": removed, "changed": changed}}


def compare_if_scan_reports(before: str, after: str, before_file: str = "", after_file: str = "") -> Optional[str]:
    """The diff's JSON text when both reports (JSON text) are scan reports;
    None when neither is (the other readers take them); ValueError when
    only one is."""
    if KIND not in before and KIND not in after:
        return None
    sides = {}
    for side, text, file in (("before", before, before_file), ("after", after, after_file)):
        try:
            report = _readers.loads(text, _label(side, file))
        except ValueError as e:
            raise ValueError(f"torchscan.compare_reports: {e}") from None
        sides[side] = report if isinstance(report, dict) and report.get("kind") == KIND else None
    if sides["before"] is None and sides["after"] is None:
        return None
    if sides["before"] is None or sides["after"] is None:
        scan, other = ("before", "after") if sides["before"] is not None else ("after", "before")
        files = {"before": before_file, "after": after_file}
        raise ValueError(f"torchscan.compare_reports: {_label(scan, files[scan])} is a C++ scan report and "
                         f"{_label(other, files[other])} is not; compare two scan reports (or two AnalysisReports, "
                         "or two FlopReports)")
    return json.dumps(compare_scan_reports(sides["before"], sides["after"], before_file, after_file))
