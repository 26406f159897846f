// Fallback FLOPs of pooling (torchscan_flops_v1 "Fixed pooling", "Adaptive
// pooling").
#pragma once

#include <cstdint>

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::pooling {

// Values visited along one axis by adaptive pooling from L to O positions:
// window i spans [floor(iL/O), ceil((i+1)L/O)), and the windows' lengths sum
// to L + O - gcd(L, O).
Count AdaptiveAxisVisits(int64_t in, int64_t out);

// Values per fixed pooling window: the product of the kernel sizes over
// `spatial` axes (a single kernel size applies to every axis). False when the
// argument is not a non-empty int list with one size or at least `spatial`.
bool KernelVolume(const ArgMeta& kernel, int64_t spatial, Count& k);
// Spatial axes of a pooling or upsampling operator, from its name
// ("avg_pool3d_backward" -> 3, "upsample_bilinear2d" -> 2): an unbatched
// input has one axis fewer than a batched one, so no tensor's rank tells.
int64_t SpatialRank(const OpCall& call);

// max_pool*_with_indices / max_pool*(self, kernel_size, ...): K - 1
// comparisons per output for K values per window (nominal padded/ceil windows).
FormulaResult MaxPool(const OpCall& call);
// avg_pool*(self, kernel_size, ...): K - 1 adds and one divide -> K per output.
FormulaResult AvgPool(const OpCall& call);
// adaptive_avg_pool*(self, output_size): all visited values summed (V - O adds)
// plus one divide per window (O) -> V, V = batch*channels*prod(axis visits).
FormulaResult AdaptiveAvgPool(const OpCall& call);
// adaptive_max_pool*(self, output_size): V - O comparisons.
FormulaResult AdaptiveMaxPool(const OpCall& call);

// Module view (TorchScan's pooling conventions; rank = spatial dimensions):
//   max:          FLOPs N_out(K-1), MACs N_out(K-1), DMAs N_out(K + 1 + indices)
//   average:      FLOPs N_out K,    MACs N_out(K-1+rank), DMAs N_out(K + 1)
//   adaptive max: FLOPs V - N_out,  MACs V - N_out, DMAs V + N_out(1 + indices)
//   adaptive avg: FLOPs V,          MACs V + N_out(rank-1), DMAs V + N_out
ModuleCosts MaxPoolCosts(const OpCall& call);
ModuleCosts AvgPoolCosts(const OpCall& call);
ModuleCosts AdaptiveMaxPoolCosts(const OpCall& call);
ModuleCosts AdaptiveAvgPoolCosts(const OpCall& call);

}  // namespace torchscan::pooling
