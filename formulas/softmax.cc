#include "formulas/softmax.h"

#include "formulas/arithmetic.h"

namespace torchscan::softmax {
namespace {

// N and R of a softmax call over arg(1) = dim.
bool Rows(const OpCall& call, int64_t& n, int64_t& r) {
  const TensorMeta* in = DenseArg(call, 0);
  const ArgMeta& dim = call.arg(1);
  if (!in || dim.kind != ArgKind::kInt) return false;
  n = in->numel();
  const int64_t length = in->dim() == 0 ? 1 : in->size(dim.to_int());
  r = length == 0 ? 0 : n / length;
  return true;
}

template <int kN, int kR>
FormulaResult Linear(const OpCall& call) {
  int64_t n = 0, r = 0;
  if (!Rows(call, n, r)) return NotDense(call);
  static_assert(kN > 0 && kR < 0, "N terms minus R terms");
  return CountFor(call, ArithmeticOf(call), Count(kN) * n - Count(-kR) * r);  // r <= n: never below zero
}

}  // namespace

FormulaResult Softmax(const OpCall& call) { return Linear<5, -2>(call); }
FormulaResult SafeSoftmax(const OpCall& call) { return Linear<7, -2>(call); }
FormulaResult LogSoftmax(const OpCall& call) { return Linear<4, -1>(call); }

}  // namespace torchscan::softmax

namespace torchscan::softmax {
namespace {

template <int kN, int kR>
ModuleCosts WithAccesses(const OpCall& call, const FormulaResult& flops) {
  int64_t n = 0, r = 0;
  if (!Rows(call, n, r) || flops.status == MetricStatus::kUnavailable) {
    return ModuleCosts::Unavailable(flops.status == MetricStatus::kUnavailable ? flops : NotDense(call));
  }
  return {flops, FormulaResult::Complete(0), FormulaResult::Complete(Count(kN) * n + Count(kR) * r)};
}

}  // namespace

ModuleCosts SoftmaxCosts(const OpCall& call) { return WithAccesses<8, 4>(call, Softmax(call)); }
ModuleCosts LogSoftmaxCosts(const OpCall& call) { return WithAccesses<8, 6>(call, LogSoftmax(call)); }
// The stable softmax's stages (8N + 4R) plus the two the safe variant adds,
// staged the same way: the -inf test reads N values and writes N flags; the
// selection reads N flags and N softmax values and writes N -> 13N + 4R.
ModuleCosts SafeSoftmaxCosts(const OpCall& call) { return WithAccesses<13, 4>(call, SafeSoftmax(call)); }

}  // namespace torchscan::softmax
