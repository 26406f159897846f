#include "reports/layers.h"

#include <cmath>

namespace torchscan::reports {

namespace {

nlohmann::json Number(double v) {
  const bool whole = std::abs(v) < 9e15 && v == std::trunc(v);  // exact in both types
  return whole ? nlohmann::json(static_cast<int64_t>(v)) : nlohmann::json(v);
}

// One receptive-field metric (k: kFieldNames) of a layer. Every spatial axis
// is reported under the additive "axes" ([{"dim", "value"}], the output
// dimension and its value); the scalar value is complete only when all axes
// agree. Unavailable results say why under the additive "reason".
nlohmann::json FieldJson(const LayerTally& l, int k, const std::string& scope) {
  nlohmann::json m = {{"unit", "positions"}, {"scope", scope}, {"method", "data_flow"}};
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
  nlohmann::json axes = nlohmann::json::array();
  bool agree = true;
  for (const auto& a : l.field_axes) {
    axes.push_back({{"dim", a.dim}, {"value", Number(a.values[k])}});
    agree = agree && a.values[k] == l.field_axes[0].values[k];
  }
  m["axes"] = axes;
  if (!agree) return unavailable("data_flow", "the spatial axes differ: see axes");
  const nlohmann::json value = Number(l.field_axes[0].values[k]);
  m.update({{"status", "complete"}, {"value", value}, {"known_value", value}});
  return m;
}

}  // namespace

nlohmann::json MemoryMetricJson(MetricStatus status, int64_t bytes, const std::string& scope) {
  return MetricJson({status, Count(bytes), "bytes", scope, "allocator_reports"});
}

namespace {

nlohmann::json LayerJson(const std::vector<LayerTally>& layers, const LayerTally& l, const std::string& scope,
                         const std::array<bool, 4>& requested) {
  nlohmann::json row;
  {
    nlohmann::json metrics = nlohmann::json::object();
    nlohmann::json owners = nlohmann::json::object(), ownership = nlohmann::json::object();
    for (int m = 0; m < 4; ++m) {
      const MetricStatus status = l.failed        ? MetricStatus::kUnavailable
                                  : l.complete[m] ? MetricStatus::kComplete
                                                  : MetricStatus::kPartial;
      if (requested[m] && l.owner[m] >= 0) {  // covered by an ancestor's inclusive estimate: absent
        const LayerTally& o = layers[static_cast<size_t>(l.owner[m])];
        owners[kLayerMetricNames[m]] = {{"path", o.path}, {"call_index", o.call_index}};
        continue;
      }
      if (requested[m] && l.custom[m] != LayerTally::Custom::kNone) {
        const char* kind = l.custom[m] == LayerTally::Custom::kSubtree ? "subtree" : "module_call";
        ownership[kLayerMetricNames[m]] = kind;
        metrics[kLayerMetricNames[m]] = MetricJson({l.custom_unavailable[m] ? MetricStatus::kUnavailable
                                                    : l.complete[m]         ? MetricStatus::kComplete
                                                                            : MetricStatus::kPartial,
                                                    l.known[m], kLayerMetricUnits[m], kind, l.custom_method[m]});
        continue;
      }
      metrics[kLayerMetricNames[m]] =
          requested[m] ? MetricJson({status, l.known[m], kLayerMetricUnits[m], scope, kLayerMetricMethods[m]})
                       : MetricJson({MetricStatus::kUnavailable, 0, kLayerMetricUnits[m], scope, "not_requested"});
    }
    for (int k = 0; k < 3; ++k) metrics[kFieldNames[k]] = FieldJson(l, k, scope);
    if (l.memory) {
      metrics["peak_memory"] = MemoryMetricJson(l.memory_status, l.peak_memory, scope);
      metrics["allocated_bytes"] = MemoryMetricJson(l.memory_status, l.allocated_bytes, scope);
    }
    row = {{"path", l.path},
           {"call_index", l.call_index},
           {"parent", l.parent >= 0 ? nlohmann::json(l.parent) : nlohmann::json()},
           {"depth", l.depth},
           {"failed", l.failed},
           {"metrics", metrics}};
    if (l.thread > 0) row["thread"] = l.thread;
    if (!l.request.empty()) row["request"] = l.request;
    if (!owners.empty()) row["metric_owners"] = owners;
    if (!ownership.empty()) row["metric_ownership"] = ownership;
  }
  return row;
}

}  // namespace

nlohmann::json LayersJson(const std::vector<LayerTally>& layers, const std::string& scope,
                          const std::array<bool, 4>& requested) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerTally& l : layers) out.push_back(LayerJson(layers, l, scope, requested));
  return out;
}

void AppendLayersJson(const std::vector<LayerTally>& layers, const std::string& scope,
                      const std::array<bool, 4>& requested, std::string& out) {
  out += '[';
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i > 0) out += ',';
    out += DumpJson(LayerJson(layers, layers[i], scope, requested));
  }
  out += ']';
}

}  // namespace torchscan::reports
