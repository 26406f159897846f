// The `torchscan` TORCH_LIBRARY: a custom class is the control surface, so
// starting/stopping a scan never goes through the dispatcher (and is never
// recorded by it).
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "torchscan_built_against.h"
#include <nlohmann/json.hpp>

#include "reports/diff.h"
#include "reports/render.h"
#include "reports/validate.h"
#include "torchscan_dispatch/coverage_audit.h"
#include "torchscan_dispatch/fallback.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

void Raise(const absl::Status& st) {
  if (st.ok()) return;
  if (st.code() == absl::StatusCode::kInvalidArgument) TORCH_CHECK_VALUE(false, std::string(st.message()));
  TORCH_CHECK(false, std::string(st.message()));
}

template <class T>
T Value(absl::StatusOr<T> v) {
  Raise(v.status());
  return *std::move(v);
}

struct ScriptSession : torch::CustomClassHolder {
  // Python pushes its own module scopes (hooks), so TorchScript scopes stay off.
  explicit ScriptSession(std::string scope) : session(ScanOptions{std::move(scope), Threads::kCurrent, false}) {}
  Session session;
};

using Self = c10::intrusive_ptr<ScriptSession>;

}  // namespace

TORCH_LIBRARY(torchscan, m) {
  // A marker the shim calls each time a compiled (Inductor) graph runs inside a
  // scan: its fused kernels bypass the dispatcher, so no view can value the
  // call and the result is partial with a `compiled_region` diagnostic.
  m.def("compiled_region(str backend) -> ()");
  m.impl("compiled_region", c10::DispatchKey::CompositeExplicitAutograd, [](std::string) {});
  m.class_<ScriptSession>("Session")
      .def(torch::init<std::string>())
      .def("defer_formula", [](const Self& s, std::string op) { Raise(s->session.DeferOperatorFormula(op)); })
      .def("start", [](const Self& s) { Raise(s->session.Start()); })
      .def("stop", [](const Self& s) { Raise(s->session.Stop()); })
      .def("set_module_labels",
           [](const Self& s, std::vector<std::string> labels) { Raise(s->session.SetModuleLabels(std::move(labels))); })
      .def("enter_module_label",
           [](const Self& s, std::string label) { Raise(s->session.EnterModuleLabel(label)); })
      .def("exit_module_label",
           [](const Self& s, std::string label) { Raise(s->session.ExitModuleLabel(label)); })
      .def("active", [](const Self& s) { return s->session.active(); })
      .def("recorded_operators", [](const Self& s) { return s->session.RecordedOperators(); })
      .def("recorded_calls", [](const Self& s) { return static_cast<int64_t>(s->session.recorded_calls()); })
      .def("deferred_calls", [](const Self& s) { return Value(s->session.DeferredCallsJson()); })
      .def("set_deferred_results",
           [](const Self& s, std::string json) { Raise(s->session.SetDeferredResultsJson(json)); })
      .def("flop_report", [](const Self& s) { return Value(s->session.FlopReportJson()); })
      .def("push_module_scope",
           [](const Self& s, std::string path) { return static_cast<int64_t>(Value(s->session.PushModuleScope(path))); })
      .def("pop_module_scope",
           [](const Self& s, int64_t id, bool failed, std::vector<int64_t> outputs) {
             Raise(s->session.PopModuleScope(static_cast<int32_t>(id), failed,
                                             std::vector<uintptr_t>(outputs.begin(), outputs.end())));
           })
      .def("layers", [](const Self& s) { return Value(s->session.LayersJson()); })
      .def("module_report", [](const Self& s) { return Value(s->session.ModuleReportJson()); })
      .def_static("install", []() { Raise(EnsureFallbackInstalled()); })
      .def_static("coverage_audit", []() { return CoverageAuditJson(); })
      .def_static("formula_table", []() { return FormulaTableJson(); })
      // Report readers: `file` / `before_file`, `after_file` name the source in
      // messages ("" when the report did not come from a file).
      .def_static("render_report",
                  [](std::string report, int64_t max_depth, bool receptive_field, std::string file) {
                    const reports::ReportSource source{std::move(file), ""};
                    auto j = reports::LoadReport(report, source);
                    TORCH_CHECK_VALUE(j.ok(), "torchscan.render_report: ", j.status().message());
                    // Negative: every layer. A plain int cast would turn 2**32 into 0.
                    const int depth = max_depth < 0 ? -1
                                                    : static_cast<int>(std::min<int64_t>(
                                                          max_depth, std::numeric_limits<int>::max()));
                    return Value(reports::RenderReport(*j, depth, receptive_field, source));
                  })
      .def_static("compare_reports",
                  [](std::string before, std::string after, std::string before_file, std::string after_file) {
                    const reports::ReportSource bs{std::move(before_file), "before"}, as{std::move(after_file), "after"};
                    auto b = reports::LoadReport(before, bs);
                    TORCH_CHECK_VALUE(b.ok(), "torchscan.compare_reports: ", b.status().message());
                    auto a = reports::LoadReport(after, as);
                    TORCH_CHECK_VALUE(a.ok(), "torchscan.compare_reports: ", a.status().message());
                    return Value(reports::CompareReports(*b, *a, bs, as))
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
                  })
      .def_static("mode_key_included", []() { return ModeKeyIncluded(); })
      .def_static("pause_thread_recording", []() { PauseThreadRecording(); })
      .def_static("resume_thread_recording", []() { ResumeThreadRecording(); })
      .def_static("note_control_flow_stop", []() { NoteControlFlowStop(); })
      .def_static("built_against", []() { return std::string(TORCHSCAN_BUILT_TORCH_VERSION); });
}

}  // namespace torchscan
