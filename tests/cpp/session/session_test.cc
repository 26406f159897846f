// The engine on real ATen calls: call tree, ownership, TLS, nesting,
// exceptions, threads and caller formulas.
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/var.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/torchscan.h"

// An operator no formula table knows: CompositeExplicitAutograd, so its
// call reaches the scan's key and then runs the children below.
TORCH_LIBRARY(torchscan_session_test, m) { m.def("opaque(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(torchscan_session_test, CompositeExplicitAutograd, m) {
  m.impl("opaque", [](const at::Tensor& x) { return at::mul(x, x).sum(); });
}

namespace torchscan {
namespace {

nlohmann::json Report(Session& s) { return nlohmann::json::parse(s.FlopReportJson().value()); }

template <class F>
nlohmann::json Scan(F&& workload) {
  Session s;
  {
    ScanGuard guard(s);
    workload();
  }
  return Report(s);
}

const nlohmann::json* FindDiagnostic(const nlohmann::json& r, const std::string& code, const std::string& op) {
  for (const auto& d : r["diagnostics"]) {
    if (d["code"] == code && d.value("operator", "") == op) return &d;
  }
  return nullptr;
}

TEST(Session, EmptyScanIsCompleteZero) {
  const auto r = Scan([] {});
  EXPECT_EQ(r["schema_version"], 1);
  EXPECT_EQ(r["total"]["status"], "complete");
  EXPECT_EQ(r["total"]["value"], 0);
  EXPECT_TRUE(r["by_operator"].empty());
}

TEST(Session, CountsMmComplete) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  const auto r = Scan([&] { at::mm(a, b); });
  // 8 outputs x 3 terms x 2 = 48.
  EXPECT_EQ(r["by_operator"]["aten.mm"], 48);
  EXPECT_EQ(r["total"]["status"], "complete");
  EXPECT_EQ(r["total"]["value"], 48);
}

TEST(Session, DecompositionIsCompleteWhenChildrenAre) {
  // linear is CompositeImplicitAutograd: t (a view) + addmm (2*3*4*5 = 120... bias omitted):
  // x (2,5) @ w^T (5,3): 6 outputs x 5 terms x 2 = 60.
  const at::Tensor x = at::ones({2, 5}), w = at::ones({3, 5}), bias = at::ones({3});
  const auto r = Scan([&] { at::linear(x, w, bias); });
  EXPECT_EQ(r["by_operator"]["aten.addmm"], 60);
  EXPECT_EQ(r["total"]["status"], "complete") << r.dump(1);
  EXPECT_TRUE(r["ignored_operators"].contains("aten.t"));
  EXPECT_FALSE(r["by_operator"].contains("aten.linear"));
}

TEST(Session, UncountedOperatorMakesPartialAndNamesOutermostOnly) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  // A caller's operator has no formula; its CompositeExplicit kernel calls
  // mul and sum, which have formulas but are part of its missing work.
  const auto r = Scan([&] {
    const at::Tensor c = at::mm(a, b);
    static const auto opaque = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("torchscan_session_test::opaque", "")
                                   .typed<at::Tensor(const at::Tensor&)>();
    opaque.call(c);
  });
  EXPECT_EQ(r["total"]["status"], "partial");
  EXPECT_TRUE(r["total"]["value"].is_null());
  const auto* d = FindDiagnostic(r, "uncounted_operator", "torchscan_session_test.opaque");
  ASSERT_NE(d, nullptr) << r.dump(1);
  EXPECT_EQ((*d)["calls"], 1);
  EXPECT_EQ(r["diagnostics"].size(), 1u) << r.dump(1);
  // The known part is a lower bound: the mm (48) plus what the operator's
  // children counted; never less than the mm.
  EXPECT_GE(r["total"]["known_value"].get<int64_t>(), 48);
  EXPECT_EQ(r["by_operator"]["aten.mm"], 48);
}

TEST(Session, TlsRestoredExactly) {
  EXPECT_FALSE(ModeKeyIncluded());
  Session s;
  ASSERT_TRUE(s.Start().ok());
  EXPECT_TRUE(ModeKeyIncluded());
  ASSERT_TRUE(s.Stop().ok());
  EXPECT_FALSE(ModeKeyIncluded());
  // A key that was already on stays on.
  c10::impl::tls_set_dispatch_key_included(kModeKey, true);
  Session s2;
  ASSERT_TRUE(s2.Start().ok());
  ASSERT_TRUE(s2.Stop().ok());
  EXPECT_TRUE(ModeKeyIncluded());
  c10::impl::tls_set_dispatch_key_included(kModeKey, false);
}

TEST(Session, ExceptionPropagatesUnchangedAndRestoresTls) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({4, 4});
  Session s;
  bool caught = false;
  try {
    ScanGuard guard(s);
    at::mm(a, b);  // shapes mismatch: the kernel throws c10::Error
  } catch (const c10::Error& e) {
    caught = true;
    EXPECT_NE(std::string(e.what()).find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos);
  }
  EXPECT_TRUE(caught);
  EXPECT_FALSE(ModeKeyIncluded());
  EXPECT_FALSE(s.active());
  const auto r = Report(s);
  EXPECT_NE(FindDiagnostic(r, "operator_raised", "aten.mm"), nullptr) << r.dump(1);
  EXPECT_EQ(r["total"]["status"], "partial");
}

// Note [Typed kernels] (core/fallback.cc): the operands' tensors are borrowed
// while a typed kernel records them, so no call leaves a reference behind or
// takes one away, whether it returns, raises or runs in place.
TEST(Session, TypedKernelsLeaveReferenceCountsAsTheyWere) {
  const c10::OperatorHandle add = c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
  ASSERT_TRUE(add.hasKernelForDispatchKey(kModeKey));  // the typed kernel, not the fallback alone
  at::Tensor a = at::ones({2, 3}), b = at::ones({2, 3}), c = at::ones({4});
  const size_t a_uses = a.use_count(), b_uses = b.use_count();
  at::Tensor sum, product;
  bool raised = false;
  const auto r = Scan([&] {
    sum = at::add(a, b);
    product = at::mul(a, b);
    a.relu_();
    try {
      at::add(a, c);  // 2x3 and 4 do not broadcast: the kernel throws
    } catch (const c10::Error&) {
      raised = true;
    }
  });
  EXPECT_TRUE(raised);
  EXPECT_EQ(a.use_count(), a_uses);
  EXPECT_EQ(b.use_count(), b_uses);
  EXPECT_EQ(sum.use_count(), 1u);
  EXPECT_EQ(product.use_count(), 1u);
  EXPECT_EQ(sum.sum().item<float>(), 12.0f);  // still the tensors they were: 6 x (1 + 1)
  // By hand: add and mul on 2x3 floats, 6 FLOPs each; relu_ 6 comparisons.
  EXPECT_EQ(r["by_operator"]["aten.add"], 6) << r.dump(1);
  EXPECT_EQ(r["by_operator"]["aten.mul"], 6) << r.dump(1);
  EXPECT_NE(FindDiagnostic(r, "operator_raised", "aten.add"), nullptr) << r.dump(1);
}

TEST(Session, NestedScansNest) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  const at::Tensor x = at::ones({5, 2, 3}), y = at::ones({5, 3, 4});
  Session outer, inner;
  {
    ScanGuard g1(outer);
    at::mm(a, b);
    {
      ScanGuard g2(inner);
      at::bmm(x, y);
    }
  }
  const auto ro = Report(outer), ri = Report(inner);
  EXPECT_EQ(ri["by_operator"].size(), 1u);
  EXPECT_EQ(ri["by_operator"]["aten.bmm"], 240);  // 5 x 48
  EXPECT_EQ(ro["by_operator"]["aten.mm"], 48);
  EXPECT_EQ(ro["by_operator"]["aten.bmm"], 240);
  EXPECT_EQ(ro["total"]["value"], 288);
}

// A scan started inside another and never stopped (a workload that forgot
// it) ends with the enclosing scan: the key is off afterwards and both report.
TEST(Session, StoppingAnOuterScanStopsTheScansLeftOpenInsideIt) {
  Session a, b;
  const at::Tensor x = at::ones({2, 3}), y = at::ones({3, 4});
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  at::mm(x, y);  // 2*4 dots of 3 terms: 2*2*4*3 = 48 FLOPs, seen by both scans
  EXPECT_TRUE(a.Stop().ok());
  EXPECT_FALSE(ModeKeyIncluded());
  at::mm(x, y);  // after both stopped: seen by neither
  const torchscan::Status late = b.Stop();
  EXPECT_EQ(late.code(), torchscan::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(late.message()).find("already stopped"), std::string::npos);
  EXPECT_EQ(Report(a)["total"]["value"], 48);
  EXPECT_EQ(Report(b)["total"]["value"], 48);
  EXPECT_FALSE(ModeKeyIncluded());
}

TEST(Session, ScansOnceAndReportsOnlyAfterStop) {
  Session s;
  EXPECT_FALSE(s.FlopReportJson().ok());
  ASSERT_TRUE(s.Start().ok());
  EXPECT_FALSE(s.FlopReportJson().ok());
  EXPECT_EQ(s.Start().code(), torchscan::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Stop().ok());
  EXPECT_EQ(s.Start().code(), torchscan::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.FlopReportJson().ok());
}

TEST(Session, OtherThreadsAreNotRecorded) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s;
  {
    ScanGuard guard(s);
    std::thread t([&] { at::mm(a, b); });
    t.join();
  }
  EXPECT_EQ(s.recorded_calls(), 0u);
  // And a scan inside a worker thread records that thread's work.
  nlohmann::json worker_report;
  std::thread t([&] { worker_report = Scan([&] { at::mm(a, b); }); });
  t.join();
  EXPECT_EQ(worker_report["by_operator"]["aten.mm"], 48);
}

// mm of (2,3)@(3,4): 2*2*3*4 = 48 FLOPs (one multiply and one add per term).
TEST(Session, APauseTheScanNeverResumedEndsWithIt) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  {
    Session s;
    ScanGuard guard(s);
    PauseThreadRecordingForScan();  // its resume never comes (an interrupt, say)
    PauseThreadRecordingForScan();
    at::mm(a, b);  // paused: not counted
    ResumeThreadRecordingForScan();
  }
  EXPECT_FALSE(ThreadRecordingPaused());
  EXPECT_EQ(Scan([&] { at::mm(a, b); })["total"]["value"], 48);  // the next scan is exact
}

TEST(Session, AnOuterScansPauseOutlivesAnInnerScan) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session outer;
  ScanGuard guard(outer);
  PauseThreadRecordingForScan();  // the outer scan's own work
  {
    // Started on a paused thread it would count nothing: refused, with why.
    Session inner;
    const Status st = inner.Start();
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(st.message()).find("recording is paused"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(ThreadRecordingPaused());
  ResumeThreadRecordingForScan();
  {
    Session inner;
    ScanGuard inner_guard(inner);
    PauseThreadRecordingForScan();  // the inner scan's: ends when it stops
  }
  EXPECT_FALSE(ThreadRecordingPaused());
  at::mm(a, b);
  ResumeThreadRecordingForScan();  // no pause left: a no-op
  EXPECT_FALSE(ThreadRecordingPaused());
}

TEST(Session, PausesWithNoScanPauseNothing) {
  PauseThreadRecordingForScan();  // e.g. a compile outside any scan, its end never reported
  EXPECT_FALSE(ThreadRecordingPaused());
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  EXPECT_EQ(Scan([&] { at::mm(a, b); })["total"]["value"], 48);
  ResumeThreadRecordingForScan();
}

TEST(Session, CallerFormulaOverridesAndIsScoped) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s;
  ASSERT_TRUE(s.SetOperatorFormula("aten::mm", [](const OpCall&) { return FormulaResult::Complete(7); }).ok());
  ASSERT_TRUE(s.SetOperatorFormula("aten::var", [](const OpCall& c) {
                 return FormulaResult::Complete(c.arg(0).tensor().numel());
               }).ok());
  {
    ScanGuard guard(s);
    at::var(at::mm(a, b));
    at::mm(a, b);
  }
  const auto r = Report(s);
  EXPECT_EQ(r["by_operator"]["aten.mm"], 14);  // 2 calls x 7
  EXPECT_EQ(r["by_operator"]["aten.var"], 8);  // the caller's count: one per input value of (2x4)
  EXPECT_EQ(r["total"]["status"], "complete");
  // A later scan without the override uses the built-in formula.
  EXPECT_EQ(Scan([&] { at::mm(a, b); })["by_operator"]["aten.mm"], 48);
  EXPECT_EQ(s.SetOperatorFormula("relu", nullptr).code(), torchscan::StatusCode::kFailedPrecondition);
  Session bad;
  EXPECT_EQ(bad.SetOperatorFormula("relu", [](const OpCall&) { return FormulaResult::Complete(0); }).code(),
            torchscan::StatusCode::kInvalidArgument);
}

TEST(Session, BackwardIsSeen) {
  at::Tensor x = at::ones({2, 5}).requires_grad_(true);
  const at::Tensor w = at::ones({3, 5}).requires_grad_(true);
  Session s;
  {
    ScanGuard guard(s);
    at::mm(x, w.t()).sum().backward();
  }
  const auto r = Report(s);
  // forward (2x5)(5x3): 6*5*2 = 60; backward: grad_x = g (2x3) @ w (3x5): 10*3*2 = 60,
  // grad_w = g^T (3x2) @ x (2x5): 15*2*2 = 60. Total mm: 180.
  EXPECT_EQ(r["by_operator"]["aten.mm"], 180) << r.dump(1);
}

TEST(Session, ModuleLabelsAttributeCallsToEveryActiveLabel) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s;
  EXPECT_EQ(s.SetModuleLabels({"Global"}).code(), torchscan::StatusCode::kFailedPrecondition);
  {
    ScanGuard guard(s);
    ASSERT_TRUE(s.SetModuleLabels({"Global", "Net", "Net.fc"}).ok());
    at::mm(a, b);                                                   // 48, for all three labels
    ASSERT_TRUE(s.SetModuleLabels({"Net", "Global", "Net"}).ok());  // order and repeats do not matter
    at::mm(a, b);                                                   // 48 more for Global and Net
    ASSERT_TRUE(s.SetModuleLabels({}).ok());
    at::mm(a, b);  // counted in the total only
  }
  const auto r = Report(s);
  EXPECT_EQ(r["total"]["value"], 144);
  EXPECT_EQ(r["by_module"], nlohmann::json({{"Global", 96}, {"Net", 96}, {"Net.fc", 48}}));
}

TEST(Session, ModuleScopesGiveExclusiveLayerRows) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  Session s;
  {
    ScanGuard guard(s);
    ModuleScope net(s, "net");
    at::mm(a, b);  // net's own work: 48 (operator view), 8*5 = 40 (module view)
    for (int call = 0; call < 2; ++call) {
      ModuleScope fc(s, "net.fc");  // a shared module called twice
      at::relu(at::mm(a, b));       // 48 + 8 (operator view) per call
    }
  }
  at::mm(a, b);  // after the scan: not recorded
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0]["path"], "net");
  EXPECT_EQ(layers[0]["depth"], 0);
  EXPECT_EQ(layers[0]["metrics"]["operator_flops"]["value"], 48);
  EXPECT_EQ(layers[0]["metrics"]["module_flops"]["value"], 40);
  for (int call = 0; call < 2; ++call) {
    const auto& fc = layers[1 + call];
    EXPECT_EQ(fc["path"], "net.fc");
    EXPECT_EQ(fc["call_index"], call);
    EXPECT_EQ(fc["parent"], 0);
    EXPECT_EQ(fc["depth"], 1);
    EXPECT_EQ(fc["metrics"]["operator_flops"]["value"], 56);
    EXPECT_EQ(fc["metrics"]["macs"]["value"], 24);  // 8 dots of 3 terms; relu has none
  }
  // Rows add up to the totals.
  EXPECT_EQ(nlohmann::json::parse(s.FlopReportJson().value())["total"]["value"], 48 + 2 * 56);
}

TEST(Session, PoppingAScopeSaysWhetherItRanAttentionOrASoftmax) {
  const at::Tensor q = at::ones({1, 2, 4, 8}), x = at::ones({2, 3});
  Session s;
  bool net = false, mlp = true, attn = false, soft = false, after = true;
  {
    ScanGuard guard(s);
    const int32_t n = s.PushModuleScope("net").value();
    {
      const int32_t a = s.PushModuleScope("net.attn").value();
      at::scaled_dot_product_attention(q, q, q);  // attention, whatever the scan records inside it
      ASSERT_TRUE(s.PopModuleScope(a, false, {}, &attn).ok());
    }
    {
      const int32_t m = s.PushModuleScope("net.mlp").value();
      at::relu(at::mm(x, x.t()));  // neither
      ASSERT_TRUE(s.PopModuleScope(m, false, {}, &mlp).ok());
    }
    {
      const int32_t f = s.PushModuleScope("net.scores").value();
      at::softmax(x, 1);
      ASSERT_TRUE(s.PopModuleScope(f, false, {}, &soft).ok());
    }
    ASSERT_TRUE(s.PopModuleScope(n, false, {}, &net).ok());  // encloses both kinds
    const int32_t later = s.PushModuleScope("tail").value();
    at::relu(x);  // neither, after scopes that had both
    ASSERT_TRUE(s.PopModuleScope(later, false, {}, &after).ok());
  }
  EXPECT_TRUE(attn);
  EXPECT_FALSE(mlp);
  EXPECT_TRUE(soft);
  EXPECT_TRUE(net);
  EXPECT_FALSE(after);
}

// Note [Reused identities]: a Python number wrapped as a 0-d tensor for a
// call (`0.5 * x`) is made without a recorded call, at whatever address is
// free, often a freed tracked tensor's. It is a constant: the receptive
// field of two stacked 3x3 convolutions, scaled by it, is 3 + 2 = 5.
TEST(Session, AWrappedNumberAtAFreedTensorsAddressIsAConstant) {
  const at::Tensor x = at::ones({1, 1, 8, 8}), w = at::ones({1, 1, 3, 3});
  uintptr_t freed = 0, wrapped = 0;
  Session s;
  {
    ScanGuard guard(s);
    const int32_t net = s.PushModuleScope("net").value();
    const at::Tensor y = at::conv2d(x, w, {}, 1, 1);
    {
      const at::Tensor gone = at::conv2d(y, w, {}, 1, 1);  // tracked (4-d), then freed
      freed = reinterpret_cast<uintptr_t>(gone.unsafeGetTensorImpl());
    }
    PauseThreadRecordingForScan();  // made as the Python binding makes it: no recorded call
    at::Tensor number = at::ones({});
    ResumeThreadRecordingForScan();
    number.unsafeGetTensorImpl()->set_wrapped_number(true);
    wrapped = reinterpret_cast<uintptr_t>(number.unsafeGetTensorImpl());
    const at::Tensor out = at::mul(at::conv2d(y, w, {}, 1, 1), number);
    ASSERT_TRUE(s.PopModuleScope(net, false, {reinterpret_cast<uintptr_t>(out.unsafeGetTensorImpl())}).ok());
  }
  if (wrapped != freed) GTEST_SKIP() << "this allocator did not reuse the freed tensor's address";
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0]["metrics"]["receptive_field"]["value"], 5) << layers[0]["metrics"]["receptive_field"];
}

TEST(Session, ModuleScopeMarksAFailedForwardAndRecovers) {
  const at::Tensor a = at::ones({2, 3}), bad = at::ones({4, 4});
  Session s;
  {
    ScanGuard guard(s);
    ModuleScope outer(s, "outer");
    try {
      ModuleScope inner(s, "outer.inner");
      at::mm(a, bad);  // raises inside the inner module
    } catch (const c10::Error&) {
      // the model catches it and goes on
    }
    at::mm(a, at::ones({3, 2}));
  }
  const auto layers = nlohmann::json::parse(s.LayersJson().value());
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_FALSE(layers[0]["failed"].get<bool>());
  EXPECT_EQ(layers[0]["metrics"]["operator_flops"]["value"], 2 * 2 * 3 * 2);
  EXPECT_TRUE(layers[1]["failed"].get<bool>());
  EXPECT_EQ(layers[1]["metrics"]["operator_flops"]["status"], "unavailable");
  // Scopes outside a scan are refused with a clear error.
  Session idle;
  EXPECT_EQ(idle.PushModuleScope("x").status().code(), torchscan::StatusCode::kFailedPrecondition);
}

TEST(Session, MetaTensorsAreCounted) {
  const at::Tensor a = at::empty({200000, 3000}, at::TensorOptions().device(at::kMeta));
  const at::Tensor b = at::empty({3000, 4000}, at::TensorOptions().device(at::kMeta));
  const auto r = Scan([&] { at::mm(a, b); });
  EXPECT_EQ(r["by_operator"]["aten.mm"], int64_t{2} * 200000 * 4000 * 3000);
}

}  // namespace
}  // namespace torchscan

namespace torchscan {
namespace {

TEST(Trace, NestsCallsWithTheirFlops) {
  ScanOptions options;
  options.timestamps = true;
  Session s(options);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  {
    ScanGuard scan(s);
    ModuleScope layer(s, "layer");
    at::mm(a, b);
  }
  const auto trace = nlohmann::json::parse(s.TraceJson().value());
  const nlohmann::json *module = nullptr, *mm = nullptr;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "module") module = &e;
    if (e["name"] == "aten.mm") mm = &e;
  }
  ASSERT_NE(module, nullptr);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ((*module)["name"], "layer");
  // The mm runs inside the layer's slice; 8 outputs x 3 terms x 2 = 48 FLOPs.
  EXPECT_LE((*module)["ts"].get<double>(), (*mm)["ts"].get<double>());
  EXPECT_LE((*mm)["ts"].get<double>() + (*mm)["dur"].get<double>(),
            (*module)["ts"].get<double>() + (*module)["dur"].get<double>() + 1e-3);
  EXPECT_EQ((*mm)["args"]["flops"], 48);
}

TEST(Trace, IsRefusedWhereItDoesNotApply) {
  Session plain;
  {
    ScanGuard scan(plain);
  }
  EXPECT_FALSE(plain.TraceJson().ok());  // no timestamps taken
  ScanOptions options;
  options.timestamps = true;
  Session running(options);
  ScanGuard scan(running);
  EXPECT_EQ(running.TraceJson().status().code(), torchscan::StatusCode::kFailedPrecondition);  // not stopped yet
}

}  // namespace
}  // namespace torchscan
