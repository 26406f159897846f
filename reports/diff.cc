#include "reports/diff.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reports/metric.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

bool IsMetric(const json& v) { return v.is_object() && v.contains("status"); }

// {"status", "delta", "before", "after"} for one metric.
json MetricDiff(const json* before, const json* after) {
  auto snapshot = [](const json* m) -> json {
    if (!m || !IsMetric(*m)) return json{{"status", "unavailable"}, {"value", nullptr}, {"known_value", nullptr}};
    return json{{"status", (*m)["status"]}, {"value", (*m)["value"]}, {"known_value", (*m)["known_value"]}};
  };
  const json b = snapshot(before), a = snapshot(after);
  const bool both = b["status"] == "complete" && a["status"] == "complete";
  std::string status = "complete";
  for (const json* side : {&b, &a}) {
    if ((*side)["status"] == "unavailable") status = "unavailable";
    else if ((*side)["status"] == "partial" && status == "complete") status = "partial";
  }
  json delta = both ? json(a["value"].get<int64_t>() - b["value"].get<int64_t>()) : json();
  return json{{"status", status}, {"delta", delta}, {"before", b}, {"after", a}};
}

bool SameMetric(const json& x, const json& y) {
  return x.value("status", "") == y.value("status", "") && x.value("value", json()) == y.value("value", json()) &&
         x.value("known_value", json()) == y.value("known_value", json());
}

using Key = std::pair<std::string, int64_t>;

std::map<Key, const json*> LayersByIdentity(const json& report) {
  std::map<Key, const json*> out;
  if (!report.contains("layers")) return out;
  for (const json& l : report["layers"]) out[{l.value("path", ""), l.value("call_index", int64_t{0})}] = &l;
  return out;
}

json Snapshot(const json& layer) {
  json s = {{"path", layer["path"]}, {"call_index", layer["call_index"]},
            {"metrics", layer.value("metrics", json::object())}};
  if (layer.contains("token_dependencies")) s["token_dependencies"] = layer["token_dependencies"];
  return s;
}

}  // namespace

absl::StatusOr<json> CompareReports(const json& before, const json& after) {
  for (const json* r : {&before, &after}) {
    if (!r->is_object() || !r->contains("schema_version") || (*r)["schema_version"] != kSchemaVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "torchscan.compare_reports: both reports must have schema_version ", kSchemaVersion,
          " (migrate older reports explicitly); got ",
          r->is_object() && r->contains("schema_version") ? (*r)["schema_version"].dump() : "none"));
    }
  }
  json diff = {{"schema_version", kSchemaVersion}, {"totals", json::object()}};
  const json& bt = before.contains("totals") ? before["totals"] : json::object();
  const json& at = after.contains("totals") ? after["totals"] : json::object();
  std::map<std::string, bool> names;
  for (const auto& [k, v] : bt.items()) if (IsMetric(v)) names[k] = true;
  for (const auto& [k, v] : at.items()) if (IsMetric(v)) names[k] = true;
  for (const auto& [name, _] : names) {
    diff["totals"][name] = MetricDiff(bt.contains(name) ? &bt[name] : nullptr, at.contains(name) ? &at[name] : nullptr);
  }

  json added = json::array(), removed = json::array(), changed = json::array();
  const auto b_layers = LayersByIdentity(before), a_layers = LayersByIdentity(after);
  for (const auto& [key, layer] : b_layers) {
    if (!a_layers.count(key)) removed.push_back(Snapshot(*layer));
  }
  for (const auto& [key, layer] : a_layers) {
    auto it = b_layers.find(key);
    if (it == b_layers.end()) {
      added.push_back(Snapshot(*layer));
      continue;
    }
    const json& bm = it->second->value("metrics", json::object());
    const json& am = layer->value("metrics", json::object());
    json metrics = json::object();
    std::map<std::string, bool> metric_names;
    for (const auto& [k, v] : bm.items()) metric_names[k] = true;
    for (const auto& [k, v] : am.items()) metric_names[k] = true;
    for (const auto& [name, _] : metric_names) {
      const json* x = bm.contains(name) ? &bm[name] : nullptr;
      const json* y = am.contains(name) ? &am[name] : nullptr;
      if (x && y && SameMetric(*x, *y)) continue;
      metrics[name] = MetricDiff(x, y);
    }
    json entry = {{"path", key.first}, {"call_index", key.second}, {"metrics", metrics}};
    const json bd = it->second->value("token_dependencies", json()), ad = layer->value("token_dependencies", json());
    if (bd != ad) entry["token_dependencies"] = {{"before", bd}, {"after", ad}};
    if (!metrics.empty() || entry.contains("token_dependencies")) changed.push_back(entry);
  }
  diff["layers"] = {{"added", added}, {"removed", removed}, {"changed", changed}};
  return diff;
}

}  // namespace torchscan::reports
