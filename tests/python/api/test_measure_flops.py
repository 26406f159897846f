"""measure_flops: parity with FlopCounterMode, completeness, custom_mapping,
and the shape of the FlopReport.

Parity workloads are built by factories `factory(device, backward)` that make
a *fresh* model and inputs on every call, so FlopCounterMode and TorchScan
each run on an identical, untouched copy (no accumulated .grad, no shared
state between the two runs).
"""

import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import sdpa_backward_flop_count

DEVICES = ["cpu", "meta"]
SDPA_CPU = "aten._scaled_dot_product_flash_attention_for_cpu"
SDPA_CPU_BWD = "aten._scaled_dot_product_flash_attention_for_cpu_backward"


# ------------------------------------------------------------ workloads


class AttentionBlock(nn.Module):
    """Fused qkv projection -> SDPA -> output projection."""

    def __init__(self, embed=8, heads=2, causal=False):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(embed, 3 * embed)
        self.out = nn.Linear(embed, embed)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (y.view(b, t, self.heads, e // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, e))


def small_cnn():
    # (1,3,6,6) -> conv 8x6x6 -> grouped 8x6x6 -> depthwise 8x6x6
    #   -> transposed (6-1)*2 - 2*1 + 3 + 1 = 12 -> 4x12x12 = 576 -> linear 5
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=2),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
        nn.Flatten(),
        nn.Linear(4 * 12 * 12, 5),
    )


# name -> (module builder, input shape)
MODULE_CASES = {
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (3, 8)),
    "conv_plain": (lambda: nn.Conv2d(4, 6, 3, padding=1), (2, 4, 6, 6)),
    "conv_grouped": (lambda: nn.Conv2d(4, 6, 3, stride=2, groups=2), (2, 4, 7, 7)),
    "conv_depthwise": (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), (2, 4, 6, 6)),
    "conv_transposed": (
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
        (2, 4, 5, 5),
    ),
    # The reference's transposed-convolution example (1-D, grouped).
    "conv_transposed_1d_grouped": (
        lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        (2, 4, 3),
    ),
    "cnn": (small_cnn, (1, 3, 6, 6)),
    "attention_noncausal": (lambda: AttentionBlock(causal=False), (2, 3, 8)),
    "attention_causal": (lambda: AttentionBlock(causal=True), (2, 3, 8)),
}

# name -> (function of the input tensors, input shapes)
FUNCTIONAL_CASES = {
    "matmul_3d_3d": (torch.matmul, [(2, 3, 4), (2, 4, 5)]),
    "matmul_4d_4d_broadcast": (torch.matmul, [(2, 1, 3, 4), (1, 3, 4, 5)]),
    "matmul_3d_2d": (torch.matmul, [(2, 3, 4), (4, 5)]),
    "einsum_bij_bjk": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)]),
    "einsum_bhqd_bhkd": (
        lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k),
        [(2, 2, 3, 4), (2, 2, 5, 4)],
    ),
    "sdpa_noncausal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=False),
        [(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4)],
    ),
    "sdpa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(2, 2, 4, 4), (2, 2, 4, 4), (2, 2, 4, 4)],
    ),
}


def module_factory(name):
    build, shape = MODULE_CASES[name]

    def factory(device, backward):
        torch.manual_seed(0)
        with torch.device(device):
            model = build()
        x = torch.randn(*shape, device=device, requires_grad=backward)

        def workload():
            out = model(x)
            if backward:
                out.sum().backward()

        return workload

    return factory


def functional_factory(name):
    fn, shapes = FUNCTIONAL_CASES[name]

    def factory(device, backward):
        torch.manual_seed(0)
        inputs = [torch.randn(*s, device=device, requires_grad=backward) for s in shapes]

        def workload():
            out = fn(*inputs)
            if backward:
                out.sum().backward()

        return workload

    return factory


CASES = {**{n: module_factory(n) for n in MODULE_CASES}, **{n: functional_factory(n) for n in FUNCTIONAL_CASES}}


def sdpa_forward_flops(b, h, s_q, s_k, d):
    # Two bmm-equivalents over b*h batches: Q @ K^T is (s_q x d)@(d x s_k),
    # P @ V is (s_q x s_k)@(s_k x d); each is 2*s_q*s_k*d (2K per K-term dot).
    # The causal mask does not change the dense-product convention.
    return 2 * (2 * b * h * s_q * s_k * d)


def sdpa_cpu_flops(b, h, s_q, s_k, d, causal):
    # The CPU kernel has no native formula, so the "CPU SDPA fallback" row
    # applies: the two products, plus A = b*h*s_q*s_k score scalings, one op
    # per score for a causal mask, and the stable softmax 5A - 2R over
    # R = b*h*s_q rows.
    scores, rows = b * h * s_q * s_k, b * h * s_q
    return sdpa_forward_flops(b, h, s_q, s_k, d) + scores * (1 + int(causal)) + 5 * scores - 2 * rows


def sdpa_cpu_backward_flops(b, h, s_q, s_k, d, causal):
    # torchscan_training_v1 (formulas/TRAINING.md): the five dense products of
    # the attention backward as FlopCounterMode values them on GPU kernels
    # (sdpa_backward_flop_count), plus, per score, the scale 1, exp(s - lse) 2,
    # the softmax backward P * (dP - D) 2 and the scale of the gradient 1 = 6,
    # one per score for a causal mask, and per row D = rowsum(dO * O): d
    # multiplies + (d - 1) adds.
    scores, rows = b * h * s_q * s_k, b * h * s_q
    products = sdpa_backward_flop_count((b, h, s_q, d), (b, h, s_q, d), (b, h, s_k, d), (b, h, s_k, d))
    return products + 6 * scores + scores * int(causal) + rows * (2 * d - 1)


# Hand-derived counts for the CPU fused SDPA kernel, which FlopCounterMode
# before torch 2.15 does not count (it has no formula for the *_for_cpu
# packets; 2.15's counts the products alone: hand_expected).
# (b, h, s_q, s_k, d, causal) of each case's SDPA call:
SDPA_DIMS = {
    "sdpa_noncausal": (2, 2, 3, 5, 4, False),
    "sdpa_causal": (2, 2, 4, 4, 4, True),
    # AttentionBlock: x (2,3,8), 2 heads -> head dim 4, self-attention over 3 tokens
    "attention_noncausal": (2, 2, 3, 3, 4, False),
    "attention_causal": (2, 2, 3, 3, 4, True),
}


def hand_expected(case, device, backward, native_cpu_sdpa):
    if device != "cpu" or case not in SDPA_DIMS:
        return {}
    b, h, s_q, s_k, d, causal = SDPA_DIMS[case]
    if native_cpu_sdpa:
        # torch 2.15 on: the installed FlopCounterMode's convention, the
        # matrix products alone (no scale, mask or softmax).
        expected = {SDPA_CPU: sdpa_forward_flops(b, h, s_q, s_k, d)}
        if backward:
            expected[SDPA_CPU_BWD] = sdpa_backward_flop_count(
                (b, h, s_q, d), (b, h, s_q, d), (b, h, s_k, d), (b, h, s_k, d))
        return expected
    expected = {SDPA_CPU: sdpa_cpu_flops(*SDPA_DIMS[case])}
    if backward:
        expected[SDPA_CPU_BWD] = sdpa_cpu_backward_flops(*SDPA_DIMS[case])
    return expected


# --------------------------------------------------------------- parity


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd_bwd"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_by_operator_matches_flop_counter_mode(torchscan, checks, case, device, backward):
    factory = CASES[case]
    fcm_counts, fcm_total = checks.run_flop_counter(factory(device, backward))
    report = torchscan.measure_flops(factory(device, backward))

    checks.assert_valid_report(report)
    checks.assert_parity(report, fcm_counts)
    # Ours may count extra operators, so never less than FlopCounterMode.
    assert report["total"]["known_value"] >= fcm_total

    for key, value in hand_expected(case, device, backward, checks.NATIVE_CPU_SDPA).items():
        if key in fcm_counts and not checks.NATIVE_CPU_SDPA:  # another FlopCounterMode formula: parity covers it
            continue
        assert report["by_operator"].get(key) == value, (key, report["by_operator"])


def test_sdpa_hand_derivation_cross_checks_with_math_path(checks):
    # Guards the hand formula itself: on meta SDPA runs its math decomposition,
    # which FlopCounterMode counts as plain bmm calls.
    q, k, v = (torch.randn(2, 2, s, 4, device="meta") for s in (3, 5, 5))
    counts, _ = checks.run_flop_counter(lambda: F.scaled_dot_product_attention(q, k, v))
    assert counts == {"aten.bmm": sdpa_forward_flops(2, 2, 3, 5, 4)}


def test_mlp_relu_is_counted_by_the_fallback_convention(torchscan, checks):
    # MLP on (3, 8): Linear(8,16) -> ReLU -> Linear(16,4). ReLU is one
    # selection per value of its (3, 16) input: 48 (torchscan_flops_v1).
    # The addmm counts match FlopCounterMode (checked by the parity tests).
    report = torchscan.measure_flops(module_factory("mlp")("cpu", False))
    checks.assert_valid_report(report)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"]["aten.relu"] == 3 * 16
    assert report["by_operator"]["aten.addmm"] == 2 * 3 * 16 * 8 + 2 * 3 * 4 * 16


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


# ------------------------------------------------------- grad modes


GRAD_MODE_CASES = ["mlp", "cnn", "attention_causal", "matmul_3d_2d", "sdpa_noncausal"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", GRAD_MODE_CASES)
def test_no_grad_and_inference_mode_match_plain_forward(torchscan, checks, case, device):
    factory = CASES[case]
    plain = torchscan.measure_flops(factory(device, False))

    def under(ctx):
        inner = factory(device, False)

        def workload():
            with ctx():
                inner()

        return workload

    no_grad = torchscan.measure_flops(under(torch.no_grad))
    inference = torchscan.measure_flops(under(torch.inference_mode))
    for report in (plain, no_grad, inference):
        checks.assert_valid_report(report)
    assert no_grad["by_operator"] == plain["by_operator"]
    assert inference["by_operator"] == plain["by_operator"]
    assert no_grad["total"] == plain["total"]
    assert inference["total"] == plain["total"]


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_measure_flops_called_inside_grad_mode_context(torchscan, checks, ctx):
    factory = CASES["mlp"]
    plain = torchscan.measure_flops(factory("cpu", False))
    with ctx():
        inside = torchscan.measure_flops(factory("cpu", False))
        assert not torchscan.tls_mode_included()
    assert not torchscan.tls_mode_included()
    checks.assert_valid_report(inside)
    assert inside["by_operator"] == plain["by_operator"]


def test_inference_mode_exit_inside_workload_keeps_scanning(torchscan, checks):
    # InferenceMode restores the whole dispatch key set on exit; the scan that
    # was already on must still see the mm that follows.
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def workload():
        with torch.inference_mode():
            torch.mm(a, b)
        torch.mm(a, b)

    report = torchscan.measure_flops(workload)
    checks.assert_valid_report(report)
    assert report["by_operator"] == {"aten.mm": 2 * 120}  # 2 calls x 2*3*4*5


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


# ------------------------------------------------------------ by_module


def _fcm_by_module(workload):
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False)
    with mode:
        workload()
    return {label: sum(int(v) for v in ops.values()) for label, ops in mode.get_flop_counts().items()}


def _fcm_by_module_ops(workload):
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False)
    with mode:
        workload()
    return [str(op) for op in mode.get_flop_counts().get("Global", {})]


class _Twice(nn.Module):
    """Calls one shared Linear twice: both calls count under its one label."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(6, 6)
        self.head = nn.Sequential(nn.Conv1d(2, 3, 3), nn.Flatten(), nn.Linear(12, 2))

    def forward(self, x):
        y = self.shared(self.shared(x))
        return self.head(y.view(x.shape[0], 2, 3).repeat(1, 1, 2))


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd_bwd"])
@pytest.mark.parametrize("case", ["mlp", "cnn", "conv_transposed", "twice"])
def test_by_module_matches_flop_counter_mode_labels(torchscan, case, backward):
    # Workloads whose operators FlopCounterMode fully covers (no CPU SDPA), so
    # its per-module sums are the independent reference for ours.
    def factory():
        torch.manual_seed(0)
        if case == "twice":
            model, x = _Twice(), torch.randn(4, 6)
        else:
            build, shape = MODULE_CASES[case]
            model, x = build(), torch.randn(*shape)

        def workload():
            y = model(x)
            if backward:
                y.sum().backward()

        return workload

    # Operators only TorchScan counts (relu, sum, ...) are zeroed by a caller
    # formula, so both tools value the same operators.
    ours = torchscan.measure_flops(factory())["by_operator"]
    fcm_ops = set(_fcm_by_module_ops(factory()))
    zero = {getattr(torch.ops.aten, op.split(".", 1)[1]): (lambda *a, **k: 0) for op in ours if op not in fcm_ops}
    expected = _fcm_by_module(factory())
    if case == "twice" and backward:
        # shared = Linear(6, 6) on (4, 6), called twice. Forward: 2 addmm of
        # 4*6*6*2 = 288. Backward: the first call's input needs no grad, so
        # grad W only (288); the second call: grad input + grad W (2 * 288).
        # Total 5 * 288 = 1440. FlopCounterMode's ModuleTracker keeps a *set* of
        # labels, so when the second call's backward leaves "shared" the first
        # call's backward (entering the same label) is dropped: 1152.
        assert expected["_Twice.shared"] == 4 * 288
        expected["_Twice.shared"] = 5 * 288
    report = torchscan.measure_flops(factory(), modules=True, custom_mapping=zero)
    # Labels whose only work was zeroed above carry 0: compare the nonzero ones.
    assert {k: v for k, v in report["by_module"].items() if v} == {k: v for k, v in expected.items() if v}
    assert report["by_module"]["Global"] == report["total"]["known_value"]


def test_by_module_is_empty_unless_requested_and_hooks_are_removed(torchscan):
    from torch.nn.modules import module as nn_module

    model, x = nn.Sequential(nn.Linear(3, 4)), torch.randn(2, 3)
    before = (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks))
    assert torchscan.measure_flops(lambda: model(x))["by_module"] == {}
    assert torchscan.measure_flops(lambda: model(x), modules=True)["by_module"]["Sequential.0"] == 2 * 3 * 4 * 2
    with pytest.raises(ValueError):
        torchscan.measure_flops(lambda: (model(x), (_ for _ in ()).throw(ValueError("boom"))), modules=True)
    assert (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)) == before
    with pytest.raises(TypeError, match="modules must be True or False"):
        torchscan.measure_flops(lambda: model(x), modules=model)
