// Operator-view formulas on tiny calls; every expected value is derived by
// hand in the comment beside it (outputs x terms per dot x 2 for products).
#include <gtest/gtest.h>

#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include "formulas/attention.h"
#include "formulas/convolution.h"
#include "formulas/matmul.h"
#include "formulas/registry.h"
#include "formulas/torch_compat.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

Count Flops(FormulaFn f, const CallBuilder& b) {
  const FormulaResult r = f(b.Call());
  EXPECT_EQ(r.status, MetricStatus::kComplete) << r.message;
  return r.value;
}

// Fused attention: the matrix core is known, the rest is a stated gap.
Count Known(FormulaFn f, const CallBuilder& b) {
  const FormulaResult r = f(b.Call());
  EXPECT_EQ(r.status, MetricStatus::kPartial) << r.message;
  EXPECT_EQ(r.code, "fused_attention_matrix_core_only");
  return r.value;
}

TEST(Matmul, MmCountsTwoPerTermOfEachDot) {
  // (2x3)@(3x4): 8 outputs, each a 3-term dot -> 8*3*2 = 48.
  EXPECT_EQ(Flops(matmul::Mm, CallBuilder("aten::mm").Tensor({2, 3}).Tensor({3, 4}).Out({2, 4})), 48);
}

TEST(Matmul, AddmmOmitsBias) {
  // Same product as above; the bias add is not part of the native convention.
  EXPECT_EQ(Flops(matmul::Addmm, CallBuilder("aten::addmm").Tensor({4}).Tensor({2, 3}).Tensor({3, 4})), 48);
}

TEST(Matmul, BmmAndBaddbmmMultiplyByBatch) {
  // 5 batches of (2x3)@(3x4) = 5*48 = 240.
  EXPECT_EQ(Flops(matmul::Bmm, CallBuilder("aten::bmm").Tensor({5, 2, 3}).Tensor({5, 3, 4})), 240);
  EXPECT_EQ(Flops(matmul::Baddbmm, CallBuilder("aten::baddbmm").Tensor({5, 2, 4}).Tensor({5, 2, 3}).Tensor({5, 3, 4})),
            240);
}

TEST(Matmul, EmptyInnerDimensionIsZero) {
  // K = 0: the dots are empty, zero work.
  EXPECT_EQ(Flops(matmul::Mm, CallBuilder("aten::mm").Tensor({2, 0}).Tensor({0, 4})), 0);
}

TEST(Matmul, VectorProducts) {
  // dot of 7 terms: 14; (3x5)@(5): 3 dots of 5 terms = 30; outer 3x4: 12 one-term dots = 24.
  EXPECT_EQ(Flops(matmul::Dot, CallBuilder("aten::dot").Tensor({7}).Tensor({7})), 14);
  EXPECT_EQ(Flops(matmul::Mv, CallBuilder("aten::mv").Tensor({3, 5}).Tensor({5})), 30);
  EXPECT_EQ(Flops(matmul::Addmv, CallBuilder("aten::addmv").Tensor({3}).Tensor({3, 5}).Tensor({5})), 30);
  EXPECT_EQ(Flops(matmul::Addr, CallBuilder("aten::addr").Tensor({3, 4}).Tensor({3}).Tensor({4})), 24);
}

TEST(Matmul, MismatchedShapesAreUnavailableNotZero) {
  const FormulaResult r = matmul::Mm(CallBuilder("aten::mm").Tensor({2, 3}).Tensor({4, 5}).Call());
  EXPECT_EQ(r.status, MetricStatus::kUnavailable);
  EXPECT_EQ(r.code, "unsupported_operator_formula");
  const FormulaResult r3 = matmul::Mm(CallBuilder("aten::mm").Tensor({2, 3, 1}).Tensor({3, 5}).Call());
  EXPECT_EQ(r3.status, MetricStatus::kUnavailable);
}

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
CallBuilder Conv(std::initializer_list<int64_t> x, std::initializer_list<int64_t> w, bool transposed, int64_t groups,
                 std::initializer_list<int64_t> out) {
  CallBuilder b("aten::convolution");
  b.Tensor(x).Tensor(w).None().Ints({1, 1}).Ints({0, 0}).Ints({1, 1}).Bool(transposed).Ints({0, 0}).Int(groups);
  b.Out(out);
  return b;
}

TEST(Convolution, Dense) {
  // x (1,2,5,5), w (4,2,3,3) -> y (1,4,3,3): 36 outputs, each a dot of 2*3*3 = 18
  // terms -> 36*18*2 = 1296.
  EXPECT_EQ(Flops(convolution::Convolution, Conv({1, 2, 5, 5}, {4, 2, 3, 3}, false, 1, {1, 4, 3, 3})), 1296);
}

TEST(Convolution, GroupedAndDepthwise) {
  // groups=2: x (1,4,5,5), w (6,2,3,3) -> y (1,6,3,3): 54 outputs, each sees
  // 4/2 channels * 9 = 18 terms -> 54*18*2 = 1944.
  EXPECT_EQ(Flops(convolution::Convolution, Conv({1, 4, 5, 5}, {6, 2, 3, 3}, false, 2, {1, 6, 3, 3})), 1944);
  // depthwise: x (2,3,4,4), w (3,1,3,3) -> y (2,3,2,2): 24 outputs of 9 terms -> 24*9*2 = 432.
  EXPECT_EQ(Flops(convolution::Convolution, Conv({2, 3, 4, 4}, {3, 1, 3, 3}, false, 3, {2, 3, 2, 2})), 432);
}

TEST(Convolution, TransposedCountsScatterFromInputs) {
  // x (1,2,3,3), w (2,4,3,3) -> y (1,4,5,5): each of the 18 input values is
  // multiplied by 4*9 = 36 weights -> 648 products -> 1296.
  EXPECT_EQ(Flops(convolution::Convolution, Conv({1, 2, 3, 3}, {2, 4, 3, 3}, true, 1, {1, 4, 5, 5})), 1296);
}

TEST(Convolution, Backward) {
  // grad_out (1,4,3,3), x (1,2,5,5), w (4,2,3,3).
  // grad_input: each of 36 grad_out values meets 2*9 weights -> 648 products -> 1296.
  // grad_weight: each of 72 weights sums 9 positions -> 648 products -> 1296.
  auto call = [](std::initializer_list<int64_t> mask) {
    CallBuilder b("aten::convolution_backward");
    b.Tensor({1, 4, 3, 3}).Tensor({1, 2, 5, 5}).Tensor({4, 2, 3, 3}).Ints({4}).Ints({1, 1}).Ints({0, 0});
    b.Ints({1, 1}).Bool(false).Ints({0, 0}).Int(1).Bools(mask);
    b.Out({1, 2, 5, 5}).Out({4, 2, 3, 3}).Out({4});
    return b;
  };
  EXPECT_EQ(Flops(convolution::ConvolutionBackward, call({1, 1, 1})), 2592);
  EXPECT_EQ(Flops(convolution::ConvolutionBackward, call({1, 0, 0})), 1296);
  EXPECT_EQ(Flops(convolution::ConvolutionBackward, call({0, 1, 1})), 1296);
  EXPECT_EQ(Flops(convolution::ConvolutionBackward, call({0, 0, 1})), 0);  // bias grad: a sum, not a product
}

TEST(Attention, ForwardTwoProductsPerHead) {
  // b=1, h=2, sq=3, sk=4, d=5, dv=6. Per head: scores = 3*4 dots of 5 terms = 60
  // products; out = 3*6 dots of 4 terms = 72 products; (60+72)*2 = 264. Two heads: 528.
  EXPECT_EQ(Known(attention::SdpaForward, CallBuilder("aten::_scaled_dot_product_flash_attention_for_cpu")
                                              .Tensor({1, 2, 3, 5})
                                              .Tensor({1, 2, 4, 5})
                                              .Tensor({1, 2, 4, 6})),
            528);
}

TEST(Attention, GroupedQueryUsesQueryHeads) {
  // 4 query heads over 2 KV heads: 4 * 264 = 1056.
  EXPECT_EQ(Known(attention::SdpaForward, CallBuilder("aten::_scaled_dot_product_flash_attention_for_cpu")
                                              .Tensor({1, 4, 3, 5})
                                              .Tensor({1, 2, 4, 5})
                                              .Tensor({1, 2, 4, 6})),
            1056);
  // 3 query heads over 2 KV heads is not a valid grouping.
  const FormulaResult bad = attention::SdpaForward(
      CallBuilder("aten::x").Tensor({1, 3, 3, 5}).Tensor({1, 2, 4, 5}).Tensor({1, 2, 4, 6}).Call());
  EXPECT_EQ(bad.status, MetricStatus::kUnavailable);
}

TEST(Attention, BackwardFiveProducts) {
  // Per head (sq=3, sk=4, d=5, dv=6), products:
  //   recompute scores 3*4*5 = 60; grad scores (3x6)(6x4) = 72; grad V (4x3)(3x6) = 72;
  //   grad Q (3x4)(4x5) = 60; grad K (4x3)(3x5) = 60 -> 324 products -> 648 FLOPs.
  // Two heads: 2 * 648 = 1296.
  EXPECT_EQ(Known(attention::SdpaBackward, CallBuilder("aten::_scaled_dot_product_flash_attention_for_cpu_backward")
                                               .Tensor({1, 2, 3, 6})
                                               .Tensor({1, 2, 3, 5})
                                               .Tensor({1, 2, 4, 5})
                                               .Tensor({1, 2, 4, 6})),
            1296);
}

TEST(Attention, CpuKernelCountsTheWholeFallbackRow) {
  // The CPU SDPA kernel has no native formula: the "CPU SDPA fallback" row.
  // q (1,2,3,4), k/v (1,2,5,4): A = 1*2*3*5 = 30 scores, R = 6 rows.
  // Products 2*30*4 + 2*6*5*4 = 480, scale 30, softmax 5*30 - 2*6 = 138: 648.
  const auto sdpa = [](bool causal, bool mask, double dropout) {
    CallBuilder b("aten::_scaled_dot_product_flash_attention_for_cpu");
    b.Tensor({1, 2, 3, 4}).Tensor({1, 2, 5, 4}).Tensor({1, 2, 5, 4}).Double(dropout).Bool(causal);
    if (mask) {
      b.Tensor({3, 5});
    } else {
      b.None();
    }
    return attention::SdpaCpu(b.None().Out({1, 2, 3, 4}).Call());
  };
  const FormulaResult plain = sdpa(false, false, 0);
  EXPECT_EQ(plain.status, MetricStatus::kComplete) << plain.message;
  EXPECT_EQ(plain.value, 648);
  // A causal and an explicit mask: one op per score each, 648 + 2*30.
  EXPECT_EQ(sdpa(true, true, 0).value, 708);
  // Dropout inside the kernel is outside the row.
  EXPECT_EQ(sdpa(false, false, 0.1).status, MetricStatus::kUnavailable);
  // The registry uses it (not the native kernels' matrix-core-only formula)
  // before torch 2.15; from 2.15 on, FlopCounterMode counts this kernel's
  // products, and the native row wins.
#if TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
  EXPECT_EQ(FindOperatorFormula("aten::_scaled_dot_product_flash_attention_for_cpu")->flops, &attention::SdpaForward);
#else
  EXPECT_EQ(FindOperatorFormula("aten::_scaled_dot_product_flash_attention_for_cpu")->flops, &attention::SdpaCpu);
#endif
}

TEST(Attention, VarlenNeedsOffsetsAndIsUnavailable) {
  const FormulaResult r = attention::FlashForward(CallBuilder("aten::_flash_attention_forward")
                                                      .Tensor({7, 2, 5})
                                                      .Tensor({7, 2, 5})
                                                      .Tensor({7, 2, 5})
                                                      .Tensor({3}, c10::kInt)
                                                      .Tensor({3}, c10::kInt)
                                                      .Call());
  EXPECT_EQ(r.status, MetricStatus::kUnavailable);
}

TEST(Registry, NativeRowsAndInPlaceSharing) {
  ASSERT_NE(FindOperatorFormula("aten::mm"), nullptr);
  EXPECT_EQ(FindOperatorFormula("aten::mm")->source, FormulaSource::kNative);
#if TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
  constexpr FormulaSource kCpuFlash = FormulaSource::kNative;
#else
  constexpr FormulaSource kCpuFlash = FormulaSource::kFallback;
#endif
  EXPECT_EQ(FindOperatorFormula("aten::_scaled_dot_product_flash_attention_for_cpu")->source, kCpuFlash);
  // addmm_ (in-place) shares addmm's formula; an unknown operator has none.
  EXPECT_EQ(FindOperatorFormula("aten::addmm_"), FindOperatorFormula("aten::addmm"));
  EXPECT_EQ(FindOperatorFormula("aten::_trilinear"), nullptr);
  EXPECT_EQ(FindOperatorFormula("aten::relu_"), FindOperatorFormula("aten::relu"));
  // Dunder names are not in-place variants.
  EXPECT_EQ(FindOperatorFormula("aten::__and__"), nullptr);
}

TEST(Registry, ZeroCostFromSchemaAndNames) {
  auto classify = [](const char* schema) { return ClassifyZeroCost(torch::jit::parseSchema(schema)); };
  EXPECT_EQ(classify("aten::t(Tensor(a) self) -> Tensor(a)"), ZeroCostReason::kView);
  EXPECT_EQ(classify("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"),
            ZeroCostReason::kNone);
  EXPECT_EQ(classify("aten::relu(Tensor self) -> Tensor"), ZeroCostReason::kNone);
  EXPECT_EQ(classify("aten::empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
                     "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"),
            ZeroCostReason::kAllocation);
  EXPECT_EQ(classify("aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"), ZeroCostReason::kCopy);
}

}  // namespace
}  // namespace torchscan
