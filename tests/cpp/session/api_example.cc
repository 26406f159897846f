// The C++ API examples of torchscan_dispatch/README.md, compiled and run as a
// test (tests/python/docs/test_readme.py checks that the documents show each marked
// example verbatim, its include written as the installed package spells it:
// <torchscan/torchscan.h>).
#include <ATen/core/Tensor.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

// --- README example begins ---
#include "torchscan_dispatch/torchscan.h"

std::string CountFlops(const at::Tensor& x, const at::Tensor& w) {
  torchscan::Session session;
  {
    torchscan::ScanGuard scan(session);  // this thread is scanned
    at::relu(at::matmul(x, w));
  }  // stopped; dispatch TLS restored
  return session.FlopReportJson().value();  // schema-v1 FlopReport
}
// --- README example ends ---

// --- README server example begins ---
// A worker pool serving requests: one scan covers every thread.
std::string ServeScanned(int requests, const at::Tensor& w) {
  torchscan::ScanOptions options;
  options.threads = torchscan::Threads::kAll;
  options.per_request_rows = requests;  // each request's own rows and totals, besides the aggregate
  torchscan::Session session(options);
  {
    torchscan::ScanGuard scan(session);
    std::vector<std::thread> workers;
    for (int r = 0; r < requests; ++r) {
      workers.emplace_back([&, r] {
        torchscan::RequestScope request(session, "request-" + std::to_string(r));
        at::relu(at::matmul(at::ones({8, 16}), w));
      });
    }
    for (auto& t : workers) t.join();
  }
  // Everything: per thread, per request, and the layer rows aggregated across
  // requests; FlopReportJson({{}, {"request-0"}}) gives one request's
  // FlopReport, ({{}, {"request-0", "request-1"}}) two merged.
  return session.ScanReportJson().value();
}
// --- README server example ends ---

// --- README memory example begins ---
// Memory of one request, scanned on the thread that serves it.
std::string RequestMemory(const at::Tensor& x, const at::Tensor& w, std::string* layers) {
  torchscan::ScanOptions options;
  options.memory = true;  // the allocator's blocks, per module call and operator
  torchscan::Session session(options);
  at::Tensor y;
  {
    torchscan::ScanGuard scan(session);
    torchscan::ModuleScope layer(session, "layer");
    y = at::relu(at::matmul(x, w));
  }
  *layers = session.LayersJson().value();     // peak_memory, allocated_bytes per call
  return session.MemoryReportJson().value();  // the scan's peak, bytes per operator
}
// --- README memory example ends ---

TEST(ApiExample, CountsTheMatmulAndTheRelu) {
  const auto report = nlohmann::json::parse(CountFlops(at::ones({8, 16}), at::ones({16, 4})));
  // (8x16)@(16x4): 32 outputs x 16 terms x 2 = 1024; relu: one selection per
  // value of the (8x4) result = 32.
  EXPECT_EQ(report["by_operator"]["aten.mm"], 1024);
  EXPECT_EQ(report["by_operator"]["aten.relu"], 32);
  EXPECT_EQ(report["total"]["status"], "complete");
  EXPECT_EQ(report["total"]["value"], 1056);
}

TEST(ApiExample, ServesRequestsOnAllThreads) {
  const auto report = nlohmann::json::parse(ServeScanned(3, at::ones({16, 4})));
  // Each request: the 1056 FLOPs derived above (mm 1024 + relu 32); the
  // input fill costs none.
  EXPECT_EQ(report["operator_flops"]["total"]["value"], 3 * 1056);
  ASSERT_EQ(report["requests"].size(), 3u);
  for (const auto& q : report["requests"]) EXPECT_EQ(q["totals"]["operator_flops"]["value"], 1056);
}

TEST(ApiExample, MeasuresOneRequestsMemory) {
  std::string layers_json;
  const auto report = nlohmann::json::parse(RequestMemory(at::ones({8, 16}), at::ones({16, 4}), &layers_json));
  // matmul's (8x4) float result: 128 bytes; relu's: 128 more, while the
  // matmul result is still alive (it dies at the end of the expression).
  EXPECT_EQ(report["totals"]["peak_memory"]["value"], 256);
  EXPECT_EQ(report["totals"]["allocated_bytes"]["value"], 128);  // y
  EXPECT_EQ(report["by_operator"]["aten.matmul"]["allocated_bytes"], 128);
  EXPECT_EQ(report["by_operator"]["aten.relu"]["allocated_bytes"], 128);
  const auto layers = nlohmann::json::parse(layers_json);
  EXPECT_EQ(layers[0]["metrics"]["peak_memory"]["value"], 256);
  EXPECT_EQ(layers[0]["metrics"]["allocated_bytes"]["value"], 128);  // y outlives the layer call
}
