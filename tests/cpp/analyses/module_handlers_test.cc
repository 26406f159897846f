// Custom module handlers from C++ (Session::SetModuleHandler):
// module-view estimates for module scopes, subtree ownership, totals counted
// once, diagnostics. Expected values are derived by hand (module view: a
// K-term dot is K multiplies + K - 1 adds; K MACs per output).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <torch/library.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/torchscan.h"

// An operator no formula table knows (in either view): the distance of
// two tensors, CompositeExplicitAutograd, so its call reaches the scan's key
// and its children (sub, pow, sum, sqrt) run below as its missing work.
TORCH_LIBRARY(torchscan_handlers_test, m) { m.def("distance(Tensor x, Tensor w) -> Tensor"); }
TORCH_LIBRARY_IMPL(torchscan_handlers_test, CompositeExplicitAutograd, m) {
  m.impl("distance", [](const at::Tensor& x, const at::Tensor& w) { return x.sub(w).pow(2).sum().sqrt(); });
}

namespace torchscan {
namespace {

using json = nlohmann::json;

// The model of most tests, as module scopes:
//   ""           root, no work of its own
//   block        its own mm (2,3)@(3,4): 8 outputs * (3 + 2) = 40 FLOPs, 8 * 3 = 24 MACs
//   block.fc1    mm (2,3)@(3,4): 40 FLOPs, 24 MACs
//   block.fc2    mm (2,4)@(4,2): 4 outputs * (4 + 3) = 28 FLOPs, 16 MACs
//   head         mm (2,2)@(2,2): 4 outputs * (2 + 1) = 12 FLOPs, 8 MACs
// Totals: 120 FLOPs, 72 MACs.
void RunModel(Session& s) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4}), c = at::ones({2, 4}), d = at::ones({4, 2});
  const at::Tensor e = at::ones({2, 2});
  ScanGuard guard(s);
  ModuleScope root(s, "");
  {
    ModuleScope block(s, "block");
    at::mm(a, b);
    {
      ModuleScope fc1(s, "block.fc1");
      at::mm(a, b);
    }
    {
      ModuleScope fc2(s, "block.fc2");
      at::mm(c, d);
    }
  }
  ModuleScope head(s, "head");
  at::mm(e, e);
}

json Layers(Session& s) { return json::parse(s.LayersJson().value()); }
json Module(Session& s) { return json::parse(s.ModuleReportJson().value()); }

const json& Row(const json& layers, const std::string& path, int call_index = 0) {
  for (const auto& l : layers) {
    if (l["path"] == path && l["call_index"] == call_index) return l;
  }
  throw std::runtime_error("no row " + path);
}

std::vector<json> Codes(const json& module_report, const std::string& code) {
  std::vector<json> out;
  for (const auto& d : module_report["diagnostics"]) {
    if (d["code"] == code) out.push_back(d);
  }
  return out;
}

ModuleHandlerOptions Named(std::string name) {
  ModuleHandlerOptions o;
  o.name = std::move(name);
  return o;
}

ModuleMetricEstimate Value(Count v, MetricOwnership ownership = MetricOwnership::kModuleCall,
                           MetricStatus status = MetricStatus::kComplete) {
  ModuleMetricEstimate e;
  e.value = v;
  e.ownership = ownership;
  e.status = status;
  return e;
}

// A handler whose estimate is `value` for `metric`, owning the call's subtree.
ModuleHandler SubtreeEstimate(std::string metric, Count value) {
  return [metric, value](const ModuleCall&) {
    ModuleEstimate e;
    e.metrics[metric] = Value(value, MetricOwnership::kSubtree);
    return e;
  };
}

TEST(ModuleHandlers, SubtreeOwnerCoversChildrenAndCountsOnce) {
  Session s;
  std::vector<ModuleCall> seen;
  ASSERT_TRUE(s.SetModuleHandler(
                   "block",
                   [&](const ModuleCall& call) {
                     seen.push_back(call);
                     ModuleEstimate e;
                     ModuleMetricEstimate flops = Value(1000, MetricOwnership::kSubtree);
                     flops.method = "fused";
                     e.metrics["module_flops"] = flops;
                     return e;
                   },
                   Named("tests.Block"))
                  .ok());
  RunModel(s);
  const json layers = Layers(s);
  const json& block = Row(layers, "block");
  EXPECT_EQ(block["metric_ownership"], json({{"module_flops", "subtree"}}));
  EXPECT_EQ(block["metrics"]["module_flops"], json({{"status", "complete"},
                                                    {"value", 1000},
                                                    {"known_value", 1000},
                                                    {"unit", "FLOPs"},
                                                    {"scope", "subtree"},
                                                    {"method", "custom_module_handler:tests.Block:fused"}}));
  EXPECT_EQ(block["metrics"]["macs"]["value"], 24);  // not supplied: the built-in value
  for (const char* child : {"block.fc1", "block.fc2"}) {
    const json& l = Row(layers, child);
    EXPECT_FALSE(l["metrics"].contains("module_flops")) << l.dump(1);
    EXPECT_EQ(l["metric_owners"], json({{"module_flops", {{"path", "block"}, {"call_index", 0}}}}));
    EXPECT_TRUE(l["metrics"].contains("macs"));
  }
  EXPECT_EQ(Row(layers, "head")["metrics"]["module_flops"]["value"], 12);
  // Totals: 1000 (block's subtree) + 12 (head); MACs unchanged, 72.
  const json module = Module(s);
  EXPECT_EQ(module["totals"]["module_flops"]["value"], 1012) << module.dump(1);
  EXPECT_EQ(module["totals"]["macs"]["value"], 72);
  EXPECT_TRUE(module["diagnostics"].empty()) << module.dump(1);
  // The handler ran once, on the actual call: block's own mm and its
  // children's two, in call order (and what their kernels called, nested).
  ASSERT_EQ(seen.size(), 1u);  // LayersJson and ModuleReportJson share one run
  EXPECT_EQ(seen[0].path, "block");
  EXPECT_EQ(seen[0].depth, 1);
  std::vector<const ModuleCall::Op*> top;
  for (const auto& op : seen[0].ops) {
    if (!op.nested) top.push_back(&op);
  }
  ASSERT_EQ(top.size(), 3u);
  for (const auto* op : top) EXPECT_EQ(op->name, "aten::mm");
  EXPECT_TRUE(top[0]->own);
  EXPECT_FALSE(top[1]->own);
  EXPECT_FALSE(top[2]->own);
  EXPECT_EQ(top[2]->call.arg(0).tensor().sizes()[1], 4);  // fc2's (2,4) input
  // The values form: the covered rows name their owner's index.
  const auto rows = s.LayerRows().value();
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[2].path, "block.fc1");
  EXPECT_EQ(rows[2].owner[1], 1);
  EXPECT_EQ(rows[1].ownership[1], MetricOwnership::kSubtree);
  EXPECT_EQ(rows[1].method[1], "custom_module_handler:tests.Block:fused");
  EXPECT_EQ(rows[1].known[1], Count(1000));
  EXPECT_FALSE(rows[1].ownership[2].has_value());
}

TEST(ModuleHandlers, ModuleCallReplacesOnlyTheCallsOwnValueFromItsRecordedCalls) {
  Session s;
  ASSERT_TRUE(s.SetModuleHandler(
                   "block",
                   [](const ModuleCall& call) {
                     // The block's own work, from its own recorded calls, in
                     // the caller's convention (2 per multiply-add): mm (2,3)@(3,4)
                     // is 2 * 2*4 * 3 = 48.
                     Count flops = 0;
                     for (const auto& op : call.ops) {
                       if (!op.own || op.nested || op.name != "aten::mm") continue;
                       const auto x = op.call.arg(0).tensor().sizes(), y = op.call.arg(1).tensor().sizes();
                       flops = flops + Count(2 * x[0] * y[1] * x[1]);
                     }
                     ModuleEstimate e;
                     e.metrics["module_flops"] = Value(flops);
                     return e;
                   },
                   Named("tests.own"))
                  .ok());
  RunModel(s);
  const json layers = Layers(s);
  EXPECT_EQ(Row(layers, "block")["metric_ownership"], json({{"module_flops", "module_call"}}));
  EXPECT_EQ(Row(layers, "block")["metrics"]["module_flops"]["value"], 48);
  EXPECT_EQ(Row(layers, "block")["metrics"]["module_flops"]["scope"], "module_call");
  EXPECT_EQ(Row(layers, "block.fc1")["metrics"]["module_flops"]["value"], 40);  // children keep theirs
  EXPECT_FALSE(Row(layers, "block.fc1").contains("metric_owners"));
  // 120 - 40 (block's built-in own value) + 48.
  EXPECT_EQ(Module(s)["totals"]["module_flops"]["value"], 128);
}

TEST(ModuleHandlers, OwnershipFollowsDynamicCallsOfASharedChild) {
  Session s;
  ASSERT_TRUE(s.SetModuleHandler(
                   "block",
                   [](const ModuleCall&) {
                     ModuleEstimate e;
                     e.metrics["macs"] = Value(100, MetricOwnership::kSubtree);
                     return e;
                   },
                   Named("tests.Wrapper"))
                  .ok());
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  {
    ScanGuard guard(s);
    ModuleScope root(s, "");
    {
      ModuleScope block(s, "block");
      ModuleScope lin(s, "lin");  // the shared module, inside block
      at::mm(a, b);
    }
    ModuleScope lin(s, "lin");  // and outside it: 24 MACs of its own
    at::mm(a, b);
  }
  const json layers = Layers(s);
  EXPECT_EQ(Row(layers, "lin", 0)["metric_owners"], json({{"macs", {{"path", "block"}, {"call_index", 0}}}}));
  EXPECT_FALSE(Row(layers, "lin", 1).contains("metric_owners"));
  EXPECT_EQ(Row(layers, "lin", 1)["metrics"]["macs"]["value"], 24);
  EXPECT_EQ(Module(s)["totals"]["macs"]["value"], 100 + 24);
}

TEST(ModuleHandlers, ABlockWithNoModuleFormulaIsPartialWithoutAHandlerAndCompleteWithOne) {
  // The test's distance operator has no formula (its CompositeExplicit
  // kernel's children are part of its missing work); the mix scope's only work.
  const at::Tensor x = at::ones({4, 4}), w = at::ones({4, 4});
  static const auto distance = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("torchscan_handlers_test::distance", "")
                                   .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  auto run = [&](Session& s) {
    ScanGuard guard(s);
    ModuleScope root(s, "");
    {
      ModuleScope embed(s, "embed");
      at::mm(x, w);  // 16 outputs * (4 + 3) = 112 FLOPs, 64 MACs
    }
    ModuleScope mix(s, "mix");
    distance.call(x, w);
  };
  Session without;
  run(without);
  const json partial = Module(without);
  for (const char* m : {"module_flops", "macs", "dmas"}) EXPECT_EQ(partial["totals"][m]["status"], "partial");
  bool named = false;
  for (const auto& d : partial["diagnostics"])
    named = named || d.value("operator", "") == "torchscan_handlers_test.distance";
  EXPECT_TRUE(named) << partial.dump(1);
  EXPECT_EQ(Row(Layers(without), "mix")["metrics"]["module_flops"]["status"], "partial");

  Session with;
  ASSERT_TRUE(with.SetModuleHandler(
                      "mix",
                      [](const ModuleCall& call) {
                        // distance(x, w) over 16 elements: 16 subtractions, 16 squares,
                        // 15 adds, 1 square root = 48 FLOPs; no MACs; 32 reads + 1 write.
                        EXPECT_EQ(call.ops.front().name, "torchscan_handlers_test::distance");
                        ModuleEstimate e;
                        e.metrics["module_flops"] = Value(48);
                        e.metrics["macs"] = Value(0);
                        e.metrics["dmas"] = Value(33);
                        return e;
                      },
                      Named("tests.dist_cost"))
                  .ok());
  run(with);
  const json complete = Module(with);
  EXPECT_EQ(complete["totals"]["module_flops"]["value"], 112 + 48) << complete.dump(1);
  EXPECT_EQ(complete["totals"]["macs"]["value"], 64);
  EXPECT_EQ(complete["totals"]["dmas"]["status"], "complete");
  EXPECT_TRUE(complete["diagnostics"].empty()) << complete.dump(1);  // its gaps no longer hold
  // The operator view never changes.
  EXPECT_EQ(json::parse(with.FlopReportJson().value()), json::parse(without.FlopReportJson().value()));
}

TEST(ModuleHandlers, AThrowingHandlerMakesItsEstimatesUnavailableAndLeavesTheRest) {
  Session s;
  ASSERT_TRUE(s.SetModuleHandler(
                   "block", [](const ModuleCall&) -> ModuleEstimate { throw std::runtime_error("no estimate"); },
                   Named("tests.broken"))
                  .ok());
  RunModel(s);
  const json layers = Layers(s);
  for (const char* m : {"module_flops", "macs", "dmas"}) {
    EXPECT_EQ(Row(layers, "block")["metrics"][m]["status"], "unavailable");
    EXPECT_EQ(Row(layers, "block")["metrics"][m]["method"], "custom_module_handler:tests.broken");
  }
  EXPECT_EQ(Row(layers, "block.fc1")["metrics"]["module_flops"]["value"], 40);
  const json module = Module(s);
  // Known: 120 - 40 (block's own, now unavailable) = 80.
  EXPECT_EQ(module["totals"]["module_flops"]["status"], "partial");
  EXPECT_EQ(module["totals"]["module_flops"]["known_value"], 80);
  const auto errors = Codes(module, "custom_handler_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["path"], "block");
  EXPECT_NE(errors[0]["message"].get<std::string>().find("no estimate"), std::string::npos);
}

TEST(ModuleHandlers, InvalidNamesAndValuesPartialAndUnavailableEstimates) {
  struct Case {
    const char* code;
    ModuleEstimate estimate;
    const char* metric;  // the metric made unavailable / partial
  };
  std::vector<Case> cases;
  {
    ModuleEstimate e;
    e.metrics["receptive_field"] = Value(3);
    cases.push_back({"custom_handler_invalid", e, "module_flops"});
  }
  {
    ModuleEstimate e;
    e.metrics["module_flops"] = Value(Count(-1));
    cases.push_back({"custom_metric_invalid", e, "module_flops"});
  }
  {
    ModuleEstimate e;
    e.metrics["macs"] = Value(10, MetricOwnership::kModuleCall, MetricStatus::kPartial);
    cases.push_back({"custom_metric_partial", e, "macs"});
  }
  {
    ModuleEstimate e;
    e.metrics["dmas"] = Value(0, MetricOwnership::kModuleCall, MetricStatus::kUnavailable);
    cases.push_back({"custom_metric_unavailable", e, "dmas"});
  }
  for (const Case& c : cases) {
    Session s;
    ASSERT_TRUE(s.SetModuleHandler("block", [&](const ModuleCall&) { return c.estimate; }, Named("tests.h")).ok());
    RunModel(s);
    const json module = Module(s);
    const auto found = Codes(module, c.code);
    ASSERT_EQ(found.size(), 1u) << c.code << module.dump(1);
    EXPECT_EQ(found[0]["path"], "block");
    const std::string status = Row(Layers(s), "block")["metrics"][c.metric]["status"];
    EXPECT_EQ(status, std::string(c.code) == "custom_metric_partial" ? "partial" : "unavailable") << c.code;
    EXPECT_EQ(module["totals"][c.metric]["status"], "partial") << c.code;
  }
  // partial: 72 - 24 (block's own MACs) + 10 = 58, a lower bound.
  Session s;
  ASSERT_TRUE(s.SetModuleHandler("block", [&](const ModuleCall&) { return cases[2].estimate; }, Named("h")).ok());
  RunModel(s);
  EXPECT_EQ(Module(s)["totals"]["macs"]["known_value"], 58);
}

TEST(ModuleHandlers, AnOwnedMetricLeftOutIsUnavailableAndItsOwnershipStays) {
  Session s;
  ModuleHandlerOptions options = Named("tests.flops_only");
  options.metrics = {"module_flops", "macs"};
  options.ownership = MetricOwnership::kSubtree;
  ASSERT_TRUE(s.SetModuleHandler("block", SubtreeEstimate("module_flops", 108), options).ok());
  RunModel(s);
  const json layers = Layers(s);
  EXPECT_EQ(Row(layers, "block")["metrics"]["macs"]["status"], "unavailable");
  EXPECT_EQ(Row(layers, "block")["metric_ownership"], json({{"module_flops", "subtree"}, {"macs", "subtree"}}));
  EXPECT_FALSE(Row(layers, "block.fc1")["metrics"].contains("macs"));  // no substitute estimate
  const json module = Module(s);
  EXPECT_EQ(module["totals"]["macs"]["known_value"], 8);  // head alone
  EXPECT_EQ(module["totals"]["module_flops"]["value"], 108 + 12);
  ASSERT_EQ(Codes(module, "custom_metric_unavailable").size(), 1u);
  EXPECT_EQ(Codes(module, "custom_metric_unavailable")[0]["metric"], "macs");
}

TEST(ModuleHandlers, AFailedCallRunsNoHandler) {
  Session s;
  int calls = 0;
  ASSERT_TRUE(s.SetModuleHandler(
                   "inner",
                   [&](const ModuleCall&) {
                     ++calls;
                     return ModuleEstimate{};
                   },
                   Named("tests.inner"))
                  .ok());
  {
    ScanGuard guard(s);
    ModuleScope outer(s, "");
    try {
      ModuleScope inner(s, "inner");
      at::mm(at::ones({2, 3}), at::ones({4, 4}));  // raises
    } catch (const c10::Error&) {
    }
  }
  EXPECT_EQ(Layers(s)[1]["metrics"]["module_flops"]["status"], "unavailable");
  EXPECT_EQ(calls, 0);
}

TEST(ModuleHandlers, SetModuleHandlerRefusesMisuse) {
  Session s;
  const ModuleHandler ok = [](const ModuleCall&) { return ModuleEstimate{}; };
  EXPECT_EQ(s.SetModuleHandler("a", nullptr, Named("x")).code(), torchscan::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.SetModuleHandler("a", ok, Named("")).code(), torchscan::StatusCode::kInvalidArgument);
  ModuleHandlerOptions bad = Named("x");
  bad.metrics = {"flops"};
  EXPECT_EQ(s.SetModuleHandler("a", ok, bad).code(), torchscan::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.SetModuleHandler("a", ok, Named("x")).ok());
  EXPECT_EQ(s.SetModuleHandler("a", ok, Named("y")).code(), torchscan::StatusCode::kAlreadyExists);
  {
    ScanGuard guard(s);
    EXPECT_EQ(s.SetModuleHandler("b", ok, Named("x")).code(), torchscan::StatusCode::kFailedPrecondition);
  }
}

// A one-metric handler's failure is about that metric: where an enclosing
// subtree owner covers it, its value is unused and nothing is reported.
TEST(ModuleHandlers, AOneMetricFailureCoveredByAnOwnerIsNotReported) {
  Session s;
  ModuleHandlerOptions subtree = Named("tests.Block");
  subtree.ownership = MetricOwnership::kSubtree;
  ASSERT_TRUE(s.SetModuleHandler("block", SubtreeEstimate("macs", 100), subtree).ok());
  ModuleHandlerOptions macs_only = Named("tests.Fc1");
  macs_only.metrics = {"macs"};
  ASSERT_TRUE(s.SetModuleHandler(
                   "block.fc1", [](const ModuleCall&) -> ModuleEstimate { throw std::runtime_error("x"); }, macs_only)
                  .ok());
  RunModel(s);
  const json module = Module(s);
  EXPECT_TRUE(Codes(module, "custom_handler_error").empty()) << module.dump(1);
  // 100 (block's subtree) + 8 (head).
  EXPECT_EQ(module["totals"]["macs"]["value"], 108);
}

// Results of handlers that ran outside the engine (the Python shim's), by
// row: RunModel's scopes are "" (0), block (1), block.fc1 (2), block.fc2 (3),
// head (4).
TEST(ModuleResults, HandedOverResultsAreAppliedAsTheEnginesOwn) {
  Session s;
  RunModel(s);
  ASSERT_TRUE(s.SetModuleResultsJson(R"([{"row": 1, "metrics": {"macs": {"status": "complete",
      "known_value": "100", "scope": "subtree", "method": "custom_module_handler:py.Block"}}},
      {"row": 3, "diagnostics": [{"code": "custom_handler_error", "severity": "error",
      "metric": "macs", "message": "raised"}]},
      {"row": 4, "diagnostics": [{"code": "custom_metric_partial", "severity": "warning",
      "metric": "dmas", "message": "partial"}]}])")
                  .ok());
  const json layers = Layers(s);
  const json& block = Row(layers, "block");
  EXPECT_EQ(block["metric_ownership"], json({{"macs", "subtree"}}));
  EXPECT_EQ(block["metrics"]["macs"]["value"], 100);
  EXPECT_EQ(block["metrics"]["macs"]["method"], "custom_module_handler:py.Block");
  EXPECT_EQ(block["metrics"]["module_flops"]["value"], 40);  // not supplied: the built-in value
  for (const char* child : {"block.fc1", "block.fc2"}) {
    EXPECT_EQ(Row(layers, child)["metric_owners"], json({{"macs", {{"path", "block"}, {"call_index", 0}}}}));
  }
  const json module = Module(s);
  EXPECT_EQ(module["totals"]["macs"]["value"], 108);  // 100 + head's 8
  EXPECT_EQ(module["totals"]["module_flops"]["value"], 120);
  // block.fc2's macs diagnostic is covered by block's subtree; head's is not.
  ASSERT_TRUE(Codes(module, "custom_handler_error").empty()) << module.dump(1);
  const auto partial = Codes(module, "custom_metric_partial");
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_EQ(partial[0]["message"], "head: partial");
  EXPECT_EQ(partial[0]["path"], "head");
}

// Note [Opened estimates]: block stands for a native layer whose built-in
// estimate covers a handled child it never called.
TEST(ModuleResults, OpenedEstimatesAreUnavailableAndKeepTheTotalsIncomplete) {
  Session s;
  RunModel(s);
  ASSERT_TRUE(
      s.SetModuleResultsJson(R"([{"row": 1, "opens": {"type": "MultiheadAttention", "covers": ["block.inner"]}}])")
          .ok());
  const json block = Row(Layers(s), "block");
  for (const char* m : {"module_flops", "macs", "dmas"}) {
    EXPECT_EQ(block["metrics"][m]["status"], "unavailable") << m;
    EXPECT_EQ(block["metrics"][m]["method"], "module_formulas") << m;
  }
  EXPECT_FALSE(block.contains("metric_ownership"));
  const json module = Module(s);
  const auto opened = Codes(module, "expanded_atomic_boundary");
  ASSERT_EQ(opened.size(), 3u) << module.dump(1);
  EXPECT_NE(opened[0]["message"].get<std::string>().find("block.inner, which this MultiheadAttention call"),
            std::string::npos);
  // What the other rows hold: 120 - 40 FLOPs and 72 - 24 MACs, lower bounds.
  EXPECT_EQ(module["totals"]["module_flops"]["status"], "partial");
  EXPECT_EQ(module["totals"]["module_flops"]["known_value"], 80);
  EXPECT_EQ(module["totals"]["macs"]["known_value"], 48);
}

TEST(ModuleResults, BadResultsAreRefusedAndChangeNothing) {
  Session before;
  EXPECT_EQ(before.SetModuleResultsJson("[]").code(), torchscan::StatusCode::kFailedPrecondition);
  Session s;
  RunModel(s);
  const std::string good_metric =
      R"({"status": "complete", "known_value": "1", "scope": "module_call", "method": "m"})";
  for (const std::string& bad : {
           std::string("not json"),
           std::string(R"({"row": 1})"),
           std::string(R"([{"row": 5}])"),
           std::string(R"([{"row": -1}])"),
           std::string(R"([{"metrics": {}}])"),
           R"([{"row": 1, "metrics": {"flops": )" + good_metric + "}}]",
           std::string(R"([{"row": 1, "metrics": {"macs": {"status": "done", "known_value": "1",
               "scope": "module_call", "method": "m"}}}])"),
           std::string(R"([{"row": 1, "metrics": {"macs": {"status": "complete", "known_value": "-1",
               "scope": "module_call", "method": "m"}}}])"),
           std::string(R"([{"row": 1, "metrics": {"macs": {"status": "complete", "known_value": 1,
               "scope": "module_call", "method": "m"}}}])"),
           std::string(R"([{"row": 1, "metrics": {"macs": {"status": "complete", "known_value": "1",
               "method": "m"}}}])"),
           std::string(R"([{"row": 1, "diagnostics": [{"code": "c", "severity": "error", "metric": "macs"}]}])"),
           std::string(R"([{"row": 1, "opens": {"type": "X", "covers": []}}])"),
       }) {
    const Status st = s.SetModuleResultsJson(bad);
    EXPECT_EQ(st.code(), torchscan::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("torchscan: module results: "), std::string::npos) << st.message();
  }
  EXPECT_EQ(Row(Layers(s), "block")["metrics"]["macs"]["value"], 24);
  EXPECT_EQ(Module(s)["totals"]["macs"]["value"], 72);
  // C++ handlers' results are the engine's to compute.
  Session with_handler;
  ASSERT_TRUE(with_handler.SetModuleHandler("a", [](const ModuleCall&) { return ModuleEstimate{}; }, Named("x")).ok());
  RunModel(with_handler);
  EXPECT_EQ(with_handler.SetModuleResultsJson("[]").code(), torchscan::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace torchscan
