#include "formulas/indexing.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::indexing {
namespace {

int64_t DenseElements(const OpCall& call, size_t i) {
  const TensorMeta* t = DenseArg(call, i);
  return t ? t->numel() : -1;
}

// One combine per element of `index` (argument 2): a scatter visits
// src[index positions] only, so a `src` larger than `index` adds nothing.
FormulaResult PerIndex(const OpCall& call, Count extra) {
  const int64_t n = DenseElements(call, 2);
  if (n < 0 || !DenseOutput(call)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(n) + extra);
}

// Elements that x[indices] selects (what index_put_ writes; `values`
// broadcasts to it): the broadcast shape of the index tensors times the
// sizes of the dimensions no index consumes. A None entry keeps its
// dimension; a boolean mask consumes as many dimensions as it has, and how
// many positions it selects depends on its values (nullopt).
std::optional<Count> IndexedElements(const TensorMeta& self, const ArgMeta& indices) {
  if (indices.kind != ArgKind::kTensorList) return std::nullopt;
  std::vector<int64_t> shape;  // broadcast of the index shapes, right-aligned
  Count kept = 1;
  int64_t dim = 0;
  for (const TensorMeta& t : indices.tensors()) {
    if (!t.defined) {  // None: the whole dimension
      if (dim >= self.dim()) return std::nullopt;
      kept *= self.size(dim++);
      continue;
    }
    if (t.nested || !t.strided || t.dtype == c10::kBool || t.dtype == c10::kByte) return std::nullopt;
    ++dim;
    const auto sizes = t.sizes();
    if (sizes.size() > shape.size()) shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t& s = shape[shape.size() - sizes.size() + i];
      if (s == 1) s = sizes[i];
    }
  }
  if (dim > self.dim()) return std::nullopt;
  for (; dim < self.dim(); ++dim) kept *= self.size(dim);
  return Product(shape) * kept;
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

FormulaResult ScatterAdd(const OpCall& call) { return PerIndex(call, 0); }

FormulaResult ScatterReduce(const OpCall& call) {
  const ArgMeta& reduce = call.arg(4);
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  const bool mean = reduce.kind == ArgKind::kString && reduce.str() == "mean";
  return PerIndex(call, mean ? out->numel() : 0);
}

FormulaResult Scatter(const OpCall& call) {
  if (!DenseOutput(call)) return NotDense(call);
  if (call.arg(4).kind != ArgKind::kString) return FormulaResult::Complete(0);  // a copy
  return PerIndex(call, 0);                                                     // src tensor or scalar value alike
}

ModuleCosts ScatterCosts(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  const TensorMeta* index = DenseArg(call, 2);
  if (!out || !index || !DenseArg(call, 0)) return ModuleCosts::Unavailable(NotDense(call));
  const std::string_view op = FunctionalName(call.name);
  const FormulaResult flops = op == "aten::scatter_add"      ? ScatterAdd(call)
                              : op == "aten::scatter_reduce" ? ScatterReduce(call)
                                                             : Scatter(call);
  const Count i = index->numel();
  const Count src = call.arg(3).is_tensor() ? i : Count(0);  // a scalar value is not read from memory
  return ModuleCosts::FromFlops(flops, 0, Count(call.arg(0).tensor().numel()) + i + src + out->numel());
}

FormulaResult IndexPut(const OpCall& call) {
  const ArgMeta& accumulate = call.arg(3);
  const TensorMeta* self = DenseArg(call, 0);
  if (!self || !DenseOutput(call)) return NotDense(call);
  if (accumulate.kind != ArgKind::kBool || !accumulate.to_bool()) return FormulaResult::Complete(0);
  const std::optional<Count> n = IndexedElements(*self, call.arg(1));
  if (!n) {
    return FormulaResult::Unavailable("data_dependent_index",
                                      std::string(call.name) +
                                          ": accumulating through a boolean mask adds once per selected position, "
                                          "which depends on the mask's values; TorchScan reads no values");
  }
  return CountFor(call, ArithmeticOf(call), *n);
}

ModuleCosts IndexPutCosts(const OpCall& call) {
  const FormulaResult flops = IndexPut(call);
  if (flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const TensorMeta& self = *DenseArg(call, 0);  // IndexPut checked it
  const std::optional<Count> p = IndexedElements(self, call.arg(1));
  if (!p) return ModuleCosts::Unavailable(NotDense(call));
  Count index_reads = 0;
  for (const TensorMeta& t : call.arg(1).tensors()) index_reads += t.defined ? t.numel() : 0;
  const bool accumulate = call.arg(3).kind == ArgKind::kBool && call.arg(3).to_bool();
  const bool in_place = call.name.back() == '_';
  const Count copy = in_place ? Count(0) : Count(self.numel()) + DenseOutput(call)->numel();
  return ModuleCosts::FromFlops(flops, 0, index_reads + *p * (accumulate ? 3 : 2) + copy);
}

FormulaResult IndexCopy(const OpCall& call) {
  if (!DenseArg(call, 0) || !DenseArg(call, 2) || !DenseArg(call, 3) || !DenseOutput(call)) return NotDense(call);
  return FormulaResult::Complete(0);
}

ModuleCosts IndexCopyCosts(const OpCall& call) {
  const FormulaResult flops = IndexCopy(call);
  if (flops.status != MetricStatus::kComplete) return ModuleCosts::Unavailable(flops);
  return ModuleCosts::FromFlops(flops, 0, Count(DenseArg(call, 2)->numel()) + Count(2) * DenseArg(call, 3)->numel());
}

FormulaResult Isin(const OpCall& call) {
  // Overloads: (Tensor elements, Tensor|Scalar test), (Scalar element, Tensor test).
  const ArgMeta& e = call.arg(0);
  const ArgMeta& t = call.arg(1);
  if ((e.is_tensor() && !DenseArg(call, 0)) || (t.is_tensor() && !DenseArg(call, 1))) return NotDense(call);
  const int64_t n = e.is_tensor() ? e.tensor().numel() : 1;
  const int64_t m = t.is_tensor() ? t.tensor().numel() : 1;
  // PyTorch's CPU kernel (TensorCompare.cpp, isin_out): below this size of
  // test_elements it compares every pair; above it, it sorts.
  const bool pairwise = n == 0 || m < static_cast<int64_t>(10.0f * std::pow(static_cast<double>(n), 0.145));
  if (!pairwise) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) +
                                          ": this many test elements take the sorting path; selection by sorting has "
                                          "no torchscan_flops_v1 convention (as for aten::sort)");
  }
  return CountFor(call, ArithmeticWithScalars(call), Count(n) * m);
}

FormulaResult EuclideanDist(const OpCall& call) {
  const TensorMeta* x1 = DenseArg(call, 0);
  const TensorMeta* x2 = DenseArg(call, 1);
  const TensorMeta* out = DenseOutput(call);
  if (!x1 || !x2 || !out || x1->dim() < 2 || x2->dim() < 2) return NotDense(call);
  const int64_t m = x1->size(-1);
  const Count rows1 = Product(Dims(x1->sizes()).first(x1->dim() - 1));
  const Count rows2 = Product(Dims(x2->sizes()).first(x2->dim() - 1));
  const Count norm = m > 0 ? Count(2) * m - 1 : Count(0);                       // M squares + M - 1 adds per row
  const Count count = rows1 * (norm + m)                                        // x1 norms and x1 * -2
                      + rows2 * norm                                            // x2 norms
                      + Count(out->numel()) * (Count(2) * (Count(m) + 2) + 2);  // (M+2)-term dots, clamp, sqrt
  return CountFor(call, ArithmeticOf(call), count);
}

ModuleCosts EuclideanDistCosts(const OpCall& call) {
  const FormulaResult flops = EuclideanDist(call);
  if (flops.status != MetricStatus::kComplete) return ModuleCosts::Unavailable(flops);
  const TensorMeta* x1 = DenseArg(call, 0);
  const TensorMeta* x2 = DenseArg(call, 1);
  const int64_t m = x1->size(-1);
  const Count n1 = x1->numel(), n2 = x2->numel(), out = DenseOutput(call)->numel();
  const Count rows1 = Product(Dims(x1->sizes()).first(x1->dim() - 1));
  const Count rows2 = Product(Dims(x2->sizes()).first(x2->dim() - 1));
  const Count rows = rows1 + rows2, padded = rows * (Count(m) + 2);
  // Module dots: K multiplies + K - 1 adds, one fewer per output than 2K.
  const Count module_flops = flops.value.exact() && flops.value > Count(0) ? flops.value - out : flops.value;
  const Count macs = out * (Count(m) + 2) + rows * m;  // dots, and the norms' square-sums
  const Count dmas = (n1 + n2 + rows)                  // row norms: read, write
                     + rows                            // the ones columns written
                     + 2 * n1                          // x1 * -2
                     + (n1 + n2 + 2 * rows + padded)   // the two concatenations: read, write
                     + (padded + out)                  // the dots: read, write
                     + 4 * out;                        // clamp_min, sqrt
  return {FormulaResult::Complete(module_flops), FormulaResult::Complete(macs), FormulaResult::Complete(dmas)};
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
  if (mode.value_or(0) == 1) count += Count(bags) * d;                  // mean: one divide per output value
  if (call.arg(6).is_tensor()) count += Count(lookups) * d;             // per-sample weights
  return CountFor(call, ArithmeticOfDtype(weight->dtype), count);
}

FormulaResult GridSampler2d(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  const auto mode = ScalarArg(call, 2);
  if (!out || !DenseArg(call, 0) || !mode) return NotDense(call);
  const int64_t per = *mode == 0 ? 7 : (*mode == 2 ? 31 : 0);  // bilinear, nearest, bicubic
  return CountFor(call, ArithmeticOf(call), Count(per) * out->numel());
}

ModuleCosts GridSampler2dCosts(const OpCall& call) {
  const FormulaResult flops = GridSampler2d(call);
  if (flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const TensorMeta* grid = DenseArg(call, 1);
  if (!grid) return ModuleCosts::Unavailable(NotDense(call));
  const int64_t mode = static_cast<int64_t>(*ScalarArg(call, 2));
  const int64_t taps = mode == 0 ? 4 : (mode == 2 ? 16 : 1);
  const Count out = DenseOutput(call)->numel();
  return ModuleCosts::FromFlops(flops, mode == 1 ? Count(0) : Count(taps) * out, Count(taps + 1) * out + grid->numel());
}

ModuleCosts EmbeddingBagCosts(const OpCall& call) {
  const FormulaResult flops = EmbeddingBag(call);
  if (flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const TensorMeta* weight = DenseArg(call, 0);
  const TensorMeta* indices = DenseArg(call, 1);
  const TensorMeta* offsets = DenseArg(call, 2);
  const Count d = weight->size(1), lookups = indices->numel();
  const bool weighted = call.arg(6).is_tensor();
  const Count reads = lookups + offsets->numel() + lookups * d + (weighted ? lookups : Count(0));
  return ModuleCosts::FromFlops(flops, weighted ? lookups * d : Count(0), reads + DenseOutput(call)->numel());
}

FormulaResult IndexAdd(const OpCall& call) {
  const TensorMeta* source = DenseArg(call, 3);
  if (!source || !DenseArg(call, 0)) return NotDense(call);
  const auto alpha = ScalarArg(call, 4);
  const Count n = source->numel();
  return CountFor(call, ArithmeticWithScalars(call), alpha && *alpha != 1.0 ? Count(2) * n : n);
}

FormulaResult IndexReduce(const OpCall& call) {
  const TensorMeta* source = DenseArg(call, 3);
  const TensorMeta* out = DenseOutput(call);
  if (!source || !out) return NotDense(call);
  const ArgMeta& reduce = call.arg(4);
  const bool mean = reduce.kind == ArgKind::kString && reduce.str() == "mean";
  return CountFor(call, ArithmeticOf(call), Count(source->numel()) + (mean ? Count(out->numel()) : Count(0)));
}

FormulaResult AffineGridGenerator(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  const ArgMeta& size = call.arg(1);
  if (!out || !DenseArg(call, 0) || size.kind != ArgKind::kIntList || size.count < 4) return NotDense(call);
  const int64_t k = size.count == 4 ? 3 : 4;
  Count grid = 0;
  for (size_t i = 2; i < size.count; ++i) grid += Count(2) * size.ints()[i] + 2;
  return CountFor(call, ArithmeticOf(call), Count(2 * k) * out->numel() + grid);
}

}  // namespace torchscan::indexing
