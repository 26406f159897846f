// Text rendering of saved reports (AnalysisReport, FlopReport), without
// re-measuring anything. The report is validated first (reports/validate.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "reports/validate.h"

namespace torchscan::reports {

// 1234567 -> "1.23M" (k, M, G, T, P, E, Z, Y, R, Q; plain below 1000).
std::string HumanCount(int64_t n);
// The same for any finite number (counts past 2^63 arrive as uint64 or double).
std::string HumanNumber(double v);
// A MetricResult as text: "1.23M", ">= 1.23M" when partial, "n/a" when unavailable.
std::string MetricText(const nlohmann::json& metric);

// max_depth < 0: every layer. receptive_field adds RF / stride / padding columns.
// A report that is not a schema-valid AnalysisReport or FlopReport is an
// InvalidArgument error naming the field (and the source, when given).
absl::StatusOr<std::string> RenderReport(const nlohmann::json& report, int max_depth = -1, bool receptive_field = false,
                                         const ReportSource& source = {});

}  // namespace torchscan::reports
