// The state of one Session (torchscan.h), shared by the files that
// implement it: session.cc (lifecycle, thread-local state, registration),
// deferred_calls.cc (caller formulas evaluated after Stop) and
// scan_reports.cc (the reports). Internal to the session layer.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <exception>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "reports/flop_report.h"
#include "reports/layers.h"
#include "reports/metric.h"
#include "reports/names.h"
#include "torchscan_built_against.h"
#include "absl/functional/function_ref.h"
#include "reports/version.h"
#include "torchscan_dispatch/analyses/aggregate.h"
#include "torchscan_dispatch/core/all_threads.h"
#include "torchscan_dispatch/analyses/communication.h"
#include "torchscan_dispatch/session/event_set.h"
#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/memory.h"
#include "torchscan_dispatch/analyses/memory_view.h"
#include "torchscan_dispatch/analyses/module_handlers.h"
#include "torchscan_dispatch/analyses/module_view.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/receptive_field.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/session/streaming.h"
#include "torchscan_dispatch/torchscan.h"
#include "torchscan_dispatch/analyses/trace.h"
#include "torchscan_dispatch/analyses/traffic.h"

namespace torchscan {

enum class Phase { kIdle, kActive, kStopped };

// A set of calls with its two ownership plans, built once.
struct Planned {
  std::unique_ptr<EventSet> set;
  std::optional<OperatorPlan> plan;         // operator view
  std::optional<OperatorPlan> module_plan;  // module view
  std::optional<HandlerOutcome> handlers;   // module handlers' results (Session::SetModuleHandler)
  std::optional<MemoryResult> memory;       // ScanOptions::memory, borrowed sets only (EventSet::memory)
  // The module view's pass over the calls of a set with no folded calls:
  // its sums and every scope's values (LayerTally indices 1..3), made once
  // for both the module report and the layer rows (a crawl asks for both).
  struct ModulePass {
    ModuleSums sums;
    std::vector<reports::LayerTally> scopes;
  };
  std::optional<ModulePass> module_pass;

  const OperatorPlan& Plan(OpCatalog& catalog, const Overrides& overrides) {
    if (!plan) plan = PlanOperatorView(set->events(), catalog, overrides);
    return *plan;
  }
  const OperatorPlan& ModulePlan(OpCatalog& catalog) {
    if (!module_plan) module_plan = PlanModuleView(set->events(), catalog);
    return *module_plan;
  }
  const ModulePass& Modules(OpCatalog& catalog) {
    if (!module_pass) {
      ModulePass pass;  // kept only once whole: a pass that throws leaves no half of it behind
      pass.scopes.resize(set->scopes.size());
      AccumulateModuleView(set->events(), ModulePlan(catalog), catalog, pass.sums, TallyRows{&pass.scopes});
      module_pass = std::move(pass);
    }
    return *module_pass;
  }
  const MemoryResult& Memory(OpCatalog& catalog) {
    if (!memory) memory = ComputeMemory(set->events(), set->scopes, *set->memory, catalog);
    return *memory;
  }
  const HandlerOutcome& Handlers(const std::map<std::string, RegisteredModuleHandler>& registered, OpCatalog& catalog) {
    if (!handlers) handlers = RunModuleHandlers(registered, *set, catalog);
    return *handlers;
  }
};

// One thread log cut at its settled prefix: every part of one report reads
// the same cut, so totals, threads and requests agree in a snapshot.
struct Cut {
  std::shared_ptr<ThreadLog> log;
  size_t count;
  int64_t folded = 0;  // calls folded before them (streaming scans)
};

struct Session::State {
  ScanOptions options;
  std::atomic<Phase> phase{Phase::kIdle};        // kAll: read by worker threads
  std::mutex report_mu;                          // one ScanReportJson at a time
  Recorder recorder;                             // Threads::kCurrent
  std::unique_ptr<AllThreadsScan> all;           // Threads::kAll
  std::vector<std::shared_ptr<ThreadLog>> logs;  // kAll, after Stop
  Overrides overrides;
  std::map<std::string, RegisteredModuleHandler> module_handlers;  // by module path
  std::thread::id thread;
  bool included_before = false;
  bool stopped_by_outer = false;  // an enclosing scan stopped first and stopped this one
  int64_t unattributed_at_start = 0;
  int64_t unattributed = 0;
  int64_t unattributed_zero_cost_at_start = 0;
  int64_t unattributed_zero_cost = 0;
  OpCatalog catalog;
  MemoryAttribution memory;  // ScanOptions::memory
  Planned calls;             // every call of the scan, after Stop
  // Streaming kAll scans: nonzero while a snapshot reads the logs at its cuts (no fold may move them).
  std::shared_ptr<std::atomic<int>> folds_paused = std::make_shared<std::atomic<int>>(0);

  // Layer rows aggregated across requests (ScanOptions::layer_rows; aggregate.h).
  bool Aggregated() const { return options.threads == Threads::kAll && options.layer_rows != LayerRowMode::kPerCall; }

  TallyContext Context() const {
    return {TORCHSCAN_BUILT_TORCH_VERSION, options.scope, unattributed, unattributed_zero_cost};
  }

  // kAll: the thread logs so far (all of them once stopped).
  std::vector<std::shared_ptr<ThreadLog>> ThreadLogs() const {
    if (phase == Phase::kStopped || !all) return logs;
    return all->Logs();
  }

  std::vector<Cut> Cuts() const {
    std::vector<Cut> cuts;
    for (const auto& log : ThreadLogs()) {
      log->Lock();
      cuts.push_back({log, log->recorder.SettledPrefix(), log->recorder.folded()});
      log->Unlock();
    }
    return cuts;
  }

  // The calls of this scan that pass `filter`: after Stop, or (kAll) a
  // snapshot of every thread's settled calls while the scan runs.
  std::unique_ptr<EventSet> Gather(const ReportFilter& filter, const std::vector<Cut>* cuts = nullptr) {
    auto set = std::make_unique<EventSet>();
    set->keep_call_index = Aggregated();
    if (options.threads == Threads::kCurrent) {
      set->Add(recorder, recorder.events().size(), 1, filter);
      return set;
    }
    std::vector<Cut> fresh;
    if (cuts == nullptr) cuts = &(fresh = Cuts());
    for (const Cut& cut : *cuts) {
      cut.log->Lock();
      set->Add(cut.log->recorder, cut.count, cut.log->number, filter);
      cut.log->Unlock();
    }
    return set;
  }

  Planned& Calls() {
    if (!calls.set) {
      calls.set = options.threads == Threads::kCurrent ? std::make_unique<EventSet>(recorder) : Gather({});
    }
    return calls;
  }
};

// The public API's errors are its own types (status.h); abseil's stay inside.
// The public API's errors are its own types (status.h); abseil's stay inside.
inline Status Public(const absl::Status& s) {
  return s.ok() ? Status() : Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}
template <class T>
StatusOr<T> Public(absl::StatusOr<T> s) {
  if (!s.ok()) return Public(s.status());
  return std::move(*s);
}

}  // namespace torchscan
