// What a formula returns: one metric's value with an honest status.
#pragma once

#include <cstdint>
#include <string>

#include "formulas/count.h"

namespace torchscan {

enum class MetricStatus : uint8_t { kComplete, kPartial, kUnavailable };

const char* MetricStatusName(MetricStatus s);

struct FormulaResult {
  MetricStatus status = MetricStatus::kComplete;
  // Complete: the value; partial: the known lower bound. An inexact Count
  // (past 2^128 - 1, or negative) is refused where it is tallied.
  Count value = 0;
  // Stable diagnostic code and human detail when not complete.
  std::string code;
  std::string message;

  static FormulaResult Complete(Count v) { return {MetricStatus::kComplete, v, {}, {}}; }
  static FormulaResult Partial(Count known, std::string code, std::string msg) {
    return {MetricStatus::kPartial, known, std::move(code), std::move(msg)};
  }
  static FormulaResult Unavailable(std::string code, std::string msg) {
    return {MetricStatus::kUnavailable, 0, std::move(code), std::move(msg)};
  }
};

}  // namespace torchscan
