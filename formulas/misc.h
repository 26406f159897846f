// Fallback FLOPs of dropout, embedding lookups, interpolation and the
// operators the table names as visible exclusions (random sampling).
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::misc {

// dropout/native_dropout/feature_dropout(input, p, train): eval or p = 0 cost
// nothing; training masks and rescales (2N), or only masks at p = 1 (N). The
// random mask itself is excluded (RNG is not arithmetic in this convention).
FormulaResult Dropout(const OpCall& call);
// embedding(weight, indices, ...): a lookup, zero FLOPs.
FormulaResult Embedding(const OpCall& call);
// embedding_renorm_ (max_norm): unsupported, reported, never zero.
FormulaResult EmbeddingRenorm(const OpCall& call);
// upsample_nearest*: copies values (zero FLOPs), integer inputs included.
FormulaResult Nearest(const OpCall& call);
// upsample_linear1d / bilinear2d / trilinear3d / bicubic2d: K = 2/4/8/16
// neighbours blended per output: (2K - 1) N; floating inputs only.
template <int K>
FormulaResult Weighted(const OpCall& call);
// rand/randn/bernoulli/normal/...: sampling has no count (partial, visible).
FormulaResult RandomSampling(const OpCall& call);

// Factories that compute their values (formulas/CONVENTIONS.md, "Factories"):
// linspace: step = (end - start) / (steps - 1) once (2), then start + step*i
// (or end - step*(steps-1-i)) per value (2): 2N + 2 for N > 1, 0 for N <= 1;
// computed in floating point whatever the result dtype (integer results
// take a double step). Complex results: the complex rule.
FormulaResult Linspace(const OpCall& call);
// logspace: base ** (linspace value): 3N + 2 for N > 1; one power for N = 1.
FormulaResult Logspace(const OpCall& call);
// arange / range: start + i*step per value (2N), in the result's dtype:
// integer results are integer arithmetic (zero).
FormulaResult Arange(const OpCall& call);
// Window functions, K per value: hann/hamming alpha - beta*cos(c*i) (the
// angle, cos, multiply, subtract: 4); bartlett 1 - |c*i - 1| (4); blackman
// 0.42 - 0.5 cos(c*i) + 0.08 cos(2c*i) (two angles, two cos, two multiplies,
// subtract, add: 8); kaiser I0(beta*sqrt(1 - (c*i - 1)^2)) / I0(beta) (8).
template <int K>
FormulaResult Window(const OpCall& call);

// Module view.
// Dropout: zero MACs; DMAs read the input and p, write the output: N + 1 + N.
ModuleCosts DropoutCosts(const OpCall& call);
// Embedding: zero FLOPs/MACs; per lookup read the id and a weight row, write
// an output row: N_ids + 2 N_out.
ModuleCosts EmbeddingCosts(const OpCall& call);
ModuleCosts EmbeddingRenormCosts(const OpCall& call);
// Nearest: a copy, 2 N_out accesses. Weighted (K neighbours): MACs K N,
// DMAs (K + 1) N.
ModuleCosts NearestCosts(const OpCall& call);
template <int K>
ModuleCosts WeightedCosts(const OpCall& call);

}  // namespace torchscan::misc
