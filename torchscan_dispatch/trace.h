// The call tree as a Chrome / Perfetto trace (trace-event JSON format): one
// track per thread, module calls and operator calls as nested complete ("X")
// slices, timed by the per-call clock readings a scan takes when asked to
// (ScanOptions::timestamps). Operator slices carry their shapes and, for the
// kernels of the operator view's plan, FLOPs and bytes (traffic.h).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/scan_state.h"
#include "torchscan_dispatch/traffic.h"

namespace torchscan {

// `times`: Recorder::call_times() of `events` (two per call); calls and
// scopes still open end at `stopped_ns` (when the scan stopped). Slices
// include time TorchScan spent paused inside them (a torch.compile compile,
// its own analyses); an Inductor graph's run is a marker slice
// (torchscan.compiled_region), not the span of its kernels.
nlohmann::json TraceJson(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                         const std::vector<int64_t>& times, int64_t stopped_ns, const TrafficResult& traffic,
                         OpCatalog& catalog);

}  // namespace torchscan
