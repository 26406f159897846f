"""measure_flops' custom_mapping: caller formulas that count an operator the
built-in table does not, override a built-in row, and stay scoped to one scan."""

import math

import torch



# --------------------------------------------------------- custom_mapping


def _elementwise_flop(x_shape, *args, out_shape=None, **kwargs):
    # FlopCounterMode-style formula: one FLOP per input element.
    return math.prod(x_shape)


def test_custom_mapping_counts_previously_uncounted_op(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    seen = []

    def i0_flop(*args, out_shape=None, **kwargs):
        seen.append((args, out_shape))
        return math.prod(args[0])

    def workload():
        torch.i0(torch.mm(a, b))

    mapping = {torch.ops.aten.i0: i0_flop}
    report = torchscan.measure_flops(workload, custom_mapping=mapping)
    checks.assert_valid_report(report)
    # mm: 2*3*4*5 = 120; i0: the caller's one FLOP per element of its (3,5) input = 15.
    assert report["by_operator"] == {"aten.mm": 120, "aten.i0": 15}
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["total"]["value"] == 135
    assert "aten.i0" not in checks.uncounted(report)
    # The formula saw shapes, not tensors (FlopCounterMode's contract).
    assert seen, "custom formula was never called"
    args, out_shape = seen[0]
    assert args[0] == torch.Size([3, 5]) and isinstance(args[0], torch.Size)
    assert out_shape == torch.Size([3, 5])
    assert not any(isinstance(x, torch.Tensor) for x in args)
    # FlopCounterMode with the same mapping agrees.
    fcm_counts, _ = checks.run_flop_counter(workload, custom_mapping={torch.ops.aten.i0: _elementwise_flop})
    checks.assert_parity(report, fcm_counts)


def test_custom_mapping_overrides_builtin_formula(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    bias = torch.randn(5)

    def workload():
        for _ in range(3):
            torch.mm(a, b)
        torch.addmm(bias, a, b)

    report = torchscan.measure_flops(workload, custom_mapping={torch.ops.aten.mm: lambda *a, **k: 7})
    checks.assert_valid_report(report)
    # Caller formula wins over the built-in one: 3 calls x 7.
    assert report["by_operator"]["aten.mm"] == 3 * 7
    # Other operators keep their built-in (FlopCounterMode) formulas.
    fcm_counts, _ = checks.run_flop_counter(workload)
    assert report["by_operator"]["aten.addmm"] == fcm_counts["aten.addmm"] == 120
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 21 + 120


def test_custom_mapping_is_scoped_to_one_call(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def workload():
        y = torch.mm(a, b)
        torch._trilinear(y, y, y, [], [], [], [])

    mapped = torchscan.measure_flops(
        workload,
        custom_mapping={torch.ops.aten._trilinear: _elementwise_flop, torch.ops.aten.mm: lambda *a, **k: 7},
    )
    assert mapped["by_operator"] == {"aten.mm": 7, "aten._trilinear": 15}

    plain = torchscan.measure_flops(workload)
    checks.assert_valid_report(plain)
    assert plain["by_operator"]["aten.mm"] == 120  # built-in mm again
    assert "aten._trilinear" not in plain["by_operator"]
    assert plain["total"]["status"] == "partial"
    assert checks.uncounted(plain).get("aten._trilinear") == 1

    with torchscan.scan() as s:
        workload()
    assert s.report()["by_operator"] == plain["by_operator"]


def test_custom_mapping_does_not_leak_across_nested_scans(torchscan, checks):
    # Each mapping belongs to the scan it was given to; the enclosing or the
    # nested scan uses the built-in mm formula (2*3*4*5 = 120) for the same call.
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    seven = {torch.ops.aten.mm: lambda *a, **k: 7}

    with torchscan.scan() as outer:
        inner = torchscan.measure_flops(lambda: torch.mm(a, b), custom_mapping=seven)
    assert inner["by_operator"] == {"aten.mm": 7}
    assert outer.report()["by_operator"] == {"aten.mm": 120}

    with torchscan.scan(custom_mapping=seven) as outer:
        inner = torchscan.measure_flops(lambda: torch.mm(a, b))
    assert inner["by_operator"] == {"aten.mm": 120}
    assert outer.report()["by_operator"] == {"aten.mm": 7}


def test_scan_accepts_custom_mapping(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with torchscan.scan(custom_mapping={torch.ops.aten.i0: _elementwise_flop}) as s:
        torch.i0(torch.mm(a, b))
    report = s.report()
    checks.assert_valid_report(report)
    assert report["by_operator"] == {"aten.mm": 120, "aten.i0": 15}
    assert report["total"]["status"] == "complete"


def test_custom_mapping_for_unused_op_has_no_effect(torchscan, checks):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    report = torchscan.measure_flops(
        lambda: torch.mm(a, b), custom_mapping={torch.ops.aten.i0: _elementwise_flop}
    )
    checks.assert_valid_report(report)
    assert report["by_operator"] == {"aten.mm": 120}
    assert report["total"]["status"] == "complete"
