// Fallback FLOPs of normalization kernels (torchscan_flops_v1 "LayerNorm/
// GroupNorm", "Rows", "BatchNorm", "RMSNorm", "Weight normalization").
// N = elements, R = normalized rows, C = channels, A = affine tensors present.
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::normalization {

// native_layer_norm(input, normalized_shape, weight, bias, eps):
// mean N, variance 3N, normalize 2N, eps/sqrt 2R, affine AN -> 6N + 2R + AN,
// R = N / prod(normalized_shape). Empty rows are unsupported.
FormulaResult LayerNorm(const OpCall& call);
// native_group_norm(input, weight, bias, N, C, HxW, group, eps): the same
// count with R = batch x groups.
FormulaResult GroupNorm(const OpCall& call);
// native_batch_norm / _native_batch_norm_legit(_no_training)(input, weight,
// bias, running_mean, running_var, training, momentum, eps):
// saved statistics 2N + 2C + AN; batch statistics add 4N; passed running
// mean / variance updates add 3C / 5C. Empty calls are unsupported.
FormulaResult BatchNorm(const OpCall& call);
// rms_norm(input, normalized_shape, weight, eps): square N, mean N,
// normalize N, eps/rsqrt 2R, affine WN -> (3 + W)N + 2R.
FormulaResult RmsNorm(const OpCall& call);
// _weight_norm_interface(v, g, dim) / _weight_norm: L2 norms 2N, scale/norm R,
// weight scaling N -> 3N + R, R = scales (g's elements); rows must be nonempty.
FormulaResult WeightNorm(const OpCall& call);

// Module view. MACs are N(1 + W) (square-sum terms plus the weight products)
// for LayerNorm/GroupNorm/RMSNorm; DMAs use TorchScan's staged convention:
//   LayerNorm / GroupNorm: 4N + 5R + 1 + P + 2N when an affine tensor is present
//   RMSNorm: 3N + 4R + 1 + P + 2N when a weight is present (0 for empty inputs)
// BatchNorm: FLOPs as above; MACs N(1 + affine) plus, when updating running
// statistics in training, C(M - 1) + C(2M - 1) + 4C with M = N / C; DMAs
// N_in + N_out + 1 (eps) + 2C (running stats read) + 2C (affine) + 1 (momentum)
// + 2C (statistics written, training with running stats; the batch counter's
// increment is a separate aten::add_ call with its own accesses).
ModuleCosts BatchNormCosts(const OpCall& call);
ModuleCosts LayerNormCosts(const OpCall& call);
ModuleCosts GroupNormCosts(const OpCall& call);
ModuleCosts RmsNormCosts(const OpCall& call);
// Weight normalization: FLOPs only; the convention defines no MACs/DMAs for it.
ModuleCosts WeightNormCosts(const OpCall& call);

}  // namespace torchscan::normalization
