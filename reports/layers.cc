#include "reports/layers.h"

namespace torchscan::reports {

nlohmann::json LayersJson(const std::vector<LayerTally>& layers, const std::string& scope) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerTally& l : layers) {
    nlohmann::json metrics = nlohmann::json::object();
    for (int m = 0; m < 4; ++m) {
      const MetricStatus status = l.failed        ? MetricStatus::kUnavailable
                                  : l.complete[m] ? MetricStatus::kComplete
                                                  : MetricStatus::kPartial;
      metrics[kLayerMetricNames[m]] =
          MetricJson({status, l.known[m], kLayerMetricUnits[m], scope, kLayerMetricMethods[m]});
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
