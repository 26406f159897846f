// What the session tests of the C++ API share (tests/cpp/session/threads_test.cc,
// torchscript_test.cc, thread_trace_test.cc): the all-threads options, a
// report's total, the calls a workload records, and a TorchScript model.
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

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

// A TorchScript model compiled in C++ (no Python): root -> a, b.
inline torch::jit::Module Scripted() {
  auto sub = [](const char* name, int64_t n) {
    torch::jit::Module m(name);
    m.register_parameter("weight", at::ones({n, n}), /*is_buffer=*/false);
    m.define("def forward(self, x):\n  return torch.mm(x, self.weight)\n");
    return m;
  };
  torch::jit::Module root("Root");
  root.register_module("a", sub("A", 4));
  root.register_module("b", sub("B", 4));
  root.define("def forward(self, x):\n  return torch.relu(self.b.forward(self.a.forward(x)))\n");
  return root;
}

}  // namespace torchscan::testing
