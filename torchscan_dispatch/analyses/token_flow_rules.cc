// The token-flow pass's rules, one per operator family: elementwise calls,
// products, reshapes, row selections, attention, pieces and joins, and
// calls that mix positions along a dim (token_flow_pass.h). Which rule an
// operator takes is its row in formulas/op_traits.cc, or its name here.
#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "torchscan_dispatch/analyses/token_flow_pass.h"

namespace torchscan::token_flow_internal {

// Elementwise with broadcasting: inputs align from their last dims.
Flow Pass::Elementwise(const OpCall& call, const TensorMeta& out, size_t first_arg) {
  Flow r;
  bool any = false;
  std::optional<std::string> err;
  EachTensor(
      call.args,
      [&](const TensorMeta& t) {
        if (err) return;
        const Flow* f = Get(t);
        if (f == nullptr) return;
        int64_t dim = f->dim + (out.ndim - t.ndim);
        // One position broadcasts along whichever dim holds the others'
        // (Note [A token axis of one position]).
        if (any && dim != r.dim && f->lost.empty() && (f->length == 1 || r.length == 1)) {
          // One position against many on another dim pairs each with every
          // other, as attention's scores do: said, as a product would say it.
          if (f->length != r.length) products_of_tokens = true;
          if (f->length == 1) {
            dim = r.dim;
          } else if (dim >= 0 && dim < out.ndim) {
            r.deps = *Fit(r, out.size(dim));
            r.dim = static_cast<int32_t>(dim);
            r.length = out.size(dim);
          }
        }
        err = Add(r, any, *f, dim, out, N(call.name));
      },
      first_arg);
  if (err) return Lost(*err);
  return r;
}

// Products: linear(x, W, b), mm/bmm/matmul(a, b), addmm/baddbmm(bias, a, b).
Flow Pass::Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear) {
  const ArgMeta &a = call.arg(ia), &b = call.arg(ib);
  if (!a.is_tensor() || !b.is_tensor()) return Lost(absl::StrCat(N(call.name), ": unexpected arguments"));
  const TensorMeta &ta = a.tensor(), &tb = b.tensor();
  const int64_t na = ta.ndim, nb = tb.ndim, no = out.ndim;
  Flow r;
  bool any = false;
  const std::string sums =
      absl::StrCat(N(call.name), " sums over the token axis (a product over positions): not analysed");
  // The summed dims' marks go (Note [Dependencies that differ along another dim]).
  uint64_t marks = 0;
  if (const Flow* f = Get(ta)) {
    if (!f->lost.empty()) return *f;
    if (na == 1 || f->dim == na - 1) return Lost(sums);
    const int64_t dim = linear ? f->dim : f->dim + no - na + (nb == 1 ? 1 : 0);
    if (auto err = Add(r, any, *f, dim, out, N(call.name))) return Lost(*err);
    marks |= AlignMarks(f->mixed & ~DimBit(na - 1), na, linear ? no : no + (nb == 1 ? 1 : 0));
  }
  if (const Flow* f = Get(tb)) {
    if (!f->lost.empty()) return *f;
    if (linear) return Lost(absl::StrCat(N(call.name), ": weights computed from the inputs are not analysed"));
    if (nb == 1 || f->dim == nb - 2) return Lost(sums);
    const int64_t batch_end = na >= 2 ? no - 2 : no - 1;  // the output's last batch dim + 1
    const int64_t dim = f->dim == nb - 1 ? no - 1 : f->dim + batch_end - (nb - 2);
    if (auto err = Add(r, any, *f, dim, out, N(call.name))) return Lost(*err);
    const uint64_t kept = f->mixed & ~DimBit(nb - 2);
    marks |= na >= 2 ? AlignMarks(kept, nb, no) : AlignMarks(RemoveDim(kept, nb - 2), nb - 1, no);
  }
  // The bias: addmm's / baddbmm's first argument, linear's third.
  const ArgMeta& bias = linear ? call.arg(2) : (ia == 1 ? call.arg(0) : ArgMeta::None());
  if (bias.is_tensor() && bias.tensor().defined) {
    if (const Flow* f = Get(bias.tensor())) {
      if (linear) return Lost(absl::StrCat(N(call.name), ": a bias computed from the inputs is not analysed"));
      if (auto err = Add(r, any, *f, f->dim + no - bias.tensor().ndim, out, N(call.name))) return Lost(*err);
      marks |= AlignMarks(f->mixed, bias.tensor().ndim, no);
    }
  }
  r.mixed = marks;
  marks_done_ = true;
  return r;
}

// Views between shapes of the same elements: the token dim must stay one
// dim (the same elements before and after it). unsqueeze and squeeze name
// the dims they add or take away; other views leave a token axis of one
// position ambiguous among the size-1 dims next to it (Note [A token axis
// of one position]).
Flow Pass::Reshape(const OpCall& call, const Flow& f, const TensorMeta& in, const TensorMeta& out) {
  const absl::string_view name = N(call.name);
  if (absl::StartsWith(name, "aten::unsqueeze") && call.arg(1).kind == ArgKind::kInt) {
    const int64_t d = Wrap(call.arg(1).to_int(), out.ndim);
    Flow r = f;
    r.dim = f.dim < d ? f.dim : f.dim + 1;
    return r;
  }
  if (absl::StartsWith(name, "aten::squeeze")) {
    // The size-1 dims it took away (all of them without a dim argument).
    std::vector<int64_t> asked = DimsOf(call.arg(1), in.ndim);
    int32_t removed = 0, removed_before = 0;
    bool token_removed = false;
    for (int32_t d = 0; d < in.ndim; ++d) {
      const bool named = call.arg(1).kind == ArgKind::kNone || std::count(asked.begin(), asked.end(), d) > 0;
      if (!named || in.size(d) != 1) continue;
      ++removed;
      if (d < f.dim) ++removed_before;
      if (d == f.dim) token_removed = true;
    }
    if (!token_removed && in.ndim - removed == out.ndim) {
      Flow r = f;
      r.dim = f.dim - removed_before;
      if (r.dim >= 0 && r.dim < out.ndim && out.size(r.dim) == f.length) return r;
    }
  }
  int64_t before = 1;
  for (int32_t d = 0; d < f.dim; ++d) before *= in.size(d);
  int64_t prod = 1;
  for (int32_t e = 0; e < out.ndim; ++e) {
    if (prod == before && out.size(e) == f.length) {
      Flow r = f;
      r.dim = e;
      if (f.length == 1) r.dim = OnePositionPlace(f.dim, in, e, out);
      return r;
    }
    prod *= out.size(e);
  }
  if (f.length == 1) {
    // A view that moves size-1 dims past others ((1, 4, 1, 8) as (1, 1, 4,
    // 8)) keeps every element on the one position: the size-1 dim nearest
    // where the axis was, counted from the last dims, holds it.
    const int64_t aligned = f.dim + out.ndim - in.ndim;
    int32_t best = -1;
    for (int32_t e = 0; e < out.ndim; ++e) {
      if (out.size(e) == 1 && (best < 0 || std::abs(e - aligned) <= std::abs(best - aligned))) best = e;
    }
    if (best >= 0) {
      Flow r = f;
      r.dim = best;
      return r;
    }
  }
  return Lost(absl::StrCat(name, " merges or splits the token axis with another dim; not followed"));
}

// Where a view puts a token axis of one position that lies on input dim `t`,
// `e` the first output dim it could be (Note [A token axis of one position]).
int32_t Pass::OnePositionPlace(int32_t t, const TensorMeta& in, int32_t e, const TensorMeta& out) {
  // The runs of size-1 dims holding it: in the input `lead` dims before it
  // and `trail` after it, in the output [e, last].
  int32_t lead = 0, trail = 0, last = e;
  while (t - lead - 1 >= 0 && in.size(t - lead - 1) == 1) ++lead;
  while (t + trail + 1 < in.ndim && in.size(t + trail + 1) == 1) ++trail;
  while (last + 1 < out.ndim && out.size(last + 1) == 1) ++last;
  const int32_t kept = last - e + 1, had = lead + 1 + trail;
  if (kept == had) return e + lead;
  const int32_t next = t + trail + 1;
  const bool same_after =
      next < in.ndim ? last + 1 < out.ndim && in.size(next) == out.size(last + 1) : last + 1 == out.ndim;
  if (kept > had) return t == 0 && same_after ? last - trail : std::min(e + lead, last);
  return trail == 0 ? last : std::min(e + lead, last);
}

// Note [A token axis of one position]
// Every element of a tensor whose token axis has one position belongs to
// that position: its dependencies are the same on whichever dim the axis is
// said to lie. Where it lies matters only to a rule that needs it on a given
// dim, and a view cannot always say: (1, 1, 64) viewed as (1, 1, 4, 16)
// could put it on dim 0 or 1, as both are size-1 dims with nothing before
// them. A decoding step's query (one token, batch 1) is such a tensor. So:
// - unsqueeze and squeeze move it by the dims they name. Another view keeps
//   its place in the run of size-1 dims holding it (OnePositionPlace). A
//   run that grew: a token axis on its tensor's first dim, where the dim
//   after the run is unchanged, was a flattened batch and token dim being
//   split again ((1, 3E) -> (1, 1, 3E)), so the place is counted from the
//   run's end; otherwise heads were split off the features after it
//   ((1, 1, E) -> (1, 1, 1, D), (2, 1, D) -> (2, 1, 1, D)), and the place is
//   counted from the run's start. A run that shrank lost dims after the
//   token axis where it had some (heads merged back into the features),
//   else before it (batch and heads merged).
//   Heads folded into the batch and unfolded again ((1, 1, D) -> (1, 1, 1,
//   D), token on dim 1) cannot be told from the second case; attention
//   takes care of it. A view that moves size-1 dims past larger ones
//   ((1, 4, 1, 8) as (1, 1, 4, 8), a transpose written as a view) puts it on
//   the size-1 dim nearest its place counted from the last dims.
// - Attention takes a one-position query, key or value on dim -2 whenever
//   that dim has size 1; a one-position query whose dim -2 holds several
//   rows (heads packed there) is that position in every row, and so is the
//   output when every row reads the same keys (else unavailable). A module
//   call taken as a step takes one position on the dim its relation names.
// - Where the place decides the relation, the pass says so instead of
//   guessing: a one-position piece joined (cat, stack) with pieces that
//   read other positions or none (a key/value past), along a size-1 dim
//   other than the one that holds it, may be joined along its token axis or
//   along another dim, and is unavailable. Pieces that all read the same one
//   position (the halves of a rotary embedding's features) are that
//   position; a one-position piece joined with others along their token
//   axis is one position of it.
// - Elementwise math broadcasts one position along the dim holding another
//   input's positions. One position met by many on another dim pairs each
//   with every other, as explicit attention scores do, and is said to be
//   such (as a product of two token-indexed tensors is, whatever their
//   lengths).
// Without these, a decoding step ended as a false "unavailable" at its
// attention.

// Positions start + r*step of the token axis.
Flow Pass::Rows(const Flow& f, int64_t start, int64_t step, int64_t length) {
  Flow r = f;
  r.length = length;
  for (auto& [source, rows] : r.deps) {
    TokenRows picked = TokenRows::None(length);
    for (int64_t k = 0; k < length; ++k) {
      const int64_t j = start + k * step;
      if (j >= 0 && j < rows->rows()) {
        picked.lo[k] = rows->lo[j];
        picked.hi[k] = rows->hi[j];
      }
    }
    rows = Share(std::move(picked));
  }
  return r;
}

Flow Pass::Attention(const OpCall& call, const TensorMeta& out, const SdpaArgs& at) {
  const absl::string_view name = N(call.name);
  const ArgMeta &q = call.arg(0), &k = call.arg(1), &v = call.arg(2);
  if (!q.is_tensor() || !k.is_tensor() || !v.is_tensor() || q.tensor().ndim < 2 || k.tensor().ndim < 2) {
    return Lost(absl::StrCat(name, ": unexpected arguments"));
  }
  const TensorMeta &tq = q.tensor(), &tk = k.tensor(), &tv = v.tensor();
  const Flow *fq = Get(tq), *fk = Get(tk), *fv = Get(tv);
  for (const Flow* f : {fq, fk, fv}) {
    if (f == nullptr) continue;
    if (!f->lost.empty()) return *f;
  }
  // A query of one position on another size-1 dim, its rows (dim -2) more
  // than one: heads packed into the rows (one token's query heads per
  // key/value head, as Hugging Face packs them when decoding with a mask).
  // Each row is that one position; so is the output, on the same dim, when
  // every row reads the same keys (Note [A token axis of one position]).
  Flow rows_of_one;
  int32_t packed_dim = -1;
  if (fq != nullptr && fq->length == 1 && fq->dim != tq.ndim - 2 && tq.size(-2) > 1 && fq->dim < out.ndim &&
      out.size(fq->dim) == 1) {
    packed_dim = fq->dim;
    rows_of_one = *fq;
    rows_of_one.deps = *Fit(*fq, tq.size(-2));
    rows_of_one.dim = tq.ndim - 2;
    rows_of_one.length = tq.size(-2);
    fq = &rows_of_one;
  }
  const Flow* fs[3] = {fq, fk, fv};
  const TensorMeta* ts[3] = {&tq, &tk, &tv};
  for (int n = 0; n < 3; ++n) {
    // One position on a size-1 dim -2 is there (Note [A token axis of one position]).
    const bool one_position = fs[n] != nullptr && fs[n]->length == 1 && ts[n]->size(-2) == 1;
    if (fs[n] != nullptr && fs[n]->dim != ts[n]->ndim - 2 && !one_position) {
      return Lost(absl::StrCat(name, ": the token positions of its ",
                               n == 0   ? "query"
                               : n == 1 ? "key"
                                        : "value",
                               " are not on dim -2 (the dim it attends over)"));
    }
  }
  const int64_t L = tq.size(-2), S = tk.size(-2);
  const ArgMeta& p = call.arg(at.dropout);
  if (p.kind == ArgKind::kDouble && p.to_double() > 0) {
    return Lost(absl::StrCat(name, ": dropout_p > 0 drops attention weights at random; not analysed"));
  }
  // Note [Visible keys]; SDPA's causal mask is tril(ones(L, S)).
  const ArgMeta& causal = call.arg(at.causal);
  std::vector<TokenRuns> keys = VisibleKeys(L, S, causal.kind == ArgKind::kBool && causal.to_bool());
  const ArgMeta& mask = call.arg(at.mask);
  if (mask.is_tensor() && mask.tensor().defined) {
    auto it = req_.masks.find(mask.tensor().identity);
    if (it == req_.masks.end()) {
      return Lost(absl::StrCat(name,
                               ": its attn_mask is neither an argument nor a buffer of the module call (it "
                               "was computed inside it); mask values, which decide the relation, are not "
                               "recorded"));
    }
    const TokenMask& m = it->second;
    if (std::string why = SdpaMaskProblem(m); !why.empty()) return Lost(absl::StrCat(name, ": attn_mask ", why));
    if (std::string why = WrittenAfterUse(mask.tensor().identity); !why.empty()) {
      return Lost(absl::StrCat(name, ": attn_mask: ", why));
    }
    if ((m.rows != 1 && m.rows != L) || (m.cols != 1 && m.cols != S)) {
      return Lost(absl::StrCat(name, ": attn_mask's last dims (", m.rows, ", ", m.cols, ") do not broadcast to (", L,
                               ", ", S, ")"));
    }
    RestrictKeys(keys, m);
  }
  for (int64_t i = 0; i < L; ++i) {
    if (keys[i].empty()) return Lost(absl::StrCat(name, ": query position ", i, " sees no key (its output is NaN)"));
  }
  // Every row is one interval: the causal range and one interval per mask row.
  const AttentionReads reads = ReadsOf(keys);
  const TokenRows vis = *IntervalRows(reads.value), several = *IntervalRows(reads.key),
                  own = *IntervalRows(reads.query);
  Flow r;
  r.dim = out.ndim - 2;
  r.length = L;
  std::string why;
  // Output i reads the values of its visible keys, and through the softmax
  // (over two or more scores) the keys themselves and query i.
  auto through = [&](const Flow* f, const TokenRows& rel) -> bool {
    if (f == nullptr) return true;
    for (const auto& [source, rows] : f->deps) {
      auto c = ComposeRows(rel, *rows, &why);
      if (!c) return false;
      if (!Unite(r, source, Share(std::move(*c)))) {
        why = "a dependency that is not one interval of positions";
        return false;
      }
    }
    return true;
  };
  if (!through(fv, vis) || !through(fk, several) || !through(fq, own)) {
    return Lost(absl::StrCat(name, ": ", why));
  }
  // Each output element reads whole rows of q and k (their features summed)
  // and one feature of v: q's and k's marks on the features go.
  uint64_t marks = 0;
  for (int n = 0; n < 3; ++n) {
    if (fs[n] == nullptr) continue;
    const uint64_t kept = n < 2 ? fs[n]->mixed & ~DimBit(ts[n]->ndim - 1) : fs[n]->mixed;
    marks |= AlignMarks(kept, ts[n]->ndim, out.ndim);
  }
  marks_done_ = true;
  if (packed_dim >= 0) r = OnePosition(r, packed_dim, name);
  if (r.lost.empty()) r.mixed = marks;
  return r;
}

// `f`'s positions taken as one: sound only when every row reads the same
// positions (the packed heads of one token, none of them causal or masked
// apart), which then are the one position's.
Flow Pass::OnePosition(const Flow& f, int32_t dim, absl::string_view name) {
  Flow r;
  r.dim = dim;
  r.length = 1;
  for (const auto& [source, rows] : f.deps) {
    for (int64_t i = 1; i < rows->rows(); ++i) {
      if (rows->lo[i] != rows->lo[0] || rows->hi[i] != rows->hi[0]) {
        return Lost(absl::StrCat(name, ": the rows of one query position read different keys; not analysed"));
      }
    }
    r.deps[source] = Share({{rows->lo[0]}, {rows->hi[0]}});
  }
  return r;
}

// where(condition, a, b) and masked_fill(a, condition, b): elementwise, but
// an element reads a or b as the condition's value says: where a and b read
// different inputs, the condition's dims of more than one element mark the
// result (Note [Dependencies that differ along another dim]).
Flow Pass::Where(const OpCall& call, const TensorMeta& out) {
  Flow r = Elementwise(call, out);
  if (!r.lost.empty()) return r;
  r.mixed = AlignedMarks(call, out);
  marks_done_ = true;
  const bool fill = N(call.name) != "aten::where";  // masked_fill(a, condition, b)
  const Flow* values[2] = {nullptr, nullptr};
  for (int k = 0; k < 2; ++k) {
    const ArgMeta& a = call.arg(fill ? 2 * k : k + 1);
    if (a.is_tensor() && a.tensor().defined) values[k] = Get(a.tensor());
  }
  const bool alike =
      values[0] == nullptr ? values[1] == nullptr : values[1] != nullptr && SameDeps(*values[0], *values[1]);
  const ArgMeta& c = call.arg(fill ? 1 : 0);
  if (alike || !c.is_tensor() || !c.tensor().defined) return r;
  const TensorMeta& cond = c.tensor();
  for (int64_t k = 0; k < cond.ndim; ++k) {
    const int64_t d = k + out.ndim - cond.ndim;
    if (cond.size(k) <= 1) continue;
    // Along the token axis, each position reads what the condition's values
    // (not recorded) pick: no one relation per input.
    if (d == r.dim) return Lost(absl::StrCat(N(call.name), kPicksPositions));
    r.mixed |= DimBit(d);
  }
  return r;
}

// The rule for a call with tracked inputs; nullopt: none (the caller
// follows its children, if they made its outputs). Rules that make
// several outputs set them and return `done`.
// See Note [A rule or the children].
std::optional<Flow> Pass::Rule(const OpCall& call, const OpTraits& traits, absl::string_view base, bool& done) {
  const absl::string_view name = N(call.name);
  const TokenRule rule = traits.token_rule;
  if (call.outputs.empty()) return std::nullopt;
  const ArgMeta& o0 = call.outputs[0];
  if (o0.kind == ArgKind::kTensorList) return Pieces(call, traits, base, done);
  if (!o0.is_tensor() || !o0.tensor().defined) return std::nullopt;
  const TensorMeta& out = o0.tensor();
  const ArgMeta& x = call.arg(0);
  const bool in_place = !base.empty() && base.back() == '_' && base != "_";
  const absl::string_view plain = in_place ? base.substr(0, base.size() - 1) : base;
  if (plain == "copy") return Elementwise(call, out, 1);  // copy_(self, src): the result is src
  if (base == "where" || plain == "masked_fill") return Where(call, out);
  // The pointwise row is the functional operator's (in place: name without its '_').
  if (in_place ? Has(name.substr(0, name.size() - 1), TokenTrait::kPointwise) : traits.Has(TokenTrait::kPointwise)) {
    return Elementwise(call, out);
  }
  if (rule == TokenRule::kLinear) return Contract(call, out, 0, 1, true);
  if (rule == TokenRule::kMatmul) return Contract(call, out, 0, 1, false);
  if (rule == TokenRule::kAddmm) return Contract(call, out, 1, 2, false);
  const SdpaArgs at = SdpaOf(name);
  if (at.mask >= 0) return Attention(call, out, at);
  if (traits.Has(TokenTrait::kAttention)) {
    return Lost(absl::StrCat(name, " is a fused attention kernel the token-flow pass does not analyse here"));
  }
  if (rule == TokenRule::kEmbedding && call.arg(1).is_tensor() && x.is_tensor() && Get(x.tensor()) == nullptr) {
    // A lookup per index: output position i reads index i.
    const Flow* ids = Get(call.arg(1).tensor());
    marks_done_ = true;  // the indices' dims lead the output's, as their marks
    if (ids != nullptr) return *ids;
  }
  if (!x.is_tensor()) return std::nullopt;
  const TensorMeta& in = x.tensor();
  const Flow* fp = Get(in);
  if (fp == nullptr) return std::nullopt;  // a tracked tensor elsewhere: no rule for it
  const Flow& f = *fp;
  if (!f.lost.empty()) return f;
  if (traits.Has(TokenTrait::kReshape)) {
    Flow r = Reshape(call, f, in, out);
    r.mixed = ViewMarks(f.mixed, in, out);
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kPermute) {
    Flow r = f;
    marks_done_ = true;  // the marks move with their dims
    if (base == "permute" || base == "permute_copy") {
      const auto dims = DimsOf(call.arg(1), in.ndim);
      auto it = std::find(dims.begin(), dims.end(), f.dim);
      if (it == dims.end()) return Lost(absl::StrCat(name, ": unexpected dims"));
      r.dim = static_cast<int32_t>(it - dims.begin());
      if (f.mixed != kEveryDim) {
        r.mixed = 0;
        for (size_t k = 0; k < dims.size(); ++k) r.mixed |= Marked(f.mixed, dims[k]) ? DimBit(k) : 0;
      }
    } else {
      int64_t a = 0, b = 1;
      if (base != "t") {
        a = Wrap(call.arg(1).to_int(), in.ndim);
        b = Wrap(call.arg(2).to_int(), in.ndim);
      }
      if (in.ndim < 2) return f;
      if (f.dim == a)
        r.dim = static_cast<int32_t>(b);
      else if (f.dim == b)
        r.dim = static_cast<int32_t>(a);
      if (Marked(f.mixed, a) != Marked(f.mixed, b)) r.mixed ^= DimBit(a) | DimBit(b);
    }
    return r;
  }
  if (rule == TokenRule::kSlice) {
    const int64_t d = Wrap(call.arg(1).kind == ArgKind::kInt ? call.arg(1).to_int() : 0, in.ndim);
    if (d != f.dim) return Marked(f.mixed, d) && out.size(d) != in.size(d) ? Lost(absl::StrCat(name, kMixedPart)) : f;
    if (call.arg(2).kind != ArgKind::kInt && !(base != "narrow" && call.arg(2).is_none())) {
      return Lost(absl::StrCat(name, ": a start given as a tensor; not followed"));
    }
    int64_t start = call.arg(2).kind == ArgKind::kInt ? call.arg(2).to_int() : 0;
    if (start < 0) start += in.size(d);
    start = std::clamp<int64_t>(start, 0, in.size(d));
    const int64_t step = base != "narrow" && call.arg(4).kind == ArgKind::kInt ? call.arg(4).to_int() : 1;
    return Rows(f, start, std::max<int64_t>(step, 1), out.size(d));
  }
  if (rule == TokenRule::kSelect) {
    const int64_t d = Wrap(call.arg(1).to_int(), in.ndim);
    if (d == f.dim) return Lost(absl::StrCat(name, " picks one token position; not followed"));
    if (Marked(f.mixed, d) && in.size(d) > 1) return Lost(absl::StrCat(name, kMixedPart));
    Flow r = f;
    if (d < f.dim) --r.dim;
    r.mixed = RemoveDim(f.mixed, d);
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kRepeat) {
    const auto reps = call.arg(1).ints();
    const int64_t off = static_cast<int64_t>(reps.size()) - in.ndim;
    if (off < 0 || reps[f.dim + off] != 1) return Lost(absl::StrCat(name, " repeats the token axis; not followed"));
    Flow r = f;
    r.dim = static_cast<int32_t>(f.dim + off);
    r.mixed = AlignMarks(f.mixed, in.ndim, out.ndim);  // new dims lead
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kRepeatInterleave) {
    const ArgMeta& d = call.arg(2);
    if (d.kind != ArgKind::kInt || Wrap(d.to_int(), in.ndim) == f.dim || out.ndim != in.ndim) {
      return Lost(absl::StrCat(name, " repeats along the token axis (or the flattened tensor); not followed"));
    }
    return f;
  }
  if (rule == TokenRule::kJoin) {
    return std::nullopt;  // tensor lists: VisitCall joins them
  }
  if (rule == TokenRule::kNormAlong) {
    const auto dims = DimsOf(call.arg(1), in.ndim);
    const int64_t d = dims.empty() ? in.ndim - 1 : dims[0];
    if (d == f.dim) return Lost(absl::StrCat(name, " normalises over the token axis; not followed"));
    Flow r = Elementwise(call, out);
    // A softmax's output reads the whole of dim d; glu's output k reads its input's k and k + half only.
    r.mixed = AlignedMarks(call, out) & (base == "glu" ? kEveryDim : ~DimBit(d));
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kNormalize) {
    const int64_t n = call.arg(1).kind == ArgKind::kIntList ? static_cast<int64_t>(call.arg(1).ints().size()) : 1;
    if (f.dim >= in.ndim - n) return Lost(absl::StrCat(name, " normalises over the token axis; not followed"));
    Flow r = Elementwise(call, out);
    r.mixed = AlignedMarks(call, out);
    for (int64_t d = in.ndim - n; d < in.ndim; ++d) r.mixed &= ~DimBit(d);  // each output reads them whole
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kReduce) {
    const size_t dim_arg = (base == "linalg_vector_norm" || base == "norm") ? 2 : 1;
    const auto dims = DimsOf(call.arg(dim_arg), in.ndim);
    if (dims.empty() || std::count(dims.begin(), dims.end(), f.dim)) {
      return Lost(absl::StrCat(name, " reduces over the token axis; not followed"));
    }
    Flow r = f;
    for (int64_t d : dims) r.mixed &= ~DimBit(d);  // each output reads the reduced dims whole
    if (out.ndim != in.ndim) {
      for (int64_t d : dims) r.dim -= d < f.dim ? 1 : 0;
      std::vector<int64_t> gone = dims;
      std::sort(gone.rbegin(), gone.rend());
      for (int64_t d : gone) r.mixed = RemoveDim(r.mixed, d);
    }
    marks_done_ = true;
    return r;
  }
  if (rule == TokenRule::kEmbedding) {
    // embedding(weight, indices): (..., ) -> (..., E); weights computed
    // from the inputs are not followed.
    return Lost(absl::StrCat(name, ": embedding weights computed from the inputs; not followed"));
  }
  return std::nullopt;
}

}  // namespace torchscan::token_flow_internal
