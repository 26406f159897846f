#include "reports/diff.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reports/metric.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

// Inputs are schema-valid (ValidateReport): every metric below is a
// MetricResult, every identity a (string, non-negative integer) pair.

const json* Find(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

json Unavailable() { return json{{"status", "unavailable"}, {"value", nullptr}, {"known_value", nullptr}}; }

// {"status", "value", "known_value"} of a MetricResult; unavailable when absent.
json Snapshot(const json* m) {
  if (!m) return Unavailable();
  return json{{"status", (*m)["status"]}, {"value", (*m)["value"]}, {"known_value", (*m)["known_value"]}};
}

// {"status", "delta", "before", "after"} of two snapshots.
json MetricDiff(const json& b, const json& a) {
  std::string status = "complete";
  for (const json* side : {&b, &a}) {
    if ((*side)["status"] == "unavailable")
      status = "unavailable";
    else if ((*side)["status"] == "partial" && status == "complete")
      status = "partial";
  }
  const bool both = b["status"] == "complete" && a["status"] == "complete";
  return json{
      {"status", status}, {"delta", both ? NumberDelta(b["value"], a["value"]) : json()}, {"before", b}, {"after", a}};
}

using Key = std::pair<std::string, uint64_t>;

std::map<Key, const json*> LayersByIdentity(const json& report) {
  std::map<Key, const json*> out;
  for (const json& l : report["layers"]) out[{l["path"].get<std::string>(), l["call_index"].get<uint64_t>()}] = &l;
  return out;
}

json LayerSnapshot(const json& layer) {
  json s = {{"path", layer["path"]}, {"call_index", layer["call_index"]}, {"metrics", layer["metrics"]}};
  if (const json* deps = Find(layer, "token_dependencies")) s["token_dependencies"] = *deps;
  return s;
}

// The names of the MetricResults (objects) in either of two objects.
std::map<std::string, bool> MetricNames(const json& x, const json& y) {
  std::map<std::string, bool> names;
  for (const json* o : {&x, &y}) {
    for (const auto& [k, v] : o->items()) {
      if (v.is_object()) names[k] = true;
    }
  }
  return names;
}

json CompareAnalysis(const json& before, const json& after) {
  json diff = {{"schema_version", kSchemaVersion}, {"totals", json::object()}};
  const json& bt = before["totals"];
  const json& at = after["totals"];
  for (const auto& [name, _] : MetricNames(bt, at)) {
    diff["totals"][name] = MetricDiff(Snapshot(Find(bt, name)), Snapshot(Find(at, name)));
  }

  json added = json::array(), removed = json::array(), changed = json::array();
  const auto b_layers = LayersByIdentity(before), a_layers = LayersByIdentity(after);
  for (const auto& [key, layer] : b_layers) {
    if (!a_layers.count(key)) removed.push_back(LayerSnapshot(*layer));
  }
  for (const auto& [key, layer] : a_layers) {
    auto it = b_layers.find(key);
    if (it == b_layers.end()) {
      added.push_back(LayerSnapshot(*layer));
      continue;
    }
    const json& bm = (*it->second)["metrics"];
    const json& am = (*layer)["metrics"];
    json metrics = json::object();
    for (const auto& [name, _] : MetricNames(bm, am)) {
      const json b = Snapshot(Find(bm, name)), a = Snapshot(Find(am, name));
      if (b != a) metrics[name] = MetricDiff(b, a);
    }
    json entry = {{"path", key.first}, {"call_index", (*layer)["call_index"]}, {"metrics", metrics}};
    const json* bd = Find(*it->second, "token_dependencies");
    const json* ad = Find(*layer, "token_dependencies");
    const json bdv = bd ? *bd : json(), adv = ad ? *ad : json();
    if (bdv != adv) entry["token_dependencies"] = {{"before", bdv}, {"after", adv}};
    if (!metrics.empty() || entry.contains("token_dependencies")) changed.push_back(entry);
  }
  diff["layers"] = {{"added", added}, {"removed", removed}, {"changed", changed}};
  return diff;
}

// One operator's known FLOPs on one side, as a snapshot with the side's total
// status: by_operator holds counted work only, so an operator absent from a
// complete report did none (0); on a partial side the value is a lower bound.
json OperatorSnapshot(const json& report, const std::string& op) {
  const std::string status = report["total"]["status"].get<std::string>();
  const json* v = Find(report["by_operator"], op);
  if (!v && status == "unavailable") return Unavailable();
  const json known = v ? *v : json(0);
  const bool complete = status == "complete";
  return json{
      {"status", complete ? "complete" : "partial"}, {"value", complete ? known : json()}, {"known_value", known}};
}

json CompareFlops(const json& before, const json& after) {
  json diff = {{"schema_version", kSchemaVersion},
               {"totals", {{"operator_flops", MetricDiff(Snapshot(&before["total"]), Snapshot(&after["total"]))}}}};
  std::map<std::string, bool> ops;
  for (const json* r : {&before, &after}) {
    for (const auto& [op, _] : (*r)["by_operator"].items()) ops[op] = true;
  }
  json by_operator = json::object();
  for (const auto& [op, _] : ops) {
    const json b = OperatorSnapshot(before, op), a = OperatorSnapshot(after, op);
    if (b != a) by_operator[op] = MetricDiff(b, a);
  }
  diff["by_operator"] = by_operator;
  return diff;
}

std::string Label(const ReportSource& s) {
  return absl::StrCat("the ", s.side.empty() ? "" : s.side + " ", "report",
                      s.file.empty() ? "" : absl::StrCat(" (", s.file, ")"));
}

}  // namespace

absl::StatusOr<json> CompareReports(const json& before_in, const json& after_in, const ReportSource& before_source,
                                    const ReportSource& after_source) {
  json before_parsed, after_parsed;
  const json *readable_before = nullptr, *readable_after = nullptr;
  const absl::StatusOr<ReportKind> bk = ValidateForReading(before_in, before_source, &before_parsed, &readable_before);
  if (!bk.ok()) return absl::InvalidArgumentError(absl::StrCat("torchscan.compare_reports: ", bk.status().message()));
  const absl::StatusOr<ReportKind> ak = ValidateForReading(after_in, after_source, &after_parsed, &readable_after);
  const json& before = *readable_before;
  const json& after = *readable_after;
  if (!ak.ok()) return absl::InvalidArgumentError(absl::StrCat("torchscan.compare_reports: ", ak.status().message()));
  if (*bk != *ak) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchscan.compare_reports: ", Label(before_source), " is a",
                     *bk == ReportKind::kAnalysis ? "n " : " ", ReportKindName(*bk), " and ", Label(after_source),
                     " is a", *ak == ReportKind::kAnalysis ? "n " : " ", ReportKindName(*ak),
                     "; compare two reports of the same kind (an AnalysisReport's operator_flops field is its "
                     "FlopReport)"));
  }
  try {
    return *bk == ReportKind::kAnalysis ? CompareAnalysis(before, after) : CompareFlops(before, after);
  } catch (const json::exception& e) {
    // Unreachable for validated input (the fuzz test holds it to that).
    return absl::InternalError(
        absl::StrCat("torchscan.compare_reports: internal error reading validated reports: ", e.what()));
  }
}

}  // namespace torchscan::reports
