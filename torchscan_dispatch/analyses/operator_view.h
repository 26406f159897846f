// The operator view: decides, per recorded call, who owns its FLOPs
// (DESIGN.md "Calls form a tree; formulas own subtrees") and tallies them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "reports/flop_report.h"
#include "reports/layers.h"
#include "torchscan_dispatch/types.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// Caller formulas of one scan, keyed "aten::relu".
struct Overrides {
  absl::flat_hash_map<std::string, CallerFormula> formulas;
  absl::flat_hash_set<std::string> deferred;
  absl::flat_hash_map<int32_t, Count> deferred_values;  // event index -> FLOPs

  bool Has(const std::string& op) const;  // exact name, or in-place "name_"
  const CallerFormula* Find(const std::string& op) const;
  bool IsDeferred(const std::string& op) const;
};

enum class CallKind : uint8_t {
  kFormula,        // a built-in or caller formula owns the call and its subtree
  kDeferred,       // a caller formula valued after the scan (Python)
  kZeroCost,       // view/metadata/allocation/fill/copy: zero, owns its subtree
  kDecomposition,  // CompositeImplicitAutograd: its children are its work
  kOpaque,         // no formula: uncounted
};

struct OperatorPlan {
  std::vector<CallKind> kind;
  std::vector<bool> covered;    // an ancestor owns this call's FLOPs
  std::vector<bool> in_opaque;  // an ancestor is uncounted (reported there)
};

// Ownership for one view: `classify` says what each call is in that view,
// from its signature alone (asked once per distinct call); the outermost
// formula (or zero-cost) call owns its subtree.
OperatorPlan PlanView(const BlockLog<Event>& events, OpCatalog& catalog,
                      absl::FunctionRef<CallKind(const Event&)> classify);

OperatorPlan PlanOperatorView(const BlockLog<Event>& events, OpCatalog& catalog, const Overrides& overrides);

// Work a view could not value, by operator packet: calls with no formula
// (outermost only), stated exclusions, and calls whose kernel raised.
struct Gaps {
  std::map<std::string, int64_t> uncounted, excluded, raised;

  void AddOpaque(const OpInfo& info, bool inside_opaque);
  void Add(const Gaps& other);
  // One diagnostic per gap and metric; `what` names the missing formula kind
  // ("FLOP formula", "module-view formula").
  void AppendDiagnostics(std::vector<reports::Diagnostic>& out, const std::vector<std::string>& metrics,
                         const std::string& what) const;
};

// Formula issues are grouped by code and operator, keeping the first call's
// message. A compiled region's message names what compiled it (torch.compile
// or AOTInductor), and one scan may run both: its issues are grouped by
// message too. IssueKey is the code part of a group's key; IssueCode
// recovers the code from it.
std::string IssueKey(const std::string& code, const std::string& message);
std::string IssueCode(const std::string& key);

// sum += value; false when this addition took `sum` past 2^128 - 1 (it
// then keeps its value before it: a lower bound). Inline: the views add
// several counts per call.
inline bool AddCount(Count& sum, const Count& value) {
  const bool was_exact = sum.exact();
  sum += value;
  return !was_exact || sum.exact();
}
// Why a call's count was refused: negative, or past 2^128 - 1.
std::string InexactCountMessage(const Count& value, bool caller);

// Note [Runs of one call]
// A loop repeats its calls: consecutive events of one signature, plan kind,
// scope, request and label set (events covered by another call's formula
// may lie between them) add the same values. The views add such a run's
// values once, multiplied by its length, where the call's values are
// complete and every sum they go to stays exact or is inexact already: the
// sums, flags and diagnostics are then those of adding call by call. Any
// other run goes call by call.
struct CallRun {
  size_t calls = 1;  // the run's events (covered ones not counted)
  size_t last = 0;   // index of its last event
};
inline CallRun RunAt(const BlockLog<Event>& events, const OperatorPlan& plan, size_t i) {
  const Event& e = events[i];
  CallRun run{1, i};
  for (size_t j = i + 1; j < events.size(); ++j) {
    if (plan.covered[j]) continue;
    const Event& x = events[j];
    if (x.sig != e.sig || plan.kind[j] != plan.kind[i] || x.scope != e.scope || x.request != e.request ||
        x.labels != e.labels) {
      break;
    }
    ++run.calls;
    run.last = j;
  }
  return run;
}
// Whether adding `value` to `sum` call by call would never take it past
// 2^128 - 1: it stays exact, or it is inexact already (and keeps its value).
inline bool AddsWithinRange(const Count& sum, const Count& value) { return !sum.exact() || (sum + value).exact(); }

struct TallyContext {
  std::string torch_version;
  std::string scope;
  int64_t unattributed_calls = 0;  // other threads' calls that carried the mode key
  // Of those, calls of zero-cost operators (copies, views, allocations,
  // fills) or of decompositions (each of their calls is one of these
  // calls): no FLOPs or MACs of their own, whatever thread ran them.
  int64_t unattributed_zero_cost_calls = 0;
};

// The operator view's sums before its diagnostics are written: what a
// streaming scan keeps of the calls it folded (streaming.h). Sums of
// disjoint sets of whole call trees add up to the sums of their union.
struct OperatorSums {
  reports::FlopTally t;  // totals, by_operator, by_module (label names), ignored; no diagnostics
  Gaps gaps;
  // (code, packet) -> (calls, first message)
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, std::string>> issues;
  void Add(const OperatorSums& other);  // `other`'s calls came after these
};

// Rows a tally also adds each call's values to: its module scope's (row
// e.scope - first_scope) and its request's (e.request - first_request);
// a call outside any has none.
struct TallyRows {
  std::vector<reports::LayerTally>* by_scope = nullptr;
  int32_t first_scope = 0;
  std::vector<reports::LayerTally>* by_request = nullptr;
  int32_t first_request = 0;
  reports::LayerTally* Scope(const Event& e) const {
    return by_scope && e.scope >= 0 ? &(*by_scope)[e.scope - first_scope] : nullptr;
  }
  reports::LayerTally* Request(const Event& e) const {
    return by_request && e.request >= 0 ? &(*by_request)[e.request - first_request] : nullptr;
  }
};

// `layers` (optional, one per recorded scope) receives each counted call's
// value at index 0 under the scope the call ran in.
void AccumulateOperatorView(const BlockLog<Event>& events, const LabelTree& label_sets, const OperatorPlan& plan,
                            OpCatalog& catalog, const Overrides& overrides, OperatorSums& sums,
                            const TallyRows& rows = {});
reports::FlopTally FinishOperatorView(OperatorSums sums, const TallyContext& context);
// Accumulate and Finish, starting from `before` (the folded calls' sums) when given.
reports::FlopTally TallyOperatorView(const BlockLog<Event>& events, const LabelTree& label_sets,
                                     const OperatorPlan& plan, OpCatalog& catalog, const Overrides& overrides,
                                     const TallyContext& context, std::vector<reports::LayerTally>* layers = nullptr,
                                     const OperatorSums* before = nullptr);

}  // namespace torchscan
