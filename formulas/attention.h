// Operator-view FLOPs of fused scaled-dot-product attention kernels, native
// convention: the two (forward) or five (backward) batched matrix products;
// softmax, scaling, masks and dropout are not part of this convention.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::attention {

// q (b, hq, sq, d), k (b, hkv, sk, d), v (b, hkv, sk, dv); hq a multiple of
// hkv (grouped-query attention broadcasts K/V heads to hq):
//   scores = q @ k^T : b*hq products (sq x d)(d x sk)  -> 2*b*hq*sq*sk*d
//   out = scores @ v : b*hq products (sq x sk)(sk x dv) -> 2*b*hq*sq*sk*dv
// nullopt when the shapes are inconsistent.
std::optional<Count> SdpaForwardFlops(absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                                      absl::Span<const int64_t> v);
// Backward recomputes scores and runs four more products (grad of scores,
// of V, of Q, of K): 2*b*hq*(sq*sk*d + sq*dv*sk + sk*sq*dv + sq*sk*d + d*sq*sk).
std::optional<Count> SdpaBackwardFlops(absl::Span<const int64_t> grad_out, absl::Span<const int64_t> q,
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

// TorchScan fallbacks for PyTorch's fused fast paths (torchscan_flops_v1
// "Native fused MHA", "Native fused encoder"), dense batched inputs only.
//
// _native_multi_head_attention(query, key, value, embed_dim, num_head,
//   qkv_weight, qkv_bias, proj_weight, proj_bias, mask, need_weights,
//   average_attn_weights, mask_type), B batch, L queries, S keys, E width,
//   H heads, scores N = B*H*L*S, rows R = B*H*L:
//   projections Q, K, V, out: 2*B*L*E*E + 2 * 2*B*S*E*E + 2*B*L*E*E (2K each, bias omitted)
//   Q scaling B*L*E; products 2 * 2*B*H*L*S*(E/H); stable softmax 5N - 2R;
//   a mask one op per score (N); head averaging (need_weights and
//   average_attn_weights) sums H values and divides: N.
FormulaResult NativeMultiHeadAttention(const OpCall& call);
// _transform_bias_rescale_qkv(qkv (B, L, 3E), qkv_bias (3E), num_heads): adds
// the bias to every value (3BLE) and scales the queries (BLE) -> 4BLE.
FormulaResult TransformBiasRescaleQkv(const OpCall& call);
// _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight,
//   qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1,
//   norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
//   ffn_weight_2, ffn_bias_2, mask, mask_type): self-attention as above
//   (no returned weights) + two feed-forward projections 2*B*L*E*F each, ReLU
//   (1 per hidden value) or exact GELU (5), two affine LayerNorms
//   (6n + 2r + 2n each, n = B*L*E, r = B*L) and two residual additions (n each).
FormulaResult TransformerEncoderLayer(const OpCall& call);

// Operator view of the CPU SDPA kernel, which has no native formula, so the
// table's "CPU SDPA fallback" row applies (complete, not matrix core only):
// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p,
//   is_causal, *, attn_mask, scale), same limits as SdpaCpuCosts. A = scores
//   B*Hq*L*S, R = rows B*Hq*L:
//   two products in the native convention 2*A*d + 2*R*S*dv, score scale A,
//   one op per score per mask (causal, explicit), stable softmax 5A - 2R.
FormulaResult SdpaCpu(const OpCall& call);

// torchscan_training_v1 row of the CPU SDPA backward (derivation next to the
// definition):
// _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key,
//   value, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale), same
// limits as SdpaCpu (no dropout). A = scores B*Hq*L*S, R = rows B*Hq*L:
//   the five native products (SdpaBackwardFlops) 2A(3d + 2dv)
//   + scale 2A (recomputed scores, and the gradient through the scale)
//   + A per mask (causal, explicit) + softmax from logsumexp 2A
//   + rowsum(grad_out * out) R(2dv - 1) + softmax backward 2A.
// Without masks that is the products + 6A + R(2dv - 1).
FormulaResult SdpaCpuBackward(const OpCall& call);

// Module view of the CPU SDPA kernel (torchscan_flops_v1 "CPU SDPA fallback"):
// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p,
//   is_causal, *, attn_mask, scale), dense 4-D, matching batches, query heads
// a multiple of KV heads (GQA counts query heads), no dropout. A = scores
// B*Hq*L*S, R = rows B*Hq*L:
//   FLOPs: scores A(2d - 1) + score scale A + A per mask (causal or explicit)
//          + softmax 5A - 2R + weighted values B*Hq*L*dv(2S - 1)
//   MACs:  A*d + A*dv
//   DMAs:  scores Q + K + A, scale 2A, each mask (its elements) + 2A,
//          softmax 8A + 4R, weighted values A + V + output.
ModuleCosts SdpaCpuCosts(const OpCall& call);

// Module view of the fused MHA (TorchScan's MultiheadAttention conventions),
// B batch, T queries, S keys, E width, H heads, D = E/H, A = B*H*T*S, R = B*H*T:
//   FLOPs: projections B*T*E(2E-1+b) + 2*B*S*E(2E-1+b), query scale B*T*E,
//          scores A(2D-1), A per mask, softmax R(5S-2), values B*H*T*D(2S-1),
//          output projection B*T*E(2E-1) + b*B*T*E, averaged weights A
//   MACs:  E(Nq + Nk + Nv) + 2*B*T*S*E + B*T*E^2
//   DMAs:  inputs + parameters + 7Q + 4J + 10A + 4R (Q = B*T*E, J = B*S*E),
//          each mask its elements + 2A, averaged weights A + B*T*S
ModuleCosts NativeMultiHeadAttentionCosts(const OpCall& call);
// Module view of the fused encoder layer: self-attention (no weights) plus two
// residual additions (N each; 3N accesses each), two affine LayerNorms, and the
// feed-forward block (two linears, ReLU or exact GELU): FF accesses 2N + 4U +
// its parameters, U = rows x F.
ModuleCosts TransformerEncoderLayerCosts(const OpCall& call);
// Module view of the CPU SDPA backward row: the operator view's count with
// the five products in the module convention (2K - 1 per output: the
// products' outputs 2A + Hq*B*S*(dv + d) + R*d come off), MACs = the
// products' multiply-adds A(3d + 2dv), DMAs = every operand read once and
// every gradient written once (torchscan_training_v1's module-view rule).
ModuleCosts SdpaCpuBackwardCosts(const OpCall& call);

}  // namespace torchscan::attention
