// torchscan_training_v1: FLOPs of the normalization backward kernels.
//
// Each count is the arithmetic of the kernel's own formulation, read from the
// CPU kernels aten/src/ATen/native/cpu/{layer_norm_kernel,group_norm_kernel,
// batch_norm_kernel,WeightNormKernel}.cpp and their wrappers in
// aten/src/ATen/native/{layer_norm,group_norm,Normalization,WeightNorm}.cpp.
// _fused_rms_norm_backward has no CPU kernel in torch 2.13; its count is read
// from aten/src/ATen/native/cuda/layer_norm_kernel.cu (compute_gI and the
// gamma kernels instantiated with rms_norm = true). The backward formulas
// themselves are those of tools/autograd/derivatives.yaml.
//
// Rules every row here follows (torchscan_flops_v1 unit costs):
//  - scalar arithmetic, sqrt and comparison cost one operation each;
//  - a sum of K terms costs K - 1 adds (the "Broadcast/reduction" row): a
//    per-row sum over R rows of D values costs N - R, a per-column sum N - D;
//  - an output the mask does not ask for is not counted; a shared
//    intermediate (a row or channel sum) is counted once when at least one
//    requested output uses it, and not at all otherwise, whatever the CPU
//    kernel does with it (the batch-norm kernel always fuses both channel
//    sums, the group-norm kernel always computes ds and db);
//  - a multiply by the implicit weight 1 of a call without a weight is not
//    counted (W = 1 when a weight tensor is passed, else 0);
//  - constant-only arithmetic (1 / D, 1 / (D * HxW)) is excluded.
//
// Tensor operands decide the dtype (ArithmeticOf): integer arithmetic counts
// zero, complex is unavailable. Sparse/nested operands are unavailable. The
// table with the decomposition comparisons is formulas/TRAINING.md.
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::normalization_backward {

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
// weight?, bias?, output_mask[3]) -> (grad_input, grad_weight, grad_bias).
// D = prod(normalized_shape), R = N / D rows, kernel layer_norm_backward_frame:
//   grad_input: row sums ds = sum(dy*w*x), db = sum(dy*w): (1 + 2W)N
//     multiplies + 2(N - R) adds; per row b = (db*mean - ds)*a*a*a*(1/D) (6)
//     and c = -b*mean - db*a*(1/D) (5): 11R; dx = a*dy*w + b*x + c: (4 + W)N
//     -> (7 + 3W)N + 9R;
//   grad_weight: per row b' = -a*mean (2R); dy*(a*x + b') (3N); column sums
//     over the R rows (N - D) -> 4N - D + 2R;
//   grad_bias: column sums of dy -> N - D.
// Zero rows count zero; empty rows (D = 0) are unsupported.
FormulaResult LayerNorm(const OpCall& call);

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW,
// group, output_mask[3]). B batch, G groups, P = B*C planes of HxW values,
// R = B*G rows, N = B*C*HxW elements. Kernel GroupNormBackwardKernelImplInternal:
//   ds[b,c] = sum(dy*x) over HxW: N multiplies + (N - P) adds (needed by
//     grad_input and grad_weight); db[b,c] = sum(dy): N - P (all outputs);
//   grad_input: per row sums of ds*w and db*w over the C/G channels: 2W*P
//     multiplies + 2(P - R) adds; c2 (6) and c3 (5) per row: 11R; c1 =
//     rstd*w per plane: W*P; dx = c1*dy + c2*x + c3: 4N -> 4N + (2 + 3W)P + 9R;
//   grad_weight: (ds - db*mean)*rstd per plane 3P, batch sums P - C -> 4P - C;
//   grad_bias: batch sums of db -> P - C.
// Zero batches count zero; groups without values are unsupported.
FormulaResult GroupNorm(const OpCall& call);

// native_batch_norm_backward(grad_out, input, weight?, running_mean?,
// running_var?, save_mean?, save_invstd?, train, eps, output_mask[3]) and
// batch_norm_backward (the same operands plus reserve; its `update` flag is
// the kernel's `train`). N elements, C = input.size(1), M = N / C per
// channel. Kernel batch_norm_cpu_backward_contiguous_impl:
//   eval only: invstd = 1/sqrt(running_var + eps): 2C, the eps add and the
//     reciprocal square root as in the forward rows' "eps/sqrt 2R"
//     (grad_input, grad_weight);
//   sum = sum(dy) per channel: N - C (grad_bias; grad_input in train);
//   dotp = sum((x - mean)*dy): 3N - C (grad_weight; grad_input in train);
//   grad_input, train: k = dotp*invstd*invstd/M and grad_mean = sum/M (4C);
//     dx = (dy - grad_mean - (x - mean)*k)*invstd*w: (5 + W)N;
//   grad_input, eval: dy*invstd*w: (1 + W)N;
//   grad_weight: dotp*invstd: C; grad_bias: the sum itself.
// Train, weight, every output: 10N + 3C; eval: 6N + C. Empty inputs are
// unsupported (as for the forward row).
FormulaResult BatchNorm(const OpCall& call);

// cudnn_batch_norm_backward / miopen_batch_norm_backward(input, grad_output,
// weight, running_mean?, running_var?, save_mean?, save_var?, eps[, reserve]):
// always training statistics and every output (their torch._decomp entries
// call native_batch_norm_backward(train=True, [True, True, True])): the
// train count above, 10N + 3C with the weight they require.
FormulaResult CudnnBatchNorm(const OpCall& call);

// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?,
// output_mask[2]) -> (grad_input, grad_weight). D, R as for LayerNorm.
//   grad_input: s = sum(dy*w*x*rstd) per row: (2 + W)N multiplies + (N - R)
//     adds; term1 = (1/D)*rstd per row: R; dx = (D*w*dy - x*rstd*s)*term1:
//     (5 + W)N -> (8 + 2W)N;
//   grad_weight: column sums of dy*x*rstd -> 3N - D.
FormulaResult FusedRmsNorm(const OpCall& call);

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)
// -> (grad_v, grad_g), both always computed. N = v's elements, R = g's
// (one norm per slice). Kernel weight_norm_backward_{first,last}_dim_kernel:
// slice sums of grad_w*v: N + (N - R); grad_g = sum/norm, a = g/norm,
// b = a*grad_g/norm: 4R; grad_v = a*grad_w - b*v: 3N -> 5N + 3R.
FormulaResult WeightNorm(const OpCall& call);

}  // namespace torchscan::normalization_backward
