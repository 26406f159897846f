#include "reports/metric.h"

namespace torchscan {

namespace reports {

nlohmann::json MetricJson(const Metric& m) {
  nlohmann::json j;
  j["status"] = MetricStatusName(m.status);
  j["value"] = m.status == MetricStatus::kComplete ? nlohmann::json(m.known) : nlohmann::json();
  j["known_value"] = m.status == MetricStatus::kUnavailable ? nlohmann::json() : nlohmann::json(m.known);
  j["unit"] = m.unit;
  j["scope"] = m.scope;
  j["method"] = m.method;
  return j;
}

nlohmann::json DiagnosticJson(const Diagnostic& d) {
  nlohmann::json j = {{"code", d.code}, {"severity", d.severity}, {"metric", d.metric},
                      {"message", d.message}};
  if (d.op) j["operator"] = *d.op;
  if (d.path) j["path"] = *d.path;
  if (d.calls) j["calls"] = *d.calls;
  return j;
}

}  // namespace reports
}  // namespace torchscan
