"""torchscan_training_v1 loss rows (formulas/losses.h) on real ATen calls,
forward and backward.

Every expected count is derived by hand in the comment beside it from the
row's derivation (formulas/losses.h; the table rows in formulas/TRAINING.md):
N loss values, B target positions, F frames of D classes. Composite losses
(l1_loss, kl_div, cross_entropy) have no row: their children are counted, and
the tests check that the result is complete and equal to the children's sum.
Decomposition tests call torch._decomp's function for the same kernel on the
same tensors and assert the same count, or the difference the table row
explains.
"""

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table
from torch.utils.flop_counter import FlopCounterMode

from conftest import TORCH_RELEASE

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def measure(torchscan, fn):
    report = torchscan.measure_flops(fn)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def by_op(torchscan, fn):
    return measure(torchscan, fn)["by_operator"]


def total(torchscan, fn):
    report = measure(torchscan, fn)
    assert report["total"]["value"] == sum(report["by_operator"].values())
    return report["total"]["value"]


def leaf(*shape):
    """A fresh leaf (its first gradient is assigned, not accumulated)."""
    return torch.randn(*shape).requires_grad_()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- nll_loss


def test_nll_loss_forward_and_backward_per_reduction(torchscan):
    t = torch.tensor([0, 4, 2])  # B = 3 rows of C = 5 classes
    w = torch.rand(5)
    x = leaf(3, 5)
    # mean: loss -= x[t] (B = 3) + 1 divide = 4; backward -(g / total_weight) = 2.
    assert by_op(torchscan, lambda: F.nll_loss(x, t).backward()) == {
        "aten.nll_loss_forward": 4, "aten.nll_loss_backward": 2}
    x = leaf(3, 5)
    # weighted sum: B multiplies + B accumulations + B - 1 weight adds = 8;
    # backward -g (1) + w[t] * g' per row (3) = 4.
    assert by_op(torchscan, lambda: F.nll_loss(x, t, weight=w, reduction="sum").backward()) == {
        "aten.nll_loss_forward": 8, "aten.nll_loss_backward": 4}
    x = leaf(3, 5)
    seed = torch.ones(3)
    # none: -x[t] * w[t] per row = 2B = 6; backward -w[t] * g[i] = 2B = 6.
    assert by_op(torchscan, lambda: F.nll_loss(x, t, weight=w, reduction="none").backward(seed)) == {
        "aten.nll_loss_forward": 6, "aten.nll_loss_backward": 6}


def test_nll_loss_ignore_index_counts_every_position(torchscan):
    # The ignored row skips its arithmetic at run time; values are not
    # recorded, so every position counts as selected: the same 4 and 2 as an
    # unignored batch of B = 3 (an upper bound of what ran).
    x = leaf(3, 5)
    t = torch.tensor([0, -100, 2])
    assert by_op(torchscan, lambda: F.nll_loss(x, t).backward()) == {
        "aten.nll_loss_forward": 4, "aten.nll_loss_backward": 2}


def test_nll_loss2d_and_nd(torchscan):
    # (2,3,2,2) with target (2,2,2): B = 8 positions. mean: 8 + 1 = 9; backward 2.
    x = leaf(2, 3, 2, 2)
    t = torch.randint(0, 3, (2, 2, 2))
    assert by_op(torchscan, lambda: F.nll_loss(x, t).backward()) == {
        "aten.nll_loss2d_forward": 9, "aten.nll_loss2d_backward": 2}
    # A 3-D input (2,3,4) runs nll_loss2d on a (2,3,1,4) view: B = 8 again;
    # weighted mean 3B - 1 + 1 = 24, backward 2 + B = 10.
    x = leaf(2, 3, 4)
    t = torch.randint(0, 3, (2, 4))
    w = torch.rand(3)
    assert by_op(torchscan, lambda: F.nll_loss(x, t, weight=w).backward()) == {
        "aten.nll_loss2d_forward": 24, "aten.nll_loss2d_backward": 10}
    # none on 2d: 2B = 16 each way.
    x = leaf(2, 3, 2, 2)
    t = torch.randint(0, 3, (2, 2, 2))
    assert by_op(torchscan, lambda: F.nll_loss(x, t, reduction="none").backward(torch.ones(2, 2, 2))) == {
        "aten.nll_loss2d_forward": 16, "aten.nll_loss2d_backward": 16}


def test_out_overloads_share_the_row(torchscan):
    x, t = torch.randn(3, 5), torch.tensor([0, 4, 2])
    out, tw = torch.empty(()), torch.empty(())
    # nll_loss_forward.output, mean: B + 1 = 4.
    assert by_op(torchscan, lambda: aten.nll_loss_forward.output(x, t, None, MEAN, -100, output=out,
                                                                  total_weight=tw)) == {"aten.nll_loss_forward": 4}
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    # mse_loss.out, mean: 2N + N - 1 + 1 = 60 (N = 20).
    assert by_op(torchscan, lambda: aten.mse_loss.out(a, b, MEAN, out=torch.empty(()))) == {"aten.mse_loss": 60}
    g, gi = torch.randn(4, 5), torch.empty(4, 5)
    # smooth_l1_loss_backward.grad_input and huber_loss_backward.out: 9N = 180.
    assert by_op(torchscan, lambda: aten.smooth_l1_loss_backward.grad_input(g, a, b, NONE, 1.0, grad_input=gi)) == {
        "aten.smooth_l1_loss_backward": 180}
    assert by_op(torchscan, lambda: aten.huber_loss_backward.out(g, a, b, NONE, 1.0, grad_input=gi)) == {
        "aten.huber_loss_backward": 180}


# ---------------------------------------------------------------- pointwise losses (N = 20)


def test_mse_smooth_l1_huber(torchscan):
    y = torch.randn(4, 5)
    x = leaf(4, 5)
    # mse mean: 2N + (N - 1) + 1 = 60; backward norm * (a - b) * g = 3N = 60.
    assert by_op(torchscan, lambda: F.mse_loss(x, y).backward()) == {
        "aten.mse_loss": 60, "aten.mse_loss_backward": 60}
    x = leaf(4, 5)
    # smooth L1 (beta 0.5) mean: 8N + 20 = 180; backward 9N = 180.
    assert by_op(torchscan, lambda: F.smooth_l1_loss(x, y, beta=0.5).backward()) == {
        "aten.smooth_l1_loss": 180, "aten.smooth_l1_loss_backward": 180}
    x = leaf(4, 5)
    # Huber (delta 0.5) sum: 8N + 19 = 179; backward 9N = 180.
    assert by_op(torchscan, lambda: F.huber_loss(x, y, reduction="sum", delta=0.5).backward()) == {
        "aten.huber_loss": 179, "aten.huber_loss_backward": 180}


def test_binary_cross_entropy_and_with_logits(torchscan):
    y = torch.rand(4, 5)
    w = torch.rand(5)
    p = torch.rand(4, 5).clamp(0.05, 0.95).requires_grad_()
    # BCE with weight (expanded to 4x5), mean: 9N + N + 20 = 220; backward
    # 6N + weight N + mean divide N = 160.
    assert by_op(torchscan, lambda: F.binary_cross_entropy(p, y, weight=w).backward()) == {
        "aten.binary_cross_entropy": 220, "aten.binary_cross_entropy_backward": 160}
    # With logits, weight (5) and pos_weight (5), mean: 10N + (P + 3N) + N + 20
    # = 200 + 65 + 20 + 20 = 305 (the row owns its log_sigmoid/mul/... children).
    x = torch.randn(4, 5)
    pw = torch.rand(5)
    assert by_op(torchscan, lambda: F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw)) == {
        "aten.binary_cross_entropy_with_logits": 305}


def test_binary_cross_entropy_with_logits_backward_is_complete_through_its_calls(torchscan):
    # No backward kernel: autograd runs the formula as calls. With weight and
    # pos_weight (mean): t = pw * y (N), t + 1 (N), - y (N), sigmoid(x) (4N),
    # * (N), - t (N), * g (N), * weight (N), / numel (N): 12N = 240.
    y, w, pw = torch.rand(4, 5), torch.rand(5), torch.rand(5)
    x = leaf(4, 5)
    loss = F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw)
    assert total(torchscan, loss.backward) == 240
    # Plain, mean: (sigmoid 4N - y N) * g N, / numel N: 7N = 140.
    x = leaf(4, 5)
    loss = F.binary_cross_entropy_with_logits(x, y)
    assert total(torchscan, loss.backward) == 140


def test_soft_margin(torchscan):
    y = torch.randint(0, 2, (4, 5)).float() * 2 - 1
    x = leaf(4, 5)
    # neg, mul, exp, log1p: 4N + mean 20 = 100; backward -y (T = 20) + 7N = 160.
    assert by_op(torchscan, lambda: F.soft_margin_loss(x, y).backward()) == {
        "aten.soft_margin_loss": 100, "aten.soft_margin_loss_backward": 160}


# ---------------------------------------------------------------- margin losses


def test_multi_margin(torchscan):
    t = torch.tensor([0, 3, 1])  # F = 3 frames, D = 4 classes
    x = leaf(3, 4)
    # p = 1, mean: per frame 3 * (D - 1) + (D - 2) + 1 = 12; 36 + (F - 1) + 1 = 39.
    # Backward: per frame 2D + D + 2 (D - 1) = 18: 54.
    assert by_op(torchscan, lambda: F.multi_margin_loss(x, t).backward()) == {
        "aten.multi_margin_loss": 39, "aten.multi_margin_loss_backward": 54}
    x = leaf(3, 4)
    w = torch.rand(4)
    # p = 2 with weight, sum: per frame 5 * 3 + 2 + 1 = 18: 54 + 2 = 56.
    # Backward: per frame 12 + 4 * 3 = 24: 72.
    assert by_op(torchscan, lambda: F.multi_margin_loss(x, t, p=2, weight=w, reduction="sum").backward()) == {
        "aten.multi_margin_loss": 56, "aten.multi_margin_loss_backward": 72}


def test_multilabel_margin_counts_the_full_pair_nest(torchscan):
    # F = 2, D = 3: the kernel visits the pairs of the listed targets only;
    # counted as all D^2 = 9 pairs per frame: 5 F D^2 = 90, mean + 1 = 91.
    # Backward: 6 F D^2 + F D = 108 + 6 = 114.
    t = torch.tensor([[0, 2, -1], [1, -1, 0]])
    x = leaf(2, 3)
    assert by_op(torchscan, lambda: F.multilabel_margin_loss(x, t).backward()) == {
        "aten.multilabel_margin_loss_forward": 91, "aten.multilabel_margin_loss_backward": 114}


# ---------------------------------------------------------------- composite losses (no row)


def test_l1_loss_counts_through_its_children(torchscan):
    y = torch.randn(4, 5)
    # l1_loss is CompositeImplicitAutograd: sub N + abs N + mean (N - 1 + 1) = 60;
    # backward: mean's divide N, abs's sgn N and multiply N = 60.
    x = leaf(4, 5)
    assert total(torchscan, lambda: F.l1_loss(x, y).backward()) == 120
    # smooth_l1_loss with beta = 0 is l1_loss (torch.nn.functional routes it): 120.
    x = leaf(4, 5)
    assert total(torchscan, lambda: F.smooth_l1_loss(x, y, beta=0.0).backward()) == 120


def test_kl_div_counts_through_its_children(torchscan):
    y = torch.rand(4, 5)
    # log_target False, batchmean: xlogy(y, y) 3N - y * x (N + N), sum N - 1,
    # then / batch 1: 60 + 40 + 19 + 1 = 120. Backward: / batch 1, sub's negation
    # N, mul's * y N: 41.
    x = leaf(4, 5)
    assert total(torchscan, lambda: F.kl_div(x, y, reduction="batchmean").backward()) == 161
    # log_target True, sum: exp(y) * (y - x): 3N + N - 1 = 79; backward:
    # mul N, neg N: 40.
    x, log_y = leaf(4, 5), y.log()
    assert total(torchscan, lambda: F.kl_div(x, log_y, reduction="sum", log_target=True).backward()) == 119


def test_cross_entropy_ends_complete_through_log_softmax_and_nll(torchscan):
    # x (4,5): log_softmax 4N - R = 80 - 4 = 76; nll mean B + 1 = 5.
    x, t = torch.randn(4, 5), torch.tensor([1, 0, 4, 4])
    assert by_op(torchscan, lambda: F.cross_entropy(x, t)) == {"aten._log_softmax": 76, "aten.nll_loss_forward": 5}
    # Backward: nll_loss_backward 2, and the log_softmax backward's own row.
    x = leaf(4, 5)
    ops = by_op(torchscan, lambda: F.cross_entropy(x, t).backward())
    assert ops["aten.nll_loss_backward"] == 2 and ops["aten.nll_loss_forward"] == 5
    # Label smoothing 0.1: 76 + 5, smooth loss -x.sum(1): 16 adds + 4 negations,
    # masked_fill 4 (the ignore_index test on int64 targets: 0), its sum 3, / count 1,
    # (1 - ls) * nll 1, * (ls / C) 1, + 1: 112.
    assert total(torchscan, lambda: F.cross_entropy(x.detach(), t, label_smoothing=0.1)) == 112
    # Probabilities as targets: 76 + x * p 20 + sum 19 + negation 1 + / batch 1 = 117.
    p = torch.rand(4, 5).softmax(1)
    assert total(torchscan, lambda: F.cross_entropy(x.detach(), p)) == 117


def test_flop_counter_mode_counts_no_loss_kernel(torchscan):
    # torch.utils.flop_counter registers no loss: there is no native count to
    # match (the loss rows are fallback rows), and it reports zero.
    x, y, t = torch.randn(4, 5), torch.rand(4, 5), torch.tensor([1, 0, 4, 4])
    with FlopCounterMode(display=False) as mode:
        F.mse_loss(x, y)
        F.nll_loss(x, t)
        F.binary_cross_entropy_with_logits(x, y)
    assert mode.get_total_flops() == 0


# ---------------------------------------------------------------- decompositions


def decomposed(torchscan, op, *args):
    fn = decomposition_table[op]
    return total(torchscan, lambda: fn(*args))


def kernel(torchscan, op, *args):
    return total(torchscan, lambda: op(*args))


def both(torchscan, op, *args):
    """(the kernel's count, its decomposition's count) on the same tensors."""
    return kernel(torchscan, op, *args), decomposed(torchscan, op, *args)


def test_decompositions_with_the_same_count(torchscan):
    a, b, g = torch.randn(4, 5), torch.randn(4, 5), torch.randn(4, 5)
    p, y = torch.rand(4, 5).clamp(0.05, 0.95), torch.rand(4, 5)
    w, pw = torch.rand(4, 5), torch.rand(5)
    sign = torch.randint(0, 2, (4, 5)).float() * 2 - 1
    cases = [
        # mse: sub + square per value, then the reduction (mean 60, sum 59, none 40).
        (aten.mse_loss.default, (a, b, MEAN), 60),
        (aten.mse_loss.default, (a, b, SUM), 59),
        (aten.mse_loss.default, (a, b, NONE), 40),
        (aten.mse_loss_backward.default, (g, a, b, NONE), 60),
        # smooth L1 / Huber forward: |a - b|, both branches, compare, select: 8N + reduction.
        (aten.smooth_l1_loss.default, (a, b, MEAN, 0.5), 180),
        (aten.huber_loss.default, (a, b, SUM, 0.5), 179),
        # smooth L1 backward with a per-value grad (none): 9N both ways.
        (aten.smooth_l1_loss_backward.default, (g, a, b, NONE, 0.5), 180),
        # BCE: 9N + weight N + mean N = 220; backward 6N + N + N = 160.
        (aten.binary_cross_entropy.default, (p, y, w, MEAN), 220),
        (aten.binary_cross_entropy_backward.default, (torch.tensor(1.0), p, y, w, MEAN), 160),
        # With logits and pos_weight (5), sum: 10N + 5 + 3N + 19 = 284.
        (aten.binary_cross_entropy_with_logits.default, (a, y, None, pw, SUM), 284),
        # soft margin: 4N + 20 = 100; backward (sum): 8N = 160.
        (aten.soft_margin_loss.default, (a, sign, MEAN), 100),
        (aten.soft_margin_loss_backward.default, (torch.tensor(1.0), a, sign, SUM), 160),
    ]
    for op, args, expected in cases:
        assert kernel(torchscan, op, *args) == expected, op
        assert decomposed(torchscan, op, *args) == expected, op


def test_decompositions_that_differ_from_the_kernel(torchscan):
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    one = torch.tensor(1.0)
    sign = torch.randint(0, 2, (4, 5)).float() * 2 - 1
    # smooth L1 backward, mean (scalar grad): the kernel multiplies norm per
    # value (9N = 180); the decomposition scales the one grad value once: 8N + 1 = 161.
    op = aten.smooth_l1_loss_backward.default
    assert both(torchscan, op, one, a, b, MEAN, 0.5) == (180, 161)
    # Huber backward, sum: kernel 9N = 180; the decomposition computes three
    # branches with two wheres: 7N + 4 grad-sized products = 144.
    op = aten.huber_loss_backward.default
    assert both(torchscan, op, one, a, b, SUM, 0.5) == (180, 144)
    # soft margin backward, mean: kernel T + 7N = 160 (1/numel folded into its
    # norm multiply); the decomposition adds a divide per value: 8N + N = 180.
    op = aten.soft_margin_loss_backward.default
    assert both(torchscan, op, one, a, sign, MEAN) == (160, 180)

    # nll_loss: the kernel reads the B selected values; the decomposition is
    # dense. x (3,5), B = 3, C = 5.
    x, t, w = torch.randn(3, 5), torch.tensor([0, 4, 2]), torch.rand(5)
    op = aten.nll_loss_forward.default
    # none: -x[t] * 1 (2B = 6) vs negation + where (2B = 6): equal.
    assert both(torchscan, op, x, t, None, NONE, -100) == (6, 6)
    # mean: B + 1 = 4 vs negation B + where B + sum B - 1 + divide 1 = 3B = 9.
    assert both(torchscan, op, x, t, None, MEAN, -100) == (4, 9)
    # weighted mean: 3B = 9 vs x * w over all B C = 15, negation, two wheres
    # (3 + 3 + 3), two sums (2 + 2), divide 1: 29.
    assert both(torchscan, op, x, t, w, MEAN, -100) == (9, 29)
    # backward, mean: -(g / total_weight) = 2 vs divide 1 + where over (B,1) 3
    # + scatter's -1 times the grad over all B C values 15 = 19.
    tw = torch.tensor(3.0)
    op = aten.nll_loss_backward.default
    assert both(torchscan, op, one, x, t, None, MEAN, -100, tw) == (2, 19)
    # nll_loss2d (2,3,2,2), B = 8: forward mean 9 vs 3B = 24; backward 2 vs
    # 1 + 8 + B C = 24: 33.
    x4, t4, tw8 = torch.randn(2, 3, 2, 2), torch.randint(0, 3, (2, 2, 2)), torch.tensor(8.0)
    op = aten.nll_loss2d_forward.default
    assert both(torchscan, op, x4, t4, None, MEAN, -100) == (9, 24)
    op = aten.nll_loss2d_backward.default
    assert both(torchscan, op, one, x4, t4, None, MEAN, -100, tw8) == (2, 33)

    # multi_margin (3,4), p = 1, mean: kernel 39 vs margin - x[t] per frame 3,
    # + x 12, clamp 12, where 12 (the target class masked after the fact), mean 12: 51.
    x, t = torch.randn(3, 4), torch.tensor([0, 3, 1])
    op = aten.multi_margin_loss.default
    assert both(torchscan, op, x, t, 1, 1, None, MEAN) == (39, 51)
    # multilabel (2,3), mean: kernel 5 F D^2 + 1 = 91 vs the decomposition's
    # 1 - x[t] per (frame, slot) F D = 6, + x, clamp, / D, where over F D^2 (4 x 18),
    # per-frame sums 18 - 2 and their mean 2: 96. From torch 2.14 on it also
    # zeroes the padded target slots' terms with a where over F D^2 = 18: 114.
    x, t = torch.randn(2, 3), torch.tensor([[0, 2, -1], [1, -1, 0]])
    op = aten.multilabel_margin_loss_forward.default
    assert both(torchscan, op, x, t, MEAN) == (91, 96 + (18 if TORCH_RELEASE >= (2, 14) else 0))
