// Count: a non-negative count (FLOPs, MACs, accesses) exact up to 2^128 - 1.
//
// Sizes are int64_t; products and sums of them are not: a 2^21 x 2^21 matrix
// product is 2 * 2^63 = 2^64 FLOPs, and a large model x long contexts x many
// steps passes 2^63 in a total. Every operation here is checked. One whose
// result cannot be represented (past 2^128 - 1, below zero, a negative
// operand, a division by zero) never wraps: the count becomes inexact, keeps
// the last exact value it held (for a running sum, what was summed before:
// a lower bound) and stays inexact through every later operation.
//
// Write formulas so the first multiplication is already wide:
// `Count(2) * m * n * k`, never `2 * m * n * k` (that is int64_t arithmetic).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>

namespace torchscan {

class Count {
 public:
  using Wide = unsigned __int128;
  enum class State : uint8_t {
    kExact,
    kOverflow,  // past 2^128 - 1, or a division by zero
    kNegative,  // built from a negative number, or a subtraction below zero
  };

  constexpr Count() = default;
  // Implicit: sizes, numels and constants are counts (a negative one is not).
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  constexpr Count(T v) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_signed_v<T>) {
      if (v < 0) {
        state_ = State::kNegative;
        return;
      }
    }
    value_ = static_cast<Wide>(v);
  }
  static constexpr Count FromWide(Wide v) {
    Count c;
    c.value_ = v;
    return c;
  }
  static constexpr Count Max() { return FromWide(~Wide{0}); }

  constexpr bool exact() const { return state_ == State::kExact; }
  constexpr State state() const { return state_; }
  // The exact value; once inexact, the last exact value (a lower bound of a sum).
  constexpr Wide wide() const { return value_; }
  // The value when exact and at most 2^64 - 1.
  std::optional<uint64_t> ToUint64() const {
    if (!exact() || value_ > UINT64_MAX) return std::nullopt;
    return static_cast<uint64_t>(value_);
  }
  // Decimal digits of wide() (every digit, however large).
  std::string Digits() const;

  Count& operator+=(const Count& o) {
    if (Propagate(o)) return *this;
    Wide r;
    if (__builtin_add_overflow(value_, o.value_, &r)) return Fail(State::kOverflow);
    value_ = r;
    return *this;
  }
  Count& operator-=(const Count& o) {
    if (Propagate(o)) return *this;
    if (o.value_ > value_) return Fail(State::kNegative);
    value_ -= o.value_;
    return *this;
  }
  Count& operator*=(const Count& o) {
    if (Propagate(o)) return *this;
    Wide r;
    if (__builtin_mul_overflow(value_, o.value_, &r)) return Fail(State::kOverflow);
    value_ = r;
    return *this;
  }
  // Integer division (floor).
  Count& operator/=(const Count& o) {
    if (Propagate(o)) return *this;
    if (o.value_ == 0) return Fail(State::kOverflow);
    value_ /= o.value_;
    return *this;
  }

  friend Count operator+(Count a, const Count& b) { return a += b; }
  friend Count operator-(Count a, const Count& b) { return a -= b; }
  friend Count operator*(Count a, const Count& b) { return a *= b; }
  friend Count operator/(Count a, const Count& b) { return a /= b; }
  friend constexpr bool operator==(const Count& a, const Count& b) {
    return a.state_ == b.state_ && a.value_ == b.value_;
  }
  // Orders by value (an inexact count by its last exact value).
  friend constexpr std::strong_ordering operator<=>(const Count& a, const Count& b) {
    return a.value_ < b.value_   ? std::strong_ordering::less
           : a.value_ > b.value_ ? std::strong_ordering::greater
                                 : std::strong_ordering::equal;
  }
  friend std::ostream& operator<<(std::ostream& os, const Count& c) {
    os << c.Digits();
    if (c.state_ == State::kOverflow) os << " (overflowed)";
    if (c.state_ == State::kNegative) os << " (went negative)";
    return os;
  }

 private:
  // True when the result is already decided: this or `o` is inexact.
  bool Propagate(const Count& o) {
    if (!exact()) return true;
    if (!o.exact()) {
      state_ = o.state_;
      return true;
    }
    return false;
  }
  Count& Fail(State s) {
    state_ = s;
    return *this;
  }

  Wide value_ = 0;
  State state_ = State::kExact;
};

// "0", "18446744073709551616", ... up to 2^128 - 1; nullopt for anything else
// (signs, spaces, other characters, empty, or too large).
std::optional<Count> ParseCount(std::string_view digits);

}  // namespace torchscan
