#include "torchscan_dispatch/analyses/receptive_field.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/op_traits.h"

namespace torchscan {
namespace {

// ---- Layouts: what each dimension of a tensor holds.
//
// A dimension is a row-major product of parts; each part is `size` positions
// of one spatial axis (axis >= 0) or of something that is not spatial (batch,
// channels, features, heads). flatten(2) on (N, C, H, W) gives a dimension of
// parts (H, W): the tokens of a ViT. A later view that splits it back into
// exactly those parts restores the axes (ConvNeXt's NCHW -> NHWC -> NCHW, a
// token sequence reshaped to an image); a view that splits an axis itself
// (Swin's window partition) makes the positions unidentifiable.

struct Part {
  int64_t size = 1;
  int32_t axis = -1;  // -1: not spatial
  bool operator==(const Part& o) const { return size == o.size && axis == o.axis; }
};

struct Dim {
  enum class State : uint8_t {
    kClean,   // parts are exact: a view can split this dimension back into them
    kTokens,  // spatial positions in an order no view can undo (concatenated, or mixed by attention)
    kMixed,   // a guessed axis of an untracked tensor whose positions an op mixed: never spatial again
  };
  std::vector<Part> parts;  // kTokens: the axes the positions come from (sizes may be stale)
  int64_t size = 1;
  State state = State::kClean;

  bool spatial() const {
    return std::any_of(parts.begin(), parts.end(), [](const Part& p) { return p.axis >= 0; });
  }
  // The one spatial axis this dimension is exactly (other parts of size 1), or -1.
  int32_t axis() const {
    if (state != State::kClean) return -1;
    int32_t found = -1;
    for (const Part& p : parts) {
      if (p.axis >= 0) {
        if (found >= 0) return -1;
        found = p.axis;
      } else if (p.size != 1) {
        return -1;
      }
    }
    return found;
  }
};

Dim Plain(int64_t size, Dim::State state = Dim::State::kClean) { return {{{size, -1}}, size, state}; }
Dim OfAxis(int64_t size, int32_t axis) { return {{{size, axis}}, size, Dim::State::kClean}; }

// Same meaning: both hold no spatial positions, or the same parts the same way.
bool Same(const Dim& a, const Dim& b) {
  const bool sa = a.spatial() || a.state == Dim::State::kTokens, sb = b.spatial() || b.state == Dim::State::kTokens;
  if (!sa && !sb) return true;
  return sa == sb && a.state == b.state && a.parts == b.parts;
}

// The window one position of an axis sees: input positions
// [o*jump - padding, o*jump - padding + rf - 1] for output position o.
struct Window {
  double rf = 1, jump = 1, padding = 0;
  bool known = true;  // false: the positions passed through token mixing (attention), not analysed
};

// The union of two windows over the same positions: from the earlier start
// (the larger padding) to the later end (the larger rf - padding).
Window Join(const Window& a, const Window& b) {
  Window w;
  w.padding = std::max(a.padding, b.padding);
  w.rf = std::max(a.rf - a.padding, b.rf - b.padding) + w.padding;
  w.jump = std::max(a.jump, b.jump);  // equal for same-sized outputs; legacy choice otherwise
  w.known = a.known && b.known;
  return w;
}

// Whole-axis dependence (a reduction, a global pool over L positions).
void Absorb(Window& w, int64_t length) {
  w.rf += static_cast<double>(length - 1) * w.jump;
  w.jump *= static_cast<double>(length);
}

struct Layout {
  bool weak = false;  // derived from untracked tensors only (model inputs, parameters, buffers)
  std::string lost;   // non-empty: spatial positions the data flow cannot follow, and where
  std::vector<Dim> dims;
  std::map<int32_t, Window> axes;  // every axis in this tensor's history, reduced ones too
};

constexpr const char* kTokensMixed =
    "the positions are tokens (concatenated, or mixed by attention or a product over tokens); token relations "
    "are the layer's token_dependencies (token-dependency analysis), not a receptive field";

Layout Lost(std::string why) {
  Layout l;
  l.lost = std::move(why);
  return l;
}

absl::string_view N(std::string_view s) { return {s.data(), s.size()}; }

int64_t Wrap(int64_t d, int64_t n) { return d < 0 ? d + n : d; }

// The value for spatial axis a from an int[] argument (one value applies to all).
double Param(const ArgMeta& arg, int a, double fallback) {
  if (arg.kind == ArgKind::kInt) return static_cast<double>(arg.to_int());
  if (arg.kind != ArgKind::kIntList || arg.ints().empty()) return fallback;
  const auto v = arg.ints();
  return static_cast<double>(v.size() == 1 ? v[0] : v[std::min<size_t>(a, v.size() - 1)]);
}

// "aten::max_pool2d_with_indices" -> 2; fallback when the name has no "1d"/"2d"/"3d".
int NameAxes(absl::string_view name, int fallback) {
  for (int k = 1; k <= 3; ++k) {
    if (absl::StrContains(name, absl::StrCat(k, "d"))) return k;
  }
  return fallback;
}

bool Involved(const Dim& d) { return d.spatial() || d.state == Dim::State::kTokens; }

enum class Slider { kConv, kMaxPool, kAvgPool, kAdaptive, kUpsample };

// ---- The propagator.

class Propagator {
 public:
  void Visit(const Event& e, const OpInfo& info) {
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    // A call with no tensor arguments (at::ones, arange, ...) creates a
    // source, as do fills; its identities may be reused addresses of freed
    // tensors: forget those (a later use seeds them as untracked).
    const bool from_tensors = std::any_of(rc.args().begin(), rc.args().end(), [](const ArgMeta& a) {
      return a.is_tensor() || (a.kind == ArgKind::kTensorList && !a.tensors().empty());
    });
    const absl::string_view name = info.name;
    if (!from_tensors || TraitsOf(info.name).receptive == ReceptiveRule::kSource) {
      for (const ArgMeta& o : rc.outputs()) {
        if (o.is_tensor()) layouts_.erase(o.tensor().identity);
      }
      return;
    }
    if (rc.outputs().empty()) return;
    if (rc.outputs()[0].kind == ArgKind::kTensorList) {
      const auto outs = rc.outputs()[0].tensors();
      int64_t offset = 0;
      for (size_t j = 0; j < outs.size(); ++j) {
        if (!outs[j].defined) continue;
        layouts_[outs[j].identity] = Piece(call, outs[j], offset);
      }
      return;
    }
    if (!rc.outputs()[0].is_tensor()) return;
    const TensorMeta& out = rc.outputs()[0].tensor();
    if (!out.defined || out.nested) {
      layouts_.erase(out.identity);
      return;
    }
    Layout l = Rule(call, out);
    if (l.lost.empty() && static_cast<int32_t>(l.dims.size()) != out.ndim) {
      l = Lost(absl::StrCat(name, ": internal layout mismatch; not followed"));
    }
    // Further outputs of the same shape (indices, values) share the layout;
    // others (saved statistics) are not positions of the output.
    for (const ArgMeta& o : rc.outputs()) {
      if (!o.is_tensor() || !o.tensor().defined) continue;
      if (o.tensor().sizes() == out.sizes()) {
        layouts_[o.tensor().identity] = l;
      } else {
        layouts_.erase(o.tensor().identity);
      }
    }
  }

  std::optional<Field> Find(uintptr_t identity) const {
    auto it = layouts_.find(identity);
    if (it == layouts_.end()) return std::nullopt;
    return Report(it->second);
  }

 private:
  static Field Report(const Layout& l) {
    Field f;
    if (!l.lost.empty()) {
      f.kind = Field::Kind::kUnknown;
      f.reason = l.lost;
      return f;
    }
    std::vector<int> merged;
    for (size_t d = 0; d < l.dims.size(); ++d) {
      const int32_t id = l.dims[d].axis();
      if (id >= 0) {
        const Window& w = l.axes.at(id);
        if (!w.known) {
          f.kind = Field::Kind::kUnknown;
          f.reason = absl::StrCat("dim ", d, ": ", kTokensMixed);
          f.axes.clear();
          return f;
        }
        f.axes.push_back({static_cast<int32_t>(d), w.rf, w.jump, w.padding});
      } else if (Involved(l.dims[d])) {
        merged.push_back(static_cast<int>(d));
      }
    }
    if (!merged.empty()) {
      if (f.axes.empty()) {
        f.kind = Field::Kind::kNotApplicable;
        f.reason = absl::StrCat("token tensor: the spatial positions are flattened into dim ", merged[0],
                                " (tokens); token relations are the layer's token_dependencies "
                                "(token-dependency analysis), not a receptive field");
      } else {
        f.kind = Field::Kind::kUnknown;
        f.reason = absl::StrCat("dim ", merged[0], " merges spatial positions with other dims");
      }
      f.axes.clear();
      return f;
    }
    if (f.axes.empty()) {
      f.kind = Field::Kind::kNotApplicable;
      f.reason = "no spatial axes (flattened, reduced, or never spatial)";
      return f;
    }
    f.kind = Field::Kind::kSpatial;
    return f;
  }

  bool Strong(const TensorMeta& t) const {
    auto it = layouts_.find(t.identity);
    return it != layouts_.end() && !it->second.weak;
  }

  // The tracked layout, or a seed for an untracked tensor (a model input, a
  // parameter): (N, C, spatial...) with each position seeing itself. The
  // seed's axes are a guess that an op can revise (a convolution declares
  // which dims are spatial; linear and layer_norm declare feature dims).
  Layout Get(const TensorMeta& t) const {
    auto it = layouts_.find(t.identity);
    if (it != layouts_.end()) {
      const Layout& l = it->second;
      if (!l.lost.empty()) return l;
      bool fits = static_cast<int32_t>(l.dims.size()) == t.ndim;
      for (int32_t d = 0; fits && d < t.ndim; ++d) fits = l.dims[d].size == t.size(d);
      if (fits) return l;
      // Resized in place or an unrecorded writer: nothing to trust.
      return Lost("a tensor changed shape outside the recorded calls; not followed");
    }
    Layout l;
    l.weak = true;
    if (!t.defined || t.nested) return l;
    const int k = std::clamp<int>(t.ndim - 2, 0, 3);
    for (int32_t d = 0; d < t.ndim; ++d) {
      if (d >= t.ndim - k) {
        const int32_t id = d - (t.ndim - k);
        l.dims.push_back(OfAxis(t.size(d), id));
        l.axes[id] = Window{};
      } else {
        l.dims.push_back(Plain(t.size(d)));
      }
    }
    return l;
  }

  std::vector<const TensorMeta*> TensorArgs(const OpCall& call, size_t first = 0, size_t last = SIZE_MAX) const {
    std::vector<const TensorMeta*> ins;
    for (size_t i = first; i < call.args.size() && i < last; ++i) {
      const ArgMeta& a = call.args[i];
      if (a.is_tensor() && a.tensor().defined && !a.tensor().nested) ins.push_back(&a.tensor());
      if (a.kind == ArgKind::kTensorList) {
        for (const TensorMeta& t : a.tensors()) {
          if (t.defined && !t.nested) ins.push_back(&t);
        }
      }
    }
    return ins;
  }

  // Untracked inputs (parameters, position embeddings, constants) add no
  // positions where a tracked input exists; only when nothing is tracked do
  // the seeds speak (the model's inputs).
  std::vector<const TensorMeta*> Sources(std::vector<const TensorMeta*> ins, bool* weak) const {
    std::vector<const TensorMeta*> strong;
    for (const TensorMeta* t : ins) {
      if (Strong(*t)) strong.push_back(t);
    }
    *weak = strong.empty();
    return *weak ? ins : strong;
  }

  // The rule is the operator's row in formulas/op_traits.cc.
  Layout Rule(const OpCall& call, const TensorMeta& out) {
    const absl::string_view name = N(call.name);
    switch (TraitsOf(call.name).receptive) {
      case ReceptiveRule::kConvolution:
      case ReceptiveRule::kConvNd:
      case ReceptiveRule::kConvTransposed: {
        const ArgMeta& w = call.arg(1);
        return Slide(call, out, Slider::kConv, w.is_tensor() ? w.tensor().ndim - 2 : 0);
      }
      case ReceptiveRule::kMaxPool:
        return Slide(call, out, Slider::kMaxPool, NameAxes(name, 0));
      case ReceptiveRule::kAvgPool:
        return Slide(call, out, Slider::kAvgPool, NameAxes(name, 0));
      case ReceptiveRule::kAdaptivePool:
        return Slide(call, out, Slider::kAdaptive, NameAxes(name, 0));
      case ReceptiveRule::kUpsample:
        return Slide(call, out, Slider::kUpsample, NameAxes(name, out.ndim - 2));
      case ReceptiveRule::kPad:
        return Pad(call, out);
      case ReceptiveRule::kPermute:
        return Permute(call, out);
      case ReceptiveRule::kView:
        if (call.overload == "dtype") return Generic(call, out);  // reinterprets the bytes
        return Reshape(call, out);
      case ReceptiveRule::kReshape:
        return Reshape(call, out);
      case ReceptiveRule::kSlice:
        return Slice(call, out, 0, true);
      case ReceptiveRule::kSelect:
        return Select(call, out);
      case ReceptiveRule::kCat: {
        const ArgMeta& d = call.arg(1);
        return Generic(call, out, Wrap(d.kind == ArgKind::kInt ? d.to_int() : 0, out.ndim));
      }
      case ReceptiveRule::kCopyInto:
        return Generic(call, out, -1, 1);  // the result holds src's positions
      case ReceptiveRule::kLinear:
        return Contract(call, out, 0, 1, true);
      case ReceptiveRule::kMatmul:
        return Contract(call, out, 0, 1, false);
      case ReceptiveRule::kAddmm:
        return Contract(call, out, 1, 2, false);
      case ReceptiveRule::kAttention:
        return Attention(call, out);
      case ReceptiveRule::kNormalize:
        return Normalize(call, out);
      case ReceptiveRule::kMixAlong:
        return MixAlong(call, out);
      case ReceptiveRule::kMaxMin:
        if (call.overload == "other") return Generic(call, out);  // elementwise max(self, other)
        return Reduce(call, out);
      case ReceptiveRule::kReduce:
        return Reduce(call, out);
      case ReceptiveRule::kGeneric:
      case ReceptiveRule::kSource:  // fills make sources before any rule
      case ReceptiveRule::kUnbind:  // pieces: one rule per output (Piece)
      case ReceptiveRule::kSplit:
        break;
    }
    return Generic(call, out);
  }

  // Convolution, pooling and upsampling windows over the trailing k dims of
  // argument 0; k_eff = dilation (k - 1) + 1:
  //   rf' = rf + (k_eff - 1) jump, jump' = jump * stride, padding' = padding + p * jump.
  Layout Slide(const OpCall& call, const TensorMeta& out, Slider kind, int k) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return Generic(call, out);
    const TensorMeta& in = x.tensor();
    Layout l = Get(in);
    if (!l.lost.empty()) return l;
    const int nd = in.ndim;
    if (k <= 0 || nd < k + 1 || out.ndim != nd) {
      return Lost(absl::StrCat(N(call.name), ": unexpected shapes for a ", k, "-d window; not followed"));
    }
    const bool weak = l.weak;
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
          return Lost(
              absl::StrCat(N(call.name), " slides over dim ", d, ", which is not an identifiable spatial axis"));
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
  static void Transposed(Window& w, int64_t k, int64_t s, int64_t p, int64_t d) {
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
  Layout Pad(const OpCall& call, const TensorMeta& out) {
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

  Layout Permute(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor() || x.tensor().ndim != out.ndim) return Generic(call, out);
    Layout in = Get(x.tensor());
    if (!in.lost.empty()) return in;
    const int nd = out.ndim;
    std::vector<int64_t> order(nd);
    std::iota(order.begin(), order.end(), 0);
    if (call.name == "aten::permute" || call.name == "aten::permute_copy") {
      const ArgMeta& dims = call.arg(1);
      if (dims.kind != ArgKind::kIntList || static_cast<int>(dims.ints().size()) != nd) return Generic(call, out);
      for (int i = 0; i < nd; ++i) order[i] = Wrap(dims.ints()[i], nd);
    } else if (nd >= 2) {  // transpose(self, dim0, dim1); t() swaps the two dims of a matrix
      const int64_t a = call.arg(1).kind == ArgKind::kInt ? Wrap(call.arg(1).to_int(), nd) : 0;
      const int64_t b = call.arg(2).kind == ArgKind::kInt ? Wrap(call.arg(2).to_int(), nd) : 1;
      if (a < 0 || b < 0 || a >= nd || b >= nd) return Generic(call, out);
      std::swap(order[a], order[b]);
    }
    Layout l = in;
    for (int i = 0; i < nd; ++i) {
      if (order[i] < 0 || order[i] >= nd) return Generic(call, out);
      l.dims[i] = in.dims[order[i]];
    }
    return l;
  }

  // Views between shapes of the same elements: the input's parts, in
  // row-major order, are regrouped into the output's dims.
  Layout Reshape(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return Generic(call, out);
    Layout in = Get(x.tensor());
    if (!in.lost.empty()) return in;
    struct Atom {
      int64_t size;
      int32_t axis;
      Dim::State state;
      std::vector<Part> origin;  // kTokens / kMixed: the dim's parts
    };
    std::vector<Atom> atoms;
    for (const Dim& d : in.dims) {
      if (d.state == Dim::State::kClean) {
        for (const Part& p : d.parts) {
          if (p.size != 1) atoms.push_back({p.size, p.axis, d.state, {}});
        }
      } else if (d.size != 1) {
        atoms.push_back({d.size, -1, d.state, d.parts});
      }
    }
    Layout l;
    l.weak = in.weak;
    l.axes = in.axes;
    size_t ai = 0;
    auto regroup_lost = [&](const Atom& a, int64_t want) {
      return Lost(absl::StrCat(N(call.name), " splits a spatial axis (", a.size,
                               " positions) across dims in pieces of ", want,
                               " (e.g. a window partition); the positions are regrouped; not followed"));
    };
    for (int32_t j = 0; j < out.ndim; ++j) {
      int64_t remaining = out.size(j);
      Dim dim;
      dim.size = remaining;
      dim.parts.clear();
      Dim::State state = Dim::State::kClean;
      std::vector<Part> origin;
      while (remaining > 1) {
        if (ai >= atoms.size()) return Lost(absl::StrCat(N(call.name), ": sizes do not match; not followed"));
        Atom& a = atoms[ai];
        int64_t take = a.size;
        if (remaining % a.size != 0) {
          take = std::gcd(a.size, remaining);
          if (take == 1) return Lost(absl::StrCat(N(call.name), ": sizes do not regroup; not followed"));
        }
        if (take < a.size && a.state == Dim::State::kClean && a.axis >= 0) return regroup_lost(a, take);
        if (a.state != Dim::State::kClean) {
          state =
              a.state == Dim::State::kTokens || state == Dim::State::kTokens ? Dim::State::kTokens : Dim::State::kMixed;
          origin.insert(origin.end(), a.origin.begin(), a.origin.end());
          dim.parts.push_back({take, -1});
        } else {
          dim.parts.push_back({take, a.axis});
        }
        remaining /= take;
        a.size /= take;
        if (a.size == 1) ++ai;
      }
      if (dim.parts.empty()) dim.parts.push_back({out.size(j), -1});
      if (state != Dim::State::kClean) {
        // Clean parts joining tokens become tokens too; their axes are kept for the record.
        for (const Part& p : dim.parts) {
          if (p.axis >= 0) origin.push_back(p);
        }
        if (state == Dim::State::kMixed && !origin.empty()) state = Dim::State::kTokens;
        dim.parts = origin.empty() ? std::vector<Part>{{out.size(j), -1}} : origin;
      }
      dim.state = state;
      l.dims.push_back(std::move(dim));
    }
    if (ai < atoms.size()) return Lost(absl::StrCat(N(call.name), ": sizes do not match; not followed"));
    return l;
  }

  // slice(self, dim, start, end, step) along a spatial axis: output o is input
  // start + o*step, so padding' = padding - start*jump and jump' = jump*step.
  // Also one piece of split/chunk (`start` given, step 1).
  Layout Slice(const OpCall& call, const TensorMeta& out, int64_t start, bool from_args, int64_t dim = 0) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor() || x.tensor().ndim != out.ndim) return Generic(call, out);
    const TensorMeta& in = x.tensor();
    Layout l = Get(in);
    if (!l.lost.empty()) return l;
    int64_t step = 1;
    if (from_args) {
      dim = call.arg(1).kind == ArgKind::kInt ? call.arg(1).to_int() : 0;
      start = call.arg(2).kind == ArgKind::kInt ? call.arg(2).to_int() : 0;
      step = call.arg(4).kind == ArgKind::kInt ? std::max<int64_t>(call.arg(4).to_int(), 1) : 1;
    }
    const int64_t d = Wrap(dim, out.ndim);
    if (d < 0 || d >= out.ndim) return Generic(call, out);
    const int64_t size = in.size(d);
    if (start < 0) start += size;
    start = std::clamp<int64_t>(start, 0, size);
    if (out.size(d) == size && start == 0) return l;  // the whole dim
    Dim& D = l.dims[d];
    const int32_t id = D.axis();
    if (id >= 0) {
      Window& w = l.axes[id];
      w.padding -= static_cast<double>(start) * w.jump;
      w.jump *= static_cast<double>(step);
      D = OfAxis(out.size(d), id);
    } else if (Involved(D)) {
      D.state = Dim::State::kTokens;  // some of the tokens: no view can split them back
      D.size = out.size(d);
    } else {
      D = Plain(out.size(d), D.state);
    }
    return l;
  }

  // select(self, dim, index): one position; a spatial axis leaves the dims.
  Layout Select(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor() || x.tensor().ndim != out.ndim + 1 || call.arg(1).kind != ArgKind::kInt) {
      return Generic(call, out);
    }
    Layout l = Get(x.tensor());
    if (!l.lost.empty()) return l;
    const int64_t d = Wrap(call.arg(1).to_int(), x.tensor().ndim);
    if (d < 0 || d >= x.tensor().ndim) return Generic(call, out);
    l.dims.erase(l.dims.begin() + d);
    return l;
  }

  // One output of split / split_with_sizes / unbind / chunk along a dim.
  Layout Piece(const OpCall& call, const TensorMeta& out, int64_t& offset) {
    const ArgMeta& x = call.arg(0);
    const ReceptiveRule rule = TraitsOf(call.name).receptive;
    const bool unbind = rule == ReceptiveRule::kUnbind;
    const bool split = rule == ReceptiveRule::kSplit;
    if (!x.is_tensor() || (!unbind && !split)) return Generic(call, out);
    const size_t dim_arg = unbind ? 1 : 2;
    const int64_t dim = call.arg(dim_arg).kind == ArgKind::kInt ? call.arg(dim_arg).to_int() : 0;
    const TensorMeta& in = x.tensor();
    const int64_t d = Wrap(dim, in.ndim);
    if (d < 0 || d >= in.ndim) return Generic(call, out);
    if (unbind) {
      if (out.ndim + 1 != in.ndim) return Generic(call, out);
      Layout l = Get(in);
      if (l.lost.empty()) l.dims.erase(l.dims.begin() + d);
      return l;
    }
    const int64_t start = offset;
    offset += out.ndim > d ? out.size(d) : 0;
    return Slice(call, out, start, false, d);
  }

  // Ops that keep positions where they keep the shape: elementwise math,
  // activations, norms (their statistics are left out, as in the usual
  // receptive-field arithmetic), dropout, copies, expand, cat. Inputs are
  // aligned from the trailing dim (broadcasting); the windows of the axes an
  // input holds at the output's positions join. A dim of size 1 broadcast
  // adds nothing: as in the usual arithmetic, a squeeze-excite gate does not
  // widen the field.
  // cat_dim: the dim cat joins along. A dim that holds spatial positions and
  // changes size in a way not listed above cannot be followed.
  Layout Generic(const OpCall& call, const TensorMeta& out, int64_t cat_dim = -1, size_t first_arg = 0) {
    bool weak = false;
    const auto sources = Sources(TensorArgs(call, first_arg), &weak);
    Layout l;
    l.weak = weak;
    l.dims.assign(out.ndim, Dim{});
    std::vector<bool> filled(out.ndim, false);
    bool cat_tokens = false;
    std::vector<Part> cat_parts;
    for (const TensorMeta* t : sources) {
      Layout in = Get(*t);
      if (!in.lost.empty()) return in;
      // The windows of the axes this input holds at the output's positions join.
      auto join = [&](const Dim& D) {
        for (const Part& p : D.parts) {
          if (p.axis < 0) continue;
          auto it = l.axes.find(p.axis);
          const Window& w = in.axes[p.axis];
          l.axes[p.axis] = it == l.axes.end() ? w : Join(it->second, w);
        }
      };
      const int64_t off = static_cast<int64_t>(out.ndim) - t->ndim;
      for (int32_t di = 0; di < t->ndim; ++di) {
        const Dim& D = in.dims[di];
        const int64_t d = di + off;
        if (d < 0) {
          if (Involved(D))
            return Lost(absl::StrCat(N(call.name), " drops dim ", di, ", which holds spatial positions"));
          continue;
        }
        if (d == cat_dim) {
          if (D.axis() >= 0) return Lost(absl::StrCat(N(call.name), " joins tensors along spatial dim ", d));
          if (Involved(D)) {
            join(D);
            cat_tokens = true;
            cat_parts.insert(cat_parts.end(), D.parts.begin(), D.parts.end());
          }
          continue;
        }
        if (t->size(di) == out.size(d)) {
          join(D);
          if (!filled[d]) {
            l.dims[d] = D;
            filled[d] = true;
          } else if (!Same(l.dims[d], D)) {
            return Lost(absl::StrCat(N(call.name), ": its inputs disagree on what dim ", d, " holds"));
          } else if (!Involved(l.dims[d]) && D.state == Dim::State::kMixed) {
            l.dims[d].state = Dim::State::kMixed;
          }
        } else if (t->size(di) != 1 && Involved(D)) {
          return Lost(absl::StrCat(N(call.name), " changes the size of dim ", d, ", which holds spatial positions"));
        }
      }
    }
    for (int32_t d = 0; d < out.ndim; ++d) {
      if (d == cat_dim && cat_tokens) {
        l.dims[d] = Dim{cat_parts, out.size(d), Dim::State::kTokens};
      } else if (!filled[d] || d == cat_dim) {
        l.dims[d] = Plain(out.size(d));
      }
    }
    return l;
  }

  // Every output value reads all positions of `summed` (dims the op sums
  // over). A spatial axis summed over is not a window; token dims summed over
  // (attention) make every token dim of the result mixed.
  static Layout Mix(Layout l, const std::vector<Dim>& summed, absl::string_view name) {
    for (const Dim& c : summed) {
      if (!Involved(c)) continue;
      if (l.weak) continue;  // a guessed axis of an untracked tensor: the guess was wrong
      if (c.axis() >= 0) return Lost(absl::StrCat(name, " sums over a spatial axis: its positions are mixed"));
      for (const Part& p : c.parts) {
        if (p.axis >= 0) l.axes[p.axis].known = false;
      }
      for (Dim& d : l.dims) {
        if (d.axis() >= 0) return Lost(absl::StrCat(name, " mixes tokens into a spatial axis; not followed"));
        if (Involved(d)) {
          d.state = Dim::State::kTokens;
          for (const Part& p : d.parts) {
            if (p.axis >= 0) l.axes[p.axis].known = false;
          }
        }
      }
    }
    return l;
  }

  // linear(input, weight): (..., K) -> (..., N); mm/bmm/matmul/addmm: (..., M, K) @ (..., K, N).
  Layout Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear) {
    const ArgMeta &a = call.arg(ia), &b = call.arg(ib);
    if (!a.is_tensor() || !b.is_tensor() || out.ndim < 1 || a.tensor().ndim < (linear ? 1 : 2) || b.tensor().ndim < 2 ||
        a.tensor().nested || b.tensor().nested) {
      return Generic(call, out);
    }
    const TensorMeta &ta = a.tensor(), &tb = b.tensor();
    const bool sa = Strong(ta), sb = Strong(tb);
    const bool use_a = sa || !sb, use_b = !linear && (sb || !sa);
    Layout la = Get(ta), lb = Get(tb);
    if (use_a && !la.lost.empty()) return la;
    if (use_b && !lb.lost.empty()) return lb;
    Layout l;
    l.weak = !(sa || sb);
    for (int32_t d = 0; d < out.ndim; ++d) l.dims.push_back(Plain(out.size(d)));
    std::vector<Dim> summed;
    auto take = [&](const Layout& src, int32_t from, int64_t to) {
      if (to < 0 || to >= out.ndim || from < 0) return true;
      if (src.dims[from].size != out.size(to)) return src.dims[from].size == 1 || !Involved(src.dims[from]);
      if (Involved(l.dims[to]) && !Same(l.dims[to], src.dims[from])) return false;
      if (!Involved(l.dims[to])) l.dims[to] = src.dims[from];
      return true;
    };
    if (use_a) {
      for (const auto& [id, w] : la.axes) l.axes[id] = w;
      const int32_t na = ta.ndim;
      // Rows (and batch dims) keep their place counted from the end; the last dim is summed.
      for (int32_t d = 0; d < na - 1; ++d) {
        if (!take(la, d, d + out.ndim - na)) {
          return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
        }
      }
      summed.push_back(la.dims[na - 1]);
    }
    if (use_b) {
      for (const auto& [id, w] : lb.axes) {
        auto it = l.axes.find(id);
        l.axes[id] = it == l.axes.end() ? w : Join(it->second, w);
      }
      const int32_t nb = tb.ndim;
      // Batch dims align from the end; the last dim becomes the output's last; dim -2 is summed.
      for (int32_t d = 0; d < nb - 2; ++d) {
        if (!take(lb, d, out.ndim - 2 - (nb - 2) + d)) {
          return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
        }
      }
      if (!take(lb, nb - 1, out.ndim - 1)) {
        return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
      }
      summed.push_back(lb.dims[nb - 2]);
    }
    return Mix(std::move(l), summed, N(call.name));
  }

  // Attention (q, k, v: (..., L, E), (..., S, E), (..., S, Ev)) -> (..., L, Ev):
  // every query reads all S keys/values. The fused encoder layer and native
  // MHA are self-attention over their first argument's dim -2.
  Layout Attention(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& q = call.arg(0);
    if (!q.is_tensor() || q.tensor().ndim != out.ndim || out.ndim < 2) return Generic(call, out);
    bool weak = false;
    std::vector<const TensorMeta*> ins;
    for (size_t i = 0; i < 3; ++i) {
      if (call.arg(i).is_tensor() && call.arg(i).tensor().ndim == out.ndim) ins.push_back(&call.arg(i).tensor());
    }
    const auto sources = Sources(ins, &weak);
    Layout l = Get(q.tensor());
    if (!l.lost.empty()) return l;
    if (!weak && !Strong(q.tensor())) {
      l = Get(*sources[0]);
      if (!l.lost.empty()) return l;
      for (int32_t d = 0; d < out.ndim; ++d) l.dims[d] = Plain(out.size(d));  // rows of an untracked query
    }
    l.weak = weak;
    l.dims[out.ndim - 1] = Plain(out.size(out.ndim - 1));
    for (int32_t d = 0; d < out.ndim - 1; ++d) {
      if (l.dims[d].size != out.size(d)) l.dims[d] = Plain(out.size(d));
    }
    std::vector<Dim> summed;
    for (const TensorMeta* t : sources) {
      Layout s = Get(*t);
      if (!s.lost.empty()) return s;
      for (const auto& [id, w] : s.axes) {
        auto it = l.axes.find(id);
        l.axes[id] = it == l.axes.end() ? w : Join(it->second, w);
      }
      summed.push_back(s.dims[t->ndim - 2]);
      summed.push_back(s.dims[t->ndim - 1]);
    }
    return Mix(std::move(l), summed, N(call.name));
  }

  // layer_norm / rms_norm over the trailing len(normalized_shape) dims: those
  // are feature dims. A guessed axis of an untracked tensor there was a wrong
  // guess; on tracked tensors the statistics are left out as for other norms.
  Layout Normalize(const OpCall& call, const TensorMeta& out) {
    Layout l = Generic(call, out);
    if (!l.lost.empty() || !l.weak || call.arg(1).kind != ArgKind::kIntList) return l;
    const int64_t n = static_cast<int64_t>(call.arg(1).ints().size());
    for (int64_t d = std::max<int64_t>(out.ndim - n, 0); d < out.ndim; ++d) {
      if (Involved(l.dims[d])) l.dims[d] = Plain(out.size(d), Dim::State::kMixed);
    }
    return l;
  }

  // Ops whose value at a position reads every position along `dim`
  // (softmax, cumulative sums, sort) or moves positions along it (flip, roll).
  Layout MixAlong(const OpCall& call, const TensorMeta& out) {
    Layout l = Generic(call, out);
    if (!l.lost.empty()) return l;
    std::vector<int64_t> dims;
    const absl::string_view name = N(call.name);
    const size_t dim_arg = name == "aten::roll" ? 2 : (name == "aten::sort" && call.overload == "stable") ? 2 : 1;
    const ArgMeta& a = call.arg(dim_arg);
    if (a.kind == ArgKind::kInt) dims.push_back(a.to_int());
    if (a.kind == ArgKind::kIntList) dims.assign(a.ints().begin(), a.ints().end());
    if (dims.empty()) {
      if (name == "aten::sort" || name == "aten::argsort") {
        dims.push_back(-1);
      } else {
        for (int32_t d = 0; d < out.ndim; ++d) dims.push_back(d);  // roll without dims: the flattened tensor
      }
    }
    for (int64_t raw : dims) {
      const int64_t d = Wrap(raw, out.ndim);
      if (d < 0 || d >= out.ndim) continue;
      Dim& D = l.dims[d];
      if (!Involved(D)) continue;
      if (l.weak) {
        D = Plain(D.size, Dim::State::kMixed);
      } else if (D.axis() >= 0) {
        return Lost(absl::StrCat(name, " mixes or moves positions along spatial dim ", d));
      } else {
        D.state = Dim::State::kTokens;
        for (const Part& p : D.parts) {
          if (p.axis >= 0) l.axes[p.axis].known = false;
        }
      }
    }
    return l;
  }

  // Reductions over `dim` (all dims when absent): every position of a
  // reduced axis is read, so its window covers the whole axis (as a global
  // pool: rf += (L-1) jump, jump *= L); keepdim leaves a dim of size 1.
  Layout Reduce(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return Generic(call, out);
    const TensorMeta& in = x.tensor();
    Layout l = Get(in);
    if (!l.lost.empty()) return l;
    const absl::string_view name = N(call.name);
    const size_t dim_arg = (name == "aten::norm" || name == "aten::linalg_vector_norm") ? 2 : 1;
    std::vector<bool> reduced(in.ndim, false);
    const ArgMeta& a = call.arg(dim_arg);
    if (a.kind == ArgKind::kInt) {
      const int64_t d = Wrap(a.to_int(), in.ndim);
      if (d >= 0 && d < in.ndim) reduced[d] = true;
    } else if (a.kind == ArgKind::kIntList && !a.ints().empty()) {
      for (int64_t raw : a.ints()) {
        const int64_t d = Wrap(raw, in.ndim);
        if (d >= 0 && d < in.ndim) reduced[d] = true;
      }
    } else {
      reduced.assign(in.ndim, true);
    }
    const bool keepdim = out.ndim == in.ndim;
    int32_t kept = 0;
    for (int32_t d = 0; d < in.ndim; ++d) kept += reduced[d] ? 0 : 1;
    if (!keepdim && kept != out.ndim) {
      return Lost(absl::StrCat(N(call.name), ": reduced dims do not match the result's shape; not followed"));
    }
    std::vector<Dim> dims;
    for (int32_t d = 0; d < in.ndim; ++d) {
      const Dim& D = l.dims[d];
      if (!reduced[d]) {
        dims.push_back(D);
        continue;
      }
      for (const Part& p : D.parts) {
        if (p.axis >= 0) Absorb(l.axes[p.axis], p.size);
      }
      const int32_t id = D.axis();
      if (keepdim) dims.push_back(id >= 0 ? OfAxis(1, id) : Plain(1));
    }
    l.dims = std::move(dims);
    return l;
  }

  std::unordered_map<uintptr_t, Layout> layouts_;
  int32_t next_axis_ = 3;  // seeds use 0..2
};

}  // namespace

struct FieldFlow::State {
  Propagator p;
};

FieldFlow::FieldFlow() : state_(std::make_unique<State>()) {}
FieldFlow::~FieldFlow() = default;
FieldFlow::FieldFlow(const FieldFlow& other) : state_(std::make_unique<State>(*other.state_)) {}
FieldFlow& FieldFlow::operator=(const FieldFlow& other) {
  state_ = std::make_unique<State>(*other.state_);
  return *this;
}

std::vector<std::optional<Field>> FieldFlow::Run(const BlockLog<Event>& events, size_t begin, size_t end,
                                                 const OperatorPlan& plan, OpCatalog& catalog,
                                                 const std::vector<FieldQuery>& queries) {
  std::vector<size_t> order(queries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return queries[a].before_event < queries[b].before_event; });
  std::vector<std::optional<Field>> answers(queries.size());
  Propagator& p = state_->p;
  size_t next = 0;
  auto answer_until = [&](int64_t event) {
    for (; next < order.size() && queries[order[next]].before_event <= event; ++next) {
      for (uintptr_t id : queries[order[next]].identities) {
        if (auto f = p.Find(id)) {
          answers[order[next]] = std::move(f);
          break;
        }
      }
    }
  };
  for (size_t i = begin; i < end; ++i) {
    answer_until(static_cast<int64_t>(i));
    // A decomposition is followed through its children; one that made no
    // call (flatten of an already flat tensor returns its input) is its own step.
    const bool has_children = i + 1 < end && events[i + 1].parent == static_cast<int32_t>(i);
    if (plan.covered[i] || plan.in_opaque[i] || (plan.kind[i] == CallKind::kDecomposition && has_children)) continue;
    if (events[i].raised()) continue;
    p.Visit(events[i], catalog.Get(events[i].op()));
  }
  answer_until(static_cast<int64_t>(end));
  return answers;
}

std::vector<std::optional<Field>> ComputeFields(const BlockLog<Event>& events, const OperatorPlan& plan,
                                                OpCatalog& catalog, const std::vector<FieldQuery>& queries) {
  FieldFlow flow;
  return flow.Run(events, 0, events.size(), plan, catalog, queries);
}

}  // namespace torchscan
