#include "formulas/result.h"

namespace torchscan {

const char* MetricStatusName(MetricStatus s) {
  switch (s) {
    case MetricStatus::kComplete:
      return "complete";
    case MetricStatus::kPartial:
      return "partial";
    case MetricStatus::kUnavailable:
      return "unavailable";
  }
  return "unavailable";
}

}  // namespace torchscan
