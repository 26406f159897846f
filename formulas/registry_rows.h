// The formula table's rows, one family per file (registry_<family>.cc).
// registry.cc joins the families into the one table that
// BuiltinOperatorFormulas and FindOperatorFormula read; only the row files
// and registry.cc include this header.
#pragma once

#include "absl/types/span.h"
#include "formulas/registry.h"

namespace torchscan::rows {

inline constexpr FormulaSource kN = FormulaSource::kNative;
inline constexpr FormulaSource kF = FormulaSource::kFallback;

absl::Span<const OperatorFormula> Products();     // registry_products.cc
absl::Span<const OperatorFormula> Elementwise();  // registry_elementwise.cc
absl::Span<const OperatorFormula> Reductions();   // registry_reductions.cc
absl::Span<const OperatorFormula> Indexing();     // registry_indexing.cc
absl::Span<const OperatorFormula> Layers();       // registry_layers.cc
absl::Span<const OperatorFormula> Training();     // registry_training.cc

}  // namespace torchscan::rows

// A torchscan_flops_v1 fallback row for "aten::<name>"; TS_PW marks a
// pointwise or reduction row (its module view follows from the same count).
#define TS_ROW(name, fn) {"aten::" name, fn, ::torchscan::rows::kF}
#define TS_PW(name, fn) {"aten::" name, fn, ::torchscan::rows::kF, /*pointwise=*/true}
