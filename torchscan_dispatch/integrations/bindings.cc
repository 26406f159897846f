// The `torchscan` TORCH_LIBRARY: a custom class is the control surface, so
// starting/stopping a scan never goes through the dispatcher (and is never
// recorded by it).
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "torchscan_built_against.h"
#include <nlohmann/json.hpp>

#include "reports/diff.h"
#include "reports/metric.h"
#include "reports/render.h"
#include "reports/validate.h"
#include "torchscan_dispatch/integrations/coverage_audit.h"
#include "torchscan_dispatch/integrations/stream_writer.h"
#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/fork_guard.h"
#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/analyses/token_flow.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

void Raise(const absl::Status& st) {
  if (st.ok()) return;
  if (st.code() == absl::StatusCode::kInvalidArgument) TORCH_CHECK_VALUE(false, std::string(st.message()));
  TORCH_CHECK(false, std::string(st.message()));
}

// The C++ API's errors (status.h) raise the same way.
void Raise(const Status& st) {
  if (st.ok()) return;
  if (st.code() == StatusCode::kInvalidArgument) TORCH_CHECK_VALUE(false, st.message());
  TORCH_CHECK(false, st.message());
}

template <class T>
T Value(absl::StatusOr<T> v) {
  Raise(v.status());
  return *std::move(v);
}

template <class T>
T Value(StatusOr<T> v) {
  Raise(v.status());
  return *std::move(v);
}

struct ScriptSession;

// Handles for the C entry points below. A handle names a live session: a
// stale or made-up one fails like any other refused call instead of
// reaching freed memory.
struct Handles {
  std::mutex mu;
  std::unordered_map<int64_t, ScriptSession*> sessions;
  int64_t next = 1;
};

Handles& TheHandles() {
  static auto* handles = [] {
    auto* h = new Handles;                        // never destroyed: sessions may outlive static destruction
    GuardAcrossFork(&h->mu, ForkRank::kHandles);  // Note [Locks across fork] in core/fork_guard.h
    return h;
  }();
  return *handles;
}

struct ScriptSession : torch::CustomClassHolder {
  // Python pushes its own module scopes (hooks), so TorchScript scopes stay
  // off: a scripted submodule is one layer call, as its hooks see it (named
  // fields: a positional `false` here once landed on join_on_first_call).
  // module_scopes false: a scan whose hooks push none (Python's scan()), so
  // its folds skip the receptive-field flow (ScanOptions::module_scopes).
  ScriptSession(std::string scope, bool memory, bool timestamps, bool streaming, int64_t fold_every,
                bool record_owned_children, bool module_scopes)
      : session(ScanOptions{.scope = std::move(scope),
                            .threads = Threads::kCurrent,
                            .torchscript_scopes = false,
                            .record_owned_children = record_owned_children,
                            .memory = memory,
                            .timestamps = timestamps,
                            .streaming = streaming,
                            .fold_every = static_cast<size_t>(std::max<int64_t>(fold_every, 0)),
                            .module_scopes = module_scopes}) {}
  explicit ScriptSession(ScanOptions options) : session(std::move(options)) {}
  ~ScriptSession() override {
    if (preparing.valid()) preparing.wait();  // before `session` goes (Note [Reports prepared on a second thread])
    if (handle == 0) return;
    Handles& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);
    h.sessions.erase(handle);
  }
  // The session, once any preparation running on it has finished: every
  // use goes through here (Note [Reports prepared on a second thread]).
  Session& Use() {
    if (preparing.valid()) prepared = preparing.get();
    return session;
  }
  // A C int (ctypes passes ints as such); 0 once they are used up.
  int64_t Handle() {
    Handles& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);
    if (handle == 0 && h.next < std::numeric_limits<int>::max()) {
      handle = h.next++;
      h.sessions[handle] = this;
    }
    return handle;
  }
  Session session;
  int64_t handle = 0;    // 0: none given out
  bool stopped = false;  // its scan ran and was stopped: its reports can be written

  // Note [Reports prepared on a second thread]
  // crawl_module builds its report in Python after the scan stops: parameter
  // figures, inputs and outputs of every layer call, then the engine's rows
  // and reports, loaded from pickle streams. The streams depend only on the
  // stopped session, so crawl_module asks for them first
  // (torchscan_reports_prepare) and a thread of their own writes them while
  // Python does its part (stream_writer.h); the entry points that hand them
  // over take them when they are ready. Nothing else touches the session
  // meanwhile: every use of it goes through Use(), which waits for the
  // streams first (so does the destructor); a session is used by one thread
  // at a time, its crawl's. Only the streams crawl_module asks for, as it
  // would ask for them; a stream it does not take is dropped with the
  // session. The rows come first, and are handed over as soon as they are
  // written (they are a string of their own, which the thread no longer
  // touches), so Python loads them while the thread writes the reports.
  struct Prepared {
    int which = 0;  // bit 0 the FlopReport, bit 1 the module report
    std::optional<std::string> reports;
  };
  std::future<Prepared> preparing;
  std::optional<Prepared> prepared;
  std::future<std::optional<std::string>> preparing_rows;  // valid while prepared rows are not taken
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
      .def(torch::init<std::string, bool, bool, bool, int64_t, bool, bool>())
      .def("defer_formula", [](const Self& s, std::string op) { Raise(s->Use().DeferOperatorFormula(op)); })
      .def("start",
           [](const Self& s) {
             s->stopped = false;
             Raise(s->Use().Start());
           })
      .def("stop",
           [](const Self& s) {
             Raise(s->Use().Stop());
             s->stopped = true;
           })
      .def("set_module_labels",
           [](const Self& s, std::vector<std::string> labels) { Raise(s->Use().SetModuleLabels(std::move(labels))); })
      .def("enter_module_label", [](const Self& s, std::string label) { Raise(s->Use().EnterModuleLabel(label)); })
      .def("exit_module_label", [](const Self& s, std::string label) { Raise(s->Use().ExitModuleLabel(label)); })
      .def("active", [](const Self& s) { return s->Use().active(); })
      .def("recorded_operators", [](const Self& s) { return s->Use().RecordedOperators(); })
      .def("recorded_calls", [](const Self& s) { return static_cast<int64_t>(s->Use().recorded_calls()); })
      .def("held_calls", [](const Self& s) { return static_cast<int64_t>(s->Use().held_calls()); })
      .def("begin_request", [](const Self& s, std::string id) { Raise(s->Use().BeginRequest(id)); })
      .def("end_request", [](const Self& s) { Raise(s->Use().EndRequest()); })
      .def("deferred_calls", [](const Self& s) { return Value(s->Use().DeferredCallsJson()); })
      .def("set_deferred_results",
           [](const Self& s, std::string json) { Raise(s->Use().SetDeferredResultsJson(json)); })
      .def("set_module_results", [](const Self& s, std::string json) { Raise(s->Use().SetModuleResultsJson(json)); })
      .def("flop_report", [](const Self& s) { return Value(s->Use().FlopReportJson()); })
      .def("push_module_scope",
           [](const Self& s, std::string path) { return static_cast<int64_t>(Value(s->Use().PushModuleScope(path))); })
      .def("pop_module_scope",
           [](const Self& s, int64_t id, bool failed, std::vector<int64_t> outputs) {
             Raise(s->Use().PopModuleScope(static_cast<int32_t>(id), failed,
                                           std::vector<uintptr_t>(outputs.begin(), outputs.end())));
           })
      .def("layers", [](const Self& s) { return Value(s->Use().LayersJson()); })
      .def("module_layers", [](const Self& s) { return Value(s->Use().LayersJson({}, /*operator_view=*/false)); })
      .def("memory_report", [](const Self& s) { return Value(s->Use().MemoryReportJson()); })
      .def("trace", [](const Self& s) { return Value(s->Use().TraceJson()); })
      // For the C entry points below (torchscan_push_module_scope, ...).
      .def("native_handle", [](const Self& s) { return s->Handle(); })
      .def("module_report", [](const Self& s) { return Value(s->Use().ModuleReportJson()); })
      .def("traffic", [](const Self& s) { return Value(s->Use().TrafficJson()); })
      .def("scan_report", [](const Self& s) { return Value(s->Use().ScanReportJson()); })
      // scan(threads="all"): every thread that runs ATen work while it is
      // active joins on its first call. A factory, not a second constructor
      // (a custom class has one __init__), so Session(scope, memory, trace)
      // keeps its meaning.
      .def_static("all_threads",
                  [](std::string scope, bool timestamps, bool streaming, int64_t fold_every, bool record_owned_children,
                     bool module_scopes) {
                    return c10::make_intrusive<ScriptSession>(
                        ScanOptions{.scope = std::move(scope),
                                    .threads = Threads::kAll,
                                    .torchscript_scopes = false,
                                    .record_owned_children = record_owned_children,
                                    .timestamps = timestamps,
                                    .streaming = streaming,
                                    .fold_every = static_cast<size_t>(std::max<int64_t>(fold_every, 0)),
                                    .module_scopes = module_scopes,
                                    // Python scans report one row per module call, as crawl_module does.
                                    .layer_rows = LayerRowMode::kPerCall});
                  })
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
                    const int depth =
                        max_depth < 0 ? -1
                                      : static_cast<int>(std::min<int64_t>(max_depth, std::numeric_limits<int>::max()));
                    return Value(reports::RenderReport(*j, depth, receptive_field, source));
                  })
      .def_static("compare_reports",
                  [](std::string before, std::string after, std::string before_file, std::string after_file) {
                    const reports::ReportSource bs{std::move(before_file), "before"},
                        as{std::move(after_file), "after"};
                    auto b = reports::LoadReport(before, bs);
                    TORCH_CHECK_VALUE(b.ok(), "torchscan.compare_reports: ", b.status().message());
                    auto a = reports::LoadReport(after, as);
                    TORCH_CHECK_VALUE(a.ok(), "torchscan.compare_reports: ", a.status().message());
                    // DumpJson: deltas past 2^64 - 1 are written as their exact digits.
                    return reports::DumpJson(Value(reports::CompareReports(*b, *a, bs, as)));
                  })
      .def_static("mode_key_included", []() { return ModeKeyIncluded(); })
      // Token dependencies of a module call just recorded (torchscan/token_flow.py).
      .def_static("token_flow", [](std::string request) { return TokenFlowJson(request); })
      // Each one call (an interrupt cannot split it); see PauseThreadRecordingForScan.
      .def_static("pause_thread_recording", []() { PauseThreadRecordingForScan(); })
      .def_static("resume_thread_recording", []() { ResumeThreadRecordingForScan(); })
      .def_static("thread_recording_paused", []() { return ThreadRecordingPaused(); })
      .def_static("note_control_flow_stop", []() { NoteControlFlowStop(); })
      // The same, with the tensor whose saving raises it (torchscan/_checkpoint.py).
      .def_static("note_control_flow_stop_saving", [](at::Tensor saved) { NoteControlFlowStop(&saved); })
      .def_static("note_answered_from_cache", [](std::string name) { NoteAnsweredFromCache(name); })
      .def_static("built_against", []() { return std::string(TORCHSCAN_BUILT_TORCH_VERSION); });
}

namespace {

// The bytes `make` gives for the session behind `handle`, for the C entry
// points that hand a stopped scan's report over: `*data` and `*size` then
// name them, kept for the calling thread (one buffer per entry point) until
// its next call. 0 on success; -1 for an unknown handle or a refusal.
template <class Make>
int HandOverBytes(int handle, const char** data, int64_t* size, Make make) noexcept {
  thread_local std::string held;
  try {
    auto& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);  // the session stays alive for the call
    const auto it = h.sessions.find(handle);
    if (it == h.sessions.end()) return -1;
    auto bytes = make(*it->second);
    if (!bytes.ok()) return -1;
    held = *std::move(bytes);
    *data = held.data();
    *size = static_cast<int64_t>(held.size());
    return 0;
  } catch (...) {
    return -1;
  }
}

// A token request in words answered by `Answer` (TokenFlowWords or
// NativeLayerWords), for the C entry points that take one: the answer's word
// count, or -1; an unavailable answer's reason kept for the calling thread
// (one buffer per entry point) until its next call.
template <int64_t (*Answer)(const int64_t*, int64_t, std::string_view, int64_t*, int64_t, std::string*)>
int AnswerInWords(const int64_t* words, int count, const char* text, int text_length, int64_t* answer, int capacity,
                  const char** reason, int64_t* reason_length) noexcept {
  thread_local std::string held;
  try {
    if (count < 0 || text_length < 0 || capacity < 0) return -1;
    held.clear();
    const int64_t n =
        Answer(words, count, std::string_view(text, static_cast<size_t>(text_length)), answer, capacity, &held);
    *reason = held.data();
    *reason_length = static_cast<int64_t>(held.size());
    return static_cast<int>(n);
  } catch (...) {
    return -1;
  }
}

}  // namespace
}  // namespace torchscan

// The torch this library was built against, readable without loading it: the
// shim quotes it when the loader refuses the library (another release's
// missing symbol), where built_against() cannot be asked.
extern "C" __attribute__((used, retain)) const char torchscan_built_against_marker[] =
    "torchscan-built-against-torch=" TORCHSCAN_BUILT_TORCH_VERSION;

// Module scopes for crawl_module's hooks, called through ctypes (the
// standard library's foreign-function module): every module call pushes
// and pops one, and a custom-class method call costs several microseconds
// (method lookup, schema matching, the IValue stack) where these cost a
// plain C call. Every parameter is an int or a pointer, so that ctypes
// passes Python ints and bytes without declared argument types (their
// conversions cost more than the call). `handle` comes from
// Session.native_handle(). Nothing is raised here: a refused call returns
// -1, and the caller repeats it through the custom class
// (push_module_scope / pop_module_scope), which refuses it again with the
// message.
extern "C" {

// The new scope's id (>= 0), or -1.
__attribute__((visibility("default"))) int torchscan_push_module_scope(int handle, const char* path,
                                                                       int length) noexcept {
  using torchscan::TheHandles;
  try {
    auto& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);  // the session stays alive for the call
    const auto it = h.sessions.find(handle);
    if (it == h.sessions.end()) return -1;
    if (length < 0) return -1;
    const auto id = it->second->Use().PushModuleScope(std::string_view(path, static_cast<size_t>(length)));
    return id.ok() ? *id : -1;
  } catch (...) {
    return -1;
  }
}

// 1 when the scope recorded a call that runs attention or a softmax, 0 when
// not (the token analysis asks about the first kind only), -1 when it fails.
// `outputs`: `count` output identities (TensorImpl addresses).
__attribute__((visibility("default"))) int torchscan_pop_module_scope(int handle, int scope, int failed,
                                                                      const uint64_t* outputs, int count) noexcept {
  using torchscan::TheHandles;
  try {
    auto& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);
    const auto it = h.sessions.find(handle);
    if (it == h.sessions.end() || count < 0) return -1;
    bool ran_attention = true;
    if (!it->second->Use()
             .PopModuleScope(scope, failed != 0, std::vector<uintptr_t>(outputs, outputs + count), &ran_attention)
             .ok())
      return -1;
    return ran_attention ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// The common case, one output: its identity in two halves (ctypes passes
// each as a C int, masked to 32 bits), so that no buffer is shared between
// calls. Answers as torchscan_pop_module_scope.
__attribute__((visibility("default"))) int torchscan_pop_module_scope_1(int handle, int scope, int failed, int low,
                                                                        int high) noexcept {
  const uint64_t output = (static_cast<uint64_t>(static_cast<uint32_t>(high)) << 32) | static_cast<uint32_t>(low);
  return torchscan_pop_module_scope(handle, scope, failed, &output, 1);
}

// The analysis pause of crawl_module (torchscan/_modules.py AnalysisPause)
// around TorchScan's own tensor work inside a module hook: what the custom
// class's pause_thread_recording / resume_thread_recording do, each as one
// plain C call (an interrupt cannot split it).
__attribute__((visibility("default"))) void torchscan_pause_thread_recording() noexcept {
  torchscan::PauseThreadRecordingForScan();
}

__attribute__((visibility("default"))) void torchscan_resume_thread_recording() noexcept {
  torchscan::ResumeThreadRecordingForScan();
}

// The token analysis's request as words (Note [Token-flow requests without
// JSON] in analyses/token_flow.h): `count` words and `text_length` bytes of
// text in, the answer's words out (at most `capacity`), and an unavailable
// answer's reason in `*reason` / `*reason_length`, kept for the calling
// thread until its next call here. The answer's word count, or -1 (the
// caller then asks through the custom class's JSON method). Named for its
// word layout: the layout without masks was torchscan_token_flow_words, so
// a shim never sends one layout to a library that reads the other.
__attribute__((visibility("default"))) int torchscan_token_flow_request(const int64_t* words, int count,
                                                                        const char* text, int text_length,
                                                                        int64_t* answer, int capacity,
                                                                        const char** reason,
                                                                        int64_t* reason_length) noexcept {
  return torchscan::AnswerInWords<torchscan::TokenFlowWords>(words, count, text, text_length, answer, capacity, reason,
                                                             reason_length);
}

// A native attention or Transformer layer's token dependencies from a
// request in words (NativeLayerWords, Note [Token-flow requests without JSON]
// in analyses/token_flow.h); the answer as torchscan_token_flow_request's.
__attribute__((visibility("default"))) int torchscan_token_native_request(const int64_t* words, int count,
                                                                          const char* text, int text_length,
                                                                          int64_t* answer, int capacity,
                                                                          const char** reason,
                                                                          int64_t* reason_length) noexcept {
  return torchscan::AnswerInWords<torchscan::NativeLayerWords>(words, count, text, text_length, answer, capacity,
                                                               reason, reason_length);
}

// A mask's summary read from its memory (Note [Reading a mask's values] in
// analyses/token_flow.h) for tokens.read_mask: `tensor` is the address of
// the mask's TensorImpl (Tensor._cdata of a tensor the caller holds), flags
// bit 0 blocks_true and bit 1 padding. Answers the summary's word count,
// having written the words to `words` when they fit in `capacity` (else the
// caller asks again with room for them); -1 where the reading does not
// apply (the caller reads the mask with tensor operators).
__attribute__((visibility("default"))) int64_t torchscan_read_mask(uintptr_t tensor, int flags, int64_t* words,
                                                                   int64_t capacity) noexcept {
  try {
    if (tensor == 0 || capacity < 0) return -1;
    const at::Tensor mask(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::unsafe_reclaim_from_nonowning(
        reinterpret_cast<c10::TensorImpl*>(tensor)));
    const auto summary = torchscan::ReadMaskValues(mask, (flags & 1) != 0, (flags & 2) != 0);
    if (!summary) return -1;
    const auto n = static_cast<int64_t>(summary->size());
    if (n <= capacity) std::copy(summary->begin(), summary->end(), words);
    return n;
  } catch (...) {
    return -1;
  }
}

// crawl_module's layer rows (Session::LayersPickle, without the operator
// view): `*data` and `*size` then name bytes kept for the calling thread
// until its next call here. 0 on success; -1 when refused (the caller reads
// the rows through the custom class's module_layers, which says why).
__attribute__((visibility("default"))) int torchscan_module_layers_pickle(int handle, const char** data,
                                                                          int64_t* size) noexcept {
  return torchscan::HandOverBytes(handle, data, size, [](torchscan::ScriptSession& s) {
    if (s.preparing_rows.valid()) {  // without Use(): the thread may still be writing the reports
      std::optional<std::string> rows = s.preparing_rows.get();
      if (rows) return torchscan::StatusOr<std::string>(*std::move(rows));
    }
    return s.Use().LayersPickle(/*operator_view=*/false);
  });
}

// The operator (`which` bit 0) and module (bit 1) reports of a stopped scan
// (Session::ReportsPickle), handed over as torchscan_module_layers_pickle
// hands over its rows.
__attribute__((visibility("default"))) int torchscan_reports_pickle(int handle, int which, const char** data,
                                                                    int64_t* size) noexcept {
  if (which < 1 || which > 3) return -1;
  return torchscan::HandOverBytes(handle, data, size, [which](torchscan::ScriptSession& s) {
    torchscan::Session& session = s.Use();
    if (s.prepared && s.prepared->reports && (s.prepared->which & 3) == which) {
      return torchscan::StatusOr<std::string>(*std::exchange(s.prepared->reports, {}));
    }
    return session.ReportsPickle((which & 1) != 0, (which & 2) != 0);
  });
}

// Starts writing a stopped scan's streams on a thread of their own (Note
// [Reports prepared on a second thread]): `which` bit 0 its FlopReport and
// bit 1 its module report (as torchscan_reports_pickle's `which`), bit 2 its
// rows (torchscan_module_layers_pickle), which those entry points then hand
// over; streams prepared before and not taken are dropped. 0 when started;
// -1 when not (an unknown handle, a scan not run or still running, no
// thread to be had): the entry points then write them.
__attribute__((visibility("default"))) int torchscan_reports_prepare(int handle, int which) noexcept {
  using torchscan::TheHandles;
  if (which < 1 || which > 7) return -1;
  try {
    auto& h = TheHandles();
    std::lock_guard<std::mutex> lock(h.mu);
    const auto it = h.sessions.find(handle);
    if (it == h.sessions.end()) return -1;
    torchscan::ScriptSession& s = *it->second;
    s.Use();
    if (!s.stopped || s.session.active()) return -1;  // a scan not run or still running has no report yet
    torchscan::Session* session = &s.session;
    // The thread ends before the session can go (~ScriptSession waits for it).
    s.prepared.reset();
    auto done = std::make_shared<std::promise<torchscan::ScriptSession::Prepared>>();
    auto rows_done = std::make_shared<std::promise<std::optional<std::string>>>();
    std::future<torchscan::ScriptSession::Prepared> future = done->get_future();
    std::future<std::optional<std::string>> rows_future;
    if (which & 4) rows_future = rows_done->get_future();
    torchscan::RunOnStreamWriter([session, which, done, rows_done] {
      torchscan::ScriptSession::Prepared p;
      p.which = which & 3;
      // Each promise is kept whatever happens: the entry points write what
      // is missing again, and say why.
      if (which & 4) {
        std::optional<std::string> rows;
        try {
          auto written = session->LayersPickle(/*operator_view=*/false);
          if (written.ok()) rows = *std::move(written);
        } catch (...) {
        }
        rows_done->set_value(std::move(rows));  // handed over from here on, while the reports are written
      }
      try {
        if (which & 3) {
          auto reports = session->ReportsPickle((which & 1) != 0, (which & 2) != 0);
          if (reports.ok()) p.reports = *std::move(reports);
        }
      } catch (...) {
      }
      done->set_value(std::move(p));
    });
    s.preparing = std::move(future);
    s.preparing_rows = std::move(rows_future);
    return 0;
  } catch (...) {
    return -1;
  }
}

// What a closed module scope of this thread's innermost scan ran, for the
// token analysis (torchscan/token_flow.py), which asks after every module
// call: bit 0 attention, bit 1 a softmax, and from bit 2 the number of
// attention masks, whose identities (TensorImpl addresses) fill `masks` up
// to `capacity`; the calls of the `step_count` module scopes in `steps`
// (those the request will take as steps) are not searched. 0 when the scope
// is not that scan's (another `path`), not closed, or folded; -1 when it
// fails or an argument is malformed. The "masks" query of TokenFlowJson,
// without its JSON.
__attribute__((visibility("default"))) int torchscan_token_flow_masks(int scope, const char* path, int length,
                                                                      const int32_t* steps, int step_count,
                                                                      uint64_t* masks, int capacity) noexcept {
  try {
    if (length < 0 || step_count < 0 || (step_count > 0 && steps == nullptr)) return -1;
    const torchscan::Recorder* recorder =
        torchscan::ClosedScopeRecorder(scope, std::string_view(path, static_cast<size_t>(length)));
    if (recorder == nullptr) return 0;
    const torchscan::TokenMaskQuery q =
        torchscan::FindAttentionMasks(*recorder, scope, std::vector<int32_t>(steps, steps + step_count));
    if (q.masks.size() > static_cast<size_t>(std::numeric_limits<int>::max() >> 2)) return -1;
    for (size_t i = 0; i < q.masks.size() && i < static_cast<size_t>(std::max(capacity, 0)); ++i) {
      masks[i] = static_cast<uint64_t>(q.masks[i]);
    }
    return (q.attention ? 1 : 0) | (q.softmax ? 2 : 0) | (static_cast<int>(q.masks.size()) << 2);
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
