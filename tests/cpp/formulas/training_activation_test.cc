// torchscan_training_v1 activation, softmax and dropout backward rows
// (formulas/activation_backward.h): tiny calls whose expected counts are
// written as arithmetic from each kernel's per-element derivation.
#include <gtest/gtest.h>

#include <vector>

#include "formulas/activation_backward.h"
#include "formulas/registry.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

using testing::Evaluate;

using testing::Flops;

// (grad, self) of shape (2,3) with a (2,3) result: N = 6.
CallBuilder GradSelf(const char* op, c10::ScalarType t = c10::kFloat) {
  CallBuilder b(op);
  b.Tensor({2, 3}, t).Tensor({2, 3}, t);
  return b;
}

TEST(ActivationBackward, ThresholdIsComparisonAndSelection) {
  // self <= threshold ? 0 : grad: 1 comparison + 1 selection = 2 per value; N = 6 -> 12.
  EXPECT_EQ(Flops("aten::threshold_backward", GradSelf("aten::threshold_backward").Double(0.0).Out({2, 3})), 2 * 6);
  // The .grad_input overload: the destination is the output, not an operand -> same 12.
  EXPECT_EQ(Flops("aten::threshold_backward", GradSelf("aten::threshold_backward").Int(0).Out({2, 3})), 2 * 6);
  // Broadcast: grad (2,1,3) against self (1,4,3) -> grad_input (2,4,3): N = 24 -> 48.
  EXPECT_EQ(
      Flops("aten::threshold_backward",
            CallBuilder("aten::threshold_backward").Tensor({2, 1, 3}).Tensor({1, 4, 3}).Double(0.0).Out({2, 4, 3})),
      2 * 24);
}

TEST(ActivationBackward, GeluExactAndTanh) {
  // Exact: cdf (x*kAlpha, erf, 1+, 0.5*) 4 + pdf (x*x, *-0.5, exp, kBeta*) 4
  // + (x*pdf, +, dy*) 3 = 11 per value; N = 6 -> 66.
  EXPECT_EQ(Flops("aten::gelu_backward", GradSelf("aten::gelu_backward").Str("none").Out({2, 3})), 11 * 6);
  // approximate left out (its default "none"): 66.
  EXPECT_EQ(Flops("aten::gelu_backward", GradSelf("aten::gelu_backward").Out({2, 3})), 11 * 6);
  // tanh: x_sq, x_cube 2; inner 3; tanh 6; left, right, left_derivative 3;
  // 1 - t*t 2; inner_derivative 3 (3*kKappa constant); right_derivative 2;
  // dy * (sum) 2 = 23 per value; N = 6 -> 138.
  EXPECT_EQ(Flops("aten::gelu_backward", GradSelf("aten::gelu_backward").Str("tanh").Out({2, 3})), 23 * 6);
  EXPECT_EQ(Evaluate("aten::gelu_backward", GradSelf("aten::gelu_backward").Str("erf").Out({2, 3})).status,
            MetricStatus::kUnavailable);
}

TEST(ActivationBackward, SiluSigmoidTanh) {
  // silu: sigmoid 4 + (1-s, x*, 1+, dy*s, *) 5 = 9; N = 4 -> 36.
  EXPECT_EQ(Flops("aten::silu_backward", CallBuilder("aten::silu_backward").Tensor({4}).Tensor({4}).Out({4})), 9 * 4);
  // sigmoid: grad * (1 - y) * y = 3; tanh: grad * (1 - y*y) = 3; N = 3 -> 9.
  EXPECT_EQ(Flops("aten::sigmoid_backward", CallBuilder("aten::sigmoid_backward").Tensor({3}).Tensor({3}).Out({3})),
            3 * 3);
  EXPECT_EQ(Flops("aten::tanh_backward", CallBuilder("aten::tanh_backward").Tensor({3}).Tensor({3}).Out({3})), 3 * 3);
}

TEST(ActivationBackward, RangeMasksAndLeakyRelu) {
  // Two comparisons + one selection = 3 per value; N = 6 -> 18.
  EXPECT_EQ(Flops("aten::hardtanh_backward", GradSelf("aten::hardtanh_backward").Double(-1.0).Double(1.0).Out({2, 3})),
            3 * 6);
  EXPECT_EQ(Flops("aten::hardshrink_backward", GradSelf("aten::hardshrink_backward").Double(0.5).Out({2, 3})), 3 * 6);
  EXPECT_EQ(Flops("aten::softshrink_backward", GradSelf("aten::softshrink_backward").Double(0.5).Out({2, 3})), 3 * 6);
  // self > 0 ? grad : grad * slope: comparison, multiply, selection = 3; both self_is_result values.
  EXPECT_EQ(
      Flops("aten::leaky_relu_backward", GradSelf("aten::leaky_relu_backward").Double(0.01).Bool(false).Out({2, 3})),
      3 * 6);
  EXPECT_EQ(
      Flops("aten::leaky_relu_backward", GradSelf("aten::leaky_relu_backward").Double(0.01).Bool(true).Out({2, 3})),
      3 * 6);
}

TEST(ActivationBackward, EluFromResultOrFromInput) {
  auto elu = [](bool is_result) {
    CallBuilder b("aten::elu_backward");
    b.Tensor({2, 3}).Double(1.0).Int(1).Int(1).Bool(is_result).Tensor({2, 3}).Out({2, 3});
    return b;
  };
  // is_result: comparison 1 + (a*negiptcoef, b+negcoef, *) 3 + a*poscoef 1 + selection 1 = 6; N = 6 -> 36.
  EXPECT_EQ(Flops("aten::elu_backward", elu(true)), 6 * 6);
  // from the input: comparison 1 + (a*negiptcoef, *negcoef, b*negiptcoef, exp, *) 5
  // + a*poscoef 1 + selection 1 = 8 -> 48.
  EXPECT_EQ(Flops("aten::elu_backward", elu(false)), 8 * 6);
  CallBuilder no_flag("aten::elu_backward");
  no_flag.Tensor({2, 3}).Double(1.0).Int(1).Int(1).None().Tensor({2, 3}).Out({2, 3});
  EXPECT_EQ(Evaluate("aten::elu_backward", no_flag).status, MetricStatus::kUnavailable);
}

TEST(ActivationBackward, SoftplusMishHardswishHardsigmoid) {
  // softplus: b*beta twice (exp, threshold test), exp, comparison, a*z, z+1, /, selection = 8; N = 6 -> 48.
  EXPECT_EQ(Flops("aten::softplus_backward", GradSelf("aten::softplus_backward").Int(1).Int(20).Out({2, 3})), 8 * 6);
  // mish: sigmoid 4 + (exp, log1p, tanh 6) 8 + (t*t, 1-, x*s, *, t+, dy*) 6 = 18 -> 108.
  EXPECT_EQ(Flops("aten::mish_backward", GradSelf("aten::mish_backward").Out({2, 3})), 18 * 6);
  // hardswish: 2 comparisons + (self/3, +0.5, grad*) 3 + 2 selections = 7 -> 42 (also .out).
  EXPECT_EQ(Flops("aten::hardswish_backward", GradSelf("aten::hardswish_backward").Out({2, 3})), 7 * 6);
  // hardsigmoid: 2 comparisons + multiply + selection = 4 -> 24.
  EXPECT_EQ(Flops("aten::hardsigmoid_backward", GradSelf("aten::hardsigmoid_backward").Out({2, 3})), 4 * 6);
}

TEST(ActivationBackward, LogSigmoidAndLogit) {
  // comparison 1, two selections 2, 1+b, b/(1+b), sign*, max_deriv-, *grad 5 = 8; N = 6 -> 48.
  EXPECT_EQ(Flops("aten::log_sigmoid_backward", GradSelf("aten::log_sigmoid_backward").Tensor({2, 3}).Out({2, 3})),
            8 * 6);
  // logit: 2 comparisons, 1-x, x*, dy/, selection = 6 -> 36, with or without eps.
  EXPECT_EQ(Flops("aten::logit_backward", GradSelf("aten::logit_backward").None().Out({2, 3})), 6 * 6);
  EXPECT_EQ(Flops("aten::logit_backward", GradSelf("aten::logit_backward").Double(1e-6).Out({2, 3})), 6 * 6);
}

TEST(ActivationBackward, PreluBothOutputsInOnePass) {
  // grad, self (2,3,4), weight (1,3,1): iteration shape (2,3,4), N = 24.
  // comparison 1 (shared), weight*grad + selection 2, input*grad + selection 2 = 5 -> 120.
  CallBuilder b("aten::_prelu_kernel_backward");
  b.Tensor({2, 3, 4}).Tensor({2, 3, 4}).Tensor({1, 3, 1}).Out({2, 3, 4}).Out({2, 3, 4});
  EXPECT_EQ(Flops("aten::_prelu_kernel_backward", b), 5 * 24);
}

TEST(ActivationBackward, RreluTrainingMultipliesByNoiseEvalIsLeakyRelu) {
  auto rrelu = [](bool training) {
    CallBuilder b("aten::rrelu_with_noise_backward");
    b.Tensor({2, 3}).Tensor({2, 3}).Tensor({2, 3}).Double(0.125).Double(0.25).Bool(training).Bool(false).Out({2, 3});
    return b;
  };
  // training: grad * noise = 1 per value; N = 6 -> 6.
  EXPECT_EQ(Flops("aten::rrelu_with_noise_backward", rrelu(true)), 1 * 6);
  // eval: leaky_relu_backward (comparison, multiply, selection) = 3 -> 18.
  EXPECT_EQ(Flops("aten::rrelu_with_noise_backward", rrelu(false)), 3 * 6);
}

TEST(ActivationBackward, GluCountsPerHalf) {
  // self (2,6) split along dim 1 into halves of H = 2*3 = 6 values (grad's).
  // sigmoid 4H + (1-s, *s, *a, *grad) 4H + s*grad H = 9H = 54.
  CallBuilder b("aten::glu_backward");
  b.Tensor({2, 3}).Tensor({2, 6}).Int(1).Out({2, 6});
  EXPECT_EQ(Flops("aten::glu_backward", b), 9 * 6);
}

TEST(ActivationBackward, DropoutIsTwoMultiplies) {
  // grad * mask * scale: 2 per value; N = 6 -> 12 (the bool mask does not make it integer arithmetic).
  CallBuilder b("aten::native_dropout_backward");
  b.Tensor({2, 3}).Tensor({2, 3}, c10::kBool).Double(2.0).Out({2, 3});
  EXPECT_EQ(Flops("aten::native_dropout_backward", b), 2 * 6);
}

CallBuilder SoftmaxBackward(const char* op, std::initializer_list<int64_t> shape, int64_t dim) {
  CallBuilder b(op);
  b.Tensor(shape).Tensor(shape).Int(dim).Int(static_cast<int64_t>(c10::kFloat)).Out(shape);
  return b;
}

TEST(ActivationBackward, SoftmaxAndLogSoftmaxAreFourNMinusR) {
  for (const char* op : {"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"}) {
    // (2,3,4) along dim 1: N = 24, L = 3, R = 8.
    // softmax: sum(g*y) N multiplies + (N - R) adds, then (g - sum) * y 2N -> 4N - R = 96 - 8 = 88.
    // log-softmax: sum(g) N - R adds, then g - exp(y) * sum 3N -> 4N - R = 88.
    EXPECT_EQ(Flops(op, SoftmaxBackward(op, {2, 3, 4}, 1)), 4 * 24 - 8) << op;
    // dim -1: L = 4, R = 6 -> 96 - 6 = 90.
    EXPECT_EQ(Flops(op, SoftmaxBackward(op, {2, 3, 4}, -1)), 4 * 24 - 6) << op;
    // 0-dim: one row of one value: 4 - 1 = 3.
    EXPECT_EQ(Flops(op, SoftmaxBackward(op, {}, 0)), 4 * 1 - 1) << op;
    // Empty rows: N = 0, R = 0 -> 0.
    EXPECT_EQ(Flops(op, SoftmaxBackward(op, {0, 4}, 1)), 0) << op;
    // A dim outside the rank is not valued.
    EXPECT_EQ(Evaluate(op, SoftmaxBackward(op, {2, 3}, 2)).status, MetricStatus::kUnavailable) << op;
  }
}

TEST(ActivationBackward, MaskedSoftmaxAddsTwoSelectionsPerValue) {
  // (2,3,4), dim None = last: N = 24, L = 4, R = 6.
  // pass 1: selection, multiply per value, N - R adds; pass 2: selection, subtract, multiply
  // -> 6N - R = 144 - 6 = 138.
  CallBuilder last("aten::_masked_softmax_backward");
  last.Tensor({2, 3, 4}).Tensor({2, 3, 4}).Tensor({2, 3, 4}, c10::kBool).None().Out({2, 3, 4});
  EXPECT_EQ(Flops("aten::_masked_softmax_backward", last), 6 * 24 - 6);
  // dim 1: R = 8 -> 144 - 8 = 136.
  CallBuilder mid("aten::_masked_softmax_backward");
  mid.Tensor({2, 3, 4}).Tensor({2, 3, 4}).Tensor({2, 3, 4}, c10::kBool).Int(1).Out({2, 3, 4});
  EXPECT_EQ(Flops("aten::_masked_softmax_backward", mid), 6 * 24 - 8);
}

TEST(ActivationBackward, DtypeRules) {
  // Integer tensors: excluded arithmetic -> 0, complete (the scalar threshold does not promote).
  EXPECT_EQ(Flops("aten::threshold_backward",
                  GradSelf("aten::threshold_backward", c10::kLong).Double(0.5).Out({2, 3}, c10::kLong)),
            0);
  // Reduced precision floats count: bfloat16 silu -> 9 * 6 = 54.
  EXPECT_EQ(Flops("aten::silu_backward", GradSelf("aten::silu_backward", c10::kBFloat16).Out({2, 3}, c10::kBFloat16)),
            9 * 6);
  // Complex: no convention -> unavailable with the complex code.
  const FormulaResult c = Evaluate(
      "aten::sigmoid_backward", GradSelf("aten::sigmoid_backward", c10::kComplexFloat).Out({2, 3}, c10::kComplexFloat));
  EXPECT_EQ(c.status, MetricStatus::kUnavailable);
  EXPECT_EQ(c.code, "complex_arithmetic");
}

TEST(ActivationBackward, SparseOrNestedOperandsAreUnavailable) {
  const std::vector<int64_t> sizes = {2, 3};
  TensorMeta dense;
  dense.defined = true;
  dense.dtype = c10::kFloat;
  dense.ndim = 2;
  dense.size_data = sizes.data();
  TensorMeta sparse = dense;
  sparse.strided = false;
  const ArgMeta args[] = {ArgMeta::Tensor(&dense), ArgMeta::Tensor(&sparse), ArgMeta::Double(0.0)};
  const ArgMeta outs[] = {ArgMeta::Tensor(&dense)};
  const OpCall call{"aten::threshold_backward", "", args, outs};
  const FormulaResult r = activation_backward::Threshold(call);
  EXPECT_EQ(r.status, MetricStatus::kUnavailable);
  EXPECT_EQ(r.code, "unsupported_operator_formula");
  // Nested grad of a softmax backward.
  TensorMeta nested = dense;
  nested.nested = true;
  const ArgMeta softmax_args[] = {ArgMeta::Tensor(&nested), ArgMeta::Tensor(&dense), ArgMeta::Int(1),
                                  ArgMeta::Int(static_cast<int64_t>(c10::kFloat))};
  const OpCall softmax{"aten::_softmax_backward_data", "", softmax_args, outs};
  EXPECT_EQ(activation_backward::SoftmaxData(softmax).status, MetricStatus::kUnavailable);
}

}  // namespace
}  // namespace torchscan
