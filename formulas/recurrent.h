// Fallback FLOPs of fused recurrent layers (native 2K convention for the
// products; fused biases omitted as for other native kernels).
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::recurrent {

// mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes,
//   mode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train):
// one layer, one direction, over T steps of B rows, input width I, hidden H.
// Per step and row, G gates of H outputs are dots of I + H terms (2G H (I+H)),
// then the cell's pointwise work:
//   LSTM (mode 2, G=4): 3 sigmoids 12H, tanh 6H, c' = f*c + i*g 3H,
//                       h' = o * tanh(c') 7H -> 28H
//   GRU  (mode 3, G=3): 2 sigmoids 8H, n = tanh(x_n + r*h_n) 8H,
//                       h' = (1 - z) n + z h 4H -> 20H
//   RNN  (mode 0 ReLU / 1 tanh, G=1): 1H / 6H
FormulaResult MkldnnRnnLayer(const OpCall& call);

// torchscan_training_v1 row of the LSTM layer backward (derivation next to the
// definition): mkldnn_rnn_layer_backward(input, w_ih, w_hh, b_ih, b_hh, hx, cx,
//   output, hy, cy, grad_output?, grad_hy?, grad_cy?, reverse, mode,
//   hidden_size, num_layers, has_biases, train, bidirectional, batch_sizes,
//   batch_first, workspace), LSTM only (mode 2). N = T*B rows (input (T, B, I)),
// G = 4 gates, H hidden:
//   cell backward 29 N H + products 4 N G H (I + H) + bias gradient G H (N - 1)
//   + G H for b_ih + b_hh when has_biases. Zero when no gradient is given.
FormulaResult MkldnnRnnLayerBackward(const OpCall& call);

}  // namespace torchscan::recurrent
