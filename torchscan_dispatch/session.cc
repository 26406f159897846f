// Session: starts/stops a scan of one thread and turns its events into reports.
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
#include "torchscan_dispatch/aggregate.h"
#include "torchscan_dispatch/all_threads.h"
#include "torchscan_dispatch/communication.h"
#include "torchscan_dispatch/event_set.h"
#include "torchscan_dispatch/fallback.h"
#include "torchscan_dispatch/memory.h"
#include "torchscan_dispatch/memory_view.h"
#include "torchscan_dispatch/module_handlers.h"
#include "torchscan_dispatch/module_view.h"
#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/receptive_field.h"
#include "torchscan_dispatch/operator_view.h"
#include "torchscan_dispatch/scan_state.h"
#include "torchscan_dispatch/streaming.h"
#include "torchscan_dispatch/torchscan.h"
#include "torchscan_dispatch/trace.h"
#include "torchscan_dispatch/traffic.h"

namespace torchscan {

enum class Phase { kIdle, kActive, kStopped };

// A set of calls with its two ownership plans, built once.
struct Planned {
  std::unique_ptr<EventSet> set;
  std::optional<OperatorPlan> plan;         // operator view
  std::optional<OperatorPlan> module_plan;  // module view
  std::optional<HandlerOutcome> handlers;   // module handlers' results (Session::SetModuleHandler)
  std::optional<MemoryResult> memory;       // ScanOptions::memory, borrowed sets only (EventSet::memory)

  const OperatorPlan& Plan(OpCatalog& catalog, const Overrides& overrides) {
    if (!plan) plan = PlanOperatorView(set->events(), catalog, overrides);
    return *plan;
  }
  const OperatorPlan& ModulePlan(OpCatalog& catalog) {
    if (!module_plan) module_plan = PlanModuleView(set->events(), catalog);
    return *module_plan;
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

namespace {

// The public API's errors are its own types (status.h); abseil's stay inside.
Status Public(const absl::Status& s) {
  return s.ok() ? Status() : Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}
template <class T>
StatusOr<T> Public(absl::StatusOr<T> s) {
  if (!s.ok()) return Public(s.status());
  return std::move(*s);
}

std::string CanonicalOp(std::string_view op) {
  // Accept "aten::relu" and "aten.relu".
  std::string s(op);
  if (s.find("::") == std::string::npos) {
    if (auto dot = s.find('.'); dot != std::string::npos) s.replace(dot, 1, "::");
  }
  return s;
}

absl::Status CheckOpName(std::string_view op) {
  const std::string s = CanonicalOp(op);
  const auto sep = s.find("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= s.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchscan: operator names look like \"aten::relu\" (namespace::name, no overload); got \"",
                     std::string(op), "\""));
  }
  return absl::OkStatus();
}

nlohmann::json TensorJson(const TensorMeta& t) {
  if (!t.defined) return nullptr;
  nlohmann::json j = {{"dtype", reports::DtypeName(t.dtype)}, {"device", reports::DeviceName(t.device)}};
  if (t.nested) {
    j["shape"] = nullptr;
  } else {
    j["shape"] = std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
  }
  return {{"__tensor__", j}};
}

nlohmann::json ArgJson(const ArgMeta& a) {
  switch (a.kind) {
    case ArgKind::kNone:
      return nullptr;
    case ArgKind::kTensor:
      return TensorJson(a.tensor());
    case ArgKind::kInt:
      return a.to_int();
    case ArgKind::kDouble:
      return a.to_double();
    case ArgKind::kBool:
      return a.to_bool();
    case ArgKind::kIntList:
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case ArgKind::kBoolList: {
      nlohmann::json l = nlohmann::json::array();
      for (int64_t b : a.ints()) l.push_back(b != 0);
      return l;
    }
    case ArgKind::kDoubleList:
      return std::vector<double>(a.doubles().begin(), a.doubles().end());
    case ArgKind::kTensorList: {
      nlohmann::json l = nlohmann::json::array();
      for (const auto& t : a.tensors()) l.push_back(TensorJson(t));
      return l;
    }
    case ArgKind::kString:
      return std::string(a.str());
    case ArgKind::kOther:
      return {{"__other__", true}};
  }
  return nullptr;
}

}  // namespace

Session::Session(ScanOptions options) : state_(std::make_unique<State>()) { state_->options = std::move(options); }

Session::~Session() {
  if (!state_ || state_->phase != Phase::kActive) return;
  if (state_->options.threads == Threads::kAll) {
    (void)Stop();
    return;
  }
  if (state_->thread == std::this_thread::get_id()) {
    (void)Stop();  // also stops scans started inside it
    return;
  }
  // Still linked into another thread's scan chain that we cannot reach safely:
  // keep the recorder alive rather than leave that thread a dangling pointer.
  TORCH_WARN(
      "torchscan: a Session was destroyed while its scan was active on another thread; "
      "its recorder is leaked to keep that thread safe");
  (void)state_.release();
}

Status Session::SetOperatorFormula(std::string_view op, CallerFormula formula) {
  return Public([&]() -> absl::Status {
    if (state_->phase != Phase::kIdle) {
      return absl::FailedPreconditionError("torchscan: set caller formulas before Start()");
    }
    if (auto s = CheckOpName(op); !s.ok()) return s;
    if (!formula) return absl::InvalidArgumentError("torchscan: the caller formula is empty");
    state_->overrides.formulas[CanonicalOp(op)] = std::move(formula);
    return absl::OkStatus();
  }());
}

Status Session::DeferOperatorFormula(std::string_view op) {
  return Public([&]() -> absl::Status {
    if (state_->phase != Phase::kIdle) {
      return absl::FailedPreconditionError("torchscan: set caller formulas before Start()");
    }
    if (auto s = CheckOpName(op); !s.ok()) return s;
    state_->overrides.deferred.insert(CanonicalOp(op));
    return absl::OkStatus();
  }());
}

Status Session::SetModuleHandler(std::string_view path, ModuleHandler handler, ModuleHandlerOptions options) {
  return Public([&]() -> absl::Status {
    if (state_->phase != Phase::kIdle) {
      return absl::FailedPreconditionError("torchscan: set module handlers before Start()");
    }
    if (!handler) return absl::InvalidArgumentError("torchscan: the module handler is empty");
    if (options.name.empty()) {
      return absl::InvalidArgumentError(
          "torchscan: a module handler needs a name (ModuleHandlerOptions::name): its results' method is "
          "custom_module_handler:<name>");
    }
    for (const std::string& m : options.metrics) {
      if (m != "module_flops" && m != "macs" && m != "dmas") {
        return absl::InvalidArgumentError(
            absl::StrCat("torchscan: module handler metric \"", m, "\" is not one of module_flops, macs, dmas"));
      }
    }
    const std::string key(path);
    if (state_->module_handlers.count(key)) {
      return absl::AlreadyExistsError(absl::StrCat("torchscan: module scope \"", key, "\" already has a handler"));
    }
    state_->module_handlers[key] = {absl::StrCat("custom_module_handler:", options.name), std::move(options.metrics),
                                    options.ownership, std::move(handler)};
    return absl::OkStatus();
  }());
}

namespace {
absl::Status StopCurrentThreadScan(Session::State& s);

// What a streaming scan cannot do: it keeps sums, not calls (streaming.h).
absl::Status CheckStreaming(const Session::State& s) {
  if (!s.options.streaming) return absl::OkStatus();
  auto refuse = [](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchscan: a streaming scan (ScanOptions::streaming) keeps sums, not calls, so it cannot take ",
                     what, "; start a full scan (streaming off) for it"));
  };
  if (s.options.memory) return refuse("memory attribution (ScanOptions::memory)");
  if (s.options.timestamps) return refuse("traces (ScanOptions::timestamps)");
  if (!s.module_handlers.empty()) return refuse("module handlers (Session::SetModuleHandler)");
  if (!s.overrides.deferred.empty()) return refuse("deferred caller formulas (Session::DeferOperatorFormula)");
  if (s.options.fold_every == 0) {
    return absl::InvalidArgumentError(
        "torchscan: ScanOptions::fold_every must be at least 1 (calls held before a fold)");
  }
  return absl::OkStatus();
}
}  // namespace

Status Session::Start() {
  return Public([&]() -> absl::Status {
    State& s = *state_;
    if (s.phase == Phase::kActive) return absl::FailedPreconditionError("torchscan: this scan is already active");
    if (s.phase == Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: a Session scans once; create a new Session for another scan");
    }
    if (s.options.memory && s.options.threads == Threads::kAll) {
      return absl::InvalidArgumentError(
          "torchscan: memory attribution covers scans of the current thread; use ScanOptions::threads = "
          "Threads::kCurrent with ScanOptions::memory = true");
    }
    if (auto st = CheckStreaming(s); !st.ok()) return st;
    if (auto st = EnsureFallbackInstalled(); !st.ok()) return st;
    if (ThreadRecordingPaused()) {
      // Every call of this thread would pass unrecorded: a complete zero.
      return absl::FailedPreconditionError(
          "torchscan: this thread's recording is paused (TorchScan's own analysis, such as a custom module "
          "handler or the token analysis of crawl_module, or a torch.compile compile is running on it), so a "
          "scan started now would count none of its calls; start the scan outside that work");
    }
    s.thread = std::this_thread::get_id();
    if (s.options.layer_rows == LayerRowMode::kAggregated && s.options.threads != Threads::kAll) {
      return absl::InvalidArgumentError(
          "torchscan: layer rows aggregated across requests (LayerRowMode::kAggregated) need ScanOptions::threads = "
          "Threads::kAll; a scan of the current thread reports one row per module call");
    }
    if (s.options.threads == Threads::kAll) {
      s.all = std::make_unique<AllThreadsScan>(s.options.torchscript_scopes, s.options.join_on_first_call,
                                               s.options.record_owned_children, s.options.torchscript_requests,
                                               s.options.timestamps);
      s.all->aggregate_layers = s.Aggregated();
      s.all->keep_requests = s.options.per_request_rows;
      if (s.options.streaming) {
        const Overrides* overrides = &s.overrides;
        std::shared_ptr<const std::atomic<int>> paused = s.folds_paused;
        s.all->make_folder = [overrides, paused] { return std::make_shared<Folder>(overrides, paused); };
        s.all->fold_every = s.options.fold_every;
      }
      if (auto st = s.all->Start(); !st.ok()) {
        s.all.reset();
        return st;
      }
      (void)AllThreadsLog();  // the starting thread joins now
      s.phase = Phase::kActive;
      return absl::OkStatus();
    }
    s.included_before = c10::impl::tls_is_dispatch_key_included(kModeKey);
    s.unattributed_at_start = UnattributedCalls().load(std::memory_order_relaxed);
    s.unattributed_zero_cost_at_start = UnattributedZeroCostCalls().load(std::memory_order_relaxed);
    s.recorder.torchscript_scopes = s.options.torchscript_scopes;
    s.recorder.torchscript_requests = s.options.torchscript_requests;
    s.recorder.record_owned_children = s.options.record_owned_children;
    s.recorder.timestamps = s.options.timestamps;
    if (s.options.streaming) {
      s.recorder.folder = std::make_shared<Folder>(&s.overrides);
      s.recorder.fold_every = s.options.fold_every;
    }
    if (s.options.torchscript_scopes) AcquireTorchScriptCallback();
    s.recorder.outer = ThreadTopRecorder();
    s.recorder.stop_orphaned = [&s] {
      s.stopped_by_outer = true;
      (void)StopCurrentThreadScan(s);
    };
    ThreadTopRecorder() = &s.recorder;
    if (s.options.memory) s.memory.Start(s.recorder);
    c10::impl::tls_set_dispatch_key_included(kModeKey, true);
    s.phase = Phase::kActive;
    return absl::OkStatus();
  }());
}

Status Session::Stop() {
  return Public([&]() -> absl::Status {
    State& s = *state_;
    if (s.phase != Phase::kActive) {
      return absl::FailedPreconditionError(
          s.stopped_by_outer ? "torchscan: this scan was already stopped when a scan enclosing it stopped "
                               "(stop scans in reverse order of starting them)"
                             : "torchscan: this scan is not active");
    }
    if (s.options.threads == Threads::kAll) {
      // Any thread may stop it; calls still running are left out (in_flight).
      s.all->Stop();
      // Pauses taken under it with no scan of the thread's own have no owner
      // (PauseThreadRecordingForScan); one an interrupt kept from its resume
      // ends here, as a thread scan's own do when it stops.
      ReleasePausesOf(nullptr);
      s.logs = s.all->Logs();
      (void)LeaveFinishedAllThreadsScan();
      s.phase = Phase::kStopped;
      return absl::OkStatus();
    }
    if (s.thread != std::this_thread::get_id()) {
      return absl::FailedPreconditionError("torchscan: stop a scan on the thread that started it");
    }
    return StopCurrentThreadScan(s);
  }());
}

namespace {

absl::Status StopCurrentThreadScan(Session::State& s) {
  bool enclosing = false;
  for (Recorder* r = ThreadTopRecorder(); r != nullptr && !enclosing; r = r->outer) enclosing = r == &s.recorder;
  if (!enclosing) {
    return absl::FailedPreconditionError("torchscan: this scan is not among the active scans of this thread");
  }
  // Scans started inside this one and never stopped (a workload that raised
  // past them, or forgot them) end with it: none may outlive its enclosing scan.
  int orphans = 0;
  while (ThreadTopRecorder() != &s.recorder) {
    ThreadTopRecorder()->stop_orphaned();
    ++orphans;
  }
  if (orphans > 0) {
    TORCH_WARN("torchscan: ", orphans,
               " scan(s) started inside this one were never stopped; "
               "they were stopped with it and report the calls made until now");
  }
  // Pauses this scan took and never resumed (an interrupt between the two)
  // end with it, so the thread records again for the next scan.
  ReleasePausesOf(&s.recorder);
  s.memory.Stop(s.recorder);
  if (s.recorder.timestamps) s.recorder.stopped_ns = SteadyNowNs();
  ThreadTopRecorder() = s.recorder.outer;
  s.recorder.outer = nullptr;
  s.recorder.stop_orphaned = nullptr;
  if (s.options.torchscript_scopes) ReleaseTorchScriptCallback();
  // Only our key's bit changes, so guards that exited meanwhile stay intact.
  c10::impl::tls_set_dispatch_key_included(kModeKey, s.included_before);
  s.unattributed = UnattributedCalls().load(std::memory_order_relaxed) - s.unattributed_at_start;
  s.unattributed_zero_cost =
      UnattributedZeroCostCalls().load(std::memory_order_relaxed) - s.unattributed_zero_cost_at_start;
  s.phase = Phase::kStopped;
  return absl::OkStatus();
}

// Runs `f` on the recorder that holds the calling thread's calls in `s`.
absl::Status WithThreadRecorder(Session::State& s, absl::FunctionRef<absl::Status(Recorder&)> f) {
  if (s.phase != Phase::kActive) return absl::FailedPreconditionError("torchscan: this scan is not active");
  if (s.options.threads == Threads::kCurrent) {
    if (s.thread != std::this_thread::get_id()) {
      return absl::FailedPreconditionError(
          "torchscan: module scopes and requests belong to the scanning thread; scan with "
          "ScanOptions::threads = Threads::kAll to cover worker threads");
    }
    return f(s.recorder);
  }
  std::shared_ptr<ThreadLog> log = AllThreadsLog();
  if (!log) return absl::FailedPreconditionError("torchscan: this scan is not active");
  log->Lock();
  absl::Status st =
      log->sealed ? absl::FailedPreconditionError("torchscan: this scan is not active") : f(log->recorder);
  log->Unlock();
  return st;
}

}  // namespace

Status Session::SetModuleLabels(std::vector<std::string> labels) {
  return Public([&]() -> absl::Status {
    std::sort(labels.begin(), labels.end());
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      r.SetLabels(std::move(labels));
      return absl::OkStatus();
    });
  }());
}

Status Session::EnterModuleLabel(std::string_view label) {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      r.EnterLabel(label);
      return absl::OkStatus();
    });
  }());
}

Status Session::ExitModuleLabel(std::string_view label) {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      r.ExitLabel(label);
      return absl::OkStatus();
    });
  }());
}

bool Session::active() const { return state_->phase == Phase::kActive; }

namespace {
// `count` summed over the recorders of the scan (each thread log locked).
size_t SumOverRecorders(const Session::State& s, absl::FunctionRef<size_t(const Recorder&)> count) {
  if (s.options.threads == Threads::kCurrent) return count(s.recorder);
  size_t n = 0;
  for (const auto& log : s.ThreadLogs()) {
    log->Lock();
    n += count(log->recorder);
    log->Unlock();
  }
  return n;
}
}  // namespace

size_t Session::recorded_calls() const {
  return SumOverRecorders(*state_, [](const Recorder& r) { return static_cast<size_t>(r.recorded()); });
}

size_t Session::held_calls() const {
  return SumOverRecorders(*state_, [](const Recorder& r) { return r.events().size(); });
}

std::vector<std::string> Session::RecordedOperators() const {
  std::set<std::string> names;
  auto add = [&names](const BlockLog<Event>& events) {
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& n = events[i].op().operator_name();
      names.insert(n.overload_name.empty() ? n.name : absl::StrCat(n.name, ".", n.overload_name));
    }
  };
  auto add_folded = [&names](const Recorder& r) {
    if (r.folder) names.insert(r.folder->folded().operators_seen.begin(), r.folder->folded().operators_seen.end());
  };
  const State& s = *state_;
  if (s.options.threads == Threads::kCurrent) {
    add(s.recorder.events());
    add_folded(s.recorder);
  } else {
    for (const auto& log : s.ThreadLogs()) {
      log->Lock();
      add(log->recorder.events());
      add_folded(log->recorder);
      log->Unlock();
    }
  }
  return {names.begin(), names.end()};
}

Status Session::BeginRequest(std::string_view id) {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      if (!r.BeginRequest(std::string(id))) {
        return absl::FailedPreconditionError("torchscan: a request is already open in this thread; end it first");
      }
      return absl::OkStatus();
    });
  }());
}

Status Session::EndRequest() {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      if (!r.EndRequest()) return absl::FailedPreconditionError("torchscan: no request is open in this thread");
      return absl::OkStatus();
    });
  }());
}

StatusOr<std::string> Session::DeferredCallsJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
    const auto& events = s.Calls().set->events();
    const OperatorPlan& plan = s.Calls().Plan(s.catalog, s.overrides);
    nlohmann::json calls = nlohmann::json::array();
    for (size_t i = 0; i < events.size(); ++i) {
      if (plan.covered[i] || plan.kind[i] != CallKind::kDeferred || events[i].raised()) continue;
      const Event& e = events[i];
      const OpInfo& info = s.catalog.Get(e.op());
      nlohmann::json args = nlohmann::json::array(), kwargs = nlohmann::json::object();
      const auto& schema_args = e.op().schema().arguments();
      for (size_t a = 0; a < e.args().size() && a < schema_args.size(); ++a) {
        if (schema_args[a].kwarg_only()) {
          kwargs[schema_args[a].name()] = ArgJson(e.args()[a]);
        } else {
          args.push_back(ArgJson(e.args()[a]));
        }
      }
      nlohmann::json out;
      if (e.outputs().size() == 1) {
        out = ArgJson(e.outputs()[0]);
      } else {
        out = nlohmann::json::array();
        for (const auto& o : e.outputs()) out.push_back(ArgJson(o));
      }
      calls.push_back({{"index", i},
                       {"op", info.packet},
                       {"overload", info.overload},
                       {"args", args},
                       {"kwargs", kwargs},
                       {"out", out}});
    }
    return calls.dump();
  }());
}

Status Session::SetDeferredResultsJson(std::string_view json) {
  return Public([&]() -> absl::Status {
    State& s = *state_;
    if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
    nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return absl::InvalidArgumentError("torchscan: deferred results must be a JSON object");
    for (const auto& [key, value] : j.items()) {
      int32_t index = 0;
      // Counts up to 2^128 - 1 travel exactly as decimal strings (nlohmann
      // holds integers up to 2^64 - 1 only); non-negative JSON integers work too.
      std::optional<Count> count;
      if (value.is_number_unsigned()) count = Count(value.get<uint64_t>());
      if (value.is_string()) count = ParseCount(value.get<std::string>());
      if (!absl::SimpleAtoi(key, &index) || !count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "torchscan: deferred result \"", key,
            "\" must map a call index to a non-negative integer count up to 2^128 - 1 (a number or decimal string)"));
      }
      s.overrides.deferred_values[index] = *count;
    }
    return absl::OkStatus();
  }());
}

namespace {

// The three report parts of one set of calls.
nlohmann::json FlopJson(Session::State& s, Planned& p) {
  const Folded* folded = p.set->folded();
  return reports::FlopReportJson(TallyOperatorView(p.set->events(), p.set->label_sets, p.Plan(s.catalog, s.overrides),
                                                   s.catalog, s.overrides, s.Context(), nullptr,
                                                   folded ? &folded->operators : nullptr));
}

std::vector<reports::LayerTally> LayerTallies(Session::State& s, Planned& p, bool handlers = true);

nlohmann::json ModuleJson(Session::State& s, Planned& p) {
  const Folded* folded = p.set->folded();
  reports::ModuleTally t = TallyModuleView(p.set->events(), p.ModulePlan(s.catalog), s.catalog, s.Context(), nullptr,
                                           folded ? &folded->modules : nullptr);
  if (!s.module_handlers.empty()) {
    // LayerTallies applies the handlers to the layers; the totals take them from the built-in rows.
    std::vector<reports::LayerTally> layers = LayerTallies(s, p, /*handlers=*/false);
    ApplyModuleHandlers(p.Handlers(s.module_handlers, s.catalog), layers, &t);
  }
  return reports::ModuleReportJson(t);
}

// Every layer call's tally: its own calls in both views and its output's
// field; with `handlers`, the module handlers' estimates applied.
std::vector<reports::LayerTally> LayerTallies(Session::State& s, Planned& p, bool handlers) {
  const EventSet& set = *p.set;
  const auto& scopes = set.scopes;
  if (scopes.empty()) return {};  // no module calls: no pass over the calls
  const int64_t size = static_cast<int64_t>(set.events().size());
  std::vector<reports::LayerTally> layers(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) {
    layers[i].path = scopes[i].path;
    layers[i].call_index = scopes[i].call_index;
    layers[i].parent = scopes[i].parent;
    layers[i].depth = scopes[i].parent >= 0 ? layers[scopes[i].parent].depth + 1 : 0;
    layers[i].failed = scopes[i].failed;
    layers[i].thread = scopes[i].thread;
    if (scopes[i].request >= 0) layers[i].request = set.requests[scopes[i].request];
  }
  // Streaming scans: the folded module calls' values and fields come from the folds.
  const Folded* folded = set.folded();
  auto folded_row = [&](size_t i) -> const FoldedRow* {
    return folded && i < folded->scopes.size() && folded->scopes[i].folded ? &folded->scopes[i] : nullptr;
  };
  for (size_t i = 0; i < scopes.size(); ++i) {
    if (const FoldedRow* f = folded_row(i)) StartRow(layers[i], *f);
  }
  {
    OperatorSums op_sums;  // the totals are FlopJson's; only the rows are wanted here
    ModuleSums module_sums;
    AccumulateOperatorView(set.events(), set.label_sets, p.Plan(s.catalog, s.overrides), s.catalog, s.overrides,
                           op_sums, TallyRows{&layers});
    AccumulateModuleView(set.events(), p.ModulePlan(s.catalog), s.catalog, module_sums, TallyRows{&layers});
  }
  std::vector<FieldQuery> queries(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) {
    queries[i] = {scopes[i].end_event < 0 ? size : scopes[i].end_event, scopes[i].outputs};
  }
  std::vector<std::optional<Field>> fields(scopes.size());
  if (!folded) {
    fields = ComputeFields(set.events(), p.ModulePlan(s.catalog), s.catalog, queries);
  } else {
    // Each thread's calls continue the data flow its folds left.
    for (const EventSet::ThreadFlow& flow : set.flows) {
      std::vector<size_t> mine;
      std::vector<FieldQuery> asked;
      for (size_t i = 0; i < scopes.size(); ++i) {
        if (folded_row(i) || scopes[i].begin_event < static_cast<int64_t>(flow.begin) ||
            scopes[i].begin_event > static_cast<int64_t>(flow.end) ||
            (set.flows.size() > 1 && scopes[i].thread != flow.thread)) {
          continue;
        }
        mine.push_back(i);
        asked.push_back(queries[i]);
      }
      FieldFlow state = flow.fields;
      auto answers = state.Run(set.events(), flow.begin, flow.end, p.ModulePlan(s.catalog), s.catalog, asked);
      for (size_t k = 0; k < mine.size(); ++k) fields[mine[k]] = std::move(answers[k]);
    }
    for (size_t i = 0; i < scopes.size(); ++i) {
      if (const FoldedRow* f = folded_row(i)) fields[i] = f->field;
    }
  }
  if (set.memory != nullptr && set.memory->enabled) {
    const MemoryResult& memory = p.Memory(s.catalog);
    for (size_t i = 0; i < scopes.size(); ++i) {
      layers[i].memory = true;
      layers[i].memory_status = memory.scopes[i].status;
      layers[i].peak_memory = memory.scopes[i].peak;
      layers[i].allocated_bytes = memory.scopes[i].allocated;
    }
  }
  for (size_t i = 0; i < scopes.size(); ++i) SetLayerField(layers[i], fields[i]);
  if (handlers && !s.module_handlers.empty()) ApplyModuleHandlers(p.Handlers(s.module_handlers, s.catalog), layers);
  return layers;
}

nlohmann::json LayersOf(Session::State& s, Planned& p, const std::array<bool, 4>& requested) {
  return reports::LayersJson(LayerTallies(s, p), s.options.scope, requested);
}

// A tally as LayersJson writes it (reports/layers.cc: LayersJson, FieldJson
// and MetricJson), as values: the same statuses, counts, reasons and axes.
LayerRow RowOf(reports::LayerTally& l) {
  LayerRow row;
  row.path = std::move(l.path);
  row.call_index = l.call_index;
  row.parent = l.parent;
  row.depth = l.depth;
  row.failed = l.failed;
  row.thread = l.thread;
  row.request = std::move(l.request);
  row.memory = l.memory;
  row.memory_status = l.memory_status;
  row.peak_memory = l.peak_memory;
  row.allocated_bytes = l.allocated_bytes;
  using Custom = reports::LayerTally::Custom;
  for (int m = 0; m < 4; ++m) {
    row.owner[m] = l.owner[m];
    if (l.custom[m] != Custom::kNone) {
      row.ownership[m] = l.custom[m] == Custom::kSubtree ? MetricOwnership::kSubtree : MetricOwnership::kModuleCall;
      row.method[m] = std::move(l.custom_method[m]);
    }
  }
  for (int m = 0; m < 4; ++m) {
    MetricStatus status = l.failed        ? MetricStatus::kUnavailable
                          : l.complete[m] ? MetricStatus::kComplete
                                          : MetricStatus::kPartial;
    // A sum past 2^128 - 1 is refused as a value: its last exact sum is a lower bound.
    if (status == MetricStatus::kComplete && !l.known[m].exact()) status = MetricStatus::kPartial;
    if (l.custom_unavailable[m]) status = MetricStatus::kUnavailable;
    row.status[m] = status;
    row.known[m] = status == MetricStatus::kUnavailable ? Count(0) : Count::FromWide(l.known[m].wide());
  }
  using S = reports::LayerTally::FieldState;
  for (int k = 0; k < 3; ++k) {
    LayerRow::Field& f = row.fields[k];
    if (l.failed) {
      f.reason = "the forward raised";
    } else if (l.field_state == S::kUnseen) {
      f.reason = "the output was not seen by the data flow";
    } else if (l.field_state == S::kNotApplicable) {
      f.not_applicable = true;
      f.reason = l.field_reason;
    } else if (l.field_state == S::kUnknown || l.field_axes.empty()) {
      f.reason = l.field_reason;
    } else {
      bool agree = true;
      for (const auto& a : l.field_axes) {
        f.axes.emplace_back(a.dim, a.values[k]);
        agree = agree && a.values[k] == l.field_axes[0].values[k];
      }
      if (agree) {
        f.status = MetricStatus::kComplete;
        f.value = l.field_axes[0].values[k];
      } else {
        f.reason = "the spatial axes differ: see axes";
      }
    }
  }
  return row;
}

// Where ScanReportJson splices the layers' text in (a control character no
// report string holds unescaped, so the escaped form is unique).
constexpr char kLayersPlaceholder[] = "\x01torchscan layers\x01";

bool Unfiltered(const ReportFilter& f) { return f.threads.empty() && f.requests.empty(); }

}  // namespace

namespace {

// A streaming scan's folded calls are sums by thread, not by request.
absl::Status CheckFilter(const Session::State& s, const ReportFilter& filter) {
  if (!s.options.streaming || filter.requests.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "torchscan: a streaming scan keeps each request's totals (the scan report's \"requests\"), not its calls; "
      "filter by request in a full scan (streaming off)");
}

// One report part of a stopped scan's calls (all of them, or those `filter` keeps).
absl::StatusOr<std::string> StoppedReport(Session::State& s, const ReportFilter& filter,
                                          absl::FunctionRef<nlohmann::json(Planned&)> part) {
  if (s.phase != Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
  }
  if (auto st = CheckFilter(s, filter); !st.ok()) return st;
  if (Unfiltered(filter)) return reports::DumpJson(part(s.Calls()));  // counts past 2^64 - 1 exact
  Planned p{s.Gather(filter)};
  return reports::DumpJson(part(p));
}

}  // namespace

StatusOr<std::string> Session::FlopReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    return StoppedReport(*state_, filter, [&](Planned& p) { return FlopJson(*state_, p); });
  }());
}

StatusOr<std::string> Session::ModuleReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    return StoppedReport(*state_, filter, [&](Planned& p) { return ModuleJson(*state_, p); });
  }());
}

StatusOr<std::string> Session::TrafficJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    if (state_->options.streaming) {
      return absl::InvalidArgumentError(
          "torchscan: the traffic view values every call; a streaming scan keeps sums: start a full scan "
          "(streaming off) for it");
    }
    return StoppedReport(*state_, filter, [&](Planned& p) {
      State& s = *state_;
      const TrafficResult t = ComputeTraffic(p.set->events(), p.Plan(s.catalog, s.overrides), s.catalog, s.overrides);
      return torchscan::TrafficJson(p.set->events(), p.set->scopes, t, s.catalog);
    });
  }());
}

// The memory report of the whole scan (ScanOptions::memory).
static absl::StatusOr<nlohmann::json> MemoryPart(Session::State& s, Planned& p) {
  if (!s.options.memory) {
    return absl::FailedPreconditionError(
        "torchscan: this scan did not attribute memory; start it with "
        "memory=True (Python) or ScanOptions::memory = true (C++)");
  }
  if (p.set->memory == nullptr) {
    return absl::InvalidArgumentError(
        "torchscan: the memory report covers the whole scan; ask for it without a filter");
  }
  return MemoryJson(p.Memory(s.catalog), s.options.scope);
}

StatusOr<std::string> Session::MemoryReportJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    absl::StatusOr<nlohmann::json> j = MemoryPart(s, s.Calls());
    if (!j.ok()) return j.status();
    return reports::DumpJson(*j);
  }());
}

StatusOr<std::string> Session::TraceJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the trace is available once the scan has stopped");
    }
    if (!s.options.timestamps) {
      return absl::FailedPreconditionError(
          "torchscan: this scan took no timestamps; start it with trace=True (Python) "
          "or ScanOptions::timestamps = true (C++)");
    }
    Planned& p = s.Calls();
    const TrafficResult t = ComputeTraffic(p.set->events(), p.Plan(s.catalog, s.overrides), s.catalog, s.overrides);
    // One track per thread, labelled with its number (the report's
    // threads[].thread) and, when it has one, its name.
    std::vector<TraceThread> threads;
    int64_t stopped_ns = s.recorder.stopped_ns;
    if (s.options.threads == Threads::kCurrent) {
      threads.push_back({1, "scanned thread"});
    } else {
      for (const auto& log : s.logs) {
        threads.push_back({log->number, log->name.empty() ? absl::StrCat("thread ", log->number)
                                                          : absl::StrCat(log->name, " (thread ", log->number, ")")});
      }
      stopped_ns = s.all->stopped_ns();
    }
    return reports::DumpJson(torchscan::TraceJson(*p.set, threads, stopped_ns, t, s.catalog));
  }());
}

// Streaming scans that aggregate layer rows drop each module call once folded.
static absl::Status CheckPerCallRows(const Session::State& s) {
  if (!s.options.streaming || !s.Aggregated()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "torchscan: this streaming scan aggregates layer rows across requests (ScanOptions::layer_rows), so it "
      "keeps no row per module call; read ScanReportJson's \"aggregate\" (or the last requests' rows, "
      "ScanOptions::per_request_rows), or scan with LayerRowMode::kPerCall");
}

StatusOr<std::string> Session::LayersJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    if (auto st = CheckPerCallRows(*state_); !st.ok()) return st;
    return StoppedReport(*state_, filter, [&](Planned& p) { return LayersOf(*state_, p, {true, true, true, true}); });
  }());
}

StatusOr<std::vector<LayerRow>> Session::LayerRows(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::vector<LayerRow>> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    if (auto st = CheckFilter(s, filter); !st.ok()) return st;
    if (auto st = CheckPerCallRows(s); !st.ok()) return st;
    std::vector<reports::LayerTally> tallies;
    if (Unfiltered(filter)) {
      tallies = LayerTallies(s, s.Calls());
    } else {
      Planned p{s.Gather(filter)};
      tallies = LayerTallies(s, p);
    }
    std::vector<LayerRow> rows;
    rows.reserve(tallies.size());
    for (reports::LayerTally& l : tallies) rows.push_back(RowOf(l));
    return rows;
  }());
}

StatusOr<int32_t> Session::PushModuleScope(std::string_view path) {
  return Public([&]() -> absl::StatusOr<int32_t> {
    int32_t id = -1;
    absl::Status st = WithThreadRecorder(*state_, [&](Recorder& r) {
      id = r.PushScope(std::string(path));
      return absl::OkStatus();
    });
    if (!st.ok()) return st;
    return id;
  }());
}

Status Session::PopModuleScope(int32_t scope, bool failed, std::vector<uintptr_t> outputs) {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      if (!r.PopScope(scope, failed, std::move(outputs))) {
        return absl::InvalidArgumentError(absl::StrCat("torchscan: module scope ", scope, " is not open"));
      }
      return absl::OkStatus();
    });
  }());
}

std::vector<ThreadInfo> Session::ThreadsSeen() const {
  const State& s = *state_;
  std::vector<ThreadInfo> out;
  if (s.options.threads == Threads::kCurrent) {
    out.push_back({1, "", s.recorder.recorded()});
    return out;
  }
  for (const auto& log : s.ThreadLogs()) {
    log->Lock();
    out.push_back({log->number, log->name, log->recorder.recorded()});
    log->Unlock();
  }
  return out;
}

StatusOr<std::string> Session::ScanReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    std::lock_guard<std::mutex> lock(s.report_mu);
    if (s.phase == Phase::kIdle) return absl::FailedPreconditionError("torchscan: the scan has not started");
    if (s.phase == Phase::kActive && s.options.threads == Threads::kCurrent) {
      return absl::FailedPreconditionError(
          "torchscan: a scan of the current thread reports once it has stopped; snapshots while it runs "
          "need ScanOptions::threads = Threads::kAll");
    }
    const bool snapshot = s.phase == Phase::kActive;
    if (auto st = CheckFilter(s, filter); !st.ok()) return st;
    // Threads keep recording meanwhile; folding waits until the report is built.
    struct PauseFolds {
      std::atomic<int>& n;
      explicit PauseFolds(std::atomic<int>& c) : n(c) { ++n; }
      ~PauseFolds() { --n; }
    } pause(*s.folds_paused);
    // Every part of the report reads the same cut of each thread's log.
    const std::vector<Cut> cuts = s.options.threads == Threads::kAll ? s.Cuts() : std::vector<Cut>();
    Planned fresh;
    Planned& p = !snapshot && Unfiltered(filter) ? s.Calls() : (fresh.set = s.Gather(filter, &cuts), fresh);
    const bool op_view = s.options.operator_view && !s.options.structure;
    const bool module_view = s.options.module_view && !s.options.structure;
    nlohmann::json j;
    j["kind"] = "torchscan_scan_report";
    j["schema_version"] = reports::kSchemaVersion;
    j["context"] = {{"torch_version", TORCHSCAN_BUILT_TORCH_VERSION},
                    {"torchscan_version", reports::kTorchscanVersion},
                    {"threads", s.options.threads == Threads::kAll ? "all" : "current"},
                    {"analysis_mode", s.options.structure ? "structure" : "full"},
                    {"snapshot", snapshot},
                    {"in_flight_calls", p.set->in_flight},
                    {"streaming", s.options.streaming},
                    // "aggregated": layer rows across requests in "aggregate" (aggregate.h).
                    {"layer_rows", s.Aggregated() ? "aggregated" : "per_call"},
                    {"unattributed_calls", s.unattributed}};
    // Distributed jobs (communication.h): this rank's place and its collectives' bytes.
    if (const nlohmann::json d = DistributedContextJson(); !d.is_null()) j["context"].update(d);
    {
      CommunicationSums comm = p.set->folded() ? p.set->folded()->communication : CommunicationSums();
      AccumulateCommunication(p.set->events(), s.catalog, p.set->first_index, comm);
      j["communication"] = FinishCommunication(std::move(comm), s.options.scope);
    }
    j["operator_flops"] = op_view ? FlopJson(s, p) : nlohmann::json();
    if (s.options.memory && p.set->memory != nullptr) j["memory"] = *MemoryPart(s, p);
    j["module_report"] = module_view ? ModuleJson(s, p) : nlohmann::json();
    // The layers are spliced in as text at the end: with a row per module
    // call they are most of the report, and as a JSON tree most of its memory and time.
    std::vector<reports::LayerTally> layers = LayerTallies(s, p);
    j["layers"] = kLayersPlaceholder;
    // Per thread and per request: each one's own calls, valued alone.
    // `whole`: the part is every call of the report, whose views are valued above.
    auto total_of = [&](Planned& part, bool whole) {
      nlohmann::json t = nlohmann::json::object();
      if (op_view) t["operator_flops"] = whole ? j["operator_flops"]["total"] : FlopJson(s, part)["total"];
      if (module_view) {
        // Keep the report alive while iterating: items() of a temporary's member dangles.
        const nlohmann::json module = whole ? j["module_report"] : ModuleJson(s, part);
        for (const auto& [name, metric] : module["totals"].items()) t[name] = metric;
      }
      return t;
    };
    j["threads"] = nlohmann::json::array();
    std::vector<std::pair<int64_t, std::string>> threads;
    if (s.options.threads == Threads::kCurrent) {
      threads.emplace_back(1, "");
    } else {
      for (const Cut& cut : cuts) {
        // Threads that ran ATen work.
        if (cut.count > 0 || cut.folded > 0) threads.emplace_back(cut.log->number, cut.log->name);
      }
    }
    size_t kept = 0;
    for (const auto& [number, name] : threads) kept += filter.threads.empty() || filter.threads.count(number);
    for (const auto& [number, name] : threads) {
      if (!filter.threads.empty() && !filter.threads.count(number)) continue;
      // The only thread with calls holds all of them: its totals are the report's, not valued again.
      const bool whole = kept == 1;
      Planned part;
      if (!whole) {
        ReportFilter one = filter;
        one.threads = {number};
        part.set = s.Gather(one, &cuts);
      }
      const EventSet& set = whole ? *p.set : *part.set;
      const int64_t folded_calls = set.folded() ? set.folded()->calls : 0;
      j["threads"].push_back({{"thread", number},
                              {"name", name},
                              {"calls", static_cast<int64_t>(set.events().size()) + folded_calls},
                              {"totals", total_of(part, whole)}});
    }
    // Per request, in one pass: the calls re-scoped by request, tallied like layers.
    std::vector<reports::LayerTally> request_rows;
    std::vector<int64_t> request_calls;
    if (!p.set->requests.empty()) {
      Planned by_request{p.set->ByRequest()};
      std::vector<reports::LayerTally>& rows = request_rows;
      rows.resize(by_request.set->scopes.size());
      std::vector<int64_t>& calls = request_calls;
      calls.assign(rows.size(), 0);
      // Streaming scans: the folded requests' values and calls first.
      if (const Folded* f = by_request.set->folded()) {
        for (size_t q = 0; q < rows.size() && q < f->scopes.size(); ++q) {
          StartRow(rows[q], f->scopes[q]);
          calls[q] = f->scopes[q].calls;
        }
      }
      if (op_view) {
        OperatorSums sums;
        AccumulateOperatorView(by_request.set->events(), by_request.set->label_sets,
                               by_request.Plan(s.catalog, s.overrides), s.catalog, s.overrides, sums, TallyRows{&rows});
      }
      if (module_view) {
        ModuleSums sums;
        AccumulateModuleView(by_request.set->events(), by_request.ModulePlan(s.catalog), s.catalog, sums,
                             TallyRows{&rows});
      }
      for (size_t i = 0; i < by_request.set->events().size(); ++i) {
        const int32_t q = by_request.set->events()[i].scope;
        if (q >= 0) ++calls[q];
      }
    }
    auto request_json = [&](const std::string& id, int64_t calls, const reports::LayerTally& row) {
      nlohmann::json totals = nlohmann::json::object();
      for (int m = 0; m < 4; ++m) {
        if (!(m == 0 ? op_view : module_view)) continue;
        totals[reports::kLayerMetricNames[m]] =
            reports::MetricJson({row.complete[m] ? MetricStatus::kComplete : MetricStatus::kPartial, row.known[m],
                                 reports::kLayerMetricUnits[m], s.options.scope, reports::kLayerMetricMethods[m]});
      }
      return nlohmann::json{{"request", id}, {"calls", calls}, {"totals", totals}};
    };
    j["requests"] = nlohmann::json::array();
    if (s.Aggregated()) {
      // The folds' aggregate, and the calls still held aggregated alike;
      // "layers" and "requests": the last requests kept whole.
      LayerAggregate aggregate;
      aggregate.keep_requests = s.options.per_request_rows;
      if (const Folded* f = p.set->folded()) aggregate.Merge(f->aggregate);
      AggregateBatch held;
      held.events = &p.set->events();
      held.scopes = &p.set->scopes;
      held.scope_rows = &layers;
      held.request_ids = p.set->requests;
      held.request_seqs = p.set->request_seqs;
      held.request_rows = &request_rows;
      held.request_calls = request_calls;
      held.times = p.set->times;
      aggregate.Add(held);
      j["aggregate"] =
          aggregate.Json(s.options.scope, {op_view, module_view, module_view, module_view}, held.times != nullptr);
      for (const LayerAggregate::KeptRequest& k : aggregate.kept()) {
        j["requests"].push_back(request_json(k.id, k.calls, k.totals));
      }
      layers = aggregate.KeptLayers();
    } else {
      for (size_t q = 0; q < request_rows.size(); ++q) {
        j["requests"].push_back(request_json(p.set->requests[q], request_calls[q], request_rows[q]));
      }
    }
    // Thread names and request ids are caller bytes: never fail on bad UTF-8.
    const std::string text = reports::DumpJson(j);  // replaces bad UTF-8; counts past 2^64 - 1 exact
    const std::string placeholder = nlohmann::json(kLayersPlaceholder).dump();
    const size_t at = text.find(placeholder);
    if (at == std::string::npos) return absl::InternalError("torchscan: the scan report lost its layers");
    std::string out = text.substr(0, at);
    reports::AppendLayersJson(layers, s.options.scope, {op_view, module_view, module_view, module_view}, out);
    out.append(text, at + placeholder.size());
    return out;
  }());
}

ScanGuard::ScanGuard(Session& session) : session_(session) {
  const Status st = session_.Start();
  TORCH_CHECK(st.ok(), std::string(st.message()));
}

ScanGuard::~ScanGuard() {
  const Status st = session_.Stop();
  if (!st.ok()) TORCH_WARN(std::string(st.message()));
}

ModuleScope::ModuleScope(Session& session, std::string_view path)
    : session_(session), uncaught_(std::uncaught_exceptions()) {
  const StatusOr<int32_t> id = session_.PushModuleScope(path);
  TORCH_CHECK(id.ok(), std::string(id.status().message()));
  scope_ = *id;
}

ModuleScope::~ModuleScope() {
  const Status st = session_.PopModuleScope(scope_, std::uncaught_exceptions() > uncaught_);
  if (!st.ok()) TORCH_WARN(std::string(st.message()));
}

RequestScope::RequestScope(Session& session, std::string_view id) : session_(session) {
  const Status st = session_.BeginRequest(id);
  TORCH_CHECK(st.ok(), std::string(st.message()));
}

RequestScope::~RequestScope() {
  const Status st = session_.EndRequest();
  if (!st.ok()) TORCH_WARN(std::string(st.message()));
}

void JoinAllThreadsScan() { (void)AllThreadsLog(); }

bool ModeKeyIncluded() { return c10::impl::tls_is_dispatch_key_included(kModeKey); }

}  // namespace torchscan
