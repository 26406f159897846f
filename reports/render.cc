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

// A byte count in binary units ("64.00KiB"): one family for every size the table shows.
std::string Bytes(double b) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (b >= 1024 && unit < 5) {
    b /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0fB", b) : absl::StrFormat("%.2f%s", b, kUnits[unit]);
}

// A byte MetricResult in binary units; ">= " marks a partial value.
std::string BytesText(const json* m) {
  if (!m || !m->is_object()) return "-";
  const std::string status = String(*m, "status");
  const json* v = Find(*m, status == "complete" ? "value" : "known_value");
  if (status == "unavailable" || !v || !(v->is_number() || IsWideCount(*v))) return "n/a";
  const std::string text = Bytes(NumberAsDouble(*v));
  return status == "partial" ? ">= " + text : text;
}

// An exact count with thousands separators ("1,184"): parameter counts are
// read exactly, not rounded. Digits of a count up to 2^128 - 1.
std::string Grouped(unsigned __int128 c) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(c % 10)));
    c /= 10;
  } while (c != 0);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

std::string Grouped(const json* v) {
  if (!v) return "?";
  const std::optional<unsigned __int128> c = ExactCount(*v);
  return c ? Grouped(*c) : Human(*v);
}

std::string HumanWide(unsigned __int128 c) {
  return c <= UINT64_MAX ? Human(json(static_cast<uint64_t>(c))) : HumanNumber(static_cast<double>(c));
}

// A row's module-view metric with the metrics of the hidden layers below it
// added (rows are exclusive, so the sum is the subtree's work): complete when
// every part is, a lower bound (">= ") when some part is partial or
// unavailable, n/a when none has a value. A metric covered by an ancestor
// (metric_owners) is absent and adds nothing: the owner's row holds it.
struct MetricSum {
  bool present = false;  // some part has the metric
  bool valued = false;   // some part is not unavailable
  bool incomplete = false;
  unsigned __int128 known = 0;

  void Add(const json* m) {
    if (!m || !m->is_object()) return;
    present = true;
    const std::string status = String(*m, "status");
    if (status != "complete") incomplete = true;
    if (status == "unavailable") return;
    const json* v = Find(*m, status == "complete" ? "value" : "known_value");
    const std::optional<unsigned __int128> c = v ? ExactCount(*v) : std::nullopt;
    if (!c) {
      incomplete = true;
      return;
    }
    valued = true;
    if (__builtin_add_overflow(known, *c, &known)) {  // past 2^128 - 1: the largest count, a lower bound
      known = ~static_cast<unsigned __int128>(0);
      incomplete = true;
    }
  }

  std::string Text() const {
    if (!present) return "-";
    if (!valued) return "n/a";
    return incomplete ? ">= " + HumanWide(known) : HumanWide(known);
  }
};

// What a visible row shows: its own values, plus those of the hidden layers
// folded into it.
struct VisibleRow {
  const json* layer = nullptr;
  MetricSum metrics[3];  // module_flops, macs, dmas
  unsigned __int128 parameters = 0;
  bool parameters_known = true;
  bool repeat = false;  // a later call of a module shown before: its parameters are counted there
};

constexpr const char* kRowMetrics[3] = {"module_flops", "macs", "dmas"};

// The parameters a layer row adds to the table's sum: none on a module's
// later calls (the same parameters), and not those counted at an earlier
// module's row (shared_parameters: tied weights).
void AddParameters(const json& l, VisibleRow* row) {
  const json* call = Find(l, "call_index");
  if (call && call->is_number_integer() && *call != 0) return;
  const json* params = Find(l, "parameters");
  const std::optional<unsigned __int128> own = params ? ExactCount(*params) : std::nullopt;
  if (!own) {
    row->parameters_known = false;
    return;
  }
  unsigned __int128 n = *own;
  if (const json* shared = Find(l, "shared_parameters")) {
    const std::optional<unsigned __int128> s = ExactCount(*shared);
    if (s) n -= std::min(*s, n);
  }
  if (__builtin_add_overflow(row->parameters, n, &row->parameters)) row->parameters_known = false;
}

// Indentation stops growing here, so a corrupt depth cannot make a huge line.
constexpr uint64_t kMaxIndent = 32;

std::string RenderAnalysis(const json& r, int max_depth, bool receptive_field) {
  std::vector<std::vector<std::string>> rows = {{"Layer", "Type", "Output shape", "Params", "FLOPs", "MACs", "DMAs"}};
  if (receptive_field) rows[0].insert(rows[0].end(), {"RF", "Stride", "Padding"});
  // Memory columns when the crawl attributed memory (crawl_module(memory=True)).
  bool memory = false;
  for (const auto& l : r["layers"]) {
    const json* m = Find(l, "metrics");
    memory = memory || (m && Find(*m, "peak_memory"));
  }
  if (memory) rows[0].insert(rows[0].end(), {"Peak mem", "Kept"});
  // Layers deeper than max_depth are not shown: each one's work and
  // parameters are added into the last visible row before it (in call
  // order, its ancestor at max_depth), so the visible rows add up to the
  // totals. Memory columns need no folding: a call's peak and kept bytes
  // already include its children's.
  std::vector<VisibleRow> visible;
  bool folded = false;
  std::vector<std::string> shared_notes;
  size_t shared_rows = 0;
  for (const auto& l : r["layers"]) {
    const json* d = Find(l, "depth");
    const uint64_t depth = d && d->is_number_unsigned() ? d->get<uint64_t>() : 0;
    const json* found = Find(l, "metrics");
    const bool hidden = max_depth >= 0 && depth > static_cast<uint64_t>(max_depth);
    if (!hidden) {
      visible.emplace_back();
      visible.back().layer = &l;
      const json* call = Find(l, "call_index");
      visible.back().repeat = call && call->is_number_integer() && *call != 0;
    } else if (visible.empty()) {
      continue;  // no row to fold into (not in a well-formed report: the root comes first)
    } else {
      folded = true;
    }
    VisibleRow& row = visible.back();
    for (int k = 0; k < 3; ++k) row.metrics[k].Add(found ? Find(*found, kRowMetrics[k]) : nullptr);
    AddParameters(l, &row);
    if (const json* shared = Find(l, "shared_parameters"); shared && ExactCount(*shared).value_or(0) > 0) {
      const std::string path = String(l, "path");
      if (++shared_rows <= 5) {
        shared_notes.push_back(absl::StrCat(path.empty() ? "(root)" : path, " shares ", Grouped(shared), " with ",
                                            String(l, "shared_with").empty() ? "(root)" : String(l, "shared_with")));
      }
    }
  }
  for (const VisibleRow& v : visible) {
    const json& l = *v.layer;
    const json* d = Find(l, "depth");
    const uint64_t depth = d && d->is_number_unsigned() ? d->get<uint64_t>() : 0;
    const std::string path = String(l, "path");
    const json* call = Find(l, "call_index");
    const std::string label = std::string(2 * std::min(depth, kMaxIndent), ' ') + (path.empty() ? "(root)" : path) +
                              (v.repeat ? absl::StrCat(" #", call->dump()) : "");
    static const json kNone = json::object();
    const json* found = Find(l, "metrics");
    const json& m = found ? *found : kNone;
    const json* output = Find(l, "output");
    // A later call shows "(recursive)": its parameters are those of the module's first call.
    const std::string params = v.repeat ? "(recursive)" : v.parameters_known ? Grouped(v.parameters) : "?";
    rows.push_back({label, String(l, "type"), Shape(output ? *output : json()), params, v.metrics[0].Text(),
                    v.metrics[1].Text(), v.metrics[2].Text()});
    if (receptive_field) {
      rows.back().insert(rows.back().end(),
                         {FieldText(Find(m, "receptive_field")), FieldText(Find(m, "effective_stride")),
                          FieldText(Find(m, "effective_padding"))});
    }
    if (memory) {
      rows.back().insert(rows.back().end(), {BytesText(Find(m, "peak_memory")), BytesText(Find(m, "allocated_bytes"))});
    }
  }
  const json& t = r["totals"];
  auto count = [&](const char* k) { return Grouped(Find(t, k)); };
  auto metric = [&](const char* k) {
    const json* v = Find(t, k);
    return v ? MetricText(*v) : "n/a";
  };
  auto bytes = [&](const char* k) {
    const json* v = Find(t, k);
    return v && (v->is_number() || IsWideCount(*v)) ? Bytes(NumberAsDouble(*v)) : "?";
  };
  std::string out = folded ? absl::StrCat("Rows at depth ", max_depth,
                                          " include the layers below them (FLOPs, MACs, DMAs, parameters); "
                                          "the rows add up to the totals.\n")
                           : "Each row counts its own work and parameters, not its sublayers'; "
                             "the rows add up to the totals.\n";
  absl::StrAppend(&out, Table(rows));
  if (!shared_notes.empty()) {
    const std::string more =
        shared_rows > shared_notes.size() ? absl::StrCat("; and ", shared_rows - shared_notes.size(), " more") : "";
    absl::StrAppend(&out, "Shared parameters are counted once, at their first row: ", absl::StrJoin(shared_notes, "; "),
                    more, "\n");
  }
  // Parameters of modules that made no call in this forward are in the
  // total but in no row: said, so the column's sum is not taken for a gap.
  unsigned __int128 in_rows = 0;
  bool rows_known = true;
  for (const VisibleRow& v : visible) {
    rows_known = rows_known && v.parameters_known;
    in_rows += v.parameters;
  }
  const std::optional<unsigned __int128> total_params =
      Find(t, "parameters") ? ExactCount(*Find(t, "parameters")) : std::nullopt;
  if (rows_known && total_params && *total_params > in_rows) {
    absl::StrAppend(&out, Grouped(*total_params - in_rows),
                    " parameters belong to modules that did not run in this forward: in the total, in no row\n");
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, absl::StrFormat("Parameters: %s (trainable %s, frozen %s), %s; buffers %s (%s)\n",
                                        count("parameters"), count("trainable_parameters"), count("frozen_parameters"),
                                        bytes("parameter_bytes"), count("buffer_elements"), bytes("buffer_bytes")));
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
    return absl::InternalError(
        absl::StrCat("torchscan.render_report: internal error reading a validated report: ", e.what()));
  }
}

}  // namespace torchscan::reports
