// torchscan_training_v1: backward kernels of pooling, interpolation,
// embeddings, distances and grid sampling (formulas/TRAINING.md).
//
// Shared rules of this family, from the CPU kernels (aten/src/ATen/native/...):
//  - A gradient kernel zero-fills its result, then accumulates into it with
//    `+=`. Every accumulation is one add, the first one into a zero included
//    (the kernel performs it; which input elements receive several is
//    data-dependent, the number of accumulations is not).
//  - Index arithmetic and integer tests (`maxindex != -1`, `id != padding_idx`,
//    bounds masks) are integer work: excluded, as in every fallback row.
//  - Weights and coordinates built from shapes or the grid alone are excluded,
//    as the forward interpolation rows exclude coordinate/weight construction.
//  - Where the kernel skips work for data-dependent reasons (ids equal to
//    padding_idx, empty bags, zero distances) the count is nominal: as if the
//    work were done, like the nominal padded windows of the pooling rows.
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::layer_backward {

// max_pool{2,3}d_with_indices_backward(grad_output, self, ..., indices) and
// adaptive_max_pool{2,3}d_backward(grad_output, self, indices): each output
// gradient is added once at its saved argmax (cpu_max_pool_backward,
// cpu_adaptive_max_pool_backward): N_out adds.
FormulaResult MaxPoolBackward(const OpCall& call);

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
// ceil_mode, count_include_pad, divisor_override): per output one divide
// (grad / divisor; count_include_pad and divisor_override change its value,
// not its count) and one add into each of the K window values (nominal
// padded/ceil window, as the forward row): (K + 1) N_out.
FormulaResult AvgPoolBackward(const OpCall& call);

// _adaptive_avg_pool{2,3}d_backward(grad_output, self): one divide per window
// (the forward row's convention) and one add per visited value: V + N_out,
// V = batch x channels x prod over spatial axes of (L + O - gcd(L, O)).
FormulaResult AdaptiveAvgPoolBackward(const OpCall& call);

// upsample_nearest{1,2,3}d_backward / _upsample_nearest_exact{1,2,3}d_backward
// (grad_output, output_size, input_size, scales...): each output gradient is
// added once into its source (cpu_upsample_nearest_backward): N_out adds.
FormulaResult NearestBackward(const OpCall& call);

// reflection_pad{1,2,3}d_backward / replication_pad{1,2,3}d_backward
// (grad_output, self, padding): grad_input is zero-filled and each output
// gradient is added once into the input position it was copied from
// (ReflectionPad.cpp, ReplicationPadding.cpp): N_out adds.
FormulaResult PadBackward(const OpCall& call);

// upsample_linear1d / bilinear2d / trilinear3d / bicubic2d _backward
// (grad_output, output_size, input_size, align_corners, scales...): each
// output gradient is scattered to its K = 2/4/8/16 neighbours, one multiply by
// the neighbour's weight and one add each: 2K N_out. Bicubic with equal input
// and output sizes copies (upsample_bicubic2d_backward_kernel): zero.
template <int K>
FormulaResult WeightedBackward(const OpCall& call);

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq): grad_weight[id] += scale * grad row, per lookup
// (embedding_dense_backward_cpu): L lookups x D values adds; with
// scale_grad_by_freq, scale = 1 / count (one divide per lookup) and D
// multiplies per lookup: L (2D + 1). padding_idx lookups counted nominally.
FormulaResult EmbeddingDenseBackward(const OpCall& call);

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights,
// padding_idx): sum/mean: one axpy of D per lookup, D adds, plus D multiplies
// when the scale is not the constant 1 (per-sample weights, frequency or mean),
// plus one divide per lookup for frequency and one for mean; max: one add per
// bag and value, B x D (empty bags counted nominally).
FormulaResult EmbeddingBagDenseBackward(const OpCall& call);
// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
// per_sample_weights, padding_idx): dense: the dense count above; sparse:
// the rows are gathered, divided by the bag size (mean: L x D) or multiplied
// by the per-sample weights (L x D), and returned as a sparse tensor.
FormulaResult EmbeddingBagBackward(const OpCall& call);
// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
// offset2bag, mode, padding_idx): one D-term dot per lookup, 2D each (the
// operator view's dot convention): 2 L D.
FormulaResult EmbeddingBagPerSampleWeightsBackward(const OpCall& call);

// _cdist_backward(grad, x1, x2, p, cdist) and _pdist_backward(grad, self, p,
// pdist): per pair and coordinate, the difference, the kernel's derivative
// expression (Dist<scalar_t>::*_calc::backward) and its accumulation into the
// gradient (cdist: x1 only; pdist: both rows). Orders 1, 2 and inf (as the
// forward rows); p = 0 computes nothing.
FormulaResult CdistBackward(const OpCall& call);
FormulaResult PdistBackward(const OpCall& call);

// grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode,
// padding_mode, align_corners, output_mask): with K = 4 (bilinear), 16
// (bicubic) or 1 (nearest) neighbours per output location p and channel c:
// input gradient (output_mask[0]) 2K per (p, c): weight multiply and add per
// neighbour (nearest: 1, the add); grid gradient (always computed by the CPU kernel; zero-filled for
// nearest) per (p, c) and axis K value x weight-derivative products, K - 1
// adds, one multiply by the output gradient and one add over channels, then
// one multiply per p and axis by the coordinate factor:
// bilinear/bicubic 2K mask0 N C HW + 2(2K + 1) N C HW + 2 N HW; nearest
// mask0 N C HW.
FormulaResult GridSampler2dBackward(const OpCall& call);

}  // namespace torchscan::layer_backward
