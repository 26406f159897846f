// torchscan_training_v1: FLOPs of the loss kernels, forward and backward.
//
// Each count is derived from the CPU kernel's own arithmetic (aten/src/ATen/
// native/Loss.cpp, LossNLL.cpp, LossNLL2d.cpp, LossMultiMargin.cpp,
// LossMultiLabelMargin.cpp and the element kernels of cpu/BinaryOpsKernel.cpp
// and cpu/PointwiseOpsKernel.cpp) with the torchscan_flops_v1 unit costs:
// scalar arithmetic, exp/log/log1p, comparison and selection one operation
// each; log_sigmoid 7 and sigmoid 4 as in the table; constant-only arithmetic
// (0.5 * beta, 2 * g, 1 / numel) is excluded; integer arithmetic on targets
// (ignore_index tests, index bounds) is excluded; argument validation
// (TORCH_CHECK range checks on values) is not counted. Both branches of a
// selection are expanded, and a data-dependent branch (a skipped
// ignore_index row, an inactive hinge, a multilabel target list ending early)
// is counted as taken: the values are not recorded, so the count is the
// value-independent one of the full loop nest (an upper bound of what ran).
//
// The loss reduction (at::mean / at::sum over the whole unreduced loss, the
// table's "Broadcast/reduction" row with R = 1): none 0, sum N - 1 adds, mean
// N - 1 adds + 1 divide. Kernels that run it as child calls own them (the row
// counts them and the children are not counted again).
//
// N is the number of loss values: the broadcast shape of self and target for
// the forward kernels, grad_input's elements for the backward kernels. Tensor
// operands decide the dtype (ArithmeticOf): integer-only arithmetic counts
// zero, complex is unavailable; sparse/nested operands are unavailable. The
// table with every row is formulas/TRAINING.md.
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::losses {

// nll_loss_forward / nll_loss2d_forward(self, target, weight, reduction,
// ignore_index). B = target positions (batch rows; N*H*W for 2d; 1 for a 1-D
// self). reduction none with a batched self: output = -x[t] * w[t] (w = 1
// without weight): 2B. Otherwise (a reduction, or a 1-D self) the kernel
// accumulates loss -= x[t] (B: B - 1 adds and the negation), with a weight
// loss -= x[t] * w[t] and total_weight += w[t] (2B + B - 1); mean divides by
// total_weight once: unweighted B (+1), weighted 3B - 1 (+1). An empty target
// returns early: 0.
FormulaResult NllLossForward(const OpCall& call);
// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight,
// reduction, ignore_index, total_weight). reduction none with a batched self:
// grad_input[t] = -w[t] * g[i]: 2B. Otherwise the scalar
// g' = -(mean ? g / total_weight : g) once (2 or 1), then w[t] * g' per
// position when weighted (B). zero_() of grad_input is a fill.
FormulaResult NllLossBackward(const OpCall& call);

// mse_loss(self, target, reduction): (a - b)^2: 2N + reduction.
FormulaResult MseLoss(const OpCall& call);
// mse_loss_backward(grad, self, target, reduction): norm * (a - b) * g: 3N.
FormulaResult MseLossBackward(const OpCall& call);
// smooth_l1_loss(self, target, reduction, beta), as vectorized:
// z = |a - b| (2), 0.5 * z * z / beta (3), z - 0.5 * beta (1; 0.5 * beta is
// constant), z >= beta (1), select (1): 8N + reduction.
// huber_loss(self, target, reduction, delta): z (2), 0.5 * z * z (2),
// delta * (z - 0.5 * delta) (2), compare (1), select (1): 8N + reduction.
FormulaResult SmoothL1OrHuberLoss(const OpCall& call);
// smooth_l1_loss_backward(grad, self, target, reduction, beta) and
// huber_loss_backward(..., delta), as vectorized: x = a - b (1), sign by
// compare + select (2), |x| (1), x / beta (smooth L1) or sign * delta (Huber)
// (1), |x| >= beta compare + select (2), norm * out * g (2): 9N.
FormulaResult SmoothL1OrHuberLossBackward(const OpCall& call);

// binary_cross_entropy(self, target, weight, reduction):
// (y - 1) * max(log1p(-x), -100) - y * max(log(x), -100): 9N; loss *= weight
// N; reduction.
FormulaResult BinaryCrossEntropy(const OpCall& call);
// binary_cross_entropy_backward(grad, self, target, weight, reduction):
// g * (x - y) / max((1 - x) * x, eps): 6N; grad *= weight N; mean: / numel N.
FormulaResult BinaryCrossEntropyBackward(const OpCall& call);
// binary_cross_entropy_with_logits(self, target, weight, pos_weight,
// reduction) (CompositeExplicitAutograd: the row owns its children):
// log_sigmoid 7S (S = self's elements: it runs before broadcasting);
// (1 - y) * x - log_sigmoid: 3N; pos_weight:
// (pw - 1) P, * y N, + 1 N, log_sigmoid *= N; loss *= weight N; reduction.
// P = pos_weight elements. (Its backward is no kernel: autograd runs the
// derivatives.yaml formula as pointwise calls, counted by their own rows.)
FormulaResult BinaryCrossEntropyWithLogits(const OpCall& call);
// soft_margin_loss(self, target, reduction) (CompositeExplicitAutograd):
// log1p(exp(-x * y)) as neg, mul, exp, log1p: 4N + reduction (N = self).
FormulaResult SoftMarginLoss(const OpCall& call);
// soft_margin_loss_backward(grad, self, target, reduction): z = exp(-y * x)
// (T negations of target + 2N), y * z, * -norm, z + 1, / (z + 1), * g (5N):
// T + 7N (T = target elements).
FormulaResult SoftMarginLossBackward(const OpCall& call);

// multi_margin_loss(self, target, p, margin, weight, reduction): F frames of
// D classes. Per frame, for each of the D - 1 non-target classes
// z = margin - x[t] + x[d] (2), z > 0 (1), z * z for p = 2 (1), * w[t] (1);
// the D - 1 terms summed (D - 2 adds) and divided by D (1). Reduced (or a
// 0-D target): frames summed (F - 1), mean divides by F (1).
FormulaResult MultiMarginLoss(const OpCall& call);
// multi_margin_loss_backward(grad, self, target, p, margin, weight,
// reduction): z for every class (2D per frame); for the D - 1 non-target
// classes z > 0 (1), 2g * z for p = 2 (1; 2 * g is constant), * w[t] (1),
// accumulated into the target's gradient (1); then grad_input *= grad_output
// (D per frame): F (3D + (D - 1)(2 + [p = 2] + [weight])).
FormulaResult MultiMarginLossBackward(const OpCall& call);
// multilabel_margin_loss_forward(self, target, reduction) -> (output,
// is_target): F frames of D classes; the kernel visits (target slot, class)
// pairs until the target list ends (-1) and skips classes that are targets.
// Counted as the full D x D nest: per pair the is_target test (1),
// z = 1 - x[t] + x[d] (2), z > 0 (1); the D^2 terms of a frame summed
// (D^2 - 1) and divided by D (1): none 5 F D^2; reduced: the frames' sums are
// summed (F - 1), divided by D once (1) and by F for mean (1): 5 F D^2 + [mean].
FormulaResult MultilabelMarginLossForward(const OpCall& call);
// multilabel_margin_loss_backward(grad, self, target, reduction, is_target):
// per (slot, class) pair the is_target test (1), z (2), z > 0 (1) and the
// two gradient updates (2); then grad_input *= grad_output: 6 F D^2 + F D.
FormulaResult MultilabelMarginLossBackward(const OpCall& call);

}  // namespace torchscan::losses
