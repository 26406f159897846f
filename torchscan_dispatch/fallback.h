#pragma once

#include "absl/status/status.h"

namespace torchscan {

// Registers the boxed fallback on the mode key once per process. Fails, with
// a message saying so, when another library already holds a fallback there.
absl::Status EnsureFallbackInstalled();

}  // namespace torchscan
