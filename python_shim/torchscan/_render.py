"""The per-layer table of an AnalysisReport, rendered from the report as
crawl_module built it (summary() and the SummaryReport it returns): the
library's renderer (reports/render.cc, RenderAnalysis) reads JSON text, and
writing a report out and parsing and validating it again costs more than
the table. The output is the library's, character for character
(tests/python/reports/test_perf_render.py renders every report of its models both
ways); saved reports, and anything that fails here, go to the library's
renderer, which also validates them."""

from __future__ import annotations

import math
from itertools import chain
from typing import Any, List, Optional

__all__ = ["render_analysis"]

_U64 = 2**64
_WIDE = 2**128  # counts are exact below this (reports/metric.h)


def _is_int(v: Any) -> bool:
    return type(v) is int  # JSON numbers; bool is not one


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _exact_count(v: Any) -> Optional[int]:
    """ExactCount: a non-negative integer count, or None."""
    if _is_int(v):
        return v if 0 <= v < _WIDE else None
    if type(v) is float:
        return int(v) if 0 <= v < 2.0**53 and math.floor(v) == v else None
    return None


def _human_number(v: float) -> str:
    units = ("", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q")
    if not math.isfinite(v):
        return "?"
    if abs(v) < 1000:
        return "%.0f" % v if v == math.floor(v) else "%.2f" % v
    unit = 0
    while abs(v) >= 1000 and unit < 10:
        v /= 1000
        unit += 1
    return "%.2f%s" % (v, units[unit])


def _human(v: Any) -> str:
    if _is_int(v):
        if 0 <= v < _U64:
            return str(v) if v < 1000 else _human_number(float(v))
        if -(2**63) <= v < 0:
            return str(v) if v > -1000 else _human_number(float(v))
        return _human_number(float(v))  # a wide count
    if type(v) is float:
        return _human_number(v)
    return "?"


def _string(obj: Any, key: str) -> str:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, str) else ""


def _find(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _metric_text(m: Any) -> str:
    if not isinstance(m, dict):
        return "n/a"
    status = _string(m, "status")
    key = "value" if status == "complete" else "known_value"
    has = key in m
    v = m.get(key)
    if status == "complete":
        return _human(v) if has else "?"
    if status == "partial":
        return ">= " + (_human(v) if has else "?")
    return "n/a"


def _shape(meta: Any) -> str:
    if type(meta) is dict and meta.get("kind") == "tensor":  # the common case: a tensor of whole dims
        shape = meta.get("shape")
        if type(shape) is list:
            for d in shape:  # a loop, not all() over a generator: this runs for every row
                if type(d) is not int:
                    break
            else:
                return "[" + ", ".join(map(str, shape)) + "]"
    if not isinstance(meta, dict):
        return "-"
    kind = _string(meta, "kind")
    if kind == "tensor":
        shape = meta.get("shape")
        dims = [_json_number(d) if _is_number(d) else "?" for d in shape] if isinstance(shape, (list, tuple)) else []
        return "[" + ", ".join(dims) + "]"
    if kind in ("tuple", "list"):
        items = meta.get("items")
        if not isinstance(items, (list, tuple)) or not items:
            return "()"
        return _shape(items[0]) + (", ..." if len(items) > 1 else "")
    return kind or "-"


def _json_number(v: Any) -> str:
    """A shape's dimension as JSON writes it (3, or 3.0 for a float)."""
    return str(v) if _is_int(v) else repr(v)


def _field_number(v: Any) -> str:
    if _is_int(v) and not -(2**63) <= v < _U64:
        return _human_number(float(v))
    if not _is_number(v):
        return "?"
    return str(v) if _is_int(v) else "%.2f" % v


def _field_text(m: Any) -> str:
    if m is None:
        return "-"
    if _string(m, "status") == "complete":
        return _field_number(_find(m, "value"))
    axes = _find(m, "axes")
    if not isinstance(axes, (list, tuple)) or not axes:
        return "-"
    return "x".join(_field_number(_find(a, "value")) for a in axes)


def _bytes(b: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = 0
    while b >= 1024 and unit < 5:
        b /= 1024
        unit += 1
    return "%.0fB" % b if unit == 0 else "%.2f%s" % (b, units[unit])


def _bytes_text(m: Any) -> str:
    if not isinstance(m, dict):
        return "-"
    status = _string(m, "status")
    v = m.get("value" if status == "complete" else "known_value")
    if status == "unavailable" or not _is_number(v):
        return "n/a"
    text = _bytes(float(v))  # type: ignore[arg-type]  # a number: checked above
    return ">= " + text if status == "partial" else text


def _grouped(c: int) -> str:
    return f"{c:,}"


def _grouped_value(v: Any) -> str:
    if v is None:
        return "?"
    c = _exact_count(v)
    return _grouped(c) if c is not None else _human(v)


def _human_wide(c: int) -> str:
    return _human(c) if c < _U64 else _human_number(float(c))


class _MetricSum:
    __slots__ = ("present", "valued", "incomplete", "known")

    def __init__(self):
        self.present = self.valued = self.incomplete = False
        self.known = 0

    def add(self, m: Any) -> None:
        if not isinstance(m, dict):
            return
        self.present = True
        status = _string(m, "status")
        if status != "complete":
            self.incomplete = True
        if status == "unavailable":
            return
        c = _exact_count(m.get("value" if status == "complete" else "known_value"))
        if c is None:
            self.incomplete = True
            return
        self.valued = True
        self.known += c
        if self.known >= _WIDE:  # past 2^128 - 1: the largest count, a lower bound
            self.known = _WIDE - 1
            self.incomplete = True

    def text(self) -> str:
        if not self.present:
            return "-"
        if not self.valued:
            return "n/a"
        return ">= " + _human_wide(self.known) if self.incomplete else _human_wide(self.known)


def _sum_text(m: Any) -> str:
    """_MetricSum's text after adding `m` alone (a row that folds no other)."""
    if not isinstance(m, dict):
        return "-"
    status = m.get("status")  # anything but these two strings reads as _string's "" does
    if status == "unavailable":
        return "n/a"
    complete = status == "complete"
    v = m.get("value" if complete else "known_value")
    if type(v) is int and 0 <= v < _U64:  # the common count, as _human_wide writes it
        text = str(v) if v < 1000 else _human_number(float(v))
    else:
        c = _exact_count(v)
        if c is None:
            return "n/a"
        text = _human_wide(c)
    return text if complete else ">= " + text


_ROW_METRICS = ("module_flops", "macs", "dmas")
_MAX_INDENT = 32


def _table(rows: List[List[str]]) -> str:
    # Widths in bytes, as the library counts them. The common table is all
    # ASCII, where characters are bytes: each line is then one format call
    # (the header is never empty, so no width is 0).
    if all(map(str.isascii, chain.from_iterable(rows))):
        width = [max(map(len, column)) for column in zip(*rows)]
        line = "  ".join(("{:<%d}" if c <= 2 else "{:>%d}") % w for c, w in enumerate(width)) + "\n"
        lines = [line.format(*r) for r in rows]
        lines.insert(1, "-" * (sum(width) + 2 * len(width) - 2) + "\n")
        return "".join(lines)
    sizes = [[len(cell) if cell.isascii() else len(cell.encode()) for cell in r] for r in rows]
    width = [max(column) for column in zip(*sizes)]
    out = []
    columns = range(len(width))
    for i, (r, n) in enumerate(zip(rows, sizes)):
        # Left-aligned: the label, the type and the output shape; the figures
        # right-aligned. Padded to the width in bytes: a cell's characters
        # plus the bytes it lacks.
        out.append("  ".join([r[c].ljust(width[c] - n[c] + len(r[c])) if c <= 2 else
                              r[c].rjust(width[c] - n[c] + len(r[c])) for c in columns]) + "\n")
        if i == 0:
            out.append("-" * (sum(width) + 2 * len(width) - 2) + "\n")
    return "".join(out)


def _depth(layer: dict) -> int:
    d = layer.get("depth")
    return d if isinstance(d, int) and _is_int(d) and 0 <= d < _U64 else 0


def render_analysis(r: dict, max_depth: int = -1, receptive_field: bool = False) -> str:
    """RenderAnalysis of reports/render.cc on a report dict; max_depth < 0:
    every layer."""
    rows = [["Layer", "Type", "Output shape", "Params", "FLOPs", "MACs", "DMAs"]]
    if receptive_field:
        rows[0] += ["RF", "Stride", "Padding"]
    layers = r["layers"]
    memory = any(isinstance(l.get("metrics"), dict) and "peak_memory" in l["metrics"] for l in layers)
    if memory:
        rows[0] += ["Peak mem", "Kept"]
    # [layer, its depth, sums (None: the layer's own metrics alone), parameters, parameters_known, repeat]
    visible: list = []
    folded = False
    shared_notes: List[str] = []
    shared_rows = 0
    sums_rows = max_depth >= 0  # rows may fold deeper layers into theirs: their metrics are summed
    for l in layers:
        depth = _depth(l)
        call = l.get("call_index")
        repeat = _is_int(call) and call != 0
        if not (max_depth >= 0 and depth > max_depth):
            visible.append([l, depth, [_MetricSum(), _MetricSum(), _MetricSum()] if sums_rows else None, 0, True,
                            repeat])
        elif not visible:
            continue
        else:
            folded = True
        row = visible[-1]
        if sums_rows:
            found = l.get("metrics")
            for k in range(3):
                row[2][k].add(found.get(_ROW_METRICS[k]) if isinstance(found, dict) else None)
        if not repeat:  # AddParameters
            own = _exact_count(l.get("parameters")) if "parameters" in l else None
            if own is None:
                row[4] = False
            else:
                if "shared_parameters" in l:
                    s = _exact_count(l["shared_parameters"])
                    if s is not None:
                        own -= min(s, own)
                row[3] += own
                if row[3] >= _WIDE:
                    row[4] = False
        shared = l.get("shared_parameters")
        if shared is not None and (_exact_count(shared) or 0) > 0:
            shared_rows += 1
            if shared_rows <= 5:
                path = _string(l, "path")
                owner = _string(l, "shared_with")
                shared_notes.append(f"{path or '(root)'} shares {_grouped_value(shared)} with {owner or '(root)'}")
    for l, depth, sums, parameters, known, repeat in visible:
        path = _string(l, "path")
        label = " " * (2 * min(depth, _MAX_INDENT)) + (path or "(root)") + \
            (" #" + str(l["call_index"]) if repeat else "")
        m = l.get("metrics")
        if not isinstance(m, dict):
            m = {}
        params = "(recursive)" if repeat else _grouped(parameters) if known else "?"
        row = [label, _string(l, "type"), _shape(l.get("output")), params]
        if sums is None:  # _ROW_METRICS, written out: no comprehension's frame per row
            row += (_sum_text(m.get("module_flops")), _sum_text(m.get("macs")), _sum_text(m.get("dmas")))
        else:
            row += [s.text() for s in sums]
        if receptive_field:
            row += [_field_text(m.get("receptive_field")), _field_text(m.get("effective_stride")),
                    _field_text(m.get("effective_padding"))]
        if memory:
            row += [_bytes_text(m.get("peak_memory")), _bytes_text(m.get("allocated_bytes"))]
        rows.append(row)
    t = r["totals"]

    def metric(k: str) -> str:
        return _metric_text(t[k]) if k in t else "n/a"

    def count(k: str) -> str:
        return _grouped_value(t.get(k))

    def nbytes(k: str) -> str:
        v = t.get(k)
        return _bytes(float(v)) if _is_number(v) else "?"

    out = (f"Rows at depth {max_depth} include the layers below them (FLOPs, MACs, DMAs, parameters); "
           "the rows add up to the totals.\n") if folded else \
        "Each row counts its own work and parameters, not its sublayers'; the rows add up to the totals.\n"
    out += _table(rows)
    if shared_notes:
        more = f"; and {shared_rows - len(shared_notes)} more" if shared_rows > len(shared_notes) else ""
        out += "Shared parameters are counted once, at their first row: " + "; ".join(shared_notes) + more + "\n"
    rows_known = all(v[4] for v in visible)
    in_rows = sum(v[3] for v in visible)
    total_params = _exact_count(t["parameters"]) if "parameters" in t else None
    if rows_known and total_params is not None and total_params > in_rows:
        out += f"{_grouped(total_params - in_rows)} parameters belong to modules that did not run in this forward: " \
               "in the total, in no row\n"
    out += "\n"
    out += (f"Parameters: {count('parameters')} (trainable {count('trainable_parameters')}, frozen "
            f"{count('frozen_parameters')}), {nbytes('parameter_bytes')}; buffers {count('buffer_elements')} "
            f"({nbytes('buffer_bytes')})\n")
    out += (f"Module view (TorchScan conventions): {metric('module_flops')} FLOPs, {metric('macs')} MACs, "
            f"{metric('dmas')} DMAs\n")
    out += f"Operator view (PyTorch dispatch): {metric('operator_flops')} FLOPs\n"
    if memory or "peak_memory" in t:
        out += (f"Memory (allocator reports): peak {_bytes_text(t.get('peak_memory'))} (Peak mem: most bytes "
                "allocated inside a layer call alive at once; Kept: still alive when it returned)\n")
    diagnostics = r.get("diagnostics")
    n = len(diagnostics) if isinstance(diagnostics, (list, tuple)) else 0
    out += f"Diagnostics: {n}" + (" (\">=\" marks a partial value: a lower bound, some work has no formula)\n"
                                  if n else "\n")
    return out
