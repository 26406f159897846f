// torchscan_training_v1: FLOPs of the activation, softmax and dropout backward
// kernels. Each count is derived from the kernel's own per-element math (the
// CPU kernels of aten/src/ATen/native/cpu/Activation.cpp, BinaryOpsKernel.cpp,
// SoftMaxKernel.cpp and aten/src/ATen/native/{Activation,Dropout,SoftMax,
// GatedLinearUnit}.cpp), with the torchscan_flops_v1 unit costs: scalar
// arithmetic, exp/erf/log1p, comparison and selection one operation each,
// sigmoid 4 (negate, exp, add, divide) and tanh 6 where the kernel recomputes
// them; constant-only arithmetic (e.g. alpha * scale, 3 * kKappa) is excluded;
// a value the kernel computes once is counted once. Both branches of a
// selection are expanded, so counts do not depend on tensor values.
//
// N is the number of grad_input values (the kernel's iteration shape: the
// first output, which for the .grad_input/.out overloads is the destination).
// The tensor operands decide the dtype (ArithmeticOf): integer/boolean
// arithmetic counts zero, complex is unavailable. Sparse/nested operands are
// unavailable. The full table is formulas/TRAINING.md.
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::activation_backward {

// threshold_backward(grad, self, threshold): self <= threshold ? 0 : grad:
// comparison + selection -> 2N (ReLU's backward).
FormulaResult Threshold(const OpCall& call);
// gelu_backward(grad, self, approximate): "none" 11N, "tanh" 23N.
FormulaResult Gelu(const OpCall& call);
// silu_backward(grad, self): sigmoid 4 + 5 -> 9N.
FormulaResult Silu(const OpCall& call);
// sigmoid_backward(grad, y) = grad * (1 - y) * y; tanh_backward(grad, y) =
// grad * (1 - y * y): 3N each (the saved output is reused).
FormulaResult SigmoidTanh(const OpCall& call);
// hardtanh/hardshrink/softshrink backward: two comparisons + selection -> 3N.
FormulaResult RangeMask(const OpCall& call);
// leaky_relu_backward(grad, self, slope, self_is_result): self > 0 ? grad :
// grad * slope -> 3N.
FormulaResult LeakyRelu(const OpCall& call);
// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
// is_result 6N, otherwise 8N (recomputes the exponential).
FormulaResult Elu(const OpCall& call);
// softplus_backward(grad, self, beta, threshold): 8N.
FormulaResult Softplus(const OpCall& call);
// mish_backward(grad, self): sigmoid 4 + exp, log1p, tanh 6 + 6 -> 18N.
FormulaResult Mish(const OpCall& call);
// hardswish_backward(grad, self): 2 comparisons, 3 arithmetic, 2 selections -> 7N.
FormulaResult Hardswish(const OpCall& call);
// hardsigmoid_backward(grad, self): 2 comparisons, multiply, selection -> 4N.
FormulaResult Hardsigmoid(const OpCall& call);
// log_sigmoid_backward(grad, self, buffer): 8N.
FormulaResult LogSigmoid(const OpCall& call);
// logit_backward(grad, self, eps): 2 comparisons, 3 arithmetic, selection -> 6N.
FormulaResult Logit(const OpCall& call);
// _prelu_kernel_backward(grad, self, weight) -> (grad_input, grad_weight):
// one comparison shared by both outputs, a multiply and a selection each -> 5N.
FormulaResult Prelu(const OpCall& call);
// rrelu_with_noise_backward(grad, self, noise, lower, upper, training,
// self_is_result): training grad * noise -> N; eval leaky_relu_backward -> 3N.
FormulaResult RreluWithNoise(const OpCall& call);
// glu_backward(grad, self, dim): H = grad elements (half of self's):
// sigmoid 4H, grad multiply H, (1 - s) * s * a * grad 4H -> 9H.
FormulaResult Glu(const OpCall& call);
// native_dropout_backward(grad, mask, scale) = grad * mask * scale -> 2N.
FormulaResult NativeDropout(const OpCall& call);
// _softmax_backward_data(grad, y, dim, input_dtype): per row sum(grad * y)
// (N multiplies, N - R adds), then y * (grad - sum) (N subtracts, N
// multiplies) -> 4N - R. R = rows along dim.
FormulaResult SoftmaxData(const OpCall& call);
// _log_softmax_backward_data(grad, y, dim, input_dtype): per row sum(grad)
// (N - R adds), then grad - exp(y) * sum (N exp, N multiplies, N subtracts)
// -> 4N - R.
FormulaResult LogSoftmaxData(const OpCall& call);
// _masked_softmax_backward(grad, y, mask, dim): softmax backward plus one mask
// selection per element in each of its two passes -> 6N - R.
FormulaResult MaskedSoftmax(const OpCall& call);

}  // namespace torchscan::activation_backward
