#include "formulas/attention.h"

#include <array>
#include <utility>

#include "formulas/arithmetic.h"
#include "formulas/matmul.h"
#include "formulas/shapes.h"

namespace torchscan::attention {
namespace {

bool Consistent(absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                absl::Span<const int64_t> v) {
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
  const int64_t flops = grad_out ? SdpaBackwardFlops(grad_out->sizes(), q->sizes(), k->sizes(), v->sizes())
                                 : SdpaForwardFlops(q->sizes(), k->sizes(), v->sizes());
  if (flops < 0) return ShapeMismatch(call, "query/key/value shapes are inconsistent");
  return FormulaResult::Partial(flops, "fused_attention_matrix_core_only",
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

int64_t SdpaForwardFlops(absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                         absl::Span<const int64_t> v) {
  if (!Consistent(q, k, v)) return -1;
  const int64_t bh = q[0] * q[1], sq = q[2], d = q[3], sk = k[2], dv = v[3];
  return bh * (matmul::MmFlops(sq, d, sk) + matmul::MmFlops(sq, sk, dv));
}

int64_t SdpaBackwardFlops(absl::Span<const int64_t> g, absl::Span<const int64_t> q,
                          absl::Span<const int64_t> k, absl::Span<const int64_t> v) {
  if (!Consistent(q, k, v) || g.size() != 4 || g[0] != q[0] || g[1] != q[1] || g[2] != q[2] ||
      g[3] != v[3]) {
    return -1;
  }
  const int64_t bh = q[0] * q[1], sq = q[2], d = q[3], sk = k[2], dv = v[3];
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
int64_t FusedAttentionFlops(int64_t b, int64_t l, int64_t s, int64_t e, int64_t h, bool mask,
                            bool average_weights) {
  const int64_t d = e / h;
  const int64_t scores = b * h * l * s, rows = b * h * l;
  int64_t flops = matmul::MmFlops(b * l, e, e) + 2 * matmul::MmFlops(b * s, e, e)  // Q, K, V
                  + matmul::MmFlops(b * l, e, e);                                   // output projection
  flops += b * l * e;                                                               // Q scaling
  flops += b * h * (matmul::MmFlops(l, d, s) + matmul::MmFlops(l, s, d));          // QK^T, PV
  flops += 5 * scores - 2 * rows;                                                    // stable softmax
  if (mask) flops += scores;
  if (average_weights) flops += scores;
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
  const bool averaged = (need.kind != ArgKind::kBool || need.to_bool()) &&
                        (average.kind != ArgKind::kBool || average.to_bool());
  return FormulaResult::Complete(FusedAttentionFlops(q->size(0), q->size(1), k->size(1), q->size(2),
                                                     heads.to_int(), call.arg(9).is_tensor(), averaged));
}

FormulaResult TransformBiasRescaleQkv(const OpCall& call) {
  const TensorMeta* qkv = TensorArg(call, 0, 3);
  if (!qkv || qkv->size(2) % 3 != 0) return ShapeMismatch(call, "expected a dense (B, L, 3E) input");
  return FormulaResult::Complete(qkv->numel() + qkv->numel() / 3);
}

FormulaResult TransformerEncoderLayer(const OpCall& call) {
  const TensorMeta* x = TensorArg(call, 0, 3);
  const ArgMeta& heads = call.arg(2);
  const TensorMeta* ffn1 = TensorArg(call, 14, 2);
  if (!x || !ffn1 || heads.kind != ArgKind::kInt || heads.to_int() <= 0 ||
      x->size(2) % heads.to_int() != 0) {
    return ShapeMismatch(call, "expected a dense batched (B, L, E) input and heads dividing E");
  }
  const int64_t b = x->size(0), l = x->size(1), e = x->size(2), f = ffn1->size(0);
  const bool gelu = call.arg(7).kind == ArgKind::kBool && call.arg(7).to_bool();
  const int64_t n = b * l * e, r = b * l;
  int64_t flops = FusedAttentionFlops(b, l, l, e, heads.to_int(), call.arg(18).is_tensor(), false);
  flops += matmul::MmFlops(b * l, e, f) + matmul::MmFlops(b * l, f, e);  // feed-forward
  flops += (gelu ? 5 : 1) * b * l * f;                                   // activation
  flops += 2 * (6 * n + 2 * r + 2 * n);                                  // two affine LayerNorms
  flops += 2 * n;                                                        // two residual additions
  return FormulaResult::Complete(flops);
}

}  // namespace torchscan::attention

namespace torchscan::attention {

ModuleCosts SdpaCpuCosts(const OpCall& call) {
  const TensorMeta* q = TensorArg(call, 0, 4);
  const TensorMeta* k = TensorArg(call, 1, 4);
  const TensorMeta* v = TensorArg(call, 2, 4);
  if (!q || !k || !v || !Consistent(q->sizes(), k->sizes(), v->sizes())) {
    return ModuleCosts::Unavailable(ShapeMismatch(call, "expected dense 4-D query/key/value with matching batches"));
  }
  const auto dropout = ScalarArg(call, 3);
  if (dropout && *dropout > 0) {
    return ModuleCosts::Unavailable(FormulaResult::Unavailable(
        "unsupported_attention_dropout", "attention dropout inside the fused CPU kernel is not counted"));
  }
  const int64_t b = q->size(0), h = q->size(1), l = q->size(2), d = q->size(3), s = k->size(2),
                dv = v->size(3);
  const int64_t a = b * h * l * s, r = b * h * l;
  const bool causal = call.arg(4).kind == ArgKind::kBool && call.arg(4).to_bool();
  const ArgMeta& mask = call.arg(5);
  const int masks = (causal ? 1 : 0) + (mask.is_tensor() ? 1 : 0);
  const int64_t mask_elements = mask.is_tensor() ? mask.tensor().numel() : 0;
  const int64_t flops = a * (d > 0 ? 2 * d - 1 : 0) + a + masks * a + (5 * a - 2 * r) +
                        r * dv * (s > 0 ? 2 * s - 1 : 0);
  const int64_t macs = a * d + a * dv;
  const int64_t out = r * dv;
  const int64_t dmas = (q->numel() + k->numel() + a) + 2 * a + mask_elements + masks * 2 * a + (8 * a + 4 * r) +
                       (a + v->numel() + out);
  return {FormulaResult::Complete(flops), FormulaResult::Complete(macs), FormulaResult::Complete(dmas)};
}

}  // namespace torchscan::attention

namespace torchscan::attention {
namespace {

struct MhaCall {
  int64_t b, t, s, e, h;
  bool in_bias, out_bias, averaged;
  int64_t mask_elements;  // -1: no mask
  int64_t inputs;         // Nq + Nk + Nv
  int64_t parameters;     // projection weights and biases
};

int64_t Dots(int64_t n, int64_t k) { return n * (k > 0 ? 2 * k - 1 : 0); }

std::array<int64_t, 3> MhaTriple(const MhaCall& m) {
  const int64_t d = m.e / m.h, a = m.b * m.h * m.t * m.s, r = m.b * m.h * m.t;
  const int64_t q = m.b * m.t * m.e, j = m.b * m.s * m.e;
  const int64_t masks = m.mask_elements >= 0 ? 1 : 0;
  int64_t flops = Dots(q, m.e) + (m.in_bias ? q : 0) + 2 * (Dots(j, m.e) + (m.in_bias ? j : 0));
  flops += q;                                            // query scale
  flops += Dots(a, d) + masks * a + r * (5 * m.s - 2);  // scores, masks, softmax
  flops += Dots(m.b * m.h * m.t * d, m.s);               // weighted values
  flops += Dots(q, m.e) + (m.out_bias ? q : 0);          // output projection
  if (m.averaged) flops += a;
  const int64_t macs = m.e * m.inputs + 2 * m.b * m.t * m.s * m.e + m.b * m.t * m.e * m.e;
  int64_t dmas = m.inputs + m.parameters + 7 * q + 4 * j + 10 * a + 4 * r;
  if (masks) dmas += m.mask_elements + 2 * a;
  if (m.averaged) dmas += a + m.b * m.t * m.s;
  return {flops, macs, dmas};
}

ModuleCosts Complete(const std::array<int64_t, 3>& v) {
  return {FormulaResult::Complete(v[0]), FormulaResult::Complete(v[1]), FormulaResult::Complete(v[2])};
}

}  // namespace

ModuleCosts NativeMultiHeadAttentionCosts(const OpCall& call) {
  const FormulaResult operator_view = NativeMultiHeadAttention(call);
  if (operator_view.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(operator_view);
  const TensorMeta* q = TensorArg(call, 0, 3);
  const TensorMeta* k = TensorArg(call, 1, 3);
  const ArgMeta& need = call.arg(10);
  const ArgMeta& average = call.arg(11);
  MhaCall m{q->size(0), q->size(1), k->size(1), q->size(2), call.arg(4).to_int(),
            call.arg(6).is_tensor(), call.arg(8).is_tensor(),
            (need.kind != ArgKind::kBool || need.to_bool()) && (average.kind != ArgKind::kBool || average.to_bool()),
            call.arg(9).is_tensor() ? Elements(call.arg(9)) : -1,
            Elements(call.arg(0)) + Elements(call.arg(1)) + Elements(call.arg(2)),
            Elements(call.arg(5)) + Elements(call.arg(6)) + Elements(call.arg(7)) + Elements(call.arg(8))};
  return Complete(MhaTriple(m));
}

ModuleCosts TransformerEncoderLayerCosts(const OpCall& call) {
  const FormulaResult operator_view = TransformerEncoderLayer(call);
  if (operator_view.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(operator_view);
  const TensorMeta* x = TensorArg(call, 0, 3);
  const int64_t b = x->size(0), l = x->size(1), e = x->size(2), f = TensorArg(call, 14, 2)->size(0);
  const int64_t n = x->numel(), rows = b * l, u = rows * f;
  const MhaCall m{b, l, l, e, call.arg(2).to_int(), call.arg(4).is_tensor(), call.arg(6).is_tensor(), false,
                  call.arg(18).is_tensor() ? Elements(call.arg(18)) : -1, 3 * n,
                  Elements(call.arg(3)) + Elements(call.arg(4)) + Elements(call.arg(5)) + Elements(call.arg(6))};
  std::array<int64_t, 3> v = MhaTriple(m);
  const bool gelu = call.arg(7).kind == ArgKind::kBool && call.arg(7).to_bool();
  const bool b1 = call.arg(15).is_tensor(), b2 = call.arg(17).is_tensor();
  // Feed-forward: two module-convention linears and the activation.
  v[0] += Dots(u, e) + (b1 ? u : 0) + (gelu ? 5 : 1) * u + Dots(rows * e, f) + (b2 ? rows * e : 0);
  v[1] += rows * (e * f + f * e);
  v[2] += 2 * n + 4 * u + Elements(call.arg(14)) + Elements(call.arg(15)) + Elements(call.arg(16)) + Elements(call.arg(17));
  // Two residual additions and two LayerNorms (affine when their tensors are given).
  for (const auto& [w, bias] : {std::pair<size_t, size_t>{10, 11}, {12, 13}}) {
    const bool affine_w = call.arg(w).is_tensor(), affine_b = call.arg(bias).is_tensor();
    const int64_t params = Elements(call.arg(w)) + Elements(call.arg(bias));
    v[0] += n + 6 * n + 2 * rows + (affine_w + affine_b) * n;
    v[1] += n * (1 + (affine_w ? 1 : 0));
    v[2] += 3 * n + 4 * n + 5 * rows + 1 + params + (params > 0 ? 2 * n : 0);
  }
  return Complete(v);
}

}  // namespace torchscan::attention
