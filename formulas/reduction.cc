#include "formulas/reduction.h"

#include <cmath>
#include <limits>
#include <string>

#include "formulas/arithmetic.h"

namespace torchscan::reduction {
namespace {

struct Sizes {
  int64_t n = 0;  // input values
  int64_t r = 0;  // output values
};

bool Read(const OpCall& call, Sizes& s) {
  const TensorMeta* in = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  if (!in || !out) return false;
  s.n = in->numel();
  s.r = out->numel();
  return true;
}

int64_t Folds(const Sizes& s) { return s.n > s.r ? s.n - s.r : 0; }

// sum/mean/prod take their dtype at position 1 when they have no dim
// argument (2 arguments, 3 with out=), else at position 3 (after dim, keepdim).
Arithmetic ReductionDtype(const OpCall& call) {
  return ReductionArithmetic(call, call.args.size() <= 3 ? 1 : 3);
}

}  // namespace

FormulaResult Fold(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Folds(s));
}

FormulaResult MaxMin(const OpCall& call) {
  if (call.arg(1).is_tensor()) {
    const TensorMeta* out = DenseOutput(call);
    if (!out) return NotDense(call);
    return CountFor(call, ArithmeticOf(call), out->numel());
  }
  return Fold(call);
}

FormulaResult Sum(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ReductionDtype(call), Folds(s));
}

FormulaResult Mean(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ReductionDtype(call), Count(Folds(s)) + s.r);
}

FormulaResult Cumulative(const OpCall& call) {
  const TensorMeta* in = DenseArg(call, 0);
  const ArgMeta& dim = call.arg(1);
  if (!in || dim.kind != ArgKind::kInt) return NotDense(call);
  const int64_t n = in->numel();
  const int64_t length = in->dim() == 0 ? 1 : in->size(dim.to_int());
  const int64_t rows = length == 0 ? 0 : n / length;
  return CountFor(call, ReductionArithmetic(call, 2), n - rows);
}

FormulaResult VectorNorm(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  const auto ord = ScalarArg(call, 1);
  const double p = ord.value_or(2.0);  // default order 2 (None / absent)
  Count count;
  if (p == 1.0 || std::isinf(p)) {
    count = Count(s.n) + Folds(s);
  } else if (p == 2.0) {
    count = Count(s.n) + Folds(s) + s.r;
  } else {
    return FormulaResult::Unavailable(
        "unsupported_norm_order",
        std::string(call.name) + ": vector norms of order " + std::to_string(p) +
            " have no TorchScan count (orders 1, 2 and +-inf do)");
  }
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult Variance(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(4) * s.n);
}

FormulaResult StandardDeviation(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(4) * s.n + s.r);
}

}  // namespace torchscan::reduction
