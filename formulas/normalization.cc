#include "formulas/normalization.h"

#include <optional>
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

// What a batch-norm call does, read from whichever overload it is:
// _native_batch_norm_legit_no_training has no `training` argument; the
// _legit.no_stats overload (input, w, b, training, ...) has no running stats.
struct BatchNormArgs {
  bool training = false;
  bool running_mean = false, running_var = false;
  bool affine_weight = false, affine_bias = false;
};

BatchNormArgs ReadBatchNorm(const OpCall& call) {
  BatchNormArgs b;
  b.affine_weight = call.arg(1).is_tensor();
  b.affine_bias = call.arg(2).is_tensor();
  if (call.name == "aten::_native_batch_norm_legit_no_training") {
    b.running_mean = call.arg(3).is_tensor();
    b.running_var = call.arg(4).is_tensor();
  } else if (call.arg(3).kind == ArgKind::kBool) {
    b.training = call.arg(3).to_bool();
  } else {
    b.training = call.arg(5).kind == ArgKind::kBool && call.arg(5).to_bool();
    b.running_mean = call.arg(3).is_tensor();
    b.running_var = call.arg(4).is_tensor();
  }
  return b;
}

// 6N + 2R + AN (LayerNorm/GroupNorm).
FormulaResult RowNorm(const OpCall& call, const Count& n, const Count& r, int affine) {
  return CountFor(call, ArithmeticOf(call), 6 * n + 2 * r + affine * n);
}

// N and R of a call normalizing over arg(1) = normalized_shape; an error
// result when the input is not dense or its rows are empty.
std::optional<FormulaResult> NormalizedRows(const OpCall& call, Count& n, Count& r) {
  const TensorMeta* x = DenseArg(call, 0);
  const ArgMeta& shape = call.arg(1);
  if (!x || shape.kind != ArgKind::kIntList) return NotDense(call);
  const Count row = Product(shape.ints());
  if (row == 0) return EmptyRows(call, "normalized rows");
  n = x->numel();
  r = n / row;
  return std::nullopt;
}

}  // namespace

FormulaResult LayerNorm(const OpCall& call) {
  Count n = 0, r = 0;
  if (auto error = NormalizedRows(call, n, r)) return *error;
  return RowNorm(call, n, r, Present(call, 2) + Present(call, 3));
}

FormulaResult GroupNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const auto batch = ScalarArg(call, 3), channels = ScalarArg(call, 4), hw = ScalarArg(call, 5),
             groups = ScalarArg(call, 6);
  if (!x || !batch || !channels || !hw || !groups) return NotDense(call);
  if (*groups <= 0 || *channels / *groups * *hw == 0) return EmptyRows(call, "groups");
  const Count r = Count(static_cast<int64_t>(*batch)) * static_cast<int64_t>(*groups);
  return RowNorm(call, x->numel(), r, Present(call, 1) + Present(call, 2));
}

FormulaResult BatchNorm(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || x->dim() < 2) return NotDense(call);
  const Count n = x->numel(), c = x->size(1);
  if (n == 0) return EmptyRows(call, "inputs");
  const BatchNormArgs b = ReadBatchNorm(call);
  Count count = 2 * n + 2 * c + (b.affine_weight + b.affine_bias) * n;
  // Running-stat updates only happen while training; in eval the running
  // tensors are the saved statistics.
  if (b.training) {
    count += 4 * n;
    if (b.running_mean) count += 3 * c;
    if (b.running_var) count += 5 * c;
  }
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult RmsNorm(const OpCall& call) {
  Count n = 0, r = 0;
  if (auto error = NormalizedRows(call, n, r)) return *error;
  return CountFor(call, ArithmeticOf(call), (3 + Present(call, 2)) * n + 2 * r);
}

FormulaResult WeightNorm(const OpCall& call) {
  const TensorMeta* v = DenseArg(call, 0);
  const TensorMeta* g = DenseArg(call, 1);
  if (!v || !g) return NotDense(call);
  const Count n = v->numel(), r = g->numel();
  if (r == 0 || n / r == 0) return EmptyRows(call, "weight rows");
  return CountFor(call, ArithmeticOf(call), 3 * n + r);
}

}  // namespace torchscan::normalization

namespace torchscan::normalization {
namespace {

// LayerNorm's staged accesses: mean N + R, variance N + 2R, normalize
// 2N + 2R + 1 (eps), affine 2N + parameters.
Count StagedNormAccesses(const Count& n, const Count& r, const Count& params, bool affine) {
  return 4 * n + 5 * r + 1 + params + (affine ? 2 * n : Count(0));
}

}  // namespace

ModuleCosts BatchNormCosts(const OpCall& call) {
  const FormulaResult flops = BatchNorm(call);
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const int64_t c = x->size(1), m = c ? x->numel() / c : 0;
  const Count n = x->numel();
  const BatchNormArgs b = ReadBatchNorm(call);
  const bool running = b.running_mean && b.running_var;
  const bool training = b.training;
  const bool affine = b.affine_weight && b.affine_bias;
  Count macs = n * (1 + (affine ? 1 : 0));
  if (training && running) macs += Count(c) * (m - 1) + Count(c) * (2 * Count(m) - 1) + 4 * Count(c);
  Count dmas = 2 * n + 1 + 1;  // input, output, eps, momentum
  if (running) dmas += 2 * c;
  if (affine) dmas += 2 * c;
  // Statistics written back. (TorchScan's module formula also counted one
  // access for the batch counter; here that increment is its own observed
  // aten::add_ call, so it is not counted twice.)
  if (training && running) dmas += 2 * c;
  return ModuleCosts::FromFlops(flops, macs, dmas);
}

ModuleCosts LayerNormCosts(const OpCall& call) {
  const FormulaResult flops = LayerNorm(call);
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const Count n = x->numel(), row = Product(call.arg(1).ints());
  const Count params = Elements(call.arg(2)) + Elements(call.arg(3));
  const bool weight = call.arg(2).is_tensor();
  return ModuleCosts::FromFlops(flops, n * (1 + (weight ? 1 : 0)), StagedNormAccesses(n, n / row, params, params > 0));
}

ModuleCosts GroupNormCosts(const OpCall& call) {
  const FormulaResult flops = GroupNorm(call);
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const Count n = x->numel();
  const Count r = Count(static_cast<int64_t>(*ScalarArg(call, 3))) * static_cast<int64_t>(*ScalarArg(call, 6));
  const Count params = Elements(call.arg(1)) + Elements(call.arg(2));
  const bool weight = call.arg(1).is_tensor();
  return ModuleCosts::FromFlops(flops, n * (1 + (weight ? 1 : 0)),
                                n == 0 ? Count(0) : StagedNormAccesses(n, r, params, params > 0));
}

ModuleCosts RmsNormCosts(const OpCall& call) {
  const FormulaResult flops = RmsNorm(call);
  const TensorMeta* x = DenseArg(call, 0);
  if (!x || flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(flops);
  const Count n = x->numel(), r = n / Product(call.arg(1).ints());
  const Count params = Elements(call.arg(2));
  const bool weight = call.arg(2).is_tensor();
  // mean-square N + R, eps/rsqrt 2R + 1, normalize 2N + R, affine 2N + P.
  const Count dmas = n == 0 ? Count(0) : 3 * n + 4 * r + 1 + params + (weight ? 2 * n : Count(0));
  return ModuleCosts::FromFlops(flops, n * (1 + (weight ? 1 : 0)), dmas);
}

ModuleCosts WeightNormCosts(const OpCall& call) {
  const FormulaResult undefined = FormulaResult::Unavailable(
      "undefined_by_convention", "weight normalization has no MAC/DMA convention in torchscan_flops_v1");
  return {WeightNorm(call), undefined, undefined};
}

}  // namespace torchscan::normalization
