#include "formulas/compiled.h"

#include <string>

namespace torchscan::compiled {

FormulaResult CompiledRegion(const OpCall& call) {
  const ArgMeta& backend_arg = call.arg(0);
  const std::string backend = backend_arg.kind == ArgKind::kString ? std::string(backend_arg.str()) : "compiled";
  if (backend == "aotinductor") {
    // Marked by python_shim/torchscan/_aoti.py and, in attached servers, by
    // torchscan_dispatch/aoti_interpose.cc. The fix is the user's to make:
    // the exported program runs the same graph through the dispatcher.
    return FormulaResult::Unavailable(
        "compiled_region",
        "an AOTInductor package (aotinductor) ran its compiled kernels outside the dispatcher; their work is not "
        "counted (kernels it called through the dispatcher are). To count the model, count its exported program: "
        "ep = torch.export.export(model, args), then torchscan.measure_flops(ep) or "
        "measure_flops(lambda: ep.module()(*args))");
  }
  return FormulaResult::Unavailable("compiled_region",
                                    "a torch.compile graph (" + backend +
                                        ") ran its fused kernels outside the dispatcher; their work is "
                                        "not counted (kernels it called through the dispatcher are)");
}

ModuleCosts CompiledRegionCosts(const OpCall& call) { return ModuleCosts::Unavailable(CompiledRegion(call)); }

}  // namespace torchscan::compiled
