// Stand-in for an abseil other than the one libtorchscan.so was built with
// (Debian's, in namespace absl::debian3): a different namespace layout and a
// different Status. It is first on the consumers' include path, so a
// TorchScan header that included abseil would get this one and fail to build,
// and it is defined in the consumer itself (other_abseil.cc), so a TorchScan
// library that exported or imported plain absl:: symbols would bind to it.
#pragma once

#include <string>

namespace absl {

class Status {
 public:
  Status() = default;
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool ok() const { return !failed_; }
  std::string ToString() const;  // other_abseil.cc

 private:
  int padding_[7] = {};  // not Debian's layout
  bool failed_ = false;
  std::string message_;
};

}  // namespace absl
