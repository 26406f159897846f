#include "reports/flop_report.h"

#include "reports/version.h"

namespace torchscan::reports {

nlohmann::json FlopReportJson(const FlopTally& t) {
  nlohmann::json j;
  j["schema_version"] = kSchemaVersion;
  j["context"] = {{"torch_version", t.torch_version},
                  {"torchscan_version", kTorchscanVersion},
                  {"method", kOperatorMethod},
                  {"counting_convention", kOperatorConvention}};
  if (!t.native_convention.empty()) j["context"]["native_convention"] = t.native_convention;
  j["total"] = MetricJson(
      {t.complete ? MetricStatus::kComplete : MetricStatus::kPartial, t.known, "FLOPs", t.scope, kOperatorMethod});
  j["by_module"] = nlohmann::json::object();
  for (const auto& [label, ops] : t.by_module) {
    Count sum = 0;
    for (const auto& [op, v] : ops) sum += v;
    j["by_module"][label] = CountJson(sum);  // null past 2^128 - 1
  }
  j["by_operator"] = nlohmann::json::object();
  for (const auto& [op, v] : t.by_operator) j["by_operator"][op] = CountJson(v);
  j["ignored_operators"] = nlohmann::json::object();
  for (const auto& [op, ig] : t.ignored) {
    j["ignored_operators"][op] = {{"calls", ig.calls}, {"reason", ig.reason}};
  }
  j["diagnostics"] = nlohmann::json::array();
  for (const auto& d : t.diagnostics) j["diagnostics"].push_back(DiagnosticJson(d));
  return j;
}

}  // namespace torchscan::reports
