// The call tree as a Chrome / Perfetto trace (trace-event JSON format): one
// track per thread, module calls and operator calls as nested complete ("X")
// slices, timed by the per-call clock readings a scan takes when asked to
// (ScanOptions::timestamps). Operator slices carry their shapes and, for the
// kernels of the operator view's plan, FLOPs and bytes (traffic.h). Requests
// are flows through their slices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/core/call_set.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/traffic.h"

namespace torchscan {

// One track: a thread's number (ThreadLog::number, Scope::thread) and label.
struct TraceThread {
  int64_t number = 1;
  std::string name;
};

// `set.times`: its calls' times (two per call); calls and scopes still open
// end at `stopped_ns` (when the scan stopped). A call's thread is the one
// set.thread_starts gives it, a scope's its Scope::thread; with neither (a
// scan of one thread) both are threads[0]'s. Slices include time TorchScan
// spent paused inside them (a torch.compile compile, its own analyses); an
// Inductor graph's run is a marker slice (torchscan.compiled_region), not
// the span of its kernels.
nlohmann::json TraceJson(const CallSet& set, const std::vector<TraceThread>& threads, int64_t stopped_ns,
                         const TrafficResult& traffic, OpCatalog& catalog);

}  // namespace torchscan
