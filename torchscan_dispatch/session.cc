// Session: starts/stops a scan of one thread and turns its events into reports.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "reports/flop_report.h"
#include "reports/names.h"
#include "torchscan_built_against.h"
#include "torchscan_dispatch/fallback.h"
#include "torchscan_dispatch/module_view.h"
#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/receptive_field.h"
#include "torchscan_dispatch/operator_view.h"
#include "torchscan_dispatch/scan_state.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {

enum class Phase { kIdle, kActive, kStopped };

struct Session::State {
  ScanOptions options;
  Phase phase = Phase::kIdle;
  Recorder recorder;
  Overrides overrides;
  std::thread::id thread;
  bool included_before = false;
  int64_t unattributed_at_start = 0;
  int64_t unattributed = 0;
  OpCatalog catalog;
  std::optional<OperatorPlan> plan;         // operator view, built once after Stop()
  std::optional<OperatorPlan> module_plan;  // module view, likewise

  const OperatorPlan& Plan() {
    if (!plan) plan = PlanOperatorView(recorder.events(), catalog, overrides);
    return *plan;
  }
  TallyContext Context() const { return {TORCHSCAN_BUILT_TORCH_VERSION, options.scope, unattributed}; }
  const OperatorPlan& ModulePlan() {
    if (!module_plan) module_plan = PlanModuleView(recorder.events(), catalog);
    return *module_plan;
  }
};

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
    return absl::InvalidArgumentError(absl::StrCat(
        "torchscan: operator names look like \"aten::relu\" (namespace::name, no overload); got \"",
        std::string(op), "\""));
  }
  return absl::OkStatus();
}

nlohmann::json TensorJson(const TensorMeta& t) {
  if (!t.defined) return nullptr;
  nlohmann::json j = {{"dtype", reports::DtypeName(t.dtype)},
                      {"device", reports::DeviceName(t.device)}};
  if (t.nested) {
    j["shape"] = nullptr;
  } else {
    j["shape"] = std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
  }
  return {{"__tensor__", j}};
}

nlohmann::json ArgJson(const ArgMeta& a) {
  switch (a.kind) {
    case ArgKind::kNone: return nullptr;
    case ArgKind::kTensor: return TensorJson(a.tensor());
    case ArgKind::kInt: return a.to_int();
    case ArgKind::kDouble: return a.to_double();
    case ArgKind::kBool: return a.to_bool();
    case ArgKind::kIntList: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case ArgKind::kBoolList: {
      nlohmann::json l = nlohmann::json::array();
      for (int64_t b : a.ints()) l.push_back(b != 0);
      return l;
    }
    case ArgKind::kDoubleList: return std::vector<double>(a.doubles().begin(), a.doubles().end());
    case ArgKind::kTensorList: {
      nlohmann::json l = nlohmann::json::array();
      for (const auto& t : a.tensors()) l.push_back(TensorJson(t));
      return l;
    }
    case ArgKind::kString: return std::string(a.str());
    case ArgKind::kOther: return {{"__other__", true}};
  }
  return nullptr;
}

}  // namespace

Session::Session(ScanOptions options) : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
}

Session::~Session() {
  if (!state_ || state_->phase != Phase::kActive) return;
  if (state_->thread == std::this_thread::get_id() && ThreadTopRecorder() == &state_->recorder) {
    (void)Stop();
    return;
  }
  // Still linked into a thread's scan chain that we cannot reach safely:
  // keep the recorder alive rather than leave that thread a dangling pointer.
  TORCH_WARN("torchscan: a Session was destroyed while its scan was active on another thread or "
             "under a newer scan; its recorder is leaked to keep that thread safe");
  (void)state_.release();
}

absl::Status Session::SetOperatorFormula(std::string_view op, CallerFormula formula) {
  if (state_->phase != Phase::kIdle) {
    return absl::FailedPreconditionError("torchscan: set caller formulas before Start()");
  }
  if (auto s = CheckOpName(op); !s.ok()) return s;
  if (!formula) return absl::InvalidArgumentError("torchscan: the caller formula is empty");
  state_->overrides.formulas[CanonicalOp(op)] = std::move(formula);
  return absl::OkStatus();
}

absl::Status Session::DeferOperatorFormula(std::string_view op) {
  if (state_->phase != Phase::kIdle) {
    return absl::FailedPreconditionError("torchscan: set caller formulas before Start()");
  }
  if (auto s = CheckOpName(op); !s.ok()) return s;
  state_->overrides.deferred.insert(CanonicalOp(op));
  return absl::OkStatus();
}

absl::Status Session::Start() {
  State& s = *state_;
  if (s.phase == Phase::kActive) return absl::FailedPreconditionError("torchscan: this scan is already active");
  if (s.phase == Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: a Session scans once; create a new Session for another scan");
  }
  if (auto st = EnsureFallbackInstalled(); !st.ok()) return st;
  s.thread = std::this_thread::get_id();
  s.included_before = c10::impl::tls_is_dispatch_key_included(kModeKey);
  s.unattributed_at_start = UnattributedCalls().load(std::memory_order_relaxed);
  s.recorder.outer = ThreadTopRecorder();
  ThreadTopRecorder() = &s.recorder;
  c10::impl::tls_set_dispatch_key_included(kModeKey, true);
  s.phase = Phase::kActive;
  return absl::OkStatus();
}

absl::Status Session::Stop() {
  State& s = *state_;
  if (s.phase != Phase::kActive) return absl::FailedPreconditionError("torchscan: this scan is not active");
  if (s.thread != std::this_thread::get_id()) {
    return absl::FailedPreconditionError("torchscan: stop a scan on the thread that started it");
  }
  if (ThreadTopRecorder() != &s.recorder) {
    return absl::FailedPreconditionError(
        "torchscan: a scan started later in this thread is still active; stop scans in reverse order");
  }
  ThreadTopRecorder() = s.recorder.outer;
  s.recorder.outer = nullptr;
  // Only our key's bit changes, so guards that exited meanwhile stay intact.
  c10::impl::tls_set_dispatch_key_included(kModeKey, s.included_before);
  s.unattributed = UnattributedCalls().load(std::memory_order_relaxed) - s.unattributed_at_start;
  s.phase = Phase::kStopped;
  return absl::OkStatus();
}

absl::Status Session::SetModuleLabels(std::vector<std::string> labels) {
  if (state_->phase != Phase::kActive) return absl::FailedPreconditionError("torchscan: this scan is not active");
  std::sort(labels.begin(), labels.end());
  labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
  state_->recorder.SetLabels(std::move(labels));
  return absl::OkStatus();
}

bool Session::active() const { return state_->phase == Phase::kActive; }

size_t Session::recorded_calls() const { return state_->recorder.events().size(); }

std::vector<std::string> Session::RecordedOperators() const {
  std::set<std::string> names;
  const auto& events = state_->recorder.events();
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& n = events[i].op.operator_name();
    names.insert(n.overload_name.empty() ? n.name : absl::StrCat(n.name, ".", n.overload_name));
  }
  return {names.begin(), names.end()};
}

absl::StatusOr<std::string> Session::DeferredCallsJson() {
  State& s = *state_;
  if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
  const auto& events = s.recorder.events();
  const OperatorPlan& plan = s.Plan();
  nlohmann::json calls = nlohmann::json::array();
  for (size_t i = 0; i < events.size(); ++i) {
    if (plan.covered[i] || plan.kind[i] != CallKind::kDeferred || events[i].raised) continue;
    const Event& e = events[i];
    const OpInfo& info = s.catalog.Get(e.op);
    nlohmann::json args = nlohmann::json::array(), kwargs = nlohmann::json::object();
    const auto& schema_args = e.op.schema().arguments();
    for (size_t a = 0; a < e.args.size() && a < schema_args.size(); ++a) {
      if (schema_args[a].kwarg_only()) {
        kwargs[schema_args[a].name()] = ArgJson(e.args[a]);
      } else {
        args.push_back(ArgJson(e.args[a]));
      }
    }
    nlohmann::json out;
    if (e.outputs.size() == 1) {
      out = ArgJson(e.outputs[0]);
    } else {
      out = nlohmann::json::array();
      for (const auto& o : e.outputs) out.push_back(ArgJson(o));
    }
    calls.push_back({{"index", i}, {"op", info.packet}, {"overload", info.overload},
                     {"args", args}, {"kwargs", kwargs}, {"out", out}});
  }
  return calls.dump();
}

absl::Status Session::SetDeferredResultsJson(std::string_view json) {
  State& s = *state_;
  if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("torchscan: deferred results must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    int32_t index = 0;
    if (!absl::SimpleAtoi(key, &index) || !value.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("torchscan: deferred result \"", key, "\" must map a call index to an integer"));
    }
    s.overrides.deferred_values[index] = value.get<int64_t>();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::FlopReportJson() {
  State& s = *state_;
  if (s.phase != Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
  }
  const TallyContext ctx = s.Context();
  return reports::FlopReportJson(
             TallyOperatorView(s.recorder.events(), s.recorder.label_sets(), s.Plan(), s.catalog, s.overrides, ctx))
      .dump();
}

absl::StatusOr<int32_t> Session::PushModuleScope(std::string_view path) {
  State& s = *state_;
  if (s.phase != Phase::kActive) return absl::FailedPreconditionError("torchscan: module scopes need an active scan");
  if (s.thread != std::this_thread::get_id()) {
    return absl::FailedPreconditionError("torchscan: module scopes belong to the scanning thread");
  }
  return s.recorder.PushScope(std::string(path));
}

absl::Status Session::PopModuleScope(int32_t scope, bool failed, std::vector<uintptr_t> outputs) {
  State& s = *state_;
  if (s.phase != Phase::kActive) return absl::FailedPreconditionError("torchscan: module scopes need an active scan");
  if (!s.recorder.PopScope(scope, failed, std::move(outputs))) {
    return absl::InvalidArgumentError(absl::StrCat("torchscan: module scope ", scope, " is not open"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::LayersJson() {
  State& s = *state_;
  if (s.phase != Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
  }
  const auto& scopes = s.recorder.scopes();
  std::vector<reports::LayerTally> layers(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) {
    layers[i].path = scopes[i].path;
    layers[i].call_index = scopes[i].call_index;
    layers[i].parent = scopes[i].parent;
    layers[i].depth = scopes[i].parent >= 0 ? layers[scopes[i].parent].depth + 1 : 0;
    layers[i].failed = scopes[i].failed;
  }
  const TallyContext ctx = s.Context();
  TallyOperatorView(s.recorder.events(), s.recorder.label_sets(), s.Plan(), s.catalog, s.overrides, ctx, &layers);
  TallyModuleView(s.recorder.events(), s.ModulePlan(), s.catalog, ctx, &layers);
  std::vector<FieldQuery> queries(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) queries[i] = {scopes[i].end_event, scopes[i].outputs};
  const auto fields = ComputeFields(s.recorder.events(), s.ModulePlan(), s.catalog, queries);
  for (size_t i = 0; i < scopes.size(); ++i) {
    if (fields[i] && fields[i]->axes > 0) {
      layers[i].field = {fields[i]->rf[0], fields[i]->jump[0], fields[i]->padding[0]};
    }
    layers[i].field_known = fields[i].has_value();
  }
  return reports::LayersJson(layers, s.options.scope).dump();
}

absl::StatusOr<std::string> Session::ModuleReportJson() {
  State& s = *state_;
  if (s.phase != Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
  }
  const TallyContext ctx = s.Context();
  return reports::ModuleReportJson(TallyModuleView(s.recorder.events(), s.ModulePlan(), s.catalog, ctx)).dump();
}

ScanGuard::ScanGuard(Session& session) : session_(session) {
  const absl::Status st = session_.Start();
  TORCH_CHECK(st.ok(), std::string(st.message()));
}

ScanGuard::~ScanGuard() {
  const absl::Status st = session_.Stop();
  if (!st.ok()) TORCH_WARN(std::string(st.message()));
}

ModuleScope::ModuleScope(Session& session, std::string_view path)
    : session_(session), uncaught_(std::uncaught_exceptions()) {
  const absl::StatusOr<int32_t> id = session_.PushModuleScope(path);
  TORCH_CHECK(id.ok(), std::string(id.status().message()));
  scope_ = *id;
}

ModuleScope::~ModuleScope() {
  const absl::Status st = session_.PopModuleScope(scope_, std::uncaught_exceptions() > uncaught_);
  if (!st.ok()) TORCH_WARN(std::string(st.message()));
}

bool ModeKeyIncluded() { return c10::impl::tls_is_dispatch_key_included(kModeKey); }

}  // namespace torchscan
