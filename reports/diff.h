// ReportDiff (reference: report schema, "ReportDiff"): compares two saved
// AnalysisReports of the same schema version, layer calls matched by full
// path plus call index.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace torchscan::reports {

// Numeric deltas only when both sides are complete; partial, unavailable or
// missing metrics give a null delta and keep the incomplete status.
// Rejects unknown or mismatched schema versions.
absl::StatusOr<nlohmann::json> CompareReports(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace torchscan::reports
