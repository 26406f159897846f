// Fallback FLOPs of reductions and scans (torchscan_flops_v1 "Broadcast/
// reduction", "Cumulative sums", "Norm orders").
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::reduction {

// N input values folded into R outputs take max(N - R, 0) binary operations
// (adds for sum, comparisons for max/min, multiplies for prod).
FormulaResult Fold(const OpCall& call);
// max/min: a full or per-dim reduction folds (N - R); the binary overload
// (self, other) is one comparison per output.
FormulaResult MaxMin(const OpCall& call);
// sum(self, ..., dtype): Fold with the reduction dtype (dtype > out > input).
FormulaResult Sum(const OpCall& call);
// mean: the sum plus one divide per output.
FormulaResult Mean(const OpCall& call);
// cumsum/cumprod(self, dim, dtype): N minus the number of rows along dim.
FormulaResult Cumulative(const OpCall& call);
// linalg_vector_norm(self, ord, dim, keepdim, dtype) and norm(self, p, dim, ...):
// ord 1: N abs + (N - R) adds; ord 2: N squares + (N - R) adds + R square roots;
// ord +-inf: N abs + (N - R) comparisons; other orders are partial.
FormulaResult VectorNorm(const OpCall& call);

// var/std(self, dim, correction, keepdim) and var_mean/std_mean: mean N
// (N - R adds, R divides), variance 3N (subtract, square, sum N - R plus R
// divides) as in LayerNorm's rows -> 4N; std adds R square roots.
FormulaResult Variance(const OpCall& call);
FormulaResult StandardDeviation(const OpCall& call);

// aminmax(self, dim, keepdim) -> (min, max): two folds, 2 max(N - R, 0).
FormulaResult Aminmax(const OpCall& call);
// logsumexp(self, dim, keepdim), stable as PyTorch computes it: max (N - R
// comparisons), subtract the max N, exp N, sum N - R, log R, add the max
// back R: 2(N - R) + 2N + 2R (= 4N; the -inf guard on the max is not
// counted, as for the stable softmax rows).
FormulaResult Logsumexp(const OpCall& call);
// col2im(self (B, C*kh*kw, L), output_size, kernel_size, dilation, padding,
// stride) (F.fold, and F.unfold's backward): sums overlapping windows into
// (B, C, H, W). Sum rule over what lands inside the output: per plane,
// values landing inside minus output positions receiving any. Each axis is
// separable: landed = Lh * Lw, covered = Ch * Cw, with Lx/Cx counted over
// the axis' block positions and kernel offsets (padding values drop out).
FormulaResult Col2im(const OpCall& call);

}  // namespace torchscan::reduction
