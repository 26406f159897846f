// Fallback (torchscan_flops_v1) FLOPs of pointwise operators: one operation
// per output value for scalar arithmetic, exp/sqrt/erf-like math, comparison
// and selection; the table's symbolic expansions for activations. Both FLOP
// views use these counts (PyTorch has no native formula for them).
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::elementwise {

// K operations per output element, real arithmetic only (the dtype rule of
// formulas/arithmetic.h applies; scalar operands take part in promotion).
template <int K>
FormulaResult PerOutput(const OpCall& call);

// add/sub/rsub(self, other, alpha): one op per output, plus the alpha
// multiply when alpha != 1.
FormulaResult AddSub(const OpCall& call);
// div(self, other, rounding_mode): a divide, plus the rounding when a mode is given.
FormulaResult Div(const OpCall& call);
// clamp(self, min, max): one comparison/selection per bound present.
FormulaResult Clamp(const OpCall& call);
// gelu(self, approximate): exact 5, tanh approximation 14 per element.
FormulaResult Gelu(const OpCall& call);
// addcmul/addcdiv(self, t1, t2, value): product/quotient and add (2N), plus the
// coefficient multiply when value != 1; tensor operands decide the dtype.
FormulaResult Addc(const OpCall& call);
// lerp(self, end, weight): self + weight * (end - self): 3 per element.
FormulaResult Lerp(const OpCall& call);
// rrelu_with_noise(self, noise, lower, upper, training): eval is a leaky ReLU
// (4 per element); training samples noise (RNG: unsupported).
FormulaResult RreluWithNoise(const OpCall& call);
// resolve_neg / resolve_conj(self): return self when it carries no
// negative (conjugate) bit, else a new tensor with every value negated
// (conjugated): 0, or one negation per value (complex conjugation follows
// the complex rule). What the call returned tells which: its input, or not.
// Module view: nothing moved when it returned its input, else pointwise
// (N reads + N writes).
FormulaResult Resolve(const OpCall& call);
ModuleCosts ResolveCosts(const OpCall& call);

// K operations per value of the largest tensor operand, for calls whose
// result is not one value per element (equal, count_nonzero: a bool or a
// count); the dtype rule as PerOutput.
template <int K>
FormulaResult PerInput(const OpCall& call);
// logit(self, eps): log(x / (1 - x)) = 3 per value, + the clamp to [eps, 1 - eps] (2) when eps is given.
FormulaResult Logit(const OpCall& call);
// mvlgamma(self, p): sum_{j<p} lgamma(x - j/2) + constant: p shifts, p
// lgammas, p - 1 adds and the constant's add: 3p per value.
FormulaResult Mvlgamma(const OpCall& call);
// allclose(a, b): isclose per value (a == b, |a - b|, |b|, rtol*|b|, + atol,
// <=, or: 7) and all() over them (n - 1): 8n - 1.
FormulaResult Allclose(const OpCall& call);
// dist(a, b, p): per value a difference, an absolute value and a power (3),
// n - 1 adds, one root: 4n.
FormulaResult Dist(const OpCall& call);
// trace(self): the min(m, n) diagonal values summed: min(m, n) - 1 adds.
FormulaResult Trace(const OpCall& call);
// bincount(self, weights): integer counting (zero) without weights; with
// floating weights one add per value.
FormulaResult Bincount(const OpCall& call);
// logcumsumexp(self, dim): a log-add-exp per step of the running sum
// (max, a - b, |.|, negate, exp, log1p, add: 7), n - 1 steps per slice.
FormulaResult LogCumsumExp(const OpCall& call);

// renorm(self, p, dim, maxnorm): per sub-tensor along dim (m values) its
// p-norm (p = 1 or inf: m - 1 adds/comparisons after m absolute values, 2m - 1;
// p = 2: m squares, m - 1 adds, a root, 2m), the factor where(norm >
// maxnorm, maxnorm / (norm + 1e-7), 1) (4) and m multiplies. Other orders:
// unavailable, as for vector norms.
FormulaResult Renorm(const OpCall& call);
// segment_reduce(data, reduce, ...): the CPU kernel starts each segment from
// the initial value (or the reduction's identity) and combines every value
// into it: n combines; max/min also test each value for NaN (2n); mean
// divides each output value by its length (+ r; an empty segment's divide,
// which the kernel skips, is counted too).
FormulaResult SegmentReduce(const OpCall& call);

}  // namespace torchscan::elementwise
