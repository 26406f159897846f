"""compare_reports and `python3 -m torchscan diff` on two attached servers'
scan reports: totals, request counts, and the rows aggregated across
requests compared per call (matched by path, call index and signature).

The model, Linear(64, 64) -> ReLU -> Linear(64, 10) on an input of ones of
(b, 64); per call, module view (torchscan_flops_v1: K multiplies, K - 1
adds and one bias add per output): Linear "0" 64b outputs x 128 = 8192b
FLOPs, ReLU "1" 64b, Linear "2" 10b x 128 = 1280b.
"""
import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools"))
import benchmark_serving as serving  # noqa: E402


@pytest.fixture(scope="module")
def reports(tmp_path_factory, torchscan):
    assert serving.SERVER.exists(), "run `bash tools/setup.sh --tests` (it builds the example server)"
    tmp = tmp_path_factory.mktemp("scan-diff")
    path, _ = serving.save_model("mlp", tmp)
    out = {}
    for name, requests, batch in (("three", 3, 1), ("six", 6, 1), ("batch2", 3, 2)):
        report = tmp / f"{name}.json"
        subprocess.run(serving.attached_command(report, serving.server_command(path, (batch, 64), requests, 1)),
                       check=True, capture_output=True, timeout=300)
        out[name] = report
    return out


def load(path):
    return json.loads(path.read_text())


def test_same_model_more_requests_changes_the_totals_not_the_rows(torchscan, reports):
    diff = torchscan.compare_reports(load(reports["three"]), load(reports["six"]))
    assert diff["requests"] == {"before": 3, "after": 6}
    # Per request 9536 operator FLOPs (serving/test_serving_soak.py derives them): 3 more requests.
    assert diff["totals"]["operator_flops"]["delta"] == 3 * 9536
    assert diff["request_medians"]["operator_flops"] == {"before": 9536, "after": 9536}
    # Per call, every row did the same work on both sides.
    assert diff["layers"] == {"added": [], "removed": [], "changed": []}


def test_other_shapes_are_other_rows(torchscan, reports):
    diff = torchscan.compare_reports(load(reports["three"]), load(reports["batch2"]))
    added = {row["path"]: row for row in diff["layers"]["added"]}
    removed = {row["path"]: row for row in diff["layers"]["removed"]}
    assert sorted(added) == sorted(removed) == ["", "0", "1", "2"]
    want = {"0": 8192, "1": 64, "2": 1280}  # b = 1; b = 2 doubles them
    for path, per_call in want.items():
        assert removed[path]["metrics"]["module_flops"]["value"] == per_call, path
        assert added[path]["metrics"]["module_flops"]["value"] == 2 * per_call, path
        assert added[path]["calls"] == removed[path]["calls"] == 3
        assert added[path]["input"]["shape"][0] == 2 and removed[path]["input"]["shape"][0] == 1
    assert diff["layers"]["changed"] == []


def test_the_command_line_diff_prints_the_rows(reports):
    run = subprocess.run([sys.executable, "-m", "torchscan", "diff", str(reports["three"]), str(reports["batch2"])],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "4 added, 4 removed" in run.stdout


def test_a_scan_report_against_another_kind_is_refused(torchscan, reports):
    scan = load(reports["three"])
    from torchscan.examples import SmallCNN

    analysis = torchscan.crawl_module(SmallCNN(), (3, 32, 32))
    with pytest.raises(ValueError, match="is a C[+][+] scan report and the after report is not"):
        torchscan.compare_reports(scan, analysis)
    no_aggregate = {**scan}
    del no_aggregate["aggregate"]
    with pytest.raises(ValueError, match="no layer rows aggregated across requests"):
        torchscan.compare_reports(no_aggregate, scan)
    broken = {**scan, "aggregate": {**scan["aggregate"], "layers": [{"path": "x"}]}}
    with pytest.raises(ValueError, match=r"aggregate.layers\[0\]: a row needs path"):
        torchscan.compare_reports(scan, broken)
