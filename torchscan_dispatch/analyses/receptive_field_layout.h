// The receptive-field pass's internals, shared by its files: layouts (what
// each dim of a tensor holds), the functions every rule uses, and the
// propagator. receptive_field.cc walks the calls and picks each call's rule
// (its row in formulas/op_traits.cc); receptive_field_windows.cc holds the
// sliding windows (convolution, pooling, upsampling, padding) and
// receptive_field_shapes.cc the rules that move, mix or reduce dims.
// Nothing here is part of the analysis's API (receptive_field.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/op_traits.h"
#include "torchscan_dispatch/analyses/receptive_field.h"

namespace torchscan::receptive_field_internal {

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

inline Dim Plain(int64_t size, Dim::State state = Dim::State::kClean) { return {{{size, -1}}, size, state}; }
inline Dim OfAxis(int64_t size, int32_t axis) { return {{{size, axis}}, size, Dim::State::kClean}; }

// Same meaning: both hold no spatial positions, or the same parts the same way.
inline bool Same(const Dim& a, const Dim& b) {
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
inline Window Join(const Window& a, const Window& b) {
  Window w;
  w.padding = std::max(a.padding, b.padding);
  w.rf = std::max(a.rf - a.padding, b.rf - b.padding) + w.padding;
  w.jump = std::max(a.jump, b.jump);  // equal for same-sized outputs; legacy choice otherwise
  w.known = a.known && b.known;
  return w;
}

// Whole-axis dependence (a reduction, a global pool over L positions).
inline void Absorb(Window& w, int64_t length) {
  w.rf += static_cast<double>(length - 1) * w.jump;
  w.jump *= static_cast<double>(length);
}

// Note [Weak layouts]
// A layout derived from untracked tensors only (model inputs before any
// seed, parameters, buffers, constants) is weak: its dims are guesses. Where
// a call mixes a weak and a tracked input the tracked one decides
// (Propagator::Sources); a window over a weak layout declares the axes it
// slides over (receptive_field_windows.cc), and a product of two weak
// operands stays weak (receptive_field_shapes.cc).
struct Layout {
  bool weak = false;  // derived from untracked tensors only (model inputs, parameters, buffers)
  std::string lost;   // non-empty: spatial positions the data flow cannot follow, and where
  std::vector<Dim> dims;
  std::map<int32_t, Window> axes;  // every axis in this tensor's history, reduced ones too
};

inline constexpr const char* kTokensMixed =
    "the positions are tokens (concatenated, or mixed by attention or a product over tokens); token relations "
    "are the layer's token_dependencies (token-dependency analysis), not a receptive field";

inline Layout Lost(std::string why) {
  Layout l;
  l.lost = std::move(why);
  return l;
}

inline absl::string_view N(std::string_view s) { return {s.data(), s.size()}; }

inline int64_t Wrap(int64_t d, int64_t n) { return d < 0 ? d + n : d; }

// The value for spatial axis a from an int[] argument (one value applies to all).
inline double Param(const ArgMeta& arg, int a, double fallback) {
  if (arg.kind == ArgKind::kInt) return static_cast<double>(arg.to_int());
  if (arg.kind != ArgKind::kIntList || arg.ints().empty()) return fallback;
  const auto v = arg.ints();
  return static_cast<double>(v.size() == 1 ? v[0] : v[std::min<size_t>(a, v.size() - 1)]);
}

// "aten::max_pool2d_with_indices" -> 2; fallback when the name has no "1d"/"2d"/"3d".
inline int NameAxes(absl::string_view name, int fallback) {
  for (int k = 1; k <= 3; ++k) {
    if (absl::StrContains(name, absl::StrCat(k, "d"))) return k;
  }
  return fallback;
}

inline bool Involved(const Dim& d) { return d.spatial() || d.state == Dim::State::kTokens; }

enum class Slider { kConv, kMaxPool, kAvgPool, kAdaptive, kUpsample };

class Propagator {
 public:
  void Visit(const Event& e, const OpInfo& info);

  std::optional<Field> Find(uintptr_t identity) const {
    auto it = layouts_.find(identity);
    if (it == layouts_.end()) return std::nullopt;
    return Report(it->second);
  }

 private:
  static Field Report(const Layout& l);

  bool Strong(const TensorMeta& t) const {
    auto it = layouts_.find(t.identity);
    return it != layouts_.end() && !it->second.weak;
  }

  // The walk and the choice of rule (receptive_field.cc).
  Layout Get(const TensorMeta& t) const;
  std::vector<const TensorMeta*> TensorArgs(const OpCall& call, size_t first = 0, size_t last = SIZE_MAX) const;
  std::vector<const TensorMeta*> Sources(std::vector<const TensorMeta*> ins, bool* weak) const;
  Layout Rule(const OpCall& call, const TensorMeta& out, ReceptiveRule rule);
  bool FlatGeneric(const OpCall& call, const TensorMeta& out);
  // Sliding windows (receptive_field_windows.cc).
  Layout Slide(const OpCall& call, const TensorMeta& out, Slider kind, int k);
  static void Transposed(Window& w, int64_t k, int64_t s, int64_t p, int64_t d);
  Layout Pad(const OpCall& call, const TensorMeta& out);
  // Dims moved, mixed or reduced (receptive_field_shapes.cc).
  Layout Permute(const OpCall& call, const TensorMeta& out);
  Layout Reshape(const OpCall& call, const TensorMeta& out);
  Layout Slice(const OpCall& call, const TensorMeta& out, int64_t start, bool from_args, int64_t dim = 0);
  Layout Select(const OpCall& call, const TensorMeta& out);
  Layout Piece(const OpCall& call, const TensorMeta& out, int64_t& offset);
  Layout Generic(const OpCall& call, const TensorMeta& out, int64_t cat_dim = -1, size_t first_arg = 0);
  static Layout Mix(Layout l, const std::vector<Dim>& summed, absl::string_view name);
  Layout Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear);
  Layout Attention(const OpCall& call, const TensorMeta& out);
  Layout Normalize(const OpCall& call, const TensorMeta& out);
  Layout MixAlong(const OpCall& call, const TensorMeta& out);
  Layout Reduce(const OpCall& call, const TensorMeta& out);

  std::unordered_map<uintptr_t, Layout> layouts_;
  int32_t next_axis_ = 3;  // seeds use 0..2
};

}  // namespace torchscan::receptive_field_internal
