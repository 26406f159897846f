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
#include "torchscan_dispatch/torchscan.h"
#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/scan_state.h"

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

// Ownership for one view: `classify` says what each call is in that view;
// the outermost formula (or zero-cost) call owns its subtree.
OperatorPlan PlanView(const BlockLog<Event>& events, OpCatalog& catalog,
                      absl::FunctionRef<CallKind(const Event&)> classify);

OperatorPlan PlanOperatorView(const BlockLog<Event>& events, OpCatalog& catalog,
                              const Overrides& overrides);

// Work a view could not value, by operator packet: calls with no formula
// (outermost only), stated exclusions, and calls whose kernel raised.
struct Gaps {
  std::map<std::string, int64_t> uncounted, excluded, raised;

  void AddOpaque(const OpInfo& info, bool inside_opaque);
  // One diagnostic per gap and metric; `what` names the missing formula kind
  // ("FLOP formula", "module-view formula").
  void AppendDiagnostics(std::vector<reports::Diagnostic>& out, const std::vector<std::string>& metrics,
                         const std::string& what) const;
};

// sum += value; false when this addition took `sum` past 2^128 - 1 (it
// then keeps its value before it: a lower bound).
bool AddCount(Count& sum, const Count& value);
// Why a call's count was refused: negative, or past 2^128 - 1.
std::string InexactCountMessage(const Count& value, bool caller);

struct TallyContext {
  std::string torch_version;
  std::string scope;
  int64_t unattributed_calls = 0;  // other threads' calls that carried the mode key
};

// `layers` (optional, one per recorded scope) receives each counted call's
// value at index 0 under the scope the call ran in.
reports::FlopTally TallyOperatorView(const BlockLog<Event>& events,
                                     const LabelTree& label_sets,
                                     const OperatorPlan& plan, OpCatalog& catalog,
                                     const Overrides& overrides, const TallyContext& context,
                                     std::vector<reports::LayerTally>* layers = nullptr);

}  // namespace torchscan
