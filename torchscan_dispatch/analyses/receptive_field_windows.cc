// Sliding windows for the receptive-field pass: convolutions (transposed
// too), pooling, upsampling and padding (receptive_field_layout.h).
#include "torchscan_dispatch/analyses/receptive_field_layout.h"

namespace torchscan::receptive_field_internal {

// Convolution, pooling and upsampling windows over the trailing k dims of
// argument 0; k_eff = dilation (k - 1) + 1:
//   rf' = rf + (k_eff - 1) jump, jump' = jump * stride, padding' = padding + p * jump.
Layout Propagator::Slide(const OpCall& call, const TensorMeta& out, Slider kind, int k) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor()) return Generic(call, out);
  const TensorMeta& in = x.tensor();
  Layout l = Get(in);
  if (!l.lost.empty()) return l;
  const int nd = in.ndim;
  if (k <= 0 || nd < k + 1 || out.ndim != nd) {
    return Lost(absl::StrCat(N(call.name), ": unexpected shapes for a ", k, "-d window; not followed"));
  }
  const bool weak = l.weak;  // see Note [Weak layouts]
  l.weak = false;
  // The channels dim: a convolution sums over it; positions there would be mixed.
  const int c = nd - k - 1;
  if (Involved(l.dims[c]) && !weak) {
    return Lost(absl::StrCat(N(call.name), " mixes dim ", c, ", which holds spatial positions"));
  }
  l.dims[c] = Plain(out.size(c));
  const absl::string_view name = N(call.name);
  const ReceptiveRule rule = TraitsOf(call.name).receptive;
  const bool conv_op = rule == ReceptiveRule::kConvolution;
  const bool transposed_op = rule == ReceptiveRule::kConvTransposed;
  for (int a = 0; a < k; ++a) {
    const int d = nd - k + a;
    int32_t id = l.dims[d].axis();
    if (id < 0) {
      // An untracked tensor's dim that was not guessed spatial: the window declares it.
      if (weak && l.dims[d].state == Dim::State::kClean && !l.dims[d].spatial()) {
        id = next_axis_++;
        l.axes[id] = Window{};
      } else if (l.dims[d].state == Dim::State::kTokens) {
        return Lost(absl::StrCat(N(call.name), " slides over dim ", d, ", which holds tokens: ", kTokensMixed));
      } else {
        return Lost(absl::StrCat(N(call.name), " slides over dim ", d, ", which is not an identifiable spatial axis"));
      }
    }
    Window& w = l.axes[id];
    if (!w.known) return Lost(absl::StrCat(N(call.name), " dim ", d, ": ", kTokensMixed));
    const double length = static_cast<double>(in.size(d)), o = static_cast<double>(out.size(d));
    switch (kind) {
      case Slider::kConv: {
        const ArgMeta& wt = call.arg(1);
        const double kk = static_cast<double>(wt.tensor().size(2 + a));
        // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
        // conv<N>d(input, weight, bias, stride, padding, dilation, groups);
        // conv_transpose<N>d(input, weight, bias, stride, padding, output_padding, groups, dilation).
        const double stride = Param(call.arg(3), a, 1);
        const size_t dil_arg = transposed_op ? 7 : 5;
        const double dilation = Param(call.arg(dil_arg), a, 1);
        const double k_eff = dilation * (kk - 1) + 1;
        double pad = Param(call.arg(4), a, 0);
        if (call.arg(4).kind == ArgKind::kString && N(call.arg(4).str()) == "same") pad = std::floor((k_eff - 1) / 2);
        const bool transposed =
            transposed_op || (conv_op && call.arg(6).kind == ArgKind::kBool && call.arg(6).to_bool());
        if (transposed) {
          Transposed(w, static_cast<int64_t>(kk), static_cast<int64_t>(stride), static_cast<int64_t>(pad),
                     static_cast<int64_t>(dilation));
        } else {
          w.rf += (k_eff - 1) * w.jump;
          w.padding += pad * w.jump;
          w.jump *= stride;
        }
        break;
      }
      case Slider::kMaxPool:
      case Slider::kAvgPool: {
        // max_pool(self, kernel, stride = kernel, padding, dilation, ceil_mode); avg_pool has no dilation.
        const double kk = Param(call.arg(1), a, 1);
        const double stride = Param(call.arg(2), a, kk);
        const double pad = Param(call.arg(3), a, 0);
        const double dilation = kind == Slider::kMaxPool ? Param(call.arg(4), a, 1) : 1;
        w.rf += dilation * (kk - 1) * w.jump;
        w.padding += pad * w.jump;
        w.jump *= stride;
        break;
      }
      case Slider::kAdaptive: {
        // Approximated as a window of ceil(L/O) values stepping floor(L/O)
        // (exact when O divides L; a global pool sees the whole axis).
        const double kk = o > 0 ? std::ceil(length / o) : length;
        const double stride = o > 0 ? std::max(1.0, std::floor(length / o)) : 1;
        w.rf += (kk - 1) * w.jump;
        w.jump *= stride;
        break;
      }
      case Slider::kUpsample: {
        // Outputs step L/O input positions; nearest sees 1 input per axis, linear 2, cubic 4.
        const int neighbours = absl::StrContains(name, "bicubic") ? 4 : absl::StrContains(name, "nearest") ? 1 : 2;
        w.rf += (neighbours - 1) * w.jump;
        if (o > 0) w.jump *= length / o;
        break;
      }
    }
    l.dims[d] = OfAxis(out.size(d), id);
  }
  return l;
}

// A transposed convolution (stride s, padding p, dilation d, kernel k)
// writes input i to outputs i*s - p + j*d, j in [0, k): output o reads the
// inputs i = (o + p - j*d) / s for the taps j where that divides exactly.
// Outputs step 1/s input positions. The field is the widest span of inputs
// one output reads (over the s output phases), and the padding is how far
// before input 0 output 0's first input lies. With s = 1 that is the
// familiar k_eff - 1 - p: ConvTranspose(k=3, p=0) output o reads o-2..o.
// output_padding only appends outputs at the end: no effect here.
void Propagator::Transposed(Window& w, int64_t k, int64_t s, int64_t p, int64_t d) {
  s = std::max<int64_t>(s, 1);
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  int64_t span = 1, first0 = 0;
  bool first_seen = false;
  const int64_t phases = std::min<int64_t>(s, 1 << 16);
  for (int64_t o = 0; o < phases; ++o) {
    int64_t lo = 0, hi = 0;
    bool any = false;
    for (int64_t j = 0; j < k && j < (1 << 16); ++j) {
      const int64_t num = o + p - j * d;
      if (((num % s) + s) % s != 0) continue;
      const int64_t i = floor_div(num, s);
      lo = any ? std::min(lo, i) : i;
      hi = any ? std::max(hi, i) : i;
      any = true;
    }
    if (!any) continue;
    span = std::max(span, hi - lo + 1);
    if (o == 0) first0 = lo, first_seen = true;
  }
  // Output 0 reads nothing (k < s): place it where the taps would start.
  if (!first_seen) first0 = -floor_div((k - 1) * d - p, s);
  w.rf += static_cast<double>(span - 1) * w.jump;
  w.padding += static_cast<double>(-first0) * w.jump;
  w.jump /= static_cast<double>(s);
}

// Padding (pad[2i], pad[2i+1] before/after dim nd-1-i) moves where output 0's
// window starts: padding' = padding + before * jump (negative pads crop).
// Reflection and replication padding count like zeros here.
Layout Propagator::Pad(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor() || call.arg(1).kind != ArgKind::kIntList || x.tensor().ndim != out.ndim) {
    return Generic(call, out);
  }
  Layout l = Get(x.tensor());
  if (!l.lost.empty()) return l;
  const auto pad = call.arg(1).ints();
  for (size_t i = 0; 2 * i < pad.size() && i < static_cast<size_t>(out.ndim); ++i) {
    const int d = out.ndim - 1 - static_cast<int>(i);
    const int64_t before = pad[2 * i], after = 2 * i + 1 < pad.size() ? pad[2 * i + 1] : 0;
    if (before == 0 && after == 0) continue;
    const int32_t id = l.dims[d].axis();
    if (id >= 0) {
      l.axes[id].padding += static_cast<double>(before) * l.axes[id].jump;
      l.dims[d] = OfAxis(out.size(d), id);
    } else if (Involved(l.dims[d])) {
      return Lost(absl::StrCat(N(call.name), " pads dim ", d, ", which merges spatial positions"));
    } else {
      l.dims[d] = Plain(out.size(d), l.dims[d].state);
    }
  }
  return l;
}

}  // namespace torchscan::receptive_field_internal
