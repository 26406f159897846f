// Reading reports: the JSON parser with the readers' refusals (duplicate
// keys, depth, counts past 2^64 - 1 kept exact) and exact counts.
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "formulas/count.h"
#include "reports/metric.h"
#include "reports/report_text.h"
#include "reports/validate.h"

namespace torchscan::reports {

using json = nlohmann::json;
using internal::Identifier;
using internal::Quote;
using internal::Where;

bool IsCount(const json& v) { return ExactCount(v).has_value(); }

std::optional<unsigned __int128> ExactCount(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) return std::nullopt;
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d >= 0 && d < 0x1p53) || std::floor(d) != d) return std::nullopt;
    return static_cast<uint64_t>(d);
  }
  bool negative = false;
  unsigned __int128 magnitude = 0;
  if (IsWideCount(v, &negative, &magnitude) && !negative) return magnitude;
  return std::nullopt;
}

double NumberAsDouble(const json& v) {
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  if (v.is_number_float()) return v.get<double>();
  bool negative = false;
  unsigned __int128 magnitude = 0;
  if (IsWideCount(v, &negative, &magnitude)) return (negative ? -1.0 : 1.0) * static_cast<double>(magnitude);
  return 0;
}

json NumberDelta(const json& before, const json& after) {
  // Integers as sign and magnitude: counts reach 2^128 - 1, other integers
  // (effective padding) are signed 64-bit values.
  struct Signed {
    bool negative = false;
    unsigned __int128 magnitude = 0;
  };
  auto integer = [](const json& v) -> std::optional<Signed> {
    if (v.is_number_unsigned()) return Signed{false, v.get<uint64_t>()};
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      return Signed{
          i < 0, i < 0 ? static_cast<unsigned __int128>(-static_cast<__int128>(i)) : static_cast<unsigned __int128>(i)};
    }
    Signed s;
    if (IsWideCount(v, &s.negative, &s.magnitude)) return s;
    return std::nullopt;
  };
  const std::optional<Signed> b = integer(before), a = integer(after);
  if (a && b) {
    // after - before = after + (-before).
    const Signed nb{!b->negative, b->magnitude};
    if (a->negative == nb.negative) {
      const unsigned __int128 sum = a->magnitude + nb.magnitude;
      if (sum >= a->magnitude) return SignedCountJson(a->negative && sum != 0, sum);
      // Past 2^128 - 1 in magnitude: only a count against a negative integer gets here.
      return json(NumberAsDouble(after) - NumberAsDouble(before));
    }
    if (a->magnitude >= nb.magnitude)
      return SignedCountJson(a->negative && a->magnitude != nb.magnitude, a->magnitude - nb.magnitude);
    return SignedCountJson(nb.negative, nb.magnitude - a->magnitude);
  }
  if ((!before.is_number() && !b) || (!after.is_number() && !a)) return json();
  const double d = NumberAsDouble(after) - NumberAsDouble(before);
  return std::isfinite(d) ? json(d) : json();
}

namespace {

// nlohmann's DOM builder with the readers' three refusals (ParseReportJson).
// sax_parse takes the handler's static type, so these members hide the base's.
class ReportSax : public nlohmann::detail::json_sax_dom_parser<json> {
  using Base = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  explicit ReportSax(json& root) : Base(root, /*allow_exceptions=*/false) {}

  bool null() { return Value() && Base::null(); }
  bool boolean(bool v) { return Value() && Base::boolean(v); }
  bool number_integer(number_integer_t v) { return Value() && Base::number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return Value() && Base::number_unsigned(v); }
  bool string(string_t& v) { return Value() && Base::string(v); }
  bool binary(binary_t& v) { return Value() && Base::binary(v); }
  // Integers past 2^64 - 1 arrive here with their text.
  bool number_float(number_float_t v, const string_t& text) {
    if (!Value()) return false;
    if (std::optional<unsigned __int128> wide = WideInteger(text)) {
      json count = CountJson(Count::FromWide(*wide));
      return Base::binary(count.get_binary());
    }
    return Base::number_float(v, text);
  }
  bool start_object(std::size_t n) { return Open(false) && Base::start_object(n); }
  bool start_array(std::size_t n) { return Open(true) && Base::start_array(n); }
  bool end_object() {
    frames_.pop_back();
    return Base::end_object();
  }
  bool end_array() {
    frames_.pop_back();
    return Base::end_array();
  }
  bool key(string_t& k) {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      error_ = absl::StrCat(Where(/*inside_last=*/false), ": the key ", Quote(k),
                            " appears twice in one object; a report names each "
                            "field once (which one was meant is unknowable)");
      return false;
    }
    f.key = k;
    return Base::key(k);
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." without the tag;
    // cut: the message quotes the offending token, which can be the rest of a corrupted file.
    std::string what = e.what();
    if (const size_t close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    // The token nlohmann quotes can hold invalid UTF-8 (a mangled file): keep the message ASCII.
    for (char& c : what) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
    if (what.size() > 300) what = what.substr(0, 300) + "...";
    error_ = absl::StrCat("not valid JSON (", what, ")");
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool array = false;
    size_t next = 0;  // arrays: the index of the next element
    std::string key;  // objects: the key of the current member
    absl::flat_hash_set<std::string> keys;
  };

  // A value starts: it takes the next index of an enclosing array.
  bool Value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().next;
    return true;
  }
  bool Open(bool array) {
    Value();
    if (frames_.size() >= static_cast<size_t>(kMaxReportDepth)) {
      error_ = absl::StrCat(Where(/*inside_last=*/true), ": nested more than ", kMaxReportDepth,
                            " levels deep; no report is");
      return false;
    }
    frames_.push_back(Frame{array, 0, {}, {}});
    return true;
  }
  // The JSON path of the current place, as validation errors spell it:
  // inside_last false stops at the innermost object or array itself.
  std::string Where(bool inside_last) const {
    std::string out;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (i + 1 == frames_.size() && !inside_last) break;
      if (f.array) {
        if (f.next > 0) absl::StrAppend(&out, "[", f.next - 1, "]");
      } else if (!f.keys.empty()) {
        absl::StrAppend(&out, Identifier(f.key) ? (out.empty() ? "" : ".") + f.key : "[" + Quote(f.key) + "]");
      }
      if (out.size() > 240) return out.substr(0, 120) + "...";
    }
    return out.empty() ? "(top level)" : out;
  }
  // The value of a plain decimal integer literal from 2^64 to 2^128 - 1.
  static std::optional<unsigned __int128> WideInteger(const std::string& text) {
    if (text.empty() || text.size() > 39) return std::nullopt;
    unsigned __int128 v = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return std::nullopt;
      const unsigned digit = static_cast<unsigned>(c - '0');
      if (v > (~static_cast<unsigned __int128>(0) - digit) / 10) return std::nullopt;  // past 2^128 - 1
      v = v * 10 + digit;
    }
    return v;
  }

  std::vector<Frame> frames_;
  std::string error_;
};

}  // namespace

absl::StatusOr<json> ParseReportJson(std::string_view text, const ReportSource& source) {
  json report;
  ReportSax sax(report);
  if (!json::sax_parse(text.begin(), text.end(), &sax) || report.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(source), sax.error().empty() ? "not valid JSON" : sax.error()));
  }
  return report;
}

absl::StatusOr<json> LoadReport(std::string_view text, const ReportSource& source) {
  absl::StatusOr<json> parsed = ParseReportJson(text, source);
  if (!parsed.ok()) return parsed.status();
  json report = *std::move(parsed);
  absl::StatusOr<ReportKind> kind = ValidateReport(report, source);
  if (!kind.ok()) return kind.status();
  return report;
}

}  // namespace torchscan::reports
