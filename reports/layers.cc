#include "reports/layers.h"

namespace torchscan::reports {

nlohmann::json LayersJson(const std::vector<LayerTally>& layers, const std::string& scope,
                          const std::array<bool, 4>& requested) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerTally& l : layers) {
    nlohmann::json metrics = nlohmann::json::object();
    for (int m = 0; m < 4; ++m) {
      const MetricStatus status = l.failed        ? MetricStatus::kUnavailable
                                  : l.complete[m] ? MetricStatus::kComplete
                                                  : MetricStatus::kPartial;
      metrics[kLayerMetricNames[m]] =
          requested[m] ? MetricJson({status, l.known[m], kLayerMetricUnits[m], scope, kLayerMetricMethods[m]})
                  : MetricJson({MetricStatus::kUnavailable, 0, kLayerMetricUnits[m], scope, "not_requested"});
    }
    static const char* kFieldNames[3] = {"receptive_field", "effective_stride", "effective_padding"};
    for (int k = 0; k < 3; ++k) {
      nlohmann::json m = {{"unit", "positions"}, {"scope", scope}};
      if (l.failed || !l.field_known) {
        m.update({{"status", "unavailable"}, {"value", nullptr}, {"known_value", nullptr}, {"method", "data_flow"}});
      } else if (!l.field) {
        m.update({{"status", "unavailable"}, {"value", nullptr}, {"known_value", nullptr}, {"method", "not_applicable"}});
      } else {
        const double v = (*l.field)[k];
        const nlohmann::json value = v == static_cast<double>(static_cast<int64_t>(v)) ? nlohmann::json(static_cast<int64_t>(v)) : nlohmann::json(v);
        m.update({{"status", "complete"}, {"value", value}, {"known_value", value}, {"method", "data_flow"}});
      }
      metrics[kFieldNames[k]] = m;
    }
    out.push_back({{"path", l.path},
                   {"call_index", l.call_index},
                   {"parent", l.parent >= 0 ? nlohmann::json(l.parent) : nlohmann::json()},
                   {"depth", l.depth},
                   {"failed", l.failed},
                   {"metrics", metrics}});
  }
  return out;
}

}  // namespace torchscan::reports
