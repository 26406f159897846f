#include "reports/metric.h"

#include <cstdint>
#include <string>
#include <utility>

namespace torchscan {

namespace reports {

namespace {

using json = nlohmann::json;

// The binary subtype that marks a wide count: 16 bytes, least significant
// first. Reports hold no other binary values (and user text cannot make one).
constexpr uint64_t kWideCount = 0x7453;  // "tS"
constexpr uint64_t kNegativeWideCount = 0x7454;

bool IsWide(const json& j) { return IsWideCount(j); }

json WideBinary(Count::Wide v, uint64_t subtype) {
  json::binary_t::container_type bytes(16);
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(v >> (8 * i));
  return json::binary(std::move(bytes), subtype);
}

bool HasWide(const json& j) {
  if (j.is_structured()) {
    for (const json& v : j) {
      if (HasWide(v)) return true;
    }
    return false;
  }
  return IsWide(j);
}

std::string Scalar(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// nlohmann's layout (compact, or `indent` spaces per level), written by hand
// only so that wide integers can be emitted as digits.
void Write(const json& j, int indent, int depth, std::string& out) {
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(level * indent), ' ');
  };
  if (j.is_object() || j.is_array()) {
    const bool object = j.is_object();
    if (j.empty()) {
      out += object ? "{}" : "[]";
      return;
    }
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      if (object) {
        out += Scalar(json(it.key()));
        out += indent < 0 ? ":" : ": ";
      }
      Write(*it, indent, depth + 1, out);
    }
    newline(depth);
    out += object ? '}' : ']';
    return;
  }
  bool negative = false;
  Count::Wide v = 0;
  if (IsWideCount(j, &negative, &v)) {
    if (negative && v != 0) out += '-';
    out += Count::FromWide(v).Digits();
    return;
  }
  out += Scalar(j);
}

}  // namespace

bool IsWideCount(const json& j, bool* negative, Count::Wide* magnitude) {
  if (!j.is_binary() || !j.get_binary().has_subtype() || j.get_binary().size() != 16) return false;
  const uint64_t subtype = j.get_binary().subtype();
  if (subtype != kWideCount && subtype != kNegativeWideCount) return false;
  if (negative) *negative = subtype == kNegativeWideCount;
  if (magnitude) {
    Count::Wide v = 0;
    for (int i = 15; i >= 0; --i) v = (v << 8) | j.get_binary()[static_cast<size_t>(i)];
    *magnitude = v;
  }
  return true;
}

json CountJson(const Count& c) {
  if (!c.exact()) return json();
  if (auto v = c.ToUint64()) return *v;
  return WideBinary(c.wide(), kWideCount);
}

json SignedCountJson(bool negative, Count::Wide magnitude) {
  if (!negative) return CountJson(Count::FromWide(magnitude));
  if (magnitude <= static_cast<Count::Wide>(INT64_MAX) + 1) {
    return json(static_cast<int64_t>(-static_cast<__int128>(magnitude)));
  }
  return WideBinary(magnitude, kNegativeWideCount);
}

std::string DumpJson(const json& j, int indent) {
  if (!HasWide(j)) return j.dump(indent, ' ', false, json::error_handler_t::replace);
  std::string out;
  Write(j, indent, 0, out);
  return out;
}

nlohmann::json MetricJson(const Metric& m) {
  nlohmann::json j;
  // A sum past 2^128 - 1 is refused as a value: its last exact sum is a lower bound.
  const MetricStatus status =
      m.status == MetricStatus::kComplete && !m.known.exact() ? MetricStatus::kPartial : m.status;
  const Count known = Count::FromWide(m.known.wide());
  j["status"] = MetricStatusName(status);
  j["value"] = status == MetricStatus::kComplete ? CountJson(known) : nlohmann::json();
  j["known_value"] = status == MetricStatus::kUnavailable ? nlohmann::json() : CountJson(known);
  j["unit"] = m.unit;
  j["scope"] = m.scope;
  j["method"] = m.method;
  return j;
}

nlohmann::json DiagnosticJson(const Diagnostic& d) {
  nlohmann::json j = {{"code", d.code}, {"severity", d.severity}, {"metric", d.metric}, {"message", d.message}};
  if (d.op) j["operator"] = *d.op;
  if (d.path) j["path"] = *d.path;
  if (d.calls) j["calls"] = *d.calls;
  return j;
}

}  // namespace reports
}  // namespace torchscan
