// Thread modes, requests and snapshots of the C++ API: scans of every thread
// (worker pools created before the scan), per-request rows, snapshots of a
// running scan and the dispatch key when guards nest.
// Expected FLOPs are derived by hand: mm of (m,k)@(k,n) is 2*m*k*n in the
// operator view (one multiply and one add per term, FlopCounterMode's rule).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cpp/session/scan_testing.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using nlohmann::json;
using testing::AllThreads;
using testing::CallsOf;
using testing::Total;

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

}  // namespace
}  // namespace torchscan
