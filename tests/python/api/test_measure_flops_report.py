"""measure_flops' FlopReport: what is complete, ignored or uncounted, and the
report's shape (top-level keys, JSON round trip, no tensor values, determinism,
argument checks)."""

import json

import pytest
import torch

from tests.fixtures.parity_workloads import CASES


# ------------------------------------------------ completeness / ignored ops


def test_mm_is_complete_and_matches_hand_count(torchscan, checks):
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    report = torchscan.measure_flops(lambda: torch.mm(a, b))
    checks.assert_valid_report(report)
    # 2x4 outputs, each a 3-term dot = 2*3 FLOPs -> 8 * 6 = 48.
    assert report["by_operator"] == {"aten.mm": 48}
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 48
    _, fcm_total = checks.run_flop_counter(lambda: torch.mm(a, b))
    assert fcm_total == 48
    assert checks.uncounted(report) == {}


def test_2d_matmul_operator_is_complete(torchscan, checks):
    # aten.matmul has no formula of its own but decomposes into aten.mm only.
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    _, fcm_total = checks.run_flop_counter(lambda: a @ b)
    report = torchscan.measure_flops(lambda: a @ b)
    checks.assert_valid_report(report)
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == fcm_total == 2 * 3 * 4 * 5


def test_view_and_metadata_ops_are_ignored_not_uncounted(torchscan, checks):
    a = torch.randn(4, 3)  # used transposed: (3,4)
    b = torch.randn(20)  # viewed as (4,5)

    def workload():
        torch.mm(a.t(), b.view(4, 5).detach())
        torch.empty(2, 2)

    fcm_counts, fcm_total = checks.run_flop_counter(workload)
    report = torchscan.measure_flops(workload)
    checks.assert_valid_report(report)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["total"]["value"] == fcm_total == 2 * 3 * 4 * 5
    assert report["by_operator"] == fcm_counts
    ignored = report["ignored_operators"]
    for op in ("aten.t", "aten.view", "aten.detach", "aten.empty"):
        assert op in ignored, (op, ignored)
        assert op not in checks.uncounted(report)
    assert ignored["aten.t"]["calls"] == 1


def test_uncounted_operators_make_total_partial(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def workload():
        y = torch.mm(a, b)
        torch._trilinear(y, y, y, [], [], [], [])  # no formula: _trilinear (F.bilinear's contraction)
        torch._trilinear(y, y, y, [], [], [], [])
        return torch.ops.aten._upsample_bilinear2d_aa(y[None, None], [3, 5], False, None)  # none either

    report = torchscan.measure_flops(workload)
    checks.assert_valid_report(report)
    total = report["total"]
    assert total["status"] == "partial"
    assert total["value"] is None
    # The mm is known: 2 * 3 * 4 * 5 = 120; _trilinear/_upsample_bilinear2d_aa add nothing (a lower bound).
    assert report["by_operator"]["aten.mm"] == 120
    assert "aten._trilinear" not in report["by_operator"]
    assert "aten._upsample_bilinear2d_aa" not in report["by_operator"]
    assert total["known_value"] == sum(report["by_operator"].values())
    found = checks.uncounted(report)
    assert found.get("aten._trilinear") == 2, found
    assert found.get("aten._upsample_bilinear2d_aa") == 1, found


def test_empty_workload_is_complete_zero(torchscan, checks):
    report = torchscan.measure_flops(lambda: None)
    checks.assert_valid_report(report)
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 0 and report["total"]["known_value"] == 0
    assert report["by_operator"] == {}
    assert checks.uncounted(report) == {}


# ------------------------------------------------------------ report shape


def _fwd_bwd_workload():
    return CASES["cnn"]("cpu", True)


def test_report_top_level_shape(torchscan, checks):
    report = torchscan.measure_flops(_fwd_bwd_workload())
    checks.assert_valid_report(report)
    assert set(report) >= {
        "schema_version",
        "context",
        "total",
        "by_module",
        "by_operator",
        "ignored_operators",
        "diagnostics",
    }
    assert report["schema_version"] == 1
    assert report["context"]["method"] == "operator_dispatch"
    assert report["total"]["unit"] == "FLOPs"
    assert report["total"]["method"] == "operator_dispatch"


def test_report_is_json_serializable_and_round_trips(torchscan):
    report = torchscan.measure_flops(_fwd_bwd_workload())
    text = json.dumps(report)
    assert json.loads(text) == report


def test_report_contains_no_tensor_values(torchscan, checks):
    # A distinctive input value must not leak into the report in any form.
    a = torch.full((3, 4), 12345.678)
    b = torch.full((4, 5), 9876.5)
    report = torchscan.measure_flops(lambda: torch.relu(torch.mm(a, b)))
    checks.assert_no_tensors(report)
    text = json.dumps(report)
    for needle in ("12345", "9876", "tensor("):
        assert needle not in text, needle


def test_report_is_deterministic(torchscan, checks):
    first = torchscan.measure_flops(_fwd_bwd_workload())
    second = torchscan.measure_flops(_fwd_bwd_workload())
    checks.assert_valid_report(first)
    assert first == second
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_bad_arguments_are_rejected_with_a_clear_message(torchscan):
    with pytest.raises(TypeError, match="zero-argument callable"):
        torchscan.measure_flops(42)
    with pytest.raises(TypeError, match="custom_mapping must be a dict"):
        torchscan.measure_flops(lambda: None, custom_mapping=[torch.ops.aten.mm])
    with pytest.raises(TypeError, match="not overloads"):
        torchscan.measure_flops(lambda: None, custom_mapping={torch.ops.aten.mm.default: lambda *a, **k: 1})
    with pytest.raises(TypeError, match="must be callable"):
        torchscan.measure_flops(lambda: None, custom_mapping={torch.ops.aten.mm: 3})
    assert not torchscan.tls_mode_included()
