// MetricResult and Diagnostic: the two building blocks of every report
// (reference: report schema, "MetricResult" and "Diagnostic").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "formulas/result.h"

namespace torchscan::reports {

inline constexpr int kSchemaVersion = 1;

struct Metric {
  MetricStatus status = MetricStatus::kComplete;
  // Ignored when unavailable. An inexact count (a sum that passed 2^128 - 1)
  // makes a complete metric partial, its last exact value the known lower bound.
  Count known = 0;
  std::string unit;
  std::string scope;
  std::string method;
};

// {"status", "value", "known_value", "unit", "scope", "method"}: value is
// null unless complete; known_value is null when unavailable.
nlohmann::json MetricJson(const Metric& m);

// Counts in JSON. nlohmann holds integers up to 2^64 - 1; a larger count is
// held as a marked binary value that DumpJson writes as its exact decimal
// digits, a JSON number (Python's json reads it exactly). An inexact count
// is null. Every report writes its counts through CountJson and its text
// through DumpJson.
nlohmann::json CountJson(const Count& c);
// j.dump(indent), except that counts past 2^64 - 1 are written exactly;
// invalid UTF-8 in strings (caller bytes: thread names, request ids) is
// replaced, never fatal.
std::string DumpJson(const nlohmann::json& j, int indent = -1);
// Readers (diff, render) read such numbers back exactly: LoadReport /
// ParseReportJson (reports/validate.h) parse integers past 2^64 - 1 into the
// same binary values, and ExactCount / NumberDelta compute with them.
//
// A negative difference of wide counts (a diff's delta) is a second marked
// binary value, its magnitude; DumpJson writes it as "-" and the digits.
nlohmann::json SignedCountJson(bool negative, Count::Wide magnitude);
// Whether `j` is one of the marked binary values above; *negative (when
// given) says which, *magnitude its value.
bool IsWideCount(const nlohmann::json& j, bool* negative = nullptr, Count::Wide* magnitude = nullptr);

struct Diagnostic {
  std::string code;
  std::string severity;  // "warning" or "error"
  std::string metric;
  std::string message;
  std::optional<std::string> op;    // "operator" in JSON
  std::optional<std::string> path;  // module path, when one applies
  std::optional<int64_t> calls;
};

nlohmann::json DiagnosticJson(const Diagnostic& d);

}  // namespace torchscan::reports
