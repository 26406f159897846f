#include "formulas/selection.h"

#include <optional>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::selection {
namespace {

// Values per slice along `dim` and the number of slices of a dense tensor.
struct Slices {
  int64_t n = 0;
  Count slices = 0;
};

std::optional<Slices> Along(const TensorMeta& t, std::optional<int64_t> dim) {
  if (t.nested || !t.strided) return std::nullopt;
  if (!dim || t.dim() == 0) return Slices{t.numel(), t.numel() > 0 ? 1 : 0};  // the whole tensor
  int64_t d = *dim < 0 ? *dim + t.dim() : *dim;
  if (d < 0 || d >= t.dim()) return std::nullopt;
  const int64_t n = t.size(d);
  return Slices{n, n > 0 ? Count(t.numel() / n) : Count(0)};
}

std::optional<int64_t> IntArg(const OpCall& call, size_t i) {
  const ArgMeta& a = call.arg(i);
  if (a.kind == ArgKind::kInt) return a.to_int();
  return std::nullopt;
}

// A dim given by name (the Dimname overloads): no integer position to read.
bool NamedDim(const OpCall& call, size_t i) {
  const ArgKind k = call.arg(i).kind;
  return k != ArgKind::kInt && k != ArgKind::kNone;
}

// Counts `per(n)` on each slice of argument 0 along `dim` (the whole tensor
// when it is nullopt).
template <class F>
FormulaResult PerSlice(const OpCall& call, std::optional<int64_t> dim, F per) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return NotDense(call);
  const auto s = Along(*x, dim);
  if (!s) return ShapeMismatch(call, "dimension out of range");
  return CountFor(call, ArithmeticOf(call), s->slices * per(s->n));
}

Count SortOf(int64_t n) { return Count(n) * CeilLog2(n); }
Count Neighbours(int64_t n) { return n > 1 ? Count(n - 1) : Count(0); }
Count Quickselect(int64_t n) { return n > 1 ? Count(2) * (n - 1) : Count(0); }

}  // namespace

int64_t CeilLog2(int64_t n) {
  int64_t bits = 0;
  while (bits < 63 && (int64_t(1) << bits) < n) ++bits;
  return bits;
}

FormulaResult Sort(const OpCall& call) {
  // sort(self, dim, descending); sort.stable / argsort.stable(self, *, stable, dim, descending); msort(self): dim 0.
  std::optional<int64_t> dim;
  if (call.name == "aten::msort") {
    dim = 0;
  } else {
    const size_t at = call.overload == "stable" || call.overload == "values_stable" ? 2 : 1;
    if (NamedDim(call, at)) return ShapeMismatch(call, "expected an integer dim");
    dim = IntArg(call, at).value_or(-1);
  }
  return PerSlice(call, dim, SortOf);
}

FormulaResult Topk(const OpCall& call) {
  const auto k = IntArg(call, 1);
  if (!k || *k < 0 || NamedDim(call, 2)) return ShapeMismatch(call, "expected an integer k >= 0 and dim");
  const int64_t kk = *k;
  return PerSlice(call, IntArg(call, 2).value_or(-1), [kk](int64_t n) {
    if (kk == 0 || n == 0) return Count(0);
    return kk == 1 ? Neighbours(n) : Count(n) * CeilLog2(kk);
  });
}

FormulaResult Kthvalue(const OpCall& call) {
  if (NamedDim(call, 2)) return ShapeMismatch(call, "expected an integer dim");
  return PerSlice(call, IntArg(call, 2).value_or(-1), Quickselect);
}

FormulaResult Median(const OpCall& call) {
  // median(self) / median.dim(self, dim, keepdim); a named dim has no integer position.
  if (NamedDim(call, 1)) return ShapeMismatch(call, "expected an integer dim");
  const bool nan = call.name == "aten::nanmedian";
  return PerSlice(call, IntArg(call, 1), [nan](int64_t n) { return Quickselect(n) + (nan ? Count(n) : Count(0)); });
}

FormulaResult Mode(const OpCall& call) {
  if (NamedDim(call, 1)) return ShapeMismatch(call, "expected an integer dim");
  return PerSlice(call, IntArg(call, 1).value_or(-1), [](int64_t n) { return SortOf(n) + Neighbours(n); });
}

FormulaResult Unique(const OpCall& call) {
  return PerSlice(call, std::nullopt, [](int64_t n) { return SortOf(n) + Neighbours(n); });
}

FormulaResult UniqueConsecutive(const OpCall& call) {
  // unique_consecutive(self, return_inverse, return_counts, dim=None)
  const auto dim = IntArg(call, 3);
  if (!dim) return PerSlice(call, std::nullopt, Neighbours);
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return NotDense(call);
  const auto s = Along(*x, dim);  // r rows of d = slices values
  if (!s) return ShapeMismatch(call, "dimension out of range");
  return CountFor(call, ArithmeticOf(call), Neighbours(s->n) * s->slices);
}

FormulaResult UniqueDim(const OpCall& call) {
  // unique_dim(self, dim, sorted, return_inverse, return_counts); unique_dim_consecutive(self, dim, ...)
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return NotDense(call);
  const auto s = Along(*x, IntArg(call, 1));
  if (!s || !IntArg(call, 1)) return ShapeMismatch(call, "expected an integer dim in range");
  const bool consecutive = call.name == "aten::unique_dim_consecutive";
  const Count rows = consecutive ? Neighbours(s->n) : SortOf(s->n) + Neighbours(s->n);
  return CountFor(call, ArithmeticOf(call), rows * s->slices);
}

namespace {

// Binary search over the last dimension of `boundaries` for `queries` values.
FormulaResult Search(const OpCall& call, const TensorMeta* boundaries, const ArgMeta& values) {
  if (!boundaries || boundaries->nested || !boundaries->strided) return NotDense(call);
  Count queries = 1;  // a Scalar value
  if (values.is_tensor()) {
    if (values.tensor().nested || !values.tensor().strided) return NotDense(call);
    queries = values.tensor().numel();
  }
  const int64_t n = boundaries->dim() == 0 ? 1 : boundaries->size(-1);
  return CountFor(call, ArithmeticWithScalars(call), queries * CeilLog2(n + 1));
}

}  // namespace

FormulaResult Searchsorted(const OpCall& call) {
  // searchsorted(sorted_sequence, self | Scalar self, *, out_int32, right, side, sorter)
  return Search(call, DenseArg(call, 0), call.arg(1));
}

FormulaResult Bucketize(const OpCall& call) {
  // bucketize(self | Scalar self, boundaries, *, out_int32, right)
  return Search(call, DenseArg(call, 1), call.arg(0));
}

FormulaResult Histc(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const auto bins = IntArg(call, 1);
  const auto lo = ScalarArg(call, 2), hi = ScalarArg(call, 3);
  if (!x) return NotDense(call);
  if (!bins || *bins <= 0) return ShapeMismatch(call, "expected bins > 0");
  const int64_t n = x->numel();
  Count count = Count(6) * n + Count(2) * (*bins + 1) + 2;
  if (lo.value_or(0) == hi.value_or(0)) count += Neighbours(n) * 2;  // the data's min and max
  return CountFor(call, ArithmeticOf(call), count);
}

}  // namespace torchscan::selection
