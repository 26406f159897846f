"""The MetricResult builder and check (torchscan._metric): every case below
is a result written by hand from the schema's rules (complete: value ==
known_value; partial: no value, known_value a lower bound; unavailable:
neither; counts exact ints from 0 to 2^128 - 1)."""

import pytest

from torchscan import _metric

MAX = 2**128 - 1  # the schema's largest count


def result(status, value, known, unit="FLOPs", **extra):
    return {"status": status, "value": value, "known_value": known, "unit": unit, "scope": "forward",
            "method": "operator_dispatch", **extra}


# ---------------------------------------------------------------- builder


def test_builder_writes_both_numbers_by_status():
    assert _metric.metric("complete", 42, unit="FLOPs", scope="forward", method="operator_dispatch") == \
        result("complete", 42, 42)
    assert _metric.metric("partial", 42, unit="FLOPs", scope="forward", method="operator_dispatch") == \
        result("partial", None, 42)
    assert _metric.metric("unavailable", unit="FLOPs", scope="forward", method="operator_dispatch") == \
        result("unavailable", None, None)
    # A complete zero stays a number (the schema's example), not null.
    assert _metric.metric("complete", 0, unit="FLOPs", scope="forward", method="m")["known_value"] == 0
    # Method defaults to not_requested; a reason comes last when given.
    built = _metric.metric("unavailable", unit="positions", scope="call", reason="token relations apply")
    assert built["method"] == "not_requested" and built["reason"] == "token relations apply"
    # Non-count units hold floats.
    assert _metric.metric("complete", 0.25, unit="seconds", scope="call", method="wall_clock")["value"] == 0.25


@pytest.mark.parametrize("status, value, unit", [
    ("done", 1, "FLOPs"),           # no such status
    ("complete", None, "FLOPs"),    # a complete result has a figure
    ("partial", None, "FLOPs"),     # a partial one has its lower bound
    ("unavailable", 3, "FLOPs"),    # an unavailable one has none
    ("complete", -1, "FLOPs"),      # counts are non-negative
    ("complete", 1.5, "bytes"),     # and whole
    ("complete", MAX + 1, "MACs"),  # and at most 2^128 - 1
    ("complete", True, "accesses"),  # a bool is not a count
])
def test_builder_refuses_what_the_schema_does_not_hold(status, value, unit):
    with pytest.raises(ValueError):
        _metric.metric(status, value, unit=unit, scope="forward", method="m")


def test_builder_holds_the_largest_count():
    assert _metric.metric("complete", MAX, unit="FLOPs", scope="forward", method="m")["value"] == MAX


# ---------------------------------------------------------------- check


@pytest.mark.parametrize("m", [
    result("complete", 42, 42),
    result("complete", 0, 0),
    result("complete", MAX, MAX),
    result("partial", None, 42),
    result("partial", None, 0),
    result("unavailable", None, None),
    result("unavailable", None, None, reason="not measured"),
    result("complete", 0.003, 0.003, unit="seconds"),
])
def test_check_accepts_results_the_schema_holds(m):
    assert _metric.problem(m, "totals.x") == ""


@pytest.mark.parametrize("m, message", [
    (result("complete", 42, 41), "totals.x is complete, so its known_value (41) must equal its value (42)"),
    (result("complete", None, 42), "totals.x is complete but its value is null"),
    (result("partial", None, None), "totals.x is partial but has no known_value (its lower bound)"),
    (result("partial", 42, 42), "totals.x is partial but has a value (42)"),
    (result("unavailable", None, 3), "totals.x is unavailable but has a known_value (3)"),
    (result("unavailable", 3, None), "totals.x is unavailable but has a value (3)"),
    (result("finished", 1, 1), "totals.x.status is 'finished'; expected one of complete, partial, unavailable"),
    (result("complete", MAX + 1, MAX + 1), "totals.x.value is " + str(MAX + 1) + ", past 2^128 - 1"),
    (result("partial", None, -4), "totals.x.known_value must be a non-negative integer, got -4"),
    (result("complete", 2.0, 2.0), "totals.x.value must be a non-negative integer, got 2.0"),  # a float is not a count
    (result("complete", float("nan"), float("nan"), unit="seconds"), "totals.x.value must be a finite number"),
    (dict(result("complete", 1, 1), unit=None), "totals.x.unit must be a string, got None"),
    (dict(result("complete", 1, 1), reason=7), "totals.x.reason must be a string, got 7"),
    (7, "totals.x is not a MetricResult object (got int)"),
])
def test_check_refuses_and_names_the_field(m, message):
    assert message in _metric.problem(m, "totals.x")


def test_check_of_the_numbers_alone():
    # described=False: a reader of the numbers only does not need unit, scope, method;
    # counts=True: the numbers are counts whatever the unit says.
    bare = {"status": "complete", "value": 5, "known_value": 5}
    assert _metric.problem(bare, "total", described=False, counts=True) == ""
    assert "total.unit must be a string" in _metric.problem(bare, "total")
    assert "must be a non-negative integer" in _metric.problem(dict(bare, value=0.5, known_value=0.5), "total",
                                                               described=False, counts=True)


def test_what_the_builder_writes_the_check_accepts():
    for status, value in (("complete", 7), ("partial", 7), ("unavailable", None)):
        built = _metric.metric(status, value, unit="bytes", scope="workload", method="m")
        assert _metric.problem(built, "m") == ""


# ---------------------------------------------------------------- handler totals


def test_handler_totals_past_the_largest_count_are_a_lower_bound():
    from torch import nn

    from tests.fixtures.custom_handlers import check_readers, crawl, row

    # Every Linear (block.fc1, block.fc2, head) says 2^128 - 1 FLOPs. The
    # total is exact only up to 2^128 - 1: fc1's 2^128 - 1 (the root and the
    # block run nothing of their own) is what the report holds, and the two
    # additions past it make it a lower bound, as AddCount does in C++.
    report = crawl({nn.Linear: lambda module, args, kwargs, output: {"module_flops": MAX}})
    assert row(report, "head")["metrics"]["module_flops"]["value"] == MAX
    total = report["totals"]["module_flops"]
    assert (total["status"], total["value"], total["known_value"]) == ("partial", None, MAX)
    check_readers(report)
