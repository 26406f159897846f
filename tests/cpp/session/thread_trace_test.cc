// The trace of an all-threads scan: one named track per thread, slices that
// nest, and one flow per request (threads' requests and TorchScript forwards).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/jit/api/module.h>

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cpp/session/scan_testing.h"
#include "tests/cpp/session/scripted_testing.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;
using testing::AllThreads;
using testing::Scripted;

// ---------------------------------------------------------------- traces

// Complete slices of a trace on one track nest: any two are disjoint or one
// holds the other (1 ns of rounding allowed, times are microseconds).
void ExpectNested(const json& trace) {
  std::map<int64_t, std::vector<std::pair<double, double>>> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    for (const char* key : {"ts", "dur", "pid", "tid", "name", "cat", "args"}) ASSERT_TRUE(e.contains(key)) << e.dump();
    const double t0 = e["ts"].get<double>(), t1 = t0 + e["dur"].get<double>();
    ASSERT_GE(t0, 0);
    ASSERT_GE(t1, t0);
    for (const auto& [b0, b1] : tracks[e["tid"].get<int64_t>()]) {
      const bool disjoint = t1 <= b0 + 1e-3 || b1 <= t0 + 1e-3;
      const bool nested = (t0 <= b0 && b1 <= t1 + 1e-3) || (b0 <= t0 && t1 <= b1 + 1e-3);
      EXPECT_TRUE(disjoint || nested) << e.dump();
    }
    tracks[e["tid"].get<int64_t>()].emplace_back(t0, t1);
  }
}

// Each flow's slices (by bind_id), in start order, as "name@tid".
std::map<int64_t, std::vector<std::string>> Flows(const json& trace) {
  std::map<int64_t, std::vector<std::pair<double, std::string>>> by_id;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e.contains("bind_id")) {
      by_id[e["bind_id"].get<int64_t>()].emplace_back(
          e["ts"].get<double>(), e["name"].get<std::string>() + "@" + std::to_string(e["tid"].get<int64_t>()));
    }
  }
  std::map<int64_t, std::vector<std::string>> out;
  for (auto& [id, slices] : by_id) {
    std::sort(slices.begin(), slices.end());
    for (auto& s : slices) out[id].push_back(s.second);
  }
  return out;
}

TEST(AllThreadsTrace, OneNamedTrackPerThreadAndAFlowPerRequest) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});  // mm: 2*2*3*4 = 48 FLOPs
  ScanOptions options = AllThreads();
  options.timestamps = true;
  Session s(options);
  // Threads one after the other, so they join in a known order: the starting
  // thread is 1, then worker-a 2, worker-b 3, worker-c 4, worker-d 5 (each
  // joins on its RequestScope, after naming itself).
  auto worker = [&](const char* name, std::function<void()> work) {
    std::thread t([&, name] {
      pthread_setname_np(pthread_self(), name);
      work();
    });
    t.join();
  };
  {
    ScanGuard scan(s);
    at::mm(a, b);  // thread 1, outside any request: no flow
    worker("worker-a", [&] {
      RequestScope r(s, "a");
      {
        ModuleScope m(s, "enc");
        at::mm(a, b);
      }
      {
        ModuleScope m(s, "dec");
        at::mm(a, b);
      }
    });
    worker("worker-b", [&] {
      RequestScope r(s, "b");
      at::mm(a, b);  // a top-level call of the request, outside any module call
      {
        ModuleScope m(s, "head");
        at::mm(a, b);
      }
    });
    // One request id opened on two threads: one flow across both tracks.
    worker("worker-c", [&] {
      RequestScope r(s, "x");
      ModuleScope m(s, "part1");
      at::mm(a, b);
    });
    worker("worker-d", [&] {
      RequestScope r(s, "x");
      ModuleScope m(s, "part2");
      at::mm(a, b);
    });
  }
  const json trace = json::parse(s.TraceJson().value());
  ExpectNested(trace);
  std::map<int64_t, std::string> names;
  std::set<int64_t> tracks;
  std::map<int64_t, std::vector<std::string>> modules;  // tid -> module slices
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    tracks.insert(e["tid"].get<int64_t>());
    if (e["cat"] == "module") modules[e["tid"]].push_back(e["name"]);
    if (e["name"] == "aten.mm") {
      EXPECT_EQ(e["args"]["flops"], 48) << e.dump();
    }
  }
  EXPECT_EQ(tracks, (std::set<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_EQ(names.size(), 5u) << trace.dump(1);
  EXPECT_EQ(names[2], "worker-a (thread 2)");
  EXPECT_EQ(names[3], "worker-b (thread 3)");
  EXPECT_EQ(names[5], "worker-d (thread 5)");
  EXPECT_NE(names[1].find("(thread 1)"), std::string::npos) << names[1];
  EXPECT_EQ(modules[2], (std::vector<std::string>{"enc", "dec"}));
  EXPECT_EQ(modules[3], (std::vector<std::string>{"head"}));
  // Three requests, three flows: a through its two module calls; b from its
  // top-level mm to its module call; x from thread 4 to thread 5. The calls
  // inside module calls are reached through those, and thread 1's mm
  // belongs to no request.
  std::set<std::vector<std::string>> flows;
  for (const auto& [id, slices] : Flows(trace)) flows.insert(slices);
  EXPECT_EQ(flows,
            (std::set<std::vector<std::string>>{{"enc@2", "dec@2"}, {"aten.mm@3", "head@3"}, {"part1@4", "part2@5"}}));
  // Direction: out of the first slice, into the last.
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || !e.contains("bind_id")) continue;
    const std::string n = e["name"];
    const bool first = n == "enc" || (n == "aten.mm" && e["tid"] == 3) || n == "part1";
    EXPECT_EQ(e.value("flow_out", false), first) << e.dump();
    EXPECT_EQ(e.value("flow_in", false), !first) << e.dump();
    EXPECT_TRUE(e["args"].contains("request")) << e.dump();
  }
  // The report numbers threads the same way.
  const json report = json::parse(s.ScanReportJson().value());
  std::set<int64_t> numbers;
  for (const auto& t : report["threads"]) numbers.insert(t["thread"].get<int64_t>());
  EXPECT_EQ(numbers, tracks);
}

TEST(AllThreadsTrace, TorchScriptForwardsAreFlowsThroughTheirModuleCalls) {
  torch::jit::Module model = Scripted();
  model.eval();
  ScanOptions options = AllThreads();
  options.timestamps = true;
  options.torchscript_requests = true;
  Session s(options);
  {
    ScanGuard scan(s);
    const at::Tensor x = at::ones({2, 4});  // before the forwards: no request
    std::thread t([&] { model.forward({x}); });
    t.join();
    model.forward({x});
  }
  const json trace = json::parse(s.TraceJson().value());
  ExpectNested(trace);
  // Two forwards, two requests (forward-<n>), two flows, each through the
  // forward's three module calls on its own thread: (root), then a, then b.
  const auto flows = Flows(trace);
  ASSERT_EQ(flows.size(), 2u) << trace.dump(1);
  std::set<std::vector<std::string>> got;
  for (const auto& [id, slices] : flows) got.insert(slices);
  EXPECT_EQ(got, (std::set<std::vector<std::string>>{{"(root)@2", "a@2", "b@2"}, {"(root)@1", "a@1", "b@1"}}));
}

}  // namespace
}  // namespace torchscan
