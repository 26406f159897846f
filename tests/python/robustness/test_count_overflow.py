"""Counts past int64 and caller formulas that return nonsense.

Meta tensors make the huge workloads free to run. Counts must be exact up
to 2**128 - 1 (Python's json reads big integers exactly) and never wrap.
"""

import json

import pytest
import torch
import torch.nn as nn


def _diagnostic(report, code, op):
    return [d for d in report["diagnostics"] if d["code"] == code and d.get("operator") == op]


def test_meta_matmul_past_2_to_64_matches_flop_counter_exactly(torchscan, checks):
    a = torch.empty(2**21, 2**21, device="meta")
    report = torchscan.measure_flops(lambda: a @ a)
    counts, total = checks.run_flop_counter(lambda: a @ a)
    # 2 * 2^21 * 2^21 * 2^21 = 2^64 (it used to wrap to 0 in int64).
    assert counts == {"aten.mm": 2**64} and total == 2**64
    assert report["by_operator"] == {"aten.mm": 2**64}
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 2**64 and report["total"]["known_value"] == 2**64
    checks.assert_metric_result(report["total"])


def test_many_huge_adds_sum_past_2_to_63_exactly(torchscan, checks):
    x = torch.empty(2**60, device="meta")
    report = torchscan.measure_flops(lambda: [x + x for _ in range(12)])
    # One FLOP per output element: 12 adds x 2^60 = 3 * 2^62 > 2^63 (a signed
    # int64 total wrapped negative here).
    assert report["by_operator"] == {"aten.add": 12 * 2**60}
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 12 * 2**60 > 2**63


def test_caller_formula_values_up_to_2_to_128_minus_1_are_exact(torchscan):
    x = torch.ones(3)
    for value in (2**64 - 1, 2**64, 2**128 - 1):
        def relu_flops(*args, out_shape=None, **kwargs):
            return value

        report = torchscan.measure_flops(lambda: torch.relu(x), custom_mapping={torch.ops.aten.relu: relu_flops})
        # 2**64 - 1 used to come back as -1 (int64 in the JSON path to C++).
        assert report["by_operator"]["aten.relu"] == value
        assert report["total"]["status"] == "complete" and report["total"]["value"] == value


def test_integral_values_of_other_types_are_accepted(torchscan):
    x = torch.ones(3)
    for value, expected in ((7.0, 7), (torch.tensor(9), 9)):
        def relu_flops(*args, out_shape=None, **kwargs):
            return value

        report = torchscan.measure_flops(lambda: torch.relu(x), custom_mapping={torch.ops.aten.relu: relu_flops})
        assert report["by_operator"]["aten.relu"] == expected


@pytest.mark.parametrize("bad, error", [
    (-100, ValueError), (2.5, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
    (2**128, ValueError), (None, TypeError), ("12", TypeError), (True, TypeError), ([1], TypeError),
])
def test_nonsense_caller_formula_values_raise_naming_operator_and_formula(torchscan, checks, bad, error):
    x = torch.ones(3)

    def nonsense_relu_flops(*args, out_shape=None, **kwargs):
        return bad

    with pytest.raises(error) as info:
        torchscan.measure_flops(lambda: torch.relu(x), custom_mapping={torch.ops.aten.relu: nonsense_relu_flops})
    message = str(info.value)
    assert "aten.relu" in message and "nonsense_relu_flops" in message, message
    # The scan was stopped before the formula ran: the thread is not left scanned.
    assert not checks.include_set_has_mode_key()


def test_nonsense_caller_formula_through_crawl_module_raises(torchscan, checks):
    def negative_relu_flops(*args, out_shape=None, **kwargs):
        return -1

    with pytest.raises(ValueError, match="negative_relu_flops.*aten.relu"):
        torchscan.crawl_module(nn.ReLU(), args=(torch.ones(2, 3),),
                               custom_mapping={torch.ops.aten.relu: negative_relu_flops})
    assert not checks.include_set_has_mode_key()


def test_crawl_module_huge_meta_linear_is_exact_in_both_views(torchscan):
    rows, features = 2**26, 2**20
    layer = nn.Linear(features, features, device="meta")
    report = torchscan.crawl_module(layer, args=(torch.empty(rows, features, device="meta"),))
    totals = report["totals"]
    # Operator view: addmm = 2 * rows * out * in = 2 * 2^26 * 2^20 * 2^20 = 2^67 (bias omitted).
    assert totals["operator_flops"]["value"] == 2**67
    # Module view: rows * out dots of `in` terms, each in multiplies + (in - 1)
    # adds, plus one bias add per output: 2^46 * (2^21 - 1) + 2^46 = 2^67.
    assert totals["module_flops"]["value"] == 2**67
    # MACs: in per output = 2^46 * 2^20 = 2^66.
    assert totals["macs"]["value"] == 2**66
    # DMAs: input 2^46 + weight 2^40 + bias 2^20 read, output 2^46 written.
    assert totals["dmas"]["value"] == 2**47 + 2**40 + 2**20
    layer_metrics = report["layers"][0]["metrics"]
    assert layer_metrics["module_flops"]["value"] == 2**67
    # The report survives a JSON round trip digit for digit.
    assert json.loads(json.dumps(report))["totals"]["macs"]["value"] == 2**66


def test_module_report_of_scan_is_exact(torchscan):
    a = torch.empty(2**21, 2**21, device="meta")
    with torchscan.scan() as s:
        a @ a
    module = s.module_report()
    # Module view of mm: 2^42 dots of 2^21 terms: 2^42 * (2 * 2^21 - 1) FLOPs, 2^63 MACs.
    assert module["totals"]["module_flops"]["value"] == 2**42 * (2**22 - 1)
    assert module["totals"]["macs"]["value"] == 2**63
    assert module["by_operator"]["aten.mm"]["macs"] == 2**63
