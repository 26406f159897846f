// Operator-view FLOPs of the convolution family, native convention.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
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
int64_t ConvFlops(absl::Span<const int64_t> x, absl::Span<const int64_t> w,
                  absl::Span<const int64_t> out, bool transposed);

// aten::convolution / _convolution / convolution_overrideable
//   (input, weight, bias, stride, padding, dilation, transposed, ...)
FormulaResult Convolution(const OpCall& call);
// aten::cudnn_convolution, aten::_slow_conv2d_forward: never transposed.
FormulaResult DirectConvolution(const OpCall& call);
// aten::convolution_backward(grad_out, input, weight, bias_sizes, stride,
//   padding, dilation, transposed, output_padding, groups, output_mask)
FormulaResult ConvolutionBackward(const OpCall& call);

}  // namespace torchscan::convolution
