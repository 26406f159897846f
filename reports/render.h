// Text rendering of saved reports (AnalysisReport, FlopReport), without
// re-measuring anything.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace torchscan::reports {

// 1234567 -> "1.23M" (k, M, G, T; plain below 1000).
std::string HumanCount(int64_t n);
// A MetricResult as text: "1.23M", ">= 1.23M" when partial, "n/a" when unavailable.
std::string MetricText(const nlohmann::json& metric);

// max_depth < 0: every layer. receptive_field adds RF / stride / padding columns.
absl::StatusOr<std::string> RenderReport(const nlohmann::json& report, int max_depth = -1,
                                         bool receptive_field = false);

}  // namespace torchscan::reports
