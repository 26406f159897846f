// Receptive fields from data flow: which recorded call's output fed which
// call, so branches and skip connections are followed as the model ran them
// rather than in the order its layers were declared.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/operator_view.h"
#include "torchscan_dispatch/scan_state.h"

namespace torchscan {

// Along each trailing spatial axis (up to three) of an (N, C, spatial...)
// tensor, relative to the model's inputs:
//   rf      receptive field (input positions one output position depends on)
//   jump    effective stride (input positions between neighbouring outputs)
//   padding effective padding (input positions added before the first input)
struct Field {
  int axes = 0;  // 0: no spatial structure (flattened, reduced, ...): not applicable
  std::array<double, 3> rf{}, jump{}, padding{};
};

// A tensor whose field is wanted as it was when the first `before_event`
// recorded calls had started (a layer call's output, at the end of its call).
struct FieldQuery {
  int64_t before_event = 0;
  std::vector<uintptr_t> identities;  // the first one with a field answers
};

// Propagates fields through the calls the module view values (decompositions
// are followed into their children; uncounted calls are black boxes) and
// answers each query; nullopt where no queried tensor was seen.
std::vector<std::optional<Field>> ComputeFields(const BlockLog<Event>& events, const OperatorPlan& module_plan,
                                                OpCatalog& catalog, const std::vector<FieldQuery>& queries);

}  // namespace torchscan
