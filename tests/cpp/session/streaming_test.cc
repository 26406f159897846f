// Streaming scans (ScanOptions::streaming): calls are folded into the
// reports' sums whenever nothing is open, then dropped. Reports must equal
// those of a full scan of the same calls (a full scan around a streaming one
// sees every call the streaming one sees, tensors included), memory must not
// hold the folded calls, and what needs every call is refused.
// Expected FLOPs by hand: mm of (m,k)@(k,n) is 2*m*k*n in the operator view.
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>

#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;

ScanOptions Streaming(size_t fold_every) {
  ScanOptions o;
  o.streaming = true;
  o.fold_every = fold_every;
  return o;
}

json Without(json j, const std::string& key) {
  j["context"].erase(key);
  return j;
}

// A request's model: a root module call holding "fc" (mm) and "conv" (a
// conv whose output has a receptive field), then a relu.
void Model(std::vector<Session*> sessions, const at::Tensor& x, const at::Tensor& w, const at::Tensor& img,
           const at::Tensor& kernel) {
  std::vector<int32_t> root, layer;
  for (Session* s : sessions) root.push_back(s->PushModuleScope("").value());
  for (Session* s : sessions) layer.push_back(s->PushModuleScope("fc").value());
  const at::Tensor y = at::mm(x, w);
  for (size_t k = 0; k < sessions.size(); ++k) {
    ASSERT_TRUE(
        sessions[k]->PopModuleScope(layer[k], false, {reinterpret_cast<uintptr_t>(y.unsafeGetTensorImpl())}).ok());
  }
  for (size_t k = 0; k < sessions.size(); ++k) layer[k] = sessions[k]->PushModuleScope("conv").value();
  const at::Tensor c = at::conv2d(img, kernel);
  for (size_t k = 0; k < sessions.size(); ++k) {
    ASSERT_TRUE(
        sessions[k]->PopModuleScope(layer[k], false, {reinterpret_cast<uintptr_t>(c.unsafeGetTensorImpl())}).ok());
  }
  const at::Tensor r = at::relu(y);
  for (size_t k = 0; k < sessions.size(); ++k) {
    ASSERT_TRUE(
        sessions[k]->PopModuleScope(root[k], false, {reinterpret_cast<uintptr_t>(r.unsafeGetTensorImpl())}).ok());
  }
}

TEST(Streaming, ReportsEqualAFullScanOfTheSameCalls) {
  const at::Tensor x = at::ones({2, 3}), w = at::ones({3, 4});
  const at::Tensor img = at::ones({1, 1, 8, 8}), kernel = at::ones({1, 1, 3, 3});
  Session full;                 // outermost: sees every call the inner ones see
  Session every(Streaming(1));  // folds whenever nothing is open
  Session sevens(Streaming(7));
  ASSERT_TRUE(full.Start().ok());
  ASSERT_TRUE(every.Start().ok());
  ASSERT_TRUE(sevens.Start().ok());
  const int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) {
    const std::string id = "r" + std::to_string(i);
    for (Session* s : {&full, &every, &sevens}) ASSERT_TRUE(s->BeginRequest(id).ok());
    Model({&full, &every, &sevens}, x, w, img, kernel);
    for (Session* s : {&full, &every, &sevens}) ASSERT_TRUE(s->EndRequest().ok());
    at::add(x, x);  // between requests, outside any
  }
  ASSERT_TRUE(sevens.Stop().ok());
  ASSERT_TRUE(every.Stop().ok());
  ASSERT_TRUE(full.Stop().ok());

  const json f = json::parse(full.ScanReportJson().value());
  // By hand: per request mm 2*2*3*4 = 48 and conv 2*(6*6 outputs)*(9 terms) = 648 (PyTorch's conv rule:
  // 2 x output elements x kernel elements x in-channels).
  EXPECT_EQ(f["operator_flops"]["by_operator"]["aten.mm"], 48 * kRequests);
  EXPECT_EQ(f["operator_flops"]["by_operator"]["aten.convolution"], 648 * kRequests);
  ASSERT_EQ(f["requests"].size(), static_cast<size_t>(kRequests));
  ASSERT_EQ(f["layers"].size(), static_cast<size_t>(3 * kRequests));  // root, fc, conv per request
  EXPECT_EQ(f["layers"][2]["path"], "conv");
  EXPECT_EQ(f["layers"][2]["metrics"]["receptive_field"]["value"], 3);
  for (Session* s : {&every, &sevens}) {
    const json r = json::parse(s->ScanReportJson().value());
    EXPECT_EQ(r["context"]["streaming"], true);
    EXPECT_EQ(Without(r, "streaming"), Without(f, "streaming"));
    EXPECT_EQ(json::parse(s->FlopReportJson().value()), json::parse(full.FlopReportJson().value()));
    EXPECT_EQ(json::parse(s->ModuleReportJson().value()), json::parse(full.ModuleReportJson().value()));
    EXPECT_EQ(json::parse(s->LayersJson().value()), json::parse(full.LayersJson().value()));
    EXPECT_EQ(s->recorded_calls(), full.recorded_calls());
    EXPECT_EQ(s->RecordedOperators(), full.RecordedOperators());
    EXPECT_LT(s->held_calls(), full.held_calls());
  }
  // Folding at every settled moment leaves only the last add held.
  EXPECT_LE(every.held_calls(), 1u);
}

TEST(Streaming, HeldCallsStayBoundedOverALongWorkload) {
  const at::Tensor a = at::ones({4});
  Session s(Streaming(64));
  ASSERT_TRUE(s.Start().ok());
  size_t most = 0;
  for (int i = 0; i < 20000; ++i) {
    at::add(a, a);
    most = std::max(most, s.held_calls());
  }
  ASSERT_TRUE(s.Stop().ok());
  EXPECT_EQ(s.recorded_calls(), 20000u);
  EXPECT_LE(most, 64u);
  const json r = json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["by_operator"]["aten.add"], 4 * 20000);  // one FLOP per element
  EXPECT_EQ(r["total"]["status"], "complete");
}

TEST(Streaming, AllThreadsWorkersAndSnapshots) {
  const at::Tensor x = at::ones({2, 3}), w = at::ones({3, 4});
  ScanOptions o = Streaming(1);
  o.threads = Threads::kAll;
  o.per_request_rows = SIZE_MAX;  // aggregated, and every request's own rows kept through the folds
  Session s(o);
  ASSERT_TRUE(s.Start().ok());
  const int kPerThread = 50;
  auto round = [&](std::string name) {
    std::vector<std::thread> workers;
    for (int t = 0; t < 2; ++t) {
      workers.emplace_back([&, t, name] {
        for (int i = 0; i < kPerThread; ++i) {
          RequestScope request(s, name + std::to_string(t) + "-" + std::to_string(i));
          ModuleScope layer(s, "fc");
          at::mm(x, w);
        }
      });
    }
    return workers;
  };
  // Round 1: snapshots while the workers run hold whole requests only, never
  // more than were made. Folds wait while a snapshot reads the logs.
  std::vector<std::thread> first = round("a");
  for (int k = 0; k < 20; ++k) {
    const json snap = json::parse(s.ScanReportJson().value());
    const int64_t flops = snap["operator_flops"]["total"]["value"].get<int64_t>();
    EXPECT_EQ(flops % 48, 0);
    EXPECT_LE(flops, 48 * 2 * kPerThread);
  }
  for (auto& t : first) t.join();
  const size_t held_after_first = s.held_calls();
  // Round 2, no snapshots: two new threads, whose every request is folded when it ends.
  std::vector<std::thread> second = round("b");
  for (auto& t : second) t.join();
  EXPECT_EQ(s.held_calls(), held_after_first);
  ASSERT_TRUE(s.Stop().ok());

  const json r = json::parse(s.ScanReportJson().value());
  const int kRequests = 4 * kPerThread;
  EXPECT_EQ(r["operator_flops"]["total"]["value"], 48 * kRequests);
  EXPECT_EQ(r["requests"].size(), static_cast<size_t>(kRequests));
  size_t per_mm = 0;  // calls one mm records (its kernel's own calls included), from a full scan
  {
    Session one;
    ASSERT_TRUE(one.Start().ok());
    at::mm(x, w);
    ASSERT_TRUE(one.Stop().ok());
    per_mm = one.recorded_calls();
  }
  for (const auto& q : r["requests"]) {
    EXPECT_EQ(q["calls"], per_mm);
    EXPECT_EQ(q["totals"]["operator_flops"]["value"], 48);
  }
  EXPECT_EQ(r["layers"].size(), static_cast<size_t>(kRequests));
  int64_t thread_flops = 0;
  for (const auto& t : r["threads"]) thread_flops += t["totals"]["operator_flops"]["value"].get<int64_t>();
  EXPECT_EQ(thread_flops, 48 * kRequests);
  EXPECT_EQ(s.recorded_calls(), kRequests * per_mm);
  // Per thread, filtered: each worker's own requests.
  ReportFilter one;
  one.threads = {r["threads"].back()["thread"].get<int64_t>()};
  const json mine = json::parse(s.FlopReportJson(one).value());
  EXPECT_EQ(mine["total"]["value"], 48 * kPerThread);
}

TEST(Streaming, RefusesWhatNeedsEveryCall) {
  for (auto set : {+[](ScanOptions& o) { o.memory = true; }, +[](ScanOptions& o) { o.timestamps = true; },
                   +[](ScanOptions& o) { o.fold_every = 0; }}) {
    ScanOptions o = Streaming(8);
    set(o);
    Session s(o);
    const Status st = s.Start();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("ScanOptions::"), std::string::npos) << st.message();
    EXPECT_FALSE(s.active());
  }
  {
    Session s(Streaming(8));
    ASSERT_TRUE(s.DeferOperatorFormula("aten::relu").ok());
    const Status st = s.Start();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("deferred"), std::string::npos) << st.message();
  }
  {
    Session s(Streaming(8));
    ASSERT_TRUE(s.SetModuleHandler("fc", [](const ModuleCall&) { return ModuleEstimate{}; }, {.name = "h"}).ok());
    EXPECT_FALSE(s.Start().ok());
  }
  Session s(Streaming(1));
  ASSERT_TRUE(s.Start().ok());
  {
    RequestScope r(s, "a");
    at::relu(at::ones({3}));
  }
  ASSERT_TRUE(s.Stop().ok());
  ReportFilter by_request;
  by_request.requests = {"a"};
  const auto filtered = s.FlopReportJson(by_request);
  EXPECT_FALSE(filtered.ok());
  EXPECT_NE(filtered.status().message().find("streaming"), std::string::npos);
  EXPECT_FALSE(s.TrafficJson().ok());
  EXPECT_FALSE(s.LayerRows(by_request).ok());
}

TEST(Streaming, ARaisingCallIsPartialAndTheScanRecovers) {
  Session s(Streaming(1));
  ASSERT_TRUE(s.Start().ok());
  const at::Tensor a = at::ones({2, 3}), b = at::ones({4, 5});
  EXPECT_THROW(at::mm(a, b), c10::Error);  // shapes do not match: the kernel raises
  at::mm(a, at::ones({3, 4}));             // 48
  ASSERT_TRUE(s.Stop().ok());
  const json r = json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["total"]["status"], "partial");
  EXPECT_EQ(r["total"]["known_value"], 48);
  EXPECT_LT(s.held_calls(), s.recorded_calls());  // the raised call was folded when the next one started
}

// ScanOptions::module_scopes = false: the folds skip the receptive-field
// flow; a module scope is refused (not silently given no field), TorchScript
// scopes with it are refused at Start, and the reports equal a full scan's.
TEST(Streaming, WithoutModuleScopesRefusesThemAndReportsAlike) {
  ScanOptions o = Streaming(1);
  o.module_scopes = false;
  {
    Session bad(o);  // torchscript_scopes stays on by default
    EXPECT_EQ(bad.Start().code(), StatusCode::kInvalidArgument);
  }
  o.torchscript_scopes = false;
  ScanOptions full_options;
  full_options.torchscript_scopes = false;
  Session full(full_options), streamed(o);
  ASSERT_TRUE(full.Start().ok());
  ASSERT_TRUE(streamed.Start().ok());
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  for (int i = 0; i < 3; ++i) at::relu(at::mm(a, b));
  const auto pushed = streamed.PushModuleScope("layer");
  EXPECT_EQ(pushed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(pushed.status().message().find("without module scopes"), std::string::npos);
  ASSERT_TRUE(streamed.Stop().ok());
  ASSERT_TRUE(full.Stop().ok());
  const json f = json::parse(full.FlopReportJson().value()), s = json::parse(streamed.FlopReportJson().value());
  EXPECT_EQ(f["total"]["value"], 3 * 2 * 2 * 3 * 4 + 3 * 8);  // mm 2*m*k*n; relu one per element of 2x4
  EXPECT_EQ(Without(f, "streaming"), Without(s, "streaming"));
}

}  // namespace
}  // namespace torchscan
