// torchscan_training_v1 normalization backward rows (formulas/normalization_backward.h),
// one test per kernel on tiny calls. Each expected value is worked out in the
// comment from the row's derivation, term by term.
#include <gtest/gtest.h>

#include <string_view>

#include "formulas/registry.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

using testing::Evaluate;

using testing::Flops;

// native_layer_norm_backward on a (2, 3) input normalized over [3]: N = 6,
// D = 3, R = 2.
CallBuilder LayerNormCall(bool weight, bool bias, std::initializer_list<int64_t> mask,
                          std::initializer_list<int64_t> sizes = {2, 3}, std::initializer_list<int64_t> shape = {3},
                          c10::ScalarType dtype = c10::kFloat) {
  CallBuilder b("aten::native_layer_norm_backward");
  b.Tensor(sizes, dtype).Tensor(sizes, dtype).Ints(shape).Tensor({2, 1}).Tensor({2, 1});
  weight ? b.Tensor(shape, dtype) : b.None();
  bias ? b.Tensor(shape, dtype) : b.None();
  b.Bools(mask).Out(sizes, dtype).Out(shape, dtype).Out(shape, dtype);
  return b;
}

TEST(LayerNormBackward, CountsOnlyTheRequestedGradients) {
  const char* op = "aten::native_layer_norm_backward";
  // grad_input with a weight: (7 + 3)N + 9R = 60 + 18 = 78 (ds, db: 3N
  // multiplies + 2(N - R) = 8 adds -> 26; b, c: 11R = 22; dx: 5N = 30).
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {1, 0, 0})), 78);
  // grad_weight: 4N - D + 2R = 24 - 3 + 4 = 25; grad_bias: N - D = 3.
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {0, 1, 0})), 25);
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {0, 0, 1})), 3);
  // Every output: 78 + 25 + 3 = 106.
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {1, 1, 1})), 106);
  // elementwise_affine=False: grad_input only, 7N + 9R = 42 + 18 = 60
  // (ds: N multiplies, db none; dx = a*dy + b*x + c: 4N).
  EXPECT_EQ(Flops(op, LayerNormCall(false, false, {1, 0, 0})), 60);
  // Nothing requested: 0.
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {0, 0, 0})), 0);
}

TEST(LayerNormBackward, ZeroRowsCountZeroEmptyRowsAndBadMasksAreUnavailable) {
  const char* op = "aten::native_layer_norm_backward";
  // (0, 3): no rows, the kernel does not run.
  EXPECT_EQ(Flops(op, LayerNormCall(true, true, {1, 1, 1}, {0, 3})), 0);
  // Rows of zero values (D = 0).
  EXPECT_EQ(Evaluate(op, LayerNormCall(false, false, {1, 0, 0}, {2, 0}, {0})).status, MetricStatus::kUnavailable);
  // A mask that is not a bool[3].
  CallBuilder bad("aten::native_layer_norm_backward");
  bad.Tensor({2, 3}).Tensor({2, 3}).Ints({3}).Tensor({2, 1}).Tensor({2, 1}).None().None().Bools({1, 0});
  EXPECT_EQ(Evaluate(op, bad).status, MetricStatus::kUnavailable);
  // Complex stays unavailable.
  EXPECT_EQ(Evaluate(op, LayerNormCall(false, false, {1, 0, 0}, {2, 3}, {3}, c10::kComplexFloat)).status,
            MetricStatus::kUnavailable);
}

// native_group_norm_backward on (2, 4, 3, 3) with 2 groups: B = 2, C = 4,
// HxW = 9, N = 72, P = B*C = 8 planes, R = B*G = 4 rows.
CallBuilder GroupNormCall(bool weight, std::initializer_list<int64_t> mask, int64_t batch = 2, int64_t groups = 2) {
  CallBuilder b("aten::native_group_norm_backward");
  b.Tensor({batch, 4, 3, 3}).Tensor({batch, 4, 3, 3}).Tensor({batch, groups}).Tensor({batch, groups});
  weight ? b.Tensor({4}) : b.None();
  b.Int(batch).Int(4).Int(9).Int(groups).Bools(mask);
  return b;
}

TEST(GroupNormBackward, SharedPlaneSumsAreCountedOnceWhenNeeded) {
  const char* op = "aten::native_group_norm_backward";
  // ds = sum(dy*x): N + (N - P) = 72 + 64 = 136; db = sum(dy): N - P = 64.
  // grad_input with a weight: 4N + 5P + 9R = 288 + 40 + 36 = 364
  // (row sums of ds*w, db*w: 2P + 2(P - R) = 16 + 8 = 24; c2, c3: 11R = 44;
  // c1 = rstd*w: P = 8; dx: 4N = 288).
  // grad_weight: 4P - C = 32 - 4 = 28; grad_bias: P - C = 4.
  // Every output: 136 + 64 + 364 + 28 + 4 = 596.
  EXPECT_EQ(Flops(op, GroupNormCall(true, {1, 1, 1})), 596);
  // grad_input only, no weight: 136 + 64 + 4N + 2P + 9R = 200 + 288 + 16 + 36 = 540.
  EXPECT_EQ(Flops(op, GroupNormCall(false, {1, 0, 0})), 540);
  // grad_weight and grad_bias (input without grad): 136 + 64 + 28 + 4 = 232.
  EXPECT_EQ(Flops(op, GroupNormCall(true, {0, 1, 1})), 232);
  // grad_bias alone needs only db: 64 + 4 = 68.
  EXPECT_EQ(Flops(op, GroupNormCall(true, {0, 0, 1})), 68);
}

TEST(GroupNormBackward, ZeroBatchCountsZeroEmptyGroupsUnavailable) {
  const char* op = "aten::native_group_norm_backward";
  EXPECT_EQ(Flops(op, GroupNormCall(true, {1, 1, 1}, /*batch=*/0)), 0);
  EXPECT_EQ(Evaluate(op, GroupNormCall(true, {1, 1, 1}, 2, /*groups=*/0)).status, MetricStatus::kUnavailable);
}

// native_batch_norm_backward on (2, 3, 2, 2): N = 24, C = 3, M = 8 per channel.
CallBuilder BatchNormCall(const char* op, bool train, bool weight, std::initializer_list<int64_t> mask,
                          std::initializer_list<int64_t> sizes = {2, 3, 2, 2}) {
  CallBuilder b(op);
  b.Tensor(sizes).Tensor(sizes);
  weight ? b.Tensor({3}) : b.None();
  b.Tensor({3}).Tensor({3});  // running stats
  if (train) {
    b.Tensor({3}).Tensor({3});  // saved mean / invstd
  } else {
    b.Tensor({0}).Tensor({0});  // what autograd passes in eval
  }
  b.Bool(train).Double(1e-5).Bools(mask);
  return b;
}

TEST(BatchNormBackward, TrainAndEvalFollowTheKernel) {
  const char* op = "aten::native_batch_norm_backward";
  // Train, weight, every output: 10N + 3C = 240 + 9 = 249:
  // sum(dy): N - C = 21; dotp = sum((x - mean)*dy): 3N - C = 69;
  // grad_input: k, grad_mean 4C = 12 + (5 + 1)N = 144 -> 156; grad_weight C = 3.
  EXPECT_EQ(Flops(op, BatchNormCall(op, true, true, {1, 1, 1})), 249);
  // Train, no weight (affine=False), grad_input only: 21 + 69 + 12 + 5N = 222.
  EXPECT_EQ(Flops(op, BatchNormCall(op, true, false, {1, 0, 0})), 222);
  // Eval, weight, every output: 6N + C = 147: invstd (eps add, reciprocal sqrt)
  // 2C = 6; sum 21; dotp 69;
  // grad_input dy*invstd*w 2N = 48; grad_weight 3.
  EXPECT_EQ(Flops(op, BatchNormCall(op, false, true, {1, 1, 1})), 147);
  // Eval, input without grad ([False, True, True]): 6 + 21 + 69 + 3 = 99.
  EXPECT_EQ(Flops(op, BatchNormCall(op, false, true, {0, 1, 1})), 99);
  // Eval, grad_input only (frozen affine-free norm): invstd 6 + dy*invstd N = 30;
  // neither channel sum is needed.
  EXPECT_EQ(Flops(op, BatchNormCall(op, false, false, {1, 0, 0})), 30);
  // Train, grad_bias only: sum(dy) = 21.
  EXPECT_EQ(Flops(op, BatchNormCall(op, true, true, {0, 0, 1})), 21);
}

TEST(BatchNormBackward, NewOpCudnnAndMiopenShareTheCount) {
  // batch_norm_backward: the same operands plus `reserve`; update=True is train.
  CallBuilder b = BatchNormCall("aten::batch_norm_backward", true, true, {1, 1, 1});
  b.Tensor({0}, c10::kByte);
  EXPECT_EQ(Flops("aten::batch_norm_backward", b), 249);
  CallBuilder e = BatchNormCall("aten::batch_norm_backward", false, true, {1, 1, 1});
  e.Tensor({0}, c10::kByte);
  EXPECT_EQ(Flops("aten::batch_norm_backward", e), 147);
  // cudnn/miopen(input, grad_output, weight, rm, rv, save_mean, save_var, eps[, reserve]):
  // training statistics, every output: 249.
  for (const char* op : {"aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward"}) {
    CallBuilder c(op);
    c.Tensor({2, 3, 2, 2})
        .Tensor({2, 3, 2, 2})
        .Tensor({3})
        .Tensor({3})
        .Tensor({3})
        .Tensor({3})
        .Tensor({3})
        .Double(1e-5);
    EXPECT_EQ(Flops(op, c), 249) << op;
  }
}

TEST(BatchNormBackward, EmptyAndRankOneInputsAreUnavailable) {
  const char* op = "aten::native_batch_norm_backward";
  EXPECT_EQ(Evaluate(op, BatchNormCall(op, true, true, {1, 1, 1}, {0, 3, 2, 2})).status, MetricStatus::kUnavailable);
  EXPECT_EQ(Evaluate(op, BatchNormCall(op, true, true, {1, 1, 1}, {3})).status, MetricStatus::kUnavailable);
}

// _fused_rms_norm_backward on (2, 3) over [3]: N = 6, D = 3, R = 2.
CallBuilder RmsCall(bool weight, std::initializer_list<int64_t> mask) {
  CallBuilder b("aten::_fused_rms_norm_backward");
  b.Tensor({2, 3}).Tensor({2, 3}).Ints({3}).Tensor({2, 1});
  weight ? b.Tensor({3}) : b.None();
  b.Bools(mask);
  return b;
}

TEST(FusedRmsNormBackward, CudaKernelArithmetic) {
  const char* op = "aten::_fused_rms_norm_backward";
  // grad_input with a weight: (8 + 2)N = 60: s = sum(dy*w*x*rstd) 3N + (N - R)
  // = 18 + 4; term1 R = 2; dx = (D*w*dy - x*rstd*s)*term1 6N = 36.
  EXPECT_EQ(Flops(op, RmsCall(true, {1, 0})), 60);
  // Plus grad_weight: 3N - D = 15 -> 75.
  EXPECT_EQ(Flops(op, RmsCall(true, {1, 1})), 75);
  // No weight: 8N = 48 (2N + 4 + 2 + 5N).
  EXPECT_EQ(Flops(op, RmsCall(false, {1, 0})), 48);
}

TEST(WeightNormBackward, BothDimsCountTheSame) {
  const char* op = "aten::_weight_norm_interface_backward";
  // dim = 0: v (2, 3), g (2, 1): N = 6, R = 2 -> 5N + 3R = 36
  // (sums N + N - R = 10; grad_g, a, b 4R = 8; grad_v 3N = 18).
  CallBuilder first(op);
  first.Tensor({2, 3}).Tensor({2, 3}).Tensor({2, 1}).Tensor({2, 1}).Int(0);
  EXPECT_EQ(Flops(op, first), 36);
  // Last dim: v (3, 2), g (1, 2): N = 6, R = 2 -> 36.
  CallBuilder last(op);
  last.Tensor({3, 2}).Tensor({3, 2}).Tensor({1, 2}).Tensor({1, 2}).Int(1);
  EXPECT_EQ(Flops(op, last), 36);
  // No slices: unavailable.
  CallBuilder empty(op);
  empty.Tensor({0, 3}).Tensor({0, 3}).Tensor({0, 1}).Tensor({0, 1}).Int(0);
  EXPECT_EQ(Evaluate(op, empty).status, MetricStatus::kUnavailable);
}

}  // namespace
}  // namespace torchscan
