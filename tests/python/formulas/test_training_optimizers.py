"""torchscan_training_v1 optimizer rows on real ATen calls (formulas/optimizers.h).

One optimizer step is counted in its three forms: the for-loop implementation
(foreach=False: per-tensor kernels), the foreach one (foreach=True: _foreach_*
list kernels) and the fused one (fused=True: one _fused_* kernel after a
_foreach_add_ of the step counters). The three reports must be complete and
equal, and equal the count derived by hand in each case's comment from the
for-loop code in torch/optim/*.py and the per-tensor rows (lerp 3; addcmul /
addcdiv 2, or 3 with a value != 1; add 1, or 2 with alpha != 1; mul, sqrt,
div, maximum, neg 1 per element; a 0-dim step increment 1 per tensor).

The model: Linear(4, 3) then Linear(3, 2): parameter tensors T = 4 with
P = 12 + 3 + 6 + 2 = 23 elements.

torch._decomp.decomposition_table holds no _foreach_/_fused_ optimizer kernel
(asserted below); the per-tensor comparison plays its part: a list kernel
equals the sum of its per-tensor calls counted one by one.
"""
import math

import pytest
import torch
import torch.nn as nn
from torch._decomp import decomposition_table

import torchscan

P = 23  # parameter elements
T = 4  # parameter tensors


def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    return m


def complete_total(r):
    assert r["total"]["status"] == "complete", r["diagnostics"]
    return r["total"]["value"]


FORMS = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}

# (optimizer, options, first step?, forms, hand-derived count)
CASES = [
    # SGD momentum 0.9, first step: buf = grad.clone() (a copy, 0), then
    # param.add_(buf, alpha=-lr) = 2 per element -> 2P = 46.
    ("SGD", dict(lr=0.1, momentum=0.9), True, FORMS, 2 * P),
    # Later step: buf.mul_(0.9) 1 + buf.add_(grad) (alpha = 1 - dampening = 1) 1
    # + param.add_(buf, alpha=-lr) 2 = 4 per element -> 4P = 92.
    ("SGD", dict(lr=0.1, momentum=0.9), False, FORMS, 4 * P),
    # Nesterov + weight decay, first step: grad.add(param, alpha=wd) 2 + clone 0
    # + grad.add(buf, alpha=momentum) 2 + update 2 = 6 per element -> 138.
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), True, FORMS, 6 * P),
    # Later step: wd 2 + mul 1 + add 1 + nesterov add 2 + update 2 = 8 -> 184.
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), False, FORMS, 8 * P),
    # Adam: step_t += 1 (1 per tensor) and per element exp_avg.lerp_ 3,
    # exp_avg_sq.mul_ 1, .addcmul_(value=1-beta2) 3, sqrt 1, / bias_correction2_sqrt 1,
    # .add_(eps) 1, param.addcdiv_(value=-step_size) 3 = 13 -> 13P + T = 303.
    ("Adam", dict(lr=1e-3), False, FORMS, 13 * P + T),
    # amsgrad (torch.maximum 1) and L2 decay grad.add(param, alpha=wd) 2: 16P + T = 372.
    ("Adam", dict(lr=1e-3, amsgrad=True, weight_decay=0.01), False, FORMS, 16 * P + T),
    # AdamW (weight_decay 0.01 by default): param.mul_(1 - lr*wd) 1: 14P + T = 326.
    ("AdamW", dict(lr=1e-3), False, FORMS, 14 * P + T),
    # AdamW amsgrad: 15P + T = 349.
    ("AdamW", dict(lr=1e-3, amsgrad=True), False, FORMS, 15 * P + T),
    # RMSprop (no fused form): step += 1 (T), square_avg.mul_ 1, .addcmul_(value=1-alpha) 3,
    # sqrt 1, add_(eps) 1, param.addcdiv_(value=-lr) 3 = 9 -> 9P + T = 211.
    ("RMSprop", dict(lr=0.01), False, {k: FORMS[k] for k in ("forloop", "foreach")}, 9 * P + T),
    # Centered with momentum: mul 1 + addcmul 3 + grad_avg.lerp_ 3 + addcmul(value=-1) 3
    # + sqrt_ 1 + add_ 1 + buf.mul_ 1 + buf.addcdiv_ (value 1) 2 + param.add_(alpha=-lr) 2
    # = 17 -> 17P + T = 395.
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True), False,
     {k: FORMS[k] for k in ("forloop", "foreach")}, 17 * P + T),
    # Adagrad: step_t += 1 (T), state_sum.addcmul_(value=1) 2, sqrt 1, add_(eps) 1,
    # param.addcdiv_(value=-clr) 3 = 7 -> 7P + T = 165. (The foreach form
    # multiplies the gradient by -clr first (1) and divides with value 1 (2).)
    ("Adagrad", dict(lr=0.01), False, FORMS, 7 * P + T),
]


@pytest.mark.parametrize("name,options,first,forms,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_three_forms_of_one_step_count_the_same(name, options, first, forms, expected):
    values = {}
    for form, flag in forms.items():
        m = model()
        opt = getattr(torch.optim, name)(m.parameters(), **options, **flag)
        if not first:
            opt.step()  # the state exists: the measured step is a later one
        r = torchscan.measure_flops(opt.step)
        values[form] = complete_total(r)
        kernels = set(r["by_operator"])
        if form == "fused":
            assert any(k.startswith("aten._fused_") for k in kernels), kernels
        if form == "foreach":
            assert all(k.startswith("aten._foreach_") for k in kernels), kernels
    assert values == {form: expected for form in forms}


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm(foreach, norm_type):
    # Per gradient a vector norm: order 2 squares N, sums N-1, roots 1 = 2N
    # (2P in all); order inf |x| N + N-1 comparisons = 2N-1 (2P - T). Then the
    # norm of the T stacked norms (2T, or 2T-1), total_norm + 1e-6 (1),
    # max_norm / (...) = reciprocal + mul (2), clamp(max=1) (1), and every
    # gradient times the coefficient (P).
    # Order 2: 2P + 2T + 4 + P = 81; order inf: 2P - T + 2T - 1 + 4 + P = 76.
    expected = 3 * P + 2 * T + 4 if norm_type == 2.0 else 3 * P + T + 3
    m = model()
    r = torchscan.measure_flops(lambda: nn.utils.clip_grad_norm_(m.parameters(), 1.0, norm_type, foreach=foreach))
    assert complete_total(r) == expected
    assert ("aten._foreach_norm" in r["by_operator"]) == foreach


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_value(foreach):
    # clamp_(min, max): 2 per element, or _foreach_clamp_min_ + _foreach_clamp_max_:
    # 1 + 1 per element -> 2P = 46.
    m = model()
    r = torchscan.measure_flops(lambda: nn.utils.clip_grad_value_(m.parameters(), 0.5, foreach=foreach))
    assert complete_total(r) == 2 * P


def lists():
    torch.manual_seed(0)
    return [torch.randn(2, 3), torch.randn(4)], [torch.randn(2, 3), torch.randn(4)]  # N = 6 + 4 = 10


def measured(fn):
    return complete_total(torchscan.measure_flops(fn))


def test_list_kernels_on_real_calls():
    a, b = lists()
    # add with alpha 2: add + multiply per element: 2 * 10 = 20 (functional and in place).
    assert measured(lambda: torch._foreach_add(a, b, alpha=2.0)) == 20
    assert measured(lambda: torch._foreach_add_(a, b, alpha=2.0)) == 20
    # Per-tensor scalars (Scalar[]): addcdiv with value 1 for (2,3) -> 2*6 = 12,
    # value -0.5 for (4) -> 3*4 = 12: 24.
    assert measured(lambda: torch._foreach_addcdiv_(a, a, b, [1.0, -0.5])) == 24
    # A Tensor other (0-dim): one multiply per element: 10.
    assert measured(lambda: torch._foreach_mul_(a, torch.tensor(0.5))) == 10
    # Norms: order 2 is 2N per tensor -> 20; order inf 2N-1 -> 18; with a dtype: 20.
    assert measured(lambda: torch._foreach_norm(a, 2)) == 20
    assert measured(lambda: torch._foreach_norm(a, math.inf)) == 18
    assert measured(lambda: torch.ops.aten._foreach_norm.Scalar(a, 2, dtype=torch.float64)) == 20
    # max: N-1 comparisons per tensor: 5 + 3 = 8.
    assert measured(lambda: torch.ops.aten._foreach_max(a)) == 8
    # lerp with a weight list: 3 per element: 30. sigmoid: 4 per element: 40.
    assert measured(lambda: torch._foreach_lerp(a, b, [torch.full_like(t, 0.3) for t in a])) == 30
    assert measured(lambda: torch._foreach_sigmoid(a)) == 40
    # A scalar base: pow(2, x) per element: 10.
    assert measured(lambda: torch._foreach_pow(2.0, a)) == 10
    # mm per pair: 2 * (2*3*4) = 48.
    x, y = [torch.randn(2, 3)], [torch.randn(3, 4)]
    assert measured(lambda: torch.ops.aten._foreach_mm(x, y)) == 48


def test_out_overload_values_its_unrecorded_destinations():
    a, b = lists()
    out = [torch.empty_like(t) for t in a]
    # The destinations are not operands: the broadcast of self[i], other[i]: 10 * 2.
    assert measured(lambda: torch.ops.aten._foreach_add.List_out(a, b, alpha=2.0, out=out)) == 20
    norms = [torch.empty(()) for _ in a]
    assert measured(lambda: torch.ops.aten._foreach_norm.Scalar_out(a, 2, out=norms)) == 20


def test_list_kernel_equals_its_per_tensor_calls():
    # What the kernel stands for, counted call by call.
    a, b = lists()
    for foreach, one_by_one in [
        (lambda: torch._foreach_addcmul(a, a, b, 0.5), lambda: [torch.addcmul(x, x, y, value=0.5) for x, y in zip(a, b)]),
        (lambda: torch._foreach_sub(a, b, alpha=3), lambda: [torch.sub(x, y, alpha=3) for x, y in zip(a, b)]),
        (lambda: torch._foreach_clamp_min(a, [0.1, 0.2]), lambda: [torch.clamp_min(x, s) for x, s in zip(a, [0.1, 0.2])]),
        (lambda: torch._foreach_tanh(a), lambda: [torch.tanh(x) for x in a]),
    ]:
        assert measured(foreach) == measured(one_by_one)


def test_elements_follow_their_own_dtype_rule():
    x = torch.randn(2, 3)
    # neg of [float (2,3), int (4)]: 6 + 0 (integer arithmetic excluded) = 6.
    assert measured(lambda: torch._foreach_neg([x, torch.arange(4)])) == 6
    # [float (2,3), complex (4)]: the complex element has no count: partial, 6 known.
    r = torchscan.measure_flops(lambda: torch._foreach_neg([x, torch.randn(4, dtype=torch.complex64)]))
    assert r["total"]["status"] == "partial" and r["total"]["known_value"] == 6


def test_coefficients_held_in_a_tensor_are_a_lower_bound():
    a, b = lists()
    # addcmul_.Tensor: coefficient values are tensor data (not recorded): 2 per element known.
    r = torchscan.measure_flops(lambda: torch._foreach_addcmul_(a, a, b, torch.tensor([1.0, 0.5])))
    assert r["total"]["status"] == "partial" and r["total"]["known_value"] == 20
    assert any(d["code"] == "value_in_tensor" for d in r["diagnostics"])


def adam_args(params):
    # self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (none without amsgrad), state_steps
    return params, [torch.ones_like(p) for p in params], [torch.zeros_like(p) for p in params], \
        [torch.zeros_like(p) for p in params], [], [torch.tensor(1.0) for _ in params]


def test_fused_adam_with_grad_scale_and_found_inf():
    a, _ = lists()
    options = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    # grad_scale: the kernel divides every gradient by it: 13 + 1 = 14 per element -> 140.
    args, scale, found_inf = adam_args(a), torch.tensor(2.0), torch.tensor(0.0)
    assert measured(lambda: torch._fused_adam_(*args, **options, grad_scale=scale)) == 140
    # found_inf: all or nothing by its value: unavailable (the applied step, 130, is named).
    r = torchscan.measure_flops(lambda: torch._fused_adam_(*args, **options, found_inf=found_inf))
    assert r["total"]["status"] != "complete"
    (d,) = [d for d in r["diagnostics"] if d["code"] == "value_dependent_work"]
    assert "130" in d["message"]
    # A tensor lr (tensor_lr overload) counts the same: 130.
    lr = torch.tensor(options.pop("lr"))
    assert measured(lambda: torch._fused_adam_(*args, lr=lr, **options)) == 130


def test_every_foreach_and_fused_optimizer_kernel_has_a_row_or_a_stated_reason():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools"))
    import coverage_audit

    no_row = {"clone", "copy", "zero",  # copies / fills: zero-cost (the lead's zero-cost list)
              "lgamma", "powsum"}  # no per-tensor row to value elements with
    ops = coverage_audit.run_audit()["operators"]
    names = {k.split(".")[0] for k in ops if k.startswith("aten::_foreach_")}
    assert len(names) > 80
    for name in sorted(names):
        base = name[len("aten::_foreach_"):].rstrip("_")
        with_row = [k for k in ops if k.split(".")[0] == name and ops[k]["operator_formula"] == "torchscan_fallback"]
        assert bool(with_row) == (base not in no_row), name
    for fused in ("adam", "adam_", "adamw", "adamw_", "sgd", "sgd_", "adagrad", "adagrad_"):
        assert ops[f"aten::_fused_{fused}"]["operator_formula"] == "torchscan_fallback"
    # No decomposition to compare with in this release.
    assert not [k for k in decomposition_table if "_foreach_" in str(k) or "_fused_" in str(k) and "rms" not in str(k)
                and "dropout" not in str(k)]
