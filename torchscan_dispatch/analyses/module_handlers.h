// Custom module handlers: per-metric estimates that replace a call's own
// value (module_call) or own its whole subtree (subtree; the rows inside it
// lose the metric and name the owner), counted once in the totals. C++
// handlers (Session::SetModuleHandler) run here after Stop(); the Python
// shim's (python_shim/torchscan/handlers.py) run in Python and hand their
// results over as JSON (ModuleResultsFromJson). Either way, this file alone
// decides what the results do to the layer rows and the totals
// (ApplyModuleHandlers).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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
  // Per scope, Note [Opened estimates]: the type of a native layer whose
  // built-in estimate covers the work of handled modules it never called,
  // and their paths (empty: none).
  struct Opening {
    std::string type;
    std::vector<std::string> covers;
  };
  std::vector<std::optional<Opening>> opens;
  bool any = false;  // some handler matched a call
  // The metadata the handlers' OpCalls showed, kept with what they said.
  std::deque<ResolvedCall> calls;
};

// Runs the handler of every call whose path has one (not failed calls).
HandlerOutcome RunModuleHandlers(const std::map<std::string, RegisteredModuleHandler>& handlers, const CallSet& set,
                                 OpCatalog& catalog);

// The results of handlers that ran outside the engine, for `scopes` (one
// entry per layer call, scope order), from
// [{"row": i, "metrics": {name: {"status", "known_value" (decimal string),
//   "scope", "method"}}, "diagnostics": [{"code", "severity", "metric",
//   "message"}], "opens": {"type", "covers": [path, ...]}}, ...]
// (every key but "row" optional). Invalid JSON or values are refused with
// a message that says what is wrong.
absl::StatusOr<HandlerOutcome> ModuleResultsFromJson(std::string_view json, const std::vector<Recorder::Scope>& scopes);

// Applies `outcome` to built-in layer tallies (LayerTallies' values):
// supplied metrics, covered metrics. With `totals` (the module view's tally
// of the same calls), also its totals and diagnostics.
void ApplyModuleHandlers(const HandlerOutcome& outcome, std::vector<reports::LayerTally>& layers,
                         reports::ModuleTally* totals = nullptr);

}  // namespace torchscan
