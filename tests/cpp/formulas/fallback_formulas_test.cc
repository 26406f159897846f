// torchscan_flops_v1 fallback rows, one test per row, on tiny calls whose
// expected counts are written as arithmetic from the row's formula.
#include <gtest/gtest.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <string>

#include "formulas/elementwise.h"
#include "formulas/indexing.h"
#include "formulas/misc.h"
#include "formulas/normalization.h"
#include "formulas/pooling.h"
#include "formulas/reduction.h"
#include "formulas/registry.h"
#include "formulas/softmax.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

using testing::Evaluate;

using testing::Flops;

// (2,3) float input and output: N = 6.
CallBuilder Unary(const char* op, c10::ScalarType t = c10::kFloat) {
  CallBuilder b(op);
  b.Tensor({2, 3}, t).Out({2, 3}, t);
  return b;
}

TEST(ScalarArithmetic, OneOperationPerOutputValue) {
  // exp/sqrt/erf, comparison and selection: 1 per value -> 6.
  for (const char* op : {"aten::exp", "aten::sqrt", "aten::erf", "aten::relu", "aten::neg", "aten::sin",
                         "aten::reciprocal", "aten::ceil", "aten::log"}) {
    EXPECT_EQ(Flops(op, Unary(op)), 6) << op;
  }
  // Broadcast binary ops count per output: (2,1) * (1,3) -> (2,3): 6.
  EXPECT_EQ(Flops("aten::mul", CallBuilder("aten::mul").Tensor({2, 1}).Tensor({1, 3}).Out({2, 3})), 6);
  EXPECT_EQ(Flops("aten::lt", CallBuilder("aten::lt").Tensor({2, 3}).Tensor({2, 3}).Out({2, 3}, c10::kBool)), 6);
  EXPECT_EQ(Flops("aten::where",
                  CallBuilder("aten::where").Tensor({2, 3}, c10::kBool).Tensor({2, 3}).Tensor({2, 3}).Out({2, 3})),
            6);
}

TEST(ScalarArithmetic, AlphaAddsAMultiplyAndRoundingAddsAnOperation) {
  // add(x, y, alpha=1): 6; alpha=2: 6 adds + 6 multiplies = 12.
  EXPECT_EQ(Flops("aten::add", CallBuilder("aten::add").Tensor({2, 3}).Tensor({2, 3}).Int(1).Out({2, 3})), 6);
  EXPECT_EQ(Flops("aten::add", CallBuilder("aten::add").Tensor({2, 3}).Tensor({2, 3}).Int(2).Out({2, 3})), 12);
  // Reverse subtraction other - alpha*self with alpha = 0.5: 12.
  EXPECT_EQ(Flops("aten::rsub", CallBuilder("aten::rsub").Tensor({2, 3}).Double(3.0).Double(0.5).Out({2, 3})), 12);
  // div with rounding_mode="floor": divide + floor = 12; without: 6.
  EXPECT_EQ(Flops("aten::div", CallBuilder("aten::div").Tensor({2, 3}).Tensor({2, 3}).Str("floor").Out({2, 3})), 12);
  EXPECT_EQ(Flops("aten::div", CallBuilder("aten::div").Tensor({2, 3}).Tensor({2, 3}).Out({2, 3})), 6);
  // In-place variants share the functional formula.
  EXPECT_EQ(Flops("aten::add_", CallBuilder("aten::add_").Tensor({2, 3}).Tensor({2, 3}).Int(1).Out({2, 3})), 6);
}

TEST(ScalarArithmetic, PowersCountOnePerValueWhateverTheExponent) {
  // pow(x, 2) (squaring unchanged), pow(x, 0.5), pow(x, y): one per value -> 6.
  EXPECT_EQ(Flops("aten::pow", CallBuilder("aten::pow").Tensor({2, 3}).Int(2).Out({2, 3})), 6);
  EXPECT_EQ(Flops("aten::pow", CallBuilder("aten::pow").Tensor({2, 3}).Double(0.5).Out({2, 3})), 6);
  EXPECT_EQ(Flops("aten::pow", CallBuilder("aten::pow").Tensor({2, 3}).Tensor({2, 3}).Out({2, 3})), 6);
  // Integer base with a float exponent computes in floating point: counted.
  EXPECT_EQ(Flops("aten::pow", CallBuilder("aten::pow").Tensor({2, 3}, c10::kLong).Double(0.5).Out({2, 3})), 6);
}

TEST(DtypeRules, IntegerExcludedComplexIncompleteConstantsExcluded) {
  // Integer/boolean fallback arithmetic is excluded: zero, complete.
  EXPECT_EQ(
      Flops("aten::add",
            CallBuilder("aten::add").Tensor({2, 3}, c10::kInt).Tensor({2, 3}, c10::kInt).Int(1).Out({2, 3}, c10::kInt)),
      0);
  EXPECT_EQ(Flops("aten::bitwise_not", Unary("aten::bitwise_not", c10::kBool)), 0);
  // Complex stays incomplete without a caller override.
  const FormulaResult c = Evaluate("aten::exp", Unary("aten::exp", c10::kComplexFloat));
  EXPECT_EQ(c.status, MetricStatus::kUnavailable);
  EXPECT_EQ(c.code, "complex_arithmetic");
  // addcmul: the tensor operands set the dtype (float), not the scalar value.
  // self + value * t1 * t2 with value = 1: multiply + add = 2 per value -> 12;
  // value = 0.5 adds the coefficient multiply -> 18.
  auto addcmul = [](double value) {
    CallBuilder b("aten::addcmul");
    b.Tensor({2, 3}).Tensor({2, 3}).Tensor({2, 3}).Double(value).Out({2, 3});
    return b;
  };
  EXPECT_EQ(Flops("aten::addcmul", addcmul(1.0)), 12);
  EXPECT_EQ(Flops("aten::addcmul", addcmul(0.5)), 18);
  // Sparse tensors are not counted.
  CallBuilder sparse("aten::exp");
  sparse.Tensor({2, 3}).Out({2, 3});
  OpCall call = sparse.Call();
  TensorMeta t = call.args[0].tensor();
  t.strided = false;
  ArgMeta args[] = {ArgMeta::Tensor(&t)};
  call.args = args;
  EXPECT_EQ(FindOperatorFormula("aten::exp")->flops(call).status, MetricStatus::kUnavailable);
}

TEST(Activations, SymbolicExpansionsPerElement) {
  // N = 6; counts per element from the table.
  const std::pair<const char*, int> rows[] = {
      {"aten::hardtanh", 2},   {"aten::threshold", 2},     {"aten::hardshrink", 3},
      {"aten::leaky_relu", 4}, {"aten::_prelu_kernel", 4}, {"aten::hardsigmoid", 4},
      {"aten::sigmoid", 4},    {"aten::hardswish", 5},     {"aten::softshrink", 5},
      {"aten::silu", 5},       {"aten::elu", 6},           {"aten::tanh", 6},
      {"aten::celu", 7},       {"aten::selu", 7},          {"aten::log_sigmoid_forward", 7},
      {"aten::softplus", 7},   {"aten::mish", 10},
  };
  for (const auto& [op, per] : rows) EXPECT_EQ(Flops(op, Unary(op)), 6 * per) << op;
}

TEST(Activations, GeluExactAndTanhGluHalvesItsSplitDimension) {
  // Exact GELU: 5N = 30; tanh approximation: 14N = 84.
  EXPECT_EQ(Flops("aten::gelu", CallBuilder("aten::gelu").Tensor({2, 3}).Str("none").Out({2, 3})), 30);
  EXPECT_EQ(Flops("aten::gelu", CallBuilder("aten::gelu").Tensor({2, 3}).Str("tanh").Out({2, 3})), 84);
  // GLU over dim 1 of (2,4): output (2,2), N = 4 output values -> 5N = 20.
  EXPECT_EQ(Flops("aten::glu", CallBuilder("aten::glu").Tensor({2, 4}).Int(1).Out({2, 2})), 20);
}

TEST(Activations, RreluEvalIsLeakyTrainingSamples) {
  auto rrelu = [](bool training) {
    CallBuilder b("aten::rrelu_with_noise");
    b.Tensor({2, 3}).Tensor({2, 3}).Double(0.1).Double(0.3).Bool(training).Out({2, 3});
    return b;
  };
  EXPECT_EQ(Flops("aten::rrelu_with_noise", rrelu(false)), 24);  // 4N
  EXPECT_EQ(Evaluate("aten::rrelu_with_noise", rrelu(true)).code, "random_sampling");
}

TEST(Reductions, SumMeanAndMax) {
  // sum over dim 1 of (2,3): N=6 values into R=2 -> 4 adds. Full sum: 5.
  EXPECT_EQ(Flops("aten::sum", CallBuilder("aten::sum").Tensor({2, 3}).Ints({1}).Bool(false).None().Out({2})), 4);
  EXPECT_EQ(Flops("aten::sum", CallBuilder("aten::sum").Tensor({2, 3}).None().Out({})), 5);
  // mean adds R divides: 4 + 2 = 6.
  EXPECT_EQ(Flops("aten::mean", CallBuilder("aten::mean").Tensor({2, 3}).Ints({1}).Bool(false).None().Out({2})), 6);
  // Reducing nothing (N = R) costs nothing: max(N - R, 0).
  EXPECT_EQ(Flops("aten::sum", CallBuilder("aten::sum").Tensor({2, 3}).Ints({}).Bool(false).None().Out({2, 3})), 0);
  // Integer sum with dtype=float computes in float: counted (dtype > out > input).
  EXPECT_EQ(Flops("aten::sum", CallBuilder("aten::sum")
                                   .Tensor({2, 3}, c10::kLong)
                                   .Int(static_cast<int64_t>(c10::kFloat))
                                   .Out({}, c10::kFloat)),
            5);
  EXPECT_EQ(Flops("aten::sum", CallBuilder("aten::sum").Tensor({2, 3}, c10::kLong).None().Out({}, c10::kLong)), 0);
  // amax over dim 0 of (2,3) -> 3 outputs: 3 comparisons; binary max: one per value.
  EXPECT_EQ(Flops("aten::amax", CallBuilder("aten::amax").Tensor({2, 3}).Ints({0}).Bool(false).Out({3})), 3);
  EXPECT_EQ(Flops("aten::max", CallBuilder("aten::max").Tensor({2, 3}).Tensor({2, 3}).Out({2, 3})), 6);
}

TEST(Reductions, CumulativeSumsCostNMinusRows) {
  // cumsum over dim 1 of (2,3): rows = 2, N = 6 -> 4 adds.
  EXPECT_EQ(Flops("aten::cumsum", CallBuilder("aten::cumsum").Tensor({2, 3}).Int(1).None().Out({2, 3})), 4);
  EXPECT_EQ(Flops("aten::cumsum_", CallBuilder("aten::cumsum_").Tensor({2, 3}).Int(0).None().Out({2, 3})), 3);
}

TEST(Reductions, VectorNormOrders) {
  // Full norm of (2,3): N = 6, R = 1.
  auto norm = [](double ord) {
    CallBuilder b("aten::linalg_vector_norm");
    b.Tensor({2, 3}).Double(ord).None().Bool(false).None().Out({});
    return b;
  };
  EXPECT_EQ(Flops("aten::linalg_vector_norm", norm(1)), 6 + 5);         // |x| N, adds N - R
  EXPECT_EQ(Flops("aten::linalg_vector_norm", norm(2)), 6 + 5 + 1);     // squares, adds, sqrt R
  EXPECT_EQ(Flops("aten::linalg_vector_norm", norm(INFINITY)), 6 + 5);  // |x| N, comparisons N - R
  EXPECT_EQ(Evaluate("aten::linalg_vector_norm", norm(3)).code, "unsupported_norm_order");
}

TEST(Softmax, StableSafeAndLog) {
  // softmax over dim 1 of (2,3): N = 6, R = 2.
  auto call = [](const char* op) {
    CallBuilder b(op);
    b.Tensor({2, 3}).Int(1).Bool(false).Out({2, 3});
    return b;
  };
  EXPECT_EQ(Flops("aten::_softmax", call("aten::_softmax")), 5 * 6 - 2 * 2);            // 26
  EXPECT_EQ(Flops("aten::_safe_softmax", call("aten::_safe_softmax")), 7 * 6 - 2 * 2);  // + 2N
  EXPECT_EQ(Flops("aten::_log_softmax", call("aten::_log_softmax")), 4 * 6 - 2);        // 22
}

TEST(Normalization, LayerNormRowsAndAffine) {
  // (2,3,4) over normalized_shape (4): N = 24, R = 6.
  auto ln = [](bool weight, bool bias) {
    CallBuilder b("aten::native_layer_norm");
    b.Tensor({2, 3, 4}).Ints({4});
    weight ? b.Tensor({4}) : b.None();
    bias ? b.Tensor({4}) : b.None();
    b.Double(1e-5).Out({2, 3, 4});
    return b;
  };
  EXPECT_EQ(Flops("aten::native_layer_norm", ln(true, true)), 6 * 24 + 2 * 6 + 2 * 24);  // 204
  EXPECT_EQ(Flops("aten::native_layer_norm", ln(false, false)), 6 * 24 + 2 * 6);         // 156
  // Zero batches: zero work, complete; empty rows: unsupported.
  CallBuilder empty_batch("aten::native_layer_norm");
  empty_batch.Tensor({0, 4}).Ints({4}).None().None().Double(1e-5);
  EXPECT_EQ(Flops("aten::native_layer_norm", empty_batch), 0);
  CallBuilder empty_rows("aten::native_layer_norm");
  empty_rows.Tensor({2, 0}).Ints({0}).None().None().Double(1e-5);
  EXPECT_EQ(Evaluate("aten::native_layer_norm", empty_rows).status, MetricStatus::kUnavailable);
}

TEST(Normalization, GroupNormRowsAreBatchTimesGroups) {
  // (2,4,3) with 2 groups: N = 24, R = 2 * 2 = 4, affine both: 6*24 + 2*4 + 2*24 = 200.
  CallBuilder b("aten::native_group_norm");
  b.Tensor({2, 4, 3}).Tensor({4}).Tensor({4}).Int(2).Int(4).Int(3).Int(2).Double(1e-5);
  EXPECT_EQ(Flops("aten::native_group_norm", b), 200);
}

TEST(Normalization, BatchNormPathsFollowTheCall) {
  // (2,3,2,2): N = 24, C = 3, affine A = 2.
  auto bn = [](bool training, bool running) {
    CallBuilder b("aten::native_batch_norm");
    b.Tensor({2, 3, 2, 2}).Tensor({3}).Tensor({3});
    running ? b.Tensor({3}) : b.None();
    running ? b.Tensor({3}) : b.None();
    b.Bool(training).Double(0.1).Double(1e-5);
    return b;
  };
  const int64_t saved = 2 * 24 + 2 * 3 + 2 * 24;  // 102: eval, running stats
  EXPECT_EQ(Flops("aten::native_batch_norm", bn(false, true)), saved);
  EXPECT_EQ(Flops("aten::native_batch_norm", bn(true, false)), saved + 4 * 24);                 // batch stats
  EXPECT_EQ(Flops("aten::native_batch_norm", bn(true, true)), saved + 4 * 24 + 3 * 3 + 5 * 3);  // + updates
  CallBuilder empty("aten::native_batch_norm");
  empty.Tensor({0, 3}).None().None().None().None().Bool(false).Double(0.1).Double(1e-5);
  EXPECT_EQ(Evaluate("aten::native_batch_norm", empty).status, MetricStatus::kUnavailable);
}

TEST(Normalization, RmsNormAndWeightNorm) {
  // rms_norm of (2,4) over (4): N = 8, R = 2; weight: (3+1)*8 + 2*2 = 36; none: 3*8 + 4 = 28.
  EXPECT_EQ(Flops("aten::rms_norm", CallBuilder("aten::rms_norm").Tensor({2, 4}).Ints({4}).Tensor({4}).None()), 36);
  EXPECT_EQ(Flops("aten::rms_norm", CallBuilder("aten::rms_norm").Tensor({2, 4}).Ints({4}).None().None()), 28);
  // weight norm: v (3,4), g (3,1): N = 12, R = 3 -> 3*12 + 3 = 39.
  EXPECT_EQ(Flops("aten::_weight_norm_interface",
                  CallBuilder("aten::_weight_norm_interface").Tensor({3, 4}).Tensor({3, 1}).Int(0)),
            39);
}

TEST(Pooling, FixedWindowsMaxKMinusOneAverageK) {
  // 2x2 windows (K = 4) over (1,1,4,4) -> (1,1,2,2): 4 outputs.
  CallBuilder max("aten::max_pool2d_with_indices");
  max.Tensor({1, 1, 4, 4}).Ints({2, 2}).Ints({2, 2}).Ints({0, 0}).Ints({1, 1}).Bool(false).Out({1, 1, 2, 2});
  EXPECT_EQ(Flops("aten::max_pool2d_with_indices", max), 3 * 4);
  CallBuilder avg("aten::avg_pool2d");
  avg.Tensor({1, 1, 4, 4}).Ints({2}).Ints({2}).Ints({0}).Bool(false).Bool(true).None().Out({1, 1, 2, 2});
  EXPECT_EQ(Flops("aten::avg_pool2d", avg), 4 * 4);
  // Ceil mode: 3x3 windows over 4x4 with stride 2, ceil -> 2x2 outputs, nominal K = 9 each.
  CallBuilder ceil("aten::max_pool2d_with_indices");
  ceil.Tensor({1, 1, 4, 4}).Ints({3, 3}).Ints({2, 2}).Ints({0, 0}).Ints({1, 1}).Bool(true).Out({1, 1, 2, 2});
  EXPECT_EQ(Flops("aten::max_pool2d_with_indices", ceil), 8 * 4);
  // Unbatched (C, H, W) = (2,5,5) with one kernel size 2: the operator is 2-d,
  // so the window is 2x2 (K = 4), not 2: (2,2,2) = 8 outputs x 3 comparisons = 24.
  CallBuilder unbatched("aten::max_pool2d_with_indices");
  unbatched.Tensor({2, 5, 5}).Ints({2}).Ints({2}).Ints({0}).Ints({1}).Bool(false).Out({2, 2, 2});
  EXPECT_EQ(Flops("aten::max_pool2d_with_indices", unbatched), 24);
}

TEST(Pooling, AdaptiveUsesExactOverlappingWindows) {
  // L = 5 -> O = 3 windows: [0,2) [1,4) [3,5): 2 + 3 + 2 = 7 = 5 + 3 - gcd(5,3).
  EXPECT_EQ(pooling::AdaptiveAxisVisits(5, 3), 7);
  EXPECT_EQ(pooling::AdaptiveAxisVisits(4, 2), 4);  // divisible: every value once
  // (2,3,5,4) -> (3,2): V = 2*3 * 7 * (4 + 2 - 2) = 168; outputs O = 2*3*3*2 = 36.
  CallBuilder avg("aten::_adaptive_avg_pool2d");
  avg.Tensor({2, 3, 5, 4}).Ints({3, 2}).Out({2, 3, 3, 2});
  EXPECT_EQ(Flops("aten::_adaptive_avg_pool2d", avg), 168);  // V - O adds + O divides
  CallBuilder max("aten::adaptive_max_pool2d");
  max.Tensor({2, 3, 5, 4}).Ints({3, 2}).Out({2, 3, 3, 2}).Out({2, 3, 3, 2}, c10::kLong);
  EXPECT_EQ(Flops("aten::adaptive_max_pool2d", max), 168 - 36);
}

TEST(Dropout, EvalZeroTrainingTwoNOrNAtOne) {
  auto d = [](double p, bool train) {
    CallBuilder b("aten::dropout");
    b.Tensor({2, 3}).Double(p).Bool(train);
    return b;
  };
  EXPECT_EQ(Flops("aten::dropout", d(0.5, false)), 0);
  EXPECT_EQ(Flops("aten::dropout", d(0.0, true)), 0);
  EXPECT_EQ(Flops("aten::dropout", d(0.5, true)), 12);  // mask + rescale: 2N
  EXPECT_EQ(Flops("aten::dropout", d(1.0, true)), 6);   // mask only: N
}

TEST(Lookups, EmbeddingIsFreeRenormIsUnsupported) {
  CallBuilder e("aten::embedding");
  e.Tensor({10, 4}).Tensor({2, 5}, c10::kLong).Int(-1).Bool(false).Bool(false).Out({2, 5, 4});
  EXPECT_EQ(Flops("aten::embedding", e), 0);
  CallBuilder r("aten::embedding_renorm_");
  r.Tensor({10, 4}).Tensor({3}, c10::kLong).Double(1.0).Double(2.0);
  EXPECT_EQ(Evaluate("aten::embedding_renorm_", r).code, "unsupported_embedding_max_norm");
}

TEST(Interpolation, NearestCopiesWeightedBlendsKNeighbours) {
  // Output (1,1,4,4): N = 16.
  CallBuilder nearest("aten::upsample_nearest2d");
  nearest.Tensor({1, 1, 2, 2}, c10::kByte).Ints({4, 4}).None().None().Out({1, 1, 4, 4}, c10::kByte);
  EXPECT_EQ(Flops("aten::upsample_nearest2d", nearest), 0);
  CallBuilder bilinear("aten::upsample_bilinear2d");
  bilinear.Tensor({1, 1, 2, 2}).Ints({4, 4}).Bool(false).None().None().Out({1, 1, 4, 4});
  EXPECT_EQ(Flops("aten::upsample_bilinear2d", bilinear), (2 * 4 - 1) * 16);  // 112
  CallBuilder bicubic("aten::upsample_bicubic2d");
  bicubic.Tensor({1, 1, 2, 2}).Ints({4, 4}).Bool(false).None().None().Out({1, 1, 4, 4});
  EXPECT_EQ(Flops("aten::upsample_bicubic2d", bicubic), (2 * 16 - 1) * 16);  // 496
  CallBuilder linear("aten::upsample_linear1d");
  linear.Tensor({1, 1, 3}).Ints({6}).Bool(false).None().Out({1, 1, 6});
  EXPECT_EQ(Flops("aten::upsample_linear1d", linear), 3 * 6);
}

TEST(Exclusions, RandomSamplingIsVisibleNotZero) {
  const FormulaResult r = Evaluate("aten::bernoulli_", CallBuilder("aten::bernoulli_").Tensor({2, 3}).Double(0.5));
  EXPECT_EQ(r.status, MetricStatus::kUnavailable);
  EXPECT_EQ(r.code, "random_sampling");
}

}  // namespace
}  // namespace torchscan

namespace torchscan {
namespace {

using testing::CallBuilder;

// ---- Rows once wrong or missing: corrected and new rows.

TEST(Scatter, OneCombinePerIndexElementNotPerSourceValue) {
  // scatter_add(zeros(3,5), 0, index (1,5), src (3,5)): only src[0, :] is read,
  // one add per index element: 5 (not src.numel() = 15).
  EXPECT_EQ(
      Flops(
          "aten::scatter_add",
          CallBuilder("aten::scatter_add").Tensor({3, 5}).Int(0).Tensor({1, 5}, c10::kLong).Tensor({3, 5}).Out({3, 5})),
      5);
  // scatter_reduce "mean": 5 combines + one divide per output value (15): 20.
  EXPECT_EQ(Flops("aten::scatter_reduce", CallBuilder("aten::scatter_reduce")
                                              .Tensor({3, 5})
                                              .Int(0)
                                              .Tensor({1, 5}, c10::kLong)
                                              .Tensor({3, 5})
                                              .Str("mean")
                                              .Bool(true)
                                              .Out({3, 5})),
            20);
  // scatter(reduce="add") with a src tensor or a scalar value: 5 either way.
  EXPECT_EQ(Flops("aten::scatter", CallBuilder("aten::scatter")
                                       .Tensor({3, 5})
                                       .Int(0)
                                       .Tensor({1, 5}, c10::kLong)
                                       .Tensor({3, 5})
                                       .Str("add")
                                       .Out({3, 5})),
            5);
  EXPECT_EQ(Flops("aten::scatter", CallBuilder("aten::scatter")
                                       .Tensor({3, 5})
                                       .Int(0)
                                       .Tensor({1, 5}, c10::kLong)
                                       .Double(2.0)
                                       .Str("add")
                                       .Out({3, 5})),
            5);
}

TEST(IndexPut, AccumulateAddsOncePerIndexedPositionWithBroadcasting) {
  // zeros(4).index_put_((arange(4).repeat(25),), tensor(1.), accumulate=True):
  // 100 indexed positions, the one-element value broadcast to each: 100 adds.
  EXPECT_EQ(Flops("aten::index_put_",
                  CallBuilder("aten::index_put_").Tensor({4}).TensorList({{100}}).Tensor({}).Bool(true).Out({4})),
            100);
  // self (6,7,8,9)[None, idx (2,1), idx (3)]: the indices broadcast to (2,3),
  // the None keeps 6 and the trailing 9 stays: 6 * 2*3 * 9 = 324.
  EXPECT_EQ(Flops("aten::index_put_", CallBuilder("aten::index_put_")
                                          .Tensor({6, 7, 8, 9})
                                          .TensorList({{-1}, {2, 1}, {3}})
                                          .Tensor({1})
                                          .Bool(true)
                                          .Out({6, 7, 8, 9})),
            6 * 2 * 3 * 9);
  // Without accumulate it is a copy.
  EXPECT_EQ(Flops("aten::index_put_",
                  CallBuilder("aten::index_put_").Tensor({4}).TensorList({{100}}).Tensor({}).Bool(false).Out({4})),
            0);
  // A boolean mask selects a value-dependent number of positions.
  const FormulaResult mask =
      Evaluate("aten::index_put",
               CallBuilder("aten::index_put").Tensor({4}).TensorList({{4}}, c10::kBool).Tensor({}).Bool(true).Out({4}));
  EXPECT_EQ(mask.status, MetricStatus::kUnavailable);
  EXPECT_EQ(mask.code, "data_dependent_index");
}

TEST(Col2im, SumsWhatLandsInsideTheOutput) {
  // F.fold of (1, 2*2*2, 9) into 4x4 with 2x2 windows, stride 1: 3 blocks per
  // axis, 6 landings on 4 positions per axis: 2 channels * (36 - 16) = 40,
  // the sum rule N - R = 72 - 32.
  EXPECT_EQ(Flops("aten::col2im", CallBuilder("aten::col2im")
                                      .Tensor({1, 8, 9})
                                      .Ints({4, 4})
                                      .Ints({2, 2})
                                      .Ints({1, 1})
                                      .Ints({0, 0})
                                      .Ints({1, 1})
                                      .Out({1, 2, 4, 4})),
            40);
  // Padding 1, 3x3 windows, stride 2 over 3x3: blocks (3+2-2-1)/2+1 = 2 per
  // axis starting at -1 and 1; block 0 spans -1..1 and lands on 0,1 (2),
  // block 1 spans 1..3 and lands on 1,2 (2): 4 landings covering all 3
  // positions. One plane: 4*4 - 3*3 = 7 (values falling in the padding are
  // dropped, not summed).
  EXPECT_EQ(Flops("aten::col2im", CallBuilder("aten::col2im")
                                      .Tensor({9, 4})
                                      .Ints({3, 3})
                                      .Ints({3, 3})
                                      .Ints({1, 1})
                                      .Ints({1, 1})
                                      .Ints({2, 2})
                                      .Out({1, 3, 3})),
            7);
  // Stride 3 with 2-wide windows over 5: blocks 0 and 1 land on {0,1} and
  // {3,4}: nothing overlaps, position 2 receives nothing: 4*4 - 4*4 = 0.
  EXPECT_EQ(Flops("aten::col2im", CallBuilder("aten::col2im")
                                      .Tensor({1, 4, 4})
                                      .Ints({5, 5})
                                      .Ints({2, 2})
                                      .Ints({1, 1})
                                      .Ints({0, 0})
                                      .Ints({3, 3})
                                      .Out({1, 1, 5, 5})),
            0);
}

TEST(Resolve, NegationOnlyWhenANewTensorCameBack) {
  // resolve_neg of a negative-bit view returns a new tensor: one negation per value: 6.
  EXPECT_EQ(Flops("aten::resolve_neg",
                  CallBuilder("aten::resolve_neg").Tensor({2, 3}).Id(1).Out({2, 3}).Id(2).ReturnsAlias()),
            6);
  // Without the bit it returns its input: 0.
  EXPECT_EQ(Flops("aten::resolve_neg",
                  CallBuilder("aten::resolve_neg").Tensor({2, 3}).Id(1).Out({2, 3}).Id(1).ReturnsAlias()),
            0);
  // Complex conjugation follows the complex rule.
  EXPECT_EQ(Evaluate("aten::resolve_conj", CallBuilder("aten::resolve_conj")
                                               .Tensor({2, 3}, c10::kComplexFloat)
                                               .Id(1)
                                               .Out({2, 3}, c10::kComplexFloat)
                                               .Id(2)
                                               .ReturnsAlias())
                .status,
            MetricStatus::kUnavailable);
}

TEST(RealModelOperators, MasksMembershipCrossAndLogs) {
  // tril/triu: one selection per value of (2,3): 6.
  EXPECT_EQ(Flops("aten::tril", CallBuilder("aten::tril").Tensor({2, 3}).Int(0).Out({2, 3})), 6);
  EXPECT_EQ(Flops("aten::triu_", CallBuilder("aten::triu_").Tensor({2, 3}).Int(1).Out({2, 3})), 6);
  // A boolean causal mask: no arithmetic.
  EXPECT_EQ(Flops("aten::tril", CallBuilder("aten::tril").Tensor({2, 3}, c10::kBool).Int(0).Out({2, 3}, c10::kBool)),
            0);
  // isin of 3 values against 2: 2 < 10 * 3^0.145, pairwise: 3 * 2 = 6.
  EXPECT_EQ(Flops("aten::isin",
                  CallBuilder("aten::isin").Tensor({3}).Tensor({2}).Bool(false).Bool(false).Out({3}, c10::kBool)),
            6);
  // Integer ids (generation stopping criteria): excluded integer comparisons.
  EXPECT_EQ(Flops("aten::isin", CallBuilder("aten::isin")
                                    .Tensor({3}, c10::kLong)
                                    .Tensor({2}, c10::kLong)
                                    .Bool(false)
                                    .Bool(false)
                                    .Out({3}, c10::kBool)),
            0);
  // 20 test elements for 3 values: 20 >= 10 * 3^0.145 = 11.7: PyTorch sorts.
  EXPECT_EQ(Evaluate("aten::isin",
                     CallBuilder("aten::isin").Tensor({3}).Tensor({20}).Bool(false).Bool(false).Out({3}, c10::kBool))
                .status,
            MetricStatus::kUnavailable);
  // aminmax over (4,5) by rows: two folds of 20 into 4: 2 * 16 = 32.
  EXPECT_EQ(Flops("aten::aminmax", CallBuilder("aten::aminmax").Tensor({4, 5}).Int(1).Bool(false).Out({4}).Out({4})),
            32);
  // logsumexp over rows of (4,5), N = 20, R = 4: max 16, subtract 20, exp 20,
  // sum 16, log 4, add 4 = 80 = 4N.
  EXPECT_EQ(Flops("aten::logsumexp", CallBuilder("aten::logsumexp").Tensor({4, 5}).Ints({1}).Bool(false).Out({4})), 80);
  // Integer input: reduced in the float result dtype, still 80.
  EXPECT_EQ(Flops("aten::logsumexp",
                  CallBuilder("aten::logsumexp").Tensor({4, 5}, c10::kLong).Ints({1}).Bool(false).Out({4})),
            80);
  // linalg_cross of (2,3) vectors: per value 2 multiplies + 1 subtract: 3 * 6 = 18.
  EXPECT_EQ(
      Flops("aten::linalg_cross", CallBuilder("aten::linalg_cross").Tensor({2, 3}).Tensor({2, 3}).Int(-1).Out({2, 3})),
      18);
  // xlogy: log + multiply + the x == 0 selection: 3 * 6 = 18.
  EXPECT_EQ(Flops("aten::xlogy", CallBuilder("aten::xlogy").Tensor({2, 3}).Tensor({2, 3}).Out({2, 3})), 18);
  // _euclidean_dist((30,3), (4,3)): x1 rows 30 * (5 + 3) = 240, x2 rows 4 * 5 = 20,
  // 120 outputs * (2*(3+2) + 2) = 1440: 1700.
  EXPECT_EQ(
      Flops("aten::_euclidean_dist", CallBuilder("aten::_euclidean_dist").Tensor({30, 3}).Tensor({4, 3}).Out({30, 4})),
      1700);
  // index_copy is a copy.
  EXPECT_EQ(
      Flops("aten::index_copy_",
            CallBuilder("aten::index_copy_").Tensor({5, 2}).Int(0).Tensor({2}, c10::kLong).Tensor({2, 2}).Out({5, 2})),
      0);
}

TEST(Exclusions, TrainingStepGapsAreStatedWithTheirReasons) {
  // Value-dependent work (CTC alignments, GradScaler's skip/update) has no
  // convention: stated, with a reason, and never a formula. In-place variants
  // share the functional name's reason.
  for (const char* op : {"aten::_ctc_loss", "aten::_ctc_loss_backward", "aten::_amp_update_scale_",
                         "aten::_amp_foreach_non_finite_check_and_unscale_"}) {
    ASSERT_NE(StatedExclusion(op), nullptr) << op;
    EXPECT_EQ(FindOperatorFormula(op), nullptr) << op;
  }
  EXPECT_NE(std::string(StatedExclusion("aten::_ctc_loss")).find("target lengths"), std::string::npos);
  // The backward kernels once listed here are counted now (torchscan_training_v1).
  for (const char* op : {"aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                         "aten::mkldnn_rnn_layer_backward", "aten::threshold_backward"}) {
    EXPECT_EQ(StatedExclusion(op), nullptr) << op;
    EXPECT_NE(FindOperatorFormula(op), nullptr) << op;
  }
}

TEST(ZeroCost, RulesAgreeWithAliasInformation) {
  auto classify = [](const char* schema) { return ClassifyZeroCost(torch::jit::parseSchema(schema)); };
  // A view with no alias annotation (a new tensor on the same storage).
  EXPECT_EQ(classify("aten::_unsafe_view(Tensor self, SymInt[] size) -> Tensor"), ZeroCostReason::kView);
  EXPECT_EQ(classify("aten::unsafe_split.Tensor(Tensor self, SymInt split_size, int dim=0) -> Tensor[]"),
            ZeroCostReason::kView);
  // Its out= overload writes the pieces into the destinations: a copy.
  EXPECT_EQ(classify("aten::unsafe_split.Tensor_out(Tensor self, SymInt split_size, int dim=0, *, "
                     "Tensor(a!)[] out) -> ()"),
            ZeroCostReason::kCopy);
  // Foreach copies and fills move or write values, no arithmetic.
  EXPECT_EQ(classify("aten::_foreach_zero_(Tensor(a!)[] self) -> ()"), ZeroCostReason::kFill);
  EXPECT_EQ(classify("aten::_foreach_copy_(Tensor(a!)[] self, Tensor[] src, bool non_blocking=False) -> ()"),
            ZeroCostReason::kCopy);
  // In-place views write only metadata.
  EXPECT_EQ(classify("aten::transpose_(Tensor(a!) self, int dim0, int dim1) -> Tensor(a!)"), ZeroCostReason::kMetadata);
  EXPECT_EQ(classify("aten::unsqueeze_(Tensor(a!) self, int dim) -> Tensor(a!)"), ZeroCostReason::kMetadata);
  EXPECT_EQ(classify("profiler::_record_function_exit(Tensor handle) -> ()"), ZeroCostReason::kMetadata);
  // Views that copy when strides do not allow a view: their decomposition decides.
  EXPECT_EQ(classify("aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"), ZeroCostReason::kNone);
  // lift_fresh returns its input (schema rule); col2im sums, it is not a copy.
  EXPECT_EQ(classify("aten::lift_fresh(Tensor(a) self) -> Tensor(a)"), ZeroCostReason::kView);
  EXPECT_EQ(classify("aten::col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, "
                     "int[2] padding, int[2] stride) -> Tensor"),
            ZeroCostReason::kNone);
  EXPECT_NE(FindOperatorFormula("aten::col2im"), nullptr);
}

TEST(GroupedMatmul, PackedRowsCountTwoPerInputElementPerOutputColumn) {
  // Packed rows: self (6 rows, K=4) over 2 groups of (4 x 3): each of the 24 input
  // values meets 3 output columns: 2 * 24 * 3 = 144 (= 2 * 6 * 3 * 4).
  CallBuilder b("aten::_grouped_mm");
  b.Tensor({6, 4}).Tensor({2, 4, 3}).Tensor({2}, c10::kInt).None().None().Out({6, 3});
  const FormulaResult r = FindOperatorFormula("aten::_grouped_mm")->flops(b.Call());
  EXPECT_EQ(r.value, 144);
}

TEST(CompiledRegion, IsUnknownWorkNamingTheBackend) {
  // A compiled region's kernels ran outside the dispatcher: never a count,
  // always the compiled_region code, and the wording fits the backend.
  const FormulaResult inductor =
      Evaluate("torchscan::compiled_region", CallBuilder("torchscan::compiled_region").Str("inductor"));
  EXPECT_EQ(inductor.status, MetricStatus::kUnavailable);
  EXPECT_EQ(inductor.code, "compiled_region");
  EXPECT_NE(inductor.message.find("torch.compile graph (inductor)"), std::string::npos) << inductor.message;
  const FormulaResult aoti =
      Evaluate("torchscan::compiled_region", CallBuilder("torchscan::compiled_region").Str("aotinductor"));
  EXPECT_EQ(aoti.status, MetricStatus::kUnavailable);
  EXPECT_EQ(aoti.code, "compiled_region");
  // It names AOTInductor and says what to count instead.
  EXPECT_NE(aoti.message.find("AOTInductor package (aotinductor)"), std::string::npos) << aoti.message;
  EXPECT_NE(aoti.message.find("torch.export.export(model, args)"), std::string::npos) << aoti.message;
}

}  // namespace
}  // namespace torchscan
