// Text the report readers share in their messages (validate.cc, read_report.cc).
// Internal to reports/.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reports/validate.h"

namespace torchscan::reports::internal {

// ASCII-only JSON text of a string, cut to `max_bytes` of the original (long
// keys and values come from corrupted files too).
std::string Quote(std::string_view s, size_t max_bytes = 40);

// "FILE: " / "before report (FILE): " ahead of a message ("" when unnamed).
std::string Where(const ReportSource& source);

// True when `k` can be written as .k in a JSON path (else ["k"]).
bool Identifier(std::string_view k);

}  // namespace torchscan::reports::internal
