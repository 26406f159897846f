#include "reports/scan_report.h"

#include <stdexcept>

#include "reports/metric.h"
#include "reports/names.h"
#include "reports/version.h"

namespace torchscan::reports {

namespace {

// Stands for the layers in the document until its text is written. It is
// found as the value of the top-level key "layers" (the quotes around a key
// are never escaped; those inside caller strings are), so a thread name or
// request id that equals it is left alone.
constexpr char kLayersPlaceholder[] = "\x01torchscan layers\x01";

}  // namespace

nlohmann::json RequestJson(const std::string& id, int64_t calls, const LayerTally& row, const ScanReportParts& parts) {
  nlohmann::json totals = nlohmann::json::object();
  for (int m = 0; m < 4; ++m) {
    if (!parts.metrics[m]) continue;
    totals[kLayerMetricNames[m]] =
        MetricJson({row.complete[m] ? MetricStatus::kComplete : MetricStatus::kPartial, row.known[m],
                    kLayerMetricUnits[m], parts.scope, kLayerMetricMethods[m]});
  }
  return nlohmann::json{{"request", id}, {"calls", calls}, {"totals", totals}};
}

std::string ScanReportText(const ScanReportParts& parts) {
  nlohmann::json j;
  j["kind"] = "torchscan_scan_report";
  j["schema_version"] = kSchemaVersion;
  j["context"] = parts.context;
  j["context"]["torchscan_version"] = kTorchscanVersion;
  j["communication"] = parts.communication;
  j["operator_flops"] = parts.operator_flops;
  if (!parts.memory.is_null()) j["memory"] = parts.memory;
  j["module_report"] = parts.module_report;
  j["threads"] = parts.threads;
  j["requests"] = parts.requests;
  if (!parts.aggregate.is_null()) j["aggregate"] = parts.aggregate;
  j["layers"] = kLayersPlaceholder;
  const std::string text = DumpJson(j);
  const std::string key = "\"layers\":";
  const std::string placeholder = key + nlohmann::json(kLayersPlaceholder).dump();
  const size_t at = text.find(placeholder);
  if (at == std::string::npos) throw std::logic_error("torchscan: the scan report lost its layers");
  std::string out = text.substr(0, at + key.size());
  AppendLayersJson(parts.layers, parts.scope, parts.metrics, out);
  out.append(text, at + placeholder.size());
  return out;
}

}  // namespace torchscan::reports
