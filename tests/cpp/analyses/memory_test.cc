// Memory attribution (ScanOptions::memory) on real ATen calls: per module
// call and per operator, from the allocator's own reports. Every expected
// value is the tensors' sizes worked out by hand (float32: 4 bytes).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tensordot.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

ScanOptions Memory() {
  ScanOptions o;
  o.memory = true;
  return o;
}

const nlohmann::json& Layer(const nlohmann::json& layers, const std::string& path) {
  for (const auto& l : layers) {
    if (l["path"] == path) return l;
  }
  static const nlohmann::json kNone;
  ADD_FAILURE() << "no layer " << path;
  return kNone;
}

TEST(Memory, LayersHoldTheirPeakAndWhatTheyKeep) {
  const at::Tensor x = at::ones({32, 256}), w1 = at::ones({512, 256}), w2 = at::ones({10, 512});
  Session s(Memory());
  at::Tensor h;  // outlives the root call: fc2's output is what the root returns
  {
    ScanGuard scan(s);
    ModuleScope root(s, "");
    {
      ModuleScope fc1(s, "fc1");
      h = at::mm(x, w1.t());  // 32 x 512 floats = 65536 bytes, kept
    }
    {
      ModuleScope act(s, "act");
      h = at::relu(h);  // another 65536 kept; fc1's output is freed after this call returns
    }
    {
      ModuleScope fc2(s, "fc2");
      h = at::mm(h, w2.t());  // 32 x 10 floats = 1280 bytes; the relu output freed as h is reassigned
    }
  }
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  auto value = [&](const std::string& path, const char* metric) {
    const auto& m = Layer(layers, path)["metrics"][metric];
    EXPECT_EQ(m["status"], "complete") << path << " " << metric;
    EXPECT_EQ(m["unit"], "bytes");
    return m["value"].get<int64_t>();
  };
  EXPECT_EQ(value("fc1", "peak_memory"), 65536);
  EXPECT_EQ(value("fc1", "allocated_bytes"), 65536);
  EXPECT_EQ(value("act", "allocated_bytes"), 65536);
  EXPECT_EQ(value("fc2", "allocated_bytes"), 1280);
  // Root: fc1's and act's outputs alive together (131072), then fc1's freed;
  // only fc2's output is left when the root returns.
  EXPECT_EQ(value("", "peak_memory"), 131072);
  EXPECT_EQ(value("", "allocated_bytes"), 1280);

  const auto report = nlohmann::json::parse(s.MemoryReportJson().value());
  EXPECT_EQ(report["totals"]["peak_memory"]["value"], 131072);
  EXPECT_EQ(report["totals"]["allocated_bytes"]["value"], 1280);  // h, alive when the scan stopped
  EXPECT_EQ(report["totals"]["total_allocated_bytes"]["value"], 65536 + 65536 + 1280);
  EXPECT_EQ(report["by_operator"]["aten.mm"]["allocated_bytes"], 65536 + 1280);
  EXPECT_EQ(report["by_operator"]["aten.relu"]["allocated_bytes"], 65536);
  EXPECT_TRUE(report["diagnostics"].empty());
}

TEST(Memory, TemporariesBelongToTheTopLevelCall) {
  // tensordot contracting a's dim 1 with b's dim 0: a (2, 3, 4) is permuted
  // to (2, 4, 3) and reshaped to (8, 3), which cannot be a view, so it is
  // copied (8 * 3 floats = 96 bytes) and freed inside tensordot; the mm
  // result (8, 5) = 160 bytes is reshaped to (2, 4, 5) as a view and outlives it.
  const at::Tensor a = at::ones({2, 3, 4}), b = at::ones({3, 5});
  Session s(Memory());
  at::Tensor y;
  {
    ScanGuard scan(s);
    y = at::tensordot(a, b, {1}, {0});
  }
  const auto report = nlohmann::json::parse(s.MemoryReportJson().value());
  EXPECT_EQ(report["by_operator"]["aten.tensordot"]["temporary_bytes"], 96);
  EXPECT_EQ(report["by_operator"]["aten.tensordot"]["allocated_bytes"], 160);
  EXPECT_EQ(report["by_operator"]["aten.tensordot"]["blocks"], 2);
  EXPECT_EQ(report["totals"]["peak_memory"]["value"], 96 + 160);  // the copy is alive while mm writes
  EXPECT_EQ(report["totals"]["allocated_bytes"]["value"], 160);
}

TEST(Memory, MetaTensorsAreUnavailableNotZero) {
  const at::Tensor a = at::ones({64, 64}, at::TensorOptions().device(at::kMeta));
  Session s(Memory());
  {
    ScanGuard scan(s);
    ModuleScope root(s, "");
    (void)at::mm(a, a);
  }
  const auto report = nlohmann::json::parse(s.MemoryReportJson().value());
  EXPECT_EQ(report["totals"]["peak_memory"]["status"], "unavailable");
  EXPECT_EQ(report["diagnostics"][0]["code"], "memory_device_unsupported");
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  EXPECT_EQ(layers[0]["metrics"]["peak_memory"]["status"], "unavailable");
}

TEST(Memory, NestedScansEachSeeTheirOwnBlocks) {
  Session outer(Memory()), inner(Memory());
  at::Tensor a, b;
  {
    ScanGuard o(outer);
    a = at::ones({100});  // 400 bytes
    {
      ScanGuard i(inner);
      b = at::ones({200});  // 800 bytes
    }
  }
  EXPECT_EQ(nlohmann::json::parse(outer.MemoryReportJson().value())["totals"]["peak_memory"]["value"], 1200);
  EXPECT_EQ(nlohmann::json::parse(inner.MemoryReportJson().value())["totals"]["peak_memory"]["value"], 800);
  // Both observers are gone: the thread's allocator-reporting slot is empty again.
  EXPECT_EQ(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE), nullptr);
}

TEST(Memory, AnOccupiedSlotMakesItUnavailableAndIsLeftAlone) {
  struct Other : c10::MemoryReportingInfoBase {
    void reportMemoryUsage(void*, int64_t, size_t, size_t, c10::Device) override { ++reports; }
    bool memoryProfilingEnabled() const override { return true; }
    int reports = 0;
  };
  auto other = std::make_shared<Other>();
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, other);
  Session s(Memory());
  {
    ScanGuard scan(s);
    (void)at::ones({10});
  }
  EXPECT_EQ(c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE).get(), other.get());
  EXPECT_GT(other->reports, 0);  // the other observer kept its reports
  const auto report = nlohmann::json::parse(s.MemoryReportJson().value());
  EXPECT_EQ(report["totals"]["peak_memory"]["status"], "unavailable");
  EXPECT_EQ(report["diagnostics"][0]["code"], "memory_observer_unavailable");
}

TEST(Memory, MisuseIsRefusedWithWhatToDo) {
  ScanOptions all = Memory();
  all.threads = Threads::kAll;
  Session s(all);
  const torchscan::Status st = s.Start();
  EXPECT_EQ(st.code(), torchscan::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("Threads::kCurrent"), std::string::npos);

  Session plain;
  {
    ScanGuard scan(plain);
  }
  const auto report = plain.MemoryReportJson();
  EXPECT_FALSE(report.ok());
  EXPECT_NE(std::string(report.status().message()).find("ScanOptions::memory = true"), std::string::npos);
  const auto layers = nlohmann::json::parse(plain.LayersJson().value());
  EXPECT_TRUE(layers.empty());
}

TEST(Memory, AnExceptionLeavesNoObserverBehind) {
  Session s(Memory());
  EXPECT_THROW(
      {
        ScanGuard scan(s);
        ModuleScope root(s, "");
        (void)at::ones({10});
        (void)at::mm(at::ones({2, 3}), at::ones({2, 3}));  // shapes do not match: throws
      },
      c10::Error);
  EXPECT_EQ(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE), nullptr);
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  EXPECT_EQ(layers[0]["metrics"]["peak_memory"]["status"], "unavailable");  // the module call failed
}

}  // namespace
}  // namespace torchscan
