// Thread modes, requests, snapshots and TorchScript scopes of the C++ API.
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/jit/api/module.h>

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;

// One layer row per module call (rows aggregated across requests: aggregate_test.cc).
ScanOptions AllThreads() {
  ScanOptions o;
  o.threads = Threads::kAll;
  o.layer_rows = LayerRowMode::kPerCall;
  return o;
}

// A worker pool created before any scan starts, like a server's: jobs run
// on threads that never saw Start().
class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
    std::unique_lock<std::mutex> l(mu_);
    idle_.wait(l, [this, n] { return started_ == n; });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Run(std::vector<std::function<void()>> jobs) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& j : jobs) jobs_.push_back(std::move(j));
      pending_ += static_cast<int>(jobs.size());
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> l(mu_);
    idle_.wait(l, [this] { return pending_ == 0; });
  }

 private:
  void Loop() {
    at::ones({1}).add_(1);  // ATen work before any scan
    {
      std::lock_guard<std::mutex> l(mu_);
      ++started_;
    }
    idle_.notify_all();
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return done_ || !jobs_.empty(); });
        if (done_ && jobs_.empty()) return;
        job = std::move(jobs_.back());
        jobs_.pop_back();
      }
      job();
      std::lock_guard<std::mutex> l(mu_);
      if (--pending_ == 0) idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::vector<std::function<void()>> jobs_;
  int pending_ = 0, started_ = 0;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

int64_t Total(const std::string& flop_report) { return json::parse(flop_report)["total"]["value"].get<int64_t>(); }

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

TEST(AllThreads, CountsWorkerPoolsFirstCallIncluded) {
  Pool pool(2);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});  // 2*2*3*4 = 48 per mm
  Session s(AllThreads());
  {
    ScanGuard scan(s);
    std::vector<std::function<void()>> jobs;
    // Each job's first (and only) ATen call is the mm: a thread joins the scan
    // in the RecordFunction callback of exactly that call.
    for (int i = 0; i < 6; ++i) jobs.push_back([&] { at::mm(a, b); });
    pool.Run(std::move(jobs));
    at::mm(a, b);  // the starting thread counts too
  }
  EXPECT_EQ(Total(s.FlopReportJson().value()), 7 * 48);
  const json r = json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["total"]["status"], "complete") << r.dump(1);
  int64_t calls = 0;
  for (const auto& t : s.ThreadsSeen()) calls += t.calls;
  EXPECT_EQ(calls, 7 * CallsOf([&] { at::mm(a, b); }));
  EXPECT_GE(s.ThreadsSeen().size(), 2u);
}

TEST(AllThreads, CurrentThreadModeLeavesWorkersOut) {
  Pool pool(1);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s;  // Threads::kCurrent
  {
    ScanGuard scan(s);
    pool.Run({[&] { at::mm(a, b); }});
    at::mm(a, b);
  }
  EXPECT_EQ(Total(s.FlopReportJson().value()), 48);
}

TEST(AllThreads, KeepsThreadsAndRequestsApartAndMergesThem) {
  Pool pool(2);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4}), c = at::ones({4, 5});
  Session s(AllThreads());
  {
    ScanGuard scan(s);
    pool.Run({[&] {
                RequestScope r(s, "small");
                at::mm(a, b);  // 48
              },
              [&] {
                RequestScope r(s, "large");
                at::mm(at::mm(a, b), c);  // 48 + 2*2*4*5 = 48 + 80 = 128
              }});
    at::mm(a, b);  // outside any request: 48
  }
  EXPECT_EQ(Total(s.FlopReportJson().value()), 48 + 128 + 48);
  EXPECT_EQ(Total(s.FlopReportJson({{}, {"small"}}).value()), 48);
  EXPECT_EQ(Total(s.FlopReportJson({{}, {"large"}}).value()), 128);
  EXPECT_EQ(Total(s.FlopReportJson({{}, {"small", "large"}}).value()), 176);  // merged on request
  // Per thread: the values add up to the total.
  int64_t sum = 0;
  for (const auto& t : s.ThreadsSeen()) sum += Total(s.FlopReportJson({{t.number}, {}}).value());
  EXPECT_EQ(sum, 224);

  const json report = json::parse(s.ScanReportJson().value());
  EXPECT_EQ(report["kind"], "torchscan_scan_report");
  EXPECT_EQ(report["context"]["threads"], "all");
  EXPECT_EQ(report["operator_flops"]["total"]["value"], 224);
  std::map<std::string, int64_t> requests;
  for (const auto& q : report["requests"]) requests[q["request"]] = q["totals"]["operator_flops"]["value"];
  EXPECT_EQ(requests, (std::map<std::string, int64_t>{{"large", 128}, {"small", 48}}));
  int64_t thread_sum = 0;
  for (const auto& t : report["threads"]) thread_sum += t["totals"]["operator_flops"]["value"].get<int64_t>();
  EXPECT_EQ(thread_sum, 224);
}

TEST(AllThreads, SnapshotLeavesRunningRequestsForLater) {
  Pool pool(1);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, release = false;
  const int64_t mm_calls = CallsOf([&] { at::mm(a, b); });
  Session s(AllThreads());
  ScanGuard scan(s);
  pool.Run({[&] {
    RequestScope r(s, "done");
    at::mm(a, b);
  }});
  std::thread busy([&] {
    pool.Run({[&] {
      RequestScope r(s, "running");
      at::mm(a, b);  // finished, but its request is still open at the snapshot
      std::unique_lock<std::mutex> l(mu);
      inside = true;
      cv.notify_all();
      cv.wait(l, [&] { return release; });
    }});
  });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return inside; });
  }
  const json snap = json::parse(s.ScanReportJson().value());
  EXPECT_EQ(snap["context"]["snapshot"], true);
  EXPECT_EQ(snap["operator_flops"]["total"]["value"], 48);  // only the finished request
  EXPECT_EQ(snap["context"]["in_flight_calls"], mm_calls);
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  busy.join();
  ASSERT_TRUE(s.Stop().ok());
  EXPECT_EQ(Total(s.FlopReportJson().value()), 96);
}

// A snapshot's `requests` lists finished requests only: one still running
// (its calls done or not started yet) would read as a complete request that
// did nothing. Held and streaming scans alike.
class SnapshotRequests : public ::testing::TestWithParam<bool> {};

TEST_P(SnapshotRequests, RunningRequestsAreLeftOutUntilTheyEnd) {
  Pool pool(2);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});  // mm: 2*2*3*4 = 48 FLOPs
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;
  bool release = false;
  const int64_t mm_calls = CallsOf([&] { at::mm(a, b); });
  ScanOptions o = AllThreads();
  o.streaming = GetParam();
  o.fold_every = 1;
  Session s(o);
  ScanGuard scan(s);
  pool.Run({[&] {
    RequestScope r(s, "done");
    at::mm(a, b);
  }});
  auto wait_inside = [&] {
    std::unique_lock<std::mutex> l(mu);
    ++inside;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
  };
  std::thread busy([&] {
    pool.Run({[&] {
                RequestScope r(s, "ran");
                at::mm(a, b);  // finished, but its request is still open at the snapshot
                wait_inside();
              },
              [&] {
                RequestScope r(s, "started");  // open, no call made yet
                wait_inside();
                at::mm(a, b);
              }});
  });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return inside == 2; });
  }
  const json snap = json::parse(s.ScanReportJson().value());
  ASSERT_EQ(snap["requests"].size(), 1u) << snap["requests"].dump();
  EXPECT_EQ(snap["requests"][0]["request"], "done");
  EXPECT_EQ(snap["requests"][0]["calls"], mm_calls);
  EXPECT_EQ(snap["requests"][0]["totals"]["operator_flops"]["value"], 48);
  EXPECT_EQ(snap["operator_flops"]["total"]["value"], 48);
  EXPECT_EQ(snap["context"]["in_flight_calls"], mm_calls);  // "ran"'s mm, after the cut
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  busy.join();
  ASSERT_TRUE(s.Stop().ok());
  const json report = json::parse(s.ScanReportJson().value());
  std::map<std::string, int64_t> flops;
  for (const auto& q : report["requests"]) flops[q["request"]] = q["totals"]["operator_flops"]["value"];
  EXPECT_EQ(flops, (std::map<std::string, int64_t>{{"done", 48}, {"ran", 48}, {"started", 48}}));
}

INSTANTIATE_TEST_SUITE_P(HeldAndStreaming, SnapshotRequests, ::testing::Bool());

TEST(AllThreads, OverridesApplyInWorkerThreads) {
  Pool pool(1);
  Session s(AllThreads());
  ASSERT_TRUE(s.SetOperatorFormula("aten::mm", [](const OpCall&) { return FormulaResult::Complete(7); }).ok());
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  {
    ScanGuard scan(s);
    pool.Run({[&] { at::mm(a, b); }, [&] { at::mm(a, b); }});
  }
  EXPECT_EQ(Total(s.FlopReportJson().value()), 14);
}

TEST(AllThreads, OneAtATimeAndKeyOffAfterwards) {
  Session first(AllThreads()), second(AllThreads());
  ASSERT_TRUE(first.Start().ok());
  const torchscan::Status st = second.Start();
  EXPECT_EQ(st.code(), torchscan::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("another all-threads scan"), std::string::npos);
  Pool pool(1);
  pool.Run({[] { at::ones({2}).mul(2); }});
  ASSERT_TRUE(first.Stop().ok());
  EXPECT_FALSE(ModeKeyIncluded());
  // A worker that joined switches the key off again at its next call.
  std::atomic<bool> included{true};
  pool.Run({[&] {
    at::ones({2}).mul(2);
    included = ModeKeyIncluded();
  }});
  EXPECT_FALSE(included.load());
}

TEST(AllThreads, RejoinsWhenAGuardSwitchedTheKeyOff) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  // A current-thread scan stopping inside an all-threads scan restores the
  // key it found (off): the next call still counts for the all-threads scan.
  Session current;
  ASSERT_TRUE(current.Start().ok());
  Session all(AllThreads());
  ASSERT_TRUE(all.Start().ok());
  ASSERT_TRUE(current.Stop().ok());
  at::mm(a, b);
  ASSERT_TRUE(all.Stop().ok());
  EXPECT_EQ(Total(all.FlopReportJson().value()), 48);
  EXPECT_FALSE(ModeKeyIncluded());

  // Pool threads restore their TLS after each task (ThreadLocalStateGuard):
  // every task counts.
  Pool pool(1);
  Session s(AllThreads());
  {
    ScanGuard scan(s);
    for (int i = 0; i < 3; ++i) {
      pool.Run({[&] {
        c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::TESTING_ONLY_GenericMode, false);
        at::mm(a, b);
      }});
    }
  }
  EXPECT_EQ(Total(s.FlopReportJson().value()), 3 * 48);
}

TEST(AllThreads, StoppingUnderACurrentThreadScanLeavesItsKey) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session all(AllThreads());
  ASSERT_TRUE(all.Start().ok());
  Session current;
  ASSERT_TRUE(current.Start().ok());
  ASSERT_TRUE(all.Stop().ok());
  at::mm(a, b);  // still the current-thread scan's
  ASSERT_TRUE(current.Stop().ok());
  EXPECT_EQ(Total(current.FlopReportJson().value()), 48);
  at::mm(a, b);  // the first call afterwards switches the leftover key off
  EXPECT_FALSE(ModeKeyIncluded());
}

TEST(AllThreads, BoxedFirstCallRecordsItsOwnArguments) {
  // A worker's first call is boxed, with other values below its arguments on
  // the stack (as in the TorchScript interpreter).
  Pool pool(1);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s(AllThreads());
  {
    ScanGuard scan(s);
    pool.Run({[&] {
      const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
      torch::jit::Stack stack{c10::IValue(7), c10::IValue(a), c10::IValue(b)};
      op.callBoxed(stack);
    }});
  }
  const json r = json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["total"]["status"], "complete") << r.dump(1);
  EXPECT_EQ(r["total"]["value"], 48);
}

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

// A TorchScript model compiled in C++ (no Python): root -> a, b.
torch::jit::Module Scripted() {
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
