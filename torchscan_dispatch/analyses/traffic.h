// Memory traffic from the recorded data flow (the roofline's input): per
// counted call, the bytes it reads (its tensor operands) and writes (its
// returns), and two fused estimates that group calls whose intermediate
// tensors never leave the group, decided from recorded tensor identities.
//
// Which calls are kernels follows the operator view's ownership plan: a call
// whose formula owns its subtree is one kernel (its children move nothing of
// their own); a decomposition's children are the kernels; views, metadata and
// allocations move nothing; copies and fills move what they read and write.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// What a kernel is, for the roofline's peak and for fusion.
enum class KernelClass : uint8_t {
  kMatmul,     // products, convolutions, attention: tensor-core peak
  kPointwise,  // one output element per input position (broadcasts included); fusible
  kReduction,  // reductions, scans, softmax, normalizations with statistics
  kMove,       // copies, casts, gathers, fills: no arithmetic
  kOther,      // pooling, lookups, interpolation, losses ...: vector peak, not fused
  kUnknown,    // no formula (uncounted): its bytes are known, its FLOPs are not
};
const char* KernelClassName(KernelClass c);

// Bytes of some tensors: floating elements (whose size the roofline's
// precision sets), the bytes of every other element (integer, boolean,
// complex: unchanged by precision), and all of them at the recorded dtypes.
struct Bytes {
  int64_t float_elements = 0;
  int64_t other_bytes = 0;
  int64_t recorded_bytes = 0;
  void Add(const Bytes& b) {
    float_elements += b.float_elements;
    other_bytes += b.other_bytes;
    recorded_bytes += b.recorded_bytes;
  }
};

// The distinct elements a tensor holds: a broadcast (stride 0) dimension
// reads one value, so an expanded bias moves its own size, not the output's.
Bytes TensorBytes(const TensorMeta& t);

struct KernelTraffic {
  int32_t event = -1;
  KernelClass kind = KernelClass::kOther;
  Count flops = 0;  // the operator view's value (known part)
  MetricStatus flops_status = MetricStatus::kComplete;
  Bytes read, written;                        // unfused (eager)
  int32_t group = -1, group_reductions = -1;  // fused group ids (pointwise / with reductions)
  Bytes fused_read, fused_written;            // this kernel's share of its pointwise group's traffic
  Bytes fused_r_read, fused_r_written;        // ... of its group with reduction epilogues
};

struct TrafficFlow;  // the recorded data flow the fused estimates rest on (traffic.cc)

struct TrafficResult {
  std::vector<KernelTraffic> kernels;
  int64_t groups = 0, groups_reductions = 0;
  // Program outputs (ChargeProgramOutputs): whether any top-level module
  // scope was seen, and how many tensor versions were found leaving the
  // program through one.
  bool outputs_known = false, outputs_charged = false;
  int64_t output_tensors = 0;
  std::shared_ptr<const TrafficFlow> flow;
};

// Without scopes the program's outputs are unknown: a result is written to
// HBM by the fused estimates when nobody reads it or a kernel outside its
// group does.
TrafficResult ComputeTraffic(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog,
                             const Overrides& overrides);

// Charges the tensors that leave the analysed program as written by both
// fused estimates, also when a kernel of their own group reads them (a module
// returning h and sigmoid(h)): the outputs of every top-level module scope
// (parent -1), the version each output identity held when its scope closed,
// unless a call recorded after that scope reads it (then it is an
// intermediate of the surrounding workload, whose own outputs are unknown).
// Once per result; a no-op with no top-level scope.
void ChargeProgramOutputs(TrafficResult& traffic, const std::vector<Recorder::Scope>& scopes);

// The JSON the Python roofline reads: kernels (with op packet and module
// scope), scopes, the assumptions the numbers rest on. Charges the program
// outputs of `scopes` first (on a copy) unless `traffic` has them charged.
nlohmann::json TrafficJson(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                           const TrafficResult& traffic, OpCatalog& catalog);

}  // namespace torchscan
