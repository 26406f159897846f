"""compare_benchmarks and the rendering of BenchmarkReports and
BenchmarkComparisons (report schema "BenchmarkComparison"), on reports whose
block times and figures the test chooses."""

import copy
import json

import pytest
import torch

from tests.fixtures.workload_testing import MIB, ts  # noqa: F401  (ts is a fixture)


# ---------------------------------------------------------------- comparison


def _fake(blocks_ms, number=1, threads=2, extra=None):
    """A BenchmarkReport with chosen block times (ms per block of `number` calls)."""
    from torchscan.workload import _block_statistics, _metric

    raw = [b / 1e3 for b in blocks_ms]
    s = _block_statistics(raw, number)
    totals = {"latency": _metric("complete", s["median"], unit="seconds", scope="call",
                                 method="blocked_timer:median_of_block_averages"),
              "latency_iqr": _metric("complete", s["iqr"], unit="seconds", scope="call",
                                     method="blocked_timer:iqr_of_block_averages"),
              "peak_memory": _metric("complete", 8 * MIB, unit="bytes", scope="workload",
                                     method="torch.profiler.profile(profile_memory=True):memory_events")}
    totals.update(extra or {})
    return {"schema_version": 1, "context": {"device": "cpu", "threads": {"torch_num_threads": threads}},
            "inputs": {"source": "none", "args": {"kind": "tuple", "items": []}, "kwargs": {"kind": "mapping",
                                                                                            "items": {}}},
            "measurement": {"number_per_run": number, "raw_times_seconds": raw,
                            "measured_calls": number * len(raw)},
            "totals": totals, "diagnostics": []}


def test_compare_passing_check_gives_deltas(ts):
    before, after = _fake([10, 11, 12, 13]), _fake([5, 6, 7, 8])
    after["totals"]["peak_memory"]["value"] = after["totals"]["peak_memory"]["known_value"] = 6 * MIB
    ran = [0]

    def check():
        ran[0] += 1
        torch.testing.assert_close(torch.ones(3), torch.ones(3))

    c = ts.compare_benchmarks(before, after, check=check)
    assert ran[0] == 1
    assert set(c) >= {"schema_version", "before", "after", "output_check", "totals", "context_changes",
                      "latency_change"}
    assert c["before"] == before and c["after"] == after
    assert c["output_check"]["status"] == "passed"
    # Medians: before 11.5 ms (11+12)/2, after 6.5 ms; delta -5 ms.
    assert c["totals"]["latency"]["delta"] == pytest.approx(-0.005)
    assert c["totals"]["peak_memory"]["delta"] == -2 * MIB
    lat = c["latency_change"]
    # IQRs: before [10.75, 12.25] ms, after [5.75, 7.25] ms: after's q3 <
    # before's q1, so "faster"; ratio 6.5 / 11.5.
    assert lat["before_iqr_seconds"] == pytest.approx([0.01075, 0.01225])
    assert lat["after_iqr_seconds"] == pytest.approx([0.00575, 0.00725])
    assert lat["iqr_overlap"] is False and lat["assessment"] == "faster"
    assert lat["ratio"] == pytest.approx(6.5 / 11.5)
    assert "not a significance test" in lat["rule"]
    assert c["context_changes"] == []
    json.dumps(c, allow_nan=False)
    # Reversed: slower. Overlapping IQRs: no change claimed.
    assert ts.compare_benchmarks(after, before, check=True)["latency_change"]["assessment"] == "slower"
    c = ts.compare_benchmarks(_fake([10, 11, 12, 13]), _fake([11, 12, 13, 14]), check=True)
    # after [11.75, 13.25] ms overlaps before [10.75, 12.25] ms.
    assert c["latency_change"]["iqr_overlap"] is True and c["latency_change"]["assessment"] == "overlapping"


@pytest.mark.parametrize("check, message", [(lambda: False, "returned False"),
                                            (lambda: torch.testing.assert_close(torch.ones(2), torch.zeros(2)),
                                             "AssertionError"),
                                            (False, "do not match"), (None, "no output check")])
def test_compare_failed_or_missing_check_withholds_deltas(ts, check, message):
    before, after = _fake([10, 11, 12, 13]), _fake([5, 6, 7, 8], threads=1)
    c = ts.compare_benchmarks(before, after, check=check)
    assert c["output_check"]["status"] == ("not_checked" if check is None else "failed")
    assert message in c["output_check"]["message"]
    for name, diff in c["totals"].items():
        assert diff["delta"] is None and diff["delta_withheld"]
        assert diff["before"] == before["totals"][name] and diff["after"] == after["totals"][name]  # kept
    lat = c["latency_change"]
    assert lat["ratio"] is None and lat["assessment"] is None and lat["withheld"]
    assert lat["before_median_seconds"] == pytest.approx(0.0115)  # measurements kept
    assert c["context_changes"] == [{"field": "threads.torch_num_threads", "before": 2, "after": 1}]
    assert lat["context_differs"] == ["threads.torch_num_threads"]
    assert c["diagnostics"][0]["code"].startswith("output_check_")


def test_compare_incompatible_and_partial_metrics(ts):
    from torchscan.workload import _metric

    before = _fake([1, 2, 3, 4], extra={"operator_flops": _metric("partial", 40, unit="FLOPs",
                                                                  scope="workload", method="operator_dispatch")})
    after = _fake([1, 2, 3, 4], extra={"operator_flops": _metric("complete", 50, unit="FLOPs",
                                                                 scope="workload", method="operator_dispatch")})
    after["totals"]["peak_memory"]["method"] = "torch.cuda.max_memory_allocated"
    c = ts.compare_benchmarks(before, after, check=True)
    assert c["totals"]["operator_flops"]["status"] == "partial" and c["totals"]["operator_flops"]["delta"] is None
    assert "different methods" in c["totals"]["peak_memory"]["delta_withheld"]
    del after["totals"]["latency_iqr"]
    c = ts.compare_benchmarks(before, after, check=True)
    assert c["totals"]["latency_iqr"]["after"] is None and c["totals"]["latency_iqr"]["delta"] is None
    # Timing not measured on one side (measure_workload without latency): no latency change.
    after["measurement"] = {}
    lat = ts.compare_benchmarks(before, after, check=True)["latency_change"]
    assert lat["status"] == "unavailable" and lat["withheld"] == "timing missing on the after side"


def test_compare_rejects_malformed_reports(ts):
    good = _fake([1, 2, 3])
    with pytest.raises(ValueError, match="schema_version 2 is not supported"):
        ts.compare_benchmarks(dict(good, schema_version=2), good, check=True)
    with pytest.raises(ValueError, match="the after report: schema_version is '1', not an integer"):
        ts.compare_benchmarks(good, dict(good, schema_version="1"), check=True)
    with pytest.raises(TypeError, match="is a dict"):
        ts.compare_benchmarks([], good)
    with pytest.raises(ValueError, match="use compare_reports"):
        ts.compare_benchmarks(ts.measure_flops(lambda: torch.ones(2) + 1), good)
    bad = copy.deepcopy(good)
    bad["totals"]["latency"]["status"] = "done"
    with pytest.raises(ValueError, match=r"the before report: totals.latency.status is 'done'"):
        ts.compare_benchmarks(bad, good)
    bad = copy.deepcopy(good)
    bad["measurement"]["measured_calls"] = 7
    with pytest.raises(ValueError, match="measured_calls"):
        ts.compare_benchmarks(good, bad)
    with pytest.raises(ValueError, match="has no 'diagnostics'"):
        ts.compare_benchmarks({k: v for k, v in good.items() if k != "diagnostics"}, good)
    with pytest.raises(TypeError, match="check must be a zero-argument callable"):
        ts.compare_benchmarks(good, good, check="yes")
    with pytest.raises(TypeError, match="returns None or True"):
        ts.compare_benchmarks(good, good, check=lambda: torch.ones(2))


# ---------------------------------------------------------------- rendering


def test_render_reports_and_comparisons_without_remeasuring(ts):
    calls = [0]

    def workload():
        calls[0] += 1
        return torch.empty(2 * MIB, dtype=torch.uint8)

    r = ts.measure_workload(workload, latency=True, number=1, repeats=4, warmup=0)
    n = calls[0]
    text = ts.render_report(json.loads(json.dumps(r)))  # a saved report
    assert calls[0] == n  # nothing re-measured
    assert "Latency (median)" in text and " ms" in text
    # The 2 MiB output: 2.000 MiB (hand value; the peak may exceed it slightly).
    assert "Peak memory" in text and "MiB" in text
    assert f"{r['totals']['peak_memory']['value']:,} bytes" in text

    ran = [0]

    def check():
        ran[0] += 1
        return False

    c = ts.compare_benchmarks(r, r, check=check)
    text = ts.render_report(json.loads(json.dumps(c)))
    assert ran[0] == 1  # the saved check is rendered, not rerun
    assert "Output check: failed" in text and "withheld (the output check did not pass)" in text
    text = ts.render_report(ts.compare_benchmarks(_fake([10, 11, 12, 13]), _fake([5, 6, 7, 8]), check=True))
    assert "-5.000 ms" in text and "faster" in text and "-0.000 MiB" not in text

    bad = copy.deepcopy(r)
    bad["schema_version"] = 3
    with pytest.raises(ValueError, match="schema_version 3 is not supported"):
        ts.render_report(bad)
    bad = copy.deepcopy(c)
    bad["output_check"]["status"] = "maybe"
    with pytest.raises(ValueError, match="output_check.status"):
        ts.render_report(bad)
    # Model reports still go to the C++ renderer.
    assert "FLOPs" in ts.render_report(ts.measure_flops(lambda: torch.ones(2) + 1))
