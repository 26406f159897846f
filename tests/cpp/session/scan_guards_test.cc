// Scan guards and options of the C++ API: an exception through open scopes,
// misuse reported as a status, views and structure mode, lean scans.
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>

#include <string>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;

TEST(Guards, ExceptionThroughScopesRestoresStateAndMarksTheCallFailed) {
  Session s;
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  try {
    ScanGuard scan(s);
    ModuleScope root(s, "");
    at::mm(a, b);
    RequestScope request(s, "r");
    ModuleScope child(s, "head");
    at::mm(a, a);  // shape mismatch: raises out of every guard
  } catch (const c10::Error&) {
  }
  EXPECT_FALSE(ModeKeyIncluded());
  EXPECT_FALSE(s.active());
  const json layers = json::parse(s.LayersJson().value());
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]["path"], "");
  EXPECT_EQ(layers[0]["failed"], true);
  EXPECT_EQ(layers[1]["path"], "head");
  EXPECT_EQ(layers[1]["failed"], true);
  EXPECT_EQ(layers[0]["metrics"]["operator_flops"]["status"], "unavailable");
  const json r = json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["by_operator"]["aten.mm"], 48);  // the call that ran; the raising one is a diagnostic
}

TEST(Options, ViewsAndStructureMode) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  auto report = [&](ScanOptions o) {
    Session s(o);
    {
      ScanGuard scan(s);
      ModuleScope m(s, "head");
      at::mm(a, b);
    }
    return json::parse(s.ScanReportJson().value());
  };
  ScanOptions only_operator;
  only_operator.module_view = false;
  json r = report(only_operator);
  EXPECT_EQ(r["operator_flops"]["total"]["value"], 48);
  EXPECT_TRUE(r["module_report"].is_null());
  EXPECT_EQ(r["layers"][0]["metrics"]["operator_flops"]["value"], 48);
  EXPECT_EQ(r["layers"][0]["metrics"]["macs"]["method"], "not_requested");
  EXPECT_EQ(r["layers"][0]["metrics"]["macs"]["status"], "unavailable");

  ScanOptions structure;
  structure.structure = true;
  r = report(structure);
  EXPECT_EQ(r["context"]["analysis_mode"], "structure");
  EXPECT_TRUE(r["operator_flops"].is_null());
  EXPECT_TRUE(r["module_report"].is_null());
  ASSERT_EQ(r["layers"].size(), 1u);
  EXPECT_EQ(r["layers"][0]["path"], "head");
  for (const char* m : {"operator_flops", "module_flops", "macs", "dmas"}) {
    EXPECT_EQ(r["layers"][0]["metrics"][m]["method"], "not_requested") << m;
  }

  r = report(ScanOptions{});  // both views: 2*3*4 = 24 MACs (one per term), FLOPs as above
  EXPECT_EQ(r["module_report"]["totals"]["macs"]["value"], 24);
  EXPECT_EQ(r["context"]["threads"], "current");
}

TEST(Options, LeanScansReportTheSameFromFewerCalls) {
  const at::Tensor x = at::ones({1, 3, 8, 8}), w = at::ones({4, 3, 3, 3}), b = at::ones({4});
  auto scan = [&](bool record_owned_children) {
    ScanOptions o;
    o.record_owned_children = record_owned_children;
    Session s(o);
    {
      ScanGuard guard(s);
      ModuleScope m(s, "conv");
      at::relu(at::conv2d(x, w, b, 1, 1));
    }
    return std::make_tuple(json::parse(s.ScanReportJson().value()), s.recorded_calls());
  };
  const auto [full, full_calls] = scan(true);
  const auto [lean, lean_calls] = scan(false);
  // conv2d (4 outputs channels x 8x8 positions x 27 terms x 2 = 13824) and
  // relu (4x8x8 = 256), whichever way the convolution's inner calls run.
  EXPECT_EQ(full["operator_flops"]["total"]["value"], 13824 + 256);
  EXPECT_EQ(lean["operator_flops"], full["operator_flops"]);
  EXPECT_EQ(lean["module_report"], full["module_report"]);
  EXPECT_EQ(lean["layers"], full["layers"]);
  EXPECT_LT(lean_calls, full_calls);
}

TEST(Guards, MisuseIsAStatusNotACrash) {
  Session s;
  EXPECT_EQ(s.BeginRequest("x").code(), torchscan::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ScanReportJson().status().code(), torchscan::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Start().ok());
  EXPECT_EQ(s.ScanReportJson().status().code(), torchscan::StatusCode::kFailedPrecondition);  // kCurrent: no snapshots
  ASSERT_TRUE(s.BeginRequest("x").ok());
  EXPECT_EQ(s.BeginRequest("y").code(), torchscan::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.EndRequest().ok());
  EXPECT_EQ(s.EndRequest().code(), torchscan::StatusCode::kFailedPrecondition);
  std::thread other(
      [&] { EXPECT_EQ(s.PushModuleScope("m").status().code(), torchscan::StatusCode::kFailedPrecondition); });
  other.join();
  ASSERT_TRUE(s.Stop().ok());
}

}  // namespace
}  // namespace torchscan
