// The module view over the same recorded calls: its own ownership (the
// outermost call with a module formula owns its subtree) and its tally.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "reports/module_report.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

OperatorPlan PlanModuleView(const BlockLog<Event>& events, OpCatalog& catalog);

// The module view's sums before its diagnostics are written (see OperatorSums).
struct ModuleSums {
  reports::ModuleTally t;  // totals and by_operator; no diagnostics
  Gaps gaps;
  // (code, op, metric) -> (calls, first message)
  std::map<std::tuple<std::string, std::string, int>, std::pair<int64_t, std::string>> issues;
  void Add(const ModuleSums& other);  // `other`'s calls came after these
};

// `layers` (optional) receives each call's values at indices 1..3 under its scope.
void AccumulateModuleView(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog, ModuleSums& sums,
                          const TallyRows& rows = {});
reports::ModuleTally FinishModuleView(ModuleSums sums, const TallyContext& context);
// Accumulate and Finish, starting from `before` (the folded calls' sums) when given.
reports::ModuleTally TallyModuleView(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog,
                                     const TallyContext& context, std::vector<reports::LayerTally>* layers = nullptr,
                                     const ModuleSums* before = nullptr);

}  // namespace torchscan
