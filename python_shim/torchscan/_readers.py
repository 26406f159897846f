"""Input rules shared by TorchScan's Python report readers (render_benchmark,
compare_benchmarks, merge_reports, render_roofline, roofline_svg, the command
line, tools/trace_figure.py); the C++ readers (reports/validate.cc) apply the
same ones to AnalysisReports and FlopReports.

- JSON text: a key repeated in one object is refused (JSON leaves its meaning
  open, and a reader must not pick one silently), as are NaN and Infinity
  (not JSON) and nesting deeper than MAX_DEPTH levels.
- Counts (FLOPs, bytes, calls, ...) are exact integers from 0 to 2^128 - 1,
  the most any TorchScan report holds; a float is not a count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Iterable

MAX_COUNT = 2**128 - 1
# As reports/validate.h's kMaxReportDepth: reports nest a few levels.
MAX_DEPTH = 200


def _object(pairs) -> dict:
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"the key {json.dumps(key)[:80]} appears twice in one object; a report names each field once "
                             "(which one was meant is unknowable)")
        obj[key] = value
    return obj


def _constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str, what: str = "the report") -> Any:
    """Parsed JSON text, or ValueError("<what> is not JSON (...)") / ("<what>
    nests ...") for anything the rules above refuse."""
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except RecursionError:
        raise ValueError(f"{what} nests more than {MAX_DEPTH} levels deep; no report does") from None
    except ValueError as e:
        raise ValueError(f"{what} is not JSON ({e})") from None
    check_depth(value, what)
    return value


def check_depth(value: Any, what: str = "the report") -> None:
    """ValueError when mappings and lists nest more than MAX_DEPTH levels
    (checked without recursion, before any reader recurses)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(v, Mapping):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(f"{what} nests more than {MAX_DEPTH} levels deep; no report does")
        stack.extend((c, depth + 1) for c in children)


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT


def count_problem(v: Any) -> str:
    """Why `v` is not a count, as a predicate for "<field> ..." ("" when it is)."""
    if is_count(v):
        return ""
    if isinstance(v, int) and not isinstance(v, bool) and v > MAX_COUNT:
        return (f"is {v}, past 2^128 - 1: counts are exact only up to 2^128 - 1, and no TorchScan report "
                "holds a larger one")
    return f"must be a non-negative integer, got {v!r}"


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def name_of(v: Any) -> str:
    """A value's type for messages."""
    return "null" if v is None else type(v).__name__


def other_kind(report: Any) -> str:
    """The name and reader of a TorchScan JSON document that is neither an
    AnalysisReport/FlopReport nor a BenchmarkReport/Comparison; "" otherwise."""
    if not isinstance(report, Mapping):
        return ""
    context = report.get("context")
    if isinstance(context, Mapping) and context.get("kind") == "torchscan_roofline":
        return ("a RooflineReport (from torchscan.roofline or `python3 -m torchscan roofline --output`); "
                "torchscan.render_roofline reads it (`roofline` prints it when it is made)")
    if report.get("kind") == "torchscan_job_report":
        return ("a job report (from torchscan.merge_reports or `python3 -m torchscan merge --output`); "
                "torchscan.render_job_report reads it (`merge` prints it when it is made)")
    return ""


# ---------------------------------------------------------------- RooflineReport

def _fail(where: str, message: str):
    raise ValueError(f"{where}: {message}")


def _need(obj: Mapping, key: str, path: str, where: str, check, what: str, optional: bool = False):
    if key not in obj:
        if optional:
            return None
        _fail(where, f"{path}{key} is missing; this is not a RooflineReport")
    v = obj[key]
    if not check(v):
        _fail(where, f"{path}{key} must be {what}, got {v!r}"[:300])
    return v


def _positive(v) -> bool:
    return is_number(v) and v > 0


def _non_negative(v) -> bool:
    return is_number(v) and v >= 0


def _count_or_none(v) -> bool:
    return v is None or is_count(v)


def _intensity(v) -> bool:
    return v is None or _non_negative(v)


def _str_or_none(v) -> bool:
    return v is None or isinstance(v, str)


def validate_roofline_report(report: Any, where: str) -> None:
    """TypeError/ValueError naming the field when `report` is not a
    schema-v1 RooflineReport (what render_roofline and roofline_svg read)."""
    if not isinstance(report, Mapping):
        raise TypeError(f"{where}: a RooflineReport is a dict (torchscan.roofline(...), or json.load of a saved "
                        f"one), got {name_of(report)}")
    try:
        check_depth(report, "the report")
    except ValueError as e:
        _fail(where, str(e))
    if report.get("schema_version") != 1:
        _fail(where, f"schema_version is {report.get('schema_version')!r}; this TorchScan reads RooflineReport "
                     "schema_version 1")
    context = _need(report, "context", "", where, lambda v: isinstance(v, Mapping), "an object")
    if context.get("kind") != "torchscan_roofline":
        _fail(where, f"context.kind is {context.get('kind')!r}, not 'torchscan_roofline'; this is not a "
                     "RooflineReport")
    gpu = _need(context, "gpu", "context.", where, lambda v: isinstance(v, Mapping), "an object")
    _need(gpu, "name", "context.gpu.", where, lambda v: isinstance(v, str), "a string")
    _need(context, "precision", "context.", where, lambda v: isinstance(v, str), "a string")
    # Positive, and finite in bytes/s and FLOP/s as the chart uses them.
    _need(context, "memory_bandwidth_gbps", "context.", where, lambda v: _positive(v) and _positive(v * 1e9),
          "a positive number of GB/s")
    for key in ("peak_matmul_tflops", "peak_vector_tflops"):
        _need(context, key, "context.", where, lambda v: _positive(v) and _positive(v * 1e12),
              "a positive number of TFLOP/s")
    totals = _need(report, "totals", "", where, lambda v: isinstance(v, Mapping), "an object")
    _need(totals, "flops", "totals.", where, is_count, "a count (an integer from 0 to 2^128 - 1)")
    _need(totals, "flops_status", "totals.", where, lambda v: v in ("complete", "partial"),
          "'complete' or 'partial'")
    _need(totals, "parameters", "totals.", where, _count_or_none, "a count or null", optional=True)
    for key in ("hbm_bytes_unfused", "hbm_bytes_fused", "hbm_bytes_fused_reductions"):
        _need(totals, key, "totals.", where, is_count, "a count (an integer from 0 to 2^128 - 1)")
    _need(totals, "fusion_reduction", "totals.", where, is_number, "a finite number")
    _need(totals, "arithmetic_intensity", "totals.", where, _intensity, "a non-negative number or null")
    for key in ("ridge_point",):
        _need(totals, key, "totals.", where, _positive, "a positive number")
    for key in ("compute_sol_ms", "memory_sol_ms", "sol_ms"):
        _need(totals, key, "totals.", where, _non_negative, "a non-negative number")
    _need(totals, "bottleneck", "totals.", where, lambda v: isinstance(v, str), "a string")
    if "achieved_fraction_of_sol" in totals or "actual_ms" in totals:
        _need(totals, "actual_ms", "totals.", where, _positive, "a positive number (with achieved_fraction_of_sol)")
        _need(totals, "achieved_fraction_of_sol", "totals.", where, _non_negative,
              "a non-negative number (with actual_ms)")
    for table, name_key in (("layers", "path"), ("operators", "operator")):
        rows = _need(report, table, "", where, lambda v: isinstance(v, list), "a list")
        for i, row in enumerate(rows):
            path = f"{table}[{i}]."
            if not isinstance(row, Mapping):
                _fail(where, f"{table}[{i}] must be an object, got {name_of(row)}")
            _need(row, "flops", path, where, is_count, "a count (an integer from 0 to 2^128 - 1)")
            _need(row, "arithmetic_intensity", path, where, _intensity, "a non-negative number or null",
                  optional=True)
            for key in ("compute_sol_ms", "memory_sol_ms"):
                _need(row, key, path, where, _non_negative, "a non-negative number")
            _need(row, "bound", path, where, lambda v: isinstance(v, str), "a string")
            _need(row, name_key, path, where, _str_or_none, "a string", optional=True)
            _need(row, "module_type", path, where, _str_or_none, "a string or null", optional=True)
            _need(row, "call_index", path, where, _count_or_none, "a non-negative integer", optional=True)
            if table == "layers":
                _need(row, "depth", path, where, is_count, "a non-negative integer")
    _need(report, "diagnostics", "", where, lambda v: isinstance(v, list), "a list")
