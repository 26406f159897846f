// torchscan_training_v1 rows of the two big CPU backward kernels: the flash
// attention backward and the oneDNN LSTM layer backward. Expected counts are
// derived by hand in the comments from the rows' derivations
// (formulas/attention.cc SdpaCpuBackward, formulas/recurrent.cc
// MkldnnRnnLayerBackward).
#include <gtest/gtest.h>

#include "formulas/attention.h"
#include "formulas/recurrent.h"
#include "formulas/registry.h"
#include "formulas/torch_compat.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

constexpr char kSdpaBwd[] = "aten::_scaled_dot_product_flash_attention_for_cpu_backward";
constexpr char kLstmBwd[] = "aten::mkldnn_rnn_layer_backward";

using testing::Evaluate;

// grad_out, q (1, hq, 3, 4), k/v (1, hkv, 5, 4), out, logsumexp (1, hq, 3).
CallBuilder Sdpa(int64_t hq, int64_t hkv, double dropout, bool causal, bool mask) {
  CallBuilder b(kSdpaBwd);
  b.Tensor({1, hq, 3, 4}).Tensor({1, hq, 3, 4}).Tensor({1, hkv, 5, 4}).Tensor({1, hkv, 5, 4});
  b.Tensor({1, hq, 3, 4}).Tensor({1, hq, 3}).Double(dropout).Bool(causal);
  if (mask) {
    b.Tensor({3, 5});
  } else {
    b.None();
  }
  b.None();  // scale
  b.Out({1, hq, 3, 4}).Out({1, hkv, 5, 4}).Out({1, hkv, 5, 4});
  return b;
}

// The fallback row itself: the registry uses it before torch 2.15, whose
// FlopCounterMode counts this kernel's products (the native row then wins).
FormulaResult Row(const CallBuilder& b) { return attention::SdpaCpuBackward(b.Call()); }

TEST(TrainingAttentionBackward, TheRegistryUsesTheInstalledReleasesRow) {
  const OperatorFormula* f = FindOperatorFormula(kSdpaBwd);
  ASSERT_NE(f, nullptr);
#if TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
  EXPECT_EQ(f->flops, &attention::SdpaBackward);
  EXPECT_EQ(f->source, FormulaSource::kNative);
#else
  EXPECT_EQ(f->flops, &attention::SdpaCpuBackward);
  EXPECT_EQ(f->source, FormulaSource::kFallback);
#endif
}

TEST(TrainingAttentionBackward, CpuFlashBackwardByHand) {
  // q (1,2,3,4), k/v (1,2,5,4), d = dv = 4: A = 1*2*3*5 = 30 scores, R = 6 rows.
  // Products per head (3 queries, 5 keys, width 4), each a dot at 2 FLOPs/term:
  //   recomputed scores q k^T: 3*5 dots of 4 terms  = 60 terms
  //   grad scores grad_out v^T: 3*5 dots of 4        = 60
  //   grad V attn^T grad_out: 5*4 dots of 3          = 60
  //   grad Q gattn k: 3*4 dots of 5                  = 60
  //   grad K gattn^T q: 5*4 dots of 3                = 60
  //   300 terms * 2 = 600 per head, 2 heads: 1200 (torch's sdpa_backward_flop_count).
  // Per score: scale of the recomputed scores 1, exp(s - lse) 2, softmax backward
  //   attn * (gattn - dsum) 2, gradient through the scale 1: 6 * 30 = 180.
  // Per row: rowsum(grad_out * out) 4 multiplies + 3 adds = 7: 6 * 7 = 42.
  // 1200 + 180 + 42 = 1422.
  const FormulaResult plain = Row(Sdpa(2, 2, 0, false, false));
  ASSERT_EQ(plain.status, MetricStatus::kComplete) << plain.message;
  EXPECT_EQ(plain.value, 1422);
  // A causal mask: one selection per score, + 30 = 1452; with an explicit mask
  // as well (an add per score), + 30 more = 1482.
  EXPECT_EQ(Row(Sdpa(2, 2, 0, true, false)).value, 1452);
  EXPECT_EQ(Row(Sdpa(2, 2, 0, false, true)).value, 1452);
  EXPECT_EQ(Row(Sdpa(2, 2, 0, true, true)).value, 1482);
}

TEST(TrainingAttentionBackward, GroupedQueryCountsQueryHeads) {
  // 4 query heads over 2 KV heads: every query head does the per-head work of
  // the test above (600 products + 90 per-score + 21 per-row = 711); the sums of
  // the group's K/V gradients are the continuation of the same dots. 4 * 711 = 2844.
  EXPECT_EQ(Row(Sdpa(4, 2, 0, false, false)).value, 2844);
  // 3 query heads over 2 KV heads is no grouping.
  EXPECT_EQ(Row(Sdpa(3, 2, 0, false, false)).status, MetricStatus::kUnavailable);
}

TEST(TrainingAttentionBackward, RelatesToTheForwardRow) {
  // Same shapes through the forward row: products 2*30*4 + 2*6*5*4 = 480, scale
  // 30, softmax 5*30 - 2*6 = 138: 648. The backward's products (1200) are 2.5
  // times the forward's (five products of the same size instead of two).
  CallBuilder fwd("aten::_scaled_dot_product_flash_attention_for_cpu");
  fwd.Tensor({1, 2, 3, 4}).Tensor({1, 2, 5, 4}).Tensor({1, 2, 5, 4}).Double(0).Bool(false).None().None();
  EXPECT_EQ(attention::SdpaCpu(fwd.Call()).value, 648);
  const std::vector<int64_t> g{1, 2, 3, 4}, q{1, 2, 3, 4}, k{1, 2, 5, 4}, v{1, 2, 5, 4};
  EXPECT_EQ(*attention::SdpaBackwardFlops(g, q, k, v), 1200);
  EXPECT_EQ(*attention::SdpaForwardFlops(q, k, v), 480);
}

TEST(TrainingAttentionBackward, LimitsAndNoGradient) {
  // Dropout inside the kernel is not counted (as in the forward row).
  const FormulaResult dropout = Row(Sdpa(2, 2, 0.1, false, false));
  EXPECT_EQ(dropout.status, MetricStatus::kUnavailable);
  EXPECT_EQ(dropout.code, "unsupported_attention_dropout");
  // grad_out must have the query's (batch, heads, length) and V's width.
  CallBuilder bad(kSdpaBwd);
  bad.Tensor({1, 2, 4, 4}).Tensor({1, 2, 3, 4}).Tensor({1, 2, 5, 4}).Tensor({1, 2, 5, 4});
  bad.Tensor({1, 2, 3, 4}).Tensor({1, 2, 3}).Double(0).Bool(false).None().None();
  EXPECT_EQ(Row(bad).status, MetricStatus::kUnavailable);
  // An undefined grad_out: the kernel returns undefined gradients, computing nothing.
  CallBuilder none(kSdpaBwd);
  none.None().Tensor({1, 2, 3, 4}).Tensor({1, 2, 5, 4}).Tensor({1, 2, 5, 4});
  none.Tensor({1, 2, 3, 4}).Tensor({1, 2, 3}).Double(0).Bool(false).None().None();
  const FormulaResult zero = Row(none);
  EXPECT_EQ(zero.status, MetricStatus::kComplete);
  EXPECT_EQ(zero.value, 0);
}

// input (T=2, B=3, I=2), hidden H=3, LSTM (4 gates): weights (12,2), (12,3).
CallBuilder Lstm(bool grad_output, bool has_biases, int64_t mode = 2) {
  CallBuilder b(kLstmBwd);
  b.Tensor({2, 3, 2}).Tensor({12, 2}).Tensor({12, 3}).Tensor({12}).Tensor({12});
  b.Tensor({3, 3}).Tensor({3, 3}).Tensor({2, 3, 3}).Tensor({3, 3}).Tensor({3, 3});
  if (grad_output) {
    b.Tensor({2, 3, 3});
  } else {
    b.None();
  }
  b.None().None();  // grad_hy, grad_cy
  b.Bool(false).Int(mode).Int(3).Int(1).Bool(has_biases).Bool(true).Bool(false).Ints({}).Bool(false);
  b.Tensor({64}, c10::kByte);
  b.Out({2, 3, 2}).Out({12, 2}).Out({12, 3}).Out({12}).Out({12}).Out({3, 3}).Out({3, 3});
  return b;
}

TEST(TrainingRecurrentBackward, LstmLayerByHand) {
  // T = 2 steps, B = 3 rows: N = 6 (step, row) pairs; I = 2, H = 3, 4 gates.
  // Cell backward per (step, row, unit), from the saved gates i, f, g, o:
  //   tanh(c_t) 6, dh = dy + dh_next 1, dc = dc_next + (1 - t*t)*o*dh 5,
  //   do = (o - o*o)*dh*t 4, di = (i - i*i)*dc*g 4, df = (f - f*f)*dc*c_prev 4,
  //   dg = (1 - g*g)*i*dc 4, dc_prev = dc*f 1 -> 29; 29 * 6 * 3 = 522.
  // Products at 2 FLOPs per term, the 12 gate gradients of each pair:
  //   dx = dgates W_ih: 6 pairs * 2 inputs * 12 terms     = 144 -> 288
  //   dh_prev = dgates W_hh: 6 * 3 * 12                     = 216 -> 432
  //   dW_ih = dgates^T x: 12*2 weights, dots of 6 terms     = 144 -> 288
  //   dW_hh = dgates^T h_prev: 12*3 weights, dots of 6      = 216 -> 432
  //   1440.
  // Bias gradient: 12 sums of 6 values, 5 adds each = 60. b_ih + b_hh: 12.
  // 522 + 1440 + 60 + 12 = 2034.
  const FormulaResult r = Evaluate(kLstmBwd, Lstm(true, true));
  ASSERT_EQ(r.status, MetricStatus::kComplete) << r.message;
  EXPECT_EQ(r.value, 2034);
  // Without biases the kernel adds no b_ih + b_hh: 2022.
  EXPECT_EQ(Evaluate(kLstmBwd, Lstm(true, false)).value, 2022);
  // Twice the forward row's products: the forward counts 2*6*12*(2+3) = 720.
  CallBuilder fwd("aten::mkldnn_rnn_layer");
  fwd.Tensor({2, 3, 2}).Tensor({12, 2}).Tensor({12, 3}).Tensor({12}).Tensor({12}).Tensor({3, 3}).Tensor({3, 3});
  fwd.Bool(false).Ints({}).Int(2).Int(3).Int(1).Bool(true).Bool(false).Bool(false).Bool(true);
  // Forward: 720 + cell 28 * 6 * 3 = 504 -> 1224.
  EXPECT_EQ(Evaluate("aten::mkldnn_rnn_layer", fwd).value, 1224);
}

TEST(TrainingRecurrentBackward, NoGradientAndOtherModes) {
  // No grad_output, grad_hy or grad_cy: the kernel returns undefined tensors: 0.
  const FormulaResult none = Evaluate(kLstmBwd, Lstm(false, true));
  EXPECT_EQ(none.status, MetricStatus::kComplete);
  EXPECT_EQ(none.value, 0);
  // Only grad_cy given still runs the whole backward: 2034.
  CallBuilder only_cy(kLstmBwd);
  only_cy.Tensor({2, 3, 2}).Tensor({12, 2}).Tensor({12, 3}).Tensor({12}).Tensor({12});
  only_cy.Tensor({3, 3}).Tensor({3, 3}).Tensor({2, 3, 3}).Tensor({3, 3}).Tensor({3, 3});
  only_cy.None().None().Tensor({3, 3});
  only_cy.Bool(false).Int(2).Int(3).Int(1).Bool(true).Bool(true).Bool(false).Ints({}).Bool(false);
  only_cy.Tensor({64}, c10::kByte);
  EXPECT_EQ(Evaluate(kLstmBwd, only_cy).value, 2034);
  // The kernel runs oneDNN's LSTM backward only: a GRU mode is not counted.
  EXPECT_EQ(Evaluate(kLstmBwd, Lstm(true, true, 3)).status, MetricStatus::kUnavailable);
}

}  // namespace
}  // namespace torchscan
