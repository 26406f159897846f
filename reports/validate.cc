#include "reports/validate.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formulas/count.h"
#include "reports/metric.h"
#include "reports/report_text.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using internal::Identifier;
using internal::Quote;
using internal::Where;

// Stops a validation function at its first error.
#define TS_CHECK_OK(expr)                    \
  do {                                       \
    absl::Status ts_status_ = (expr);        \
    if (!ts_status_.ok()) return ts_status_; \
  } while (0)

// A JSON path built on the stack as validation descends; formatted only when
// a check fails ("layers[3].metrics.module_flops", by_operator["aten.mm"]).
struct Path {
  const Path* parent = nullptr;
  std::string_view key;
  size_t index = 0;
  bool is_index = false;

  // A child points to its parent: only a named Path may have children, so a
  // stored child never outlives a temporary parent.
  Path Key(std::string_view k) const& { return Path{this, k, 0, false}; }
  Path At(size_t i) const& { return Path{this, {}, i, true}; }
  Path Key(std::string_view k) && = delete;
  Path At(size_t i) && = delete;
};

std::string Format(const Path& p) {
  std::vector<const Path*> chain;
  for (const Path* q = &p; q->parent; q = q->parent) chain.push_back(q);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Path& q = **it;
    if (q.is_index) {
      absl::StrAppend(&out, "[", q.index, "]");
    } else if (Identifier(q.key)) {
      absl::StrAppend(&out, out.empty() ? "" : ".", std::string(q.key));
    } else {
      absl::StrAppend(&out, "[", Quote(q.key), "]");
    }
  }
  if (out.empty()) return "(top level)";
  // Paths are ASCII (Quote escapes); keep both ends of a very deep one.
  if (out.size() > 240) out = absl::StrCat(out.substr(0, 120), "...", out.substr(out.size() - 100));
  return out;
}

// What a value is, for "expected X, got Y".
std::string Got(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return absl::StrCat("the string ", Quote(v.get_ref<const std::string&>()));
    case json::value_t::array:
      return absl::StrCat("an array of ", v.size());
    case json::value_t::object:
      return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return v.dump();
    default: {
      bool negative = false;
      unsigned __int128 magnitude = 0;
      if (IsWideCount(v, &negative, &magnitude)) return (negative ? "-" : "") + Count::FromWide(magnitude).Digits();
      return "an unreadable value";
    }
  }
}

absl::Status Fail(const Path& p, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(Format(p), ": ", std::string(problem)));
}

bool IsIndex(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

// The member `key` of object `obj` (at path `at`), or "missing".
absl::Status Need(const json& obj, const Path& at, std::string_view key, const json** out) {
  auto it = obj.find(key);  // heterogeneous lookup: no string built
  if (it == obj.end()) return Fail(at.Key(key), "missing");
  *out = &*it;
  return absl::OkStatus();
}

const json* Find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

absl::Status Object(const json& v, const Path& p, std::string_view what = "an object") {
  return v.is_object() ? absl::OkStatus() : Fail(p, absl::StrCat("expected ", std::string(what), ", got ", Got(v)));
}
absl::Status Array(const json& v, const Path& p, std::string_view what = "an array") {
  return v.is_array() ? absl::OkStatus() : Fail(p, absl::StrCat("expected ", std::string(what), ", got ", Got(v)));
}
absl::Status String(const json& v, const Path& p) {
  return v.is_string() ? absl::OkStatus() : Fail(p, absl::StrCat("expected a string, got ", Got(v)));
}
absl::Status Bool(const json& v, const Path& p) {
  return v.is_boolean() ? absl::OkStatus() : Fail(p, absl::StrCat("expected true or false, got ", Got(v)));
}
absl::Status CountValue(const json& v, const Path& p) {
  if (IsCount(v)) return absl::OkStatus();
  if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() >= 0 &&
      std::floor(v.get<double>()) == v.get<double>()) {
    if (v.get<double>() >= 0x1p128) {
      return Fail(p, absl::StrCat("a count past 2^128 - 1 (", Got(v),
                                  "); counts are exact only up to 2^128 - 1, and no TorchScan report holds a "
                                  "larger one"));
    }
    return Fail(p, absl::StrCat("expected an integer count, got the float ", Got(v),
                                " (past 2^53 a float is not exact: write counts as integers)"));
  }
  return Fail(p, absl::StrCat("expected a non-negative integer, got ", Got(v)));
}
absl::Status IndexValue(const json& v, const Path& p) {
  return IsIndex(v) ? absl::OkStatus()
                    : Fail(p, absl::StrCat("expected a non-negative integer below 2^64, got ", Got(v)));
}

// Required / optional members of a given type.
using Check = absl::Status (*)(const json&, const Path&);
absl::Status Required(const json& obj, const Path& at, std::string_view key, Check check) {
  const json* v = nullptr;
  TS_CHECK_OK(Need(obj, at, key, &v));
  return check(*v, at.Key(key));
}
absl::Status Optional(const json& obj, const Path& at, std::string_view key, Check check) {
  const json* v = Find(obj, key);
  return v ? check(*v, at.Key(key)) : absl::OkStatus();
}
absl::Status StringArray(const json& v, const Path& p) {
  TS_CHECK_OK(Array(v, p, "an array of strings"));
  for (size_t i = 0; i < v.size(); ++i) TS_CHECK_OK(String(v[i], p.At(i)));
  return absl::OkStatus();
}

// Before anything recurses: reports are shallow, so refuse deep nesting here
// (recursive copies, comparisons and dumps of it would exhaust the stack).
absl::Status Depth(const json& v, const Path& p, int depth) {
  if (v.is_binary()) {
    if (IsWideCount(v)) return absl::OkStatus();  // an exact count past 2^64 - 1 (CountJson, ParseReportJson)
    return Fail(p, "a binary value, which JSON text cannot hold and no report contains");
  }
  if (!v.is_structured()) return absl::OkStatus();
  if (depth >= kMaxReportDepth) {
    return Fail(p, absl::StrCat("nested more than ", kMaxReportDepth, " levels deep; no report is"));
  }
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) TS_CHECK_OK(Depth(v[i], p.At(i), depth + 1));
  } else {
    for (const auto& [k, x] : v.items()) TS_CHECK_OK(Depth(x, p.Key(k), depth + 1));
  }
  return absl::OkStatus();
}

// ---- MetricResult

// receptive_field, effective_stride, effective_padding (unit "positions") can
// be fractional or negative; every other metric is a count.
bool PositionMetric(std::string_view name, const json& m) {
  if (name == "receptive_field" || name == "effective_stride" || name == "effective_padding") return true;
  const json* unit = m.is_object() ? Find(m, "unit") : nullptr;
  return unit && unit->is_string() && unit->get_ref<const std::string&>() == "positions";
}

absl::Status MetricNumber(const json& v, const Path& p, bool position) {
  if (position) {
    if ((v.is_number() && std::isfinite(v.get<double>())) || IsWideCount(v)) return absl::OkStatus();
    return Fail(p, absl::StrCat("expected a number, got ", Got(v)));
  }
  return CountValue(v, p);
}

absl::Status Metric(const json& m, const Path& p, bool position) {
  if (!m.is_object()) return Fail(p, absl::StrCat("expected a MetricResult object, got ", Got(m)));
  const json *status = nullptr, *value = nullptr, *known = nullptr;
  TS_CHECK_OK(Need(m, p, "status", &status));
  const std::string s = status->is_string() ? status->get<std::string>() : "";
  if (s != "complete" && s != "partial" && s != "unavailable") {
    return Fail(p.Key("status"),
                absl::StrCat("expected \"complete\", \"partial\" or \"unavailable\", got ", Got(*status)));
  }
  TS_CHECK_OK(Need(m, p, "value", &value));
  TS_CHECK_OK(Need(m, p, "known_value", &known));
  for (const char* k : {"unit", "scope", "method"}) TS_CHECK_OK(Required(m, p, k, String));
  if (s == "complete") {
    TS_CHECK_OK(MetricNumber(*value, p.Key("value"), position));
    TS_CHECK_OK(MetricNumber(*known, p.Key("known_value"), position));
    if (*value != *known) {
      return Fail(p.Key("known_value"), absl::StrCat("a complete result has known_value equal to value (",
                                                     value->dump(), "), got ", known->dump()));
    }
  } else if (s == "partial") {
    if (!value->is_null()) {
      return Fail(
          p.Key("value"),
          absl::StrCat("expected null (a partial result has only a known_value lower bound), got ", Got(*value)));
    }
    TS_CHECK_OK(MetricNumber(*known, p.Key("known_value"), position));
  } else {
    for (const auto& [k, v] : {std::pair<const char*, const json*>{"value", value}, {"known_value", known}}) {
      if (!v->is_null()) {
        return Fail(p.Key(k), absl::StrCat("expected null (the status is unavailable), got ", Got(*v)));
      }
    }
  }
  return absl::OkStatus();
}

// An object whose object-valued entries are MetricResults.
absl::Status MetricsIn(const json& obj, const Path& p) {
  for (const auto& [k, v] : obj.items()) {
    if (v.is_object()) TS_CHECK_OK(Metric(v, p.Key(k), PositionMetric(k, v)));
  }
  return absl::OkStatus();
}

// ---- Diagnostic

absl::Status Diagnostics(const json& v, const Path& p) {
  TS_CHECK_OK(Array(v, p, "an array of diagnostics"));
  for (size_t i = 0; i < v.size(); ++i) {
    const json& d = v[i];
    const Path at = p.At(i);
    TS_CHECK_OK(Object(d, at, "a diagnostic object"));
    for (const char* k : {"code", "severity", "metric", "message"}) TS_CHECK_OK(Required(d, at, k, String));
    const std::string& severity = d["severity"].get_ref<const std::string&>();
    if (severity != "warning" && severity != "error") {
      return Fail(at.Key("severity"), absl::StrCat("expected \"warning\" or \"error\", got ", Quote(severity)));
    }
    TS_CHECK_OK(Optional(d, at, "path", String));
    TS_CHECK_OK(Optional(d, at, "operator", String));
    TS_CHECK_OK(Optional(d, at, "calls", CountValue));
  }
  return absl::OkStatus();
}

// ---- input / output metadata (report schema, "Input metadata")

absl::Status Meta(const json& v, const Path& p) {
  if (v.is_array()) {
    return Fail(p, "expected metadata (a scalar, null, or an object with a \"kind\"), got an array");
  }
  if (!v.is_object()) return absl::OkStatus();  // scalars and None are their own metadata
  const json* kind = nullptr;
  TS_CHECK_OK(Need(v, p, "kind", &kind));
  TS_CHECK_OK(String(*kind, p.Key("kind")));
  const std::string& k = kind->get_ref<const std::string&>();
  if (k == "tensor" || k == "nested_tensor") {
    if (k == "tensor") {
      const json* shape = nullptr;
      TS_CHECK_OK(Need(v, p, "shape", &shape));
      TS_CHECK_OK(Array(*shape, p.Key("shape"), "an array of sizes"));
      const Path sp = p.Key("shape");
      for (size_t i = 0; i < shape->size(); ++i) TS_CHECK_OK(IndexValue((*shape)[i], sp.At(i)));
    }
    TS_CHECK_OK(Required(v, p, "dtype", String));
    TS_CHECK_OK(Required(v, p, "device", String));
    TS_CHECK_OK(Required(v, p, "requires_grad", Bool));
  } else if (k == "tuple" || k == "list") {
    const json* items = nullptr;
    TS_CHECK_OK(Need(v, p, "items", &items));
    TS_CHECK_OK(Array(*items, p.Key("items")));
    const Path ip = p.Key("items");
    for (size_t i = 0; i < items->size(); ++i) TS_CHECK_OK(Meta((*items)[i], ip.At(i)));
  } else if (k == "mapping") {
    const json* items = nullptr;
    TS_CHECK_OK(Need(v, p, "items", &items));
    TS_CHECK_OK(Object(*items, p.Key("items")));
    const Path ip = p.Key("items");
    for (const auto& [key, x] : items->items()) TS_CHECK_OK(Meta(x, ip.Key(key)));
  } else if (k == "call") {
    TS_CHECK_OK(Required(v, p, "args", Meta));
    TS_CHECK_OK(Required(v, p, "kwargs", Meta));
  } else if (k == "object") {
    TS_CHECK_OK(Required(v, p, "type", String));
  }
  // "failed", and kinds a later writer adds, carry nothing the readers use.
  return absl::OkStatus();
}

// ---- layer calls

inline constexpr const char* kRequiredLayerMetrics[] = {
    "module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding"};

absl::Status OwnerIdentity(const json& v, const Path& p) {
  TS_CHECK_OK(Object(v, p, "an owner {\"path\", \"call_index\"}"));
  TS_CHECK_OK(Required(v, p, "path", String));
  return Required(v, p, "call_index", IndexValue);
}

// token_dependencies (schema: "Token dependencies"): a complete object names
// its output axis and, per source, one relation the schema defines.
absl::Status Relation(const json& r, const Path& p) {
  TS_CHECK_OK(Object(r, p));
  const json* kind = nullptr;
  TS_CHECK_OK(Need(r, p, "kind", &kind));
  if (*kind != "all" && *kind != "same_position" && *kind != "prefix" && *kind != "none") {
    return Fail(p.Key("kind"),
                absl::StrCat("expected \"all\", \"same_position\", \"prefix\" or \"none\", got ", Got(*kind)));
  }
  if (const json* limit = Find(r, "limit")) {
    if (!IsIndex(*limit) || *limit == 0)
      return Fail(p.Key("limit"), absl::StrCat("expected a positive integer, got ", Got(*limit)));
  }
  return Optional(r, p, "first_position", IndexValue);
}

absl::Status Axis(const json& a, const Path& p) {
  TS_CHECK_OK(Object(a, p));
  TS_CHECK_OK(Required(a, p, "sequence_axis", IndexValue));
  return Required(a, p, "length", IndexValue);
}

absl::Status TokenDependencies(const json& deps, const Path& at) {
  TS_CHECK_OK(Object(deps, at));
  const json* status = nullptr;
  TS_CHECK_OK(Need(deps, at, "status", &status));
  if (*status != "complete" && *status != "unavailable") {
    return Fail(at.Key("status"), absl::StrCat("expected \"complete\" or \"unavailable\", got ", Got(*status)));
  }
  if (*status != "complete") return absl::OkStatus();
  TS_CHECK_OK(Required(deps, at, "output", Axis));
  const json* sources = nullptr;
  TS_CHECK_OK(Need(deps, at, "sources", &sources));
  const Path sources_path = at.Key("sources");
  TS_CHECK_OK(Array(*sources, sources_path));
  for (size_t i = 0; i < sources->size(); ++i) {
    const json& s = (*sources)[i];
    const Path sp = sources_path.At(i);
    TS_CHECK_OK(Axis(s, sp));
    TS_CHECK_OK(Required(s, sp, "arguments", StringArray));
    TS_CHECK_OK(Required(s, sp, "relation", Relation));
  }
  return absl::OkStatus();
}

absl::Status Layer(const json& l, const Path& p) {
  TS_CHECK_OK(Object(l, p, "a layer call object"));
  TS_CHECK_OK(Required(l, p, "path", String));
  TS_CHECK_OK(Required(l, p, "call_index", IndexValue));
  TS_CHECK_OK(Required(l, p, "name", String));
  TS_CHECK_OK(Required(l, p, "type", String));
  TS_CHECK_OK(Required(l, p, "depth", IndexValue));
  TS_CHECK_OK(Required(l, p, "inputs", Meta));
  TS_CHECK_OK(Required(l, p, "output", Meta));
  TS_CHECK_OK(Required(l, p, "parameters", CountValue));
  for (const char* k : {"trainable_parameters", "parameter_bytes", "buffers", "buffer_bytes"}) {
    TS_CHECK_OK(Optional(l, p, k, CountValue));
  }
  TS_CHECK_OK(Optional(l, p, "failed", Bool));
  const json* owners = Find(l, "metric_owners");
  if (owners) {
    TS_CHECK_OK(Object(*owners, p.Key("metric_owners")));
    const Path op = p.Key("metric_owners");
    for (const auto& [k, v] : owners->items()) TS_CHECK_OK(OwnerIdentity(v, op.Key(k)));
  }
  if (const json* ownership = Find(l, "metric_ownership")) {
    const Path op = p.Key("metric_ownership");
    TS_CHECK_OK(Object(*ownership, op));
    for (const auto& [k, v] : ownership->items()) {
      if (!v.is_string() || (v != "module_call" && v != "subtree")) {
        return Fail(op.Key(k), absl::StrCat("expected \"module_call\" or \"subtree\", got ", Got(v)));
      }
    }
  }
  if (const json* deps = Find(l, "token_dependencies"))
    TS_CHECK_OK(TokenDependencies(*deps, p.Key("token_dependencies")));
  const json* metrics = nullptr;
  TS_CHECK_OK(Need(l, p, "metrics", &metrics));
  const Path mp = p.Key("metrics");
  TS_CHECK_OK(Object(*metrics, mp, "an object of MetricResults"));
  for (const char* name : kRequiredLayerMetrics) {
    // A metric covered by an ancestor's inclusive estimate is absent on purpose.
    if (!metrics->contains(name) && !(owners && owners->contains(name))) {
      return Fail(mp.Key(name),
                  "missing (a layer has module_flops, macs, dmas, receptive_field, effective_stride and "
                  "effective_padding, unless metric_owners names the ancestor that covers it)");
    }
  }
  for (const auto& [k, v] : metrics->items()) TS_CHECK_OK(Metric(v, mp.Key(k), PositionMetric(k, v)));
  return absl::OkStatus();
}

// ---- the two report kinds

absl::Status SchemaVersion(const json& r, const Path& p) {
  const json* v = nullptr;
  TS_CHECK_OK(Need(r, p, "schema_version", &v));
  if (!v->is_number_integer()) {
    return Fail(p.Key("schema_version"), absl::StrCat("expected the integer ", kSchemaVersion, ", got ", Got(*v)));
  }
  if (*v != kSchemaVersion) {
    return Fail(p.Key("schema_version"),
                absl::StrCat("unknown version ", v->dump(), "; this build reads schema_version ", kSchemaVersion,
                             " (migrate other versions explicitly)"));
  }
  return absl::OkStatus();
}

absl::Status FlopReport(const json& r, const Path& p) {
  TS_CHECK_OK(Object(r, p, "a FlopReport object"));
  TS_CHECK_OK(SchemaVersion(r, p));
  const json* context = nullptr;
  TS_CHECK_OK(Need(r, p, "context", &context));
  TS_CHECK_OK(Object(*context, p.Key("context")));
  for (const char* k : {"torch_version", "torchscan_version", "method", "counting_convention", "native_convention"}) {
    TS_CHECK_OK(Optional(*context, p.Key("context"), k, String));
  }
  const json* total = nullptr;
  TS_CHECK_OK(Need(r, p, "total", &total));
  TS_CHECK_OK(Metric(*total, p.Key("total"), /*position=*/false));
  for (const char* k : {"by_module", "by_operator"}) {
    const json* m = nullptr;
    TS_CHECK_OK(Need(r, p, k, &m));
    const Path mp = p.Key(k);
    TS_CHECK_OK(Object(*m, mp, "an object of FLOP counts"));
    for (const auto& [key, v] : m->items()) TS_CHECK_OK(CountValue(v, mp.Key(key)));
  }
  const json* ignored = nullptr;
  TS_CHECK_OK(Need(r, p, "ignored_operators", &ignored));
  TS_CHECK_OK(Object(*ignored, p.Key("ignored_operators")));
  const Path ip = p.Key("ignored_operators");  // a named parent: `at` points to it
  for (const auto& [key, v] : ignored->items()) {
    const Path at = ip.Key(key);
    TS_CHECK_OK(Object(v, at, "an object {\"calls\", \"reason\"}"));
    TS_CHECK_OK(Required(v, at, "calls", CountValue));
    TS_CHECK_OK(Required(v, at, "reason", String));
  }
  return Required(r, p, "diagnostics", Diagnostics);
}

absl::Status FlopReportCheck(const json& r, const Path& p) { return FlopReport(r, p); }

absl::Status AnalysisReport(const json& r, const Path& p) {
  TS_CHECK_OK(SchemaVersion(r, p));
  const json* context = nullptr;
  TS_CHECK_OK(Need(r, p, "context", &context));
  const Path cp = p.Key("context");
  TS_CHECK_OK(Object(*context, cp));
  for (const char* k :
       {"torchscan_version", "torch_version", "python_version", "model_type", "execution_mode", "analysis_mode"}) {
    TS_CHECK_OK(Optional(*context, cp, k, String));
  }
  TS_CHECK_OK(Optional(*context, cp, "training_before", Bool));
  TS_CHECK_OK(Optional(*context, cp, "devices", StringArray));
  TS_CHECK_OK(Optional(*context, cp, "dtypes", StringArray));

  const json* inputs = nullptr;
  TS_CHECK_OK(Need(r, p, "inputs", &inputs));
  TS_CHECK_OK(Object(*inputs, p.Key("inputs")));
  TS_CHECK_OK(Required(*inputs, p.Key("inputs"), "source", String));
  TS_CHECK_OK(Required(*inputs, p.Key("inputs"), "args", Meta));
  TS_CHECK_OK(Required(*inputs, p.Key("inputs"), "kwargs", Meta));

  const json* layers = nullptr;
  TS_CHECK_OK(Need(r, p, "layers", &layers));
  const Path lp = p.Key("layers");
  TS_CHECK_OK(Array(*layers, lp, "an array of layer calls"));
  std::map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    TS_CHECK_OK(Layer(l, lp.At(i)));
    const auto [it, fresh] =
        seen.emplace(std::make_pair(l["path"].get<std::string>(), l["call_index"].get<uint64_t>()), i);
    if (!fresh) {
      return Fail(lp.At(i),
                  absl::StrCat("the same layer call (path ", Quote(it->first.first), ", call_index ", it->first.second,
                               ") as layers[", it->second, "]; a path and call index identify one call"));
    }
  }

  const json* totals = nullptr;
  TS_CHECK_OK(Need(r, p, "totals", &totals));
  const Path tp = p.Key("totals");
  TS_CHECK_OK(Object(*totals, tp));
  for (const char* k : {"parameters", "trainable_parameters", "frozen_parameters", "parameter_bytes", "buffer_elements",
                        "buffer_bytes"}) {
    TS_CHECK_OK(Required(*totals, tp, k, CountValue));
  }
  for (const char* k : {"module_flops", "macs", "dmas", "operator_flops"}) {
    const json* m = nullptr;
    TS_CHECK_OK(Need(*totals, tp, k, &m));
    TS_CHECK_OK(Metric(*m, tp.Key(k), /*position=*/false));
  }
  TS_CHECK_OK(MetricsIn(*totals, tp));
  TS_CHECK_OK(Required(r, p, "operator_flops", FlopReportCheck));
  return Required(r, p, "diagnostics", Diagnostics);
}

absl::StatusOr<ReportKind> Classify(const json& r, const Path& root) {
  if (!r.is_object()) {
    return Fail(root, absl::StrCat("expected a report (a JSON object), got ", Got(r)));
  }
  if (const json* kind = Find(r, "kind")) {
    const Path kp = root.Key("kind");
    if (*kind == "torchscan_scan_report") {
      return Fail(kp,
                  "a C++ scan report (ScanReportJson) is not an AnalysisReport or a FlopReport; "
                  "its operator_flops field is a FlopReport");
    }
    if (*kind == "torchscan_job_report") {
      return Fail(kp,
                  "a job report (merge_reports, `python3 -m torchscan merge`) is not an AnalysisReport or a "
                  "FlopReport; torchscan.render_job_report reads it");
    }
  }
  if (const json* context = Find(r, "context"); context && context->is_object()) {
    if (const json* kind = Find(*context, "kind"); kind && *kind == "torchscan_roofline") {
      const Path cp = root.Key("context");
      return Fail(cp.Key("kind"),
                  "a RooflineReport (torchscan.roofline) is not an AnalysisReport or a FlopReport; "
                  "torchscan.render_roofline reads it");
    }
  }
  TS_CHECK_OK(SchemaVersion(r, root));
  const json* layers = Find(r, "layers");
  if (layers && layers->is_object() && layers->contains("added")) {
    return Fail(root, "this is a ReportDiff (the output of compare_reports), not a report");
  }
  if (r.contains("measurement")) {
    return Fail(root,
                "this looks like a BenchmarkReport; render and compare_reports read AnalysisReports and "
                "FlopReports");
  }
  if (layers || r.contains("totals") || r.contains("inputs")) {
    TS_CHECK_OK(AnalysisReport(r, root));
    return ReportKind::kAnalysis;
  }
  if (r.contains("total") || r.contains("by_operator")) {
    TS_CHECK_OK(FlopReport(r, root));
    return ReportKind::kFlop;
  }
  return Fail(root,
              "neither an AnalysisReport (it has no layers or totals) nor a FlopReport (no total or "
              "by_operator)");
}

absl::StatusOr<ReportKind> Validate(const json& report, const ReportSource& source) {
  const Path root;
  absl::Status st = Depth(report, root, 0);
  absl::StatusOr<ReportKind> kind = st.ok() ? Classify(report, root) : absl::StatusOr<ReportKind>(st);
  if (kind.ok()) return kind;
  return absl::InvalidArgumentError(absl::StrCat(Where(source), kind.status().message()));
}

}  // namespace

absl::StatusOr<ReportKind> ValidateForReading(const json& report, const ReportSource& source, json* /*storage*/,
                                              const json** readable) {
  *readable = &report;
  return Validate(report, source);
}

const char* ReportKindName(ReportKind kind) { return kind == ReportKind::kAnalysis ? "AnalysisReport" : "FlopReport"; }

absl::StatusOr<ReportKind> ValidateReport(const json& report, const ReportSource& source) {
  return Validate(report, source);
}
}  // namespace torchscan::reports
