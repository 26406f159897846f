#include "formulas/optimizers.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formulas/arithmetic.h"
#include "formulas/registry.h"
#include "formulas/shapes.h"

namespace torchscan::optimizers {
namespace {

constexpr std::string_view kForeachPrefix = "aten::_foreach_";

// Values one per-tensor call with the built-in row of `op` (the native
// dtype rule included: aten::mm is a native row).
FormulaResult ValueRow(std::string_view op, const OpCall& element) {
  const OperatorFormula* f = FindOperatorFormula(op);
  if (f == nullptr) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(op) + ": no per-tensor row to value the list element with");
  }
  return EvaluateOperatorFormula(*f, element);
}

// Sums the per-tensor results one list kernel stands for. An element the
// per-tensor rule cannot value leaves the sum a lower bound (partial), or
// unavailable when no element was valued at all; the first such element's
// diagnostic is kept.
class Tally {
 public:
  explicit Tally(const OpCall& call) : call_(call) {}

  void Add(const FormulaResult& r, size_t element) {
    if (r.status != MetricStatus::kUnavailable) {
      sum_ += r.value;
      valued_ = true;
    }
    if (r.status == MetricStatus::kComplete) return;
    FormulaResult& first = r.status == MetricStatus::kPartial ? partial_ : unavailable_;
    if (!first.code.empty()) return;
    first.code = r.code;
    first.message = std::string(call_.name) + ": list element " + std::to_string(element) + ": " + r.message;
  }

  FormulaResult Result() const {
    if (unavailable_.code.empty() && partial_.code.empty()) return FormulaResult::Complete(sum_);
    const FormulaResult& first = unavailable_.code.empty() ? partial_ : unavailable_;
    if (!unavailable_.code.empty() && !valued_) return FormulaResult::Unavailable(first.code, first.message);
    return FormulaResult::Partial(sum_, first.code, first.message);
  }

 private:
  const OpCall& call_;
  Count sum_ = 0;
  bool valued_ = false;
  FormulaResult partial_, unavailable_;
};

// Right-aligned broadcast of the sizes of the tensor operands.
std::vector<int64_t> BroadcastSizes(absl::Span<const ArgMeta> args) {
  std::vector<int64_t> shape;
  for (const ArgMeta& a : args) {
    if (!a.is_tensor() || a.tensor().nested) continue;
    const auto sizes = a.tensor().sizes();
    if (sizes.size() > shape.size()) shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
    for (size_t k = 0; k < sizes.size(); ++k) {
      int64_t& s = shape[shape.size() - 1 - k];
      if (s == 1) s = sizes[sizes.size() - 1 - k];
    }
  }
  return shape;
}

bool AllListsDense(const OpCall& call) {
  for (const ArgMeta& a : call.args) {
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& t : a.tensors()) {
        if (t.defined && (t.nested || !t.strided)) return false;
      }
    }
    if (a.is_tensor() && (a.tensor().nested || !a.tensor().strided)) return false;
  }
  return true;
}

// One per-element operation of a for-loop optimizer step: the per-tensor row
// that values it, its tensor operands (each shaped like the parameter) and
// its trailing scalar operand (other / alpha / weight / value), if any.
struct LoopOp {
  const char* op;
  int tensors;
  std::optional<double> scalar;
};

// The fused kernel's count: every LoopOp on every parameter of the list.
FormulaResult ValueLoop(const OpCall& call, const std::vector<LoopOp>& ops) {
  const ArgMeta& params = call.arg(0);
  if (params.kind != ArgKind::kTensorList) return ShapeMismatch(call, "expected the parameter list first");
  for (const ArgMeta& a : call.args) {
    // Optional state lists are empty when unused (max_exp_avg_sqs without
    // amsgrad, momentum buffers without momentum).
    if (a.kind == ArgKind::kTensorList && a.count != 0 && a.count != params.count) {
      return ShapeMismatch(call, "tensor lists of different lengths");
    }
  }
  if (!AllListsDense(call)) return NotDense(call);
  Tally tally(call);
  std::vector<ArgMeta> args;
  for (size_t i = 0; i < params.count; ++i) {
    const TensorMeta& p = params.tensors()[i];
    if (!p.defined) return ShapeMismatch(call, "undefined parameter tensor");
    const ArgMeta tensor = ArgMeta::Tensor(&p);
    for (const LoopOp& op : ops) {
      args.assign(static_cast<size_t>(op.tensors), tensor);
      if (op.scalar) args.push_back(ArgMeta::Double(*op.scalar));
      const OpCall element{op.op, "", args, absl::Span<const ArgMeta>(&tensor, 1)};
      tally.Add(ValueRow(op.op, element), i);
    }
  }
  return tally.Result();
}

// found_inf: the kernel returns at once when *found_inf == 1 (aten/src/ATen/
// native/FusedAdam.cpp and its siblings), a tensor value TorchScan does not read.
FormulaResult SkippedOrApplied(const OpCall& call, size_t found_inf, const FormulaResult& applied) {
  if (call.arg(found_inf).is_none() || applied.status != MetricStatus::kComplete) return applied;
  return FormulaResult::Unavailable("value_dependent_work",
                                    std::string(call.name) +
                                        ": found_inf given: the kernel skips the whole step when found_inf is 1 and "
                                        "TorchScan does not read tensor values (the applied step costs " +
                                        applied.value.Digits() + " FLOPs)");
}

std::optional<bool> BoolArg(const OpCall& call, size_t i) {
  const ArgMeta& a = call.arg(i);
  if (a.kind != ArgKind::kBool) return std::nullopt;
  return a.to_bool();
}

// torch/optim/adam.py `_single_tensor_adam` (capturable=False), per element
// of each parameter; adamw.py is Adam with decoupled_weight_decay=True.
// Arguments: self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
// state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
// grad_scale, found_inf.
FormulaResult Adam(const OpCall& call, bool decoupled) {
  const auto lr = ScalarArg(call, 6);  // nullopt: the tensor_lr overload
  const auto beta1 = ScalarArg(call, 7), beta2 = ScalarArg(call, 8);
  const auto weight_decay = ScalarArg(call, 9), eps = ScalarArg(call, 10);
  const auto amsgrad = BoolArg(call, 11), maximize = BoolArg(call, 12);
  if (!beta1 || !beta2 || !weight_decay || !eps || !amsgrad || !maximize) {
    return ShapeMismatch(call, "expected Adam's scalar options");
  }
  // The update's coefficient -lr / (1 - beta1^step) is at most 0 (never 1)
  // for torch.optim's valid options lr >= 0, 0 <= beta1 < 1; a tensor lr is
  // taken to satisfy the same check (torch.optim.Adam applies it).
  if ((lr && *lr < 0) || *beta1 < 0 || *beta1 >= 1) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) +
                                          ": lr < 0 or beta1 outside [0, 1): whether the update coefficient "
                                          "-lr/(1-beta1^step) is 1 depends on the step value");
  }
  std::vector<LoopOp> ops;
  // The kernel's unscale: grad / grad_scale (not a for-loop option; the
  // for-loop form runs the GradScaler's own unscale kernel instead).
  if (!call.arg(13).is_none()) ops.push_back({"aten::div", 2, std::nullopt});
  if (*maximize) ops.push_back({"aten::neg", 1, std::nullopt});  // grad = -grads[i]
  if (*weight_decay != 0) {
    if (decoupled) {
      ops.push_back({"aten::mul", 1, 1 - lr.value_or(0) * *weight_decay});  // param.mul_(1 - lr * wd)
    } else {
      ops.push_back({"aten::add", 2, *weight_decay});  // grad.add(param, alpha=wd)
    }
  }
  ops.push_back({"aten::lerp", 2, 1 - *beta1});                     // exp_avg.lerp_(grad, 1 - beta1)
  ops.push_back({"aten::mul", 1, *beta2});                          // exp_avg_sq.mul_(beta2)
  ops.push_back({"aten::addcmul", 3, 1 - *beta2});                  //   .addcmul_(grad, grad, value=1 - beta2)
  if (*amsgrad) ops.push_back({"aten::maximum", 2, std::nullopt});  // maximum(max_exp_avg_sq, exp_avg_sq, out=)
  ops.push_back({"aten::sqrt", 1, std::nullopt});                   // denom = (exp_avg_sq.sqrt()
  ops.push_back({"aten::div", 1, 1.0});                  //   / bias_correction2_sqrt (a float: any value counts 1)
  ops.push_back({"aten::add", 1, *eps});                 //   ).add_(eps)
  ops.push_back({"aten::addcdiv", 3, -lr.value_or(0)});  // param.addcdiv_(exp_avg, denom, value=-step_size <= 0)
  return SkippedOrApplied(call, 14, ValueLoop(call, ops));
}

}  // namespace

FormulaResult Foreach(const OpCall& call) {
  const std::string_view functional = FunctionalName(call.name);
  if (functional.substr(0, kForeachPrefix.size()) != kForeachPrefix) {
    return ShapeMismatch(call, "not a _foreach_ operator");
  }
  const std::string_view base = functional.substr(kForeachPrefix.size());
  const bool in_place = functional.size() != call.name.size();
  const bool norm = base == "norm";
  const bool reduction = norm || base == "max";
  const std::string per_tensor = norm ? std::string("aten::linalg_vector_norm") : "aten::" + std::string(base);
  // addcmul/addcdiv.Tensor: a 1-D tensor holds element i's coefficient at i.
  const bool coefficients_in_tensor = (base == "addcmul" || base == "addcdiv") && call.arg(3).is_tensor();

  const ArgMeta* self = nullptr;  // the first tensor list (self; exponent for pow.ScalarAndTensor)
  for (const ArgMeta& a : call.args) {
    if (a.kind == ArgKind::kTensorList) {
      self = &a;
      break;
    }
  }
  if (self == nullptr) return ShapeMismatch(call, "expected a tensor list");
  const size_t n = self->count;
  for (const ArgMeta& a : call.args) {
    if ((a.kind == ArgKind::kTensorList || a.kind == ArgKind::kDoubleList) && a.count != n) {
      return ShapeMismatch(call, "lists of different lengths");
    }
  }
  const ArgMeta* returned = nullptr;
  if (!call.outputs.empty()) {
    if (call.outputs.size() != 1 || call.outputs[0].kind != ArgKind::kTensorList || call.outputs[0].count != n) {
      return ShapeMismatch(call, "expected one returned list as long as the operands");
    }
    returned = &call.outputs[0];
  }

  Tally tally(call);
  std::vector<ArgMeta> args;
  std::vector<int64_t> made_sizes;
  TensorMeta made;
  for (size_t i = 0; i < n; ++i) {
    args.clear();
    for (size_t j = 0; j < call.args.size(); ++j) {
      const ArgMeta& a = call.args[j];
      if (a.kind == ArgKind::kTensorList) {
        const TensorMeta& t = a.tensors()[i];
        args.push_back(t.defined ? ArgMeta::Tensor(&t) : ArgMeta::None());
      } else if (a.kind == ArgKind::kDoubleList) {
        args.push_back(ArgMeta::Double(a.doubles()[i]));
      } else if (coefficients_in_tensor && j == 3) {
        args.push_back(ArgMeta::Other());  // a tensor's value: not recorded
      } else {
        args.push_back(a);
      }
    }
    if (norm) {
      // _foreach_norm(self, ord, dtype) -> linalg_vector_norm(self, ord, dim=None, keepdim=False, *, dtype)
      const ArgMeta ord = args.size() > 1 ? args[1] : ArgMeta::None();
      const ArgMeta dtype = args.size() > 2 ? args[2] : ArgMeta::None();
      args = {args[0], ord, ArgMeta::None(), ArgMeta::Bool(false), dtype};
    }
    ArgMeta output;
    if (returned != nullptr) {
      const TensorMeta& t = returned->tensors()[i];
      output = t.defined ? ArgMeta::Tensor(&t) : ArgMeta::None();
    } else if (in_place) {
      output = ArgMeta::Tensor(&self->tensors()[i]);  // self[i], written in place
    } else {
      // An out= overload: its destinations are not recorded.
      made = self->tensors()[i];
      made_sizes = reduction ? std::vector<int64_t>{} : BroadcastSizes(args);
      made.ndim = static_cast<int32_t>(made_sizes.size());
      made.size_data = made_sizes.data();
      made.stride_data = nullptr;
      output = ArgMeta::Tensor(&made);
    }
    const OpCall element{per_tensor, "", args, absl::Span<const ArgMeta>(&output, 1)};
    FormulaResult r = ValueRow(per_tensor, element);
    if (coefficients_in_tensor && r.status == MetricStatus::kComplete) {
      r = FormulaResult::Partial(r.value, "value_in_tensor",
                                 per_tensor +
                                     ": the coefficient is read from a tensor (not recorded); "
                                     "a coefficient != 1 adds one multiply per element");
    }
    tally.Add(r, i);
  }
  return tally.Result();
}

FormulaResult FusedAdam(const OpCall& call) { return Adam(call, /*decoupled=*/false); }
FormulaResult FusedAdamW(const OpCall& call) { return Adam(call, /*decoupled=*/true); }

// torch/optim/sgd.py `_single_tensor_sgd`, per element of each parameter.
// Arguments: self, grads, momentum_buffer_list, weight_decay, momentum, lr,
// dampening, nesterov, maximize, is_first_step, grad_scale, found_inf.
FormulaResult FusedSgd(const OpCall& call) {
  const auto weight_decay = ScalarArg(call, 3), momentum = ScalarArg(call, 4);
  const auto lr = ScalarArg(call, 5);  // nullopt: the tensor_lr overload (lr >= 0 per torch.optim)
  const auto dampening = ScalarArg(call, 6);
  const auto nesterov = BoolArg(call, 7), maximize = BoolArg(call, 8), first_step = BoolArg(call, 9);
  if (!weight_decay || !momentum || !dampening || !nesterov || !maximize || !first_step) {
    return ShapeMismatch(call, "expected SGD's scalar options");
  }
  std::vector<LoopOp> ops;
  if (!call.arg(10).is_none()) ops.push_back({"aten::div", 2, std::nullopt});  // the kernel's grad / grad_scale
  if (*maximize) ops.push_back({"aten::neg", 1, std::nullopt});                // grad = -grads[i]
  if (*weight_decay != 0) ops.push_back({"aten::add", 2, *weight_decay});      // grad.add(param, alpha=wd)
  if (*momentum != 0) {
    // First step: buf = grad.detach().clone() (a copy).
    if (!*first_step) {
      ops.push_back({"aten::mul", 1, *momentum});       // buf.mul_(momentum)
      ops.push_back({"aten::add", 2, 1 - *dampening});  //   .add_(grad, alpha=1 - dampening)
    }
    if (*nesterov) ops.push_back({"aten::add", 2, *momentum});  // grad.add(buf, alpha=momentum)
  }
  ops.push_back({"aten::add", 2, -lr.value_or(0)});  // param.add_(grad, alpha=-lr)
  return SkippedOrApplied(call, 11, ValueLoop(call, ops));
}

// torch/optim/adagrad.py `_single_tensor_adagrad` (dense gradients), per
// element of each parameter. Arguments: self, grads, state_sums,
// state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale, found_inf.
FormulaResult FusedAdagrad(const OpCall& call) {
  const auto lr = ScalarArg(call, 4);  // nullopt: the tensor_lr overload
  const auto lr_decay = ScalarArg(call, 5), weight_decay = ScalarArg(call, 6), eps = ScalarArg(call, 7);
  const auto maximize = BoolArg(call, 8);
  if (!lr_decay || !weight_decay || !eps || !maximize) return ShapeMismatch(call, "expected Adagrad's scalar options");
  // clr = lr / (1 + (step - 1) * lr_decay) >= 0 for torch.optim's valid
  // options lr >= 0, lr_decay >= 0: the coefficient -clr is never 1.
  if ((lr && *lr < 0) || *lr_decay < 0) {
    return FormulaResult::Unavailable("unsupported_operator_formula",
                                      std::string(call.name) +
                                          ": lr < 0 or lr_decay < 0: whether the update coefficient "
                                          "-lr/(1+(step-1)*lr_decay) is 1 depends on the step value");
  }
  std::vector<LoopOp> ops;
  if (!call.arg(9).is_none()) ops.push_back({"aten::div", 2, std::nullopt});  // the kernel's grad / grad_scale
  if (*maximize) ops.push_back({"aten::neg", 1, std::nullopt});               // grad = -grad
  if (*weight_decay != 0) ops.push_back({"aten::add", 2, *weight_decay});     // grad.add(param, alpha=wd)
  ops.push_back({"aten::addcmul", 3, 1.0});                                   // state_sum.addcmul_(grad, grad, value=1)
  ops.push_back({"aten::sqrt", 1, std::nullopt});                             // std = state_sum.sqrt()
  ops.push_back({"aten::add", 1, *eps});                                      //   .add_(eps)
  ops.push_back({"aten::addcdiv", 3, -lr.value_or(0)});  // param.addcdiv_(grad, std, value=-clr <= 0)
  return SkippedOrApplied(call, 10, ValueLoop(call, ops));
}

}  // namespace torchscan::optimizers
