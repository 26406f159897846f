// Fallback FLOPs of gather/scatter-style and distance operators. Pure copies
// (gather, index, scatter of values) are zero-cost rules in the registry;
// these are the ones that also compute.
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::indexing {

// scatter_add(self, dim, index, src): one add per element of `index` (src
// may be larger than index: only src[index positions] is read).
FormulaResult ScatterAdd(const OpCall& call);
// scatter_reduce(self, dim, index, src, reduce, include_self): one combine per
// index element ("sum"/"prod"/"amax"/"amin"), plus one divide per output for "mean".
FormulaResult ScatterReduce(const OpCall& call);
// scatter(self, dim, index, src|value, [reduce]): a copy, or one combine per
// index element when a reduce is given.
FormulaResult Scatter(const OpCall& call);
// Module view of the three: the pointwise accesses, except that `src` is read
// only where `index` points (I values, none for a scalar value): self +
// index + I + output elements.
ModuleCosts ScatterCosts(const OpCall& call);
// index_put(self, indices, values, accumulate): a copy, or one add per
// indexed position when accumulating: the broadcast shape of the index
// tensors times the dimensions no index consumes (`values` broadcasts to
// that; a one-element `values` is still added at every position). Boolean
// masks select a value-dependent count: unavailable.
FormulaResult IndexPut(const OpCall& call);
// Module view: the index tensors' elements and one value per indexed
// position P are read, plus P elements of self when accumulating, and P
// positions are written: a KV-cache update moves its new rows, not the cache.
// The functional overload first copies self into its output (self + output
// elements). Boolean masks: unavailable, as for the FLOPs.
ModuleCosts IndexPutCosts(const OpCall& call);
// index_copy(self, dim, index, source): a copy (zero FLOPs). Module view:
// it reads the index and the source and writes the source's values into
// self: I + 2S accesses (not the whole of self: a KV-cache update writes
// only its new rows).
FormulaResult IndexCopy(const OpCall& call);
ModuleCosts IndexCopyCosts(const OpCall& call);
// isin(elements (N), test_elements (M)): PyTorch compares every pair when
// M < 10 * N^0.145 (N*M comparisons, counted whatever the data, as for both
// branches of a selection); larger test sets take a sorting path, which has
// no convention (unavailable, like aten::sort). Scalar operands count as one.
FormulaResult Isin(const OpCall& call);
// _euclidean_dist(x1 (..., P, M), x2 (..., R, M)), cdist's p = 2 path for
// more than 25 rows, as its kernel computes it: row norms of x1 and x2 (M
// squares + M - 1 adds per row), x1 * -2 (M per row), then (M+2)-term dots
// per output (2(M+2), native convention), clamp_min and sqrt (1 each):
// rows1 (3M - 1) + rows2 (2M - 1) + out (2M + 6).
FormulaResult EuclideanDist(const OpCall& call);
// Module view: the dots as K multiplies + K - 1 adds (one fewer FLOP per
// output); MACs out (M+2) + (rows1 + rows2) M; staged accesses of each step:
// norms N1 + N2 + rows, ones columns rows, x1 * -2 2N1, concatenations
// N1 + N2 + 2 rows + rows (M+2), dots rows (M+2) + out, clamp and sqrt 4 out.
ModuleCosts EuclideanDistCosts(const OpCall& call);
// index_add(self, dim, index, source, alpha): one add per source value, plus
// the alpha multiply when alpha != 1. index_reduce(..., reduce,
// include_self): one combine per source value, plus one divide per output
// value for "mean".
FormulaResult IndexAdd(const OpCall& call);
FormulaResult IndexReduce(const OpCall& call);
// affine_grid_generator(theta, size, align_corners): each output coordinate
// is a K-term dot of theta's row with (x, y[, z], 1), K = 3 (2-D) or 4
// (3-D): 2K per output value (the native 2K convention), plus the base
// grid's linspace per spatial size s (2s + 2).
FormulaResult AffineGridGenerator(const OpCall& call);
// grid_sampler_2d: K taps blended per output value (bilinear 4, nearest 1,
// bicubic 16), as weighted interpolation: MACs K N (none for nearest, a
// copy), DMAs K reads + 1 write per output value plus the grid read once.
ModuleCosts GridSampler2dCosts(const OpCall& call);
// _embedding_bag / _embedding_bag_forward_only: the operator view's FLOPs;
// MACs: one per weighted lookup value (per_sample_weights), else none; DMAs:
// the ids and offsets read, one weight row per lookup, the output written.
ModuleCosts EmbeddingBagCosts(const OpCall& call);
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
