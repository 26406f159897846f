// Schema check of saved reports before anything reads them (reference:
// report schema, "AnalysisReport", "MetricResult", "Diagnostic", "Layer calls",
// "FlopReport"). Every reader (render, diff, the loader) calls ValidateReport
// first, so a reader only ever sees the shapes checked here and a malformed
// report is an error naming the JSON path of the bad field, e.g.
// "before report (a.json): layers[3].metrics.module_flops: missing".
//
// Additive fields the schema allows (token_dependencies, metric_ownership,
// extra context entries, ...) pass; the fields the readers use, and every
// field the schema defines, are checked for presence and type.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace torchscan::reports {

// Where a report came from, for messages; both parts optional.
struct ReportSource {
  std::string file;  // the file it was read from
  std::string side;  // "before" / "after" in a diff
};

enum class ReportKind { kAnalysis, kFlop };

// "AnalysisReport" / "FlopReport".
const char* ReportKindName(ReportKind kind);

// Reports nest only a few levels (input metadata of nested tuples adds two per
// level); deeper input is refused before any reader recurses into it.
inline constexpr int kMaxReportDepth = 200;

// The kind of a schema-valid report, or InvalidArgument with
// "<source>: <json path>: <problem>" (the source part only when known).
absl::StatusOr<ReportKind> ValidateReport(const nlohmann::json& report, const ReportSource& source = {});

// What the readers (RenderReport, CompareReports) call: ValidateReport.
// Builder output holding counts past 2^64 - 1 (CountJson's binary values)
// is read as it is, exactly; *readable: the report to read (`report`).
absl::StatusOr<ReportKind> ValidateForReading(const nlohmann::json& report, const ReportSource& source,
                                              nlohmann::json* storage, const nlohmann::json** readable);

// JSON text as the readers read it: integers from 2^64 to 2^128 - 1 are held
// exactly (the marked binary values of CountJson, reports/metric.h); larger
// ones stay doubles, which no count check accepts. Refused, with a message
// naming the place: a key that appears twice in one object (JSON leaves its
// meaning open; the readers never pick one silently), nesting deeper than
// kMaxReportDepth, and invalid JSON (line and column). Never throws.
absl::StatusOr<nlohmann::json> ParseReportJson(std::string_view text, const ReportSource& source = {});

// The loader: ParseReportJson, then ValidateReport.
absl::StatusOr<nlohmann::json> LoadReport(std::string_view text, const ReportSource& source = {});

// Counts (FLOPs, MACs, parameters, ...) are exact, non-negative integers up
// to 2^128 - 1: JSON integers (past 2^64 - 1 the marked binary values), or
// an integral float below 2^53 (where a float is still exact).
bool IsCount(const nlohmann::json& v);
// The exact value of a count; nullopt for anything IsCount refuses.
std::optional<unsigned __int128> ExactCount(const nlohmann::json& v);
// A count (or any number) as a double; 0 for anything else.
double NumberAsDouble(const nlohmann::json& v);
// after - before of two numbers: exact when both are integers (counts to
// 2^128 - 1, or signed 64-bit values); a double when either is a float;
// null when the difference is not finite or either side is not a number.
nlohmann::json NumberDelta(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace torchscan::reports
