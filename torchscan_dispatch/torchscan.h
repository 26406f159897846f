// TorchScan's public C++ API.
//
//   #include "torchscan_dispatch/torchscan.h"
//
//   torchscan::Session session;
//   {
//     torchscan::ScanGuard scan(session);   // this thread is scanned
//     auto y = model.forward({x});
//   }                                       // scan stopped, TLS restored
//   std::string report = session.FlopReportJson().value();
//
// A Session scans once. By default it scans the thread that starts it: such
// scans nest (stop in reverse order) and never record another thread's work.
// With ScanOptions::threads = Threads::kAll it covers every thread that runs
// ATen work while it is active (a server's worker pool), one log per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "torchscan_dispatch/status.h"
#include "torchscan_dispatch/types.h"

namespace torchscan {

class Session {
 public:
  explicit Session(ScanOptions options = {});
  ~Session();  // stops an active scan of this thread
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Overrides for this scan only ("aten::relu" names every overload and the
  // in-place variant). Must be set before Start().
  Status SetOperatorFormula(std::string_view op, CallerFormula formula);
  // An override whose values are supplied after Stop() (by the Python shim).
  Status DeferOperatorFormula(std::string_view op);
  // A module handler for every call of the module scope `path` ("" is the
  // root) for this scan only; set before Start(), one per path. It runs when
  // a report that needs it is built (LayersJson, LayerRows,
  // ModuleReportJson, ScanReportJson), once per call for the unfiltered
  // reports; a call whose forward raised (failed) runs none. Its estimates
  // replace the module view's values in the layers and the module view's
  // totals (by_operator stays the built-in formulas'); its diagnostics are
  // the module report's. The operator view never changes.
  Status SetModuleHandler(std::string_view path, ModuleHandler handler, ModuleHandlerOptions options);

  // Scan the calling thread. FailedPrecondition while the thread's recording
  // is paused (TorchScan's own analysis or a torch.compile compile runs on
  // it): the scan would count none of its calls.
  Status Start();
  Status Stop();  // same thread; innermost scan first
  bool active() const;
  size_t recorded_calls() const;
  // Calls held in memory now: recorded_calls() less those a streaming scan folded.
  size_t held_calls() const;
  // Distinct operator overloads recorded so far ("aten::add.Tensor"), sorted.
  std::vector<std::string> RecordedOperators() const;

  // Labels of the modules running now (FlopCounterMode's ModuleTracker
  // spelling, e.g. {"Global", "Sequential", "Sequential.0"}): calls made
  // from here on count for each of them in the report's by_module.
  Status SetModuleLabels(std::vector<std::string> labels);
  // One label at a time: a module starts / stops running. Same result as
  // restating the whole set, at a cost that does not grow with nesting depth.
  Status EnterModuleLabel(std::string_view label);
  Status ExitModuleLabel(std::string_view label);

  // After Stop(): the calls that deferred formulas must value, as JSON
  // [{"index", "op", "overload", "args": [...], "kwargs": {...}, "out": ...}].
  StatusOr<std::string> DeferredCallsJson();
  // {"<index>": flops, ...} for every call DeferredCallsJson listed.
  Status SetDeferredResultsJson(std::string_view json);
  // Module scopes: calls made between Push and Pop belong to the module call
  // (path, call_index); call_index counts earlier calls of the same path.
  // Pop closes scopes left open inside it (their forward raised).
  StatusOr<int32_t> PushModuleScope(std::string_view path);
  // `outputs`: identities (TensorImpl addresses) of the call's output
  // tensors, for receptive fields from data flow. `ran_attention`, when
  // given, is set to whether the scope recorded a call that runs attention
  // or a softmax (the calls a module's token analysis reads).
  Status PopModuleScope(int32_t scope, bool failed = false, std::vector<uintptr_t> outputs = {},
                        bool* ran_attention = nullptr);
  // After Stop(): one row per module call with its own calls' values in both
  // views: [{"path", "call_index", "parent", "depth", "failed", "metrics"}].
  // operator_view false: the rows without "operator_flops" (for module
  // analysis, which reports that view as a whole), for less work.
  StatusOr<std::string> LayersJson(const ReportFilter& filter = {}, bool operator_view = true);
  // The same rows as a stream in Python's pickle protocol 4 (bytes that
  // pickle.loads reads as json.loads reads LayersJson's text), unfiltered:
  // the Python shim's module analysis loads it.
  StatusOr<std::string> LayersPickle(bool operator_view = true);
  // After Stop(): the operator and module reports (FlopReportJson,
  // ModuleReportJson, unfiltered), those asked for, as one pickle stream of
  // a list in that order: the objects json.loads gives for their texts. The
  // Python shim's FlopScan loads it.
  StatusOr<std::string> ReportsPickle(bool flop = true, bool module = true);
  // The same rows as values, in the same order (scope order).
  StatusOr<std::vector<LayerRow>> LayerRows(const ReportFilter& filter = {});
  // After Stop(): the results of module handlers that ran outside the
  // engine (the Python shim's custom_modules), by row of LayerRows; the
  // JSON is ModuleResultsFromJson's (torchscan_dispatch/analyses/
  // module_handlers.h). The unfiltered reports apply them as they apply
  // SetModuleHandler's handlers; a second call replaces the first.
  Status SetModuleResultsJson(std::string_view json);

  // Requests: the calling thread's calls between BeginRequest and EndRequest
  // belong to request `id` (see RequestScope).
  Status BeginRequest(std::string_view id);
  Status EndRequest();

  // After Stop(): the schema-v1 FlopReport (operator view) as JSON text.
  StatusOr<std::string> FlopReportJson(const ReportFilter& filter = {});
  // The module view of the same calls (module_flops, macs, dmas) as JSON text.
  StatusOr<std::string> ModuleReportJson(const ReportFilter& filter = {});
  // Memory traffic of the same calls (the roofline's input): per
  // kernel of the operator view's plan, FLOPs, bytes read and written, and
  // the fused estimates' groups (torchscan_dispatch/analyses/traffic.h) as JSON text.
  StatusOr<std::string> TrafficJson(const ReportFilter& filter = {});
  // ScanOptions::memory, after Stop(): {"kind": "torchscan_memory_report",
  // "totals": {"peak_memory", "allocated_bytes", "total_allocated_bytes"},
  // "by_operator", "layers" (per module call, LayerRows order), "diagnostics",
  // "meaning"} for the whole scan.
  StatusOr<std::string> MemoryReportJson();
  // ScanOptions::timestamps, after Stop(): the call tree as a Chrome /
  // Perfetto trace ({"traceEvents": [...]}, the trace-event JSON format):
  // one track per thread (named by a thread_name event), module and
  // operator calls as nested slices, operator slices with their shapes and,
  // for counted kernels, FLOPs and bytes; each request a flow through its
  // module slices (bind_id, flow_in, flow_out).
  StatusOr<std::string> TraceJson();
  // Everything in one JSON document: {"kind": "torchscan_scan_report",
  // "context", "operator_flops" (FlopReport), "module_report", "layers",
  // "threads": [{"thread", "name", "calls", "totals"}], "requests": [...]}.
  // With Threads::kAll it may also be taken while the scan runs: a snapshot
  // of the calls that have settled (calls, module calls and requests still
  // running are left out and counted in context.in_flight_calls).
  StatusOr<std::string> ScanReportJson(const ReportFilter& filter = {});
  // The threads whose calls were recorded so far.
  std::vector<ThreadInfo> ThreadsSeen() const;

  struct State;  // opaque

 private:
  std::unique_ptr<State> state_;
};

// Starts a scan for the guard's lifetime; throws c10::Error when it cannot.
class ScanGuard {
 public:
  explicit ScanGuard(Session& session);
  ~ScanGuard();
  ScanGuard(const ScanGuard&) = delete;
  ScanGuard& operator=(const ScanGuard&) = delete;

 private:
  Session& session_;
};

// A module call for the guard's lifetime (e.g. around a TorchScript
// submodule's forward). An exception leaving the scope marks the call failed.
class ModuleScope {
 public:
  ModuleScope(Session& session, std::string_view path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  Session& session_;
  int32_t scope_;
  int uncaught_;
};

// A request on the calling thread for the guard's lifetime.
class RequestScope {
 public:
  RequestScope(Session& session, std::string_view id);
  ~RequestScope();
  RequestScope(const RequestScope&) = delete;
  RequestScope& operator=(const RequestScope&) = delete;

 private:
  Session& session_;
};

// Joins the calling thread to the active Threads::kAll scan (no-op when
// there is none): its ATen calls are recorded from here on.
void JoinAllThreadsScan();

// True while this thread's dispatch TLS includes TorchScan's mode key.
bool ModeKeyIncluded();

}  // namespace torchscan
