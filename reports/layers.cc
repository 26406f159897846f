#include "reports/layers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "absl/strings/str_cat.h"
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

// The text DumpJson writes for each value: printable ASCII strings as they
// are, any other string through nlohmann (escapes; invalid UTF-8 replaced).
void AppendString(std::string_view s, std::string& out) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out.append(s);
    out += '"';
    return;
  }
  out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Whole values as integers (exact in both types), others as nlohmann writes
// a double (shortest round trip; JSON has no NaN or infinity: null).
void AppendNumber(double v, std::string& out) {
  if (std::abs(v) < 9e15 && v == std::trunc(v)) {
    absl::StrAppend(&out, static_cast<int64_t>(v));
  } else {
    out += nlohmann::json(v).dump();
  }
}

// An exact count; past 2^64 - 1 its digits (CountJson / DumpJson).
void AppendCount(const Count& c, std::string& out) {
  if (auto v = c.ToUint64()) {
    absl::StrAppend(&out, *v);
  } else {
    out += c.Digits();
  }
}

// MetricJson's object (reports/metric.h), keys sorted.
void AppendMetric(MetricStatus status, const Count& known, std::string_view unit, std::string_view scope,
                  std::string_view method, std::string& out) {
  out += "{\"known_value\":";
  if (status == MetricStatus::kUnavailable) {
    out += "null";
  } else {
    AppendCount(known, out);
  }
  out += ",\"method\":";
  AppendString(method, out);
  out += ",\"scope\":";
  AppendString(scope, out);
  absl::StrAppend(&out, ",\"status\":\"", MetricStatusName(status), "\",\"unit\":\"");
  out.append(unit);
  out += "\",\"value\":";
  if (status == MetricStatus::kComplete) {
    AppendCount(known, out);
  } else {
    out += "null";
  }
  out += '}';
}

// A field as the schema's MetricResult: every spatial axis under the
// additive "axes" ([{"dim", "value"}]), why under the additive "reason".
void AppendField(const LayerTally& l, int k, std::string_view scope, std::string& out) {
  const LayerFieldResult f = LayerFieldOf(l, k);
  const bool complete = f.status == MetricStatus::kComplete;
  out += '{';
  if (f.axes) {
    out += "\"axes\":[";
    for (size_t i = 0; i < l.field_axes.size(); ++i) {
      absl::StrAppend(&out, i > 0 ? "," : "", "{\"dim\":", l.field_axes[i].dim, ",\"value\":");
      AppendNumber(l.field_axes[i].values[k], out);
      out += '}';
    }
    out += "],";
  }
  out += "\"known_value\":";
  if (complete) {
    AppendNumber(f.value, out);
  } else {
    out += "null";
  }
  out += f.not_applicable ? ",\"method\":\"not_applicable\"" : ",\"method\":\"data_flow\"";
  if (!complete) {
    out += ",\"reason\":";
    AppendString(f.reason, out);
  }
  out += ",\"scope\":";
  AppendString(scope, out);
  out += complete ? ",\"status\":\"complete\"" : ",\"status\":\"unavailable\"";
  out += ",\"unit\":\"positions\",\"value\":";
  if (complete) {
    AppendNumber(f.value, out);
  } else {
    out += "null";
  }
  out += '}';
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

}  // namespace

void AppendLayerJson(const std::vector<LayerTally>& layers, const LayerTally& l, std::string_view scope,
                     const std::array<bool, 4>& requested, std::string& out, bool operator_view) {
  std::array<LayerMetricResult, 4> metric;
  for (int m = 0; m < 4; ++m) metric[m] = LayerMetricOf(l, m, scope, requested[m]);
  absl::StrAppend(&out, "{\"call_index\":", l.call_index, ",\"depth\":", l.depth,
                  l.failed ? ",\"failed\":true" : ",\"failed\":false");
  bool first = true;
  for (int m : kMetricsSorted) {
    if (!metric[m].owned) continue;
    const LayerTally& o = layers[static_cast<size_t>(l.owner[m])];
    absl::StrAppend(&out, first ? ",\"metric_owners\":{\"" : ",\"", kLayerMetricNames[m],
                    "\":{\"call_index\":", o.call_index, ",\"path\":");
    AppendString(o.path, out);
    out += '}';
    first = false;
  }
  if (!first) out += '}';
  first = true;
  for (int m : kMetricsSorted) {
    if (metric[m].owned || metric[m].custom == LayerTally::Custom::kNone) continue;
    absl::StrAppend(&out, first ? ",\"metric_ownership\":{\"" : ",\"", kLayerMetricNames[m], "\":\"");
    out.append(metric[m].scope);
    out += '"';
    first = false;
  }
  if (!first) out += '}';
  out += ",\"metrics\":{";
  first = true;
  for (const MetricKey& key : kMetricKeys) {
    if (key.entry == Entry::kMetric && (metric[key.index].owned || (key.index == 0 && !operator_view))) continue;
    if (key.entry == Entry::kMemory && !l.memory) continue;
    absl::StrAppend(&out, first ? "\"" : ",\"", key.name, "\":");
    first = false;
    switch (key.entry) {
      case Entry::kMetric: {
        const LayerMetricResult& r = metric[key.index];
        AppendMetric(r.status, r.known, kLayerMetricUnits[key.index], r.scope, r.method, out);
        break;
      }
      case Entry::kField:
        AppendField(l, key.index, scope, out);
        break;
      case Entry::kMemory:
        AppendMetric(l.memory_status, Count(key.index == 0 ? l.peak_memory : l.allocated_bytes), "bytes", scope,
                     "allocator_reports", out);
        break;
    }
  }
  out += "},\"parent\":";
  if (l.parent >= 0) {
    absl::StrAppend(&out, l.parent);
  } else {
    out += "null";
  }
  out += ",\"path\":";
  AppendString(l.path, out);
  if (!l.request.empty()) {
    out += ",\"request\":";
    AppendString(l.request, out);
  }
  if (l.thread > 0) absl::StrAppend(&out, ",\"thread\":", l.thread);
  out += '}';
}

void AppendLayersJson(const std::vector<LayerTally>& layers, std::string_view scope,
                      const std::array<bool, 4>& requested, std::string& out, bool operator_view) {
  out += '[';
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i > 0) out += ',';
    AppendLayerJson(layers, layers[i], scope, requested, out, operator_view);
  }
  out += ']';
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
