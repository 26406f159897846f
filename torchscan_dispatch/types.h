// The value types of TorchScan's public C++ API (torchscan.h): scan options,
// report filters, layer rows, caller formulas and module handlers. The
// engine's layers below the session use these without the Session API.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formulas/op_call.h"
#include "formulas/result.h"
#include "torchscan_dispatch/status.h"

namespace torchscan {

// A caller formula: one call's metadata in, FLOPs out (operator view).
using CallerFormula = std::function<FormulaResult(const OpCall&)>;

// ---- Custom module handlers (Session::SetModuleHandler): the C++ side of
// crawl_module(custom_modules=...). A handler estimates the module-view
// metrics of every call of one module scope (ModuleScope, PushModuleScope).

// What a handler's estimate of a metric covers: the work the call's scope
// did itself (kModuleCall: it replaces that value; the calls inside it keep
// theirs), or everything that ran inside the call (kSubtree: an inclusive
// estimate; the rows inside it lose the metric and name this call in
// metric_owners).
enum class MetricOwnership { kModuleCall, kSubtree };

struct ModuleMetricEstimate {
  MetricStatus status = MetricStatus::kComplete;
  // kComplete: the value; kPartial: a lower bound (known_value); ignored
  // when kUnavailable. A negative or overflowed Count is invalid.
  Count value = 0;
  MetricOwnership ownership = MetricOwnership::kModuleCall;
  // Optional: the result's method becomes "custom_module_handler:<name>:<method>".
  std::string method;
};

// One call's estimates by metric name: "module_flops", "macs", "dmas" (any
// other name makes the whole estimate invalid). A metric left out keeps the
// built-in value, unless the handler owns it (ModuleHandlerOptions::metrics).
struct ModuleEstimate {
  std::map<std::string, ModuleMetricEstimate> metrics;
};

// One module call as its handler sees it, after Stop(): its identity and
// every operator call recorded while it ran (its children's included), in
// call order, as the formulas see them.
struct ModuleCall {
  std::string path;
  int32_t call_index = 0;
  int32_t depth = 0;
  struct Op {
    std::string name;     // "aten::mm"
    OpCall call;          // valid while the handler runs
    bool own = true;      // made by this call itself, not by a module call inside it
    bool nested = false;  // made inside another operator call listed here (part of its work)
  };
  std::vector<Op> ops;
};

// Throwing a std::exception (c10::Error included) makes the owned metrics
// unavailable with a custom_handler_error diagnostic; the reports are built.
using ModuleHandler = std::function<ModuleEstimate(const ModuleCall&)>;

struct ModuleHandlerOptions {
  // Required: results carry method "custom_module_handler:<name>", e.g.
  // "my_server.AttentionCost".
  std::string name;
  // The metrics the handler owns for every call: an owned metric its
  // estimate leaves out is unavailable (custom_metric_unavailable), and
  // exactly these are unavailable when it throws. Empty: the metrics each
  // estimate names (all three when it throws).
  std::vector<std::string> metrics;
  // The ownership of owned metrics the handler could not value.
  MetricOwnership ownership = MetricOwnership::kModuleCall;
};

enum class Threads {
  kCurrent,  // the thread that calls Start()
  kAll,      // every thread, while the scan is active (one such scan at a time)
};

// ScanReportJson's layer rows (ScanOptions::layer_rows).
enum class LayerRowMode {
  kDefault,     // kAggregated for Threads::kAll scans, kPerCall otherwise
  kPerCall,     // one row per module call, every request's
  kAggregated,  // rows aggregated across requests (Threads::kAll only)
};

struct ScanOptions {
  // Scope label of the totals: "workload" (any work) or "forward".
  std::string scope = "workload";
  Threads threads = Threads::kCurrent;
  // Threads::kAll: threads that do not carry the mode key join on their first
  // operator through a global RecordFunction callback, which makes every ATen
  // call box its inputs while the scan runs. false: threads join only when
  // they carry the key, e.g. because they called JoinAllThreadsScan() when
  // they started (the attach library does this for every new thread).
  bool join_on_first_call = true;
  // Submodule calls of TorchScript models (torch::jit::load) become module
  // scopes named by their module paths ("" is the root, "features.0", ...).
  bool torchscript_scopes = true;
  // With torchscript_scopes: each top-level TorchScript forward (a function
  // call made outside any open request) is a request of its own, id
  // "forward-<n>", n counting them in this process from 1. The attach
  // library turns this on, so an unmodified server's requests are reported.
  bool torchscript_requests = false;
  // false: a call that owns its whole subtree in both views (a formula or a
  // zero-cost rule in each, e.g. aten::convolution) runs the calls its kernel
  // makes without the fallback. Reports are the same; those inner calls are
  // not recorded (RecordedOperators, recorded_calls), and a scan costs less.
  bool record_owned_children = true;
  // Which views ScanReportJson values: the operator view (operator_flops)
  // and the module view (module_flops, macs, dmas). A view left out is null
  // in the document and unavailable / not_requested in the layers.
  bool operator_view = true;
  bool module_view = true;
  // Structure mode: no views; the layers (module calls, receptive fields)
  // stay.
  bool structure = false;
  // Memory attribution (Threads::kCurrent scans): the allocator's reports of
  // every block allocated and freed during the scan, tied to the module call
  // and operator running. Layers gain peak_memory and allocated_bytes, and
  // MemoryReportJson the scan's peak and the bytes per operator. It takes the
  // thread's allocator-reporting slot, the one torch.profiler uses: with a
  // profiler already running, the figures are unavailable (and say why).
  bool memory = false;
  // Per-call start and end times, for TraceJson (with Threads::kAll, every
  // thread's). Off by default: the clock is read twice per call when on.
  bool timestamps = false;
  // Streaming: memory that grows with module calls and requests, not with
  // operator calls. Whenever no call, module call or request is open and at
  // least `fold_every` calls are held, they are folded into the reports'
  // sums and dropped; the reports are those of the same scan without it.
  // Refused with memory, timestamps, module handlers and deferred caller
  // formulas, and reports filtered by request (they need every call).
  bool streaming = false;
  size_t fold_every = 4096;
  // false: the scan takes no module scopes (PushModuleScope and ModuleScope
  // are refused, and torchscript_scopes must be off), so a streaming scan's
  // folds skip the receptive-field data flow, which only module calls'
  // fields read: a streamed call costs less.
  bool module_scopes = true;
  // kAggregated: the report's "aggregate" holds one row per module identity
  // (path and call index within its request) and call signature (operators
  // and shapes: calls of other shapes or batch sizes are rows of their own)
  // with its call count and summed metrics, the distribution of the
  // requests' totals (min, median, p99, max) and the requests by class (the
  // common case first). "layers" and "requests" then hold the last
  // `per_request_rows` requests only (SIZE_MAX: all). A streaming scan so
  // aggregated keeps memory bounded by the model, not by the requests
  // served; LayersJson and LayerRows need LayerRowMode::kPerCall there.
  LayerRowMode layer_rows = LayerRowMode::kDefault;
  size_t per_request_rows = 0;
};

// Which calls a report covers; empty sets mean all. Requests and threads
// are kept apart while scanning and merged by naming several.
struct ReportFilter {
  std::set<int64_t> threads;       // thread numbers (ThreadInfo::number)
  std::set<std::string> requests;  // ids given to BeginRequest / RequestScope
};

struct ThreadInfo {
  int64_t number = 0;  // 1, 2, ... in the order threads first ran ATen work
  std::string name;    // the thread's name, when it has one
  int64_t calls = 0;   // operator calls recorded
};

// One row of LayersJson as values (the same content, no JSON text): a
// module call, its own calls valued in both views and its output's
// receptive field. MetricStatus and Count are the formula API's types
// (formulas/result.h).
struct LayerRow {
  std::string path;
  int32_t call_index = 0;
  int32_t parent = -1;  // index of the enclosing row, -1 for none
  int32_t depth = 0;
  bool failed = false;  // the forward raised: every value is unavailable
  // Threads::kAll scans: the thread that made the call (ThreadInfo::number;
  // 0 otherwise). Any scan: the request the call belongs to ("" for none).
  int64_t thread = 0;
  std::string request;
  // ScanOptions::memory: bytes, the call's children included. peak_memory:
  // the most bytes allocated inside the call alive at one time;
  // allocated_bytes: allocated inside the call and alive when it returned.
  bool memory = false;
  MetricStatus memory_status = MetricStatus::kUnavailable;
  int64_t peak_memory = 0;
  int64_t allocated_bytes = 0;
  // operator_flops, module_flops, macs, dmas (LayersJson's order). `known`
  // is the value when complete, a lower bound when partial, 0 when
  // unavailable.
  std::array<MetricStatus, 4> status{};
  std::array<Count, 4> known{};
  // Custom module handlers (Session::SetModuleHandler), per metric in the
  // order above (operator_flops never): owner[m] >= 0: the metric is covered
  // by the subtree estimate of row owner[m] (LayersJson leaves it out and
  // names the owner in metric_owners; status/known are then meaningless);
  // ownership[m]: supplied by this call's handler, with result method
  // method[m].
  std::array<int32_t, 4> owner = {-1, -1, -1, -1};
  std::array<std::optional<MetricOwnership>, 4> ownership;
  std::array<std::string, 4> method;
  // receptive_field, effective_stride, effective_padding of the output.
  struct Field {
    MetricStatus status = MetricStatus::kUnavailable;  // complete or unavailable
    double value = 0;                                  // when complete
    bool not_applicable = false;                       // method "not_applicable" (no spatial axes), else "data_flow"
    std::string reason;                                // why, when unavailable
    // (output dimension, value) per spatial axis followed, also when the
    // axes differ (unavailable: no single value).
    std::vector<std::pair<int32_t, double>> axes;
  };
  std::array<Field, 3> fields;
};

}  // namespace torchscan
