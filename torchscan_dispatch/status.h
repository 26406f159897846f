// Errors of TorchScan's public C++ API: Status and StatusOr<T>.
//
// The API's own types, header-only and built from the standard library, so
// a program links TorchScan whatever abseil (or none) it uses itself: no
// third-party type crosses the library boundary. The codes are the canonical
// error codes (the numbering gRPC and abseil share), so they print and
// compare the way such codes usually do.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace torchscan {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(code == StatusCode::kOk ? std::string() : std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // What went wrong and what to do instead; empty when ok().
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

// Thrown by StatusOr::value() when there is no value.
class BadStatusAccess : public std::runtime_error {
 public:
  explicit BadStatusAccess(Status status) : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// A value, or the Status saying why there is none.
template <class T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit, like a return value
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "torchscan: StatusOr made from an OK Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // The value; throws BadStatusAccess (with the error's message) when there is none.
  const T& value() const& { return Checked(), *value_; }
  T& value() & { return Checked(), *value_; }
  T&& value() && { return Checked(), std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void Checked() const {
    if (!value_) throw BadStatusAccess(status_);
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace torchscan
