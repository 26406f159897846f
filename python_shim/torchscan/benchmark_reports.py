"""BenchmarkReport and BenchmarkComparison as saved evidence (report schema
"BenchmarkReport", "BenchmarkComparison"): validation, checked comparison
(compare_benchmarks) and text rendering (render_benchmark). Nothing here
measures; torchscan.workload makes the reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping as _MappingABC
from typing import List, Mapping, Optional

from torchscan import _metric, _readers

__all__ = ["compare_benchmarks", "render_benchmark", "is_benchmark_report", "is_benchmark_comparison",
           "validate_benchmark_report", "validate_benchmark_comparison"]

SCHEMA_VERSION = 1
_STATUSES = _metric.STATUSES


# ---------------------------------------------------------------- block statistics


def _quantile(sorted_values: list, q: float) -> float:
    """Linear interpolation between order statistics (torch.quantile's and
    numpy's default, used by torch.utils.benchmark.Measurement)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _block_statistics(raw_times: list, number: int) -> dict:
    """Median, quartiles and IQR of block averages (block time / number)."""
    averages = sorted(t / number for t in raw_times)
    q1, median, q3 = (_quantile(averages, q) for q in (0.25, 0.5, 0.75))
    return {"median": median, "q1": q1, "q3": q3, "iqr": q3 - q1, "mean": sum(averages) / len(averages)}


# ---------------------------------------------------------------- validation


def _fail(where: str, side: str, message: str):
    raise ValueError(f"{where}: {side}{message}")


def _check_metric(m, path: str, where: str, side: str) -> None:
    problem = _metric.problem(m, path)
    if problem:
        _fail(where, side, problem)


def _check_schema_version(report, where: str, side: str) -> None:
    version = report.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        _fail(where, side, f"schema_version is {version!r}, not an integer; this is not a TorchScan report")
    if version != SCHEMA_VERSION:
        _fail(where, side, f"schema_version {version} is not supported (this TorchScan reads version "
                           f"{SCHEMA_VERSION}); migrate the report explicitly or use the TorchScan that wrote it")


def validate_benchmark_report(report, where: str = "torchscan.validate_benchmark_report", side: str = "") -> None:
    """Raise TypeError/ValueError naming the field when `report` is not a
    schema-v1 BenchmarkReport."""
    if not isinstance(report, _MappingABC):
        raise TypeError(f"{where}: {side}a BenchmarkReport is a dict (as returned by measure_latency or "
                        f"measure_workload, or json.load of a saved one), got {type(report).__name__}")
    try:
        _readers.check_depth(report, "the report")
    except ValueError as e:
        _fail(where, side, str(e))
    other = _readers.other_kind(report)
    if other:
        _fail(where, side, f"is {other}, not a BenchmarkReport")
    _check_schema_version(report, where, side)
    if "layers" in report or "by_operator" in report:
        _fail(where, side, "is a model report (AnalysisReport/FlopReport), not a BenchmarkReport; use "
                           "compare_reports for those")
    for key, kind in (("context", _MappingABC), ("inputs", _MappingABC), ("measurement", _MappingABC),
                      ("totals", _MappingABC), ("diagnostics", list)):
        if key not in report:
            _fail(where, side, f"has no {key!r} field; this is not a BenchmarkReport")
        if not isinstance(report[key], kind):
            _fail(where, side, f"{key} must be {'a list' if kind is list else 'an object'}, "
                               f"got {type(report[key]).__name__}")
    for name, m in report["totals"].items():
        _check_metric(m, f"totals.{name}", where, side)
    threads = report["context"].get("threads")
    if threads is not None and not isinstance(threads, _MappingABC):
        _fail(where, side, f"context.threads must be an object, got {_readers.name_of(threads)}")
    meas = report["measurement"]
    for key in ("q1_seconds", "median_seconds", "q3_seconds"):
        if key in meas and not _readers.is_number(meas[key]):
            _fail(where, side, f"measurement.{key} must be a finite number, got {meas[key]!r}")
    if meas:
        number, raw, calls = meas.get("number_per_run"), meas.get("raw_times_seconds"), meas.get("measured_calls")
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            _fail(where, side, f"measurement.number_per_run must be an int >= 1, got {number!r}")
        if not isinstance(raw, list) or not raw or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0 for t in raw):
            _fail(where, side, "measurement.raw_times_seconds must be a non-empty list of positive block times")
        if calls != number * len(raw):
            _fail(where, side, f"measurement.measured_calls is {calls!r}; expected number_per_run x blocks = "
                               f"{number * len(raw)}")
    for i, d in enumerate(report["diagnostics"]):
        if not isinstance(d, _MappingABC) or not isinstance(d.get("code"), str) or not isinstance(
                d.get("message"), str):
            _fail(where, side, f"diagnostics[{i}] must be an object with a code and a message")
        if not isinstance(d.get("severity", "warning"), str):
            _fail(where, side, f"diagnostics[{i}].severity must be a string, got {d['severity']!r}")


def is_benchmark_report(report) -> bool:
    """Whether `report` has the shape of a BenchmarkReport (not validated)."""
    return isinstance(report, _MappingABC) and "measurement" in report and "totals" in report and \
        "layers" not in report


def is_benchmark_comparison(report) -> bool:
    """Whether `report` has the shape of a BenchmarkComparison (not validated)."""
    return isinstance(report, _MappingABC) and "output_check" in report and "latency_change" in report


# ---------------------------------------------------------------- comparison


_LATENCY_RULE = ("descriptive, not a significance test: each side's IQR is the 25th-75th percentile range of its "
                 "block averages; 'faster' when after's 75th percentile is below before's 25th, 'slower' when "
                 "after's 25th percentile is above before's 75th, otherwise 'overlapping' (no change claimed); "
                 "ratio = after median / before median")


def _run_check(check) -> dict:
    if check is None:
        return {"status": "not_checked", "method": "none",
                "message": "no output check was given; deltas are withheld (pass check=callable or check=True "
                           "after checking the outputs yourself)"}
    if isinstance(check, bool):
        return {"status": "passed" if check else "failed", "method": "caller_assertion",
                "message": "the caller stated the outputs " + ("match" if check else "do not match")}
    name = getattr(check, "__qualname__", type(check).__name__)
    method = f"callable:{getattr(check, '__module__', None) or '?'}.{name}"
    try:
        result = check()
    except Exception as e:  # the check's verdict; KeyboardInterrupt and SystemExit propagate
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"status": "failed", "method": method, "message": f"{type(e).__name__}: {text}"[:2000]}
    if result is None or result is True:
        return {"status": "passed", "method": method, "message": "the check returned " + repr(result)}
    if result is False:
        return {"status": "failed", "method": method, "message": "the check returned False"}
    if type(result).__name__ == "bool_":  # numpy.bool_
        return _run_check(bool(result)) | {"method": method}
    raise TypeError(f"torchscan.compare_benchmarks: the check {name} returned {type(result).__name__}; a check "
                    "returns None or True (pass), False (fail) or raises (fail), e.g. "
                    "check=lambda: torch.testing.assert_close(a(), b())")


def _metric_diff(before, after, check_passed: bool) -> dict:
    entry = {"status": "unavailable", "delta": None, "before": before, "after": after, "delta_withheld": None}
    statuses = [m["status"] if m is not None else "unavailable" for m in (before, after)]
    entry["status"] = ("complete" if statuses == ["complete", "complete"] else
                       "unavailable" if "unavailable" in statuses else "partial")
    if before is None or after is None:
        entry["delta_withheld"] = "missing on one side"
    elif entry["status"] != "complete":
        entry["delta_withheld"] = "not complete on both sides"
    elif (before["unit"], before["scope"]) != (after["unit"], after["scope"]):
        entry["delta_withheld"] = (f"incompatible: {before['unit']}/{before['scope']} before, "
                                   f"{after['unit']}/{after['scope']} after")
    elif before["method"] != after["method"]:
        entry["delta_withheld"] = f"different methods ({before['method']} / {after['method']})"
    elif not check_passed:
        entry["delta_withheld"] = "the output check did not pass"
    else:
        entry["delta"] = after["value"] - before["value"]
    return entry


def _flatten(value, prefix: str, out: dict) -> None:
    if isinstance(value, _MappingABC):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value


def _context_changes(before, after) -> list:
    a: dict = {}
    b: dict = {}
    _flatten(before, "", a)
    _flatten(after, "", b)
    return [{"field": k, "before": a.get(k), "after": b.get(k)} for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def _latency_change(before, after, check_passed: bool, context_changes: list) -> dict:
    sides: List[Optional[dict]] = []
    for rep in (before, after):
        m = rep["measurement"]
        if not m:
            sides.append(None)
        else:
            stats = _block_statistics(m["raw_times_seconds"], m["number_per_run"])  # recomputed from the blocks
            sides.append(stats)
    change: dict = {"status": "unavailable", "rule": _LATENCY_RULE, "before_median_seconds": None,
              "after_median_seconds": None, "before_iqr_seconds": None, "after_iqr_seconds": None,
              "iqr_overlap": None, "assessment": None, "ratio": None, "withheld": None,
              "context_differs": [c["field"] for c in context_changes
                                  if c["field"].split(".", 1)[0] in ("device", "hardware", "threads", "software",
                                                                     "timing", "work_unit", "execution_state")]}
    if None in sides:
        change["withheld"] = "timing missing on " + ("both sides" if sides == [None, None] else
                                                     "the before side" if sides[0] is None else "the after side")
        return change
    b, a = sides[0] or {}, sides[1] or {}
    change.update({"status": "complete", "before_median_seconds": b["median"], "after_median_seconds": a["median"],
                   "before_iqr_seconds": [b["q1"], b["q3"]], "after_iqr_seconds": [a["q1"], a["q3"]],
                   "iqr_overlap": not (a["q3"] < b["q1"] or a["q1"] > b["q3"])})
    if not check_passed:
        change["withheld"] = "the output check did not pass: no ratio or assessment"
        return change
    change["assessment"] = ("faster" if a["q3"] < b["q1"] else "slower" if a["q1"] > b["q3"] else "overlapping")
    change["ratio"] = a["median"] / b["median"]
    return change


def compare_benchmarks(before: Mapping, after: Mapping, *, check=None) -> dict:
    """BenchmarkComparison of two BenchmarkReports (nothing is re-measured).

    check: a zero-argument callable run once here, outside any timing (returns
    None or True: passed; returns False or raises an Exception: failed, the
    exception's type and message recorded), a bool stating the caller's own
    verdict, or None (not checked). after - before deltas are given only for
    metrics complete on both sides with the same unit, scope and method, and
    only when the check passed; otherwise both measurements are kept and the
    delta is null with the reason in delta_withheld."""
    where = "torchscan.compare_benchmarks"
    if check is not None and not isinstance(check, bool) and not callable(check):
        raise TypeError(f"{where}: check must be a zero-argument callable (e.g. lambda: "
                        f"torch.testing.assert_close(a(), b())), True/False, or None; got {type(check).__name__}")
    validate_benchmark_report(before, where, "the before report: ")
    validate_benchmark_report(after, where, "the after report: ")
    output_check = _run_check(check)
    passed = output_check["status"] == "passed"
    totals = {name: _metric_diff(before["totals"].get(name), after["totals"].get(name), passed)
              for name in list(before["totals"]) + [n for n in after["totals"] if n not in before["totals"]]}
    changes = _context_changes(before["context"], after["context"])
    diagnostics = []
    if not passed:
        diagnostics.append({"code": "output_check_" + output_check["status"], "severity": "warning",
                            "metric": "totals", "message": "deltas are withheld: " + output_check["message"]})
    return {"schema_version": SCHEMA_VERSION, "before": dict(before), "after": dict(after),
            "output_check": output_check, "totals": totals, "context_changes": changes,
            "latency_change": _latency_change(before, after, passed, changes), "diagnostics": diagnostics}


def validate_benchmark_comparison(comparison, where: str) -> None:
    """Raise TypeError/ValueError naming the field when `comparison` is not a
    schema-v1 BenchmarkComparison (what render_benchmark reads of it)."""
    if not isinstance(comparison, _MappingABC):
        raise TypeError(f"{where}: a BenchmarkComparison is a dict, got {type(comparison).__name__}")
    side = "the comparison: "
    try:
        _readers.check_depth(comparison, "the comparison")
    except ValueError as e:
        _fail(where, "", str(e))
    _check_schema_version(comparison, where, side)
    for key, kind in (("before", _MappingABC), ("after", _MappingABC), ("output_check", _MappingABC),
                      ("totals", _MappingABC), ("context_changes", list), ("latency_change", _MappingABC)):
        if not isinstance(comparison.get(key), kind):
            _fail(where, "the comparison: ", f"field {key!r} is missing or not {'a list' if kind is list else 'an object'}")
    if comparison["output_check"].get("status") not in ("passed", "failed", "not_checked"):
        _fail(where, "the comparison: ", f"output_check.status is {comparison['output_check'].get('status')!r}")
    check = comparison["output_check"]
    for key in ("method", "message"):
        if not isinstance(check.get(key), str):
            _fail(where, side, f"output_check.{key} must be a string, got {check.get(key)!r}")
    validate_benchmark_report(comparison["before"], where, "the comparison's before report: ")
    validate_benchmark_report(comparison["after"], where, "the comparison's after report: ")
    for name, diff in comparison["totals"].items():
        path = f"totals.{name}"
        if not isinstance(diff, _MappingABC):
            _fail(where, side, f"{path} must be a metric difference object, got {_readers.name_of(diff)}")
        metrics = []
        for key in ("before", "after"):
            if diff.get(key) is not None:
                _check_metric(diff[key], f"{path}.{key}", where, side)
                metrics.append(diff[key])
        delta, withheld = diff.get("delta"), diff.get("delta_withheld")
        if delta is not None:
            if len(metrics) != 2 or any(m["status"] != "complete" for m in metrics):
                _fail(where, side, f"{path} has a delta but is not complete on both sides")
            if metrics[0]["unit"] in _metric.COUNT_UNITS:
                if not (isinstance(delta, int) and not isinstance(delta, bool)) or abs(delta) > _readers.MAX_COUNT:
                    _fail(where, side, f"{path}.delta must be an integer from -(2^128 - 1) to 2^128 - 1, got "
                                       f"{delta!r}")
                if delta != metrics[1]["value"] - metrics[0]["value"]:
                    _fail(where, side, f"{path}.delta {delta} is not after - before "
                                       f"({metrics[1]['value'] - metrics[0]['value']})")
            elif not _readers.is_number(delta):
                _fail(where, side, f"{path}.delta must be a finite number or null, got {delta!r}")
        if withheld is not None and not isinstance(withheld, str):
            _fail(where, side, f"{path}.delta_withheld must be a string or null, got {withheld!r}")
    for i, change in enumerate(comparison["context_changes"]):
        if not isinstance(change, _MappingABC) or not isinstance(change.get("field"), str):
            _fail(where, side, f"context_changes[{i}] must be an object with a field name")
    lat = comparison["latency_change"]
    differs = lat.get("context_differs", [])
    if not isinstance(differs, list) or not all(isinstance(f, str) for f in differs):
        _fail(where, side, "latency_change.context_differs must be a list of field names")
    if lat.get("status") == "complete":
        for key in ("before_median_seconds", "after_median_seconds"):
            if not _readers.is_number(lat.get(key)):
                _fail(where, side, f"latency_change.{key} must be a finite number, got {lat.get(key)!r}")
        for key in ("before_iqr_seconds", "after_iqr_seconds"):
            v = lat.get(key)
            if not isinstance(v, list) or len(v) != 2 or not all(_readers.is_number(x) for x in v):
                _fail(where, side, f"latency_change.{key} must be [q1, q3] in seconds, got {v!r}")
        if lat.get("assessment") is not None:
            if not isinstance(lat["assessment"], str) or not _readers.is_number(lat.get("ratio")):
                _fail(where, side, "latency_change: an assessment needs a string and a finite ratio")


# ---------------------------------------------------------------- rendering

_MIB = 1024 * 1024


def _format(metric, unit_hint: str = "") -> str:
    if metric is None:
        return "-"
    status, unit = metric["status"], metric["unit"]
    value = metric["value"] if status == "complete" else metric["known_value"]
    if value is None:
        return "not requested" if metric["method"] == "not_requested" else "unavailable"
    text = _format_value(value, unit)
    return text if status == "complete" else f">= {text} (partial)"


def _format_value(value, unit: str, signed: bool = False) -> str:
    sign = "+" if signed and value > 0 else ""
    if unit == "seconds":
        ms = value * 1e3
        return f"{sign}{ms:.3f} ms" if abs(ms) >= 1 else f"{sign}{ms:.4g} ms"
    if unit == "bytes":
        return f"{sign}{value / _MIB:.3f} MiB ({sign}{value:,} bytes)"
    if unit == "FLOPs":
        return f"{sign}{value:,} FLOPs" if isinstance(value, int) else f"{sign}{value:,.0f} FLOPs"
    return f"{sign}{value:,.2f} {unit}" if isinstance(value, float) else f"{sign}{value:,} {unit}"


_LABELS = {"first_call_latency": "First call", "latency": "Latency (median)", "latency_iqr": "Latency IQR",
           "throughput": "Throughput", "operator_flops": "Operator FLOPs", "peak_memory": "Peak memory",
           "process_peak_rss": "Process peak RSS"}


def _ordered(totals) -> list:
    """Known totals in a fixed order (saved JSON may have sorted keys), then the rest."""
    return [(k, totals[k]) for k in _LABELS if k in totals] + [(k, v) for k, v in totals.items() if k not in _LABELS]


def _render_report(report) -> list:
    ctx = report["context"]
    threads = ctx.get("threads") or {}
    lines = [f"TorchScan benchmark (schema {report['schema_version']}): {ctx.get('measurement', '?')} on "
             f"{ctx.get('device', '?')}, {threads.get('torch_num_threads', '?')} threads, "
             f"torch {ctx.get('torch_version', '?')}"]
    meas = report["measurement"]
    if meas:
        lines.append(f"Timing: {len(meas['raw_times_seconds'])} blocks x {meas['number_per_run']} calls "
                     f"({meas['measured_calls']} measured calls)")
    width = max(len(v) for v in _LABELS.values()) + 1
    for name, metric in _ordered(report["totals"]):
        lines.append(f"  {_LABELS.get(name, name):<{width}}  {_format(metric)}")
    if meas:
        lines.append(f"  {'Latency quartiles':<{width}}  {meas.get('q1_seconds', 0) * 1e3:.3f} / "
                     f"{meas.get('median_seconds', 0) * 1e3:.3f} / {meas.get('q3_seconds', 0) * 1e3:.3f} ms "
                     "(block averages)")
    for d in report["diagnostics"]:
        lines.append(f"  [{d.get('severity', 'warning')}] {d['code']}: {d['message']}")
    return lines


def render_benchmark(report: Mapping) -> str:
    """Text of a saved BenchmarkReport or BenchmarkComparison (seconds shown as
    ms, bytes as MiB); measures and checks nothing."""
    where = "torchscan.render_report"
    if is_benchmark_comparison(report):
        validate_benchmark_comparison(report, where)
        return "\n".join(_render_comparison(report))
    validate_benchmark_report(report, where)
    return "\n".join(_render_report(report))


def _render_comparison(c) -> list:
    check = c["output_check"]
    lines = [f"TorchScan benchmark comparison (schema {c['schema_version']})",
             f"Output check: {check['status']} ({check.get('method')}): {check.get('message')}"]
    width = max(len(v) for v in _LABELS.values()) + 1
    lines.append(f"  {'metric':<{width}}  {'before':>22}  {'after':>22}  delta")
    for name, diff in _ordered(c["totals"]):
        unit = (diff.get("before") or diff.get("after") or {}).get("unit", "")
        delta = (_format_value(diff["delta"], unit, signed=True) if diff.get("delta") is not None
                 else f"withheld ({diff.get('delta_withheld')})")
        lines.append(f"  {_LABELS.get(name, name):<{width}}  {_format(diff.get('before')):>22}  "
                     f"{_format(diff.get('after')):>22}  {delta}")
    lat = c["latency_change"]
    if lat.get("status") == "complete":
        b, a = lat["before_iqr_seconds"], lat["after_iqr_seconds"]
        text = (f"Latency: {lat['before_median_seconds'] * 1e3:.3f} ms [IQR {b[0] * 1e3:.3f}-{b[1] * 1e3:.3f}] -> "
                f"{lat['after_median_seconds'] * 1e3:.3f} ms [IQR {a[0] * 1e3:.3f}-{a[1] * 1e3:.3f}]")
        if lat.get("assessment") is not None:
            text += f": {lat['assessment']}, ratio {lat['ratio']:.3f}"
        else:
            text += f" ({lat.get('withheld')})"
        lines.append(text)
    else:
        lines.append(f"Latency: not compared ({lat.get('withheld')})")
    if lat.get("context_differs"):
        lines.append("  context differs: " + ", ".join(lat["context_differs"]))
    for ch in c["context_changes"]:
        lines.append(f"  changed {ch['field']}: {ch['before']!r} -> {ch['after']!r}")
    return lines
