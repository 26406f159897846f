// torchscan_selection_v1 (formulas/CONVENTIONS.md): comparisons of sorting,
// selection, uniqueness, binary-search and histogram kernels, each row a
// stated assumption about the algorithm (the count of a comparison sort
// depends on the data; the rows fix one). Comparisons follow the dtype rule
// of torchscan_flops_v1: real values are counted, integer and boolean ones
// are integer arithmetic (zero, complete), complex ones are unavailable.
// Both views use these counts (module view: no MACs, operands read once,
// results written once).
#pragma once

#include <cstdint>

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::selection {

// ceil(log2 n) for n >= 1 (0 for n <= 1).
int64_t CeilLog2(int64_t n);

// sort / argsort / msort: a comparison sort of each slice of n values,
// n * ceil(log2 n) comparisons.
FormulaResult Sort(const OpCall& call);
// topk(self, k, dim): a heap of k over each slice, n * ceil(log2 k); k = 1 is
// a running maximum, n - 1; k = 0 compares nothing.
FormulaResult Topk(const OpCall& call);
// kthvalue / median / nanmedian: a halving quickselect, n + n/2 + ... <
// 2n: 2(n - 1) per slice; nanmedian adds one NaN test per value.
FormulaResult Kthvalue(const OpCall& call);
FormulaResult Median(const OpCall& call);
// mode(self, dim): sort each slice, then compare neighbours: n*ceil(log2 n) + (n - 1).
FormulaResult Mode(const OpCall& call);
// _unique2 / _unique over all n values: sort, then compare neighbours.
FormulaResult Unique(const OpCall& call);
// unique_consecutive(self, ..., dim): neighbours only; with a dim, rows of d
// values compare all d: (r - 1) * d.
FormulaResult UniqueConsecutive(const OpCall& call);
// unique_dim / unique_dim_consecutive: r rows of d values sorted
// lexicographically, each row comparison comparing all d values:
// (r * ceil(log2 r) + (r - 1)) * d; consecutive: (r - 1) * d.
FormulaResult UniqueDim(const OpCall& call);
// searchsorted(sorted_sequence, values) / bucketize(values, boundaries):
// a binary search over n boundaries per query, ceil(log2(n + 1)).
FormulaResult Searchsorted(const OpCall& call);
FormulaResult Bucketize(const OpCall& call);
// histc(self, bins, min, max), PyTorch's LINEAR_INTERPOLATION histogram
// kernel: per value 2 range tests, (x - lo) * bins / (hi - lo) (3) and 1
// count add = 6; the bins + 1 edges (linspace: 2 per edge + 2 for the
// step); when min == max the range is the data's (aminmax: 2(n - 1)).
FormulaResult Histc(const OpCall& call);

}  // namespace torchscan::selection
