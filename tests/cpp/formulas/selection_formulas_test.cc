// The computation-dtype rule, the computing factories and the
// torchscan_selection_v1 rows (formulas/CONVENTIONS.md) on tiny calls whose
// expected counts are written as arithmetic from the rows; and the rule that
// every operator-view row has a module-view formula or a stated reason.
#include <gtest/gtest.h>

#include <string>

#include "formulas/arithmetic.h"
#include "formulas/module_costs.h"
#include "formulas/registry.h"
#include "formulas/selection.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

using testing::Evaluate;

Count Flops(std::string_view op, const OpCall& call) {
  const FormulaResult r = Evaluate(op, call);
  EXPECT_EQ(r.status, MetricStatus::kComplete) << op << ": " << r.message;
  return r.value;
}

TEST(ComputationDtype, FloatingResultsOfIntegerOperandsAreCounted) {
  // sqrt of (2,3) int64 -> float: 6 roots; the same call with an int result: 0.
  CallBuilder sqrt_f("aten::sqrt");
  sqrt_f.Tensor({2, 3}, c10::kLong).Out({2, 3}, c10::kFloat);
  EXPECT_EQ(Flops("aten::sqrt", sqrt_f.Call()), 6);
  CallBuilder add_i("aten::add");
  add_i.Tensor({2, 3}, c10::kLong).Tensor({2, 3}, c10::kLong).Int(1).Out({2, 3}, c10::kLong);
  EXPECT_EQ(Flops("aten::add", add_i.Call()), 0);
  // Integer comparisons have a bool result: 0.
  CallBuilder lt("aten::lt");
  lt.Tensor({2, 3}, c10::kLong).Tensor({2, 3}, c10::kLong).Out({2, 3}, c10::kBool);
  EXPECT_EQ(Flops("aten::lt", lt.Call()), 0);
}

TEST(ComputationDtype, OutDestinationsFollowTheOperatorsPromotion) {
  // add(int, int, out=float): computed in int64, then converted: 0.
  CallBuilder add("aten::add");
  add.Tensor({2, 3}, c10::kLong).Tensor({2, 3}, c10::kLong).Int(1).Out({2, 3}, c10::kFloat);
  OpCall add_out = add.Call();
  add_out.out_form = true;
  EXPECT_EQ(Flops("aten::add", add_out), 0);
  // The functional form could not have a float result; as an out= call of
  // sqrt (which promotes integers) it is 6 roots.
  CallBuilder sqrt("aten::sqrt");
  sqrt.Tensor({2, 3}, c10::kLong).Out({2, 3}, c10::kFloat);
  OpCall sqrt_out = sqrt.Call();
  sqrt_out.out_form = true;
  EXPECT_EQ(Flops("aten::sqrt", sqrt_out), 6);
  EXPECT_TRUE(PromotesIntegersToFloat("aten::div_"));
  EXPECT_FALSE(PromotesIntegersToFloat("aten::mul"));
}

TEST(Factories, ComputedValues) {
  // linspace of 11: 2*11 + 2 = 24; of 1: 0. logspace of 5: 3*5 + 2 = 17.
  CallBuilder lin("aten::linspace");
  lin.Double(0).Double(1).Int(11).Out({11});
  EXPECT_EQ(Flops("aten::linspace", lin.Call()), 24);
  CallBuilder one("aten::linspace");
  one.Double(0).Double(1).Int(1).Out({1});
  EXPECT_EQ(Flops("aten::linspace", one.Call()), 0);
  CallBuilder log("aten::logspace");
  log.Double(0).Double(2).Int(5).Double(10).Out({5});
  EXPECT_EQ(Flops("aten::logspace", log.Call()), 17);
  // arange of 10 floats: 20; of 10 int64: integer arithmetic, 0.
  CallBuilder af("aten::arange");
  af.Double(0).Double(1).Double(0.1).Out({10});
  EXPECT_EQ(Flops("aten::arange", af.Call()), 20);
  CallBuilder ai("aten::arange");
  ai.Int(10).Out({10}, c10::kLong);
  EXPECT_EQ(Flops("aten::arange", ai.Call()), 0);
}

TEST(Selection, CeilLog2) {
  EXPECT_EQ(selection::CeilLog2(0), 0);
  EXPECT_EQ(selection::CeilLog2(1), 0);
  EXPECT_EQ(selection::CeilLog2(2), 1);
  EXPECT_EQ(selection::CeilLog2(3), 2);
  EXPECT_EQ(selection::CeilLog2(8), 3);
  EXPECT_EQ(selection::CeilLog2(9), 4);
}

TEST(Selection, Rows) {
  // sort (3, 5) along -1: 3 slices x 5*ceil(log2 5) = 3 x 15 = 45.
  CallBuilder sort("aten::sort");
  sort.Tensor({3, 5}).Int(-1).Bool(false).Out({3, 5}).Out({3, 5}, c10::kLong);
  EXPECT_EQ(Flops("aten::sort", sort.Call()), 45);
  // topk k = 4 over (3, 5): 3 x 5*2 = 30.
  CallBuilder topk("aten::topk");
  topk.Tensor({3, 5}).Int(4).Int(-1).Bool(true).Bool(true).Out({3, 4}).Out({3, 4}, c10::kLong);
  EXPECT_EQ(Flops("aten::topk", topk.Call()), 30);
  // kthvalue along dim 0 of (3, 5): 5 slices x 2*(3 - 1) = 20.
  CallBuilder kth("aten::kthvalue");
  kth.Tensor({3, 5}).Int(2).Int(0).Bool(false).Out({5}).Out({5}, c10::kLong);
  EXPECT_EQ(Flops("aten::kthvalue", kth.Call()), 20);
  // searchsorted of 6 queries in 7 boundaries: 6 x ceil(log2 8) = 18.
  CallBuilder ss("aten::searchsorted");
  ss.Tensor({7}).Tensor({6}).Bool(false).Bool(false).Out({6}, c10::kLong);
  EXPECT_EQ(Flops("aten::searchsorted", ss.Call()), 18);
  // histc of 10 values, 3 bins, [0, 1]: 6*10 + 2*4 + 2 = 70.
  CallBuilder h("aten::histc");
  h.Tensor({10}).Int(3).Double(0).Double(1).Out({3});
  EXPECT_EQ(Flops("aten::histc", h.Call()), 70);
  // A dim given by name (a Dimname, kOther) has no position: unavailable, never a guess.
  CallBuilder named("aten::sort");
  named.Tensor({3, 5}).Str("width").Bool(false).Out({3, 5}).Out({3, 5}, c10::kLong);
  EXPECT_EQ(Evaluate("aten::sort", named.Call()).status, MetricStatus::kUnavailable);
  // Integer values sort with integer comparisons: 0.
  CallBuilder isort("aten::sort");
  isort.Tensor({3, 5}, c10::kLong).Int(-1).Bool(false).Out({3, 5}, c10::kLong).Out({3, 5}, c10::kLong);
  EXPECT_EQ(Flops("aten::sort", isort.Call()), 0);
}

TEST(ModuleView, GroupedMm) {
  // x (8,4), w (2,4,8), offs (2): MACs 8*4*8 = 256; FLOPs 2*256 - 64 outputs = 448;
  // accesses 32 + 64 + 2 read + 64 written = 162.
  CallBuilder g("aten::_grouped_mm");
  g.Tensor({8, 4}).Tensor({2, 4, 8}).Tensor({2}, c10::kInt).None().None().Out({8, 8});
  const ModuleFormula* f = FindModuleFormula("aten::_grouped_mm");
  ASSERT_NE(f, nullptr);
  const ModuleCosts c = f->Evaluate(g.Call());
  EXPECT_EQ(c.macs.value, 256);
  EXPECT_EQ(c.flops.value, 448);
  EXPECT_EQ(c.dmas.value, 162);
}

TEST(ModuleView, EveryOperatorRowHasAModuleFormulaOrAStatedReason) {
  for (const OperatorFormula& f : BuiltinOperatorFormulas()) {
    const bool module = FindModuleFormula(f.op) != nullptr;
    const char* gap = ModuleViewGap(f.op);
    EXPECT_TRUE(module || gap != nullptr) << f.op << ": no module-view formula and no stated reason";
    EXPECT_FALSE(module && gap != nullptr) << f.op << ": a module formula and a stated gap";
  }
}

}  // namespace
}  // namespace torchscan
