"""measure_flops: parity with FlopCounterMode, by operator and by module, and
under no_grad and inference mode.

Parity workloads are built by factories `factory(device, backward)`
(tests/fixtures/parity_workloads.py) that make a *fresh* model and inputs on
every call, so FlopCounterMode and TorchScan each run on an identical, untouched
copy.
"""


import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.fixtures.parity_workloads import CASES, MODULE_CASES, hand_expected, module_factory, sdpa_forward_flops

DEVICES = ["cpu", "meta"]


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
