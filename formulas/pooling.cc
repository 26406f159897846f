#include "formulas/pooling.h"

#include <numeric>
#include <string>

#include "formulas/arithmetic.h"

namespace torchscan::pooling {
namespace {

// Values per window: the kernel's product over the operator's spatial axes
// (a single kernel size applies to every axis).
bool WindowValues(const OpCall& call, Count& k) { return KernelVolume(call.arg(1), SpatialRank(call), k); }

// Per window: k values (average) or k - 1 comparisons (max).
FormulaResult Fixed(const OpCall& call, bool comparisons) {
  const TensorMeta* out = DenseOutput(call);
  Count k = 0;
  if (!out || !DenseArg(call, 0) || !WindowValues(call, k)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), (comparisons ? k - 1 : k) * out->numel());
}

// V and O of an adaptive pooling call: spatial axes are the output's last
// len(output_size) axes.
bool Visits(const OpCall& call, Count& visited, Count& outputs) {
  const TensorMeta* in = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  if (!in || !out || in->dim() != out->dim() || in->dim() == 0) return false;
  const ArgMeta& size = call.arg(1);
  if (size.kind != ArgKind::kIntList) return false;
  const int64_t spatial = static_cast<int64_t>(size.ints().size());
  if (spatial > in->dim()) return false;
  visited = 1;
  for (int64_t d = 0; d < in->dim(); ++d) {
    const bool axis = d >= in->dim() - spatial;
    visited *= axis ? AdaptiveAxisVisits(in->size(d), out->size(d)) : in->size(d);
  }
  outputs = out->numel();
  return true;
}

}  // namespace

bool KernelVolume(const ArgMeta& kernel, int64_t spatial, Count& k) {
  if (kernel.kind != ArgKind::kIntList || kernel.ints().empty()) return false;
  const auto sizes = kernel.ints();
  if (sizes.size() != 1 && static_cast<int64_t>(sizes.size()) < spatial) return false;
  k = 1;
  for (int64_t i = 0; i < spatial; ++i) k *= sizes.size() == 1 ? sizes[0] : sizes[i];
  return true;
}

int64_t SpatialRank(const OpCall& call) {
  for (char c : {'1', '2', '3'}) {
    if (call.name.find(std::string(1, c) + "d") != std::string_view::npos) return c - '0';
  }
  return 2;
}

Count AdaptiveAxisVisits(int64_t in, int64_t out) {
  if (in == 0 || out == 0) return 0;
  return Count(in) + out - std::gcd(in, out);
}

FormulaResult MaxPool(const OpCall& call) { return Fixed(call, true); }
FormulaResult AvgPool(const OpCall& call) { return Fixed(call, false); }

FormulaResult AdaptiveAvgPool(const OpCall& call) {
  Count v = 0, o = 0;
  if (!Visits(call, v, o)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), v);
}

FormulaResult AdaptiveMaxPool(const OpCall& call) {
  Count v = 0, o = 0;
  if (!Visits(call, v, o)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), v - o);
}

}  // namespace torchscan::pooling

namespace torchscan::pooling {
namespace {

// Spatial rank from the operator name ("max_pool2d..." -> 2).
int64_t RankOf(const OpCall& call) {
  for (char c : {'1', '2', '3'}) {
    if (call.name.find(std::string(1, c) + "d") != std::string_view::npos) return c - '0';
  }
  return 2;
}

bool ReturnsIndices(const OpCall& call) { return call.outputs.size() >= 2 && call.output(1).is_tensor(); }

}  // namespace

ModuleCosts MaxPoolCosts(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  Count k = 0;
  if (!out || !WindowValues(call, k)) return ModuleCosts::Unavailable(NotDense(call));
  const Count n = out->numel();
  return ModuleCosts::FromFlops(MaxPool(call), n * (k - 1), n * (k + 1 + (ReturnsIndices(call) ? 1 : 0)));
}

ModuleCosts AvgPoolCosts(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  Count k = 0;
  if (!out || !WindowValues(call, k)) return ModuleCosts::Unavailable(NotDense(call));
  const Count n = out->numel();
  return ModuleCosts::FromFlops(AvgPool(call), n * (k - 1 + RankOf(call)), n * (k + 1));
}

ModuleCosts AdaptiveMaxPoolCosts(const OpCall& call) {
  Count v = 0, o = 0;
  if (!Visits(call, v, o)) return ModuleCosts::Unavailable(NotDense(call));
  return ModuleCosts::FromFlops(AdaptiveMaxPool(call), v - o, v + o * (1 + (ReturnsIndices(call) ? 1 : 0)));
}

ModuleCosts AdaptiveAvgPoolCosts(const OpCall& call) {
  Count v = 0, o = 0;
  if (!Visits(call, v, o)) return ModuleCosts::Unavailable(NotDense(call));
  const int64_t rank = static_cast<int64_t>(call.arg(1).ints().size());
  return ModuleCosts::FromFlops(AdaptiveAvgPool(call), v + o * (rank - 1), v + o);
}

}  // namespace torchscan::pooling
