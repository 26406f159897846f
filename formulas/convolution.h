// Operator-view FLOPs of the convolution family, native convention.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::convolution {

// Multiply-adds of a dense convolution, 2 per product, bias omitted.
// Each position of `positions_shape[2:]` (the output for a direct conv, the
// input for a transposed one, whose products scatter from input positions)
// meets every weight element once per batch entry:
//   2 * N * prod(positions[2:]) * prod(weight)
// where prod(weight) = Cout * Cin/groups * prod(kernel) (direct) or
// Cin * Cout/groups * prod(kernel) (transposed); this is the grouped count.
Count ConvFlops(absl::Span<const int64_t> x, absl::Span<const int64_t> w, absl::Span<const int64_t> out,
                bool transposed);

// aten::convolution / _convolution / convolution_overrideable
//   (input, weight, bias, stride, padding, dilation, transposed, ...)
FormulaResult Convolution(const OpCall& call);
// aten::cudnn_convolution, aten::_slow_conv2d_forward: never transposed.
FormulaResult DirectConvolution(const OpCall& call);
// aten::convolution_backward(grad_out, input, weight, bias_sizes, stride,
//   padding, dilation, transposed, output_padding, groups, output_mask)
FormulaResult ConvolutionBackward(const OpCall& call);

// Module view of aten::convolution / _convolution.
// Direct: each output is a dot of T = Cin/groups x kernel_volume terms:
//   FLOPs N_out (2T - 1 + bias), MACs N_out T, DMAs N_out T (one read per tap)
//   + parameters + N_out.
// Transposed: products P = N_in x Cout/groups x kernel_volume scattered from
//   the inputs: FLOPs 2P + bias N_out, MACs P; DMAs as a direct convolution of
//   the same module plus TorchScan's legacy 5 accesses per spatial dimension
//   (stride, padding, dilation, output padding and kernel size reads).
ModuleCosts ConvolutionCosts(const OpCall& call);

}  // namespace torchscan::convolution
