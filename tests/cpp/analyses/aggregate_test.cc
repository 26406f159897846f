// Layer rows aggregated across requests (ScanOptions::layer_rows, the
// default of all-threads scans): one row per module identity (path, call
// index within its request) and call signature, summed; the requests'
// distribution and classes; the same whether calls were folded or held;
// a report whose size does not grow with the requests served.
//
// Expected values by hand. The served "model": a root module call holding
// two calls of "fc", each an mm of (b,3)@(3,4):
//   operator view: 2*b*3*4 = 24b FLOPs per mm (b=2: 48, b=4: 96), so a
//     request is 48b FLOPs (b=2: 96, b=4: 192);
//   module view: b*4*3 = 12b MACs per mm (b=2: 24).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>

#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;

ScanOptions Aggregated(bool streaming, size_t fold_every = 1) {
  ScanOptions o;
  o.threads = Threads::kAll;  // aggregated by default
  o.streaming = streaming;
  o.fold_every = fold_every;
  return o;
}

// One request: the input is built outside it, as a server's would be.
void Serve(Session& s, const std::string& id, const at::Tensor& x, const at::Tensor& w) {
  RequestScope request(s, id);
  ModuleScope root(s, "");
  for (int i = 0; i < 2; ++i) {
    ModuleScope fc(s, "fc");
    at::mm(x, w);
  }
}

// Request i of a stream has batch 4 when i % 10 < 3, else batch 2.
int64_t Batch(int i) { return i % 10 < 3 ? 4 : 2; }

json ServeStream(const ScanOptions& o, int requests, int threads) {
  Session s(o);
  EXPECT_TRUE(s.Start().ok());
  const at::Tensor w = at::ones({3, 4});
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = t; i < requests; i += threads) {
        const at::Tensor x = at::ones({Batch(i), 3});
        Serve(s, "r-" + std::to_string(i), x, w);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_TRUE(s.Stop().ok());
  return json::parse(s.ScanReportJson().value());
}

TEST(Aggregate, GroupsByIdentityAndSignatureAndSumsEveryMetric) {
  const int kRequests = 60;  // 18 of batch 4 (i % 10 < 3), 42 of batch 2
  const json r = ServeStream(Aggregated(/*streaming=*/true), kRequests, 2);
  const json& a = r["aggregate"];
  ASSERT_TRUE(a.is_object()) << r.dump(1);
  EXPECT_EQ(a["requests"], kRequests);
  EXPECT_TRUE(r["layers"].empty());  // no per-request rows by default
  EXPECT_TRUE(r["requests"].empty());
  // (path, call_index, batch) -> (calls, operator FLOPs, MACs)
  std::map<std::tuple<std::string, int, int64_t>, std::tuple<int64_t, int64_t, int64_t>> rows;
  for (const auto& l : a["layers"]) {
    const int64_t batch = l["input"]["shape"][0].get<int64_t>();
    rows[{l["path"], l["call_index"], batch}] = {l["calls"], l["metrics"]["operator_flops"]["value"],
                                                 l["metrics"]["macs"]["value"]};
    EXPECT_EQ(l["metrics"]["operator_flops"]["status"], "complete");
  }
  const std::map<std::tuple<std::string, int, int64_t>, std::tuple<int64_t, int64_t, int64_t>> want = {
      {{"", 0, 2}, {42, 0, 0}},
      {{"", 0, 4}, {18, 0, 0}},
      {{"fc", 0, 2}, {42, 42 * 48, 42 * 24}},
      {{"fc", 1, 2}, {42, 42 * 48, 42 * 24}},
      {{"fc", 0, 4}, {18, 18 * 96, 18 * 48}},
      {{"fc", 1, 4}, {18, 18 * 96, 18 * 48}},
  };
  EXPECT_EQ(rows, want) << a["layers"].dump(1);
  EXPECT_EQ(a["layers"].size(), want.size());  // shapes are never merged
  // The whole scan: 42 * 96 + 18 * 192.
  EXPECT_EQ(r["operator_flops"]["total"]["value"], 42 * 96 + 18 * 192);
  // Distribution (nearest rank over 42 x 96 then 18 x 192): median rank 30
  // -> 96; p99 rank ceil(59.4) = 60 -> 192.
  const json& d = a["request_totals"]["operator_flops"];
  EXPECT_EQ(d["requests"], kRequests);
  EXPECT_EQ(d["min"], 96);
  EXPECT_EQ(d["median"], 96);
  EXPECT_EQ(d["p99"], 192);
  EXPECT_EQ(d["max"], 192);
  EXPECT_EQ(d["exact"], true);
  // Classes: the common case first, then the requests that differ from it.
  ASSERT_EQ(a["request_classes"].size(), 2u);
  const json& common = a["request_classes"][0];
  const json& other = a["request_classes"][1];
  EXPECT_EQ(common["common"], true);
  EXPECT_EQ(common["requests"], 42);
  EXPECT_EQ(common["totals"]["operator_flops"]["value"], 96);
  EXPECT_EQ(common["input"]["shape"], json({2, 3}));
  EXPECT_EQ(other["common"], false);
  EXPECT_EQ(other["requests"], 18);
  EXPECT_EQ(other["totals"]["operator_flops"]["value"], 192);
  EXPECT_EQ(other["input"]["shape"], json({4, 3}));
  // Two workers race from the start: the first batch-4 request began among
  // r-0..r-2, the last among r-50..r-52.
  EXPECT_TRUE(other["first_request"] == "r-0" || other["first_request"] == "r-1" || other["first_request"] == "r-2");
  EXPECT_TRUE(other["last_request"] == "r-50" || other["last_request"] == "r-51" || other["last_request"] == "r-52");
  EXPECT_NE(common["signature"], other["signature"]);
}

TEST(Aggregate, FoldedOrHeldTheReportIsTheSame) {
  // One worker: the same requests in the same order in every run.
  const json held = ServeStream(Aggregated(false), 40, 1);
  const json every_call = ServeStream(Aggregated(true, 1), 40, 1);
  const json batched = ServeStream(Aggregated(true, 4096), 40, 1);
  EXPECT_EQ(every_call["aggregate"], held["aggregate"]);
  EXPECT_EQ(batched["aggregate"], held["aggregate"]);
  EXPECT_EQ(held["aggregate"]["requests"], 40);
}

TEST(Aggregate, KeepsTheLastRequestsWholeOnRequest) {
  ScanOptions o = Aggregated(true);
  o.per_request_rows = 2;
  const json r = ServeStream(o, 50, 1);
  ASSERT_EQ(r["requests"].size(), 2u);
  EXPECT_EQ(r["requests"][0]["request"], "r-48");
  EXPECT_EQ(r["requests"][1]["request"], "r-49");
  EXPECT_EQ(r["requests"][1]["totals"]["operator_flops"]["value"], 96);  // batch 2
  // Each kept request's module calls: the root, then fc #0 and #1 inside it.
  ASSERT_EQ(r["layers"].size(), 6u);
  for (int k = 0; k < 2; ++k) {
    const json& root = r["layers"][3 * k];
    EXPECT_EQ(root["path"], "");
    EXPECT_EQ(root["request"], k == 0 ? "r-48" : "r-49");
    EXPECT_EQ(r["layers"][3 * k + 1]["parent"], 3 * k);
    EXPECT_EQ(r["layers"][3 * k + 2]["call_index"], 1);
    EXPECT_EQ(r["layers"][3 * k + 2]["metrics"]["operator_flops"]["value"], 48);
  }
  EXPECT_EQ(r["aggregate"]["requests"], 50);  // the aggregate still covers all of them
  EXPECT_EQ(r["aggregate"]["per_request_rows"], json({{"kept", 2}, {"requests", 2}}));
}

TEST(Aggregate, TheReportDoesNotGrowWithTheRequests) {
  auto size = [](const ScanOptions& o, int requests) { return ServeStream(o, requests, 2).dump().size(); };
  const double aggregated = static_cast<double>(size(Aggregated(true), 600)) / size(Aggregated(true), 60);
  EXPECT_LT(aggregated, 1.05);  // ten times the requests: only the sums' digits grow
  // One row per module call grows with the traffic (what the aggregate replaces).
  ScanOptions per_call = Aggregated(true);
  per_call.layer_rows = LayerRowMode::kPerCall;
  EXPECT_GT(static_cast<double>(size(per_call, 600)) / size(per_call, 60), 5.0);
}

TEST(Aggregate, RefusesWhatItCannotDo) {
  ScanOptions current;
  current.layer_rows = LayerRowMode::kAggregated;  // a scan of the current thread
  Session one(current);
  const Status st = one.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("Threads::kAll"), std::string::npos) << st.message();
  // A streaming aggregated scan drops each module call once folded: no per-call rows.
  Session s(Aggregated(true));
  ASSERT_TRUE(s.Start().ok());
  ASSERT_TRUE(s.Stop().ok());
  const auto layers = s.LayersJson();
  ASSERT_FALSE(layers.ok());
  EXPECT_NE(std::string(layers.status().message()).find("aggregate"), std::string::npos);
  EXPECT_FALSE(s.LayerRows().ok());
}

}  // namespace
}  // namespace torchscan
