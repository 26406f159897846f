// The token-flow pass's internals, shared by its files: what a tensor's
// positions depend on (Flow), the functions every rule uses, and the pass
// (Pass). token_flow_pass.cc walks the calls (seeds, aliases, decompositions,
// steps); token_flow_rules.cc holds the rule for each operator family, and
// token_flow_joins.cc those for pieces and joins.
// Nothing here is part of the analysis's API (token_flow.h).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/op_traits.h"
#include "torchscan_dispatch/analyses/token_flow.h"
#include "torchscan_dispatch/core/op_catalog.h"

namespace torchscan::token_flow_internal {

inline absl::string_view N(std::string_view s) { return {s.data(), s.size()}; }

// JSON of the Python shim's requests (token_flow.cc, token_flow_native.cc).
nlohmann::json RelationJson(const TokenRelation& r);
TokenMask MaskFromJson(const nlohmann::json& m);
std::string NativeLayerJson(const nlohmann::json& request);
// Why an SDPA call cannot use mask `m` (empty: it can), in the words the
// token-flow pass has always used for it.
std::string SdpaMaskProblem(const TokenMask& m);

// Note [Dependencies that differ along another dim]
// A Flow says what each position of a tensor reads, for all its elements at
// that position together. That is exact for a part of the tensor too while
// every element at a position reads the same (the common case: projections,
// elementwise math, attention keep it), but not once a join (cat, stack) along
// another dim puts pieces that read different inputs side by side:
// torch.cat([x, y], 0)[:1] reads x alone. The flow then marks that dim
// (Flow::mixed, a bit per dim), as where(condition, x, y) marks the condition's
// dims of more than one element (along the token axis, where each position
// reads what the condition's values pick, it is lost). The marks follow the
// dims through every rule: views and permutes move them, elementwise math
// aligns them from the last dim, and a call that reads a marked dim whole at
// every element of its output clears it: a product or attention summing over
// it, a norm, softmax or reduction over it. A call that takes a part of a
// marked dim (slice, select, split, unbind) loses the flow, with that reason,
// rather than claiming every piece's inputs. Where the pass cannot follow a
// mark (a view it cannot group, more than 63 dims), every dim is marked. The
// whole of a marked tensor keeps its dependencies: a module's output, or a
// step's, does read every piece. A known module call's output says its marks
// (TokenFlowResult::mixed), and its step carries them. A step whose input is
// marked is lost: its relation was found with that input as a source read alike
// throughout, and the call may have taken a part of it.

inline constexpr uint64_t kEveryDim = ~uint64_t{0};
inline uint64_t DimBit(int64_t d) { return d >= 0 && d < 64 ? uint64_t{1} << d : kEveryDim; }
inline bool Marked(uint64_t marks, int64_t d) { return (marks & DimBit(d)) != 0; }
// Marks of a tensor of `from` dims aligned from its last dim with one of `to` dims (broadcasting).
inline uint64_t AlignMarks(uint64_t marks, int64_t from, int64_t to) {
  if (marks == 0 || marks == kEveryDim) return marks;
  if (to >= from) return to - from >= 64 ? kEveryDim : marks << (to - from);
  return from - to >= 64 ? 0 : marks >> (from - to);
}
// Marks without dim d (a select, a reduction without keepdim), or with a new unmarked dim d (stack).
inline uint64_t RemoveDim(uint64_t marks, int64_t d) {
  if (marks == kEveryDim || d < 0 || d >= 64) return marks;
  const uint64_t below = marks & ((uint64_t{1} << d) - 1);
  return below | ((marks >> 1) & ~((uint64_t{1} << d) - 1));
}
inline uint64_t InsertDim(uint64_t marks, int64_t d) {
  if (marks == kEveryDim || d < 0 || d >= 64) return marks;
  const uint64_t below = marks & ((uint64_t{1} << d) - 1);
  return below | ((marks & ~((uint64_t{1} << d) - 1)) << 1);
}
// Marks of a view from `in`'s shape to `out`'s: dims grouped where their
// sizes' products meet; a marked dim marks every dim of its group.
uint64_t ViewMarks(uint64_t marks, const TensorMeta& in, const TensorMeta& out);
inline constexpr const char* kPicksPositions =
    " picks, by a condition that varies along the token axis, between values that read different inputs (the "
    "condition's values are not recorded); not followed";
inline constexpr const char* kMixedPart =
    " takes a part of a tensor whose token dependencies differ along that dim (it joins different inputs); "
    "not followed";
inline constexpr const char* kMixedInput =
    "'s token dependencies differ along a dim other than its token axis (it joins different inputs), and the "
    "call's relation is to that input as a whole; not followed";

// What a tensor's positions depend on. A tensor with no flow holds no
// positions of the inputs (parameters, buffers, constants, shapes only).
struct Flow {
  std::string lost;  // non-empty: not followed, why (naming the operator)
  int32_t dim = 0;   // the dim holding token positions
  int64_t length = 0;
  // By source; shared: most calls pass their input's rows on unchanged.
  std::map<int32_t, std::shared_ptr<const TokenRows>> deps;
  // Bit d: parts along dim d read different inputs (Note [Dependencies that differ along another dim]).
  uint64_t mixed = 0;
};

inline std::shared_ptr<const TokenRows> Share(TokenRows r) { return std::make_shared<const TokenRows>(std::move(r)); }

inline Flow Lost(std::string why) {
  Flow f;
  f.lost = std::move(why);
  return f;
}

inline int64_t Wrap(int64_t d, int64_t n) { return d < 0 ? d + n : d; }

// What the pass knows of an operator is its row in formulas/op_traits.cc.
inline bool Has(absl::string_view name, TokenTrait t) { return TraitsOf({name.data(), name.size()}).Has(t); }
inline bool IsAttention(absl::string_view name) { return Has(name, TokenTrait::kAttention); }

// Argument positions (mask, dropout_p, is_causal) of the SDPA operators the
// pass follows; mask -1: not one of them.
struct SdpaArgs {
  int mask = -1, dropout = -1, causal = -1;
};
inline SdpaArgs SdpaOf(absl::string_view name) {
  if (name == "aten::scaled_dot_product_attention" || name == "aten::_scaled_dot_product_attention_math") {
    return {3, 4, 5};
  }
  if (name == "aten::_scaled_dot_product_flash_attention_for_cpu") return {5, 3, 4};
  return {};
}

// The calls [begin, end) of module call `step`, numbered as the recorder's
// unfolded events are, when it is closed and inside module call `scope`
// (a step a request may take); nullopt otherwise.
inline std::optional<std::pair<int64_t, int64_t>> StepCalls(const Recorder& recorder, int32_t scope, int32_t step) {
  const auto& scopes = recorder.scopes();
  if (step <= scope || step >= static_cast<int32_t>(scopes.size())) return std::nullopt;
  const auto &outer = scopes[scope], &inner = scopes[step];
  if (inner.end_event < 0 || inner.begin_event < outer.begin_event || inner.end_event > outer.end_event) {
    return std::nullopt;
  }
  return std::make_pair(inner.begin_event - recorder.folded(), inner.end_event - recorder.folded());
}

inline OpCatalog& Catalog() {
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

inline std::vector<int64_t> DimsOf(const ArgMeta& a, int64_t ndim) {
  std::vector<int64_t> dims;
  if (a.kind == ArgKind::kInt) dims.push_back(Wrap(a.to_int(), ndim));
  if (a.kind == ArgKind::kIntList) {
    for (int64_t d : a.ints()) dims.push_back(Wrap(d, ndim));
  }
  return dims;
}

// Note [A rule or the children]
// Each call with tracked inputs gets its operator family's rule
// (token_flow_rules.cc). A rule that returns nullopt leaves the call to the
// walk (token_flow_pass.cc): when the call ran its CompositeImplicitAutograd
// decomposition and its children wrote all its outputs, the children are
// followed one by one; otherwise the token axis is lost there, naming the
// operator. So an operator needs a rule only when it runs a kernel of its
// own; which family it is in is its row in formulas/op_traits.cc.
class Pass {
 public:
  Pass(const Recorder& r, const TokenFlowRequest& q) : recorder_(r), events_(r.events()), req_(q) {
    for (const TokenInput& in : req_.inputs) seeds_[in.identity] = in;
  }

  TokenFlowResult Run();

 private:
  // The walk over the calls (token_flow_pass.cc).
  Flow Seed(const TokenInput& in, int32_t ndim, int64_t length_at_axis, bool nested);
  const Flow* Get(const TensorMeta& t);
  const Flow* GetId(uintptr_t id, int32_t axis, int64_t length);
  const Flow* Output();

  void Set(uintptr_t id, Flow f) {
    written_[id] = ++generation_;
    flows_[id] = std::move(f);
    if (!lost_.empty()) lost_.erase(id);
  }
  void Clear(uintptr_t id) {
    written_[id] = ++generation_;
    flows_.erase(id);
    if (!lost_.empty()) lost_.erase(id);
  }
  // Note [Deferred lost marks]
  // A step forgets every tensor made inside its module call (Forget): each
  // becomes lost, with one reason for them all. Most are never read again,
  // so the mark is the reason's index until one is: Held makes its Flow then.
  void MarkLost(uintptr_t id, int32_t reason) {
    written_[id] = ++generation_;
    flows_.erase(id);
    lost_[id] = reason;
  }
  Flow* Held(uintptr_t id) {
    auto it = flows_.find(id);
    if (it != flows_.end()) return &it->second;
    auto l = lost_.find(id);
    if (l == lost_.end()) return nullptr;
    Flow& f = flows_[id] = Lost(reasons_[l->second]);
    lost_.erase(l);
    return &f;
  }

  uintptr_t Root(uintptr_t id) const {
    auto it = root_.find(id);
    return it == root_.end() ? id : it->second;
  }

  void Aliases(const OpInfo& info, const OpCall& call);
  void NewTensors(const OpCall& call);
  void Unlink(uintptr_t id);  // `id` names a new tensor: in no view group
  void Forget(int64_t from, int64_t to, const std::string& lost, int64_t parent = -1);

  // The end of event i's subtree: its descendants follow it, with parents >= i.
  int64_t SubtreeEnd(int64_t i, int64_t end) const {
    int64_t j = i + 1;
    while (j < end && events_[j].parent >= i) ++j;
    return j;
  }

  static bool Unite(Flow& into, int32_t source, const std::shared_ptr<const TokenRows>& rows);
  static std::optional<std::map<int32_t, std::shared_ptr<const TokenRows>>> Fit(const Flow& f, int64_t length);
  std::optional<std::string> Add(Flow& r, bool& any, const Flow& f, int64_t dim, const TensorMeta& out,
                                 absl::string_view name);

  // The OR of the marks of `call`'s tracked tensor arguments, aligned from
  // their last dims with `out`'s (what elementwise math makes of them).
  uint64_t AlignedMarks(const OpCall& call, const TensorMeta& out);

  // The rules, by operator family (token_flow_rules.cc).
  Flow Elementwise(const OpCall& call, const TensorMeta& out, size_t first_arg = 0);
  Flow Where(const OpCall& call, const TensorMeta& out);
  Flow Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear);
  Flow Reshape(const OpCall& call, const Flow& f, const TensorMeta& in, const TensorMeta& out);
  static int32_t OnePositionPlace(int32_t t, const TensorMeta& in, int32_t e, const TensorMeta& out);
  static Flow Rows(const Flow& f, int64_t start, int64_t step, int64_t length);
  Flow Attention(const OpCall& call, const TensorMeta& out, const SdpaArgs& at);
  static Flow OnePosition(const Flow& f, int32_t dim, absl::string_view name);
  // `traits`: the operator's row (the catalog's cached OpTraits).
  std::optional<Flow> Rule(const OpCall& call, const OpTraits& traits, absl::string_view base, bool& done);
  // Pieces and joins (token_flow_joins.cc).
  std::optional<Flow> Pieces(const OpCall& call, const OpTraits& traits, absl::string_view base, bool& done);
  static bool SameDeps(const Flow& a, const Flow& b);
  Flow Join(const OpCall& call, const TensorMeta& out, absl::string_view base);
  Flow Along(const OpCall& call, const TensorMeta& out, int64_t dim);

  // Why the values of mask `id`, read when the module call returned, may not
  // be those the attention at event `visiting_` ran with: a later call of the
  // module call wrote into it in place (Note [Masks written after use]); ""
  // when none did.
  std::string WrittenAfterUse(uintptr_t id) const;

  // Visits event i and what it needs of its subtree; returns the next event.
  // The call is resolved once for its rule and its aliases (the resolution
  // reads only the event).
  int64_t Visit(int64_t i, int64_t end) {
    const Event& e = events_[i];
    if (e.raised()) return SubtreeEnd(i, end);
    const OpInfo& info = Catalog().Get(e.op());
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    const int64_t next = VisitCall(i, end, info, call);
    Aliases(info, call);
    return next;
  }

  int64_t VisitCall(int64_t i, int64_t end, const OpInfo& info, const OpCall& call);
  void Step(const TokenStep& s);
  const Recorder& recorder_;
  const BlockLog<Event>& events_;
  int64_t visiting_ = -1;    // the event VisitCall is visiting
  bool marks_done_ = false;  // the rule VisitCall ran set its result's marks (else: AlignedMarks)
  int64_t end_ = 0;          // one past the module call's last event

 public:
  bool products_of_tokens = false;  // two token-indexed tensors met in one product (explicit attention)

 private:
  const TokenFlowRequest& req_;
  // Open addressing where no reference outlives an insertion; flows_ keeps
  // its nodes (Get hands out pointers the caller holds while others are set).
  absl::node_hash_map<uintptr_t, Flow> flows_;
  absl::flat_hash_map<uintptr_t, TokenInput> seeds_;
  absl::flat_hash_map<uintptr_t, int64_t> written_;  // made by a call (no longer a seed): when
  int64_t generation_ = 0;
  absl::flat_hash_map<uintptr_t, uintptr_t> root_;                // a view -> the tensor it views
  absl::flat_hash_map<uintptr_t, std::vector<uintptr_t>> group_;  // a base -> its views
  absl::flat_hash_map<uintptr_t, int32_t> lost_;                  // lost, not yet read: index into reasons_ (MarkLost)
  std::vector<std::string> reasons_;
};

}  // namespace torchscan::token_flow_internal
