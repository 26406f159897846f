// torchscan_training_v1 rows of optimizer and gradient-utility kernels: the
// `_foreach_*` list kernels and the fused optimizer steps (`_fused_adam(w)_`,
// `_fused_sgd_`, `_fused_adagrad_`).
//
// One rule for both: a list kernel costs what its per-tensor work costs under
// the per-tensor rows. So the for-loop (foreach=False), foreach and fused
// forms of one optimizer step report the same FLOPs (formulas/TRAINING.md).
#pragma once

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::optimizers {

// aten::_foreach_<op>[_] (every overload: Scalar, List, ScalarList, Tensor,
// their out= forms, and the in-place ones that return ()): the sum over list
// elements i of the per-tensor row "aten::<op>" valued on the call
// <op>(self[i], other[i] | scalar | scalars[i] | tensor, alpha ...) whose
// output is the returned list's element i, or self[i] for an in-place call
// (an out= call's destination is not recorded: its shape is the broadcast
// of the element's operands, 0-dim for the reductions norm and max).
// _foreach_norm uses the linalg_vector_norm row. Each element follows its
// own dtype rule (integer: zero; complex: no count). An element whose count
// the per-tensor row cannot give leaves the sum partial (the others are a
// lower bound), or unavailable when no element is valued.
FormulaResult Foreach(const OpCall& call);

// The fused optimizer kernels, valued as the per-element operations of
// torch/optim's single-tensor (for-loop) implementation for the same options,
// each counted by its per-tensor row. The 0-dim step increment is not part of
// the kernel (the Python wrapper runs _foreach_add_(state_steps, 1) first)
// and the bias corrections are Python floats (no ATen work in any form).
// With grad_scale the kernel also divides every gradient by it (+1 per
// element). With found_inf the kernel does all or nothing depending on its
// value: unavailable.
//
// _fused_adam / _fused_adamw (Adam, AdamW: decoupled weight decay).
FormulaResult FusedAdam(const OpCall& call);
FormulaResult FusedAdamW(const OpCall& call);
// _fused_sgd (momentum, dampening, nesterov, is_first_step).
FormulaResult FusedSgd(const OpCall& call);
// _fused_adagrad.
FormulaResult FusedAdagrad(const OpCall& call);

}  // namespace torchscan::optimizers
