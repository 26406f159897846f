#include "reports/layers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "reports/row_encoders.h"
#include "reports/validate.h"

namespace torchscan::reports {

nlohmann::json MemoryMetricJson(MetricStatus status, int64_t bytes, const std::string& scope) {
  return MetricJson({status, Count(bytes), "bytes", scope, "allocator_reports"});
}

LayerMetricResult LayerMetricOf(const LayerTally& l, int m, std::string_view scope, bool requested) {
  LayerMetricResult r;
  r.known = l.known[m];
  if (!requested) {
    r.status = MetricStatus::kUnavailable;
    r.scope = scope;
    r.method = "not_requested";
  } else if (l.custom[m] != LayerTally::Custom::kNone) {
    r.owned = l.owner[m] >= 0;
    r.custom = l.custom[m];
    r.status = l.custom_unavailable[m] ? MetricStatus::kUnavailable
               : l.complete[m]         ? MetricStatus::kComplete
                                       : MetricStatus::kPartial;
    r.scope = l.custom[m] == LayerTally::Custom::kSubtree ? "subtree" : "module_call";
    r.method = l.custom_method[m];
  } else {
    r.owned = l.owner[m] >= 0;
    r.status = l.failed || l.opened[m] ? MetricStatus::kUnavailable
               : l.complete[m]         ? MetricStatus::kComplete
                                       : MetricStatus::kPartial;
    r.scope = scope;
    r.method = kLayerMetricMethods[m];
  }
  // A sum past 2^128 - 1 is refused as a value: its last exact sum is a lower bound.
  if (r.status == MetricStatus::kComplete && !r.known.exact()) r.status = MetricStatus::kPartial;
  r.known = r.status == MetricStatus::kUnavailable ? Count(0) : Count::FromWide(r.known.wide());
  return r;
}

LayerFieldResult LayerFieldOf(const LayerTally& l, int k) {
  using S = LayerTally::FieldState;
  LayerFieldResult f;
  if (l.failed) {
    f.reason = "the forward raised";
  } else if (l.field_state == S::kUnseen) {
    f.reason = "the output was not seen by the data flow";
  } else if (l.field_state == S::kNotApplicable) {
    f.not_applicable = true;
    f.reason = l.field_reason;
  } else if (l.field_state == S::kUnknown || l.field_axes.empty()) {
    f.reason = l.field_reason;
  } else {
    f.axes = true;
    const double first = l.field_axes[0].values[k];
    if (std::all_of(l.field_axes.begin(), l.field_axes.end(),
                    [&](const LayerTally::FieldAxis& a) { return a.values[k] == first; })) {
      f.status = MetricStatus::kComplete;
      f.value = first;
    } else {
      f.reason = "the spatial axes differ: see axes";
    }
  }
  return f;
}

namespace {

// MetricJson's object (reports/metric.h), keys sorted.
template <class W>
void WriteMetric(MetricStatus status, const Count& known, std::string_view unit, std::string_view scope,
                 std::string_view method, W& w) {
  w.BeginObject();
  w.Key("known_value");
  if (status == MetricStatus::kUnavailable) {
    w.Null();
  } else {
    w.CountValue(known);
  }
  w.Key("method");
  w.String(method);
  w.Key("scope");
  w.String(scope);
  w.Key("status");
  w.String(MetricStatusName(status));
  w.Key("unit");
  w.String(unit);
  w.Key("value");
  if (status == MetricStatus::kComplete) {
    w.CountValue(known);
  } else {
    w.Null();
  }
  w.EndObject();
}

// A field as the schema's MetricResult: every spatial axis under the
// additive "axes" ([{"dim", "value"}]), why under the additive "reason".
template <class W>
void WriteField(const LayerTally& l, int k, std::string_view scope, W& w) {
  const LayerFieldResult f = LayerFieldOf(l, k);
  const bool complete = f.status == MetricStatus::kComplete;
  w.BeginObject();
  if (f.axes) {
    w.Key("axes");
    w.BeginArray();
    for (const LayerTally::FieldAxis& a : l.field_axes) {
      w.BeginObject();
      w.Key("dim");
      w.Int(a.dim);
      w.Key("value");
      w.Number(a.values[k]);
      w.EndObject();
    }
    w.EndArray();
  }
  w.Key("known_value");
  complete ? w.Number(f.value) : w.Null();
  w.Key("method");
  w.String(f.not_applicable ? "not_applicable" : "data_flow");
  if (!complete) {
    w.Key("reason");
    w.String(f.reason);
  }
  w.Key("scope");
  w.String(scope);
  w.Key("status");
  w.String(complete ? "complete" : "unavailable");
  w.Key("unit");
  w.String("positions");
  w.Key("value");
  complete ? w.Number(f.value) : w.Null();
  w.EndObject();
}

// The metrics of a row in key order: what each entry is and its index
// (kLayerMetricNames, kFieldNames; memory: 0 peak_memory, 1 allocated_bytes).
enum class Entry : uint8_t { kMetric, kField, kMemory };
struct MetricKey {
  const char* name;
  Entry entry;
  int index;
};
constexpr MetricKey kMetricKeys[] = {
    {"allocated_bytes", Entry::kMemory, 1}, {"dmas", Entry::kMetric, 3},        {"effective_padding", Entry::kField, 2},
    {"effective_stride", Entry::kField, 1}, {"macs", Entry::kMetric, 2},        {"module_flops", Entry::kMetric, 1},
    {"operator_flops", Entry::kMetric, 0},  {"peak_memory", Entry::kMemory, 0}, {"receptive_field", Entry::kField, 0},
};
// kLayerMetricNames indices in key order: dmas, macs, module_flops, operator_flops.
constexpr int kMetricsSorted[4] = {3, 2, 1, 0};

template <class W>
void WriteLayer(const std::vector<LayerTally>& layers, const LayerTally& l, std::string_view scope,
                const std::array<bool, 4>& requested, W& w, bool operator_view) {
  std::array<LayerMetricResult, 4> metric;
  for (int m = 0; m < 4; ++m) metric[m] = LayerMetricOf(l, m, scope, requested[m]);
  w.BeginObject();
  w.Key("call_index");
  w.Int(l.call_index);
  w.Key("depth");
  w.Int(l.depth);
  w.Key("failed");
  w.Bool(l.failed);
  bool any = false;
  for (int m : kMetricsSorted) {
    if (!metric[m].owned) continue;
    if (!any) {
      w.Key("metric_owners");
      w.BeginObject();
      any = true;
    }
    const LayerTally& o = layers[static_cast<size_t>(l.owner[m])];
    w.Key(kLayerMetricNames[m]);
    w.BeginObject();
    w.Key("call_index");
    w.Int(o.call_index);
    w.Key("path");
    w.String(o.path);
    w.EndObject();
  }
  if (any) w.EndObject();
  any = false;
  for (int m : kMetricsSorted) {
    if (metric[m].owned || metric[m].custom == LayerTally::Custom::kNone) continue;
    if (!any) {
      w.Key("metric_ownership");
      w.BeginObject();
      any = true;
    }
    w.Key(kLayerMetricNames[m]);
    w.String(metric[m].scope);
  }
  if (any) w.EndObject();
  w.Key("metrics");
  w.BeginObject();
  for (const MetricKey& key : kMetricKeys) {
    if (key.entry == Entry::kMetric && (metric[key.index].owned || (key.index == 0 && !operator_view))) continue;
    if (key.entry == Entry::kMemory && !l.memory) continue;
    w.Key(key.name);
    switch (key.entry) {
      case Entry::kMetric: {
        const LayerMetricResult& r = metric[key.index];
        WriteMetric(r.status, r.known, kLayerMetricUnits[key.index], r.scope, r.method, w);
        break;
      }
      case Entry::kField:
        WriteField(l, key.index, scope, w);
        break;
      case Entry::kMemory:
        WriteMetric(l.memory_status, Count(key.index == 0 ? l.peak_memory : l.allocated_bytes), "bytes", scope,
                    "allocator_reports", w);
        break;
    }
  }
  w.EndObject();
  w.Key("parent");
  l.parent >= 0 ? w.Int(l.parent) : w.Null();
  w.Key("path");
  w.UniqueString(l.path);
  if (!l.request.empty()) {
    w.Key("request");
    w.String(l.request);
  }
  if (l.thread > 0) {
    w.Key("thread");
    w.Int(l.thread);
  }
  w.EndObject();
}

template <class W>
void WriteLayers(const std::vector<LayerTally>& layers, std::string_view scope, const std::array<bool, 4>& requested,
                 W& w, bool operator_view) {
  w.BeginArray();
  for (const LayerTally& l : layers) WriteLayer(layers, l, scope, requested, w, operator_view);
  w.EndArray();
}

}  // namespace

void AppendLayerJson(const std::vector<LayerTally>& layers, const LayerTally& l, std::string_view scope,
                     const std::array<bool, 4>& requested, std::string& out, bool operator_view) {
  JsonText w(out);
  WriteLayer(layers, l, scope, requested, w, operator_view);
}

void AppendLayersJson(const std::vector<LayerTally>& layers, std::string_view scope,
                      const std::array<bool, 4>& requested, std::string& out, bool operator_view) {
  JsonText w(out);
  WriteLayers(layers, scope, requested, w, operator_view);
}

void AppendLayersPickle(const std::vector<LayerTally>& layers, std::string_view scope,
                        const std::array<bool, 4>& requested, std::string& out, bool operator_view) {
  out.reserve(out.size() + 512 * layers.size());
  PickleStream w(out);
  WriteLayers(layers, scope, requested, w, operator_view);
  w.Finish();
}

nlohmann::json LayersJson(const std::vector<LayerTally>& layers, std::string_view scope,
                          const std::array<bool, 4>& requested) {
  std::string text;
  AppendLayersJson(layers, scope, requested, text);
  absl::StatusOr<nlohmann::json> parsed = ParseReportJson(text);
  if (!parsed.ok()) throw std::logic_error("torchscan: a layer row is not valid JSON: " + parsed.status().ToString());
  return *std::move(parsed);
}

}  // namespace torchscan::reports
