#include "formulas/activation_backward.h"

#include <string>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::activation_backward {
namespace {

// K operations per grad_input value. Every tensor operand must be dense.
FormulaResult PerValue(const OpCall& call, int64_t k) {
  const TensorMeta* out = DenseOutput(call);
  if (!out) return NotDense(call);
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor() && a.tensor().defined && (a.tensor().nested || !a.tensor().strided)) return NotDense(call);
  }
  return CountFor(call, ArithmeticOf(call), Count(k) * out->numel());
}

bool BoolArg(const OpCall& call, size_t i, bool& value) {
  const ArgMeta& a = call.arg(i);
  if (a.kind != ArgKind::kBool) return false;
  value = a.to_bool();
  return true;
}

// N and R of a softmax-family backward: grad (arg 0) and the forward output
// (arg 1) are dense; `dim` (arg dim_arg) is an int in range, or None when
// none_is_last (then the last dimension). A 0-dim tensor is one row of one.
bool SoftmaxRows(const OpCall& call, size_t dim_arg, bool none_is_last, int64_t& n, int64_t& r) {
  const TensorMeta* grad = DenseArg(call, 0);
  if (!grad || !DenseArg(call, 1)) return false;
  const ArgMeta& dim = call.arg(dim_arg);
  const int64_t ndim = grad->dim();
  int64_t d = ndim == 0 ? 0 : ndim - 1;
  if (dim.kind == ArgKind::kInt) {
    d = dim.to_int();
  } else if (!(dim.is_none() && none_is_last)) {
    return false;
  }
  const int64_t rank = ndim == 0 ? 1 : ndim;
  if (d < -rank || d >= rank) return false;
  n = grad->numel();
  const int64_t length = ndim == 0 ? 1 : grad->size(d);
  r = length == 0 ? 0 : n / length;
  return true;
}

FormulaResult SoftmaxFamily(const OpCall& call, size_t dim_arg, bool none_is_last, int64_t per_value) {
  int64_t n = 0, r = 0;
  if (!SoftmaxRows(call, dim_arg, none_is_last, n, r)) {
    return FormulaResult::Unavailable(
        "unsupported_operator_formula",
        std::string(call.name) + ": needs dense grad/output tensors and an integer dim within their rank");
  }
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor() && (a.tensor().nested || !a.tensor().strided)) return NotDense(call);
  }
  return CountFor(call, ArithmeticOf(call), Count(per_value) * n - Count(r));  // r <= n
}

}  // namespace

// ATen/native/Activation.cpp threshold_backward: threshold_stub on (self,
// grad) with value 0; kernel `x <= threshold ? value : other`:
// 1 comparison + 1 selection = 2.
FormulaResult Threshold(const OpCall& call) { return PerValue(call, 2); }

// cpu/Activation.cpp GeluBackwardKernelImpl, per element (x = self, dy = grad).
// none: cdf = 0.5 * (1 + erf(x * kAlpha))       x*kAlpha, erf, 1+, 0.5*     4
//       pdf = kBeta * exp(x * x * -0.5)          x*x, *-0.5, exp, kBeta*     4
//       dy * (cdf + x * pdf)                     x*pdf, +, dy*               3  -> 11
// tanh: x_sq = x*x, x_cube = x_sq*x                                          2
//       inner = kBeta * (x + kKappa * x_cube)    kKappa*, x+, kBeta*         3
//       tanh(inner)                                                          6
//       left = 0.5*x, right = 1 + t, left_derivative = 0.5*right             3
//       tanh_derivative = 1 - t*t                                            2
//       inner_derivative = kBeta * (1 + (3*kKappa) * x_sq)  (3*kKappa const) 3
//       right_derivative = left * tanh_derivative * inner_derivative         2
//       dy * (left_derivative + right_derivative)                            2  -> 23
// (The vectorized lambda recomputes x*x inside x*x*x; the value is counted once.)
FormulaResult Gelu(const OpCall& call) {
  const ArgMeta& approximate = call.arg(2);
  if (approximate.is_none() || (approximate.kind == ArgKind::kString && approximate.str() == "none")) {
    return PerValue(call, 11);
  }
  if (approximate.kind == ArgKind::kString && approximate.str() == "tanh") return PerValue(call, 23);
  return FormulaResult::Unavailable("unsupported_operator_formula",
                                    std::string(call.name) + ": approximate must be \"none\" or \"tanh\"");
}

// cpu/Activation.cpp silu_backward_kernel:
// s = 1 / (1 + exp(-x))                 sigmoid                             4
// dy * s * (1 + x * (1 - s))            1-s, x*, 1+, dy*s, *                5  -> 9
FormulaResult Silu(const OpCall& call) { return PerValue(call, 9); }

// cpu/BinaryOpsKernel.cpp sigmoid_backward_kernel `a * (1 - b) * b` and
// tanh_backward_kernel `a * (1 - b * b)`: 3 each (b is the saved output).
FormulaResult SigmoidTanh(const OpCall& call) { return PerValue(call, 3); }

// cpu/Activation.cpp hardtanh_backward_kernel
// `(self <= min || self >= max) ? 0 : grad` and shrink_backward_kernel
// (hardshrink and softshrink) `(self >= -l && self <= l) ? 0 : grad`:
// 2 comparisons + 1 selection = 3 (-l is constant; the range test combines
// its two comparisons as the forward Hardshrink row does: 3).
FormulaResult RangeMask(const OpCall& call) { return PerValue(call, 3); }

// cpu/Activation.cpp leaky_relu_backward_kernel `a > 0 ? b : b * negval`:
// comparison, multiply, selection = 3. self_is_result only guards the slope's
// sign (Activation.cpp TORCH_CHECK); the math is the same.
FormulaResult LeakyRelu(const OpCall& call) { return PerValue(call, 3); }

// cpu/Activation.cpp elu_backward_kernel (a = grad, b = self_or_result;
// negcoef = alpha * scale is constant-only):
// is_result:  b <= 0 ? a * negiptcoef * (b + negcoef) : a * poscoef
//             comparison 1, a*negiptcoef, b+negcoef, * 3, a*poscoef 1, selection 1 -> 6
// otherwise:  b <= 0 ? a * negiptcoef * negcoef * exp(b * negiptcoef) : a * poscoef
//             comparison 1, a*negiptcoef, *negcoef, b*negiptcoef, exp, * 5,
//             a*poscoef 1, selection 1 -> 8
// (CELU and SELU reach this kernel with their own alpha/scale/input_scale.)
FormulaResult Elu(const OpCall& call) {
  bool is_result = false;
  if (!BoolArg(call, 4, is_result)) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) + ": is_result must be a bool");
  }
  return PerValue(call, is_result ? 6 : 8);
}

// cpu/Activation.cpp softplus_backward_kernel (a = grad, b = self):
// z = exp(b * beta); (b * beta) > threshold ? a : a * z / (z + 1)
// b*beta twice (for exp and for the threshold test, as the forward row
// counts it), exp, comparison, a*z, z+1, /, selection -> 8
FormulaResult Softplus(const OpCall& call) { return PerValue(call, 8); }

// cpu/Activation.cpp mish_backward_kernel:
// s = 1 / (1 + exp(-x))                                   sigmoid           4
// t = tanh(log1p(exp(x)))                                 exp, log1p, tanh  8
// dy * (t + x * s * (1 - t * t))                          t*t, 1-, x*s, *, t+, dy*  6  -> 18
FormulaResult Mish(const OpCall& call) { return PerValue(call, 18); }

// cpu/Activation.cpp hardswish_backward_kernel:
// self < -3 ? 0 : (self <= 3 ? grad * (self / 3 + 0.5) : grad)
// 2 comparisons, self/3, +0.5, grad*, 2 selections -> 7
FormulaResult Hardswish(const OpCall& call) { return PerValue(call, 7); }

// cpu/Activation.cpp hardsigmoid_backward_kernel:
// (self > -3 && self < 3) ? grad * (1/6) : 0   2 comparisons, multiply, selection -> 4
FormulaResult Hardsigmoid(const OpCall& call) { return PerValue(call, 4); }

// cpu/Activation.cpp log_sigmoid_backward_cpu_kernel (a = self, b = buffer =
// exp(-|x|) saved by the forward, c = grad):
// neg = a < 0; max_deriv = neg ? 1 : 0; sign = neg ? 1 : -1
// (max_deriv - sign * (b / (1 + b))) * c
// comparison 1, 2 selections, 1+b, /, sign*, max_deriv-, *c -> 8
FormulaResult LogSigmoid(const OpCall& call) { return PerValue(call, 8); }

// cpu/BinaryOpsKernel.cpp logit_backward_kernel, vectorized path (eps given:
// zero outside [eps, 1 - eps]; eps None: NaN outside [0, 1]):
// blendv(fill, dy / (x * (1 - x)), (x >= lo) & (x <= hi))
// 2 comparisons, 1-x, x*, dy/, selection -> 6
// (The scalar tail lambda adds an x == 0 || x == 1 test that the vector path,
// which runs the bulk of the elements, does not have.)
FormulaResult Logit(const OpCall& call) { return PerValue(call, 6); }

// cpu/Activation.cpp prelu_backward_kernel, two outputs in one pass over the
// broadcast shape: mask = input > 0; grad_input = mask ? grad : weight * grad;
// grad_weight = mask ? 0 : input * grad (the reduction to weight's shape is a
// separate sum in autograd): comparison 1, 2 multiplies, 2 selections -> 5.
FormulaResult Prelu(const OpCall& call) { return PerValue(call, 5); }

// Activation.cpp rrelu_with_noise_backward: training: noise * grad_output
// (one multiply) -> N; eval: leaky_relu_backward with slope (lower+upper)/2
// (constant-only) -> 3N.
FormulaResult RreluWithNoise(const OpCall& call) {
  bool training = false;
  if (!BoolArg(call, 5, training)) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) + ": training must be a bool");
  }
  return PerValue(call, training ? 1 : 3);
}

// GatedLinearUnit.cpp glu_backward_cpu_out, self = [a | b] along dim, H = grad
// elements (= a's):  s = sigmoid(b) into the first half      4H
// second half: (1 - s) * s * a * grad (glu_backward_kernel)   4H
// first half: s *= grad                                       H   -> 9H
FormulaResult Glu(const OpCall& call) {
  const TensorMeta* grad = DenseArg(call, 0);
  if (!grad || !DenseArg(call, 1) || !DenseOutput(call)) return NotDense(call);
  return CountFor(call, ArithmeticOf(call), Count(9) * grad->numel());
}

// Dropout.cpp native_dropout_backward: grad * mask * scale: two multiplies -> 2N
// (the boolean mask is converted to grad's dtype first: a copy, no arithmetic).
FormulaResult NativeDropout(const OpCall& call) { return PerValue(call, 2); }

// SoftMax.cpp / cpu/SoftMaxKernel.cpp _vec_host_softmax_backward (per row of
// length L along dim, R rows, N = R * L):
// sum = reduce(grad * y)        N multiplies, N - R adds
// grad_input = (grad - sum) * y N subtracts, N multiplies   -> 4N - R
FormulaResult SoftmaxData(const OpCall& call) { return SoftmaxFamily(call, 2, false, 4); }

// log-softmax: sum = reduce(grad)               N - R adds
// grad_input = grad - exp(y) * sum              N exp, N multiplies, N subtracts -> 4N - R
FormulaResult LogSoftmaxData(const OpCall& call) { return SoftmaxFamily(call, 2, false, 4); }

// SoftMax.cpp host_softmax_backward with a mask (dim None = last):
// pass 1: if (!mask) sum += grad * y     N selections, N multiplies, N - R adds
// pass 2: mask ? 0 : y * (grad - sum)    N selections, N subtracts, N multiplies
// -> 6N - R (the softmax backward's 4N - R plus 2N selections, as the safe
// softmax row adds 2N to softmax).
FormulaResult MaskedSoftmax(const OpCall& call) { return SoftmaxFamily(call, 3, true, 6); }

}  // namespace torchscan::activation_backward
