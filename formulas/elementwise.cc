#include "formulas/elementwise.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <optional>

#include "formulas/arithmetic.h"
#include "formulas/reduction.h"
#include "formulas/shapes.h"

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
template FormulaResult PerOutput<8>(const OpCall&);
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
  if (ReturnedItsInput(call))
    return {FormulaResult::Complete(0), FormulaResult::Complete(0), FormulaResult::Complete(0)};
  return PointwiseCosts(call, Resolve);
}

namespace {

// The largest tensor operand's values (a broadcast's result size for the
// comparisons below, whose operands broadcast to the larger one).
std::optional<int64_t> LargestOperand(const OpCall& call) {
  std::optional<int64_t> n;
  for (const ArgMeta& a : call.args) {
    if (!a.is_tensor() || !a.tensor().defined) continue;
    if (a.tensor().nested || !a.tensor().strided) return std::nullopt;
    n = std::max(n.value_or(0), a.tensor().numel());
  }
  return n;
}

}  // namespace

template <int K>
FormulaResult PerInput(const OpCall& call) {
  const auto n = LargestOperand(call);
  if (!n) return NotDense(call);
  return CountFor(call, ArithmeticWithScalars(call), Count(K) * *n);
}
template FormulaResult PerInput<0>(const OpCall&);
template FormulaResult PerInput<1>(const OpCall&);

FormulaResult Logit(const OpCall& call) { return PerElement(call, call.arg(1).is_none() ? 3 : 5, ArithmeticOf(call)); }

FormulaResult Mvlgamma(const OpCall& call) {
  const auto p = ScalarArg(call, 1);
  if (!p || *p < 1) return ShapeMismatch(call, "expected p >= 1");
  return PerElement(call, 3 * static_cast<int64_t>(*p), ArithmeticOf(call));
}

FormulaResult Allclose(const OpCall& call) {
  const auto n = LargestOperand(call);
  if (!n) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), *n > 0 ? Count(8) * *n - 1 : Count(0));
}

FormulaResult Dist(const OpCall& call) {
  const auto n = LargestOperand(call);
  if (!n) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(4) * *n);
}

FormulaResult Trace(const OpCall& call) {
  const TensorMeta* x = TensorArg(call, 0, 2);
  if (!x) return ShapeMismatch(call, "expected a matrix");
  const int64_t d = std::min(x->size(0), x->size(1));
  return CountFor(call, ArithmeticOf(call), d > 1 ? Count(d - 1) : Count(0));
}

FormulaResult Bincount(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return NotDense(call);
  const TensorMeta* w = DenseArg(call, 1);
  if (!w) return FormulaResult::Complete(0);  // counting integers
  return CountFor(call, ArithmeticOfDtype(w->dtype), x->numel());
}

FormulaResult LogCumsumExp(const OpCall& call) {
  FormulaResult steps = reduction::Cumulative(call);
  if (steps.status == MetricStatus::kComplete) steps.value = steps.value * 7;
  return steps;
}

FormulaResult Renorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const auto p = ScalarArg(call, 1);
  const ArgMeta& dim = call.arg(2);
  if (!x || !p || dim.kind != ArgKind::kInt || x->dim() == 0) return NotDense(call);
  Count norm;
  const int64_t d = dim.to_int() < 0 ? dim.to_int() + x->dim() : dim.to_int();
  if (d < 0 || d >= x->dim()) return ShapeMismatch(call, "dimension out of range");
  const int64_t slices = x->size(d), m = slices > 0 ? x->numel() / slices : 0;
  if (*p == 1.0 || std::isinf(*p)) {
    norm = m > 0 ? Count(2) * m - 1 : Count(0);
  } else if (*p == 2.0) {
    norm = Count(2) * m;
  } else {
    return FormulaResult::Unavailable("unsupported_norm_order",
                                      std::string(call.name) + ": norms of order " + std::to_string(*p) +
                                          " have no TorchScan count (orders 1, 2 and +-inf do)");
  }
  return CountFor(call, ArithmeticOf(call), Count(slices) * (norm + 4 + m));
}

FormulaResult SegmentReduce(const OpCall& call) {
  const TensorMeta* data = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  const ArgMeta& reduce = call.arg(1);
  if (!data || !out || reduce.kind != ArgKind::kString) return NotDense(call);
  const std::string_view r = reduce.str();
  const Count n = data->numel();
  Count count;
  if (r == "sum" || r == "prod") {
    count = n;
  } else if (r == "max" || r == "min") {
    count = Count(2) * n;
  } else if (r == "mean") {
    count = n + out->numel();
  } else {
    return ShapeMismatch(call, "unknown reduction");
  }
  return CountFor(call, ArithmeticOf(call), count);
}

}  // namespace torchscan::elementwise
