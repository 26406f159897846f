// A TorchScript model for the session tests of the C++ API that script
// (tests/cpp/session/torchscript_test.cc, thread_trace_test.cc); apart from
// scan_testing.h so that the suites that do not script do not parse
// <torch/csrc/jit/api/module.h>, the costliest header they would include.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>

namespace torchscan::testing {

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
