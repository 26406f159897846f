// The layer-row writer (reports/layers.h) against a reference written
// independently with nlohmann's object model and DumpJson: the same text for
// every tally a scan can produce, seeded random ones included.
#include "reports/layers.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "reports/validate.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

json Number(double v) {
  const bool whole = std::abs(v) < 9e15 && v == std::trunc(v);
  return whole ? json(static_cast<int64_t>(v)) : json(v);
}

json Metric(MetricStatus status, Count known, const std::string& unit, const std::string& scope,
            const std::string& method) {
  return MetricJson({status, known, unit, scope, method});
}

// The schema's rules, spelled out one by one (report schema, "layers").
json FieldRef(const LayerTally& l, int k, const std::string& scope) {
  json m = {{"unit", "positions"}, {"scope", scope}, {"method", "data_flow"}};
  auto unavailable = [&](const char* method, std::string reason) {
    m.update({{"status", "unavailable"},
              {"value", nullptr},
              {"known_value", nullptr},
              {"method", method},
              {"reason", std::move(reason)}});
    return m;
  };
  using S = LayerTally::FieldState;
  if (l.failed) return unavailable("data_flow", "the forward raised");
  if (l.field_state == S::kUnseen) return unavailable("data_flow", "the output was not seen by the data flow");
  if (l.field_state == S::kNotApplicable) return unavailable("not_applicable", l.field_reason);
  if (l.field_state == S::kUnknown || l.field_axes.empty()) return unavailable("data_flow", l.field_reason);
  json axes = json::array();
  bool agree = true;
  for (const auto& a : l.field_axes) {
    axes.push_back({{"dim", a.dim}, {"value", Number(a.values[k])}});
    agree = agree && a.values[k] == l.field_axes[0].values[k];
  }
  m["axes"] = axes;
  if (!agree) return unavailable("data_flow", "the spatial axes differ: see axes");
  const json value = Number(l.field_axes[0].values[k]);
  m.update({{"status", "complete"}, {"value", value}, {"known_value", value}});
  return m;
}

json RowRef(const std::vector<LayerTally>& layers, const LayerTally& l, const std::string& scope,
            const std::array<bool, 4>& requested, bool operator_view = true) {
  json metrics = json::object(), owners = json::object(), ownership = json::object();
  for (int m = operator_view ? 0 : 1; m < 4; ++m) {
    // An opened estimate (Note [Opened estimates]) is unavailable, as a failed call's.
    const MetricStatus status = l.failed || l.opened[m] ? MetricStatus::kUnavailable
                                : l.complete[m]         ? MetricStatus::kComplete
                                                        : MetricStatus::kPartial;
    if (requested[m] && l.owner[m] >= 0) {
      const LayerTally& o = layers[static_cast<size_t>(l.owner[m])];
      owners[kLayerMetricNames[m]] = {{"path", o.path}, {"call_index", o.call_index}};
      continue;
    }
    if (requested[m] && l.custom[m] != LayerTally::Custom::kNone) {
      const char* kind = l.custom[m] == LayerTally::Custom::kSubtree ? "subtree" : "module_call";
      ownership[kLayerMetricNames[m]] = kind;
      metrics[kLayerMetricNames[m]] = Metric(l.custom_unavailable[m] ? MetricStatus::kUnavailable
                                             : l.complete[m]         ? MetricStatus::kComplete
                                                                     : MetricStatus::kPartial,
                                             l.known[m], kLayerMetricUnits[m], kind, l.custom_method[m]);
      continue;
    }
    metrics[kLayerMetricNames[m]] =
        requested[m] ? Metric(status, l.known[m], kLayerMetricUnits[m], scope, kLayerMetricMethods[m])
                     : Metric(MetricStatus::kUnavailable, 0, kLayerMetricUnits[m], scope, "not_requested");
  }
  for (int k = 0; k < 3; ++k) metrics[kFieldNames[k]] = FieldRef(l, k, scope);
  if (l.memory) {
    metrics["peak_memory"] = MemoryMetricJson(l.memory_status, l.peak_memory, scope);
    metrics["allocated_bytes"] = MemoryMetricJson(l.memory_status, l.allocated_bytes, scope);
  }
  json row = {{"path", l.path},   {"call_index", l.call_index}, {"parent", l.parent >= 0 ? json(l.parent) : json()},
              {"depth", l.depth}, {"failed", l.failed},         {"metrics", metrics}};
  if (l.thread > 0) row["thread"] = l.thread;
  if (!l.request.empty()) row["request"] = l.request;
  if (!owners.empty()) row["metric_owners"] = owners;
  if (!ownership.empty()) row["metric_ownership"] = ownership;
  return row;
}

std::string Written(const std::vector<LayerTally>& layers, const std::string& scope,
                    const std::array<bool, 4>& requested, bool operator_view = true) {
  std::string out;
  AppendLayersJson(layers, scope, requested, out, operator_view);
  return out;
}

std::string Reference(const std::vector<LayerTally>& layers, const std::string& scope,
                      const std::array<bool, 4>& requested, bool operator_view = true) {
  json rows = json::array();
  for (const LayerTally& l : layers) rows.push_back(RowRef(layers, l, scope, requested, operator_view));
  return DumpJson(rows);
}

LayerTally Conv(const std::string& path) {
  LayerTally l;
  l.path = path;
  l.known = {Count(100), Count(100), Count(50), Count(30)};
  l.field_state = LayerTally::FieldState::kSpatial;
  l.field_axes = {{2, {3, 1, 1}}, {3, {3, 1, 1}}};
  return l;
}

TEST(LayersJson, AConvolutionRowByHand) {
  const LayerTally l = Conv("features.0");
  // Every key of the row and of each MetricResult in sorted order, as the
  // report schema's "layers" lists them.
  const std::string field =
      R"("axes":[{"dim":2,"value":%},{"dim":3,"value":%}],"known_value":%,)"
      R"("method":"data_flow","scope":"forward","status":"complete","unit":"positions","value":%)";
  auto with = [&](const char* v) {
    std::string s = field;
    for (size_t at; (at = s.find('%')) != std::string::npos;) s.replace(at, 1, v);
    return "{" + s + "}";
  };
  const std::string expected =
      R"([{"call_index":0,"depth":0,"failed":false,"metrics":{)"
      R"("dmas":{"known_value":30,"method":"module_formulas","scope":"forward","status":"complete","unit":"accesses","value":30},)"
      R"("effective_padding":)" +
      with("1") + R"(,"effective_stride":)" + with("1") +
      R"(,"macs":{"known_value":50,"method":"module_formulas","scope":"forward","status":"complete","unit":"MACs","value":50},)"
      R"("module_flops":{"known_value":100,"method":"module_formulas","scope":"forward","status":"complete","unit":"FLOPs","value":100},)"
      R"("operator_flops":{"known_value":100,"method":"operator_dispatch","scope":"forward","status":"complete","unit":"FLOPs","value":100},)"
      R"("receptive_field":)" +
      with("3") + R"(},"parent":null,"path":"features.0"}])";
  EXPECT_EQ(Written({l}, "forward", {true, true, true, true}), expected);
}

TEST(LayersJson, EveryCaseAsTheReference) {
  std::vector<LayerTally> layers;
  layers.push_back(Conv(""));
  LayerTally failed = Conv("a");
  failed.failed = true;
  failed.parent = 0;
  failed.depth = 1;
  layers.push_back(failed);
  LayerTally flat = Conv("b");
  flat.field_state = LayerTally::FieldState::kNotApplicable;
  flat.field_reason = "no spatial axes (flattened, reduced, or never spatial)";
  layers.push_back(flat);
  LayerTally unseen = Conv("c");
  unseen.field_state = LayerTally::FieldState::kUnseen;
  layers.push_back(unseen);
  LayerTally differ = Conv("d");
  differ.field_axes = {{2, {3, 1, 0.5}}, {3, {5, 2, 1e-7}}};
  layers.push_back(differ);
  LayerTally wide = Conv("e\"quoted\\\n\xff");  // escapes and invalid UTF-8 (replaced)
  wide.known[1] = Count::FromWide(Count::Wide{1} << 100);
  wide.known[2] = Count::Max();
  wide.known[3] += Count::Max();  // inexact: partial, its last exact sum
  wide.complete[0] = false;
  wide.thread = 3;
  wide.request = "req-1";
  layers.push_back(wide);
  LayerTally handled = Conv("f");
  handled.custom = {LayerTally::Custom::kNone, LayerTally::Custom::kSubtree, LayerTally::Custom::kModuleCall,
                    LayerTally::Custom::kModuleCall};
  handled.custom_method = {"", "custom_module_handler:x", "custom_module_handler:y", "custom_module_handler:z"};
  handled.custom_unavailable[3] = true;
  layers.push_back(handled);
  LayerTally owned = Conv("f.g");
  owned.owner = {-1, 6, -1, 6};
  owned.memory = true;
  owned.memory_status = MetricStatus::kComplete;
  owned.peak_memory = 4096;
  owned.allocated_bytes = 1024;
  layers.push_back(owned);
  LayerTally odd = Conv("h");
  odd.field_axes = {{1, {std::numeric_limits<double>::infinity(), 2.5, -0.0}}};
  odd.field_state = LayerTally::FieldState::kSpatial;
  layers.push_back(odd);
  LayerTally unknown = Conv("i");
  unknown.field_state = LayerTally::FieldState::kUnknown;
  unknown.field_reason = "aten::foo reorders positions";
  layers.push_back(unknown);
  for (const std::array<bool, 4>& requested :
       {std::array<bool, 4>{true, true, true, true}, std::array<bool, 4>{false, true, false, true},
        std::array<bool, 4>{false, false, false, false}}) {
    EXPECT_EQ(Written(layers, "forward", requested), Reference(layers, "forward", requested));
  }
}

TEST(LayersJson, SeededRandomTalliesAsTheReference) {
  std::mt19937_64 rng(20261203);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const double values[] = {0, 1, 3, 7.5, -2, 1e16, 0.1, std::numeric_limits<double>::quiet_NaN()};
  for (int round = 0; round < 300; ++round) {
    std::vector<LayerTally> layers(1 + pick(6));
    for (size_t i = 0; i < layers.size(); ++i) {
      LayerTally& l = layers[i];
      l.path = i == 0 ? "" : "m" + std::to_string(pick(4)) + (pick(5) == 0 ? "\t" : "");
      l.call_index = pick(3);
      l.parent = i == 0 ? -1 : pick(static_cast<int>(i));
      l.depth = pick(4);
      l.failed = pick(8) == 0;
      l.thread = pick(3);
      l.request = pick(3) == 0 ? "r" + std::to_string(pick(9)) : "";
      for (int m = 0; m < 4; ++m) {
        l.known[m] = pick(6) == 0 ? Count::FromWide(static_cast<Count::Wide>(rng()) << pick(64)) : Count(pick(1000));
        if (pick(10) == 0) l.known[m] += Count::Max();
        l.complete[m] = pick(4) != 0;
        if (m > 0 && pick(6) == 0) {
          l.custom[m] = pick(2) ? LayerTally::Custom::kSubtree : LayerTally::Custom::kModuleCall;
          l.custom_method[m] = "custom_module_handler:h" + std::to_string(m);
          l.custom_unavailable[m] = pick(3) == 0;
        }
        if (m > 0 && i > 0 && pick(6) == 0) l.owner[m] = pick(static_cast<int>(i));
        l.opened[m] = m > 0 && l.custom[m] == LayerTally::Custom::kNone && pick(8) == 0;
      }
      l.field_state = static_cast<LayerTally::FieldState>(pick(4));
      l.field_reason = "why " + std::to_string(pick(3));
      for (int a = pick(4); a > 0; --a) {
        l.field_axes.push_back({pick(5), {values[pick(8)], values[pick(8)], values[pick(8)]}});
      }
      l.memory = pick(3) == 0;
      l.memory_status = static_cast<MetricStatus>(pick(3));
      l.peak_memory = pick(100000);
      l.allocated_bytes = pick(100000);
    }
    const std::array<bool, 4> requested = {pick(5) != 0, pick(5) != 0, pick(5) != 0, pick(5) != 0};
    ASSERT_EQ(Written(layers, "forward", requested), Reference(layers, "forward", requested)) << "round " << round;
    // Module analysis's rows: the same without the operator view.
    ASSERT_EQ(Written(layers, "forward", requested, false), Reference(layers, "forward", requested, false))
        << "round " << round;
  }
}

TEST(LayersJson, TheTreeIsTheTextParsedWithExactCounts) {
  LayerTally l = Conv("x");
  l.known[1] = Count::FromWide(Count::Wide{1} << 100);
  const json tree = LayersJson({l}, "forward");
  EXPECT_EQ(DumpJson(tree), Written({l}, "forward", {true, true, true, true}));
  EXPECT_TRUE(IsWideCount(tree[0]["metrics"]["module_flops"]["value"]));
}

TEST(LayersJson, ResolvedResultsFollowTheSameRules) {
  LayerTally l = Conv("x");
  l.known[2] += Count::Max();  // an inexact sum: partial, its last exact value
  l.failed = false;
  const LayerMetricResult macs = LayerMetricOf(l, 2, "forward", true);
  EXPECT_EQ(macs.status, MetricStatus::kPartial);
  EXPECT_TRUE(macs.known.exact());
  EXPECT_EQ(LayerMetricOf(l, 1, "forward", false).method, "not_requested");
  l.field_axes[1].values[0] = 5;  // receptive fields 3 and 5: no single value
  const LayerFieldResult rf = LayerFieldOf(l, 0);
  EXPECT_EQ(rf.status, MetricStatus::kUnavailable);
  EXPECT_TRUE(rf.axes);
  EXPECT_EQ(rf.reason, "the spatial axes differ: see axes");
  EXPECT_EQ(LayerFieldOf(l, 1).status, MetricStatus::kComplete);  // strides 1 and 1 agree
}

}  // namespace
}  // namespace torchscan::reports
