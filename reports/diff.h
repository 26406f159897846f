// ReportDiff (reference: report schema, "ReportDiff"): compares two saved
// reports of the same kind and schema version.
//
// Two AnalysisReports: {"schema_version", "totals": {metric: diff},
// "layers": {"added", "removed", "changed"}}, layer calls matched by full
// path plus call index.
// Two FlopReports: {"schema_version", "totals": {"operator_flops": diff of
// total}, "by_operator": {operator: diff}}, listing the operators whose known
// FLOPs or status differ. An operator absent from one side's by_operator did
// no counted work there: known 0, with that side's total status.
//
// Each diff is {"status", "delta", "before", "after"}: a numeric delta only
// when both sides are complete; partial, unavailable or missing metrics give
// a null delta and keep the incomplete status.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "reports/validate.h"

namespace torchscan::reports {

// Both reports are validated first (ValidateReport; messages say "before" or
// "after" and the file, when given); reports of different kinds are refused.
absl::StatusOr<nlohmann::json> CompareReports(const nlohmann::json& before, const nlohmann::json& after,
                                              const ReportSource& before_source = {"", "before"},
                                              const ReportSource& after_source = {"", "after"});

}  // namespace torchscan::reports
