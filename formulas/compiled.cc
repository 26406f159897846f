#include "formulas/compiled.h"

#include <string>

namespace torchscan::compiled {

FormulaResult CompiledRegion(const OpCall& call) {
  const ArgMeta& backend_arg = call.arg(0);
  const std::string backend = backend_arg.kind == ArgKind::kString ? std::string(backend_arg.str()) : "compiled";
  return FormulaResult::Unavailable(
      "compiled_region",
      "a torch.compile graph (" + backend + ") ran its fused kernels outside the dispatcher; their work is "
      "not counted (kernels it called through the dispatcher are)");
}

ModuleCosts CompiledRegionCosts(const OpCall& call) { return ModuleCosts::Unavailable(CompiledRegion(call)); }

}  // namespace torchscan::compiled
