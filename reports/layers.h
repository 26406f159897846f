// Per-layer (module call) results of one scan: each layer's own calls,
// valued in both views. A layer is (path, call_index); values are exclusive
// (a parent's row holds only the work its forward did outside its children),
// so rows add up to the totals.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  // opened[m]: the built-in estimate covers work of a handled module this
  // call never ran, so it is reported unavailable (Note [Opened estimates]).
  enum class Custom : uint8_t { kNone, kModuleCall, kSubtree };
  std::array<int32_t, 4> owner = {-1, -1, -1, -1};
  std::array<Custom, 4> custom = {Custom::kNone, Custom::kNone, Custom::kNone, Custom::kNone};
  std::array<bool, 4> custom_unavailable = {false, false, false, false};
  std::array<std::string, 4> custom_method;
  std::array<bool, 4> opened = {false, false, false, false};
};

inline constexpr const char* kFieldNames[3] = {"receptive_field", "effective_stride", "effective_padding"};

// A memory figure as a MetricResult (unit bytes, method allocator_reports):
// layers' peak_memory / allocated_bytes and the memory report's totals.
nlohmann::json MemoryMetricJson(MetricStatus status, int64_t bytes, const std::string& scope);

// Note [One layer-row writer]
// What a layer row says is decided here, once: LayerMetricOf and
// LayerFieldOf resolve a tally's metric and field results (statuses, the
// unavailable reasons, ownership), and WriteLayer (layers.cc) writes the
// row from them, as JSON text or as a pickle stream (row_encoders.h, Note
// [Row encodings]). Every consumer reads that: the scan report and
// Session::LayersJson splice the text, LayersJson parses it for the
// aggregate report, Python's crawl_module loads the pickle stream
// (Session::LayersPickle), and Session::LayerRows copies the resolved
// results into the public LayerRow.

// Metric m (kLayerMetricNames order) of a layer as its row reports it.
struct LayerMetricResult {
  bool owned = false;  // covered by layers[l.owner[m]]'s subtree estimate: left out of "metrics"
  MetricStatus status = MetricStatus::kUnavailable;
  Count known = 0;          // the value (complete), a lower bound (partial), 0 (unavailable)
  std::string_view scope;   // "module_call" / "subtree" for a handler's estimate
  std::string_view method;  // the tally's strings or constants: valid while the tally is
  LayerTally::Custom custom = LayerTally::Custom::kNone;
};
LayerMetricResult LayerMetricOf(const LayerTally& l, int m, std::string_view scope, bool requested);

// Field k (kFieldNames order) of a layer's output as its row reports it:
// complete when every spatial axis agrees, else unavailable with a reason;
// the axes (l.field_axes) are listed whenever there are any.
struct LayerFieldResult {
  MetricStatus status = MetricStatus::kUnavailable;  // complete or unavailable
  bool not_applicable = false;                       // method "not_applicable", else "data_flow"
  bool axes = false;                                 // the row lists l.field_axes under "axes"
  double value = 0;                                  // when complete
  std::string_view reason;                           // when unavailable (the tally's or a constant)
};
LayerFieldResult LayerFieldOf(const LayerTally& l, int k);

// One row, {"call_index", "depth", "failed", "metric_owners"?,
// "metric_ownership"?, "metrics": {...}, "parent", "path", "request"?,
// "thread"?}, as compact JSON text (keys sorted, counts exact) appended to
// `out`. requested[m] = false: metric m is unavailable / not_requested
// (structure mode, or a view left out).
// operator_view false: the row leaves "operator_flops" out altogether (module
// analysis reports the operator view once, as a whole).
void AppendLayerJson(const std::vector<LayerTally>& layers, const LayerTally& l, std::string_view scope,
                     const std::array<bool, 4>& requested, std::string& out, bool operator_view = true);
// The rows as a JSON array, appended one at a time: a scan with many layer
// calls never holds them all as a JSON tree (Session::ScanReportJson).
void AppendLayersJson(const std::vector<LayerTally>& layers, std::string_view scope,
                      const std::array<bool, 4>& requested, std::string& out, bool operator_view = true);
// The same array as a pickle stream (Note [Row encodings]): what
// crawl_module loads.
void AppendLayersPickle(const std::vector<LayerTally>& layers, std::string_view scope,
                        const std::array<bool, 4>& requested, std::string& out, bool operator_view = true);
// The same array as a JSON tree (counts past 2^64 - 1 as CountJson holds
// them), for reports that add keys to the rows.
nlohmann::json LayersJson(const std::vector<LayerTally>& layers, std::string_view scope,
                          const std::array<bool, 4>& requested = {true, true, true, true});

}  // namespace torchscan::reports
