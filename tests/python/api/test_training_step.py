"""A whole training step -- forward, loss, backward, clip_grad_norm_,
optimizer step -- counted complete in the operator view, the same whatever
form (for-loop, foreach, fused) the optimizer runs in.

Expected values come from FlopCounterMode (the operators it counts) and from
hand derivations of torch/optim's single-tensor code in the comments."""

import pytest
import torch

from tests.fixtures.training import FORMS, MODELS, OPTIMIZERS, training_step

from conftest import assert_valid_report, run_flop_counter


def _problems(report):
    return [(d["code"], d.get("operator"), d["message"]) for d in report["diagnostics"] if d["severity"] == "error"
            or d["code"] in ("uncounted_operator", "excluded_operator", "unsupported_operator_formula",
                             "incomplete_operator_formula")]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_training_step_is_complete_and_the_same_in_every_optimizer_form(torchscan, model):
    for optimizer in OPTIMIZERS:
        totals = {}
        for form in FORMS:
            report = torchscan.measure_flops(training_step(model, optimizer, form))
            assert_valid_report(report)
            assert report["total"]["status"] == "complete", (model, optimizer, form, _problems(report))
            assert not _problems(report), (model, optimizer, form, _problems(report))
            totals[form] = report["total"]["value"]
        assert len(set(totals.values())) == 1, (model, optimizer, totals)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_operator_flop_counter_mode_counts_is_equal(torchscan, model):
    # Two steps of the same steady-state training loop do the same work.
    step = training_step(model, "adamw", "foreach")
    expected, _ = run_flop_counter(step)
    report = torchscan.measure_flops(step)
    assert expected, "FlopCounterMode counted the matrix products of a training step"
    for op, flops in expected.items():
        assert report["by_operator"].get(op) == flops, (model, op, report["by_operator"].get(op), flops)


def test_the_report_names_the_training_extension(torchscan):
    report = torchscan.measure_flops(training_step("lstm", "sgd_momentum", "fused"))
    assert "torchscan_training_v1" in report["context"]["counting_convention"]
    assert "torchscan_flops_v1" in report["context"]["counting_convention"]
    with torchscan.scan(modules=True) as s:
        torch.nn.Linear(2, 2)(torch.ones(1, 2))
    assert "torchscan_training_v1" in s.module_report()["context"]["counting_convention"]


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    # P = 3*4 + 4 + 4*2 + 2 = 26 parameter elements in T = 4 tensors.
    model(torch.randn(5, 3)).sum().backward()
    return model


@pytest.mark.parametrize("form", FORMS)
def test_optimizer_steps_match_the_single_tensor_algorithm_by_hand(torchscan, form):
    kwargs = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[form]
    P, T = 26, 4
    # AdamW (torch/optim/adamw.py, single-tensor, steady state), per element:
    # param *= 1 - lr*wd (1); exp_avg.lerp_(grad, 1-beta1) (3); exp_avg_sq *= beta2 (1);
    # exp_avg_sq.addcmul_(grad, grad, value=1-beta2) (3); sqrt (1); / bias_correction2_sqrt (1);
    # + eps (1); param.addcdiv_(exp_avg, denom, value=-step_size) (3) = 14; plus step += 1 per
    # tensor (T). Bias corrections are Python floats: no tensor work.
    model = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kwargs)
    opt.step()
    report = torchscan.measure_flops(opt.step)
    assert report["total"] == {**report["total"], "status": "complete", "value": 14 * P + T}, _problems(report)
    # SGD momentum 0.9, later step, per element: buf *= momentum (1); buf += grad (alpha =
    # 1 - dampening = 1: 1); param += -lr * buf (2) = 4.
    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **kwargs)
    opt.step()
    report = torchscan.measure_flops(opt.step)
    assert report["total"] == {**report["total"], "status": "complete", "value": 4 * P}, _problems(report)


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_norm_by_hand(torchscan, foreach):
    model = _tiny()
    P, T = 26, 4
    # Per gradient (N_i elements): 2-norm = N_i squares + (N_i - 1) adds + 1 sqrt = 2 N_i;
    # over all: 2P. The total norm of the T norms: 2T. clip_coef = max_norm / (total + 1e-6):
    # add 1, divide (reciprocal + multiply) 2; clamp(max=1) 1; each gradient *= clip_coef: P.
    # 3P + 2T + 4.
    report = torchscan.measure_flops(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach))
    assert report["total"]["status"] == "complete", _problems(report)
    assert report["total"]["value"] == 3 * P + 2 * T + 4
