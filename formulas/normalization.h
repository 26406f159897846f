// Fallback FLOPs of normalization kernels (torchscan_flops_v1 "LayerNorm/
// GroupNorm", "Rows", "BatchNorm", "RMSNorm", "Weight normalization").
// N = elements, R = normalized rows, C = channels, A = affine tensors present.
#pragma once

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

}  // namespace torchscan::normalization
