"""The coverage audit and the torch-upgrade drift oracle."""

import copy
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import coverage_audit  # noqa: E402

BASELINE = os.path.join(ROOT, "tools", "audit", "torch-2.13.0.json")


@pytest.fixture(scope="module")
def audit(torchscan):
    return coverage_audit.run_audit()


def test_footing_in_this_release(audit):
    footing = audit["footing"]
    assert footing["mode_key"] == "TESTING_ONLY_GenericMode"
    assert footing["fallback_registered"] and footing["fallback_on_mode_key"]


def test_installed_torch_matches_the_committed_baseline(audit):
    drift = coverage_audit.diff(coverage_audit.load(BASELINE), audit)
    assert coverage_audit.is_empty(drift), coverage_audit.render_diff(drift)


def test_drift_oracle_fails_on_a_removed_or_reclassified_operator(audit, tmp_path, capsys):
    baseline = coverage_audit.load(BASELINE)
    edited = copy.deepcopy(baseline)
    del edited["operators"]["aten::mm"]
    edited["operators"]["aten::relu"]["class"] = "unsupported"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    assert coverage_audit.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "added    aten::mm" in out  # present now, missing from the edited baseline
    assert "changed  aten::relu" in out and "class: unsupported -> operator_formula" in out
    # And it passes against the real baseline.
    assert coverage_audit.main(["--check", BASELINE]) == 0


def test_core_opset_and_model_zoo_have_no_unsupported_operator(audit):
    summary = coverage_audit.summarize(audit, coverage_audit.executed_by_zoo())
    assert summary["core"] > 150
    assert summary["core_unsupported"] == []
    assert summary["executed"] > 50
    assert summary["executed_unsupported"] == []


def test_formula_claims_are_backed_by_the_registry(torchscan, audit):
    from torchscan._library import Session

    table = json.loads(Session.formula_table())
    rows = {f["op"] for f in table["operator_formulas"]}
    module_rows = set(table["module_formulas"])
    exclusions = {e["op"] for e in table["exclusions"]}

    def functional(name):
        return name[:-1] if name.endswith("_") and not name.endswith("__") else name

    for key, op in audit["operators"].items():
        name = key.split(".", 1)[0]  # "aten::add.Tensor" -> "aten::add"
        if op["class"] == "operator_formula":
            assert name in rows or functional(name) in rows, key
        if op["class"] == "excluded":
            assert name in exclusions, key
        if op["class"] == "module_formula":
            assert name in module_rows or functional(name) in module_rows, key
    # No registry row names an operator this torch does not register.
    registered = {key.split(".", 1)[0] for key in audit["operators"]}
    # TorchScan's own marker operators are rows too, but not PyTorch's to audit.
    ours = {r for r in rows if r.startswith("torchscan::")}
    assert ours == {"torchscan::compiled_region"} and hasattr(torch.ops.torchscan, "compiled_region")
    assert rows - ours - registered == set()
    assert exclusions - registered == set()
