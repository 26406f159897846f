// Value-free metadata of one executed operator call: what every formula reads.
//
// The recorder (torchscan_dispatch/) fills these from the boxed stack; tests
// build them by hand. Nothing here refers to a tensor: sizes, strides, dtype,
// device and scalar values only. All spans point into storage owned by the
// recorder's arena (or by the test), which outlives the formula call.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

namespace torchscan {

struct TensorMeta {
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DeviceType device = c10::DeviceType::CPU;
  bool nested = false;  // ragged nested tensor: sizes are not rectangular
  absl::Span<const int64_t> sizes;
  absl::Span<const int64_t> strides;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t size(int64_t d) const { return sizes[d < 0 ? d + dim() : d]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

enum class ArgKind : uint8_t {
  kNone,        // None / undefined optional
  kTensor,
  kInt,         // also SymInt with a concrete value
  kDouble,
  kBool,
  kIntList,     // int[] / SymInt[]
  kBoolList,    // bool[] (stored as 0/1 in ints)
  kDoubleList,  // float[]
  kTensorList,  // Tensor[] / Tensor?[] (undefined entries stay undefined)
  kString,
  kOther,       // Layout, Device, Generator, ScalarType-as-int, objects ...
};

struct ArgMeta {
  ArgKind kind = ArgKind::kNone;
  int64_t i = 0;  // kInt, kBool
  double d = 0;   // kDouble
  TensorMeta tensor;                     // kTensor
  absl::Span<const int64_t> ints;        // kIntList, kBoolList
  absl::Span<const double> doubles;      // kDoubleList
  absl::Span<const TensorMeta> tensors;  // kTensorList
  std::string_view str;                  // kString

  bool is_none() const { return kind == ArgKind::kNone; }
  bool is_tensor() const { return kind == ArgKind::kTensor && tensor.defined; }
};

// One call: the operator's identity, its arguments in schema order
// (keyword-only ones included) and its returns.
struct OpCall {
  std::string_view name;      // "aten::mm"
  std::string_view overload;  // "" or "out"
  absl::Span<const ArgMeta> args;
  absl::Span<const ArgMeta> outputs;

  // Argument i, or a None argument when the call has fewer.
  const ArgMeta& arg(size_t i) const {
    static const ArgMeta kNoneArg;
    return i < args.size() ? args[i] : kNoneArg;
  }
  const ArgMeta& output(size_t i) const {
    static const ArgMeta kNoneArg;
    return i < outputs.size() ? outputs[i] : kNoneArg;
  }
};

}  // namespace torchscan
