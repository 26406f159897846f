#include "formulas/attention.h"

#include <array>
#include <optional>
#include <utility>

#include "formulas/arithmetic.h"
#include "formulas/matmul.h"
#include "formulas/shapes.h"

namespace torchscan::attention {
namespace {

bool Consistent(absl::Span<const int64_t> q, absl::Span<const int64_t> k, absl::Span<const int64_t> v) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return false;
  const bool same = q[0] == k[0] && k[0] == v[0] && k[1] == v[1] && q[3] == k[3] && k[2] == v[2];
  return same && k[1] > 0 && q[1] >= k[1] && q[1] % k[1] == 0;
}

// torchscan_flops_v1 "Native fused attention: matrix core only; ancillary
// gaps keep counts partial": the products are known, the kernel's scaling,
// softmax and masking are not in this convention.
FormulaResult FromShapes(const OpCall& call, size_t first_qkv, const TensorMeta* grad_out) {
  const TensorMeta* q = TensorArg(call, first_qkv, 4);
  const TensorMeta* k = TensorArg(call, first_qkv + 1, 4);
  const TensorMeta* v = TensorArg(call, first_qkv + 2, 4);
  if (!q || !k || !v) return ShapeMismatch(call, "expected dense 4-D query, key and value");
  const std::optional<Count> flops = grad_out ? SdpaBackwardFlops(grad_out->sizes(), q->sizes(), k->sizes(), v->sizes())
                                              : SdpaForwardFlops(q->sizes(), k->sizes(), v->sizes());
  if (!flops) return ShapeMismatch(call, "query/key/value shapes are inconsistent");
  return FormulaResult::Partial(*flops, "fused_attention_matrix_core_only",
                                "fused attention counts its matrix products only; its scaling, softmax and "
                                "masking are not part of the native convention");
}

FormulaResult Varlen(const OpCall& call) {
  return FormulaResult::Unavailable(
      "unsupported_operator_formula",
      std::string(call.name) +
          ": variable-length (cumulative sequence offsets) attention needs offset values, "
          "which TorchScan does not read");
}

}  // namespace

std::optional<Count> SdpaForwardFlops(absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                                      absl::Span<const int64_t> v) {
  if (!Consistent(q, k, v)) return std::nullopt;
  const Count bh = Count(q[0]) * q[1];
  const int64_t sq = q[2], d = q[3], sk = k[2], dv = v[3];
  return bh * (matmul::MmFlops(sq, d, sk) + matmul::MmFlops(sq, sk, dv));
}

std::optional<Count> SdpaBackwardFlops(absl::Span<const int64_t> g, absl::Span<const int64_t> q,
                                       absl::Span<const int64_t> k, absl::Span<const int64_t> v) {
  if (!Consistent(q, k, v) || g.size() != 4 || g[0] != q[0] || g[1] != q[1] || g[2] != q[2] || g[3] != v[3]) {
    return std::nullopt;
  }
  const Count bh = Count(q[0]) * q[1];
  const int64_t sq = q[2], d = q[3], sk = k[2], dv = v[3];
  return bh * (matmul::MmFlops(sq, d, sk)      // recompute scores
               + matmul::MmFlops(sq, dv, sk)   // grad scores = grad_out @ v^T
               + matmul::MmFlops(sk, sq, dv)   // grad v = scores^T @ grad_out
               + matmul::MmFlops(sq, sk, d)    // grad q = grad scores @ k
               + matmul::MmFlops(d, sq, sk));  // grad k = q^T @ grad scores
}

FormulaResult SdpaForward(const OpCall& call) { return FromShapes(call, 0, nullptr); }

FormulaResult SdpaBackward(const OpCall& call) {
  const TensorMeta* g = TensorArg(call, 0, 4);
  if (!g) return ShapeMismatch(call, "expected a 4-D grad_out");
  return FromShapes(call, 1, g);
}

// _flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, ...).
// Like torch.utils.flop_counter, the dense case reads the shapes in the
// (b, h, s, d) order of the other kernels, so both views agree exactly.
FormulaResult FlashForward(const OpCall& call) {
  if (!call.arg(3).is_none()) return Varlen(call);
  return FromShapes(call, 0, nullptr);
}
// _efficient_attention_forward(query, key, value, bias, cu_seqlens_q, ...).
FormulaResult EfficientForward(const OpCall& call) {
  if (!call.arg(4).is_none()) return Varlen(call);
  return FromShapes(call, 0, nullptr);
}
// _flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, ...).
FormulaResult FlashBackward(const OpCall& call) {
  if (!call.arg(6).is_none()) return Varlen(call);
  return SdpaBackward(call);
}
// _efficient_attention_backward(grad_out, query, key, value, bias, out, cu_seqlens_q, ...).
FormulaResult EfficientBackward(const OpCall& call) {
  if (!call.arg(6).is_none()) return Varlen(call);
  return SdpaBackward(call);
}

namespace {

// Self- or cross-attention core of the fused kernels: q (B, L, E), kv length S.
// Wide throughout: b*l*e*e alone passes int64_t for large enough calls.
Count FusedAttentionFlops(int64_t b, int64_t l, int64_t s, int64_t e, int64_t h, bool mask, bool average_weights) {
  const int64_t d = e / h;
  const Count bl = Count(b) * l, bs = Count(b) * s, bh = Count(b) * h;
  const Count scores = bh * l * s, rows = bh * l;
  Count flops = matmul::MmFlops(bl, e, e) + 2 * matmul::MmFlops(bs, e, e)  // Q, K, V
                + matmul::MmFlops(bl, e, e);                               // output projection
  flops += bl * e;                                                         // Q scaling
  flops += bh * (matmul::MmFlops(l, d, s) + matmul::MmFlops(l, s, d));     // QK^T, PV
  flops += 5 * scores;                                                     // stable softmax: 5N - 2R
  if (mask) flops += scores;
  if (average_weights) flops += scores;
  flops -= 2 * rows;  // last, so no partial sum goes below zero
  return flops;
}

}  // namespace

FormulaResult NativeMultiHeadAttention(const OpCall& call) {
  const TensorMeta* q = TensorArg(call, 0, 3);
  const TensorMeta* k = TensorArg(call, 1, 3);
  const ArgMeta& heads = call.arg(4);
  if (!q || !k || heads.kind != ArgKind::kInt || heads.to_int() <= 0 || q->size(0) != k->size(0) ||
      q->size(2) % heads.to_int() != 0) {
    return ShapeMismatch(call, "expected dense batched (B, L, E) query/key and heads dividing E");
  }
  const ArgMeta& need = call.arg(10);
  const ArgMeta& average = call.arg(11);
  const bool averaged =
      (need.kind != ArgKind::kBool || need.to_bool()) && (average.kind != ArgKind::kBool || average.to_bool());
  return FormulaResult::Complete(FusedAttentionFlops(q->size(0), q->size(1), k->size(1), q->size(2), heads.to_int(),
                                                     call.arg(9).is_tensor(), averaged));
}

FormulaResult TransformBiasRescaleQkv(const OpCall& call) {
  const TensorMeta* qkv = TensorArg(call, 0, 3);
  if (!qkv || qkv->size(2) % 3 != 0) return ShapeMismatch(call, "expected a dense (B, L, 3E) input");
  return FormulaResult::Complete(Count(qkv->numel()) + qkv->numel() / 3);
}

FormulaResult TransformerEncoderLayer(const OpCall& call) {
  const TensorMeta* x = TensorArg(call, 0, 3);
  const ArgMeta& heads = call.arg(2);
  const TensorMeta* ffn1 = TensorArg(call, 14, 2);
  if (!x || !ffn1 || heads.kind != ArgKind::kInt || heads.to_int() <= 0 || x->size(2) % heads.to_int() != 0) {
    return ShapeMismatch(call, "expected a dense batched (B, L, E) input and heads dividing E");
  }
  const int64_t b = x->size(0), l = x->size(1), e = x->size(2), f = ffn1->size(0);
  const bool gelu = call.arg(7).kind == ArgKind::kBool && call.arg(7).to_bool();
  const Count r = Count(b) * l, n = r * e;
  Count flops = FusedAttentionFlops(b, l, l, e, heads.to_int(), call.arg(18).is_tensor(), false);
  flops += matmul::MmFlops(r, e, f) + matmul::MmFlops(r, f, e);  // feed-forward
  flops += Count(gelu ? 5 : 1) * r * f;                          // activation
  flops += 2 * (6 * n + 2 * r + 2 * n);                          // two affine LayerNorms
  flops += 2 * n;                                                // two residual additions
  return FormulaResult::Complete(flops);
}

}  // namespace torchscan::attention

namespace torchscan::attention {

namespace {

// Where the CPU SDPA kernels keep their operands: the forward
// (query, key, value, dropout_p, is_causal, *, attn_mask, scale) and the
// backward (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
// *, attn_mask, scale).
struct SdpaCpuArgs {
  size_t query, dropout, causal, mask;
};
constexpr SdpaCpuArgs kSdpaCpuForward{0, 3, 4, 5};
constexpr SdpaCpuArgs kSdpaCpuBackward{1, 6, 7, 8};

// The CPU SDPA row's limits, shared by both views and by the backward row;
// nullopt when supported.
std::optional<FormulaResult> SdpaCpuUnsupported(const OpCall& call, SdpaCpuArgs at = kSdpaCpuForward) {
  const TensorMeta* q = TensorArg(call, at.query, 4);
  const TensorMeta* k = TensorArg(call, at.query + 1, 4);
  const TensorMeta* v = TensorArg(call, at.query + 2, 4);
  if (!q || !k || !v || !Consistent(q->sizes(), k->sizes(), v->sizes())) {
    return ShapeMismatch(call, "expected dense 4-D query/key/value with matching batches");
  }
  const auto dropout = ScalarArg(call, at.dropout);
  if (dropout && *dropout > 0) {
    return FormulaResult::Unavailable("unsupported_attention_dropout",
                                      "attention dropout inside the fused CPU kernel is not counted");
  }
  return std::nullopt;
}

int SdpaCpuMasks(const OpCall& call, SdpaCpuArgs at = kSdpaCpuForward) {
  const bool causal = call.arg(at.causal).kind == ArgKind::kBool && call.arg(at.causal).to_bool();
  return (causal ? 1 : 0) + (call.arg(at.mask).is_tensor() ? 1 : 0);
}

}  // namespace

FormulaResult SdpaCpu(const OpCall& call) {
  if (auto bad = SdpaCpuUnsupported(call)) return *bad;
  const auto q = call.arg(0).tensor().sizes(), k = call.arg(1).tensor().sizes(), v = call.arg(2).tensor().sizes();
  const Count r = Count(q[0]) * q[1] * q[2], a = r * k[2];
  // Softmax 5A - 2R: the 2R comes off last so no partial sum goes below zero.
  const Count flops = *SdpaForwardFlops(q, k, v) + a + SdpaCpuMasks(call) * a + 5 * a - 2 * r;
  return CountFor(call, ArithmeticOf(call), flops);
}

ModuleCosts SdpaCpuCosts(const OpCall& call) {
  if (auto bad = SdpaCpuUnsupported(call)) return ModuleCosts::Unavailable(*bad);
  const TensorMeta* q = TensorArg(call, 0, 4);
  const TensorMeta* k = TensorArg(call, 1, 4);
  const TensorMeta* v = TensorArg(call, 2, 4);
  const int64_t b = q->size(0), h = q->size(1), l = q->size(2), d = q->size(3), s = k->size(2), dv = v->size(3);
  const Count r = Count(b) * h * l, a = r * s;
  const ArgMeta& mask = call.arg(5);
  const int masks = SdpaCpuMasks(call);
  const Count mask_elements = mask.is_tensor() ? mask.tensor().numel() : 0;
  // Softmax is 5A - 2R; the 2R comes off last so no partial sum goes below zero.
  const Count flops = a * (d > 0 ? Count(2) * d - 1 : Count(0)) + a + masks * a + 5 * a +
                      r * dv * (s > 0 ? Count(2) * s - 1 : Count(0)) - 2 * r;
  const Count macs = a * d + a * dv;
  const Count out = r * dv;
  const Count dmas = (Count(q->numel()) + k->numel() + a) + 2 * a + mask_elements + masks * 2 * a + (8 * a + 4 * r) +
                     (a + v->numel() + out);
  return {FormulaResult::Complete(flops), FormulaResult::Complete(macs), FormulaResult::Complete(dmas)};
}

}  // namespace torchscan::attention

namespace torchscan::attention {
namespace {

struct MhaCall {
  int64_t b, t, s, e, h;
  bool in_bias, out_bias, averaged;
  std::optional<Count> mask_elements;  // nullopt: no mask
  Count inputs;                        // Nq + Nk + Nv
  Count parameters;                    // projection weights and biases
};

Count Dots(const Count& n, int64_t k) { return n * (k > 0 ? Count(2) * k - 1 : Count(0)); }

std::array<Count, 3> MhaTriple(const MhaCall& m) {
  const int64_t d = m.e / m.h;
  const Count r = Count(m.b) * m.h * m.t, a = r * m.s;
  const Count q = Count(m.b) * m.t * m.e, j = Count(m.b) * m.s * m.e;
  const int masks = m.mask_elements ? 1 : 0;
  Count flops = Dots(q, m.e) + (m.in_bias ? q : Count(0)) + 2 * (Dots(j, m.e) + (m.in_bias ? j : Count(0)));
  flops += q;                                           // query scale
  flops += Dots(a, d) + masks * a + 5 * a;              // scores, masks, softmax (5S - 2 per row: 2R below)
  flops += Dots(r * d, m.s);                            // weighted values
  flops += Dots(q, m.e) + (m.out_bias ? q : Count(0));  // output projection
  if (m.averaged) flops += a;
  flops -= 2 * r;  // last, so no partial sum goes below zero
  const Count macs = m.e * m.inputs + 2 * Count(m.b) * m.t * m.s * m.e + Count(m.b) * m.t * m.e * m.e;
  Count dmas = m.inputs + m.parameters + 7 * q + 4 * j + 10 * a + 4 * r;
  if (masks) dmas += *m.mask_elements + 2 * a;
  if (m.averaged) dmas += a + Count(m.b) * m.t * m.s;
  return {flops, macs, dmas};
}

ModuleCosts Complete(const std::array<Count, 3>& v) {
  return {FormulaResult::Complete(v[0]), FormulaResult::Complete(v[1]), FormulaResult::Complete(v[2])};
}

std::optional<Count> MaskElements(const OpCall& call, size_t i) {
  if (!call.arg(i).is_tensor()) return std::nullopt;
  return Elements(call.arg(i));
}

}  // namespace

ModuleCosts NativeMultiHeadAttentionCosts(const OpCall& call) {
  const FormulaResult operator_view = NativeMultiHeadAttention(call);
  if (operator_view.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(operator_view);
  const TensorMeta* q = TensorArg(call, 0, 3);
  const TensorMeta* k = TensorArg(call, 1, 3);
  const ArgMeta& need = call.arg(10);
  const ArgMeta& average = call.arg(11);
  MhaCall m{q->size(0),
            q->size(1),
            k->size(1),
            q->size(2),
            call.arg(4).to_int(),
            call.arg(6).is_tensor(),
            call.arg(8).is_tensor(),
            (need.kind != ArgKind::kBool || need.to_bool()) && (average.kind != ArgKind::kBool || average.to_bool()),
            MaskElements(call, 9),
            Elements(call.arg(0)) + Elements(call.arg(1)) + Elements(call.arg(2)),
            Elements(call.arg(5)) + Elements(call.arg(6)) + Elements(call.arg(7)) + Elements(call.arg(8))};
  return Complete(MhaTriple(m));
}

ModuleCosts TransformerEncoderLayerCosts(const OpCall& call) {
  const FormulaResult operator_view = TransformerEncoderLayer(call);
  if (operator_view.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(operator_view);
  const TensorMeta* x = TensorArg(call, 0, 3);
  const int64_t b = x->size(0), l = x->size(1), e = x->size(2), f = TensorArg(call, 14, 2)->size(0);
  const Count n = x->numel(), rows = Count(b) * l, u = rows * f;
  const MhaCall m{b,
                  l,
                  l,
                  e,
                  call.arg(2).to_int(),
                  call.arg(4).is_tensor(),
                  call.arg(6).is_tensor(),
                  false,
                  MaskElements(call, 18),
                  3 * n,
                  Elements(call.arg(3)) + Elements(call.arg(4)) + Elements(call.arg(5)) + Elements(call.arg(6))};
  std::array<Count, 3> v = MhaTriple(m);
  const bool gelu = call.arg(7).kind == ArgKind::kBool && call.arg(7).to_bool();
  const bool b1 = call.arg(15).is_tensor(), b2 = call.arg(17).is_tensor();
  // Feed-forward: two module-convention linears and the activation.
  v[0] += Dots(u, e) + (b1 ? u : Count(0)) + Count(gelu ? 5 : 1) * u + Dots(rows * e, f) + (b2 ? rows * e : Count(0));
  v[1] += rows * (Count(e) * f + Count(f) * e);
  v[2] +=
      2 * n + 4 * u + Elements(call.arg(14)) + Elements(call.arg(15)) + Elements(call.arg(16)) + Elements(call.arg(17));
  // Two residual additions and two LayerNorms (affine when their tensors are given).
  for (const auto& [w, bias] : {std::pair<size_t, size_t>{10, 11}, {12, 13}}) {
    const bool affine_w = call.arg(w).is_tensor(), affine_b = call.arg(bias).is_tensor();
    const Count params = Elements(call.arg(w)) + Elements(call.arg(bias));
    v[0] += n + 6 * n + 2 * rows + (affine_w + affine_b) * n;
    v[1] += n * (1 + (affine_w ? 1 : 0));
    v[2] += 3 * n + 4 * n + 5 * rows + 1 + params + (params > 0 ? 2 * n : Count(0));
  }
  return Complete(v);
}

}  // namespace torchscan::attention

namespace torchscan::attention {

// torchscan_training_v1, CPU SDPA backward. What cpu_flash_attention_backward
// (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) computes per (batch,
// query head), row block by key block:
//   dsum  = rowsum(grad_out * out)             per row: dv multiplies, dv - 1 adds
//   attn  = scale * q @ k^T (+ mask)           product, scale (GEMM alpha), mask add
//   attn  = exp(attn - logsumexp)              subtract, exp
//   attn  = 0 above the diagonal (causal)      one selection
//   gv   += attn^T @ grad_out                  product
//   gattn = grad_out @ v^T                     product
//   gattn = attn * (gattn - dsum)              subtract, multiply
//   gq   += scale * gattn @ k                  product (scale: GEMM alpha)
//   gk   += scale * gattn^T @ q                product (scale: GEMM alpha)
// The five products are the native SDPA backward (SdpaBackwardFlops, equal to
// torch.utils.flop_counter.sdpa_backward_flop_count); dense, like the forward
// row ("Dense products unchanged" under masks, although the causal kernel
// skips key blocks past the diagonal). The scale is counted once per score
// where it enters (the recomputed scores) and once per score where the chain
// rule passes back through it (d(scale*s) = scale*ds), as the forward row
// counts its score scale however the kernel fuses it.
FormulaResult SdpaCpuBackward(const OpCall& call) {
  // An undefined grad_out returns undefined gradients: nothing is computed.
  if (call.arg(0).is_none()) return FormulaResult::Complete(0);
  if (auto bad = SdpaCpuUnsupported(call, kSdpaCpuBackward)) return *bad;
  const TensorMeta* g = TensorArg(call, 0, 4);
  const auto q = call.arg(1).tensor().sizes(), k = call.arg(2).tensor().sizes(), v = call.arg(3).tensor().sizes();
  const std::optional<Count> products = g ? SdpaBackwardFlops(g->sizes(), q, k, v) : std::nullopt;
  if (!products) return ShapeMismatch(call, "grad_out must have the query's batch, heads and length and V's width");
  const int64_t dv = v[3];
  const Count r = Count(q[0]) * q[1] * q[2], a = r * k[2];
  const Count flops = *products                                      // five dense products
                      + 2 * a                                        // score scale, and back through it
                      + SdpaCpuMasks(call, kSdpaCpuBackward) * a     // causal / explicit mask
                      + 2 * a                                        // exp(s - logsumexp)
                      + r * (dv > 0 ? Count(2) * dv - 1 : Count(0))  // rowsum(grad_out * out)
                      + 2 * a;                                       // attn * (gattn - dsum)
  return CountFor(call, ArithmeticOf(call), flops);
}

ModuleCosts SdpaCpuBackwardCosts(const OpCall& call) {
  const FormulaResult flops = SdpaCpuBackward(call);
  if (flops.status != MetricStatus::kComplete) return ModuleCosts::Unavailable(flops);
  Count accesses = 0;
  for (const ArgMeta& a : call.args) accesses += Elements(a);
  for (const ArgMeta& a : call.outputs) accesses += Elements(a);
  if (call.arg(0).is_none()) return ModuleCosts::FromFlops(flops, 0, accesses);
  const auto q = call.arg(1).tensor().sizes(), k = call.arg(2).tensor().sizes(), v = call.arg(3).tensor().sizes();
  const Count bh = Count(q[0]) * q[1];
  const int64_t l = q[2], d = q[3], s = k[2], dv = v[3];
  const Count products = *SdpaBackwardFlops(call.arg(0).tensor().sizes(), q, k, v);
  const Count outputs = bh * (Count(2) * l * s + Count(s) * dv + Count(l) * d + Count(d) * s);
  return {FormulaResult::Complete(flops.value - outputs), FormulaResult::Complete(products / 2),
          FormulaResult::Complete(accesses)};
}

}  // namespace torchscan::attention
