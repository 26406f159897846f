#include "torchscan_dispatch/analyses/token_flow.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/op_traits.h"
#include "torchscan_dispatch/core/op_catalog.h"

namespace torchscan {

// ---- Relations

TokenRows TokenRows::None(int64_t rows) { return {std::vector<int64_t>(rows, 0), std::vector<int64_t>(rows, -1)}; }

TokenRows TokenRows::Same(int64_t rows) {
  TokenRows r{std::vector<int64_t>(rows), std::vector<int64_t>(rows)};
  std::iota(r.lo.begin(), r.lo.end(), 0);
  std::iota(r.hi.begin(), r.hi.end(), 0);
  return r;
}

std::optional<TokenRelation> NameRelation(const TokenRows& d, int64_t source_length) {
  const int64_t n = d.rows();
  int64_t first = 0;
  while (first < n && d.empty(first)) ++first;
  if (first == n) return TokenRelation{"none"};
  for (int64_t i = first; i < n; ++i) {
    if (d.empty(i)) return std::nullopt;  // a dependency that stops and starts again
  }
  TokenRelation r;
  r.first_position = first;
  bool same = n <= source_length;
  for (int64_t i = first; same && i < n; ++i) same = d.lo[i] == i && d.hi[i] == i;
  if (same) {
    r.kind = "same_position";
    return r;
  }
  // prefix / all: every row starts at 0; the last row's end gives the limit.
  const int64_t limit = d.hi[n - 1] + 1;
  bool zero = true, prefix = n > 1, all = true;
  for (int64_t i = first; i < n; ++i) {
    zero = zero && d.lo[i] == 0;
    prefix = prefix && d.hi[i] == std::min(i, limit - 1);
    all = all && d.hi[i] == limit - 1;
  }
  if (!zero || !(prefix || all)) return std::nullopt;
  r.kind = prefix ? "prefix" : "all";
  if (limit < source_length) r.limit = limit;
  return r;
}

TokenRows RowsOf(const TokenRelation& r, int64_t rows, int64_t source_length) {
  TokenRows d = TokenRows::None(rows);
  if (r.kind == "none") return d;
  const int64_t limit = r.limit >= 0 ? r.limit : source_length;
  for (int64_t i = std::max<int64_t>(r.first_position, 0); i < rows; ++i) {
    if (r.kind == "same_position") {
      if (i < source_length) d.lo[i] = d.hi[i] = i;
    } else {
      d.lo[i] = 0;
      d.hi[i] = r.kind == "prefix" ? std::min(i, limit - 1) : limit - 1;
    }
  }
  return d;
}

std::optional<TokenRows> ComposeRows(const TokenRows& a, const TokenRows& b, std::string* why) {
  const int64_t m = b.rows();
  TokenRows out = TokenRows::None(a.rows());
  // b's rows are usually monotone (both ends non-decreasing over its
  // non-empty rows): then a union over a range of rows is one interval
  // exactly when consecutive non-empty rows touch, which prefix sums answer.
  std::vector<int64_t> next(m + 1, m), prev(m + 1, -1), gaps(m + 1, 0);
  bool monotone = true;
  int64_t last = -1;
  for (int64_t j = 0; j < m; ++j) {
    gaps[j + 1] = gaps[j];
    if (b.empty(j)) continue;
    if (last >= 0) {
      monotone = monotone && b.lo[j] >= b.lo[last] && b.hi[j] >= b.hi[last];
      if (b.lo[j] > b.hi[last] + 1) gaps[j + 1] += 1;  // a hole between rows last and j
    }
    last = j;
  }
  for (int64_t j = m - 1; j >= 0; --j) next[j] = b.empty(j) ? next[j + 1] : j;
  for (int64_t j = 0; j < m; ++j) prev[j + 1] = b.empty(j) ? prev[j] : j;
  int64_t budget = 50'000'000;  // the general path's work, past which the pass gives up
  for (int64_t i = 0; i < a.rows(); ++i) {
    if (a.empty(i)) continue;
    const int64_t lo = std::max<int64_t>(a.lo[i], 0), hi = std::min<int64_t>(a.hi[i], m - 1);
    if (lo > hi) continue;
    const int64_t f = next[lo], l = prev[hi + 1];
    if (f > hi) continue;  // only empty rows of b
    if (monotone) {
      if (gaps[l + 1] - gaps[f + 1] != 0) {
        *why = "a dependency that is not one interval of positions";
        return std::nullopt;
      }
      out.lo[i] = b.lo[f];
      out.hi[i] = b.hi[l];
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> parts;
    for (int64_t j = f; j <= l; ++j) {
      if (!b.empty(j)) parts.push_back({b.lo[j], b.hi[j]});
    }
    budget -= static_cast<int64_t>(parts.size());
    if (budget < 0) {
      *why = "relations too large for the token-flow pass";
      return std::nullopt;
    }
    std::sort(parts.begin(), parts.end());
    int64_t end = parts[0].second;
    for (const auto& [plo, phi] : parts) {
      if (plo > end + 1) {
        *why = "a dependency that is not one interval of positions";
        return std::nullopt;
      }
      end = std::max(end, phi);
    }
    out.lo[i] = parts[0].first;
    out.hi[i] = end;
  }
  return out;
}

std::optional<TokenRows> UniteRows(const TokenRows& a, const TokenRows& b) {
  TokenRows out = a;
  for (int64_t i = 0; i < a.rows(); ++i) {
    if (b.empty(i)) continue;
    if (a.empty(i)) {
      out.lo[i] = b.lo[i];
      out.hi[i] = b.hi[i];
      continue;
    }
    if (std::max(a.lo[i], b.lo[i]) > std::min(a.hi[i], b.hi[i]) + 1) return std::nullopt;
    out.lo[i] = std::min(a.lo[i], b.lo[i]);
    out.hi[i] = std::max(a.hi[i], b.hi[i]);
  }
  return out;
}

namespace {

absl::string_view N(std::string_view s) { return {s.data(), s.size()}; }

// ---- The pass

// What a tensor's positions depend on. A tensor with no flow holds no
// positions of the inputs (parameters, buffers, constants, shapes only).
struct Flow {
  std::string lost;  // non-empty: not followed, why (naming the operator)
  int32_t dim = 0;   // the dim holding token positions
  int64_t length = 0;
  // By source; shared: most calls pass their input's rows on unchanged.
  std::map<int32_t, std::shared_ptr<const TokenRows>> deps;
};

std::shared_ptr<const TokenRows> Share(TokenRows r) { return std::make_shared<const TokenRows>(std::move(r)); }

Flow Lost(std::string why) {
  Flow f;
  f.lost = std::move(why);
  return f;
}

int64_t Wrap(int64_t d, int64_t n) { return d < 0 ? d + n : d; }

// What the pass knows of an operator is its row in formulas/op_traits.cc.
bool Has(absl::string_view name, TokenTrait t) { return TraitsOf({name.data(), name.size()}).Has(t); }
bool IsAttention(absl::string_view name) { return Has(name, TokenTrait::kAttention); }

// Argument positions (mask, dropout_p, is_causal) of the SDPA operators the
// pass follows; mask -1: not one of them.
struct SdpaArgs {
  int mask = -1, dropout = -1, causal = -1;
};
SdpaArgs SdpaOf(absl::string_view name) {
  if (name == "aten::scaled_dot_product_attention" || name == "aten::_scaled_dot_product_attention_math") {
    return {3, 4, 5};
  }
  if (name == "aten::_scaled_dot_product_flash_attention_for_cpu") return {5, 3, 4};
  return {};
}

OpCatalog& Catalog() {
  thread_local OpCatalog catalog;
  return catalog;
}

// Over an OpCall's args or outputs (whatever span type op_call.h uses), from `first`.
template <class Args, class F>
void EachTensor(const Args& args, F&& f, size_t first = 0) {
  for (size_t i = first; i < args.size(); ++i) {
    const ArgMeta& a = args[i];
    if (a.is_tensor() && a.tensor().defined) f(a.tensor());
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& t : a.tensors()) {
        if (t.defined) f(t);
      }
    }
  }
}

std::vector<int64_t> DimsOf(const ArgMeta& a, int64_t ndim) {
  std::vector<int64_t> dims;
  if (a.kind == ArgKind::kInt) dims.push_back(Wrap(a.to_int(), ndim));
  if (a.kind == ArgKind::kIntList) {
    for (int64_t d : a.ints()) dims.push_back(Wrap(d, ndim));
  }
  return dims;
}

class Pass {
 public:
  Pass(const Recorder& r, const TokenFlowRequest& q) : recorder_(r), events_(r.events()), req_(q) {
    for (const TokenInput& in : req_.inputs) seeds_[in.identity] = in;
  }

  TokenFlowResult Run() {
    TokenFlowResult res;
    const auto& scopes = recorder_.scopes();
    const Recorder::Scope& scope = scopes[req_.scope];
    // Scope bounds count the scan's calls; events_ holds those not folded (ClosedScope).
    const int64_t base = recorder_.folded();
    const int64_t begin = scope.begin_event - base, end = scope.end_event - base;
    // Steps by their first call; the outermost first where several start together.
    struct Range {
      int64_t begin, end;
      const TokenStep* step;
    };
    std::vector<Range> steps;
    for (const TokenStep& s : req_.steps) {
      if (s.scope <= req_.scope || s.scope >= static_cast<int32_t>(scopes.size())) continue;
      const auto& sc = scopes[s.scope];
      if (sc.end_event < 0 || sc.begin_event - base < begin || sc.end_event - base > end) continue;
      steps.push_back({sc.begin_event - base, sc.end_event - base, &s});
    }
    std::sort(steps.begin(), steps.end(),
              [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end > b.end; });
    size_t k = 0;
    int64_t i = begin;
    while (true) {
      // Module calls that made no calls (they return an input or a constant) happen here too.
      bool jumped = false;
      while (k < steps.size() && steps[k].begin <= i) {
        const Range& r = steps[k++];
        if (r.begin < i) continue;  // inside a step already taken
        Step(*r.step);
        if (r.end > i) {
          i = r.end;
          jumped = true;
          break;
        }
      }
      if (jumped) continue;
      if (i >= end) break;
      i = Visit(i, end);
    }
    const Flow* out = Output();
    if (out == nullptr) {
      res.reason = written_.count(req_.output) ? "the output holds no positions of the inputs"
                                               : "the output was not produced by a recorded call of the module";
      return res;
    }
    if (!out->lost.empty()) {
      res.reason = out->lost;
      return res;
    }
    res.output_axis = out->dim;
    res.output_length = out->length;
    for (const TokenInput& in : req_.inputs) {
      auto it = out->deps.find(in.source);
      if (it == out->deps.end()) {
        res.sources[in.source] = TokenRelation{"none"};
        continue;
      }
      auto named = NameRelation(*it->second, in.length);
      if (!named) {
        res.reason =
            "the output's dependency on an input is none of the relations the schema names (none, "
            "same_position, prefix, all), e.g. a sliding window, or key padding next to a residual path";
        res.sources.clear();
        return res;
      }
      res.sources[in.source] = *named;
    }
    res.complete = true;
    return res;
  }

 private:
  // A seed made a flow once its shape is known.
  Flow Seed(const TokenInput& in, int32_t ndim, int64_t length_at_axis, bool nested) {
    if (nested || in.axis < 0 || in.axis >= ndim || length_at_axis != in.length) {
      return Lost("an input has no token axis at the expected dim");
    }
    Flow f;
    f.dim = in.axis;
    f.length = in.length;
    f.deps[in.source] = Share(TokenRows::Same(in.length));
    return f;
  }

  // The flow of a tensor argument; nullptr: it holds no input positions.
  const Flow* Get(const TensorMeta& t) {
    // 0-d tensors hold no token axis; Python scalars wrapped as tensors are
    // made without a recorded call and may reuse a freed tracked address.
    if (t.ndim == 0) return nullptr;
    auto it = flows_.find(t.identity);
    if (it != flows_.end()) {
      Flow& f = it->second;
      if (f.lost.empty() && (t.nested || f.dim >= t.ndim || t.size(f.dim) != f.length)) {
        f = Lost("a tensor changed shape outside the recorded calls");
      }
      return &f;
    }
    if (written_.count(t.identity)) return nullptr;
    auto s = seeds_.find(t.identity);
    if (s == seeds_.end()) return nullptr;
    const bool fits = !t.nested && s->second.axis >= 0 && s->second.axis < t.ndim;
    return &(flows_[t.identity] = Seed(s->second, t.ndim, fits ? t.size(s->second.axis) : -1, t.nested));
  }

  // By identity, for steps and the output (whose shapes the caller gave).
  const Flow* GetId(uintptr_t id, int32_t axis, int64_t length) {
    auto it = flows_.find(id);
    if (it != flows_.end()) return &it->second;
    if (written_.count(id)) return nullptr;
    auto s = seeds_.find(id);
    if (s == seeds_.end()) return nullptr;
    return &(flows_[id] = Seed(s->second, axis + 1, s->second.axis == axis ? length : -1, false));
  }

  const Flow* Output() {
    auto it = flows_.find(req_.output);
    if (it != flows_.end()) return &it->second;
    if (written_.count(req_.output)) return nullptr;
    auto s = seeds_.find(req_.output);  // the module returned an input
    if (s == seeds_.end()) return nullptr;
    const auto& sz = req_.output_sizes;
    const int32_t axis = s->second.axis;
    const bool fits = axis >= 0 && axis < static_cast<int32_t>(sz.size());
    return &(flows_[req_.output] = Seed(s->second, static_cast<int32_t>(sz.size()), fits ? sz[axis] : -1, false));
  }

  void Set(uintptr_t id, Flow f) {
    written_[id] = ++generation_;
    flows_[id] = std::move(f);
  }
  void Clear(uintptr_t id) {
    written_[id] = ++generation_;
    flows_.erase(id);
  }

  uintptr_t Root(uintptr_t id) const {
    auto it = root_.find(id);
    return it == root_.end() ? id : it->second;
  }

  // Views share their base's memory: a call that writes one in place
  // changes the others, which the pass does not follow value by value, so
  // they are not followed from here on (their base included).
  void Aliases(int64_t i) {
    const Event& e = events_[i];
    if (e.raised()) return;
    const OpInfo& info = Catalog().Get(e.op());
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    const absl::string_view name = N(call.name);
    const absl::string_view base = absl::StartsWith(name, "aten::") ? name.substr(6) : name;
    // In-place calls that change a tensor's metadata, not its values, leave its views alone.
    const bool metadata = Has(name, TokenTrait::kMetadataInPlace);
    const bool in_place = ((base.size() > 1 && base.back() == '_') || info.overload == "out") && !metadata;
    if (in_place) {
      EachTensor(call.outputs, [&](const TensorMeta& t) {
        const uintptr_t r = Root(t.identity);
        auto g = group_.find(r);
        if (g == group_.end()) return;
        const std::string why = absl::StrCat(name,
                                             " wrote in place into a view of this tensor (or its base); "
                                             "not followed");
        for (uintptr_t id : g->second) {
          if (id != t.identity) Set(id, Lost(why));
        }
        if (r != t.identity) Set(r, Lost(why));
      });
      return;
    }
    if (!Has(name, TokenTrait::kMayAlias)) return;
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return;
    const uintptr_t r = Root(x.tensor().identity);
    EachTensor(call.outputs, [&](const TensorMeta& t) {
      if (t.identity == x.tensor().identity) return;
      root_[t.identity] = r;
      group_[r].push_back(t.identity);
    });
  }

  // Tensors made inside calls [from, to) that the pass does not visit (a
  // call handled by its rule, a step): their identities may be reused
  // addresses of tensors it tracked. A call returning its own input (an
  // alias: contiguous, to) made nothing new.
  // The calling event's own outputs (`parent`, -1: none) are its rule's.
  void Forget(int64_t from, int64_t to, const std::string& lost, int64_t parent = -1) {
    std::unordered_set<uintptr_t> keep;
    if (parent >= 0)
      EachTensor(ResolvedCall(events_[parent]).outputs(), [&](const TensorMeta& t) { keep.insert(t.identity); });
    for (int64_t j = from; j < to; ++j) {
      const Event& e = events_[j];
      std::unordered_set<uintptr_t> ins = keep;
      const ResolvedCall rc(e);
      EachTensor(rc.args(), [&](const TensorMeta& t) { ins.insert(t.identity); });
      EachTensor(rc.outputs(), [&](const TensorMeta& t) {
        if (ins.count(t.identity)) return;
        if (lost.empty()) {
          Clear(t.identity);
        } else {
          Set(t.identity, Lost(lost));
        }
      });
    }
  }

  // The end of event i's subtree: its descendants follow it, with parents >= i.
  int64_t SubtreeEnd(int64_t i, int64_t end) const {
    int64_t j = i + 1;
    while (j < end && events_[j].parent >= i) ++j;
    return j;
  }

  static bool Unite(Flow& into, int32_t source, const std::shared_ptr<const TokenRows>& rows) {
    auto it = into.deps.find(source);
    if (it == into.deps.end()) {
      into.deps[source] = rows;
      return true;
    }
    if (it->second == rows) return true;
    auto u = UniteRows(*it->second, *rows);
    if (!u) return false;
    if (u->lo != it->second->lo || u->hi != it->second->hi) it->second = Share(std::move(*u));
    return true;
  }

  // Rows of `f` for an output token dim of `length` positions: equal, or a
  // single position broadcast to all of them.
  static std::optional<std::map<int32_t, std::shared_ptr<const TokenRows>>> Fit(const Flow& f, int64_t length) {
    if (f.length == length) return f.deps;
    if (f.length != 1) return std::nullopt;
    std::map<int32_t, std::shared_ptr<const TokenRows>> out;
    for (const auto& [source, rows] : f.deps) {
      out[source] = Share({std::vector<int64_t>(length, rows->lo[0]), std::vector<int64_t>(length, rows->hi[0])});
    }
    return out;
  }

  // Adds `f`, whose token dim lands on output dim `dim` of `out`, to `r`.
  std::optional<std::string> Add(Flow& r, bool& any, const Flow& f, int64_t dim, const TensorMeta& out,
                                 absl::string_view name) {
    if (!f.lost.empty()) return f.lost;
    if (dim < 0 || dim >= out.ndim) return absl::StrCat(name, ": the token axis leaves the result; not followed");
    if (any && r.dim != dim) {
      products_of_tokens = true;
      return absl::StrCat(name,
                          " combines tensors whose token positions lie on different dims (two token axes, as "
                          "in attention scores computed with explicit products): not analysed; "
                          "scaled_dot_product_attention is");
    }
    auto rows = Fit(f, out.size(dim));
    if (!rows) return absl::StrCat(name, " changes the length of the token axis; not followed");
    if (!any) {
      r.dim = static_cast<int32_t>(dim);
      r.length = out.size(dim);
      any = true;
    }
    for (const auto& [source, d] : *rows) {
      if (!Unite(r, source, d)) return absl::StrCat(name, ": a dependency that is not one interval of positions");
    }
    return std::nullopt;
  }

  // Elementwise with broadcasting: inputs align from their last dims.
  Flow Elementwise(const OpCall& call, const TensorMeta& out, size_t first_arg = 0) {
    Flow r;
    bool any = false;
    std::optional<std::string> err;
    EachTensor(
        call.args,
        [&](const TensorMeta& t) {
          if (err) return;
          const Flow* f = Get(t);
          if (f == nullptr) return;
          err = Add(r, any, *f, f->dim + (out.ndim - t.ndim), out, N(call.name));
        },
        first_arg);
    if (err) return Lost(*err);
    return r;
  }

  // Products: linear(x, W, b), mm/bmm/matmul(a, b), addmm/baddbmm(bias, a, b).
  Flow Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear) {
    const ArgMeta &a = call.arg(ia), &b = call.arg(ib);
    if (!a.is_tensor() || !b.is_tensor()) return Lost(absl::StrCat(N(call.name), ": unexpected arguments"));
    const TensorMeta &ta = a.tensor(), &tb = b.tensor();
    const int64_t na = ta.ndim, nb = tb.ndim, no = out.ndim;
    Flow r;
    bool any = false;
    const std::string sums =
        absl::StrCat(N(call.name), " sums over the token axis (a product over positions): not analysed");
    if (const Flow* f = Get(ta)) {
      if (!f->lost.empty()) return *f;
      if (na == 1 || f->dim == na - 1) return Lost(sums);
      const int64_t dim = linear ? f->dim : f->dim + no - na + (nb == 1 ? 1 : 0);
      if (auto err = Add(r, any, *f, dim, out, N(call.name))) return Lost(*err);
    }
    if (const Flow* f = Get(tb)) {
      if (!f->lost.empty()) return *f;
      if (linear) return Lost(absl::StrCat(N(call.name), ": weights computed from the inputs are not analysed"));
      if (nb == 1 || f->dim == nb - 2) return Lost(sums);
      const int64_t batch_end = na >= 2 ? no - 2 : no - 1;  // the output's last batch dim + 1
      const int64_t dim = f->dim == nb - 1 ? no - 1 : f->dim + batch_end - (nb - 2);
      if (auto err = Add(r, any, *f, dim, out, N(call.name))) return Lost(*err);
    }
    // The bias: addmm's / baddbmm's first argument, linear's third.
    const ArgMeta& bias = linear ? call.arg(2) : (ia == 1 ? call.arg(0) : ArgMeta::None());
    if (bias.is_tensor() && bias.tensor().defined) {
      if (const Flow* f = Get(bias.tensor())) {
        if (linear) return Lost(absl::StrCat(N(call.name), ": a bias computed from the inputs is not analysed"));
        if (auto err = Add(r, any, *f, f->dim + no - bias.tensor().ndim, out, N(call.name))) return Lost(*err);
      }
    }
    return r;
  }

  // Views between shapes of the same elements: the token dim must stay one
  // dim (the same elements before and after it).
  Flow Reshape(const OpCall& call, const Flow& f, const TensorMeta& in, const TensorMeta& out) {
    int64_t before = 1;
    for (int32_t d = 0; d < f.dim; ++d) before *= in.size(d);
    int64_t prod = 1;
    for (int32_t e = 0; e < out.ndim; ++e) {
      if (prod == before && out.size(e) == f.length) {
        Flow r = f;
        r.dim = e;
        return r;
      }
      prod *= out.size(e);
    }
    return Lost(absl::StrCat(N(call.name), " merges or splits the token axis with another dim; not followed"));
  }

  // Positions start + r*step of the token axis.
  static Flow Rows(const Flow& f, int64_t start, int64_t step, int64_t length) {
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

  Flow Attention(const OpCall& call, const TensorMeta& out, const SdpaArgs& at) {
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
    const Flow* fs[3] = {fq, fk, fv};
    const TensorMeta* ts[3] = {&tq, &tk, &tv};
    for (int n = 0; n < 3; ++n) {
      if (fs[n] != nullptr && fs[n]->dim != ts[n]->ndim - 2) {
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
    TokenRows vis{std::vector<int64_t>(L, 0), std::vector<int64_t>(L, S - 1)};
    const ArgMeta& causal = call.arg(at.causal);
    if (causal.kind == ArgKind::kBool && causal.to_bool()) {
      // SDPA's causal mask is tril(ones(L, S)): key j visible to query i when j <= i.
      for (int64_t i = 0; i < L; ++i) vis.hi[i] = std::min(i, S - 1);
    }
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
      if (!m.reason.empty()) return Lost(absl::StrCat(name, ": attn_mask ", m.reason));
      if ((m.rows != 1 && m.rows != L) || (m.cols != 1 && m.cols != S)) {
        return Lost(absl::StrCat(name, ": attn_mask's last dims (", m.rows, ", ", m.cols, ") do not broadcast to (", L,
                                 ", ", S, ")"));
      }
      for (int64_t i = 0; i < L; ++i) {
        const int64_t r = m.rows == 1 ? 0 : i;
        const bool none = m.hi[r] < m.lo[r];
        const int64_t lo = none ? 0 : m.cols == 1 ? 0 : m.lo[r], hi = none ? -1 : m.cols == 1 ? S - 1 : m.hi[r];
        vis.lo[i] = std::max(vis.lo[i], lo);
        vis.hi[i] = std::min(vis.hi[i], hi);
      }
    }
    TokenRows several = vis;  // rows whose softmax is over two or more scores
    for (int64_t i = 0; i < L; ++i) {
      if (vis.empty(i)) {
        return Lost(absl::StrCat(name, ": query position ", i, " sees no key (its output is NaN)"));
      }
      if (vis.hi[i] == vis.lo[i]) several.hi[i] = several.lo[i] - 1;
    }
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
    TokenRows own = several;  // query i itself, where the softmax reads it
    for (int64_t i = 0; i < L; ++i) {
      if (!several.empty(i)) own.lo[i] = own.hi[i] = i;
    }
    if (!through(fv, vis) || !through(fk, several) || !through(fq, own)) {
      return Lost(absl::StrCat(name, ": ", why));
    }
    return r;
  }

  // The rule for a call with tracked inputs; nullopt: none (the caller
  // follows its children, if they made its outputs). Rules that make
  // several outputs set them and return `done`.
  std::optional<Flow> Rule(const OpCall& call, absl::string_view base, bool& done) {
    const absl::string_view name = N(call.name);
    if (call.outputs.empty()) return std::nullopt;
    const ArgMeta& o0 = call.outputs[0];
    if (o0.kind == ArgKind::kTensorList) return Pieces(call, base, done);
    if (!o0.is_tensor() || !o0.tensor().defined) return std::nullopt;
    const TensorMeta& out = o0.tensor();
    const ArgMeta& x = call.arg(0);
    const bool in_place = !base.empty() && base.back() == '_' && base != "_";
    const absl::string_view plain = in_place ? base.substr(0, base.size() - 1) : base;
    if (plain == "copy") return Elementwise(call, out, 1);  // copy_(self, src): the result is src
    // The pointwise row is the functional operator's (in place: name without its '_').
    if (Has(in_place ? name.substr(0, name.size() - 1) : name, TokenTrait::kPointwise)) return Elementwise(call, out);
    if (base == "linear") return Contract(call, out, 0, 1, true);
    if (base == "mm" || base == "bmm" || base == "matmul") return Contract(call, out, 0, 1, false);
    if (base == "addmm" || base == "baddbmm") return Contract(call, out, 1, 2, false);
    const SdpaArgs at = SdpaOf(name);
    if (at.mask >= 0) return Attention(call, out, at);
    if (IsAttention(name)) {
      return Lost(absl::StrCat(name, " is a fused attention kernel the token-flow pass does not analyse here"));
    }
    if (base == "embedding" && call.arg(1).is_tensor() && x.is_tensor() && Get(x.tensor()) == nullptr) {
      // A lookup per index: output position i reads index i.
      const Flow* ids = Get(call.arg(1).tensor());
      if (ids != nullptr) return *ids;
    }
    if (!x.is_tensor()) return std::nullopt;
    const TensorMeta& in = x.tensor();
    const Flow* fp = Get(in);
    if (fp == nullptr) return std::nullopt;  // a tracked tensor elsewhere: no rule for it
    const Flow& f = *fp;
    if (!f.lost.empty()) return f;
    if (Has(name, TokenTrait::kReshape)) return Reshape(call, f, in, out);
    if (base == "permute" || base == "transpose" || base == "transpose_" || base == "t" || base == "swapaxes" ||
        base == "permute_copy" || base == "transpose_copy") {
      Flow r = f;
      if (base == "permute" || base == "permute_copy") {
        const auto dims = DimsOf(call.arg(1), in.ndim);
        auto it = std::find(dims.begin(), dims.end(), f.dim);
        if (it == dims.end()) return Lost(absl::StrCat(name, ": unexpected dims"));
        r.dim = static_cast<int32_t>(it - dims.begin());
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
      }
      return r;
    }
    if (base == "slice" || base == "narrow" || base == "slice_copy") {
      const int64_t d = Wrap(call.arg(1).kind == ArgKind::kInt ? call.arg(1).to_int() : 0, in.ndim);
      if (d != f.dim) return f;
      if (call.arg(2).kind != ArgKind::kInt && !(base != "narrow" && call.arg(2).is_none())) {
        return Lost(absl::StrCat(name, ": a start given as a tensor; not followed"));
      }
      int64_t start = call.arg(2).kind == ArgKind::kInt ? call.arg(2).to_int() : 0;
      if (start < 0) start += in.size(d);
      start = std::clamp<int64_t>(start, 0, in.size(d));
      const int64_t step = base != "narrow" && call.arg(4).kind == ArgKind::kInt ? call.arg(4).to_int() : 1;
      return Rows(f, start, std::max<int64_t>(step, 1), out.size(d));
    }
    if (base == "select") {
      const int64_t d = Wrap(call.arg(1).to_int(), in.ndim);
      if (d == f.dim) return Lost(absl::StrCat(name, " picks one token position; not followed"));
      Flow r = f;
      if (d < f.dim) --r.dim;
      return r;
    }
    if (base == "repeat") {
      const auto reps = call.arg(1).ints();
      const int64_t off = static_cast<int64_t>(reps.size()) - in.ndim;
      if (off < 0 || reps[f.dim + off] != 1) return Lost(absl::StrCat(name, " repeats the token axis; not followed"));
      Flow r = f;
      r.dim = static_cast<int32_t>(f.dim + off);
      return r;
    }
    if (base == "repeat_interleave") {
      const ArgMeta& d = call.arg(2);
      if (d.kind != ArgKind::kInt || Wrap(d.to_int(), in.ndim) == f.dim || out.ndim != in.ndim) {
        return Lost(absl::StrCat(name, " repeats along the token axis (or the flattened tensor); not followed"));
      }
      return f;
    }
    if (base == "cat" || base == "concat" || base == "concatenate" || base == "stack") {
      return std::nullopt;  // tensor lists: below
    }
    if (base == "softmax" || base == "_softmax" || base == "log_softmax" || base == "_log_softmax" || base == "glu") {
      const auto dims = DimsOf(call.arg(1), in.ndim);
      const int64_t d = dims.empty() ? in.ndim - 1 : dims[0];
      if (d == f.dim) return Lost(absl::StrCat(name, " normalises over the token axis; not followed"));
      return Elementwise(call, out);
    }
    if (base == "layer_norm" || base == "native_layer_norm" || base == "rms_norm" || base == "_fused_rms_norm") {
      const int64_t n = call.arg(1).kind == ArgKind::kIntList ? static_cast<int64_t>(call.arg(1).ints().size()) : 1;
      if (f.dim >= in.ndim - n) return Lost(absl::StrCat(name, " normalises over the token axis; not followed"));
      return Elementwise(call, out);
    }
    if (base == "sum" || base == "mean" || base == "amax" || base == "amin" || base == "var" || base == "std" ||
        base == "linalg_vector_norm" || base == "norm" || base == "nansum" || base == "nanmean" || base == "prod") {
      const size_t dim_arg = (base == "linalg_vector_norm" || base == "norm") ? 2 : 1;
      const auto dims = DimsOf(call.arg(dim_arg), in.ndim);
      if (dims.empty() || std::count(dims.begin(), dims.end(), f.dim)) {
        return Lost(absl::StrCat(name, " reduces over the token axis; not followed"));
      }
      Flow r = f;
      if (out.ndim != in.ndim) {
        for (int64_t d : dims) r.dim -= d < f.dim ? 1 : 0;
      }
      return r;
    }
    if (base == "embedding") {
      // embedding(weight, indices): (..., ) -> (..., E); weights computed
      // from the inputs are not followed.
      return Lost(absl::StrCat(name, ": embedding weights computed from the inputs; not followed"));
    }
    return std::nullopt;
  }

  // Calls with tensor-list inputs or outputs: cat / stack, split / chunk / unbind.
  std::optional<Flow> Pieces(const OpCall& call, absl::string_view base, bool& done) {
    const absl::string_view name = N(call.name);
    const ArgMeta& x = call.arg(0);
    if (!x.is_tensor()) return std::nullopt;
    const Flow* fp = Get(x.tensor());
    if (fp == nullptr) return std::nullopt;
    const bool unbind = base == "unbind" || base == "unbind_copy";
    const bool split = absl::StartsWith(base, "split") || absl::StartsWith(base, "unsafe_split") || base == "chunk" ||
                       base == "unsafe_chunk" || base == "tensor_split";
    if (!unbind && !split) return std::nullopt;
    const TensorMeta& in = x.tensor();
    const size_t dim_arg = unbind ? 1 : 2;
    const int64_t d = Wrap(call.arg(dim_arg).kind == ArgKind::kInt ? call.arg(dim_arg).to_int() : 0, in.ndim);
    Flow r = *fp;
    if (r.lost.empty() && d == r.dim) r = Lost(absl::StrCat(name, " splits the token axis; not followed"));
    if (r.lost.empty() && unbind && d < r.dim) --r.dim;
    for (const TensorMeta& t : call.outputs[0].tensors()) {
      if (t.defined) Set(t.identity, r);
    }
    done = true;
    return std::nullopt;
  }

  Flow Join(const OpCall& call, const TensorMeta& out, absl::string_view base) {
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
    for (const TensorMeta& t : list.tensors()) {
      if (!t.defined) continue;
      const Flow* f = Get(t);
      if (f == nullptr) continue;
      if (!f->lost.empty()) return *f;
      int64_t od = f->dim;
      if (stack) {
        od += f->dim >= dim ? 1 : 0;
      } else {
        od = f->dim + (out.ndim - t.ndim);
      }
      if (auto err = Add(r, any, *f, od, out, N(call.name))) return Lost(*err);
    }
    return r;
  }

  // cat along the token axis (a key/value cache's earlier positions, then
  // this call's): output positions are the inputs' in order; positions of
  // an untracked tensor (held from earlier calls) read none of the inputs.
  Flow Along(const OpCall& call, const TensorMeta& out, int64_t dim) {
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
        if (f->dim != dim) {
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

  // Visits event i and what it needs of its subtree; returns the next event.
  int64_t Visit(int64_t i, int64_t end) {
    const int64_t next = VisitCall(i, end);
    Aliases(i);
    return next;
  }

  int64_t VisitCall(int64_t i, int64_t end) {
    const Event& e = events_[i];
    const int64_t next = SubtreeEnd(i, end);
    if (e.raised()) return next;
    const OpInfo& info = Catalog().Get(e.op());
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    bool tracked = false;
    EachTensor(call.args, [&](const TensorMeta& t) { tracked = Get(t) != nullptr || tracked; });
    const absl::string_view name = N(call.name);
    const absl::string_view base = absl::StartsWith(name, "aten::") ? name.substr(6) : name;
    if (!tracked || Has(name, TokenTrait::kShapeOnly)) {
      Forget(i + 1, next, "", i);
      EachTensor(call.outputs, [&](const TensorMeta& t) { Clear(t.identity); });
      return next;
    }
    bool done = false;
    std::optional<Flow> f;
    if (base == "cat" || base == "concat" || base == "concatenate" || base == "stack") {
      if (call.outputs.size() == 1 && call.outputs[0].is_tensor()) f = Join(call, call.outputs[0].tensor(), base);
    } else {
      f = Rule(call, base, done);
    }
    if (f || done) Forget(i + 1, next, "", i);
    if (done) return next;
    if (f) {
      const TensorMeta& out = call.outputs[0].tensor();
      if (f->lost.empty() && (f->dim < 0 || f->dim >= out.ndim || out.size(f->dim) != f->length)) {
        f = Lost(absl::StrCat(name, ": internal mismatch of the token axis; not followed"));
      }
      for (size_t k = 1; k < call.outputs.size(); ++k) {
        if (!call.outputs[k].is_tensor() || !call.outputs[k].tensor().defined) continue;
        const TensorMeta& o = call.outputs[k].tensor();
        // A norm's statistics (mean, rstd) keep the positions; other extras are not followed.
        const bool keeps = f->lost.empty() && o.ndim == out.ndim && o.size(f->dim) == f->length;
        Set(o.identity, keeps ? *f : Lost(absl::StrCat(name, ": a secondary output is not followed")));
      }
      Set(out.identity, std::move(*f));
      return next;
    }
    // No rule: follow its children when they are the whole of its work (it
    // ran its CompositeImplicitAutograd decomposition) and wrote all its
    // outputs; a kernel's own work between its calls (sort copies, then
    // sorts in place) is unseen. Otherwise this is where the analysis stops.
    if (next > i + 1 && !IsAttention(name) && Catalog().RanDecomposition(e.op(), e.keys())) {
      const int64_t mark = generation_;
      for (int64_t j = i + 1; j < next;) j = Visit(j, next);
      bool produced = true;
      EachTensor(call.outputs, [&](const TensorMeta& t) {
        auto it = written_.find(t.identity);
        produced = produced && it != written_.end() && it->second > mark;
      });
      if (produced) return next;
    }
    const std::string why = absl::StrCat(name, info.overload.empty() ? "" : ".", info.overload,
                                         " is not understood by the token-flow analysis (it may mix or reorder token "
                                         "positions)");
    EachTensor(call.outputs, [&](const TensorMeta& t) { Set(t.identity, Lost(why)); });
    return next;
  }

  // A module call with a known relation: its output reads, through each
  // input, that input's dependencies composed with the call's relation.
  void Step(const TokenStep& s) {
    const std::string& path = recorder_.scopes()[s.scope].path;
    const std::string who = path.empty() ? "(root)" : path;
    const auto& sc = recorder_.scopes()[s.scope];
    Forget(sc.begin_event - recorder_.folded(), sc.end_event - recorder_.folded(),
           absl::StrCat("a tensor made inside ", who, " other than its primary output"));
    if (!s.reason.empty()) {
      Set(s.output, Lost(absl::StrCat(who, ": ", s.reason)));
      return;
    }
    Flow out;
    out.dim = s.output_axis;
    out.length = s.output_length;
    for (const TokenStep::Input& in : s.inputs) {
      const Flow* f = GetId(in.identity, in.axis, in.length);
      if (f == nullptr) continue;  // a constant
      if (!f->lost.empty()) {
        Set(s.output, *f);
        return;
      }
      if (f->dim != in.axis || f->length != in.length) {
        Set(s.output, Lost(absl::StrCat(who, ": the token axis of its input is dim ", in.axis,
                                        ", where the data flow has positions on dim ", f->dim)));
        return;
      }
      const TokenRows rel = RowsOf(in.relation, s.output_length, in.length);
      for (const auto& [source, rows] : f->deps) {
        std::string why = "a dependency that is not one interval of positions";
        auto c = ComposeRows(rel, *rows, &why);
        if (!c || !Unite(out, source, Share(std::move(*c)))) {
          Set(s.output, Lost(absl::StrCat(who, ": ", why)));
          return;
        }
      }
    }
    Set(s.output, std::move(out));
  }

  const Recorder& recorder_;
  const BlockLog<Event>& events_;

 public:
  bool products_of_tokens = false;  // two token-indexed tensors met in one product (explicit attention)

 private:
  const TokenFlowRequest& req_;
  std::unordered_map<uintptr_t, Flow> flows_;
  std::unordered_map<uintptr_t, TokenInput> seeds_;
  std::unordered_map<uintptr_t, int64_t> written_;  // made by a call (no longer a seed): when
  int64_t generation_ = 0;
  std::unordered_map<uintptr_t, uintptr_t> root_;                // a view -> the tensor it views
  std::unordered_map<uintptr_t, std::vector<uintptr_t>> group_;  // a base -> its views
};

TokenRelation RelationFromJson(const nlohmann::json& j) {
  TokenRelation r;
  r.kind = j.at("kind").get<std::string>();
  r.limit = j.value("limit", static_cast<int64_t>(-1));
  r.first_position = j.value("first_position", static_cast<int64_t>(0));
  return r;
}

nlohmann::json RelationJson(const TokenRelation& r) {
  nlohmann::json j = {{"kind", r.kind}};
  if (r.limit >= 0) j["limit"] = r.limit;
  if (r.first_position > 0) j["first_position"] = r.first_position;
  return j;
}

bool ClosedScope(const Recorder& r, int32_t scope) {
  // Its calls are still held: a streaming scan drops calls it has folded.
  return scope >= 0 && scope < static_cast<int32_t>(r.scopes().size()) && r.scopes()[scope].end_event >= 0 &&
         r.scopes()[scope].begin_event >= r.folded();
}

}  // namespace

TokenMaskQuery FindAttentionMasks(const Recorder& recorder, int32_t scope) {
  TokenMaskQuery q;
  if (!ClosedScope(recorder, scope)) return q;
  const auto& sc = recorder.scopes()[scope];
  const auto& events = recorder.events();
  for (int64_t i = sc.begin_event - recorder.folded(); i < sc.end_event - recorder.folded(); ++i) {
    const Event& e = events[i];
    const OpInfo& info = Catalog().Get(e.op());
    if (Has(info.name, TokenTrait::kSoftmax)) q.softmax = true;
    if (!IsAttention(info.name)) continue;
    q.attention = true;
    const SdpaArgs at = SdpaOf(info.name);
    // The kernel SDPA dispatches to gets a mask SDPA derived (a boolean one
    // made additive): the pass reads the outer call's.
    if (at.mask < 0 || (e.parent >= 0 && IsAttention(Catalog().Get(events[e.parent].op()).name))) continue;
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    const ArgMeta& m = call.arg(at.mask);
    if (m.is_tensor() && m.tensor().defined &&
        std::find(q.masks.begin(), q.masks.end(), m.tensor().identity) == q.masks.end()) {
      q.masks.push_back(m.tensor().identity);
    }
  }
  return q;
}

TokenFlowResult AnalyseTokenFlow(const Recorder& recorder, const TokenFlowRequest& request) {
  if (!ClosedScope(recorder, request.scope)) {
    TokenFlowResult r;
    r.reason = "the module call's recorded calls were not found";
    return r;
  }
  Pass pass(recorder, request);
  TokenFlowResult r = pass.Run();
  r.explicit_attention = pass.products_of_tokens;
  return r;
}

std::string TokenFlowJson(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  const Recorder* recorder = ThreadTopRecorder();
  const int32_t scope = j.at("scope").get<int32_t>();
  // The crawl's scan is this thread's innermost one; a scan the model opened
  // inside it would hold other scopes: refuse rather than read those.
  const bool ours = recorder != nullptr && ClosedScope(*recorder, scope) &&
                    recorder->scopes()[scope].path == j.at("path").get<std::string>();
  if (j.value("query", "") == "masks") {
    nlohmann::json out = {{"attention", false}, {"masks", nlohmann::json::array()}};
    if (!ours) return out.dump();
    const TokenMaskQuery q = FindAttentionMasks(*recorder, scope);
    out["attention"] = q.attention;
    out["softmax"] = q.softmax;
    for (uintptr_t m : q.masks) out["masks"].push_back(static_cast<uint64_t>(m));
    return out.dump();
  }
  if (!ours) {
    return nlohmann::json{{"status", "unavailable"}, {"reason", "the module call's recorded calls were not found"}}
        .dump();
  }
  TokenFlowRequest req;
  req.scope = scope;
  for (const auto& in : j.at("inputs")) {
    req.inputs.push_back({static_cast<uintptr_t>(in.at("identity").get<uint64_t>()), in.at("source").get<int32_t>(),
                          in.at("axis").get<int32_t>(), in.at("length").get<int64_t>()});
  }
  req.output = static_cast<uintptr_t>(j.at("output").get<uint64_t>());
  req.output_sizes = j.at("output_sizes").get<std::vector<int64_t>>();
  for (const auto& m : j.at("masks")) {
    TokenMask mask;
    if (m.contains("reason")) {
      mask.reason = m.at("reason").get<std::string>();
    } else {
      mask.rows = m.at("rows").get<int64_t>();
      mask.cols = m.at("cols").get<int64_t>();
      mask.lo = m.at("lo").get<std::vector<int64_t>>();
      mask.hi = m.at("hi").get<std::vector<int64_t>>();
      if (static_cast<int64_t>(mask.lo.size()) != mask.rows || mask.hi.size() != mask.lo.size()) {
        mask.reason = "summary is malformed";
      }
    }
    req.masks[static_cast<uintptr_t>(m.at("identity").get<uint64_t>())] = std::move(mask);
  }
  for (const auto& s : j.at("steps")) {
    TokenStep step;
    step.scope = s.at("scope").get<int32_t>();
    step.output = static_cast<uintptr_t>(s.at("output").get<uint64_t>());
    if (s.contains("reason")) {
      step.reason = s.at("reason").get<std::string>();
    } else {
      step.output_axis = s.at("output_axis").get<int32_t>();
      step.output_length = s.at("output_length").get<int64_t>();
      for (const auto& in : s.at("inputs")) {
        step.inputs.push_back({static_cast<uintptr_t>(in.at("identity").get<uint64_t>()), in.at("axis").get<int32_t>(),
                               in.at("length").get<int64_t>(), RelationFromJson(in.at("relation"))});
      }
    }
    req.steps.push_back(std::move(step));
  }
  const TokenFlowResult r = AnalyseTokenFlow(*recorder, req);
  if (!r.complete) {
    return nlohmann::json{{"status", "unavailable"}, {"reason", r.reason}, {"explicit_attention", r.explicit_attention}}
        .dump();
  }
  nlohmann::json out = {{"status", "complete"}, {"output_axis", r.output_axis}, {"output_length", r.output_length}};
  out["sources"] = nlohmann::json::array();
  for (const auto& [source, rel] : r.sources)
    out["sources"].push_back({{"source", source}, {"relation", RelationJson(rel)}});
  return out.dump();
}

}  // namespace torchscan
