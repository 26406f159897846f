#include "torchscan_dispatch/analyses/receptive_field.h"

#include "torchscan_dispatch/analyses/receptive_field_layout.h"

namespace torchscan {
namespace receptive_field_internal {

void Propagator::Visit(const Event& e, const OpInfo& info) {
  const ResolvedCall rc(e);  // identities followed from call to call
  const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
  // A call with no tensor arguments (at::ones, arange, ...) creates a
  // source, as do fills; its identities may be reused addresses of freed
  // tensors: forget those (a later use seeds them as untracked).
  const bool from_tensors = std::any_of(rc.args().begin(), rc.args().end(), [](const ArgMeta& a) {
    return a.is_tensor() || (a.kind == ArgKind::kTensorList && !a.tensors().empty());
  });
  const absl::string_view name = info.name;
  const ReceptiveRule rule = info.traits.receptive;
  if (!from_tensors || rule == ReceptiveRule::kSource) {
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
  if (rule == ReceptiveRule::kGeneric && rc.outputs().size() == 1 && FlatGeneric(call, out)) return;
  Layout l = Rule(call, out, rule);
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

Field Propagator::Report(const Layout& l) {
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

// The tracked layout, or a seed for an untracked tensor (a model input, a
// parameter): (N, C, spatial...) with each position seeing itself. The
// seed's axes are a guess that an op can revise (a convolution declares
// which dims are spatial; linear and layer_norm declare feature dims).
Layout Propagator::Get(const TensorMeta& t) const {
  // A wrapped Python number may sit at a tracked tensor's freed address
  // (Note [Reused identities]): it is a constant, never that tensor.
  auto it = t.wrapped ? layouts_.end() : layouts_.find(t.identity);
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

std::vector<const TensorMeta*> Propagator::TensorArgs(const OpCall& call, size_t first, size_t last) const {
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

// Generic's result where every input it reads holds plain dims only (no
// spatial part, no tokens, nothing lost): the output's dims are all plain.
// Most calls of a model without spatial inputs are such; this stores that
// result in the output's slot, reusing its memory, instead of copying each
// input's layout. False (nothing changed): Generic must decide.
bool Propagator::FlatGeneric(const OpCall& call, const TensorMeta& out) {
  auto plain = [&](const TensorMeta& t) {
    auto it = t.wrapped ? layouts_.end() : layouts_.find(t.identity);
    if (it == layouts_.end()) return t.ndim <= 2;  // Get's seed: no spatial axes below 3 dims
    const Layout& l = it->second;
    if (!l.lost.empty() || static_cast<int32_t>(l.dims.size()) != t.ndim) return false;
    for (int32_t d = 0; d < t.ndim; ++d) {
      const Dim& D = l.dims[d];
      if (D.size != t.size(d) || D.state != Dim::State::kClean || D.parts.size() != 1 || D.parts[0].axis >= 0 ||
          D.parts[0].size != D.size) {
        return false;
      }
    }
    return true;
  };
  // As Sources over TensorArgs: the strong inputs when there are any, else all.
  bool any_strong = false, strong_plain = true, all_plain = true;
  auto visit = [&](const TensorMeta& t) {
    if (!t.defined || t.nested) return;
    const bool is_plain = plain(t);
    all_plain = all_plain && is_plain;
    if (Strong(t)) {
      any_strong = true;
      strong_plain = strong_plain && is_plain;
    }
  };
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor()) visit(a.tensor());
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& t : a.tensors()) visit(t);
    }
  }
  if (!(any_strong ? strong_plain : all_plain)) return false;
  Layout& slot = layouts_[out.identity];
  slot.weak = !any_strong;
  slot.lost.clear();
  slot.axes.clear();
  slot.dims.resize(out.ndim);
  for (int32_t d = 0; d < out.ndim; ++d) {
    Dim& D = slot.dims[d];
    D.parts.assign(1, Part{out.size(d), -1});
    D.size = out.size(d);
    D.state = Dim::State::kClean;
  }
  return true;
}

// Untracked inputs (parameters, position embeddings, constants) add no
// positions where a tracked input exists; only when nothing is tracked do
// the seeds speak (the model's inputs).
// See Note [Weak layouts].
std::vector<const TensorMeta*> Propagator::Sources(std::vector<const TensorMeta*> ins, bool* weak) const {
  std::vector<const TensorMeta*> strong;
  for (const TensorMeta* t : ins) {
    if (Strong(*t)) strong.push_back(t);
  }
  *weak = strong.empty();
  return *weak ? ins : strong;
}

// The rule is the operator's row in formulas/op_traits.cc.
Layout Propagator::Rule(const OpCall& call, const TensorMeta& out, ReceptiveRule rule) {
  const absl::string_view name = N(call.name);
  switch (rule) {
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

}  // namespace receptive_field_internal

using receptive_field_internal::Propagator;

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
