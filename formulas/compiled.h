// Compiled graphs: a run of a torch.compile (Inductor) graph or of an
// AOTInductor package inside a scan is recorded as a
// `torchscan::compiled_region` call (python_shim/torchscan/_compiled.py,
// _aoti.py, torchscan_dispatch/integrations/attach/aoti_interpose.cc for attached servers).
// Its kernels ran outside the dispatcher, so no formula can value it:
// every view reports it as unknown work with a `compiled_region` diagnostic,
// while the kernels the graph still called through the dispatcher count.
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::compiled {

FormulaResult CompiledRegion(const OpCall& call);     // operator view
ModuleCosts CompiledRegionCosts(const OpCall& call);  // module view

}  // namespace torchscan::compiled
