#pragma once

namespace torchscan::reports {
inline constexpr char kTorchscanVersion[] = "0.3.0";
}  // namespace torchscan::reports
