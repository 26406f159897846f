// Fallback FLOPs of softmax-family kernels (torchscan_flops_v1 "Stable/safe
// softmax", "LogSoftmax / Softmin"). N = elements, R = rows along `dim`.
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::softmax {

// _softmax(self, dim, half_to_float): max (N-R), subtract N, exp N, sum (N-R),
// divide N -> 5N - 2R.
FormulaResult Softmax(const OpCall& call);
// _safe_softmax(self, dim, dtype): softmax plus 2N comparisons/selections
// guarding fully masked rows -> 7N - 2R.
FormulaResult SafeSoftmax(const OpCall& call);
// _log_softmax(self, dim, half_to_float): max (N-R), subtract N, exp N,
// sum (N-R), log R, subtract N -> 4N - R.
FormulaResult LogSoftmax(const OpCall& call);

// Module view: zero MACs; staged logical accesses 8N + 4R (softmax) and
// 8N + 6R (log-softmax); the safe variant adds its -inf test and selection
// stages: 13N + 4R.
ModuleCosts SoftmaxCosts(const OpCall& call);
ModuleCosts LogSoftmaxCosts(const OpCall& call);
ModuleCosts SafeSoftmaxCosts(const OpCall& call);

}  // namespace torchscan::softmax
