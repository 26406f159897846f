// Turns boxed operator arguments into value-free metadata (formulas/op_call.h).
// Never keeps a tensor: sizes, strides, dtype, device and scalars are copied
// into the scan's arena.
#pragma once

#include <ATen/core/ivalue.h>

#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "torchscan_dispatch/arena.h"

namespace torchscan {

// Copies the metadata of `values` into `arena`; returns a span in it.
absl::Span<const ArgMeta> RecordValues(Arena& arena, absl::Span<const c10::IValue> values);

}  // namespace torchscan
