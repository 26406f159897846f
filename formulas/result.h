// What a formula returns: one metric's value with an honest status.
#pragma once

#include <cstdint>
#include <string>

namespace torchscan {

enum class MetricStatus : uint8_t { kComplete, kPartial, kUnavailable };

const char* MetricStatusName(MetricStatus s);

struct FormulaResult {
  MetricStatus status = MetricStatus::kComplete;
  int64_t value = 0;  // complete: the value; partial: the known lower bound
  // Stable diagnostic code and human detail when not complete.
  std::string code;
  std::string message;

  static FormulaResult Complete(int64_t v) { return {MetricStatus::kComplete, v, {}, {}}; }
  static FormulaResult Partial(int64_t known, std::string code, std::string msg) {
    return {MetricStatus::kPartial, known, std::move(code), std::move(msg)};
  }
  static FormulaResult Unavailable(std::string code, std::string msg) {
    return {MetricStatus::kUnavailable, 0, std::move(code), std::move(msg)};
  }
};

}  // namespace torchscan
