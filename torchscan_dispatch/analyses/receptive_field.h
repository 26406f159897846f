// Receptive fields from data flow: which recorded call's output fed which
// call, so branches and skip connections are followed as the model ran them
// rather than in the order its layers were declared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// One spatial axis of a tensor, relative to the model's inputs:
//   rf      receptive field (input positions one output position depends on)
//   jump    effective stride (input positions between neighbouring outputs)
//   padding effective padding (input positions before the first input that
//           output position 0's window starts at)
struct AxisField {
  int32_t dim = 0;  // the dimension of the tensor that holds this axis
  double rf = 1, jump = 1, padding = 0;
};

struct Field {
  enum class Kind : uint8_t {
    kSpatial,        // axes holds every spatial axis of the tensor, in dim order
    kNotApplicable,  // no spatial axes: flattened into tokens, reduced, never spatial
    kUnknown,        // spatial positions the data flow cannot follow (reason says where)
  };
  Kind kind = Kind::kNotApplicable;
  std::vector<AxisField> axes;
  std::string reason;  // kNotApplicable / kUnknown: why, for people
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
// The same over consecutive sets of calls (a streaming scan folds its calls
// in sets as they settle, streaming.h): the tensors' fields carry over from
// one Run to the next, so each set's answers equal those of one run over all.
class FieldFlow {
 public:
  FieldFlow();
  ~FieldFlow();
  FieldFlow(const FieldFlow& other);
  FieldFlow& operator=(const FieldFlow& other);
  // Calls [begin, end) of `events`; queries count calls of `events`.
  std::vector<std::optional<Field>> Run(const BlockLog<Event>& events, size_t begin, size_t end,
                                        const OperatorPlan& module_plan, OpCatalog& catalog,
                                        const std::vector<FieldQuery>& queries);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::vector<std::optional<Field>> ComputeFields(const BlockLog<Event>& events, const OperatorPlan& module_plan,
                                                OpCatalog& catalog, const std::vector<FieldQuery>& queries);

}  // namespace torchscan
