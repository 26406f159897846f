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
// A Session scans once. Scans nest in one thread (stop in reverse order);
// a scan never records another thread's work.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan {

class Recorder;

// A caller formula: one call's metadata in, FLOPs out (operator view).
using CallerFormula = std::function<FormulaResult(const OpCall&)>;

struct ScanOptions {
  // Scope label of the totals: "workload" (any work) or "forward".
  std::string scope = "workload";
};

class Session {
 public:
  explicit Session(ScanOptions options = {});
  ~Session();  // stops an active scan of this thread
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Overrides for this scan only ("aten::relu" names every overload and the
  // in-place variant). Must be set before Start().
  absl::Status SetOperatorFormula(std::string_view op, CallerFormula formula);
  // An override whose values are supplied after Stop() (by the Python shim).
  absl::Status DeferOperatorFormula(std::string_view op);

  absl::Status Start();  // scan the calling thread
  absl::Status Stop();   // same thread; innermost scan first
  bool active() const;
  size_t recorded_calls() const;
  // Distinct operator overloads recorded so far ("aten::add.Tensor"), sorted.
  std::vector<std::string> RecordedOperators() const;

  // Labels of the modules running now (FlopCounterMode's ModuleTracker
  // spelling, e.g. {"Global", "Sequential", "Sequential.0"}): calls made
  // from here on count for each of them in the report's by_module.
  absl::Status SetModuleLabels(std::vector<std::string> labels);

  // After Stop(): the calls that deferred formulas must value, as JSON
  // [{"index", "op", "overload", "args": [...], "kwargs": {...}, "out": ...}].
  absl::StatusOr<std::string> DeferredCallsJson();
  // {"<index>": flops, ...} for every call DeferredCallsJson listed.
  absl::Status SetDeferredResultsJson(std::string_view json);
  // Module scopes: calls made between Push and Pop belong to the module call
  // (path, call_index); call_index counts earlier calls of the same path.
  // Pop closes scopes left open inside it (their forward raised).
  absl::StatusOr<int32_t> PushModuleScope(std::string_view path);
  // `outputs`: identities (TensorImpl addresses) of the call's output
  // tensors, for receptive fields from data flow.
  absl::Status PopModuleScope(int32_t scope, bool failed = false, std::vector<uintptr_t> outputs = {});
  // After Stop(): one row per module call with its own calls' values in both
  // views: [{"path", "call_index", "parent", "depth", "failed", "metrics"}].
  absl::StatusOr<std::string> LayersJson();

  // The schema-v1 FlopReport as JSON text.
  absl::StatusOr<std::string> FlopReportJson();
  // The module view of the same calls (module_flops, macs, dmas) as JSON text.
  absl::StatusOr<std::string> ModuleReportJson();

 private:
  struct State;
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

// True while this thread's dispatch TLS includes TorchScan's mode key.
bool ModeKeyIncluded();

}  // namespace torchscan
