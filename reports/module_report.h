// The module-view cost report of one scan: module_flops, macs and dmas
// totals (torchscan_flops_v1 module conventions) with per-operator values.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/metric.h"

namespace torchscan::reports {

inline constexpr char kModuleMethod[] = "module_formulas";
inline constexpr char kModuleConvention[] =
    "torchscan_flops_v1 module view: K multiplies + K-1 adds per K-term dot, one bias add per "
    "output, the table's expansions; MACs; logical staged memory accesses; pointwise rows of the "
    "torchscan_training_v1 extension (formulas/TRAINING.md) and torchscan_selection_v1 "
    "(formulas/CONVENTIONS.md)";

// Index of each module-view metric in the arrays below.
enum ModuleMetric { kModuleFlops = 0, kMacs = 1, kDmas = 2 };
inline constexpr const char* kModuleMetricNames[3] = {"module_flops", "macs", "dmas"};
inline constexpr const char* kModuleMetricUnits[3] = {"FLOPs", "MACs", "accesses"};

struct ModuleTally {
  std::string torch_version;
  std::string scope = "workload";
  std::array<bool, 3> complete = {true, true, true};
  std::array<Count, 3> known = {0, 0, 0};                   // exact up to 2^128 - 1 (see FlopTally)
  std::map<std::string, std::array<Count, 3>> by_operator;  // "aten.linear" -> values
  std::vector<Diagnostic> diagnostics;
};

// {"schema_version", "context", "totals": {"module_flops", "macs", "dmas"},
//  "by_operator": {"aten.linear": {"module_flops", "macs", "dmas"}}, "diagnostics"}
nlohmann::json ModuleReportJson(const ModuleTally& t);

}  // namespace torchscan::reports
