#include "reports/module_report.h"

#include "reports/version.h"

namespace torchscan::reports {

nlohmann::json ModuleReportJson(const ModuleTally& t) {
  nlohmann::json j;
  j["schema_version"] = kSchemaVersion;
  j["context"] = {{"torch_version", t.torch_version},
                  {"torchscan_version", kTorchscanVersion},
                  {"method", kModuleMethod},
                  {"counting_convention", kModuleConvention}};
  j["totals"] = nlohmann::json::object();
  for (int m = 0; m < 3; ++m) {
    j["totals"][kModuleMetricNames[m]] = MetricJson({t.complete[m] ? MetricStatus::kComplete : MetricStatus::kPartial,
                                                     t.known[m], kModuleMetricUnits[m], t.scope, kModuleMethod});
  }
  j["by_operator"] = nlohmann::json::object();
  for (const auto& [op, v] : t.by_operator) {
    j["by_operator"][op] = {{kModuleMetricNames[0], CountJson(v[0])},
                            {kModuleMetricNames[1], CountJson(v[1])},
                            {kModuleMetricNames[2], CountJson(v[2])}};
  }
  j["diagnostics"] = nlohmann::json::array();
  for (const auto& d : t.diagnostics) j["diagnostics"].push_back(DiagnosticJson(d));
  return j;
}

}  // namespace torchscan::reports
