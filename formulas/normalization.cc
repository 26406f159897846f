#include "formulas/normalization.h"

#include <string>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::normalization {
namespace {

int Present(const OpCall& call, size_t i) { return call.arg(i).is_tensor() ? 1 : 0; }

FormulaResult EmptyRows(const OpCall& call, const char* what) {
  return FormulaResult::Unavailable("unsupported_operator_formula",
                                    std::string(call.name) + ": " + what + " are empty");
}

// 6N + 2R + AN (LayerNorm/GroupNorm).
FormulaResult RowNorm(const OpCall& call, int64_t n, int64_t r, int affine) {
  return CountFor(call, ArithmeticOf(call), 6 * n + 2 * r + affine * n);
}

}  // namespace

FormulaResult LayerNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const ArgMeta& shape = call.arg(1);
  if (!x || shape.kind != ArgKind::kIntList) return NotDense(call);
  const int64_t row = Product(shape.ints());
  if (row == 0) return EmptyRows(call, "normalized rows");
  const int64_t n = x->numel();
  return RowNorm(call, n, n / row, Present(call, 2) + Present(call, 3));
}

FormulaResult GroupNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const auto batch = ScalarArg(call, 3), channels = ScalarArg(call, 4), hw = ScalarArg(call, 5),
             groups = ScalarArg(call, 6);
  if (!x || !batch || !channels || !hw || !groups) return NotDense(call);
  if (*groups <= 0 || *channels / *groups * *hw == 0) return EmptyRows(call, "groups");
  const int64_t r = static_cast<int64_t>(*batch) * static_cast<int64_t>(*groups);
  return RowNorm(call, x->numel(), r, Present(call, 1) + Present(call, 2));
}

FormulaResult BatchNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || x->dim() < 2) return NotDense(call);
  const int64_t n = x->numel(), c = x->size(1);
  if (n == 0) return EmptyRows(call, "inputs");
  // _native_batch_norm_legit_no_training has no `training` argument; the
  // _legit overload without running stats drops two tensor arguments.
  bool training = false;
  bool running_mean = false, running_var = false;
  if (call.name == "aten::_native_batch_norm_legit_no_training") {
    training = false;
  } else if (call.arg(3).kind == ArgKind::kBool) {  // _legit.no_stats(input, w, b, training, ...)
    training = call.arg(3).to_bool();
  } else {
    training = call.arg(5).kind == ArgKind::kBool && call.arg(5).to_bool();
    running_mean = call.arg(3).is_tensor();
    running_var = call.arg(4).is_tensor();
  }
  const int affine = Present(call, 1) + Present(call, 2);
  int64_t count = 2 * n + 2 * c + affine * n;
  if (training) {
    count += 4 * n;
    if (running_mean) count += 3 * c;
    if (running_var) count += 5 * c;
  }
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult RmsNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const ArgMeta& shape = call.arg(1);
  if (!x || shape.kind != ArgKind::kIntList) return NotDense(call);
  const int64_t row = Product(shape.ints());
  if (row == 0) return EmptyRows(call, "normalized rows");
  const int64_t n = x->numel();
  return CountFor(call, ArithmeticOf(call), (3 + Present(call, 2)) * n + 2 * (n / row));
}

FormulaResult WeightNorm(const OpCall& call) {
  const TensorMeta* v = DenseArg(call, 0);
  const TensorMeta* g = DenseArg(call, 1);
  if (!v || !g) return NotDense(call);
  const int64_t n = v->numel(), r = g->numel();
  if (r == 0 || n / r == 0) return EmptyRows(call, "weight rows");
  return CountFor(call, ArithmeticOf(call), 3 * n + r);
}

}  // namespace torchscan::normalization
