// Memory per module call and per operator, from the allocator reports a scan
// logged (memory.h), in bytes. Every figure counts only blocks allocated
// during the scan:
//   peak_memory      the most bytes allocated inside the call (its children
//                    included) that were alive at one time, counted from the
//                    call's start: the activation and workspace high-water
//                    mark the call adds;
//   allocated_bytes  bytes allocated inside the call and still alive when it
//                    returned: its outputs and what it kept (saved tensors,
//                    caches).
// Per operator, each block belongs to the top-level call running when it was
// allocated (the operator the program called, e.g. aten.matmul for the copy
// its reshape makes, or a kernel the autograd engine ran): `allocated_bytes`
// outlived that call, `temporary_bytes` were freed before it returned.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formulas/result.h"
#include "reports/layers.h"
#include "reports/metric.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

struct MemoryFigures {
  MetricStatus status = MetricStatus::kUnavailable;
  int64_t peak = 0;
  int64_t allocated = 0;
};

struct OperatorMemory {
  int64_t blocks = 0;
  int64_t allocated = 0;  // outlived the call that allocated them
  int64_t temporary = 0;  // freed before it returned
};

struct MemoryResult {
  MemoryFigures total;          // the whole scan (alive: when it stopped)
  int64_t total_allocated = 0;  // every block allocated during the scan
  int64_t blocks = 0;
  std::vector<MemoryFigures> scopes;                  // per module call (scope order)
  std::map<std::string, OperatorMemory> by_operator;  // "aten.addmm"; "(outside operators)"
  std::vector<reports::Diagnostic> diagnostics;
};

MemoryResult ComputeMemory(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                           const MemoryLog& log, OpCatalog& catalog);

// {"kind": "torchscan_memory_report", "schema_version", "meaning", "totals":
// {"peak_memory", "allocated_bytes", "total_allocated_bytes"} (MetricResults),
// "blocks", "by_operator": {op: {"blocks", "allocated_bytes", "temporary_bytes"}},
// "layers": [{"peak_memory", "allocated_bytes"}] (one per module call, in
// LayerRows order), "diagnostics"}.
nlohmann::json MemoryJson(const MemoryResult& m, const std::string& scope);

}  // namespace torchscan
