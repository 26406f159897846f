// The FlopReport (reference: report schema, "FlopReport"): built from
// per-operator tallies, independent of the dispatcher.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/metric.h"

namespace torchscan::reports {

inline constexpr char kOperatorMethod[] = "operator_dispatch";
inline constexpr char kOperatorConvention[] =
    "torchscan_flops_v1 operator view: native PyTorch formulas (2K per K-term dot; fused bias "
    "and alpha/beta scaling omitted) with TorchScan fallbacks where PyTorch has none; extended by "
    "torchscan_training_v1 (backward, loss and optimizer kernels: formulas/TRAINING.md) and "
    "torchscan_selection_v1 (sort, top-k, unique, search comparisons; computing factories: "
    "formulas/CONVENTIONS.md)";

struct IgnoredOperator {
  int64_t calls = 0;
  std::string reason;
};

struct FlopTally {
  std::string torch_version;
  // Which release's torch.utils.flop_counter the native formulas follow
  // (omitted from the report when empty).
  std::string native_convention;
  std::string scope = "workload";  // "forward" for a single model forward
  bool complete = true;
  // Exact up to 2^128 - 1; a sum that passes it stays at its last exact
  // value, inexact (written partial / null, with a count_overflow diagnostic).
  Count known = 0;
  std::map<std::string, Count> by_operator;                       // "aten.mm" -> FLOPs
  std::map<std::string, std::map<std::string, Count>> by_module;  // label -> op -> FLOPs
  std::map<std::string, IgnoredOperator> ignored;
  std::vector<Diagnostic> diagnostics;
};

nlohmann::json FlopReportJson(const FlopTally& t);

}  // namespace torchscan::reports
