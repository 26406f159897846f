#include "reports/report_text.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace torchscan::reports::internal {

using json = nlohmann::json;

std::string Quote(std::string_view s, size_t max_bytes) {
  const bool cut = s.size() > max_bytes;
  std::string text(s.substr(0, max_bytes));
  // Drop a partial UTF-8 sequence at the cut (the replacement handler would
  // turn it into U+FFFD, which is fine, but a clean cut reads better).
  if (cut) {
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
    if (!text.empty() && (static_cast<unsigned char>(text.back()) & 0x80)) text.pop_back();
  }
  return json(text).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace) + (cut ? "..." : "");
}

std::string Where(const ReportSource& source) {
  if (source.side.empty()) return source.file.empty() ? "" : absl::StrCat(source.file, ": ");
  return source.file.empty() ? absl::StrCat(source.side, " report: ")
                             : absl::StrCat(source.side, " report (", source.file, "): ");
}

bool Identifier(std::string_view k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  for (char c : k) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace torchscan::reports::internal
