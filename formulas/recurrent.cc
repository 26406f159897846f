#include "formulas/recurrent.h"

#include <string>

#include "formulas/arithmetic.h"

namespace torchscan::recurrent {

FormulaResult MkldnnRnnLayer(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const auto mode = ScalarArg(call, 9);
  const auto hidden = ScalarArg(call, 10);
  const ArgMeta& batch_first = call.arg(14);
  if (!x || x->dim() != 3 || !mode || !hidden) return NotDense(call);
  const bool bf = batch_first.kind == ArgKind::kBool && batch_first.to_bool();
  const int64_t steps = bf ? x->size(1) : x->size(0), rows = bf ? x->size(0) : x->size(1);
  const int64_t in = x->size(2), h = static_cast<int64_t>(*hidden);
  int64_t gates = 0, cell = 0;
  switch (static_cast<int>(*mode)) {
    case 0:
      gates = 1, cell = 1;
      break;  // RNN, ReLU
    case 1:
      gates = 1, cell = 6;
      break;  // RNN, tanh
    case 2:
      gates = 4, cell = 28;
      break;  // LSTM
    case 3:
      gates = 3, cell = 20;
      break;  // GRU
    default:
      return FormulaResult::Unavailable("unsupported_operator_formula",
                                        "aten::mkldnn_rnn_layer: unknown recurrent mode " + std::to_string(*mode));
  }
  return CountFor(call, ArithmeticOf(call),
                  Count(steps) * rows * (Count(2) * gates * h * (Count(in) + h) + Count(cell) * h));
}

}  // namespace torchscan::recurrent

namespace torchscan::recurrent {

// torchscan_training_v1, LSTM layer backward on CPU. mkldnn_rnn_layer_backward
// (aten/src/ATen/native/mkldnn/RNN.cpp) adds the two biases (b_ih + b_hh, when
// has_biases) and runs oneDNN's LSTM backward on the workspace the forward
// saved (gates i, f, g, o and the cell states c). Per step t (in reverse), row
// and hidden unit, the cell backward (oneDNN lstm_bwd_postgemm,
// src/cpu/rnn/ref_postgemm_lstm.cpp and its x64 JIT twin) computes:
//   tanh(c_t) again (not saved)                      6  (tanh expands to 6)
//   dh = dy_t + dh_{t+1}                             1
//   dc = dc_{t+1} + (1 - tanh^2) * o * dh            5  (square, subtract, 2 mul, add)
//   do = (o - o^2) * dh * tanh(c_t)                  4
//   di = (i - i^2) * dc * g                          4
//   df = (f - f^2) * dc * c_{t-1}                    4
//   dg = (1 - g^2) * i * dc                          4
//   dc_{t-1} = dc * f                                1   -> 29 per unit
// (the derivatives come from the saved gate values: x - x^2 and 1 - x^2, two
// operations each, as the JIT kernel evaluates them with one FMA). The
// products, K-term dots at 2K, with G = 4 gates of H units, N = T*B rows:
//   dh_{t-1} = dgates W_hh   2*N*G*H*H     dx = dgates W_ih       2*N*G*H*I
//   dW_hh = dgates^T h_{t-1} 2*N*G*H*H     dW_ih = dgates^T x     2*N*G*H*I
// The weight gradients accumulate over time and batch: one dot of N terms per
// weight, so the accumulation is inside the 2K. The bias gradient sums N rows
// of G*H gate gradients: G*H*(N - 1) (sum: max(N - R, 0)); the returned second
// bias gradient is a clone.
FormulaResult MkldnnRnnLayerBackward(const OpCall& call) {
  // No incoming gradient at all: the kernel returns undefined tensors.
  if (call.arg(10).is_none() && call.arg(11).is_none() && call.arg(12).is_none()) {
    return FormulaResult::Complete(0);
  }
  const TensorMeta* x = DenseArg(call, 0);
  const auto mode = ScalarArg(call, 14);
  const auto hidden = ScalarArg(call, 15);
  const auto biases = ScalarArg(call, 17);
  if (!x || x->dim() != 3 || !mode || !hidden) return NotDense(call);
  if (static_cast<int>(*mode) != 2) {
    return FormulaResult::Unavailable(
        "unsupported_operator_formula",
        "aten::mkldnn_rnn_layer_backward: only the LSTM backward (mode 2) exists in the kernel; mode " +
            std::to_string(static_cast<int>(*mode)));
  }
  constexpr int64_t kGates = 4;
  // RNNParams reads the input as (T, B, I) whatever batch_first says.
  const Count n = Count(x->size(0)) * x->size(1);
  const int64_t in = x->size(2), h = static_cast<int64_t>(*hidden);
  const Count gh = Count(kGates) * h;
  Count flops = n * h * 29                       // cell backward
                + 4 * n * gh * (Count(in) + h);  // dx, dh, dW_ih, dW_hh
  if (n > 0) flops += gh * (n - 1);              // bias gradient
  if (biases && *biases != 0) flops += gh;       // b_ih + b_hh
  return CountFor(call, ArithmeticOf(call), flops);
}

}  // namespace torchscan::recurrent
