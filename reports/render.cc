#include "reports/render.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "reports/metric.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

std::string Shape(const json& meta) {
  if (!meta.is_object()) return "-";
  if (meta.value("kind", "") == "tensor") {
    std::vector<std::string> dims;
    for (const auto& d : meta["shape"]) dims.push_back(std::to_string(d.get<int64_t>()));
    return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
  }
  if (meta.value("kind", "") == "failed") return "failed";
  if (meta.value("kind", "") == "tuple" || meta.value("kind", "") == "list") {
    const auto& items = meta["items"];
    return items.empty() ? "()" : absl::StrCat(Shape(items[0]), items.size() > 1 ? ", ..." : "");
  }
  return meta.value("kind", "-");
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t c = 0; c < rows[i].size(); ++c) {
      const std::string& cell = rows[i][c];
      const std::string pad(width[c] - cell.size(), ' ');
      absl::StrAppend(&out, c == 0 ? cell + pad : "  " + (c <= 2 ? cell + pad : pad + cell));
    }
    absl::StrAppend(&out, "\n");
    if (i == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      absl::StrAppend(&out, std::string(total - 2, '-'), "\n");
    }
  }
  return out;
}

std::string FieldText(const json& m) {
  if (!m.is_object() || m.value("status", "") != "complete") return "-";
  return m["value"].is_number_integer() ? std::to_string(m["value"].get<int64_t>())
                                        : absl::StrFormat("%.2f", m["value"].get<double>());
}

std::string RenderAnalysis(const json& r, int max_depth, bool receptive_field) {
  std::vector<std::vector<std::string>> rows = {
      {"Layer", "Type", "Output shape", "Params", "FLOPs", "MACs", "DMAs"}};
  if (receptive_field) rows[0].insert(rows[0].end(), {"RF", "Stride", "Padding"});
  for (const auto& l : r["layers"]) {
    const int depth = l.value("depth", 0);
    if (max_depth >= 0 && depth > max_depth) continue;
    const std::string name = l.value("path", "").empty() ? "(root)" : l["path"].get<std::string>();
    const std::string label = std::string(2 * depth, ' ') + name +
                              (l.value("call_index", 0) > 0 ? absl::StrCat(" #", l["call_index"].get<int>()) : "");
    const json& m = l["metrics"];
    rows.push_back({label, l.value("type", ""), Shape(l.value("output", json())),
                    HumanCount(l.value("parameters", int64_t{0})), MetricText(m["module_flops"]),
                    MetricText(m["macs"]), MetricText(m["dmas"])});
    if (receptive_field) {
      rows.back().insert(rows.back().end(), {FieldText(m.value("receptive_field", json())),
                                             FieldText(m.value("effective_stride", json())),
                                             FieldText(m.value("effective_padding", json()))});
    }
  }
  const json& t = r["totals"];
  std::string out = Table(rows);
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, absl::StrFormat("Parameters: %s (trainable %s, frozen %s), %s; buffers %s\n",
                                        HumanCount(t["parameters"]), HumanCount(t["trainable_parameters"]),
                                        HumanCount(t["frozen_parameters"]),
                                        absl::StrCat(HumanCount(t["parameter_bytes"]), "B"),
                                        HumanCount(t["buffer_elements"])));
  absl::StrAppend(&out, "Module view (TorchScan conventions): ", MetricText(t["module_flops"]), " FLOPs, ",
                  MetricText(t["macs"]), " MACs, ", MetricText(t["dmas"]), " DMAs\n");
  absl::StrAppend(&out, "Operator view (PyTorch dispatch): ", MetricText(t["operator_flops"]), " FLOPs\n");
  const size_t n = r.contains("diagnostics") ? r["diagnostics"].size() : 0;
  absl::StrAppend(&out, "Diagnostics: ", n,
                  n ? " (\">=\" marks a partial value: a lower bound, some work has no formula)\n" : "\n");
  return out;
}

std::string RenderFlops(const json& r) {
  std::string out = absl::StrCat("Operator FLOPs: ", MetricText(r["total"]), " (", r["total"].value("status", ""),
                                 ")\n");
  std::vector<std::pair<int64_t, std::string>> ops;
  for (const auto& [op, v] : r["by_operator"].items()) ops.push_back({v.get<int64_t>(), op});
  std::sort(ops.rbegin(), ops.rend());
  std::vector<std::vector<std::string>> rows = {{"Operator", "", "", "FLOPs"}};
  for (const auto& [v, op] : ops) rows.push_back({op, "", "", HumanCount(v)});
  absl::StrAppend(&out, Table(rows));
  for (const auto& d : r["diagnostics"]) absl::StrAppend(&out, "[", d.value("code", ""), "] ", d.value("message", ""), "\n");
  return out;
}

}  // namespace

std::string HumanCount(int64_t n) {
  static const char* kUnits[] = {"", "k", "M", "G", "T", "P"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (std::abs(v) >= 1000 && unit < 5) {
    v /= 1000;
    ++unit;
  }
  return unit == 0 ? std::to_string(n) : absl::StrFormat("%.2f%s", v, kUnits[unit]);
}

std::string MetricText(const json& m) {
  if (!m.is_object()) return "n/a";
  const std::string status = m.value("status", "unavailable");
  if (status == "complete") return HumanCount(m["value"].get<int64_t>());
  if (status == "partial") return ">= " + HumanCount(m["known_value"].get<int64_t>());
  return "n/a";
}

absl::StatusOr<std::string> RenderReport(const json& report, int max_depth, bool receptive_field) {
  if (!report.is_object() || report.value("schema_version", 0) != kSchemaVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchscan.render_report: expected a schema_version ", kSchemaVersion, " report"));
  }
  if (report.contains("layers") && report.contains("totals")) return RenderAnalysis(report, max_depth, receptive_field);
  if (report.contains("by_operator") && report.contains("total")) return RenderFlops(report);
  return absl::InvalidArgumentError("torchscan.render_report: not an AnalysisReport or a FlopReport");
}

}  // namespace torchscan::reports
