#include "formulas/matmul.h"

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::matmul {
namespace {

// (m x k) @ (k x n) read from arguments ia, ib.
FormulaResult Matrix(const OpCall& call, size_t ia, size_t ib) {
  const TensorMeta* a = TensorArg(call, ia, 2);
  const TensorMeta* b = TensorArg(call, ib, 2);
  if (!a || !b) return ShapeMismatch(call, "expected two 2-D tensors");
  if (a->size(1) != b->size(0)) return ShapeMismatch(call, "inner dimensions differ");
  return FormulaResult::Complete(MmFlops(a->size(0), a->size(1), b->size(1)));
}

// (B x m x k) @ (B x k x n): B independent matrix products.
FormulaResult Batched(const OpCall& call, size_t ia, size_t ib) {
  const TensorMeta* a = TensorArg(call, ia, 3);
  const TensorMeta* b = TensorArg(call, ib, 3);
  if (!a || !b) return ShapeMismatch(call, "expected two 3-D tensors");
  if (a->size(0) != b->size(0) || a->size(2) != b->size(1)) {
    return ShapeMismatch(call, "batch or inner dimensions differ");
  }
  return FormulaResult::Complete(a->size(0) * MmFlops(a->size(1), a->size(2), b->size(2)));
}

}  // namespace

FormulaResult Mm(const OpCall& call) { return Matrix(call, 0, 1); }
FormulaResult Addmm(const OpCall& call) { return Matrix(call, 1, 2); }     // bias omitted
FormulaResult ScaledMm(const OpCall& call) { return Matrix(call, 0, 1); }  // scales omitted
FormulaResult IntMm(const OpCall& call) { return Matrix(call, 0, 1); }     // integers count
FormulaResult Bmm(const OpCall& call) { return Batched(call, 0, 1); }
FormulaResult Baddbmm(const OpCall& call) { return Batched(call, 1, 2); }
// addbmm sums the B products into one matrix: the B*m*n dots are the work;
// the reduction over the batch is the accumulation the 2K convention already
// charges (one K-term dot of length B*k per output).
FormulaResult Addbmm(const OpCall& call) { return Batched(call, 1, 2); }

FormulaResult AddmmActivation(const OpCall& call) {
  const FormulaResult mm = Matrix(call, 1, 2);
  if (mm.status != MetricStatus::kComplete) return mm;
  const TensorMeta* a = TensorArg(call, 1, 2);
  const TensorMeta* b = TensorArg(call, 2, 2);
  const ArgMeta& gelu = call.arg(5);
  const int64_t per = gelu.kind == ArgKind::kBool && gelu.to_bool() ? 5 : 1;
  return FormulaResult::Complete(mm.value + Count(per) * a->size(0) * b->size(1));
}

FormulaResult GroupedMm(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 0);
  const ArgMeta& out = call.output(0);
  if (!a || !out.is_tensor() || out.tensor().nested || out.tensor().dim() < 1) {
    return ShapeMismatch(call, "expected dense operands and output");
  }
  return FormulaResult::Complete(Count(2) * a->numel() * out.tensor().size(-1));
}

// One dot of K terms: 2K.
FormulaResult Dot(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 0, 1);
  const TensorMeta* b = TensorArg(call, 1, 1);
  if (!a || !b || a->size(0) != b->size(0)) return ShapeMismatch(call, "expected two equal 1-D tensors");
  return FormulaResult::Complete(Count(2) * a->size(0));
}

// (m x k) @ (k): m dots of k terms.
static FormulaResult MatVec(const OpCall& call, size_t im, size_t iv) {
  const TensorMeta* m = TensorArg(call, im, 2);
  const TensorMeta* v = TensorArg(call, iv, 1);
  if (!m || !v || m->size(1) != v->size(0)) return ShapeMismatch(call, "expected (m x k) and (k)");
  return FormulaResult::Complete(MmFlops(m->size(0), m->size(1), 1));
}
FormulaResult Mv(const OpCall& call) { return MatVec(call, 0, 1); }
FormulaResult Addmv(const OpCall& call) { return MatVec(call, 1, 2); }

// Outer product (m) x (n): m*n one-term dots, 2 each (the K=1 case of 2K).
FormulaResult Addr(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 1, 1);
  const TensorMeta* b = TensorArg(call, 2, 1);
  if (!a || !b) return ShapeMismatch(call, "expected two 1-D tensors");
  return FormulaResult::Complete(MmFlops(a->size(0), 1, b->size(0)));
}

}  // namespace torchscan::matmul

namespace torchscan::matmul {
namespace {

// K-term dots: K multiplies + K-1 adds (none when K = 0).
Count ModuleDots(const Count& dots, int64_t k) { return dots * (k > 0 ? Count(2) * k - 1 : Count(0)); }

ModuleCosts Products(const OpCall& call, const Count& dots, int64_t k, const TensorMeta* bias, int64_t parameters) {
  if (ArithmeticOf(call) == Arithmetic::kComplex) {
    return ModuleCosts::Unavailable(CountFor(call, Arithmetic::kComplex, 0));
  }
  Count reads = parameters;
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor()) reads += a.tensor().numel();
  }
  const Count bias_adds = bias ? dots : Count(0);
  return {FormulaResult::Complete(ModuleDots(dots, k) + bias_adds), FormulaResult::Complete(dots * k),
          FormulaResult::Complete(reads + dots)};
}

ModuleCosts BadShapes(const OpCall& call, const char* what) {
  return ModuleCosts::Unavailable(ShapeMismatch(call, what));
}

}  // namespace

ModuleCosts LinearCosts(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const TensorMeta* w = TensorArg(call, 1, 2);
  const TensorMeta* b = DenseArg(call, 2);
  if (!x || !w || x->dim() < 1 || x->size(-1) != w->size(1)) return BadShapes(call, "expected (..., in) and (out, in)");
  const int64_t in = w->size(1), out = w->size(0);
  const Count rows = in > 0 ? Count(x->numel() / in) : Product(Dims(x->sizes()).subspan(0, x->dim() - 1));
  return Products(call, rows * out, in, b, 0);
}

ModuleCosts MmCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 0, 2);
  const TensorMeta* b = TensorArg(call, 1, 2);
  if (!a || !b || a->size(1) != b->size(0)) return BadShapes(call, "expected (m x k)(k x n)");
  return Products(call, Count(a->size(0)) * b->size(1), a->size(1), nullptr, 0);
}

ModuleCosts AddmmCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 1, 2);
  const TensorMeta* b = TensorArg(call, 2, 2);
  if (!a || !b || a->size(1) != b->size(0)) return BadShapes(call, "expected (m x k)(k x n)");
  return Products(call, Count(a->size(0)) * b->size(1), a->size(1), DenseArg(call, 0), 0);
}

ModuleCosts BmmCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 0, 3);
  const TensorMeta* b = TensorArg(call, 1, 3);
  if (!a || !b || a->size(0) != b->size(0) || a->size(2) != b->size(1))
    return BadShapes(call, "expected (B x m x k)(B x k x n)");
  return Products(call, Count(a->size(0)) * a->size(1) * b->size(2), a->size(2), nullptr, 0);
}

ModuleCosts BaddbmmCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 1, 3);
  const TensorMeta* b = TensorArg(call, 2, 3);
  if (!a || !b || a->size(0) != b->size(0) || a->size(2) != b->size(1))
    return BadShapes(call, "expected (B x m x k)(B x k x n)");
  return Products(call, Count(a->size(0)) * a->size(1) * b->size(2), a->size(2), DenseArg(call, 0), 0);
}

ModuleCosts DotCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 0, 1);
  const TensorMeta* b = TensorArg(call, 1, 1);
  if (!a || !b || a->size(0) != b->size(0)) return BadShapes(call, "expected two equal 1-D tensors");
  return Products(call, 1, a->size(0), nullptr, 0);
}

ModuleCosts MvCosts(const OpCall& call) {
  const TensorMeta* m = TensorArg(call, 0, 2);
  const TensorMeta* v = TensorArg(call, 1, 1);
  if (!m || !v || m->size(1) != v->size(0)) return BadShapes(call, "expected (m x k) and (k)");
  return Products(call, m->size(0), m->size(1), nullptr, 0);
}

ModuleCosts AddmvCosts(const OpCall& call) {
  const TensorMeta* m = TensorArg(call, 1, 2);
  const TensorMeta* v = TensorArg(call, 2, 1);
  if (!m || !v || m->size(1) != v->size(0)) return BadShapes(call, "expected (m x k) and (k)");
  return Products(call, m->size(0), m->size(1), DenseArg(call, 0), 0);
}

ModuleCosts AddrCosts(const OpCall& call) {
  const TensorMeta* a = TensorArg(call, 1, 1);
  const TensorMeta* b = TensorArg(call, 2, 1);
  if (!a || !b) return BadShapes(call, "expected two 1-D tensors");
  return Products(call, Count(a->size(0)) * b->size(0), 1, DenseArg(call, 0), 0);
}

ModuleCosts GroupedMmCosts(const OpCall& call) {
  const FormulaResult flops = GroupedMm(call);
  if (flops.status != MetricStatus::kComplete) return ModuleCosts::Unavailable(flops);
  if (ArithmeticOf(call) == Arithmetic::kComplex)
    return ModuleCosts::Unavailable(CountFor(call, Arithmetic::kComplex, 0));
  const Count macs = flops.value / 2;
  const Count out = call.output(0).tensor().numel();
  Count reads = 0;
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor()) reads += a.tensor().numel();
  }
  const Count module_flops = macs > Count(0) && Count(2) * macs > out ? Count(2) * macs - out : Count(0);
  return {FormulaResult::Complete(module_flops), FormulaResult::Complete(macs), FormulaResult::Complete(reads + out)};
}

}  // namespace torchscan::matmul
