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
  return CountFor(call, ArithmeticOf(call), kN * n + kR * r);
}

}  // namespace

FormulaResult Softmax(const OpCall& call) { return Linear<5, -2>(call); }
FormulaResult SafeSoftmax(const OpCall& call) { return Linear<7, -2>(call); }
FormulaResult LogSoftmax(const OpCall& call) { return Linear<4, -1>(call); }

}  // namespace torchscan::softmax
