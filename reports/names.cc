#include "reports/names.h"

#include "absl/strings/ascii.h"

namespace torchscan::reports {

std::string DtypeName(c10::ScalarType t) {
  using S = c10::ScalarType;
  switch (t) {
    case S::Float:
      return "float32";
    case S::Double:
      return "float64";
    case S::Half:
      return "float16";
    case S::BFloat16:
      return "bfloat16";
    case S::Long:
      return "int64";
    case S::Int:
      return "int32";
    case S::Short:
      return "int16";
    case S::Char:
      return "int8";
    case S::Byte:
      return "uint8";
    case S::Bool:
      return "bool";
    case S::ComplexHalf:
      return "complex32";
    case S::ComplexFloat:
      return "complex64";
    case S::ComplexDouble:
      return "complex128";
    default:
      return absl::AsciiStrToLower(c10::toString(t));
  }
}

std::string DeviceName(c10::DeviceType d) { return c10::DeviceTypeName(d, /*lower_case=*/true); }

}  // namespace torchscan::reports
