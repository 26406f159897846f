#include "formulas/count.h"

#include <algorithm>

namespace torchscan {

std::string Count::Digits() const {
  if (value_ == 0) return "0";
  std::string out;
  for (Wide v = value_; v != 0; v /= 10) out.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<Count> ParseCount(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  Count c = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return std::nullopt;
    c = c * 10 + (ch - '0');
  }
  if (!c.exact()) return std::nullopt;
  return c;
}

}  // namespace torchscan
