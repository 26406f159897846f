#include "formulas/reduction.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::reduction {
namespace {

struct Sizes {
  int64_t n = 0;  // input values
  int64_t r = 0;  // output values
};

bool Read(const OpCall& call, Sizes& s) {
  const TensorMeta* in = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  if (!in || !out) return false;
  s.n = in->numel();
  s.r = out->numel();
  return true;
}

int64_t Folds(const Sizes& s) { return s.n > s.r ? s.n - s.r : 0; }

// sum/mean/prod take their dtype at position 1 when they have no dim
// argument (2 operands; an out= destination is not one), else at position 3
// (after dim, keepdim).
Arithmetic ReductionDtype(const OpCall& call) { return ReductionArithmetic(call, call.args.size() <= 2 ? 1 : 3); }

// One spatial axis of col2im: blocks b in [0, blocks) with kernel offsets
// k in [0, kernel) land on b*stride - pad + k*dilation. Returns the values
// that land inside [0, size) and the output positions that receive any.
struct AxisLanding {
  int64_t blocks = 0;
  Count landed = 0;
  Count covered = 0;
};
std::optional<AxisLanding> Land(int64_t size, int64_t kernel, int64_t dilation, int64_t pad, int64_t stride) {
  if (size < 0 || kernel <= 0 || dilation <= 0 || pad < 0 || stride <= 0) return std::nullopt;
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  const int64_t blocks = span < 0 ? 0 : span / stride + 1;
  AxisLanding a;
  a.blocks = blocks;
  std::vector<bool> hit(static_cast<size_t>(size), false);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t at = b * stride - pad + k * dilation;
      if (at < 0 || at >= size) continue;
      a.landed += 1;
      if (!hit[at]) a.covered += 1;
      hit[at] = true;
    }
  }
  return a;
}

}  // namespace

FormulaResult Fold(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Folds(s));
}

FormulaResult MaxMin(const OpCall& call) {
  if (call.arg(1).is_tensor()) {
    const TensorMeta* out = DenseOutput(call);
    if (!out) return NotDense(call);
    return CountFor(call, ArithmeticOf(call), out->numel());
  }
  return Fold(call);
}

FormulaResult Sum(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ReductionDtype(call), Folds(s));
}

FormulaResult Mean(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ReductionDtype(call), Count(Folds(s)) + s.r);
}

FormulaResult Cumulative(const OpCall& call) {
  const TensorMeta* in = DenseArg(call, 0);
  const ArgMeta& dim = call.arg(1);
  if (!in || dim.kind != ArgKind::kInt) return NotDense(call);
  const int64_t n = in->numel();
  const int64_t length = in->dim() == 0 ? 1 : in->size(dim.to_int());
  const int64_t rows = length == 0 ? 0 : n / length;
  return CountFor(call, ReductionArithmetic(call, 2), n - rows);
}

FormulaResult VectorNorm(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  const auto ord = ScalarArg(call, 1);
  const double p = ord.value_or(2.0);  // default order 2 (None / absent)
  Count count;
  if (p == 1.0 || std::isinf(p)) {
    count = Count(s.n) + Folds(s);
  } else if (p == 2.0) {
    count = Count(s.n) + Folds(s) + s.r;
  } else {
    return FormulaResult::Unavailable("unsupported_norm_order",
                                      std::string(call.name) + ": vector norms of order " + std::to_string(p) +
                                          " have no TorchScan count (orders 1, 2 and +-inf do)");
  }
  return CountFor(call, ArithmeticOf(call), count);
}

FormulaResult Variance(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(4) * s.n);
}

FormulaResult StandardDeviation(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(4) * s.n + s.r);
}

FormulaResult Aminmax(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(2) * Folds(s));
}

FormulaResult Logsumexp(const OpCall& call) {
  Sizes s;
  if (!Read(call, s)) return NotDense(call);
  // Integer inputs are reduced in the (floating) result dtype.
  return CountFor(call, ArithmeticOfDtype(DenseOutput(call)->dtype),
                  Count(2) * Folds(s) + Count(2) * s.n + Count(2) * s.r);
}

FormulaResult Col2im(const OpCall& call) {
  const TensorMeta* in = DenseArg(call, 0);
  const TensorMeta* out = DenseOutput(call);
  const ArgMeta *size = &call.arg(1), *kernel = &call.arg(2), *dilation = &call.arg(3), *pad = &call.arg(4),
                *stride = &call.arg(5);
  for (const ArgMeta* a : {size, kernel, dilation, pad, stride}) {
    if (a->kind != ArgKind::kIntList || a->count != 2) return ShapeMismatch(call, "expected 2-D window arguments");
  }
  if (!in || !out || (in->dim() != 2 && in->dim() != 3)) return NotDense(call);
  const auto h = Land(size->ints()[0], kernel->ints()[0], dilation->ints()[0], pad->ints()[0], stride->ints()[0]);
  const auto w = Land(size->ints()[1], kernel->ints()[1], dilation->ints()[1], pad->ints()[1], stride->ints()[1]);
  if (!h || !w || in->size(-1) != h->blocks * w->blocks) {
    return ShapeMismatch(call, "window arguments do not match the input's block count");
  }
  // Planes: batch x channels = output elements / (H x W).
  const Count hw = Count(size->ints()[0]) * size->ints()[1];
  const Count planes = hw == 0 ? Count(0) : Count(out->numel()) / hw;
  return CountFor(call, ArithmeticOf(call), planes * (h->landed * w->landed - h->covered * w->covered));
}

}  // namespace torchscan::reduction
