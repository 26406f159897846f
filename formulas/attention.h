// Operator-view FLOPs of fused scaled-dot-product attention kernels, native
// convention: the two (forward) or five (backward) batched matrix products;
// softmax, scaling, masks and dropout are not part of this convention.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::attention {

// q (b, hq, sq, d), k (b, hkv, sk, d), v (b, hkv, sk, dv); hq a multiple of
// hkv (grouped-query attention broadcasts K/V heads to hq):
//   scores = q @ k^T : b*hq products (sq x d)(d x sk)  -> 2*b*hq*sq*sk*d
//   out = scores @ v : b*hq products (sq x sk)(sk x dv) -> 2*b*hq*sq*sk*dv
// Returns -1 when the shapes are inconsistent.
int64_t SdpaForwardFlops(absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                         absl::Span<const int64_t> v);
// Backward recomputes scores and runs four more products (grad of scores,
// of V, of Q, of K): 2*b*hq*(sq*sk*d + sq*dv*sk + sk*sq*dv + sq*sk*d + d*sq*sk).
int64_t SdpaBackwardFlops(absl::Span<const int64_t> grad_out, absl::Span<const int64_t> q,
                          absl::Span<const int64_t> k, absl::Span<const int64_t> v);

// Kernels taking (query, key, value, ...) in (b, h, s, d) layout.
FormulaResult SdpaForward(const OpCall& call);
// Kernels taking (grad_out, query, key, value, ...).
FormulaResult SdpaBackward(const OpCall& call);
// aten::_flash_attention_forward / _efficient_attention_forward and their
// backwards: dense inputs only (varlen offsets need tensor values).
FormulaResult FlashForward(const OpCall& call);
FormulaResult EfficientForward(const OpCall& call);
FormulaResult FlashBackward(const OpCall& call);
FormulaResult EfficientBackward(const OpCall& call);

}  // namespace torchscan::attention
