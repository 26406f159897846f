#include "formulas/misc.h"

#include <string>

#include "formulas/arithmetic.h"

namespace torchscan::misc {

FormulaResult Dropout(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return NotDense(call);
  const auto p = ScalarArg(call, 1);
  const ArgMeta& train = call.arg(2);
  // native_dropout's `train` is optional; None means training.
  const bool training = train.kind == ArgKind::kBool ? train.to_bool() : true;
  if (!training || !p || *p == 0.0) return FormulaResult::Complete(0);
  return CountFor(call, ArithmeticOf(call), Count(*p == 1.0 ? 1 : 2) * x->numel());
}

FormulaResult Embedding(const OpCall& call) {
  if (!DenseArg(call, 0) || !DenseArg(call, 1)) return NotDense(call);
  return FormulaResult::Complete(0);
}

FormulaResult EmbeddingRenorm(const OpCall& call) {
  return FormulaResult::Unavailable("unsupported_embedding_max_norm",
                                    "embedding max_norm renormalization has no TorchScan count");
}

FormulaResult Nearest(const OpCall& call) {
  if (!DenseArg(call, 0) || !DenseOutput(call)) return NotDense(call);
  return FormulaResult::Complete(0);
}

template <int K>
FormulaResult Weighted(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!DenseArg(call, 0) || !out) return NotDense(call);
  const Arithmetic a = ArithmeticOf(call);
  if (a == Arithmetic::kInteger) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) + ": weighted interpolation of integer inputs");
  }
  return CountFor(call, a, Count(2 * K - 1) * out->numel());
}
template FormulaResult Weighted<2>(const OpCall&);
template FormulaResult Weighted<4>(const OpCall&);
template FormulaResult Weighted<8>(const OpCall&);
template FormulaResult Weighted<16>(const OpCall&);

FormulaResult RandomSampling(const OpCall& call) {
  return FormulaResult::Unavailable(
      "random_sampling", std::string(call.name) + ": random sampling is a visible exclusion of torchscan_flops_v1");
}

namespace {

// The result dtype decides complex; any other result was computed in floating point.
Arithmetic FactoryArithmetic(const TensorMeta& out) {
  return c10::isComplexType(out.dtype) ? Arithmetic::kComplex : Arithmetic::kReal;
}

}  // namespace

FormulaResult Linspace(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  const int64_t n = out->numel();
  return CountFor(call, FactoryArithmetic(*out), n > 1 ? Count(2) * n + 2 : Count(0));
}

FormulaResult Logspace(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  const int64_t n = out->numel();
  return CountFor(call, FactoryArithmetic(*out), n > 1 ? Count(3) * n + 2 : Count(n));
}

template <int K>
FormulaResult Window(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  return CountFor(call, FactoryArithmetic(*out), Count(K) * out->numel());
}
template FormulaResult Window<4>(const OpCall&);
template FormulaResult Window<8>(const OpCall&);

FormulaResult Arange(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  return CountFor(call, ArithmeticOfDtype(out->dtype), Count(2) * out->numel());
}

}  // namespace torchscan::misc

namespace torchscan::misc {

ModuleCosts DropoutCosts(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  if (!x) return ModuleCosts::Unavailable(NotDense(call));
  return ModuleCosts::FromFlops(Dropout(call), 0, Count(2) * x->numel() + 1);
}

ModuleCosts EmbeddingCosts(const OpCall& call) {
  const TensorMeta* ids = DenseArg(call, 1);
  const TensorMeta* out = DenseOutput(call);
  if (!ids || !out) return ModuleCosts::Unavailable(NotDense(call));
  return ModuleCosts::FromFlops(Embedding(call), 0, Count(ids->numel()) + Count(2) * out->numel());
}

ModuleCosts EmbeddingRenormCosts(const OpCall& call) { return ModuleCosts::Unavailable(EmbeddingRenorm(call)); }

ModuleCosts NearestCosts(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return ModuleCosts::Unavailable(NotDense(call));
  return ModuleCosts::FromFlops(Nearest(call), 0, Count(2) * out->numel());
}

template <int K>
ModuleCosts WeightedCosts(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return ModuleCosts::Unavailable(NotDense(call));
  return ModuleCosts::FromFlops(Weighted<K>(call), Count(K) * out->numel(), Count(K + 1) * out->numel());
}
template ModuleCosts WeightedCosts<2>(const OpCall&);
template ModuleCosts WeightedCosts<4>(const OpCall&);
template ModuleCosts WeightedCosts<8>(const OpCall&);
template ModuleCosts WeightedCosts<16>(const OpCall&);

}  // namespace torchscan::misc
