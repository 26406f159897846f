// Custom module handlers (Session::SetModuleHandler): run after Stop() on the
// recorded module calls, and applied to the layer tallies and the module
// view's totals. The same contract as the Python shim's
// (python_shim/torchscan/handlers.py): per-metric estimates that replace a
// call's own value (module_call) or own its whole subtree (subtree; the rows
// inside it lose the metric and name the owner), counted once in the totals.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reports/layers.h"
#include "reports/module_report.h"
#include "torchscan_dispatch/core/call_set.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/types.h"

namespace torchscan {

struct RegisteredModuleHandler {
  std::string method;                // "custom_module_handler:<name>"
  std::vector<std::string> metrics;  // owned metrics (empty: what each estimate names)
  MetricOwnership ownership = MetricOwnership::kModuleCall;
  ModuleHandler fn;
};

// What the handlers said about the calls of one set, computed once per set.
struct HandlerOutcome {
  struct Supplied {
    MetricStatus status = MetricStatus::kUnavailable;
    Count known = 0;
    MetricOwnership ownership = MetricOwnership::kModuleCall;
    std::string method;
  };
  // Per scope (CallSet::scopes order), per metric (1..3: module_flops,
  // macs, dmas in kLayerMetricNames order).
  std::vector<std::array<std::optional<Supplied>, 4>> supplied;
  // Per scope: the diagnostics of its call, with the metric index they are
  // about (0: all requested metrics).
  std::vector<std::vector<std::pair<int, reports::Diagnostic>>> diagnostics;
  bool any = false;  // some handler matched a call
  // The metadata the handlers' OpCalls showed, kept with what they said.
  std::deque<ResolvedCall> calls;
};

// Runs the handler of every call whose path has one (not failed calls).
HandlerOutcome RunModuleHandlers(const std::map<std::string, RegisteredModuleHandler>& handlers, const CallSet& set,
                                 OpCatalog& catalog);

// Applies `outcome` to built-in layer tallies (LayerTallies' values):
// supplied metrics, covered metrics. With `totals` (the module view's tally
// of the same calls), also its totals and diagnostics.
void ApplyModuleHandlers(const HandlerOutcome& outcome, std::vector<reports::LayerTally>& layers,
                         reports::ModuleTally* totals = nullptr);

}  // namespace torchscan
