// torchscan_training_v1 optimizer rows (formulas/optimizers.h): the _foreach_
// list adapter and the fused optimizer steps, on hand-built calls whose
// expected counts are written as arithmetic from the per-tensor rows.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "formulas/optimizers.h"
#include "formulas/registry.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

// A list of float tensors of these shapes, as an ArgMeta (owned by `b`).
ArgMeta FloatList(CallBuilder& b, std::initializer_list<std::vector<int64_t>> shapes,
                  c10::ScalarType dtype = c10::kFloat) {
  b.TensorList(shapes, dtype);
  return b.Call().args.back();
}

// A call named `op` with the given operands and returns (storage elsewhere).
struct Call {
  std::vector<ArgMeta> args, outs;
  std::string name;
  OpCall Get() const { return OpCall{name, "", args, outs}; }
};

FormulaResult Value(const Call& c) {
  const OperatorFormula* f = FindOperatorFormula(c.name);
  EXPECT_NE(f, nullptr) << c.name;
  return f ? f->flops(c.Get()) : FormulaResult::Unavailable("missing", "");
}

Count Flops(const Call& c) {
  const FormulaResult r = Value(c);
  EXPECT_EQ(r.status, MetricStatus::kComplete) << c.name << ": " << r.message;
  return r.value;
}

// Shapes used throughout: (2,3) and (4): N = 6 + 4 = 10 elements.

TEST(OptimizerForeach, InPlaceListWithAlphaIsTheAddRowPerElement) {
  CallBuilder store("lists");
  const ArgMeta self = FloatList(store, {{2, 3}, {4}});
  const ArgMeta other = FloatList(store, {{2, 3}, {4}});
  // _foreach_add_.List(self, other, alpha=2) returns (): output self[i].
  // add with alpha != 1: add + multiply = 2 per element -> 2 * (6 + 4) = 20.
  EXPECT_EQ(Flops({{self, other, ArgMeta::Double(2.0)}, {}, "aten::_foreach_add_"}), 20);
  // alpha = 1: 1 per element -> 10. _foreach_sub_ is the same row: 10.
  EXPECT_EQ(Flops({{self, other, ArgMeta::Int(1)}, {}, "aten::_foreach_add_"}), 10);
  EXPECT_EQ(Flops({{self, other, ArgMeta::Int(1)}, {}, "aten::_foreach_sub_"}), 10);
}

TEST(OptimizerForeach, FunctionalScalarUsesTheReturnedList) {
  CallBuilder store("lists");
  const ArgMeta self = FloatList(store, {{2, 3}, {4}});
  const ArgMeta out = FloatList(store, {{2, 3}, {4}});
  // _foreach_mul.Scalar(self, 0.5) -> list: one multiply per value: 10.
  EXPECT_EQ(Flops({{self, ArgMeta::Double(0.5)}, {out}, "aten::_foreach_mul"}), 10);
  // _foreach_sigmoid: the table's 4 per value: 40. _foreach_tanh: 6 -> 60.
  EXPECT_EQ(Flops({{self}, {out}, "aten::_foreach_sigmoid"}), 40);
  EXPECT_EQ(Flops({{self}, {out}, "aten::_foreach_tanh"}), 60);
}

TEST(OptimizerForeach, ScalarListGivesEachElementItsOwnScalar) {
  CallBuilder store("lists");
  const ArgMeta self = FloatList(store, {{2, 3}, {4}});
  const ArgMeta t1 = FloatList(store, {{2, 3}, {4}});
  const ArgMeta t2 = FloatList(store, {{2, 3}, {4}});
  const double scalars[] = {1.0, -0.1};
  // _foreach_addcdiv_.ScalarList: element 0 has value 1 (quotient + add = 2
  // per value: 12), element 1 value -0.1 (+ the multiply: 3 per value: 12) -> 24.
  EXPECT_EQ(Flops({{self, t1, t2, ArgMeta::Doubles(scalars, 2)}, {}, "aten::_foreach_addcdiv_"}), 24);
  // _foreach_div_.ScalarList: one divide per value whatever the scalar: 10.
  EXPECT_EQ(Flops({{self, ArgMeta::Doubles(scalars, 2)}, {}, "aten::_foreach_div_"}), 10);
  // A scalar list of another length: no count.
  const double three[] = {1.0, 2.0, 3.0};
  EXPECT_EQ(Value({{self, ArgMeta::Doubles(three, 3)}, {}, "aten::_foreach_div_"}).status, MetricStatus::kUnavailable);
}

TEST(OptimizerForeach, CoefficientsInATensorAreALowerBound) {
  CallBuilder store("lists");
  const ArgMeta self = FloatList(store, {{2, 3}, {4}});
  CallBuilder coeffs("c");
  coeffs.Tensor({2});
  // _foreach_addcmul_.Tensor: the coefficients' values are not recorded;
  // 2 per value (the coefficient-1 case) is known: 20, partial.
  const FormulaResult r = Value({{self, self, self, coeffs.Call().args[0]}, {}, "aten::_foreach_addcmul_"});
  EXPECT_EQ(r.status, MetricStatus::kPartial);
  EXPECT_EQ(r.value, 20);
  EXPECT_EQ(r.code, "value_in_tensor");
}

TEST(OptimizerForeach, NormAndMaxAreTheFullReductionRows) {
  CallBuilder store("lists");
  const ArgMeta self = FloatList(store, {{2, 3}, {4}});
  const ArgMeta scalars = FloatList(store, {{}, {}});
  // _foreach_norm(self, 2): linalg_vector_norm order 2 per tensor: squares N,
  // sum N-1, root 1 = 2N -> 12 + 8 = 20.
  EXPECT_EQ(Flops({{self, ArgMeta::Int(2), ArgMeta::None()}, {scalars}, "aten::_foreach_norm"}), 20);
  // Order inf: absolute values N + N-1 comparisons = 2N-1 -> 11 + 7 = 18.
  EXPECT_EQ(Flops({{self, ArgMeta::Double(INFINITY), ArgMeta::None()}, {scalars}, "aten::_foreach_norm"}), 18);
  // Its out= overload records no destination: 0-dim outputs are assumed: 20.
  EXPECT_EQ(Flops({{self, ArgMeta::Int(2), ArgMeta::None()}, {}, "aten::_foreach_norm"}), 20);
  // Order 3 has no count: every element unavailable -> unavailable.
  EXPECT_EQ(Value({{self, ArgMeta::Int(3), ArgMeta::None()}, {scalars}, "aten::_foreach_norm"}).status,
            MetricStatus::kUnavailable);
  // _foreach_max: N-1 comparisons per tensor -> 5 + 3 = 8.
  EXPECT_EQ(Flops({{self}, {scalars}, "aten::_foreach_max"}), 8);
}

TEST(OptimizerForeach, OutOverloadBroadcastsItsOperands) {
  CallBuilder store("lists");
  const ArgMeta a = FloatList(store, {{2, 1}});
  const ArgMeta b = FloatList(store, {{1, 3}});
  // _foreach_mul.List_out: destinations not recorded; (2,1) * (1,3) -> (2,3): 6.
  EXPECT_EQ(Flops({{a, b}, {}, "aten::_foreach_mul"}), 6);
}

TEST(OptimizerForeach, EachElementFollowsItsOwnDtypeRule) {
  CallBuilder store("lists");
  CallBuilder ints("i"), cplx("c");
  // neg over [float (2,3), int (4)]: 6 + 0 (integer arithmetic excluded) = 6.
  ints.TensorList({{2, 3}}, c10::kFloat).TensorList({{4}}, c10::kInt);
  std::vector<TensorMeta> mixed = {ints.Call().args[0].tensors()[0], ints.Call().args[1].tensors()[0]};
  const ArgMeta list = ArgMeta::Tensors(mixed.data(), 2);
  EXPECT_EQ(Flops({{list}, {list}, "aten::_foreach_neg"}), 6);
  // [float (2,3), complex (4)]: the complex element has no count; the float
  // one is known: partial 6.
  cplx.TensorList({{4}}, c10::kComplexFloat);
  mixed[1] = cplx.Call().args[0].tensors()[0];
  const FormulaResult r = Value({{list}, {list}, "aten::_foreach_neg"});
  EXPECT_EQ(r.status, MetricStatus::kPartial);
  EXPECT_EQ(r.value, 6);
  EXPECT_EQ(r.code, "complex_arithmetic");
  // Only complex elements: unavailable.
  mixed[0] = mixed[1];
  EXPECT_EQ(Value({{list}, {list}, "aten::_foreach_neg"}).status, MetricStatus::kUnavailable);
}

TEST(OptimizerForeach, MatrixProductsAndScalarBases) {
  CallBuilder store("lists");
  // _foreach_mm: the native mm row per pair: 2 * 2*3*4 = 48.
  const ArgMeta a = FloatList(store, {{2, 3}});
  const ArgMeta b = FloatList(store, {{3, 4}});
  const ArgMeta ab = FloatList(store, {{2, 4}});
  EXPECT_EQ(Flops({{a, b}, {ab}, "aten::_foreach_mm"}), 48);
  // _foreach_pow.ScalarAndTensor(2.0, exponents): one per value of (2,3): 6.
  EXPECT_EQ(Flops({{ArgMeta::Double(2.0), a}, {a}, "aten::_foreach_pow"}), 6);
  // An empty list: nothing to do.
  const ArgMeta empty = ArgMeta::Tensors(nullptr, 0);
  EXPECT_EQ(Flops({{empty, ArgMeta::Double(2.0)}, {}, "aten::_foreach_mul_"}), 0);
}

TEST(OptimizerForeach, EveryListRowHasItsPerTensorRow) {
  int rows = 0;
  for (const OperatorFormula& f : BuiltinOperatorFormulas()) {
    const std::string op(f.op);
    if (op.rfind("aten::_foreach_", 0) != 0) continue;
    ++rows;
    const std::string base = op.substr(std::string("aten::_foreach_").size());
    const std::string per_tensor = base == "norm" ? "aten::linalg_vector_norm" : "aten::" + base;
    EXPECT_NE(FindOperatorFormula(per_tensor), nullptr) << op << " has no per-tensor row " << per_tensor;
    EXPECT_EQ(f.flops, &optimizers::Foreach) << op;
  }
  EXPECT_EQ(rows, 44);  // the 44 names listed in formulas/registry_training.cc's optimizers block
}

// _fused_adam(w)_ arguments after the six lists.
struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
  bool amsgrad = false, maximize = false, grad_scale = false, found_inf = false;
};

Call FusedAdam(CallBuilder& store, const char* op, const AdamOptions& o) {
  const ArgMeta p = FloatList(store, {{2, 3}, {4}});
  const ArgMeta steps = FloatList(store, {{}, {}});
  const ArgMeta none_list = ArgMeta::Tensors(nullptr, 0);
  CallBuilder& scalar = store;
  scalar.Tensor({});
  const ArgMeta scale = scalar.Call().args.back();
  return {{p, p, p, p, o.amsgrad ? p : none_list, steps, ArgMeta::Double(o.lr), ArgMeta::Double(o.beta1),
           ArgMeta::Double(o.beta2), ArgMeta::Double(o.weight_decay), ArgMeta::Double(o.eps), ArgMeta::Bool(o.amsgrad),
           ArgMeta::Bool(o.maximize), o.grad_scale ? scale : ArgMeta::None(), o.found_inf ? scale : ArgMeta::None()},
          {},
          op};
}

TEST(OptimizerFused, AdamIsTheForLoopPerElementSequence) {
  CallBuilder store("lists");
  // Per element (torch/optim/adam.py _single_tensor_adam): lerp 3 + mul 1 +
  // addcmul(value=1-beta2) 3 + sqrt 1 + div 1 + add eps 1 + addcdiv(value=-step_size) 3 = 13;
  // 10 elements -> 130 (the step increment runs before the kernel).
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adam_", {})), 130);
  // amsgrad (maximum 1) and L2 weight decay (add with alpha=wd: 2): 16 -> 160.
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adam_", {.weight_decay = 0.01, .amsgrad = true})), 160);
  // AdamW: decoupled decay param.mul_(1 - lr*wd): 1 -> 14 -> 140; amsgrad 15 -> 150.
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adamw_", {.weight_decay = 0.01})), 140);
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adamw_", {.weight_decay = 0.01, .amsgrad = true})), 150);
  // Functional form, same row: 130.
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adam", {})), 130);
  // maximize (neg 1) and grad_scale (the kernel's divide 1): 15 -> 150.
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adam_", {.maximize = true, .grad_scale = true})), 150);
  // beta2 = 0: addcmul with value 1 is 2: 12 -> 120.
  EXPECT_EQ(Flops(FusedAdam(store, "aten::_fused_adam_", {.beta2 = 0})), 120);
}

TEST(OptimizerFused, ValueDependentStepsAreUnavailable) {
  CallBuilder store("lists");
  const FormulaResult skipped = Value(FusedAdam(store, "aten::_fused_adam_", {.found_inf = true}));
  EXPECT_EQ(skipped.status, MetricStatus::kUnavailable);
  EXPECT_EQ(skipped.code, "value_dependent_work");
  EXPECT_NE(skipped.message.find("130"), std::string::npos) << skipped.message;  // the applied step
  EXPECT_EQ(Value(FusedAdam(store, "aten::_fused_adam_", {.lr = -1})).status, MetricStatus::kUnavailable);
}

Call FusedSgd(CallBuilder& store, double weight_decay, double momentum, double dampening, bool nesterov,
              bool first_step) {
  const ArgMeta p = FloatList(store, {{2, 3}, {4}});
  const ArgMeta none_list = ArgMeta::Tensors(nullptr, 0);
  return {{p, p, momentum != 0 ? p : none_list, ArgMeta::Double(weight_decay), ArgMeta::Double(momentum),
           ArgMeta::Double(0.1), ArgMeta::Double(dampening), ArgMeta::Bool(nesterov), ArgMeta::Bool(false),
           ArgMeta::Bool(first_step), ArgMeta::None(), ArgMeta::None()},
          {},
          "aten::_fused_sgd_"};
}

TEST(OptimizerFused, SgdIsTheForLoopPerElementSequence) {
  CallBuilder store("lists");
  // Momentum 0.9, later step: buf.mul_ 1 + buf.add_(grad) 1 + param.add_(alpha=-lr) 2 = 4 -> 40.
  EXPECT_EQ(Flops(FusedSgd(store, 0, 0.9, 0, false, false)), 40);
  // First step: buf = clone(grad) (a copy) + param update 2 -> 20.
  EXPECT_EQ(Flops(FusedSgd(store, 0, 0.9, 0, false, true)), 20);
  // Nesterov + weight decay, later: wd 2 + 1 + 1 + nesterov add 2 + update 2 = 8 -> 80.
  EXPECT_EQ(Flops(FusedSgd(store, 0.01, 0.9, 0, true, false)), 80);
  // Dampening 0.5: buf.add_(grad, alpha=0.5) is 2: 5 -> 50.
  EXPECT_EQ(Flops(FusedSgd(store, 0, 0.9, 0.5, false, false)), 50);
  // No momentum (no buffers): the update alone, 2 -> 20.
  EXPECT_EQ(Flops(FusedSgd(store, 0, 0, 0, false, false)), 20);
}

TEST(OptimizerFused, AdagradIsTheForLoopPerElementSequence) {
  CallBuilder store("lists");
  const ArgMeta p = FloatList(store, {{2, 3}, {4}});
  const ArgMeta steps = FloatList(store, {{}, {}});
  auto call = [&](double lr_decay, double weight_decay) -> Call {
    return {{p, p, p, steps, ArgMeta::Double(0.01), ArgMeta::Double(lr_decay), ArgMeta::Double(weight_decay),
             ArgMeta::Double(1e-10), ArgMeta::Bool(false), ArgMeta::None(), ArgMeta::None()},
            {},
            "aten::_fused_adagrad_"};
  };
  // addcmul(value=1) 2 + sqrt 1 + add eps 1 + addcdiv(value=-clr) 3 = 7 -> 70.
  EXPECT_EQ(Flops(call(0, 0)), 70);
  // Weight decay adds grad.add(param, alpha=wd): 2 -> 9 -> 90.
  EXPECT_EQ(Flops(call(0, 0.01)), 90);
  // A negative lr_decay (torch.optim refuses it): the coefficient could be 1.
  EXPECT_EQ(Value(call(-0.5, 0)).status, MetricStatus::kUnavailable);
}

}  // namespace
}  // namespace torchscan
