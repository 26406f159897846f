#include "formulas/normalization_backward.h"

#include <array>
#include <optional>
#include <string>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::normalization_backward {
namespace {

int Present(const OpCall& call, size_t i) { return call.arg(i).is_tensor() ? 1 : 0; }

FormulaResult Unsupported(const OpCall& call, const std::string& what) {
  return FormulaResult::Unavailable("unsupported_operator_formula", std::string(call.name) + ": " + what);
}

// The bool[K] output mask at argument i (K = 3, or 2 for RMSNorm).
template <size_t K>
std::optional<std::array<bool, K>> Mask(const OpCall& call, size_t i) {
  const ArgMeta& a = call.arg(i);
  if (a.kind != ArgKind::kBoolList || a.count != K) return std::nullopt;
  std::array<bool, K> mask{};
  for (size_t k = 0; k < K; ++k) mask[k] = a.ints()[k] != 0;
  return mask;
}

// N and D = prod(normalized_shape) of a row-normalizing backward call
// (input at `input`, normalized_shape at `shape`); an error result when the
// input is not dense or the rows are empty.
std::optional<FormulaResult> NormalizedRows(const OpCall& call, size_t input, size_t shape, Count& n, Count& d) {
  const TensorMeta* x = DenseArg(call, input);
  const ArgMeta& s = call.arg(shape);
  if (!x || s.kind != ArgKind::kIntList) return NotDense(call);
  d = Product(s.ints());
  if (d == 0) return Unsupported(call, "normalized rows are empty");
  n = x->numel();
  return std::nullopt;
}

// Batch norm backward, from the kernel's view of the call.
FormulaResult BatchNormCount(const OpCall& call, const TensorMeta* x, bool train, bool weight,
                             const std::array<bool, 3>& mask) {
  if (!x || x->dim() < 2) return NotDense(call);
  const Count n = x->numel(), c = x->size(1);
  if (n == 0) return Unsupported(call, "inputs are empty");
  const int w = weight ? 1 : 0;
  const bool gi = mask[0], gw = mask[1], gb = mask[2];
  Count count = 0;
  if (!train && (gi || gw)) count += 2 * c;     // invstd = 1/sqrt(running_var + eps)
  if (gb || (train && gi)) count += n - c;      // sum(dy) per channel
  if (gw || (train && gi)) count += 3 * n - c;  // sum((x - mean) * dy) per channel
  if (gi) count += train ? (5 + w) * n + 4 * c : (1 + w) * n;
  if (gw) count += c;  // dotp * invstd
  return CountFor(call, ArithmeticOf(call), count);
}

}  // namespace

FormulaResult LayerNorm(const OpCall& call) {
  Count n = 0, d = 0;
  if (auto error = NormalizedRows(call, 1, 2, n, d)) return *error;
  const auto mask = Mask<3>(call, 7);
  if (!mask) return Unsupported(call, "output_mask is not a bool[3]");
  if (n == 0) return CountFor(call, ArithmeticOf(call), 0);  // the kernel does not run
  const Count r = n / d;
  const int w = Present(call, 5);
  Count count = 0;
  if ((*mask)[0]) count += (7 + 3 * w) * n + 9 * r;
  if ((*mask)[1]) count += 4 * n - d + 2 * r;
  if ((*mask)[2]) count += n - d;
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult GroupNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 1);
  const auto batch = ScalarArg(call, 5), channels = ScalarArg(call, 6), hw = ScalarArg(call, 7),
             groups = ScalarArg(call, 8);
  if (!x || !batch || !channels || !hw || !groups) return NotDense(call);
  if (*groups <= 0 ||
      static_cast<int64_t>(*channels) / static_cast<int64_t>(*groups) * static_cast<int64_t>(*hw) == 0) {
    return Unsupported(call, "groups are empty");
  }
  const auto mask = Mask<3>(call, 9);
  if (!mask) return Unsupported(call, "output_mask is not a bool[3]");
  const int64_t b = static_cast<int64_t>(*batch);
  if (b == 0 || x->numel() == 0) return CountFor(call, ArithmeticOf(call), 0);  // the kernel does not run
  const Count n = x->numel(), c = static_cast<int64_t>(*channels);
  const Count p = Count(b) * c, r = Count(b) * static_cast<int64_t>(*groups);
  const int w = Present(call, 4);
  const bool gi = (*mask)[0], gw = (*mask)[1], gb = (*mask)[2];
  Count count = 0;
  if (gi || gw) count += 2 * n - p;    // ds = sum(dy * x) per plane
  if (gi || gw || gb) count += n - p;  // db = sum(dy) per plane
  if (gi) count += 4 * n + (2 + 3 * w) * p + 9 * r;
  if (gw) count += 4 * p - c;
  if (gb) count += p - c;
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult BatchNorm(const OpCall& call) {
  const ArgMeta& train = call.arg(7);
  const auto mask = Mask<3>(call, 9);
  if (train.kind != ArgKind::kBool || !mask) return Unsupported(call, "train flag or output_mask missing");
  return BatchNormCount(call, DenseArg(call, 1), train.to_bool(), call.arg(2).is_tensor(), *mask);
}

FormulaResult CudnnBatchNorm(const OpCall& call) {
  return BatchNormCount(call, DenseArg(call, 0), /*train=*/true, call.arg(2).is_tensor(), {true, true, true});
}

FormulaResult FusedRmsNorm(const OpCall& call) {
  Count n = 0, d = 0;
  if (auto error = NormalizedRows(call, 1, 2, n, d)) return *error;
  const auto mask = Mask<2>(call, 5);
  if (!mask) return Unsupported(call, "output_mask is not a bool[2]");
  if (n == 0) return CountFor(call, ArithmeticOf(call), 0);
  const int w = Present(call, 4);
  Count count = 0;
  if ((*mask)[0]) count += (8 + 2 * w) * n;
  if ((*mask)[1]) count += 3 * n - d;
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult WeightNorm(const OpCall& call) {
  const TensorMeta* v = DenseArg(call, 1);
  const TensorMeta* g = DenseArg(call, 2);
  if (!v || !g) return NotDense(call);
  const Count n = v->numel(), r = g->numel();
  if (r == 0 || n / r == 0) return Unsupported(call, "weight rows are empty");
  return CountFor(call, ArithmeticOf(call), 5 * n + 3 * r);
}

}  // namespace torchscan::normalization_backward
