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
  int64_t known = 0;  // ignored when unavailable
  std::string unit;
  std::string scope;
  std::string method;
};

// {"status", "value", "known_value", "unit", "scope", "method"}: value is
// null unless complete; known_value is null when unavailable.
nlohmann::json MetricJson(const Metric& m);

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
