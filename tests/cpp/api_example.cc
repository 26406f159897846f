// The README's C++ example, compiled and run as a test (tests/python/test_readme.py
// checks that the README shows this file's example verbatim).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

// --- README example begins ---
#include "torchscan_dispatch/torchscan.h"

std::string CountFlops(const at::Tensor& x, const at::Tensor& w) {
  torchscan::Session session;
  {
    torchscan::ScanGuard scan(session);  // this thread is scanned
    at::relu(at::matmul(x, w));
  }                                      // stopped; dispatch TLS restored
  return session.FlopReportJson().value();  // schema-v1 FlopReport
}
// --- README example ends ---

TEST(ApiExample, CountsTheMatmulAndTheRelu) {
  const auto report = nlohmann::json::parse(CountFlops(at::ones({8, 16}), at::ones({16, 4})));
  // (8x16)@(16x4): 32 outputs x 16 terms x 2 = 1024; relu: one selection per
  // value of the (8x4) result = 32.
  EXPECT_EQ(report["by_operator"]["aten.mm"], 1024);
  EXPECT_EQ(report["by_operator"]["aten.relu"], 32);
  EXPECT_EQ(report["total"]["status"], "complete");
  EXPECT_EQ(report["total"]["value"], 1056);
}
