#include "absl/status/status.h"

namespace absl {
std::string Status::ToString() const { return ok() ? "other-abseil OK" : "other-abseil: " + message_; }
}  // namespace absl
