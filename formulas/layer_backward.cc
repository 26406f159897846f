#include "formulas/layer_backward.h"

#include <cmath>
#include <optional>
#include <string>

#include "formulas/arithmetic.h"
#include "formulas/pooling.h"
#include "formulas/shapes.h"

namespace torchscan::layer_backward {
namespace {

// `per` operations for each element of the gradient argument `i` (the
// output gradient every one of these kernels walks once).
FormulaResult PerGradient(const OpCall& call, size_t i, Count per) {
  const TensorMeta* grad = DenseArg(call, i);
  if (!grad || !DenseOutput(call)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), per * grad->numel());
}

FormulaResult Unsupported(const OpCall& call, const std::string& why) {
  return FormulaResult::Unavailable("unsupported_operator_formula", std::string(call.name) + ": " + why);
}

// Per pair of rows: M coordinates, each a difference, the kernel's derivative
// expression and `accumulations` adds into the gradient rows; nullopt for the
// orders the forward rows do not value either. From DistanceOpsKernel.cpp:
//   p = 1:   grad * sign(diff)                                  2 per coordinate
//   p = 2:   dist == 0 ? 0 : grad * diff / dist                 2 per coordinate,
//            plus the guard's comparison and selection          2 per pair
//   p = inf: grad * sign(diff) * (1 - min(1, ceil(|(|diff| - dist)|)))
//            sign, *, abs, -, abs, ceil, min, 1 -, *            9 per coordinate
// sign is one operation (the table's sign row), however the vector code
// builds it. p = 0 computes nothing (the kernel only zero-fills).
std::optional<Count> PairBackward(double p, int64_t m, int64_t accumulations) {
  if (p == 0.0) return Count(0);
  const Count per_coordinate = Count(1) + accumulations;  // difference + accumulations
  if (p == 1.0) return (per_coordinate + 2) * m;
  if (p == 2.0) return (per_coordinate + 2) * m + 2;
  if (std::isinf(p) && p > 0) return (per_coordinate + 9) * m;
  return std::nullopt;
}

FormulaResult DistanceBackward(const OpCall& call, const TensorMeta* rows, const TensorMeta* pairs, double p,
                               int64_t accumulations) {
  if (!rows || !pairs || rows->dim() < 2 || !DenseOutput(call)) return NotDense(call);
  const std::optional<Count> per = PairBackward(p, rows->size(-1), accumulations);
  if (!per) {
    return FormulaResult::Unavailable("unsupported_norm_order",
                                      std::string(call.name) + ": distances of order " + std::to_string(p) +
                                          " have no TorchScan count (orders 0, 1, 2 and inf do)");
  }
  return CountFor(call, ArithmeticOf(call), *per * pairs->numel());
}

// L lookups and D values per row of an embedding-bag gradient (grad is B x D).
bool BagShape(const OpCall& call, size_t grad_i, size_t indices_i, int64_t& lookups, int64_t& bags, int64_t& d) {
  const TensorMeta* grad = DenseArg(call, grad_i);
  const TensorMeta* indices = DenseArg(call, indices_i);
  if (!grad || !indices || grad->dim() != 2) return false;
  lookups = indices->numel();
  bags = grad->size(0);
  d = grad->size(1);
  return true;
}

// Sum/mean/max dense gradient of an embedding bag (EmbeddingBag.cpp,
// _embedding_bag_dense_backward_cpu). `mode`: 0 sum, 1 mean, 2 max.
Count BagDenseCount(int64_t lookups, int64_t bags, int64_t d, int64_t mode, bool freq, bool weights) {
  if (mode == 2) return Count(bags) * d;  // index_add_ of each bag's max row
  const bool mean = mode == 1;
  const bool scaled = weights || freq || mean;                  // axpy with a scale that is not the constant 1
  Count count = Count(lookups) * d * (scaled ? 2 : 1);          // D adds (+ D multiplies) per lookup
  count += Count(lookups) * ((freq ? 1 : 0) + (mean ? 1 : 0));  // scale /= count, scale /= bag_size
  return count;
}

}  // namespace

FormulaResult MaxPoolBackward(const OpCall& call) { return PerGradient(call, 0, 1); }

FormulaResult AvgPoolBackward(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);
  Count k = 0;
  if (!grad || !DenseOutput(call)) return NotDense(call);
  if (!pooling::KernelVolume(call.arg(2), pooling::SpatialRank(call), k)) {
    return ShapeMismatch(call, "expected a kernel_size list of one size or one per spatial axis");
  }
  return CountFor(call, ArithmeticOf(call), (k + 1) * grad->numel());
}

FormulaResult AdaptiveAvgPoolBackward(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);  // pooled (output) shape
  const TensorMeta* in = DenseArg(call, 1);    // input shape
  const int64_t rank = pooling::SpatialRank(call);
  if (!grad || !in || !DenseOutput(call)) return NotDense(call);
  if (in->dim() != grad->dim() || in->dim() < rank) return ShapeMismatch(call, "gradient and input ranks differ");
  Count visited = 1;
  for (int64_t d = 0; d < in->dim(); ++d) {
    visited *= d >= in->dim() - rank ? pooling::AdaptiveAxisVisits(in->size(d), grad->size(d)) : Count(in->size(d));
  }
  return CountFor(call, ArithmeticOf(call), visited + grad->numel());
}

FormulaResult NearestBackward(const OpCall& call) { return PerGradient(call, 0, 1); }
FormulaResult PadBackward(const OpCall& call) { return PerGradient(call, 0, 1); }

template <int K>
FormulaResult WeightedBackward(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);
  if (!grad || !DenseOutput(call)) return NotDense(call);
  if constexpr (K == 16) {
    // upsample_bicubic2d_backward_kernel: equal spatial sizes copy the gradient.
    const ArgMeta& out_size = call.arg(1);
    const ArgMeta& in_size = call.arg(2);
    if (out_size.kind == ArgKind::kIntList && in_size.kind == ArgKind::kIntList && out_size.count == 2 &&
        in_size.count == 4 && in_size.ints()[2] == out_size.ints()[0] && in_size.ints()[3] == out_size.ints()[1]) {
      return FormulaResult::Complete(0);
    }
  }
  return CountFor(call, ArithmeticOf(call), Count(2 * K) * grad->numel());
}
template FormulaResult WeightedBackward<2>(const OpCall&);
template FormulaResult WeightedBackward<4>(const OpCall&);
template FormulaResult WeightedBackward<8>(const OpCall&);
template FormulaResult WeightedBackward<16>(const OpCall&);

FormulaResult EmbeddingDenseBackward(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);
  const TensorMeta* indices = DenseArg(call, 1);
  if (!grad || !indices || !DenseOutput(call)) return NotDense(call);
  if (grad->dim() != indices->dim() + 1) return ShapeMismatch(call, "expected grad_output = indices shape + (D,)");
  const Count lookups = indices->numel();
  const int64_t d = grad->size(-1);
  const bool freq = call.arg(4).kind == ArgKind::kBool && call.arg(4).to_bool();
  // add_(grad row, alpha=scale): D adds; a frequency scale adds D multiplies
  // and the scalar 1 / count per lookup.
  const Count count = freq ? lookups * (Count(2) * d + 1) : lookups * d;
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult EmbeddingBagDenseBackward(const OpCall& call) {
  int64_t lookups = 0, bags = 0, d = 0;
  const auto mode = ScalarArg(call, 7);
  if (!BagShape(call, 0, 1, lookups, bags, d) || !mode || !DenseOutput(call)) return NotDense(call);
  const bool freq = call.arg(6).kind == ArgKind::kBool && call.arg(6).to_bool();
  const bool weights = call.arg(8).is_tensor() && call.arg(8).tensor().defined;
  return CountFor(call, ArithmeticOf(call),
                  BagDenseCount(lookups, bags, d, static_cast<int64_t>(*mode), freq, weights));
}

FormulaResult EmbeddingBagBackward(const OpCall& call) {
  int64_t lookups = 0, bags = 0, d = 0;
  const auto mode = ScalarArg(call, 8);
  if (!BagShape(call, 0, 1, lookups, bags, d) || !mode) return NotDense(call);
  const bool freq = call.arg(7).kind == ArgKind::kBool && call.arg(7).to_bool();
  const bool sparse = call.arg(9).kind == ArgKind::kBool && call.arg(9).to_bool();
  const bool weights = call.arg(10).is_tensor() && call.arg(10).tensor().defined;
  if (!sparse) {
    if (!DenseOutput(call)) return NotDense(call);
    return CountFor(call, ArithmeticOf(call),
                    BagDenseCount(lookups, bags, d, static_cast<int64_t>(*mode), freq, weights));
  }
  // _embedding_bag_sparse_backward: index_select of the bag rows (a copy),
  // div_ by the bag sizes (mean), mul_ by the per-sample weights, then a
  // sparse COO tensor of those rows (no arithmetic).
  if (*mode == 2) return Unsupported(call, "max mode has no sparse gradient");
  const Count rows = Count(lookups) * d;
  return CountFor(call, ArithmeticOf(call), rows * ((*mode == 1 ? 1 : 0) + (weights ? 1 : 0)));
}

FormulaResult EmbeddingBagPerSampleWeightsBackward(const OpCall& call) {
  int64_t lookups = 0, bags = 0, d = 0;
  if (!BagShape(call, 0, 2, lookups, bags, d) || !DenseArg(call, 1) || !DenseOutput(call)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(2) * lookups * d);
}

FormulaResult CdistBackward(const OpCall& call) {
  const auto p = ScalarArg(call, 3);
  if (!p) return NotDense(call);
  return DistanceBackward(call, DenseArg(call, 1), DenseArg(call, 4), *p, 1);
}

FormulaResult PdistBackward(const OpCall& call) {
  const auto p = ScalarArg(call, 2);
  const TensorMeta* self = DenseArg(call, 1);
  if (!p || (self && self->dim() != 2)) return NotDense(call);
  return DistanceBackward(call, self, DenseArg(call, 3), *p, 2);
}

FormulaResult GridSampler2dBackward(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);   // N x C x H_out x W_out
  const TensorMeta* input = DenseArg(call, 1);  // N x C x H_in x W_in
  const TensorMeta* grid = DenseArg(call, 2);   // N x H_out x W_out x 2
  const auto mode = ScalarArg(call, 3);
  const ArgMeta& mask = call.arg(6);
  if (!grad || !input || !grid || !mode || grad->dim() != 4 || grid->dim() != 4) return NotDense(call);
  if (mask.kind != ArgKind::kBoolList || mask.count != 2) return ShapeMismatch(call, "expected output_mask bool[2]");
  // GridSampler.cpp: an empty input or grid only zero-fills the grid gradient.
  if (input->numel() == 0 || grid->numel() == 0) return FormulaResult::Complete(0);
  const int64_t k = *mode == 0 ? 4 : *mode == 1 ? 1 : *mode == 2 ? 16 : 0;
  if (k == 0) return Unsupported(call, "unknown interpolation mode " + std::to_string(static_cast<int64_t>(*mode)));
  const Count values = grad->numel();                // (p, c) pairs
  const Count locations = Count(grid->numel()) / 2;  // p
  // Input gradient: per neighbour a weight multiply and an add (nearest: the add alone).
  Count count = mask.ints()[0] ? Count(k == 1 ? 1 : 2 * k) * values : Count(0);
  if (k != 1) count += Count(2 * (2 * k + 1)) * values + Count(2) * locations;  // nearest: grid gradient is 0
  return CountFor(call, ArithmeticOf(call), count);
}

}  // namespace torchscan::layer_backward
