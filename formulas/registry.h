// The built-in formula table and the zero-cost rules: immutable, shared by
// every scan. Sessions layer caller overrides on top (caller > native >
// fallback); nothing here is ever mutated at run time.
#pragma once

#include <ATen/core/function_schema.h>

#include <string_view>

#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan {

using FormulaFn = FormulaResult (*)(const OpCall&);

// Where an operator-view formula comes from.
enum class FormulaSource : uint8_t {
  kCaller,    // supplied for one scan
  kNative,    // same formula and convention as torch.utils.flop_counter
  kFallback,  // TorchScan's own (torchscan_flops_v1) where PyTorch has none
};
const char* FormulaSourceName(FormulaSource s);
// Which release's torch.utils.flop_counter the native rows follow, and how it
// differs between the supported releases (a report's context says it).
const char* NativeConvention();

struct OperatorFormula {
  std::string_view op;  // qualified operator name without overload: "aten::mm"
  FormulaFn flops;
  FormulaSource source;
  // Pointwise and reduction rows: their module view is the same FLOPs, no
  // MACs, and every input element read plus every output element written.
  bool pointwise = false;
};

// "aten::add_" -> "aten::add": in-place variants share the functional
// operator's formula; other names (including "__and__") are returned as is.
std::string_view FunctionalName(std::string_view op);

// Evaluates a built-in formula with the table's dtype rule for native rows:
// native complex counts stay partial (the real-valued count is a lower bound).
FormulaResult EvaluateOperatorFormula(const OperatorFormula& f, const OpCall& call);

// Every built-in operator-view formula (the coverage audit reads this list).
absl::Span<const OperatorFormula> BuiltinOperatorFormulas();
// Formula for "ns::name" (all overloads; in-place "name_" shares "name").
const OperatorFormula* FindOperatorFormula(std::string_view op);

// Overloads that share a row's name but are another operation: no built-in
// row (operator or module view) values them, so a scan values what they run.
// aten::where(condition) returns nonzero's index lists, not a selection, and
// decomposes to nonzero.
bool OutsideFormulaRows(const c10::OperatorName& op);

// Stated exclusions: operators TorchScan deliberately does not count, with
// the reason. At run time they stay uncounted (the total is partial) and the
// diagnostic quotes the reason; the coverage audit lists them as excluded.
const char* StatedExclusion(std::string_view op);  // nullptr when not excluded
struct Exclusion {
  std::string_view op;
  const char* reason;
};
absl::Span<const Exclusion> StatedExclusions();

// Why an operator costs no FLOPs at all.
enum class ZeroCostReason : uint8_t {
  kNone,        // not zero-cost: needs a formula
  kView,        // returns an alias of an input (from its schema)
  kMetadata,    // reads or sets tensor metadata only
  kAllocation,  // allocates uninitialised memory
  kFill,        // writes constants
  kCopy,        // copies / converts / gathers values, no arithmetic
  // Moves data between processes with no arithmetic (broadcast, all-gather,
  // all-to-all, send/recv, barriers, waits): its bytes are the communication
  // section's (torchscan_dispatch/analyses/communication.h), never FLOPs.
  kCommunication,
};
const char* ZeroCostReasonName(ZeroCostReason r);

// Zero-cost rule for an operator: an explicit name list first, then the
// schema rule (every return aliases an input without writing it).
ZeroCostReason ClassifyZeroCost(const c10::FunctionSchema& schema);

}  // namespace torchscan
