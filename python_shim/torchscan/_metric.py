"""MetricResult (report schema "MetricResult") on the Python side: the one
builder of a result and the one check of a result read back.

The invariants, which the C++ writers and reports/validate.cc hold too:

- complete: ``value`` is the figure and ``known_value`` equals it;
- partial: ``value`` is null and ``known_value`` is the counted work, a lower
  bound of the whole;
- unavailable: both are null (a ``reason`` may say why);
- a count (FLOPs, MACs, accesses, bytes) is an exact int from 0 to
  2^128 - 1 (torchscan._readers); other units hold finite numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from torchscan._readers import MAX_COUNT, count_problem, is_number

__all__ = ["STATUSES", "COUNT_UNITS", "MAX_COUNT", "metric", "problem", "status_problem"]

STATUSES = ("complete", "partial", "unavailable")
# Units whose values are counts.
COUNT_UNITS = ("FLOPs", "bytes", "MACs", "accesses")


def metric(status: str, value: Any = None, *, unit: str, scope: str, method: str = "not_requested",
           reason: Optional[str] = None) -> dict:
    """A MetricResult: `value` is the complete figure or a partial result's
    lower bound; an unavailable result takes none. ValueError when the three
    do not fit the invariants (a mistake of the caller, not of the model)."""
    if status not in STATUSES:
        raise ValueError(f"a MetricResult's status is one of {', '.join(STATUSES)}, not {status!r}")
    if (value is None) != (status == "unavailable"):
        raise ValueError(f"a {status} MetricResult {'takes no' if value is not None else 'needs a'} value")
    if value is not None and unit in COUNT_UNITS and count_problem(value):
        raise ValueError(f"a MetricResult in {unit}: the value {count_problem(value)}")
    result = {"status": status, "value": value if status == "complete" else None, "known_value": value,
              "unit": unit, "scope": scope, "method": method}
    if reason is not None:
        result["reason"] = reason
    return result


def status_problem(status: Any, value: Any, known: Any, path: str) -> str:
    """Why status, value and known_value do not fit together ("" when they
    do), as a sentence about `path`."""
    if status not in STATUSES:
        return f"{path}.status is {status!r}; expected one of {', '.join(STATUSES)}"
    if status == "complete":
        if value is None:
            return f"{path} is complete but its value is null"
        if known != value:
            return f"{path} is complete, so its known_value ({known!r}) must equal its value ({value!r})"
    elif value is not None:
        if status == "partial":
            return (f"{path} is partial but has a value ({value!r}); a partial result has none: its lower bound "
                    "is its known_value")
        return f"{path} is unavailable but has a value ({value!r}); only complete results carry one"
    elif status == "partial" and known is None:
        return f"{path} is partial but has no known_value (its lower bound)"
    elif status == "unavailable" and known is not None:
        return f"{path} is unavailable but has a known_value ({known!r}); an unavailable result has none"
    return ""


def problem(m: Any, path: str, *, described: bool = True, counts: Optional[bool] = None) -> str:
    """Why `m`, read back from a report at `path`, is not a MetricResult (""
    when it is). described: unit, scope and method must be strings (readers
    that use only the numbers pass False). counts: whether value and
    known_value must be counts (None: when the unit is a count unit)."""
    if not isinstance(m, Mapping):
        return f"{path} is not a MetricResult object (got {type(m).__name__})"
    status = m.get("status")
    if status not in STATUSES:
        return status_problem(status, None, None, path)
    if described:
        for key in ("unit", "scope", "method"):
            if not isinstance(m.get(key), str):
                return f"{path}.{key} must be a string, got {m.get(key)!r}"
    if "reason" in m and m["reason"] is not None and not isinstance(m["reason"], str):
        return f"{path}.reason must be a string, got {m['reason']!r}"
    if counts is None:
        counts = m.get("unit") in COUNT_UNITS
    for key in ("value", "known_value"):
        v = m.get(key)
        if v is None:
            continue
        if counts:
            if count_problem(v):
                return f"{path}.{key} {count_problem(v)}"
        elif not is_number(v):
            return f"{path}.{key} must be a finite number or null, got {v!r}"
    return status_problem(status, m.get("value"), m.get("known_value"), path)

