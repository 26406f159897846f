// The token-flow pass's walk over the calls: seeds, the flow of each
// tensor, views and in-place writes, decompositions followed through their
// children, and a caller's steps (token_flow_pass.h).
#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "torchscan_dispatch/analyses/token_flow_pass.h"

#include "absl/container/flat_hash_set.h"

namespace torchscan::token_flow_internal {

TokenFlowResult Pass::Run() {
  TokenFlowResult res;
  const auto& scopes = recorder_.scopes();
  const Recorder::Scope& scope = scopes[req_.scope];
  // Scope bounds count the scan's calls; events_ holds those not folded (ClosedScope).
  const int64_t base = recorder_.folded();
  const int64_t begin = scope.begin_event - base, end = scope.end_event - base;
  end_ = end;
  // Steps by their first call; the outermost first where several start together.
  struct Range {
    int64_t begin, end;
    const TokenStep* step;
  };
  std::vector<Range> steps;
  for (const TokenStep& s : req_.steps) {
    if (auto calls = StepCalls(recorder_, req_.scope, s.scope)) steps.push_back({calls->first, calls->second, &s});
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
  res.mixed = out->mixed;
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

// A seed made a flow once its shape is known.
Flow Pass::Seed(const TokenInput& in, int32_t ndim, int64_t length_at_axis, bool nested) {
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
const Flow* Pass::Get(const TensorMeta& t) {
  // 0-d tensors hold no token axis; Python scalars wrapped as tensors are
  // made without a recorded call and may reuse a freed tracked address.
  if (t.ndim == 0) return nullptr;
  if (Flow* held = Held(t.identity)) {
    Flow& f = *held;
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
const Flow* Pass::GetId(uintptr_t id, int32_t axis, int64_t length) {
  if (const Flow* held = Held(id)) return held;
  if (written_.count(id)) return nullptr;
  auto s = seeds_.find(id);
  if (s == seeds_.end()) return nullptr;
  return &(flows_[id] = Seed(s->second, axis + 1, s->second.axis == axis ? length : -1, false));
}

const Flow* Pass::Output() {
  if (const Flow* held = Held(req_.output)) return held;
  if (written_.count(req_.output)) return nullptr;
  auto s = seeds_.find(req_.output);  // the module returned an input
  if (s == seeds_.end()) return nullptr;
  const auto& sz = req_.output_sizes;
  const int32_t axis = s->second.axis;
  const bool fits = axis >= 0 && axis < static_cast<int32_t>(sz.size());
  return &(flows_[req_.output] = Seed(s->second, static_cast<int32_t>(sz.size()), fits ? sz[axis] : -1, false));
}

namespace {
// A call that writes its result in place: a name ending in "_" or an out=
// overload, but not the in-place calls that change a tensor's metadata, not
// its values (those leave its views alone).
bool WritesInPlace(const OpInfo& info) {
  const absl::string_view name = N(info.name);
  const absl::string_view base = absl::StartsWith(name, "aten::") ? name.substr(6) : name;
  return ((base.size() > 1 && base.back() == '_') || info.overload == "out") &&
         !info.traits.Has(TokenTrait::kMetadataInPlace);
}

// Whether `id` is one of the call's tensor operands (an output that is none
// of them is a tensor the call made: Note [Reused identities]).
bool IsOperand(const OpCall& call, uintptr_t id) {
  bool operand = false;
  EachTensor(call.args, [&](const TensorMeta& a) { operand = operand || a.identity == id; });
  return operand;
}
}  // namespace

// Views share their base's memory: a call that writes one in place
// changes the others, which the pass does not follow value by value, so
// they are not followed from here on (their base included).
void Pass::Aliases(const OpInfo& info, const OpCall& call) {
  NewTensors(call);
  const absl::string_view name = N(call.name);
  if (WritesInPlace(info)) {
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
  if (!info.traits.Has(TokenTrait::kMayAlias)) return;
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor()) return;
  const uintptr_t r = Root(x.tensor().identity);
  EachTensor(call.outputs, [&](const TensorMeta& t) {
    if (t.identity == x.tensor().identity) return;
    root_[t.identity] = r;
    group_[r].push_back(t.identity);
  });
}

// Note [Masks written after use]
// A mask's values are read when the module call that needs them returns
// (the recorder keeps no values), so they are the ones the attention ran
// with unless the call wrote into the mask after the attention read it: an
// in-place call (a name ending in "_", an out= overload) whose result is
// the mask or a view of it (one known to the pass by then, or made from
// the mask by a later call). Writes through aliases the recorder cannot
// connect (`.data`, a NumPy array) are not seen here.
std::string Pass::WrittenAfterUse(uintptr_t id) const {
  // The mask and its views by identity: those known when the attention ran,
  // then those made from them. An identity a later call returns as a new
  // tensor names that tensor from then on (Note [Reused identities]).
  absl::flat_hash_set<uintptr_t> mask = {id, Root(id)};
  if (auto g = group_.find(Root(id)); g != group_.end()) mask.insert(g->second.begin(), g->second.end());
  for (int64_t j = visiting_ + 1; j < end_; ++j) {
    const Event& e = events_[j];
    if (e.raised()) continue;
    const OpInfo& info = Catalog().Get(e.op());
    const ResolvedCall rc(e);
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    bool writes = false;
    EachTensor(call.outputs, [&](const TensorMeta& t) { writes = writes || mask.count(t.identity) > 0; });
    if (writes && WritesInPlace(info)) {
      return absl::StrCat(N(info.name),
                          " wrote into the mask after the attention read it; the values the attention ran "
                          "with are not known");
    }
    // A view made from the mask shares its memory (as Aliases follows them).
    const ArgMeta& first = call.arg(0);
    const bool view = info.traits.Has(TokenTrait::kMayAlias) && first.is_tensor() && first.tensor().defined &&
                      mask.count(first.tensor().identity) > 0;
    EachTensor(call.outputs, [&](const TensorMeta& t) {
      if (view) {
        mask.insert(t.identity);
      } else if (!IsOperand(call, t.identity)) {
        mask.erase(t.identity);
      }
    });
  }
  return "";
}

// See Note [Reused identities]. An output that is none of the call's
// operands is a tensor made by the call, whatever its address held before.
void Pass::NewTensors(const OpCall& call) {
  EachTensor(call.outputs, [&](const TensorMeta& t) {
    if (!IsOperand(call, t.identity)) Unlink(t.identity);
  });
}

void Pass::Unlink(uintptr_t id) {
  if (auto r = root_.find(id); r != root_.end()) {
    if (auto g = group_.find(r->second); g != group_.end()) {
      auto& views = g->second;
      views.erase(std::remove(views.begin(), views.end(), id), views.end());
    }
    root_.erase(r);
  }
  auto g = group_.find(id);
  if (g == group_.end()) return;
  // The old base's views still share its memory with each other: they stay
  // one group, rooted at the first of them.
  std::vector<uintptr_t> views = std::move(g->second);
  group_.erase(g);
  if (views.empty()) return;
  const uintptr_t root = views.front();
  root_.erase(root);
  for (size_t k = 1; k < views.size(); ++k) root_[views[k]] = root;
  views.erase(views.begin());
  if (!views.empty()) group_[root] = std::move(views);
}

// Tensors made inside calls [from, to) that the pass does not visit (a
// call handled by its rule, a step): their identities may be reused
// addresses of tensors it tracked. A call returning its own input (an
// alias: contiguous, to) made nothing new.
// The calling event's own outputs (`parent`, -1: none) are its rule's.
void Pass::Forget(int64_t from, int64_t to, const std::string& lost, int64_t parent) {
  int32_t reason = -1;  // Note [Deferred lost marks]
  if (!lost.empty()) {
    reason = static_cast<int32_t>(reasons_.size());
    reasons_.push_back(lost);
  }
  absl::InlinedVector<uintptr_t, 4> keep;  // by address: a few outputs
  if (parent >= 0) {
    const Event& p = events_[parent];
    EachTensor(p.outputs(), [&](const TensorMeta& t) { keep.push_back(p.identity(t)); });
  }
  // Per event, its own numbers: a call numbers its operands' tensors first
  // (CallSig::arg_tensors), so an output numbered after them is new.
  for (int64_t j = from; j < to; ++j) {
    const Event& e = events_[j];
    EachTensor(e.outputs(), [&](const TensorMeta& t) {
      if (t.identity <= e.sig->arg_tensors) return;  // one of its operands
      const uintptr_t id = e.identity(t);
      if (std::find(keep.begin(), keep.end(), id) != keep.end()) return;
      Unlink(id);
      if (reason < 0) {
        Clear(id);
      } else {
        MarkLost(id, reason);
      }
    });
  }
}

bool Pass::Unite(Flow& into, int32_t source, const std::shared_ptr<const TokenRows>& rows) {
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
std::optional<std::map<int32_t, std::shared_ptr<const TokenRows>>> Pass::Fit(const Flow& f, int64_t length) {
  if (f.length == length) return f.deps;
  if (f.length != 1) return std::nullopt;
  std::map<int32_t, std::shared_ptr<const TokenRows>> out;
  for (const auto& [source, rows] : f.deps) {
    out[source] = Share({std::vector<int64_t>(length, rows->lo[0]), std::vector<int64_t>(length, rows->hi[0])});
  }
  return out;
}

// Adds `f`, whose token dim lands on output dim `dim` of `out`, to `r`.
std::optional<std::string> Pass::Add(Flow& r, bool& any, const Flow& f, int64_t dim, const TensorMeta& out,
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

int64_t Pass::VisitCall(int64_t i, int64_t end, const OpInfo& info, const OpCall& call) {
  visiting_ = i;
  const Event& e = events_[i];
  const int64_t next = SubtreeEnd(i, end);
  bool tracked = false, marked = false;  // marked: some input's flow has marks (most have none)
  EachTensor(call.args, [&](const TensorMeta& t) {
    const Flow* f = Get(t);
    tracked = tracked || f != nullptr;
    marked = marked || (f != nullptr && f->mixed != 0);
  });
  const absl::string_view name = N(call.name);
  const absl::string_view base = absl::StartsWith(name, "aten::") ? name.substr(6) : name;
  if (!tracked || info.traits.Has(TokenTrait::kShapeOnly)) {
    Forget(i + 1, next, "", i);
    EachTensor(call.outputs, [&](const TensorMeta& t) { Clear(t.identity); });
    return next;
  }
  bool done = false;
  marks_done_ = false;
  std::optional<Flow> f;
  if (info.traits.token_rule == TokenRule::kJoin) {
    if (call.outputs.size() == 1 && call.outputs[0].is_tensor()) f = Join(call, call.outputs[0].tensor(), base);
  } else {
    f = Rule(call, info.traits, base, done);
  }
  if (f || done) Forget(i + 1, next, "", i);
  if (done) return next;
  if (f) {
    const TensorMeta& out = call.outputs[0].tensor();
    // Rules that move or clear dims set the marks; the others keep their
    // inputs' (Note [Dependencies that differ along another dim]).
    if (marked && f->lost.empty() && !marks_done_) f->mixed |= AlignedMarks(call, out);
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
  // See Note [A rule or the children].
  if (next > i + 1 && !info.traits.Has(TokenTrait::kAttention) && Catalog().RanDecomposition(e.op(), e.keys())) {
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
void Pass::Step(const TokenStep& s) {
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
  out.mixed = s.mixed;
  for (const TokenStep::Input& in : s.inputs) {
    const Flow* f = GetId(in.identity, in.axis, in.length);
    if (f == nullptr) continue;  // a constant
    if (!f->lost.empty()) {
      Set(s.output, *f);
      return;
    }
    // One position may lie on any dim (Note [A token axis of one position]).
    if ((f->dim != in.axis && !(f->length == 1 && in.length == 1)) || f->length != in.length) {
      Set(s.output, Lost(absl::StrCat(who, ": the token axis of its input is dim ", in.axis,
                                      ", where the data flow has positions on dim ", f->dim)));
      return;
    }
    if (f->mixed != 0) {  // its relation was found for an input read alike throughout
      Set(s.output, Lost(absl::StrCat(who, ": its input", kMixedInput)));
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

uint64_t Pass::AlignedMarks(const OpCall& call, const TensorMeta& out) {
  uint64_t marks = 0;
  EachTensor(call.args, [&](const TensorMeta& t) {
    if (const Flow* f = Get(t); f != nullptr && f->lost.empty()) marks |= AlignMarks(f->mixed, t.ndim, out.ndim);
  });
  return marks;
}

uint64_t ViewMarks(uint64_t marks, const TensorMeta& in, const TensorMeta& out) {
  if (marks == 0) return 0;
  if (in.ndim >= 64 || out.ndim >= 64) return kEveryDim;
  uint64_t r = 0;
  int64_t i = 0, o = 0;
  while (i < in.ndim || o < out.ndim) {
    // One group: dims from each side until their sizes' products meet.
    const int64_t i0 = i, o0 = o;
    int64_t pi = i < in.ndim ? in.size(i++) : 1, po = o < out.ndim ? out.size(o++) : 1;
    while (pi != po) {
      if (pi < po && i < in.ndim) {
        pi *= in.size(i++);
      } else if (po < pi && o < out.ndim) {
        po *= out.size(o++);
      } else {
        return kEveryDim;
      }
    }
    bool marked = false;
    for (int64_t k = i0; k < i; ++k) marked = marked || Marked(marks, k);
    for (int64_t k = o0; marked && k < o; ++k) r |= DimBit(k);
  }
  return r;
}

}  // namespace torchscan::token_flow_internal
