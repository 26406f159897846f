// Session: starts and stops a scan of one thread (or of every thread), its
// thread-local state, registration of formulas and module handlers, module
// scopes and requests. The reports are built in scan_reports.cc.
#include "torchscan_dispatch/session/state.h"

namespace torchscan {

namespace {

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

}  // namespace

Session::Session(ScanOptions options) : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  SetCustomClassRecorder(&RecordCustomClass);
}

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

Status Session::SetModuleResultsJson(std::string_view json) {
  return Public([&]() -> absl::Status {
    State& s = *state_;
    if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
    if (!s.module_handlers.empty()) {
      return absl::FailedPreconditionError(
          "torchscan: this scan has C++ module handlers (SetModuleHandler): the engine computes their results");
    }
    if (s.options.streaming) {
      return absl::InvalidArgumentError(
          "torchscan: a streaming scan keeps sums, not layer calls, so it cannot take module results; start a "
          "full scan (streaming off) for them");
    }
    Planned& p = s.Calls();
    absl::StatusOr<HandlerOutcome> outcome = ModuleResultsFromJson(json, p.set->scopes);
    if (!outcome.ok()) return outcome.status();
    p.handlers = std::move(*outcome);
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
    if (!s.options.module_scopes && s.options.torchscript_scopes) {
      return absl::InvalidArgumentError(
          "torchscan: TorchScript scopes (ScanOptions::torchscript_scopes) are module scopes; a scan without them "
          "(ScanOptions::module_scopes = false) needs torchscript_scopes = false");
    }
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
      if (s.options.streaming) {
        const Overrides* overrides = &s.overrides;
        std::shared_ptr<const std::atomic<int>> paused = s.folds_paused;
        const size_t keep_requests = s.options.per_request_rows;
        const bool fields = s.options.module_scopes;
        s.all->make_folder = [overrides, paused, keep_requests, fields](int64_t thread) {
          auto folder = std::make_shared<ViewFolder>(overrides, paused, fields);
          folder->thread = thread;
          folder->aggregate().keep_requests = keep_requests;
          return folder;
        };
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
      s.recorder.folder = std::make_shared<ViewFolder>(&s.overrides, nullptr, s.options.module_scopes);
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
    if (r.folder) names.insert(FolderOf(r).folded().operators_seen.begin(), FolderOf(r).folded().operators_seen.end());
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

StatusOr<int32_t> Session::PushModuleScope(std::string_view path) {
  return Public([&]() -> absl::StatusOr<int32_t> {
    if (!state_->options.module_scopes) {
      return absl::FailedPreconditionError(
          "torchscan: this scan was started without module scopes (ScanOptions::module_scopes = false); start "
          "one with them to attribute calls to modules");
    }
    int32_t id = -1;
    absl::Status st = WithThreadRecorder(*state_, [&](Recorder& r) {
      id = r.PushScope(std::string(path));
      return absl::OkStatus();
    });
    if (!st.ok()) return st;
    return id;
  }());
}

Status Session::PopModuleScope(int32_t scope, bool failed, std::vector<uintptr_t> outputs, bool* ran_attention) {
  return Public([&]() -> absl::Status {
    return WithThreadRecorder(*state_, [&](Recorder& r) {
      if (!r.PopScope(scope, failed, std::move(outputs))) {
        return absl::InvalidArgumentError(absl::StrCat("torchscan: module scope ", scope, " is not open"));
      }
      if (ran_attention != nullptr) *ran_attention = r.scopes()[scope].ran_attention;
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
