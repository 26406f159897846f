// What the session tests of the C++ API share (tests/cpp/session/threads_test.cc,
// torchscript_test.cc, thread_trace_test.cc): the all-threads options, a
// report's total and the calls a workload records (the TorchScript model
// is in scripted_testing.h: only the suites that script parse the jit).
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan::testing {

// One layer row per module call (rows aggregated across requests: aggregate_test.cc).
inline ScanOptions AllThreads() {
  ScanOptions o;
  o.threads = Threads::kAll;
  o.layer_rows = LayerRowMode::kPerCall;
  return o;
}

inline int64_t Total(const std::string& flop_report) {
  return nlohmann::json::parse(flop_report)["total"]["value"].get<int64_t>();
}

// Calls one workload records (the operator and what its kernel calls),
// from a scan of the current thread.
template <class F>
int64_t CallsOf(F&& workload) {
  Session s;
  {
    ScanGuard scan(s);
    workload();
  }
  return static_cast<int64_t>(s.recorded_calls());
}

}  // namespace torchscan::testing
