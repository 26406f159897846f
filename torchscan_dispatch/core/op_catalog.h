// What TorchScan knows about an operator: names, zero-cost rule, built-in
// formula, and whether a given call ran a CompositeImplicitAutograd
// decomposition. Built lazily when a report is made, never on the hot path.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include <unordered_map>

#include "formulas/module_costs.h"
#include "formulas/op_traits.h"
#include "formulas/registry.h"

namespace torchscan {

struct OpInfo {
  std::string name;      // "aten::mm"
  std::string overload;  // "" / "out"
  std::string packet;    // "aten.mm", the report key (FlopCounterMode's spelling)
  ZeroCostReason zero_cost = ZeroCostReason::kNone;
  const OperatorFormula* builtin = nullptr;  // operator view
  const ModuleFormula* module = nullptr;     // module view
  bool has_math_kernel = false;              // registered CompositeImplicitAutograd kernel
  // Schema arguments before the out= destinations (all when none).
  uint32_t operands = UINT32_MAX;
  bool returns_alias = false;  // every return may alias an input, unwritten
  bool out_form = false;       // an out= overload (it has destinations)
  OpTraits traits;             // TraitsOf(name), looked up once
};

// The call every formula sees (operator view, module view, caller formulas,
// receptive fields): out= destinations are written, never read, so they
// are not operands (they are the returns).
OpCall FormulaCall(const OpInfo& info, absl::Span<const ArgMeta> args, absl::Span<const ArgMeta> outputs);

class OpCatalog {
 public:
  const OpInfo& Get(const c10::OperatorHandle& op);
  // True when the kernel this call reached below the mode key is the
  // operator's CompositeImplicitAutograd decomposition (its children are then
  // the whole of its work). Asks the dispatcher's computed table, highest
  // priority key first, so backend, autograd and CompositeExplicit kernels
  // that win over the decomposition are respected. An autocast kernel counts
  // as one: it casts and calls the operator again below autocast.
  bool RanDecomposition(const c10::OperatorHandle& op, c10::DispatchKeySet keys);
  // True when the kernel this call reached is a registered Autograd kernel
  // (not the autograd fallback): it runs the kernel below it with the
  // autograd keys excluded, and any call it makes with them is its own.
  bool RanAutogradKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys);

  // An operator's computed dispatch table as text, kept across scans while
  // its registrations are unchanged (Note [Computed tables across scans]),
  // with the line each key set reaches (WinningKernel: key, offset, length).
  struct Table {
    std::vector<uint64_t> print;
    std::string text;
    absl::flat_hash_map<uint64_t, std::tuple<c10::DispatchKey, size_t, size_t>> winners;  // shared: under its lock
  };

 private:
  // The key whose kernel this call reached, and its line in the computed table.
  std::pair<c10::DispatchKey, absl::string_view> WinningKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys);
  std::shared_ptr<Table> ComputedTable(const c10::OperatorHandle& op);
  std::unordered_map<c10::OperatorHandle, OpInfo> infos_;
  std::unordered_map<c10::OperatorHandle, std::shared_ptr<Table>> tables_;  // texts stay put: lines view them
  std::unordered_map<c10::OperatorHandle, absl::flat_hash_map<uint64_t, std::pair<c10::DispatchKey, absl::string_view>>>
      winners_;
};

// True when a call of `op` dispatched with `keys` on `args` owns its whole
// subtree in both views (a formula or a zero-cost rule in each, and no
// autograd kernel that may make calls of its own): its children add nothing
// to any report. Cached per thread; safe on the hot path. `op_owner`, when
// given, caches the operator's part of the answer (-1: not known yet).
bool OwnsSubtreeInBothViews(const c10::OperatorHandle& op, c10::DispatchKeySet keys, absl::Span<const c10::IValue> args,
                            int8_t* op_owner = nullptr);
// True when a call of `op` with `keys` adds no FLOPs or MACs of its own in
// either view: it has a zero-cost rule (copy, view, allocation, fill, ...)
// or it runs its decomposition (whose calls are seen one by one). For calls
// no scan records (other threads'); cached per thread.
bool AddsNoFlopsOfItsOwn(const c10::OperatorHandle& op, c10::DispatchKeySet keys);

// True when `op` runs attention or a softmax (TokenTrait::kAttention,
// kSoftmax): the calls a module's token analysis looks for.
bool RunsAttentionOrSoftmax(const c10::OperatorHandle& op);

}  // namespace torchscan
