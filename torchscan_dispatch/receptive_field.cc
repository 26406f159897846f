#include "torchscan_dispatch/receptive_field.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "absl/strings/match.h"

namespace torchscan {
namespace {

int SpatialAxes(const TensorMeta& t) { return t.defined && !t.nested ? std::clamp<int>(t.ndim - 2, 0, 3) : 0; }

// Size of spatial axis a (0-based among the trailing `axes`) of t.
int64_t AxisSize(const TensorMeta& t, int axes, int a) { return t.size(t.ndim - axes + a); }

// The value for spatial axis a from an int[] argument (one value applies to all).
double Param(const ArgMeta& arg, int a, double fallback) {
  if (arg.kind != ArgKind::kIntList || arg.ints().empty()) return fallback;
  const auto v = arg.ints();
  return static_cast<double>(v.size() == 1 ? v[0] : v[std::min<size_t>(a, v.size() - 1)]);
}

class Propagator {
 public:
  Field FieldOf(const TensorMeta& t) {
    auto it = fields_.find(t.identity);
    if (it != fields_.end()) return it->second;
    Field fresh;  // a model input (or a parameter): each position sees itself
    fresh.axes = SpatialAxes(t);
    for (int a = 0; a < fresh.axes; ++a) fresh.rf[a] = 1, fresh.jump[a] = 1, fresh.padding[a] = 0;
    return fresh;
  }

  void Visit(const Event& e, const OpInfo& info) {
    if (e.outputs.empty() || !e.outputs[0].is_tensor()) return;
    const TensorMeta& out = e.outputs[0].tensor();
    const absl::string_view name = info.name;
    const OpCall call{info.name, info.overload, e.args, e.outputs};
    // A call with no tensor arguments (at::ones, arange, ...) creates a
    // source: each of its positions sees itself, as a model input does. Its
    // identities may be reused addresses of freed tensors: forget those.
    const bool from_tensors = std::any_of(e.args.begin(), e.args.end(), [](const ArgMeta& a) {
      return a.is_tensor() || (a.kind == ArgKind::kTensorList && !a.tensors().empty());
    });
    if (!from_tensors) {
      for (const ArgMeta& o : e.outputs) {
        if (o.is_tensor()) fields_.erase(o.tensor().identity);
      }
      return;
    }
    Field f;
    if (name == "aten::convolution" || name == "aten::_convolution") {
      f = Window(call, out, /*kernel from weight*/ true, 3, 4, 5, call.arg(6).kind == ArgKind::kBool && call.arg(6).to_bool());
    } else if (absl::StartsWith(name, "aten::max_pool")) {
      f = Window(call, out, false, 2, 3, 4, false);
    } else if (absl::StartsWith(name, "aten::avg_pool")) {
      f = Window(call, out, false, 2, 3, -1, false);
    } else if (absl::StrContains(name, "adaptive_") && absl::StrContains(name, "_pool")) {
      f = Adaptive(call, out);
    } else if (absl::StartsWith(name, "aten::upsample_") || absl::StartsWith(name, "aten::_upsample_")) {
      f = Upsample(call, out, absl::StrContains(name, "bicubic") ? 4 : absl::StrContains(name, "nearest") ? 1 : 2);
    } else {
      f = Union(call, out);
    }
    for (const ArgMeta& o : e.outputs) {
      if (o.is_tensor()) fields_[o.tensor().identity] = f;
    }
  }

  std::optional<Field> Find(uintptr_t identity) const {
    auto it = fields_.find(identity);
    if (it == fields_.end()) return std::nullopt;
    return it->second;
  }

 private:
  // The data input's field (argument 0), and an output field over the
  // spatial axes both keep; false when argument 0 is not a tensor.
  bool Begin(const OpCall& call, const TensorMeta& out, Field& in, Field& f) {
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return false;
    in = FieldOf(x.tensor());
    f.axes = std::min(in.axes, SpatialAxes(out));
    return true;
  }

  // Convolution/pooling windows: k_eff = dilation (k - 1) + 1;
  //   rf' = rf + (k_eff - 1) jump, jump' = jump * stride, padding' = padding + p * jump.
  // Transposed convolutions step by 1/stride input positions and an output
  // sees ceil(k_eff / stride) of them.
  Field Window(const OpCall& call, const TensorMeta& out, bool weight_kernel, size_t stride_arg, size_t pad_arg,
               int dilation_arg, bool transposed) {
    const ArgMeta& x = call.arg(0);
    Field in, f;
    if (!Begin(call, out, in, f)) return {};
    for (int a = 0; a < f.axes; ++a) {
      double k;
      if (weight_kernel) {
        const ArgMeta& w = call.arg(1);
        if (!w.is_tensor() || w.tensor().ndim < 3) return {};
        k = static_cast<double>(AxisSize(w.tensor(), w.tensor().ndim - 2, a));
      } else {
        k = Param(call.arg(1), a, 1);
      }
      const double stride = Param(call.arg(stride_arg), a, weight_kernel ? 1 : k);  // pooling: stride defaults to k
      const double pad = Param(call.arg(pad_arg), a, 0);
      const double dilation = dilation_arg >= 0 ? Param(call.arg(dilation_arg), a, 1) : 1;
      const double k_eff = dilation * (k - 1) + 1;
      if (transposed) {
        f.jump[a] = in.jump[a] / stride;
        f.rf[a] = in.rf[a] + (std::ceil(k_eff / stride) - 1) * in.jump[a];
        f.padding[a] = in.padding[a];
      } else {
        f.rf[a] = in.rf[a] + (k_eff - 1) * in.jump[a];
        f.jump[a] = in.jump[a] * stride;
        f.padding[a] = in.padding[a] + pad * in.jump[a];
      }
    }
    return f;
  }

  // Adaptive pooling, approximated as a window of ceil(L/O) values stepping
  // floor(L/O) (exact when O divides L; a global pool sees the whole axis).
  Field Adaptive(const OpCall& call, const TensorMeta& out) {
    const ArgMeta& x = call.arg(0);
    Field in, f;
    if (!Begin(call, out, in, f)) return {};
    for (int a = 0; a < f.axes; ++a) {
      const double l = static_cast<double>(AxisSize(x.tensor(), in.axes, a + in.axes - f.axes));
      const double o = static_cast<double>(AxisSize(out, SpatialAxes(out), a + SpatialAxes(out) - f.axes));
      const double k = o > 0 ? std::ceil(l / o) : l, stride = o > 0 ? std::max(1.0, std::floor(l / o)) : 1;
      f.rf[a] = in.rf[a] + (k - 1) * in.jump[a];
      f.jump[a] = in.jump[a] * stride;
      f.padding[a] = in.padding[a];
    }
    return f;
  }

  // Upsampling by s = O / L: outputs step 1/s input positions; nearest sees 1
  // input per axis, linear 2, cubic 4.
  Field Upsample(const OpCall& call, const TensorMeta& out, int neighbours) {
    const ArgMeta& x = call.arg(0);
    Field in, f;
    if (!Begin(call, out, in, f)) return {};
    for (int a = 0; a < f.axes; ++a) {
      const double l = static_cast<double>(AxisSize(x.tensor(), in.axes, a));
      const double o = static_cast<double>(AxisSize(out, f.axes, a));
      f.jump[a] = l > 0 ? in.jump[a] * l / o : in.jump[a];
      f.rf[a] = in.rf[a] + (neighbours - 1) * in.jump[a];
      f.padding[a] = in.padding[a];
    }
    return f;
  }

  // Anything else keeps positions where it keeps the spatial shape: the
  // union of the inputs with the output's trailing spatial sizes (skip
  // connections and concatenations take the widest field); otherwise the
  // spatial structure is gone.
  Field Union(const OpCall& call, const TensorMeta& out) {
    Field f;
    const int axes = SpatialAxes(out);
    if (axes == 0) return f;
    bool any = false;
    auto consider = [&](const TensorMeta& t) {
      if (!t.defined || t.nested || SpatialAxes(t) < axes) return;
      for (int a = 0; a < axes; ++a) {
        if (AxisSize(t, axes, a) != AxisSize(out, axes, a)) return;
      }
      const Field in = FieldOf(t);
      if (in.axes < axes) return;
      for (int a = 0; a < axes; ++a) {
        const int ia = a + in.axes - axes;
        f.rf[a] = any ? std::max(f.rf[a], in.rf[ia]) : in.rf[ia];
        f.jump[a] = any ? std::max(f.jump[a], in.jump[ia]) : in.jump[ia];
        f.padding[a] = any ? std::max(f.padding[a], in.padding[ia]) : in.padding[ia];
      }
      any = true;
    };
    for (const ArgMeta& arg : call.args) {
      if (arg.is_tensor()) consider(arg.tensor());
      if (arg.kind == ArgKind::kTensorList) {
        for (const TensorMeta& t : arg.tensors()) consider(t);
      }
    }
    f.axes = any ? axes : 0;
    return f;
  }

  std::unordered_map<uintptr_t, Field> fields_;
};

}  // namespace

std::vector<std::optional<Field>> ComputeFields(const BlockLog<Event>& events, const OperatorPlan& plan,
                                                OpCatalog& catalog, const std::vector<FieldQuery>& queries) {
  std::vector<size_t> order(queries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return queries[a].before_event < queries[b].before_event; });
  std::vector<std::optional<Field>> answers(queries.size());
  Propagator p;
  size_t next = 0;
  auto answer_until = [&](int64_t event) {
    for (; next < order.size() && queries[order[next]].before_event <= event; ++next) {
      for (uintptr_t id : queries[order[next]].identities) {
        if (auto f = p.Find(id)) {
          answers[order[next]] = f;
          break;
        }
      }
    }
  };
  for (size_t i = 0; i < events.size(); ++i) {
    answer_until(static_cast<int64_t>(i));
    if (plan.covered[i] || plan.in_opaque[i] || plan.kind[i] == CallKind::kDecomposition) continue;
    if (events[i].raised) continue;
    p.Visit(events[i], catalog.Get(events[i].op));
  }
  answer_until(static_cast<int64_t>(events.size()));
  return answers;
}

}  // namespace torchscan
