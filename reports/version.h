#pragma once

namespace torchscan::reports {
inline constexpr char kTorchscanVersion[] = "0.1.0";
}  // namespace torchscan::reports
