#include "formulas/losses.h"

#include <algorithm>
#include <optional>
#include <string>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::losses {
namespace {

// at::Reduction: the `int reduction` operand of every loss kernel.
constexpr int64_t kNone = 0;
constexpr int64_t kMean = 1;
constexpr int64_t kSum = 2;

bool AllDense(const OpCall& call) {
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor() && (a.tensor().nested || !a.tensor().strided)) return false;
  }
  return true;
}

std::optional<int64_t> ReductionAt(const OpCall& call, size_t i) {
  const ArgMeta& r = call.arg(i);
  if (r.kind != ArgKind::kInt || r.to_int() < kNone || r.to_int() > kSum) return std::nullopt;
  return r.to_int();
}

FormulaResult UnknownReduction(const OpCall& call) {
  return ShapeMismatch(call, "the reduction operand is not none (0), mean (1) or sum (2)");
}

bool Present(const OpCall& call, size_t i) { return call.arg(i).is_tensor() && call.arg(i).tensor().defined; }

// The loss reduction over the whole unreduced loss of n values (apply_loss_
// reduction: at::mean / at::sum; the table's reduction row with R = 1).
Count LossReduction(int64_t reduction, Count n) {
  if (reduction == kNone) return 0;
  const Count adds = n > Count(0) ? n - Count(1) : Count(0);
  return reduction == kMean ? adds + Count(1) : adds;
}

// Elements of the broadcast shape of two tensors (TensorIterator's shape).
Count BroadcastElements(const TensorMeta& a, const TensorMeta& b) {
  const int64_t rank = std::max(a.dim(), b.dim());
  Count n = 1;
  for (int64_t i = 1; i <= rank; ++i) {
    const int64_t x = i <= a.dim() ? a.size(-i) : 1;
    const int64_t y = i <= b.dim() ? b.size(-i) : 1;
    n *= x == 1 ? y : x;
  }
  return n;
}

// The unreduced loss values of a forward kernel over (self, target).
std::optional<Count> ForwardElements(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 0);
  const TensorMeta* target = DenseArg(call, 1);
  if (!self || !target || !AllDense(call)) return std::nullopt;
  return BroadcastElements(*self, *target);
}

// grad_input's values of a backward kernel (its first output; for the
// .grad_input/.out overloads the destination).
std::optional<Count> BackwardElements(const OpCall& call) {
  const TensorMeta* out = DenseOutput(call);
  if (!out || !AllDense(call)) return std::nullopt;
  return Count(out->numel());
}

// nll_loss(2d) operands: self at `self_arg`, then target, weight, reduction.
struct Nll {
  Count positions = 0;        // B: target positions the kernel visits
  bool per_position = false;  // reduction none with a batched self
  bool weighted = false;
  int64_t reduction = kNone;
};
std::optional<Nll> ReadNll(const OpCall& call, size_t self_arg) {
  const TensorMeta* self = DenseArg(call, self_arg);
  const TensorMeta* target = DenseArg(call, self_arg + 1);
  const std::optional<int64_t> reduction = ReductionAt(call, self_arg + 3);
  if (!self || !target || !reduction || !AllDense(call) || self->dim() < 1) return std::nullopt;
  Nll n;
  n.reduction = *reduction;
  n.weighted = Present(call, self_arg + 2);
  // A 1-D self is one sample (target[0]) and always takes the scalar path.
  n.per_position = n.reduction == kNone && self->dim() >= 2;
  n.positions = self->dim() == 1 ? Count(target->numel() == 0 ? 0 : 1) : Count(target->numel());
  return n;
}

// F frames of D classes of the margin losses: a 0-D self is one frame of one
// class, a 1-D self one frame, a 2-D self (F, D).
struct Frames {
  int64_t f = 0;
  int64_t d = 0;
};
std::optional<Frames> ReadFrames(const TensorMeta& self) {
  switch (self.dim()) {
    case 0:
      return Frames{1, 1};
    case 1:
      return Frames{1, self.size(0)};
    case 2:
      return Frames{self.size(0), self.size(1)};
    default:
      return std::nullopt;
  }
}

std::optional<int> MarginPower(const OpCall& call, size_t i) {
  const std::optional<double> p = ScalarArg(call, i);
  if (p && (*p == 1.0 || *p == 2.0)) return static_cast<int>(*p);
  return std::nullopt;
}

FormulaResult BadShape(const OpCall& call) {
  return ShapeMismatch(call, "operands do not have the shapes the loss kernel accepts");
}

}  // namespace

FormulaResult NllLossForward(const OpCall& call) {
  const std::optional<Nll> n = ReadNll(call, 0);
  if (!n) return AllDense(call) ? BadShape(call) : NotDense(call);
  const Count b = n->positions;
  Count ops = 0;
  if (n->per_position) {
    ops = Count(2) * b;  // -x[t] * w[t]
  } else if (b > Count(0)) {
    // loss -= x[t] (* w[t]); total_weight += w[t]; mean: one divide.
    ops = n->weighted ? Count(3) * b - Count(1) : b;
    if (n->reduction == kMean) ops += 1;
  }
  return CountFor(call, ArithmeticOf(call), ops);
}

FormulaResult NllLossBackward(const OpCall& call) {
  const std::optional<Nll> n = ReadNll(call, 1);
  if (!n) return AllDense(call) ? BadShape(call) : NotDense(call);
  Count ops = 0;
  if (n->per_position) {
    ops = Count(2) * n->positions;  // -w[t] * g[i]
  } else {
    ops = n->reduction == kMean ? 2 : 1;   // -(g / total_weight), or -g
    if (n->weighted) ops += n->positions;  // w[t] * g'
  }
  return CountFor(call, ArithmeticOf(call), ops);
}

FormulaResult MseLoss(const OpCall& call) {
  const std::optional<Count> n = ForwardElements(call);
  if (!n) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 2);
  if (!r) return UnknownReduction(call);
  return CountFor(call, ArithmeticOf(call), Count(2) * *n + LossReduction(*r, *n));
}

FormulaResult MseLossBackward(const OpCall& call) {
  const std::optional<Count> n = BackwardElements(call);
  if (!n) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(3) * *n);
}

FormulaResult SmoothL1OrHuberLoss(const OpCall& call) {
  const std::optional<Count> n = ForwardElements(call);
  if (!n) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 2);
  if (!r) return UnknownReduction(call);
  return CountFor(call, ArithmeticOf(call), Count(8) * *n + LossReduction(*r, *n));
}

FormulaResult SmoothL1OrHuberLossBackward(const OpCall& call) {
  const std::optional<Count> n = BackwardElements(call);
  if (!n) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(9) * *n);
}

FormulaResult BinaryCrossEntropy(const OpCall& call) {
  const std::optional<Count> n = ForwardElements(call);
  if (!n) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 3);
  if (!r) return UnknownReduction(call);
  const Count weight = Present(call, 2) ? *n : Count(0);
  return CountFor(call, ArithmeticOf(call), Count(9) * *n + weight + LossReduction(*r, *n));
}

FormulaResult BinaryCrossEntropyBackward(const OpCall& call) {
  const std::optional<Count> n = BackwardElements(call);
  if (!n) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 4);
  if (!r) return UnknownReduction(call);
  const Count weight = Present(call, 3) ? *n : Count(0);
  const Count mean = *r == kMean ? *n : Count(0);
  return CountFor(call, ArithmeticOf(call), Count(6) * *n + weight + mean);
}

FormulaResult BinaryCrossEntropyWithLogits(const OpCall& call) {
  const std::optional<Count> n = ForwardElements(call);
  if (!n) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 4);
  if (!r) return UnknownReduction(call);
  // log_sigmoid runs on self's own shape (7 per value of self); (1 - y) * x - ls on the broadcast (3N).
  Count ops = Count(7) * DenseArg(call, 0)->numel() + Count(3) * *n;
  if (Present(call, 3)) ops += Elements(call.arg(3)) + Count(3) * *n;  // pos_weight
  if (Present(call, 2)) ops += *n;                                     // weight
  return CountFor(call, ArithmeticOf(call), ops + LossReduction(*r, *n));
}

FormulaResult SoftMarginLoss(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 0);
  if (!self || !DenseArg(call, 1) || !AllDense(call)) return NotDense(call);
  const std::optional<int64_t> r = ReductionAt(call, 2);
  if (!r) return UnknownReduction(call);
  const Count n = self->numel();  // neg_out(output, self), then in place
  return CountFor(call, ArithmeticOf(call), Count(4) * n + LossReduction(*r, n));
}

FormulaResult SoftMarginLossBackward(const OpCall& call) {
  const std::optional<Count> n = BackwardElements(call);
  const TensorMeta* target = DenseArg(call, 2);
  if (!n || !target) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(target->numel()) + Count(7) * *n);
}

FormulaResult MultiMarginLoss(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 0);
  const TensorMeta* target = DenseArg(call, 1);
  if (!self || !target || !AllDense(call)) return NotDense(call);
  const std::optional<Frames> fr = ReadFrames(*self);
  const std::optional<int> p = MarginPower(call, 2);
  const std::optional<int64_t> r = ReductionAt(call, 5);
  if (!fr || !p) return ShapeMismatch(call, "needs a self of at most 2 dimensions and p = 1 or 2");
  if (!r) return UnknownReduction(call);
  if (self->numel() == 0) return CountFor(call, ArithmeticOf(call), 0);  // returns early
  const Count others = fr->d - 1;
  const int per_term = 3 + (*p == 2 ? 1 : 0) + (Present(call, 4) ? 1 : 0);
  const Count frame = others * per_term + Count(std::max<int64_t>(fr->d - 2, 0)) + Count(1);
  Count ops = Count(fr->f) * frame;
  if (!(*r == kNone && target->dim() > 0)) {  // one scalar: the frames summed
    ops += Count(fr->f - 1);
    if (*r == kMean) ops += 1;
  }
  return CountFor(call, ArithmeticOf(call), ops);
}

FormulaResult MultiMarginLossBackward(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 1);
  if (!self || !DenseArg(call, 2) || !AllDense(call)) return NotDense(call);
  const std::optional<Frames> fr = ReadFrames(*self);
  const std::optional<int> p = MarginPower(call, 3);
  if (!fr || !p) return ShapeMismatch(call, "needs a self of at most 2 dimensions and p = 1 or 2");
  if (self->numel() == 0) return CountFor(call, ArithmeticOf(call), 0);
  const int per_term = 2 + (*p == 2 ? 1 : 0) + (Present(call, 5) ? 1 : 0);
  const Count frame = Count(3) * fr->d + Count(fr->d - 1) * per_term;
  return CountFor(call, ArithmeticOf(call), Count(fr->f) * frame);
}

FormulaResult MultilabelMarginLossForward(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 0);
  const TensorMeta* target = DenseArg(call, 1);
  if (!self || !target || !AllDense(call)) return NotDense(call);
  const std::optional<Frames> fr = ReadFrames(*self);
  const std::optional<int64_t> r = ReductionAt(call, 2);
  if (!fr) return BadShape(call);
  if (!r) return UnknownReduction(call);
  if (self->numel() == 0) return CountFor(call, ArithmeticOf(call), 0);  // returns early
  // Per pair 4 (is_target test, z, z > 0). Per frame (reduction none, 2-D
  // target): D^2 - 1 adds + 1 divide. Reduced: F (D^2 - 1) + (F - 1) adds +
  // 1 divide by D. Both are 5 F D^2; mean divides by F once more.
  const Count pairs = Count(fr->f) * fr->d * fr->d;
  Count ops = Count(5) * pairs;
  if (*r == kMean) ops += 1;
  return CountFor(call, ArithmeticOf(call), ops);
}

FormulaResult MultilabelMarginLossBackward(const OpCall& call) {
  const TensorMeta* self = DenseArg(call, 1);
  if (!self || !DenseArg(call, 2) || !AllDense(call)) return NotDense(call);
  const std::optional<Frames> fr = ReadFrames(*self);
  if (!fr) return BadShape(call);
  if (self->numel() == 0) return CountFor(call, ArithmeticOf(call), 0);
  const Count values = Count(fr->f) * fr->d;
  return CountFor(call, ArithmeticOf(call), Count(6) * values * fr->d + values);
}

}  // namespace torchscan::losses
