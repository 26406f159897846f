// Small helpers shared by the formula families: reading shapes off an OpCall.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan {

// A view of sizes (OpCall's views are c10::ArrayRef, the public API's type)
// whose subspan/first clamp to the view instead of throwing as
// ArrayRef::slice does: formulas never throw on odd metadata.
inline absl::Span<const int64_t> Dims(c10::ArrayRef<int64_t> s) { return {s.data(), s.size()}; }

// Wide: a subset of a tensor's sizes (or a list argument) need not fit int64_t.
inline Count Product(absl::Span<const int64_t> xs) {
  Count p = 1;
  for (int64_t x : xs) p *= x;
  return p;
}

// Shape of argument `i` when it is a defined, rectangular tensor of rank
// `rank` (any rank when rank < 0); nullptr otherwise.
inline const TensorMeta* TensorArg(const OpCall& call, size_t i, int rank = -1) {
  const ArgMeta& a = call.arg(i);
  if (!a.is_tensor() || a.tensor().nested) return nullptr;
  if (rank >= 0 && a.tensor().dim() != rank) return nullptr;
  return &a.tensor();
}

inline FormulaResult ShapeMismatch(const OpCall& call, const char* what) {
  return FormulaResult::Unavailable("unsupported_operator_formula", std::string(call.name) + ": " + what);
}

}  // namespace torchscan
