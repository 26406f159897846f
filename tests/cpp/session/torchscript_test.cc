// TorchScript models scanned through the C++ API: submodule calls become
// module scopes, back-to-back calls stay apart, and a forward that raises
// marks its calls failed.
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/jit/api/module.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cpp/session/scan_testing.h"
#include "tests/cpp/session/scripted_testing.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;
using testing::CallsOf;
using testing::Scripted;
using testing::Total;

TEST(TorchScript, SubmoduleCallsBecomeScopes) {
  torch::jit::Module model = Scripted();
  model.eval();
  const at::Tensor x = at::ones({2, 4});
  Session s(ScanOptions{"forward"});
  {
    ScanGuard scan(s);
    for (int i = 0; i < 2; ++i) model.forward({x});
  }
  const json layers = json::parse(s.LayersJson().value());
  std::map<std::string, std::vector<int64_t>> by_path;  // path -> operator FLOPs per call
  for (const auto& l : layers) by_path[l["path"]].push_back(l["metrics"]["operator_flops"]["value"]);
  // Each mm (2,4)@(4,4): 2*2*4*4 = 64, in its own submodule; relu (no FLOPs
  // in the operator view's native table, 8 in the fallback: one per element)
  // stays in the root's own row.
  EXPECT_EQ(by_path["a"], (std::vector<int64_t>{64, 64})) << layers.dump(1);
  EXPECT_EQ(by_path["b"], (std::vector<int64_t>{64, 64}));
  ASSERT_EQ(by_path[""].size(), 2u);  // two forwards: two calls of the root
  const int64_t total = Total(s.FlopReportJson().value());
  int64_t sum = 0;
  for (const auto& [path, values] : by_path)
    for (int64_t v : values) sum += v;
  EXPECT_EQ(sum, total);  // rows are exclusive and add up
}

// The same submodule called twice back to back: the interpreter runs the
// same inlined code under the same module path twice with no call between,
// and only the call sites (inner, then outer) tell the two calls apart.
TEST(TorchScript, BackToBackCallsOfOneSubmoduleAreTwoCalls) {
  torch::jit::Module shared("Shared");
  shared.register_parameter("weight", at::ones({4, 4}), /*is_buffer=*/false);
  shared.define("def forward(self, x):\n  return torch.mm(x, self.weight)\n");
  torch::jit::Module root("Root");
  root.register_module("shared", shared);
  root.define("def forward(self, x):\n  return self.shared.forward(self.shared.forward(x))\n");
  root.eval();
  Session s(ScanOptions{"forward"});
  {
    ScanGuard scan(s);
    for (int i = 0; i < 2; ++i) root.forward({at::ones({2, 4})});
  }
  const json layers = json::parse(s.LayersJson().value());
  std::map<std::pair<std::string, int64_t>, int64_t> rows;  // (path, call index) -> operator FLOPs
  for (const auto& l : layers) rows[{l["path"], l["call_index"]}] = l["metrics"]["operator_flops"]["value"];
  // As crawl_module numbers an eager model's calls: per path, in call order,
  // across both forwards. Each mm (2,4)@(4,4) is 2*2*4*4 = 64 FLOPs in its
  // own call of shared; the root's own rows hold nothing else.
  const std::map<std::pair<std::string, int64_t>, int64_t> want = {
      {{"", 0}, 0}, {{"", 1}, 0}, {{"shared", 0}, 64}, {{"shared", 1}, 64}, {{"shared", 2}, 64}, {{"shared", 3}, 64}};
  EXPECT_EQ(rows, want) << layers.dump(1);
}

TEST(TorchScript, AForwardThatRaisesMarksItsCallsFailed) {
  torch::jit::Module model = Scripted();
  Session s;
  {
    ScanGuard scan(s);
    EXPECT_ANY_THROW(model.forward({at::ones({2, 5})}));  // (2,5)@(4,4) raises in a
  }
  const json layers = json::parse(s.LayersJson().value());
  ASSERT_FALSE(layers.empty());
  for (const auto& l : layers) EXPECT_EQ(l["failed"], true) << l["path"];
  EXPECT_FALSE(ModeKeyIncluded());
}

}  // namespace
}  // namespace torchscan
