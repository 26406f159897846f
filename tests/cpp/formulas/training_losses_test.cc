// torchscan_training_v1 loss rows (formulas/losses.h): tiny calls whose
// expected counts are written as arithmetic from each row's derivation.
#include <gtest/gtest.h>

#include <string>

#include "formulas/losses.h"
#include "formulas/registry.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

constexpr int64_t kNone = 0, kMean = 1, kSum = 2;

Count Complete(FormulaResult r) {
  EXPECT_EQ(r.status, MetricStatus::kComplete) << r.message;
  return r.value;
}

// nll_loss_forward(self, target, weight, reduction, ignore_index).
CallBuilder NllForward(const char* op, std::initializer_list<int64_t> self, std::initializer_list<int64_t> target,
                       bool weighted, int64_t reduction, int64_t classes) {
  CallBuilder b(op);
  b.Tensor(self).Tensor(target, c10::kLong);
  if (weighted) {
    b.Tensor({classes});
  } else {
    b.None();
  }
  b.Int(reduction).Int(-100).Out({}).Out({});
  return b;
}

TEST(LossesNll, ForwardPerReduction) {
  using losses::NllLossForward;
  auto f = [](std::initializer_list<int64_t> self, std::initializer_list<int64_t> target, bool w, int64_t r) {
    return Complete(NllLossForward(NllForward("aten::nll_loss_forward", self, target, w, r, 5).Call()));
  };
  // self (3,5), B = 3 rows. none: -x[t] * w[t] (w = 1 without weight) = 2B = 6.
  EXPECT_EQ(f({3, 5}, {3}, false, kNone), 6);
  EXPECT_EQ(f({3, 5}, {3}, true, kNone), 6);
  // sum: loss -= x[t]: B = 3; mean: + 1 divide by total_weight = 4.
  EXPECT_EQ(f({3, 5}, {3}, false, kSum), 3);
  EXPECT_EQ(f({3, 5}, {3}, false, kMean), 4);
  // weighted: B multiplies + B accumulations + (B - 1) weight adds = 3B - 1 = 8; mean 9.
  EXPECT_EQ(f({3, 5}, {3}, true, kSum), 8);
  EXPECT_EQ(f({3, 5}, {3}, true, kMean), 9);
  // A 1-D self is one sample on the scalar path even for reduction none:
  // -x[t] = 1; weighted 3 * 1 - 1 = 2.
  EXPECT_EQ(f({5}, {}, false, kNone), 1);
  EXPECT_EQ(f({5}, {}, true, kNone), 2);
  // An empty batch returns early (mean fills NaN): 0.
  EXPECT_EQ(f({0, 5}, {0}, false, kMean), 0);
  EXPECT_EQ(f({0, 5}, {0}, true, kNone), 0);
}

TEST(LossesNll, Forward2dCountsEveryPosition) {
  // self (2,3,2,2), target (2,2,2): B = 8 positions. none 2B = 16; mean
  // unweighted B + 1 = 9; mean weighted 3B - 1 + 1 = 24.
  auto f = [](bool w, int64_t r) {
    return Complete(
        losses::NllLossForward(NllForward("aten::nll_loss2d_forward", {2, 3, 2, 2}, {2, 2, 2}, w, r, 3).Call()));
  };
  EXPECT_EQ(f(false, kNone), 16);
  EXPECT_EQ(f(false, kMean), 9);
  EXPECT_EQ(f(true, kMean), 24);
}

// nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight).
CallBuilder NllBackward(const char* op, std::initializer_list<int64_t> grad, std::initializer_list<int64_t> self,
                        std::initializer_list<int64_t> target, bool weighted, int64_t reduction, int64_t classes) {
  CallBuilder b(op);
  b.Tensor(grad).Tensor(self).Tensor(target, c10::kLong);
  if (weighted) {
    b.Tensor({classes});
  } else {
    b.None();
  }
  b.Int(reduction).Int(-100).Tensor({}).Out(self);
  return b;
}

TEST(LossesNll, BackwardPerReduction) {
  auto f = [](std::initializer_list<int64_t> grad, bool w, int64_t r) {
    return Complete(losses::NllLossBackward(NllBackward("aten::nll_loss_backward", grad, {3, 5}, {3}, w, r, 5).Call()));
  };
  // none: grad_input[i][t] = -w * g[i]: 2B = 6 (weighted or not).
  EXPECT_EQ(f({3}, false, kNone), 6);
  EXPECT_EQ(f({3}, true, kNone), 6);
  // mean: g' = -(g / total_weight) once = 2; sum: -g = 1.
  EXPECT_EQ(f({}, false, kMean), 2);
  EXPECT_EQ(f({}, false, kSum), 1);
  // weighted: + w[t] * g' per row (B = 3): 5 and 4.
  EXPECT_EQ(f({}, true, kMean), 5);
  EXPECT_EQ(f({}, true, kSum), 4);
  // 2d, B = 8 positions, weighted mean: 2 + 8 = 10; none: 2B = 16.
  EXPECT_EQ(Complete(losses::NllLossBackward(
                NllBackward("aten::nll_loss2d_backward", {}, {2, 3, 2, 2}, {2, 2, 2}, true, kMean, 3).Call())),
            10);
  EXPECT_EQ(Complete(losses::NllLossBackward(
                NllBackward("aten::nll_loss2d_backward", {2, 2, 2}, {2, 3, 2, 2}, {2, 2, 2}, false, kNone, 3).Call())),
            16);
}

// (self, target, reduction[, beta]) on (4,5): N = 20.
CallBuilder Pair(const char* op, int64_t reduction, bool scalar_out = true) {
  CallBuilder b(op);
  b.Tensor({4, 5}).Tensor({4, 5}).Int(reduction);
  if (scalar_out) {
    b.Out({});
  } else {
    b.Out({4, 5});
  }
  return b;
}

TEST(LossesPointwise, MseSmoothL1HuberForward) {
  // mse: (a - b)^2 = 2N = 40; sum + 19 adds = 59; mean + 19 adds + 1 divide = 60.
  EXPECT_EQ(Complete(losses::MseLoss(Pair("aten::mse_loss", kNone, false).Call())), 40);
  EXPECT_EQ(Complete(losses::MseLoss(Pair("aten::mse_loss", kSum).Call())), 59);
  EXPECT_EQ(Complete(losses::MseLoss(Pair("aten::mse_loss", kMean).Call())), 60);
  // Broadcast (4,1) against (1,5): N = 20 loss values: 40.
  CallBuilder bc("aten::mse_loss");
  bc.Tensor({4, 1}).Tensor({1, 5}).Int(kNone).Out({4, 5});
  EXPECT_EQ(Complete(losses::MseLoss(bc.Call())), 40);
  // smooth L1 / Huber: 8N = 160; mean + 20 = 180; sum + 19 = 179.
  CallBuilder sl1 = Pair("aten::smooth_l1_loss", kMean);
  sl1.Double(0.5);
  EXPECT_EQ(Complete(losses::SmoothL1OrHuberLoss(sl1.Call())), 180);
  CallBuilder huber = Pair("aten::huber_loss", kSum);
  huber.Double(1.0);
  EXPECT_EQ(Complete(losses::SmoothL1OrHuberLoss(huber.Call())), 179);
}

// (grad_output, self, target, reduction[, beta]) -> grad_input (4,5): N = 20.
CallBuilder Backward(const char* op, std::initializer_list<int64_t> grad, int64_t reduction) {
  CallBuilder b(op);
  b.Tensor(grad).Tensor({4, 5}).Tensor({4, 5}).Int(reduction);
  return b;
}

TEST(LossesPointwise, MseSmoothL1HuberBackward) {
  // mse: norm * (a - b) * g: 3N = 60, whatever the reduction.
  CallBuilder mse = Backward("aten::mse_loss_backward", {}, kMean);
  mse.Out({4, 5});
  EXPECT_EQ(Complete(losses::MseLossBackward(mse.Call())), 60);
  // smooth L1 / Huber backward: 9N = 180.
  CallBuilder sl1 = Backward("aten::smooth_l1_loss_backward", {4, 5}, kNone);
  sl1.Double(1.0).Out({4, 5});
  EXPECT_EQ(Complete(losses::SmoothL1OrHuberLossBackward(sl1.Call())), 180);
  CallBuilder huber = Backward("aten::huber_loss_backward", {}, kSum);
  huber.Double(0.5).Out({4, 5});
  EXPECT_EQ(Complete(losses::SmoothL1OrHuberLossBackward(huber.Call())), 180);
}

TEST(LossesPointwise, BinaryCrossEntropy) {
  // Forward: 9N = 180; weight + N; mean + 20: 220. Unweighted none: 180.
  CallBuilder w("aten::binary_cross_entropy");
  w.Tensor({4, 5}).Tensor({4, 5}).Tensor({4, 5}).Int(kMean).Out({});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropy(w.Call())), 220);
  CallBuilder plain("aten::binary_cross_entropy");
  plain.Tensor({4, 5}).Tensor({4, 5}).None().Int(kNone).Out({4, 5});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropy(plain.Call())), 180);
  // Backward: 6N = 120; weight + 20; mean divides each value + 20: 160.
  CallBuilder bwd("aten::binary_cross_entropy_backward");
  bwd.Tensor({}).Tensor({4, 5}).Tensor({4, 5}).Tensor({4, 5}).Int(kMean).Out({4, 5});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropyBackward(bwd.Call())), 160);
  CallBuilder bnone("aten::binary_cross_entropy_backward");
  bnone.Tensor({4, 5}).Tensor({4, 5}).Tensor({4, 5}).None().Int(kNone).Out({4, 5});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropyBackward(bnone.Call())), 120);
}

TEST(LossesPointwise, BinaryCrossEntropyWithLogits) {
  // log_sigmoid 7N + (1 - y) * x - ls 3N = 200; pos_weight (5): P + 3N = 65;
  // weight N = 20; mean 20: 305.
  CallBuilder all("aten::binary_cross_entropy_with_logits");
  all.Tensor({4, 5}).Tensor({4, 5}).Tensor({5}).Tensor({5}).Int(kMean).Out({});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropyWithLogits(all.Call())), 305);
  // Neither: 200 + sum 19 = 219.
  CallBuilder plain("aten::binary_cross_entropy_with_logits");
  plain.Tensor({4, 5}).Tensor({4, 5}).None().None().Int(kSum).Out({});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropyWithLogits(plain.Call())), 219);
  // self (4,1) broadcast against target (4,6): log_sigmoid on self's 4 values 7*4 = 28,
  // then (1 - y) * x - ls on the 24 broadcast values 3*24 = 72; no reduction: 100.
  CallBuilder broadcast("aten::binary_cross_entropy_with_logits");
  broadcast.Tensor({4, 1}).Tensor({4, 6}).None().None().Int(kNone).Out({4, 6});
  EXPECT_EQ(Complete(losses::BinaryCrossEntropyWithLogits(broadcast.Call())), 100);
}

TEST(LossesPointwise, SoftMargin) {
  // neg, mul, exp, log1p: 4N = 80; mean + 20 = 100.
  EXPECT_EQ(Complete(losses::SoftMarginLoss(Pair("aten::soft_margin_loss", kMean).Call())), 100);
  // Backward: -y (T = 20) + 7N = 160.
  CallBuilder b = Backward("aten::soft_margin_loss_backward", {}, kMean);
  b.Out({4, 5});
  EXPECT_EQ(Complete(losses::SoftMarginLossBackward(b.Call())), 160);
}

// multi_margin_loss(self, target, p, margin, weight, reduction).
CallBuilder MultiMargin(std::initializer_list<int64_t> self, std::initializer_list<int64_t> target, int64_t p,
                        bool weighted, int64_t reduction) {
  CallBuilder b("aten::multi_margin_loss");
  b.Tensor(self).Tensor(target, c10::kLong).Int(p).Int(1);
  if (weighted) {
    b.Tensor({4});
  } else {
    b.None();
  }
  b.Int(reduction).Out({});
  return b;
}

TEST(LossesMargin, MultiMarginForward) {
  auto f = [](std::initializer_list<int64_t> self, std::initializer_list<int64_t> target, int64_t p, bool w,
              int64_t r) { return Complete(losses::MultiMarginLoss(MultiMargin(self, target, p, w, r).Call())); };
  // F = 3 frames, D = 4 classes, p = 1: per frame (D - 1) * 3 = 9, D - 2 = 2
  // adds, 1 divide = 12; x 3 = 36 (none). mean: + (F - 1) adds + 1 divide = 39.
  EXPECT_EQ(f({3, 4}, {3}, 1, false, kNone), 36);
  EXPECT_EQ(f({3, 4}, {3}, 1, false, kMean), 39);
  // p = 2 with weight: 5 per term: 15 + 2 + 1 = 18 per frame; x 3 + 2 = 56 (sum).
  EXPECT_EQ(f({3, 4}, {3}, 2, true, kSum), 56);
  // A 1-D self with a 0-D target is one frame on the scalar path: 12.
  EXPECT_EQ(f({4}, {}, 1, false, kNone), 12);
  // Empty input returns early.
  EXPECT_EQ(f({0, 4}, {0}, 1, false, kMean), 0);
  // p = 3 is refused by the kernel: no count.
  EXPECT_EQ(losses::MultiMarginLoss(MultiMargin({3, 4}, {3}, 3, false, kMean).Call()).status,
            MetricStatus::kUnavailable);
}

TEST(LossesMargin, MultiMarginBackward) {
  auto f = [](int64_t p, bool w) {
    CallBuilder b("aten::multi_margin_loss_backward");
    b.Tensor({}).Tensor({3, 4}).Tensor({3}, c10::kLong).Int(p).Int(1);
    if (w) {
      b.Tensor({4});
    } else {
      b.None();
    }
    b.Int(kMean).Out({3, 4});
    return Complete(losses::MultiMarginLossBackward(b.Call()));
  };
  // Per frame: z for every class 2D = 8, final * grad_output D = 4, and for
  // the D - 1 = 3 others z > 0 and the accumulation (2 each) = 6: 18; x 3 = 54.
  EXPECT_EQ(f(1, false), 54);
  // p = 2 and weight add 2 per other class: 12 + 12 = 24 per frame: 72.
  EXPECT_EQ(f(2, true), 72);
}

TEST(LossesMargin, MultilabelMargin) {
  // F = 2 frames, D = 3 classes: 9 pairs per frame: 4 per pair + 8 adds + 1
  // divide = 45 per frame: 90 (none). Reduced: 72 + (2 * 8 + 1) adds + 1 divide
  // = 90; mean divides once more: 91.
  auto f = [](int64_t r) {
    CallBuilder b("aten::multilabel_margin_loss_forward");
    b.Tensor({2, 3}).Tensor({2, 3}, c10::kLong).Int(r).Out({}).Out({2, 3});
    return Complete(losses::MultilabelMarginLossForward(b.Call()));
  };
  EXPECT_EQ(f(kNone), 90);
  EXPECT_EQ(f(kSum), 90);
  EXPECT_EQ(f(kMean), 91);
  // Backward: 6 per pair x 18 pairs = 108, then grad_input *= g: 6 values: 114.
  CallBuilder b("aten::multilabel_margin_loss_backward");
  b.Tensor({}).Tensor({2, 3}).Tensor({2, 3}, c10::kLong).Int(kMean).Tensor({2, 3}).Out({2, 3});
  EXPECT_EQ(Complete(losses::MultilabelMarginLossBackward(b.Call())), 114);
}

TEST(LossesRules, DtypeAndReductionOperand) {
  // Complex loss values have no convention: unavailable, never zero.
  CallBuilder c("aten::mse_loss");
  c.Tensor({4, 5}, c10::kComplexFloat).Tensor({4, 5}, c10::kComplexFloat).Int(kMean).Out({});
  EXPECT_EQ(losses::MseLoss(c.Call()).status, MetricStatus::kUnavailable);
  // A reduction operand other than 0/1/2 is not a kernel call: unavailable.
  EXPECT_EQ(losses::MseLoss(Pair("aten::mse_loss", 3).Call()).status, MetricStatus::kUnavailable);
  // Half precision counts like float: 40.
  CallBuilder h("aten::mse_loss");
  h.Tensor({4, 5}, c10::kHalf).Tensor({4, 5}, c10::kHalf).Int(kNone).Out({4, 5}, c10::kHalf);
  EXPECT_EQ(Complete(losses::MseLoss(h.Call())), 40);
}

TEST(LossesRules, EveryLossKernelHasARow) {
  for (const char* op :
       {"aten::nll_loss_forward", "aten::nll_loss2d_forward", "aten::nll_loss_backward", "aten::nll_loss2d_backward",
        "aten::mse_loss", "aten::mse_loss_backward", "aten::smooth_l1_loss", "aten::smooth_l1_loss_backward",
        "aten::huber_loss", "aten::huber_loss_backward", "aten::binary_cross_entropy",
        "aten::binary_cross_entropy_backward", "aten::binary_cross_entropy_with_logits", "aten::soft_margin_loss",
        "aten::soft_margin_loss_backward", "aten::multi_margin_loss", "aten::multi_margin_loss_backward",
        "aten::multilabel_margin_loss_forward", "aten::multilabel_margin_loss_backward"}) {
    const OperatorFormula* f = FindOperatorFormula(op);
    ASSERT_NE(f, nullptr) << op;
    EXPECT_EQ(f->source, FormulaSource::kFallback) << op;
    // nll_loss and the margin losses read selected values only: not pointwise.
    const std::string name(op);
    const bool selective = name.find("nll") != std::string::npos || name.find("margin_loss") != std::string::npos;
    const bool soft = name.find("soft_margin") != std::string::npos;
    EXPECT_EQ(f->pointwise, soft || !selective) << op;
  }
  // In-place / out overloads share the row; the composite losses have none
  // (their children are counted).
  EXPECT_NE(FindOperatorFormula("aten::mse_loss"), nullptr);
  EXPECT_EQ(FindOperatorFormula("aten::l1_loss"), nullptr);
  EXPECT_EQ(FindOperatorFormula("aten::kl_div"), nullptr);
  EXPECT_EQ(FindOperatorFormula("aten::cross_entropy_loss"), nullptr);
}

}  // namespace
}  // namespace torchscan
