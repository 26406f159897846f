#include "reports/render.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "reports/metric.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

// Only schema-valid reports (ValidateReport) reach the functions below; they
// still read defensively (find, type tests), so a gap between the validator
// and a reader shows as "?" rather than an exception.

const json* Find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string String(const json& obj, const char* key) {
  const json* v = Find(obj, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

// Any JSON number in human units (integers exactly below 1000).
std::string Human(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u < 1000 ? std::to_string(u) : HumanNumber(static_cast<double>(u));
  }
  if (v.is_number_integer()) return HumanCount(v.get<int64_t>());
  if (v.is_number_float() || IsWideCount(v)) return HumanNumber(NumberAsDouble(v));
  return "?";
}

std::string Shape(const json& meta) {
  if (!meta.is_object()) return "-";
  const std::string kind = String(meta, "kind");
  if (kind == "tensor") {
    std::vector<std::string> dims;
    if (const json* shape = Find(meta, "shape"); shape && shape->is_array()) {
      for (const auto& d : *shape) dims.push_back(d.is_number() ? d.dump() : "?");
    }
    return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
  }
  if (kind == "tuple" || kind == "list") {
    const json* items = Find(meta, "items");
    if (!items || !items->is_array() || items->empty()) return "()";
    return absl::StrCat(Shape((*items)[0]), items->size() > 1 ? ", ..." : "");
  }
  return kind.empty() ? "-" : kind;
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

std::string FieldNumber(const json* v) {
  if (v && IsWideCount(*v)) return HumanNumber(NumberAsDouble(*v));
  if (!v || !v->is_number()) return "?";
  return v->is_number_integer() ? v->dump() : absl::StrFormat("%.2f", v->get<double>());
}

// The scalar when complete; per-axis values joined by "x" when the axes differ.
std::string FieldText(const json* m) {
  if (!m) return "-";
  if (String(*m, "status") == "complete") return FieldNumber(Find(*m, "value"));
  const json* axes = Find(*m, "axes");
  if (!axes || !axes->is_array() || axes->empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& a : *axes) parts.push_back(FieldNumber(Find(a, "value")));
  return absl::StrJoin(parts, "x");
}

// A layer's metric; a metric covered by an ancestor (metric_owners) is absent.
std::string LayerMetric(const json& metrics, const char* name) {
  const json* m = Find(metrics, name);
  return m ? MetricText(*m) : "-";
}

// Bytes in binary units ("64.00KiB"); ">= " marks a partial value.
std::string BytesText(const json* m) {
  if (!m || !m->is_object()) return "-";
  const std::string status = String(*m, "status");
  const json* v = Find(*m, status == "complete" ? "value" : "known_value");
  if (status == "unavailable" || !v || !(v->is_number() || IsWideCount(*v))) return "n/a";
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double b = NumberAsDouble(*v);
  int unit = 0;
  while (b >= 1024 && unit < 5) {
    b /= 1024;
    ++unit;
  }
  const std::string text = unit == 0 ? absl::StrFormat("%.0fB", b) : absl::StrFormat("%.2f%s", b, kUnits[unit]);
  return status == "partial" ? ">= " + text : text;
}

// Indentation stops growing here, so a corrupt depth cannot make a huge line.
constexpr uint64_t kMaxIndent = 32;

std::string RenderAnalysis(const json& r, int max_depth, bool receptive_field) {
  std::vector<std::vector<std::string>> rows = {
      {"Layer", "Type", "Output shape", "Params", "FLOPs", "MACs", "DMAs"}};
  if (receptive_field) rows[0].insert(rows[0].end(), {"RF", "Stride", "Padding"});
  // Memory columns when the crawl attributed memory (crawl_module(memory=True)).
  bool memory = false;
  for (const auto& l : r["layers"]) {
    const json* m = Find(l, "metrics");
    memory = memory || (m && Find(*m, "peak_memory"));
  }
  if (memory) rows[0].insert(rows[0].end(), {"Peak mem", "Kept"});
  for (const auto& l : r["layers"]) {
    const json* d = Find(l, "depth");
    const uint64_t depth = d && d->is_number_unsigned() ? d->get<uint64_t>() : 0;
    if (max_depth >= 0 && depth > static_cast<uint64_t>(max_depth)) continue;
    const std::string path = String(l, "path");
    const json* call = Find(l, "call_index");
    const bool repeat = call && call->is_number_integer() && *call != 0;
    const std::string label = std::string(2 * std::min(depth, kMaxIndent), ' ') + (path.empty() ? "(root)" : path) +
                              (repeat ? absl::StrCat(" #", call->dump()) : "");
    static const json kNone = json::object();
    const json* found = Find(l, "metrics");
    const json& m = found ? *found : kNone;
    const json* params = Find(l, "parameters");
    const json* output = Find(l, "output");
    rows.push_back({label, String(l, "type"), Shape(output ? *output : json()), params ? Human(*params) : "-",
                    LayerMetric(m, "module_flops"), LayerMetric(m, "macs"), LayerMetric(m, "dmas")});
    if (receptive_field) {
      rows.back().insert(rows.back().end(), {FieldText(Find(m, "receptive_field")),
                                             FieldText(Find(m, "effective_stride")),
                                             FieldText(Find(m, "effective_padding"))});
    }
    if (memory) {
      rows.back().insert(rows.back().end(), {BytesText(Find(m, "peak_memory")), BytesText(Find(m, "allocated_bytes"))});
    }
  }
  const json& t = r["totals"];
  auto count = [&](const char* k) {
    const json* v = Find(t, k);
    return v ? Human(*v) : "?";
  };
  auto metric = [&](const char* k) {
    const json* v = Find(t, k);
    return v ? MetricText(*v) : "n/a";
  };
  std::string out = Table(rows);
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, absl::StrFormat("Parameters: %s (trainable %s, frozen %s), %s; buffers %s\n",
                                        count("parameters"), count("trainable_parameters"), count("frozen_parameters"),
                                        absl::StrCat(count("parameter_bytes"), "B"), count("buffer_elements")));
  absl::StrAppend(&out, "Module view (TorchScan conventions): ", metric("module_flops"), " FLOPs, ", metric("macs"),
                  " MACs, ", metric("dmas"), " DMAs\n");
  absl::StrAppend(&out, "Operator view (PyTorch dispatch): ", metric("operator_flops"), " FLOPs\n");
  if (memory || Find(t, "peak_memory")) {
    absl::StrAppend(&out, "Memory (allocator reports): peak ", BytesText(Find(t, "peak_memory")),
                    " (Peak mem: most bytes allocated inside a layer call alive at once; "
                    "Kept: still alive when it returned)\n");
  }
  const json* diagnostics = Find(r, "diagnostics");
  const size_t n = diagnostics && diagnostics->is_array() ? diagnostics->size() : 0;
  absl::StrAppend(&out, "Diagnostics: ", n,
                  n ? " (\">=\" marks a partial value: a lower bound, some work has no formula)\n" : "\n");
  return out;
}

// Larger first; exact for counts (up to 2^128 - 1).
bool Greater(const json& a, const json& b) {
  const std::optional<unsigned __int128> x = ExactCount(a), y = ExactCount(b);
  if (x && y) return *x > *y;
  return NumberAsDouble(a) > NumberAsDouble(b);
}

std::string RenderFlops(const json& r) {
  const json& total = r["total"];
  std::string out = absl::StrCat("Operator FLOPs: ", MetricText(total), " (", String(total, "status"), ")\n");
  std::vector<std::pair<const json*, std::string>> ops;
  for (const auto& [op, v] : r["by_operator"].items()) ops.push_back({&v, op});
  // Most FLOPs first; ties by name, descending (the order before counts could pass 2^63).
  std::sort(ops.begin(), ops.end(), [](const auto& x, const auto& y) {
    if (Greater(*x.first, *y.first)) return true;
    if (Greater(*y.first, *x.first)) return false;
    return x.second > y.second;
  });
  std::vector<std::vector<std::string>> rows = {{"Operator", "", "", "FLOPs"}};
  for (const auto& [v, op] : ops) rows.push_back({op, "", "", Human(*v)});
  absl::StrAppend(&out, Table(rows));
  if (const json* diagnostics = Find(r, "diagnostics"); diagnostics && diagnostics->is_array()) {
    for (const auto& d : *diagnostics) absl::StrAppend(&out, "[", String(d, "code"), "] ", String(d, "message"), "\n");
  }
  return out;
}

}  // namespace

std::string HumanNumber(double v) {
  // SI prefixes up to quetta (10^30); larger values stay in Q.
  static const char* kUnits[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q"};
  if (!std::isfinite(v)) return "?";
  if (std::abs(v) < 1000) return v == std::floor(v) ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.2f", v);
  int unit = 0;
  while (std::abs(v) >= 1000 && unit < 10) {
    v /= 1000;
    ++unit;
  }
  return absl::StrFormat("%.2f%s", v, kUnits[unit]);
}

std::string HumanCount(int64_t n) {
  if (n > -1000 && n < 1000) return std::to_string(n);
  return HumanNumber(static_cast<double>(n));
}

std::string MetricText(const json& m) {
  if (!m.is_object()) return "n/a";
  const std::string status = String(m, "status");
  const json* v = Find(m, status == "complete" ? "value" : "known_value");
  if (status == "complete") return v ? Human(*v) : "?";
  if (status == "partial") return ">= " + (v ? Human(*v) : "?");
  return "n/a";
}

absl::StatusOr<std::string> RenderReport(const json& report, int max_depth, bool receptive_field,
                                         const ReportSource& source) {
  json parsed;
  const json* readable = nullptr;
  const absl::StatusOr<ReportKind> kind = ValidateForReading(report, source, &parsed, &readable);
  const json& r = *readable;
  if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat("torchscan.render_report: ", kind.status().message()));
  try {
    return *kind == ReportKind::kAnalysis ? RenderAnalysis(r, max_depth, receptive_field) : RenderFlops(r);
  } catch (const json::exception& e) {
    // Unreachable for validated input (the fuzz test holds it to that); kept so
    // a gap is an error message, not an exception through the bindings.
    return absl::InternalError(absl::StrCat("torchscan.render_report: internal error reading a validated report: ",
                                            e.what()));
  }
}

}  // namespace torchscan::reports
