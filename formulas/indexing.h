// Fallback FLOPs of gather/scatter-style and distance operators. Pure copies
// (gather, index, scatter of values) are zero-cost rules in the registry;
// these are the ones that also compute.
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::indexing {

// scatter_add(self, dim, index, src): one add per source value.
FormulaResult ScatterAdd(const OpCall& call);
// scatter_reduce(self, dim, index, src, reduce, include_self): one combine per
// source value ("sum"/"prod"/"amax"/"amin"), plus one divide per output for "mean".
FormulaResult ScatterReduce(const OpCall& call);
// scatter(self, dim, index, src|value, [reduce]): a copy, or one combine per
// source value when a reduce is given.
FormulaResult Scatter(const OpCall& call);
// index_put(self, indices, values, accumulate): a copy, or one add per value
// when accumulating.
FormulaResult IndexPut(const OpCall& call);
// masked_scatter(self, mask, source): one selection per output value.
FormulaResult MaskedScatter(const OpCall& call);
// nonzero(self): one comparison per input value.
FormulaResult Nonzero(const OpCall& call);
// _cdist_forward(x1 (B,P,M), x2 (B,R,M), p): per pair M subtractions, M
// abs/squares, M - 1 adds (max for p = inf), plus a square root for p = 2:
// 3M - 1 (p = 1, inf) or 3M (p = 2) per output; other p are unsupported.
FormulaResult Cdist(const OpCall& call);
// _pdist_forward(x (N,M), p): the same per-pair count over N(N-1)/2 pairs.
FormulaResult Pdist(const OpCall& call);
// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights, include_last_offset, padding_idx): lookups are free;
// bags combine their rows: sum (I - bags) x D adds, mean adds bags x D
// divides, max (I - bags) x D comparisons; per-sample weights I x D multiplies.
FormulaResult EmbeddingBag(const OpCall& call);
// grid_sampler_2d(input, grid, mode, padding_mode, align_corners): bilinear
// blends 4 neighbours (7 per output), nearest copies (0), bicubic 16 (31);
// coordinate computation is excluded, as for interpolation.
FormulaResult GridSampler2d(const OpCall& call);

}  // namespace torchscan::indexing
