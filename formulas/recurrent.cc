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
    case 0: gates = 1, cell = 1; break;   // RNN, ReLU
    case 1: gates = 1, cell = 6; break;   // RNN, tanh
    case 2: gates = 4, cell = 28; break;  // LSTM
    case 3: gates = 3, cell = 20; break;  // GRU
    default:
      return FormulaResult::Unavailable("unsupported_operator_formula",
                                        "aten::mkldnn_rnn_layer: unknown recurrent mode " + std::to_string(*mode));
  }
  return CountFor(call, ArithmeticOf(call),
                  Count(steps) * rows * (Count(2) * gates * h * (Count(in) + h) + Count(cell) * h));
}

}  // namespace torchscan::recurrent
