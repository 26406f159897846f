// The token-flow pass's rules for pieces and joins: split, chunk and unbind
// of a tensor, cat and stack of a tensor list, along the token axis (a
// key/value cache) or another dim (token_flow_pass.h).
#include "torchscan_dispatch/analyses/token_flow_pass.h"

namespace torchscan::token_flow_internal {

// Calls with tensor-list inputs or outputs: cat / stack, split / chunk / unbind.
std::optional<Flow> Pass::Pieces(const OpCall& call, const OpTraits& traits, absl::string_view base, bool& done) {
  const absl::string_view name = N(call.name);
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor()) return std::nullopt;
  const Flow* fp = Get(x.tensor());
  if (fp == nullptr) return std::nullopt;
  const TokenRule rule = traits.token_rule;
  const bool unbind = rule == TokenRule::kUnbind;
  const bool split = rule == TokenRule::kSplit;
  if (!unbind && !split) return std::nullopt;
  const TensorMeta& in = x.tensor();
  const size_t dim_arg = unbind ? 1 : 2;
  const int64_t d = Wrap(call.arg(dim_arg).kind == ArgKind::kInt ? call.arg(dim_arg).to_int() : 0, in.ndim);
  Flow r = *fp;
  if (r.lost.empty() && d == r.dim) r = Lost(absl::StrCat(name, " splits the token axis; not followed"));
  if (r.lost.empty() && Marked(r.mixed, d) && call.outputs[0].tensors().size() > 1) {
    r = Lost(absl::StrCat(name, kMixedPart));
  }
  if (r.lost.empty() && unbind && d < r.dim) --r.dim;
  if (r.lost.empty() && unbind) r.mixed = RemoveDim(r.mixed, d);
  for (const TensorMeta& t : call.outputs[0].tensors()) {
    if (t.defined) Set(t.identity, r);
  }
  done = true;
  return std::nullopt;
}

bool Pass::SameDeps(const Flow& a, const Flow& b) {
  if (a.length != b.length || a.deps.size() != b.deps.size()) return false;
  for (const auto& [source, rows] : a.deps) {
    auto it = b.deps.find(source);
    if (it == b.deps.end() || rows->lo != it->second->lo || rows->hi != it->second->hi) return false;
  }
  return true;
}

Flow Pass::Join(const OpCall& call, const TensorMeta& out, absl::string_view base) {
  const ArgMeta& list = call.arg(0);
  const int64_t d = call.arg(1).kind == ArgKind::kInt ? call.arg(1).to_int() : 0;
  const bool stack = base == "stack";
  const int64_t dim = Wrap(d, stack ? out.ndim : out.ndim);
  Flow r;
  bool any = false;
  if (!stack) {
    bool along = false;
    for (const TensorMeta& t : list.tensors()) {
      const Flow* f = t.defined ? Get(t) : nullptr;
      along = along || (f != nullptr && f->lost.empty() && f->dim == dim);
    }
    if (along) return Along(call, out, dim);
  }
  // Pieces that are not all the same one position (a piece of no input
  // position, or pieces reading different positions) joined along a size-1
  // dim other than a one-position piece's own: along its token axis or
  // along another dim, which give different relations and which its place
  // cannot tell apart (Note [A token axis of one position]).
  bool alike = true;
  const Flow* first = nullptr;
  for (const TensorMeta& t : list.tensors()) {
    if (!t.defined || t.numel() == 0) continue;
    const Flow* f = Get(t);
    if (f == nullptr || !f->lost.empty()) {
      alike = alike && f != nullptr;
      continue;
    }
    if (first == nullptr) first = f;
    alike = alike && SameDeps(*f, *first);
  }
  for (const TensorMeta& t : list.tensors()) {
    if (!t.defined) continue;
    const Flow* f = Get(t);
    if (f == nullptr) continue;
    if (!f->lost.empty()) return *f;
    const bool size_one_here = stack || (t.ndim == out.ndim && t.size(dim) == 1);
    if (!alike && f->length == 1 && size_one_here && out.size(dim) > 1) {
      return Lost(absl::StrCat(N(call.name),
                               " joins one position along a size-1 dim that may be its token axis; "
                               "not followed"));
    }
    int64_t od = f->dim;
    if (stack) {
      od += f->dim >= dim ? 1 : 0;
    } else {
      od = f->dim + (out.ndim - t.ndim);
    }
    if (auto err = Add(r, any, *f, od, out, N(call.name))) return Lost(*err);
    r.mixed |= stack ? InsertDim(f->mixed, dim) : AlignMarks(f->mixed, t.ndim, out.ndim);
  }
  if (!alike) r.mixed |= DimBit(dim);  // pieces reading different inputs side by side
  marks_done_ = true;
  return r;
}

// cat along the token axis (a key/value cache's earlier positions, then
// this call's): output positions are the inputs' in order; positions of
// an untracked tensor (held from earlier calls) read none of the inputs.
Flow Pass::Along(const OpCall& call, const TensorMeta& out, int64_t dim) {
  Flow r;
  r.dim = static_cast<int32_t>(dim);
  r.length = out.size(dim);
  std::map<int32_t, TokenRows> rows;
  int64_t offset = 0;
  for (const TensorMeta& t : call.arg(0).tensors()) {
    if (!t.defined || t.numel() == 0) continue;  // cat skips empty tensors
    if (t.ndim != out.ndim) return Lost(absl::StrCat(N(call.name), ": unexpected shapes; not followed"));
    const Flow* f = Get(t);
    if (f != nullptr) {
      if (!f->lost.empty()) return *f;
      // One position of size 1 along the joined token axis is one position of
      // it, whatever dim holds it (Note [A token axis of one position]).
      if (f->dim != dim && !(f->length == 1 && t.size(dim) == 1)) {
        return Lost(absl::StrCat(N(call.name), " joins token positions with another dim's; not followed"));
      }
      for (const auto& [source, d] : f->deps) {
        auto& into = rows.try_emplace(source, TokenRows::None(r.length)).first->second;
        for (int64_t k = 0; k < d->rows() && offset + k < r.length; ++k) {
          into.lo[offset + k] = d->lo[k];
          into.hi[offset + k] = d->hi[k];
        }
      }
    }
    offset += t.size(dim);
  }
  if (offset != r.length) return Lost(absl::StrCat(N(call.name), ": unexpected shapes; not followed"));
  for (auto& [source, d] : rows) r.deps[source] = Share(std::move(d));
  return r;
}

}  // namespace torchscan::token_flow_internal
