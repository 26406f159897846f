// The module view over the same recorded calls: its own ownership (the
// outermost call with a module formula owns its subtree) and its tally.
#pragma once

#include <string>
#include <vector>

#include "reports/module_report.h"
#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/operator_view.h"
#include "torchscan_dispatch/scan_state.h"

namespace torchscan {

OperatorPlan PlanModuleView(const BlockLog<Event>& events, OpCatalog& catalog);

// `layers` (optional) receives each call's values at indices 1..3 under its scope.
reports::ModuleTally TallyModuleView(const BlockLog<Event>& events, const OperatorPlan& plan,
                                     OpCatalog& catalog, const TallyContext& context,
                                     std::vector<reports::LayerTally>* layers = nullptr);

}  // namespace torchscan
