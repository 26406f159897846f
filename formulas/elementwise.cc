#include "formulas/elementwise.h"

#include "formulas/arithmetic.h"

namespace torchscan::elementwise {
namespace {

// `a`: the operands' arithmetic by the operator's rule; the call computes
// in ComputationArithmetic's dtype (a floating result of integers is real).
FormulaResult PerElement(const OpCall& call, int64_t ops_per_output, Arithmetic a) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  for (const ArgMeta& arg : call.args) {
    if (arg.is_tensor() && (arg.tensor().nested || !arg.tensor().strided)) return NotDense(call);
  }
  return CountFor(call, ComputationArithmetic(call, a), Count(ops_per_output) * out->numel());
}

bool ScalarIsNot(const OpCall& call, size_t i, double v) {
  const auto s = ScalarArg(call, i);
  return s.has_value() && *s != v;
}

}  // namespace

template <int K>
FormulaResult PerOutput(const OpCall& call) {
  return PerElement(call, K, ArithmeticWithScalars(call));
}
template FormulaResult PerOutput<0>(const OpCall&);
template FormulaResult PerOutput<1>(const OpCall&);
template FormulaResult PerOutput<2>(const OpCall&);
template FormulaResult PerOutput<3>(const OpCall&);
template FormulaResult PerOutput<4>(const OpCall&);
template FormulaResult PerOutput<5>(const OpCall&);
template FormulaResult PerOutput<6>(const OpCall&);
template FormulaResult PerOutput<7>(const OpCall&);
template FormulaResult PerOutput<10>(const OpCall&);

FormulaResult AddSub(const OpCall& call) {
  return PerElement(call, 1 + (ScalarIsNot(call, 2, 1.0) ? 1 : 0), ArithmeticWithScalars(call));
}

FormulaResult Div(const OpCall& call) {
  const bool rounding = call.arg(2).kind == ArgKind::kString;
  return PerElement(call, rounding ? 2 : 1, ArithmeticWithScalars(call));
}

FormulaResult Clamp(const OpCall& call) {
  const int bounds = (call.arg(1).is_none() ? 0 : 1) + (call.arg(2).is_none() ? 0 : 1);
  return PerElement(call, bounds, ArithmeticOf(call));
}

FormulaResult Gelu(const OpCall& call) {
  const ArgMeta& approx = call.arg(1);
  const bool tanh = approx.kind == ArgKind::kString && approx.str() == "tanh";
  return PerElement(call, tanh ? 14 : 5, ArithmeticOf(call));
}

FormulaResult Addc(const OpCall& call) {
  return PerElement(call, 2 + (ScalarIsNot(call, 3, 1.0) ? 1 : 0), ArithmeticOf(call));
}

FormulaResult Lerp(const OpCall& call) { return PerElement(call, 3, ArithmeticWithScalars(call)); }

FormulaResult RreluWithNoise(const OpCall& call) {
  const ArgMeta& training = call.arg(4);
  if (training.kind == ArgKind::kBool && training.to_bool()) {
    return FormulaResult::Unavailable("random_sampling",
                                      "aten::rrelu_with_noise: training-mode RReLU samples its slopes");
  }
  return PerElement(call, 4, ArithmeticOf(call));
}

FormulaResult Resolve(const OpCall& call) {
  if (ReturnedItsInput(call)) return FormulaResult::Complete(0);
  return PerElement(call, 1, ArithmeticOf(call));
}

ModuleCosts ResolveCosts(const OpCall& call) {
  if (ReturnedItsInput(call)) return {FormulaResult::Complete(0), FormulaResult::Complete(0), FormulaResult::Complete(0)};
  return PointwiseCosts(call, Resolve);
}

}  // namespace torchscan::elementwise
