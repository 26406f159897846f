// Spelling of value types in reports: the names Python users see.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace torchscan::reports {

// torch.float32 -> "float32" (the spelling of str(dtype) without "torch.").
std::string DtypeName(c10::ScalarType t);
// c10::DeviceType::CPU -> "cpu".
std::string DeviceName(c10::DeviceType d);

}  // namespace torchscan::reports
