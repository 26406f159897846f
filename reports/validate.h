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

// What the readers (RenderReport, CompareReports) call: ValidateReport, except
// that builder output holding counts past 2^64 - 1 (binary values from
// CountJson, which only DumpJson writes) is read back from its text into
// *storage first, as a parser would see it. *readable: the report to read.
absl::StatusOr<ReportKind> ValidateForReading(const nlohmann::json& report, const ReportSource& source,
                                              nlohmann::json* storage, const nlohmann::json** readable);

// The loader: parses JSON text and validates it. Parse errors name the line
// and column; never throws.
absl::StatusOr<nlohmann::json> LoadReport(std::string_view text, const ReportSource& source = {});

// Counts (FLOPs, MACs, parameters, call indices ...): any non-negative JSON
// integer. nlohmann keeps up to 2^64 - 1 exactly and parses larger integers
// as doubles, so an integral, non-negative double is a count too.
bool IsCount(const nlohmann::json& v);
// A count (or any number) as a double; 0 for anything else.
double NumberAsDouble(const nlohmann::json& v);
// after - before of two numbers: exact (an integer JSON value) when both are
// integers and the difference fits in 64 bits, else a double; null when the
// difference is not finite or either side is not a number.
nlohmann::json NumberDelta(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace torchscan::reports
