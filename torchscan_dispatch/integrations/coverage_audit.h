// The coverage audit: every operator overload registered in this process,
// classified by what TorchScan does with it, plus the plugin's own footing
// (mode key, fallback) in this torch release.
#pragma once

#include <string>

namespace torchscan {

// Classes, in the order they are decided:
//   random           sampling operators (visible exclusion, partial at run time)
//   operator_formula an operator-view formula (native or TorchScan fallback)
//   module_formula   a module-view formula only
//   zero_cost        view (schema rule), metadata, allocation, fill or copy
//   collective       communication operators (c10d namespaces)
//   excluded         a stated exclusion with its reason
//   composite        CompositeImplicitAutograd: covered when its decomposition is
//   unsupported      none of the above: uncounted (partial) at run time
// Returns the audit as JSON text:
//   {"torch_version", "footing": {...}, "operators": {"aten::add.Tensor": {...}}}
std::string CoverageAuditJson();

// The registry as data, for the audit's consistency checks:
// {"operator_formulas": [{"op", "source"}], "module_formulas": [...],
//  "exclusions": [{"op", "reason"}]}.
std::string FormulaTableJson();

}  // namespace torchscan
