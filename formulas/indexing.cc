#include "formulas/indexing.h"

#include <cmath>
#include <optional>
#include <string>

#include "formulas/arithmetic.h"

namespace torchscan::indexing {
namespace {

int64_t DenseElements(const OpCall& call, size_t i) {
  const TensorMeta* t = DenseArg(call, i);
  return t ? t->numel() : -1;
}

FormulaResult Combine(const OpCall& call, size_t src, int64_t extra) {
  const int64_t n = DenseElements(call, src);
  if (n < 0 || !DenseOutput(call)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(n) + extra);
}

// Per-pair cost of a p-norm distance over M coordinates; nullopt for unsupported p.
std::optional<Count> PairCost(double p, int64_t m) {
  if (m == 0) return Count(0);
  if (p == 1.0 || std::isinf(p)) return Count(3) * m - 1;
  if (p == 2.0) return Count(3) * m;
  return std::nullopt;
}

FormulaResult Distances(const OpCall& call, int64_t pairs, int64_t m, double p) {
  const std::optional<Count> per = PairCost(p, m);
  if (!per) {
    return FormulaResult::Unavailable("unsupported_norm_order",
                                      std::string(call.name) + ": distances of order " + std::to_string(p) +
                                          " have no TorchScan count (orders 1, 2 and inf do)");
  }
  return CountFor(call, ArithmeticOf(call), pairs * *per);
}

}  // namespace

FormulaResult ScatterAdd(const OpCall& call) { return Combine(call, 3, 0); }

FormulaResult ScatterReduce(const OpCall& call) {
  const ArgMeta& reduce = call.arg(4);
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  const bool mean = reduce.kind == ArgKind::kString && reduce.str() == "mean";
  return Combine(call, 3, mean ? out->numel() : 0);
}

FormulaResult Scatter(const OpCall& call) {
  if (!DenseOutput(call)) return NotDense(call);
  if (call.arg(4).kind != ArgKind::kString) return FormulaResult::Complete(0);  // a copy
  if (!call.arg(3).is_tensor()) {                                             // reduce with a scalar value
    const int64_t n = DenseElements(call, 2);
    return n < 0 ? NotDense(call) : CountFor(call, ArithmeticOf(call), n);
  }
  return Combine(call, 3, 0);
}

FormulaResult IndexPut(const OpCall& call) {
  const ArgMeta& accumulate = call.arg(3);
  if (!DenseOutput(call)) return NotDense(call);
  if (accumulate.kind != ArgKind::kBool || !accumulate.to_bool()) return FormulaResult::Complete(0);
  return Combine(call, 2, 0);
}

FormulaResult MaskedScatter(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), out->numel());
}

FormulaResult Nonzero(const OpCall& call) {
  const int64_t n = DenseElements(call, 0);
  if (n < 0) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), n);
}

FormulaResult Cdist(const OpCall& call) {
  const TensorMeta* x1 = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  const auto p = ScalarArg(call, 2);
  if (!x1 || !out || x1->dim() < 2 || !p) return NotDense(call);
  return Distances(call, out->numel(), x1->size(-1), *p);
}

FormulaResult Pdist(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  if (!x || !out || x->dim() != 2) return NotDense(call);
  return Distances(call, out->numel(), x->size(1), ScalarArg(call, 1).value_or(2.0));
}

FormulaResult EmbeddingBag(const OpCall& call) {
  const TensorMeta* weight = DenseArg(call, 0);
  const TensorMeta* indices = DenseArg(call, 1);
  const TensorMeta* offsets = DenseArg(call, 2);
  const TensorMeta* out = DenseOutput(call);
  const auto mode = ScalarArg(call, 4);
  if (!weight || !indices || !offsets || !out || weight->dim() != 2 || out->dim() < 1) return NotDense(call);
  const int64_t d = weight->size(1), lookups = indices->numel(), bags = out->size(0);
  Count count = lookups > bags ? Count(lookups - bags) * d : Count(0);  // combines
  if (mode.value_or(0) == 1) count += Count(bags) * d;  // mean: one divide per output value
  if (call.arg(6).is_tensor()) count += Count(lookups) * d;  // per-sample weights
  return CountFor(call, ArithmeticOfDtype(weight->dtype), count);
}

FormulaResult GridSampler2d(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  const auto mode = ScalarArg(call, 2);
  if (!out || !DenseArg(call, 0) || !mode) return NotDense(call);
  const int64_t per = *mode == 0 ? 7 : (*mode == 2 ? 31 : 0);  // bilinear, nearest, bicubic
  return CountFor(call, ArithmeticOf(call), Count(per) * out->numel());
}

}  // namespace torchscan::indexing
