// The module view (torchscan_flops_v1 "Module" column): FLOPs with K
// multiplies + K-1 adds per K-term dot and one bias add per output, MACs, and
// logical memory accesses (DMAs: staged reads/writes, not hardware traffic).
// Formulas live with their operator family; this is their common shape.
#pragma once

#include <string_view>

#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "formulas/result.h"
#include "formulas/registry.h"

namespace torchscan {

struct ModuleCosts {
  FormulaResult flops;
  FormulaResult macs;
  FormulaResult dmas;

  static ModuleCosts Unavailable(const FormulaResult& why) { return {why, why, why}; }
  // FLOPs from a formula plus complete MACs and DMAs; all three unavailable
  // when the FLOP formula could not value the call.
  static ModuleCosts FromFlops(const FormulaResult& flops, Count macs, Count dmas) {
    if (flops.status == MetricStatus::kUnavailable) return Unavailable(flops);
    return {flops, FormulaResult::Complete(macs), FormulaResult::Complete(dmas)};
  }
};

using ModuleCostFn = ModuleCosts (*)(const OpCall&);

struct ModuleFormula {
  std::string_view op;  // "aten::linear"
  ModuleCostFn costs = nullptr;
  FormulaFn pointwise_flops = nullptr;  // pointwise rows: PointwiseCosts(call, this)

  ModuleCosts Evaluate(const OpCall& call) const;
};

// Module formulas written for the module view (pointwise rows of the
// operator registry add theirs implicitly; FindModuleFormula sees both).
absl::Span<const ModuleFormula> BuiltinModuleFormulas();
// Formula for "ns::name" (in-place "name_" shares "name").
const ModuleFormula* FindModuleFormula(std::string_view op);
// Why an operator-view row has no module-view formula (nullptr when it has
// one, or when no reason is stated: a test keeps every row in one or the other).
const char* ModuleViewGap(std::string_view op);

// Pointwise operators: FLOPs from their fallback formula, zero MACs
// ("Activation MACs are zero"), DMAs = every tensor argument's elements read
// plus every output element written ("Input + output elements").
ModuleCosts PointwiseCosts(const OpCall& call, FormulaFn flops);
// Zero-cost operators in the module view: views and metadata touch nothing;
// allocation writes nothing; fills write each output element; copies read and
// write each output element ("Copy/gather operations ... read/write each
// output element"). A call that returned its input (ReturnedItsInput: a
// no-op cast or contiguous()) moved nothing: zero accesses.
ModuleCosts ZeroCostCosts(const OpCall& call, ZeroCostReason reason);

}  // namespace torchscan
