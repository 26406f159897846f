"""tools/zoo_reports.py's normalisation and comparison, on hand-made
documents (the tool's full run over the zoo takes about 30 s and is run by
hand around behaviour-preserving changes)."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "zoo_reports.py"


@pytest.fixture(scope="module")
def zoo_reports():
    spec = importlib.util.spec_from_file_location("zoo_reports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slice(name, ts, dur, cat="operator", **args):
    return {"ph": "X", "pid": 1, "tid": 1, "name": name, "cat": cat, "ts": ts, "dur": dur, "args": args}


def test_trace_shape_nests_by_containment_without_times(zoo_reports):
    # (root) [0, 10 us] holds linear [1, 5] (which holds t [2, 3]) and relu [5, 6]:
    # relu starts on the nanosecond linear ends, so it is linear's sibling.
    events = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "scanned thread"}},
              _slice("(root)", 0.0, 10.0, cat="module"), _slice("aten.linear", 1.0, 4.0, flops=8),
              _slice("aten.t", 2.0, 1.0), _slice("aten.relu", 5.0, 1.0)]
    fast = zoo_reports.trace_shape({"traceEvents": events})
    slow = zoo_reports.trace_shape({"traceEvents": [dict(e, ts=e.get("ts", 0) * 3, dur=e.get("dur", 0) * 3)
                                                    if e["ph"] == "X" else e for e in events]})
    assert fast == slow  # other times, same shape
    tree = fast["tracks"]["pid 1 tid 1"]["tree"]
    assert [n["name"] for n in tree] == ["(root)"]
    assert [n["name"] for n in tree[0]["children"]] == ["aten.linear", "aten.relu"]
    assert [n["name"] for n in tree[0]["children"][0]["children"]] == ["aten.t"]
    assert tree[0]["children"][0]["args"] == {"flops": 8}
    assert fast["event_counts"] == {"M": 1, "X": 4}
    assert '"ts"' not in json.dumps(fast) and '"dur"' not in json.dumps(fast)


def test_normalise_drops_clock_values_only(zoo_reports):
    report = {"total": {"value": 12, "unit": "FLOPs"}, "timing": {"elapsed_s": 0.25, "wall_s": 1.0, "runs": 3},
              "ratio": 0.1 + 0.2}
    assert zoo_reports.normalise(report) == {"total": {"value": 12, "unit": "FLOPs"}, "timing": {"runs": 3},
                                             "ratio": 0.3}


def test_compare_exits_non_zero_on_any_difference(zoo_reports, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "m.flops.json").write_text(json.dumps({"total": {"value": 12}}))
    (b / "m.flops.json").write_text(json.dumps({"total": {"value": 12}}))
    assert zoo_reports.main(["--compare", str(a), str(b)]) == 0
    (b / "m.flops.json").write_text(json.dumps({"total": {"value": 13}}))
    (b / "m.trace.json").write_text("{}")
    assert zoo_reports.main(["--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert ".total.value: 12 != 13" in out and "m.trace.json: only in" in out
