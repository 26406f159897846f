// Per-layer (module call) results of one scan: each layer's own calls,
// valued in both views. A layer is (path, call_index); values are exclusive
// (a parent's row holds only the work its forward did outside its children),
// so rows add up to the totals.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/metric.h"

namespace torchscan::reports {

// Metric order in LayerTally arrays.
inline constexpr const char* kLayerMetricNames[4] = {"operator_flops", "module_flops", "macs", "dmas"};
inline constexpr const char* kLayerMetricUnits[4] = {"FLOPs", "FLOPs", "MACs", "accesses"};
inline constexpr const char* kLayerMetricMethods[4] = {"operator_dispatch", "module_formulas", "module_formulas",
                                                       "module_formulas"};

struct LayerTally {
  std::string path;
  int32_t call_index = 0;
  int32_t parent = -1;  // index of the enclosing layer call, -1 for none
  int32_t depth = 0;
  bool failed = false;  // the forward raised: estimates unavailable
  // All-threads scans: the thread that made the call (0: not reported) and
  // the request it belongs to (empty: none).
  int64_t thread = 0;
  std::string request;
  std::array<Count, 4> known = {0, 0, 0, 0};
  std::array<bool, 4> complete = {true, true, true, true};
  // Receptive field, effective stride and padding of the output, one entry
  // per spatial axis (dim: the output dimension holding it), or why there
  // are none (field_reason).
  struct FieldAxis {
    int32_t dim = 0;
    std::array<double, 3> values = {0, 0, 0};  // kFieldNames order
  };
  enum class FieldState : uint8_t {
    kUnseen,         // the output was never seen by the data flow
    kSpatial,        // field_axes holds every spatial axis
    kNotApplicable,  // no spatial axes (flattened into tokens, reduced, never spatial)
    kUnknown,        // spatial positions the data flow could not follow
  };
  FieldState field_state = FieldState::kUnseen;
  // Allocator memory of the call, its children included (scans that
  // attribute memory: torchscan_dispatch/analyses/memory_view.h says what each means).
  bool memory = false;
  MetricStatus memory_status = MetricStatus::kUnavailable;
  int64_t peak_memory = 0;
  int64_t allocated_bytes = 0;
  std::vector<FieldAxis> field_axes;
  std::string field_reason;
  // Custom module handlers, per metric (kLayerMetricNames order; never
  // operator_flops). owner[m] >= 0: covered by the subtree estimate of layer
  // owner[m], so the metric is left out and named in metric_owners. custom[m]:
  // supplied by this call's handler (its ownership; known/complete hold its
  // estimate, custom_unavailable[m] an unavailable one, custom_method[m] its method).
  enum class Custom : uint8_t { kNone, kModuleCall, kSubtree };
  std::array<int32_t, 4> owner = {-1, -1, -1, -1};
  std::array<Custom, 4> custom = {Custom::kNone, Custom::kNone, Custom::kNone, Custom::kNone};
  std::array<bool, 4> custom_unavailable = {false, false, false, false};
  std::array<std::string, 4> custom_method;
};

inline constexpr const char* kFieldNames[3] = {"receptive_field", "effective_stride", "effective_padding"};

// A memory figure as a MetricResult (unit bytes, method allocator_reports):
// layers' peak_memory / allocated_bytes and the memory report's totals.
nlohmann::json MemoryMetricJson(MetricStatus status, int64_t bytes, const std::string& scope);

// [{"path", "call_index", "parent", "depth", "failed", "metrics": {...}}]
// requested[m] = false: metric m (kLayerMetricNames order) is unavailable /
// not_requested (structure mode, or a view left out).
nlohmann::json LayersJson(const std::vector<LayerTally>& layers, const std::string& scope,
                          const std::array<bool, 4>& requested = {true, true, true, true});
// The same array as compact JSON text (DumpJson of LayersJson), appended to
// `out` one row at a time: a scan with many layer calls never holds them all
// as a JSON tree (Session::ScanReportJson).
void AppendLayersJson(const std::vector<LayerTally>& layers, const std::string& scope,
                      const std::array<bool, 4>& requested, std::string& out);

}  // namespace torchscan::reports
