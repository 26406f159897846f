// Text mutations of the seed reports that structural ones cannot make: a key
// repeated in one object, and integer literals around 2^64 and 2^128 in place
// of a number; every reader still behaves (testing::Exercise).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reports/validate.h"
#include "tests/cpp/reports/reader_testing.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using testing::Exercise;
using testing::GetSeeds;
using testing::Parse;
using testing::Rng;
using testing::Seeds;

// Where a float past 2^128 - 1 sits in a count field (not a position
// metric, not input/output metadata, where a scalar argument is any number).
std::string HugeOutsidePositions(const json& v, bool position, bool count = false) {
  if (v.is_number_float()) return !position && count && v.get<double>() >= 0x1p128 ? v.dump() : "";
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = HugeOutsidePositions(v[i], position);
      if (!at.empty()) return "[" + std::to_string(i) + "]" + at;
    }
  } else if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      const bool p = position || k == "receptive_field" || k == "effective_stride" || k == "effective_padding" ||
                     k == "inputs" || k == "output" ||
                     (x.is_object() && x.contains("unit") && x["unit"] == "positions");
      // Where counts are: MetricResults' numbers, per-operator FLOPs, parameter totals.
      const bool counted = count || k == "value" || k == "known_value" || k == "by_operator" || k == "by_module" ||
                           k == "parameters" || k == "totals" || k == "calls";
      const std::string at = HugeOutsidePositions(x, p, counted);
      if (!at.empty()) return "." + k + at;
    }
  }
  return "";
}

// Text mutations for what structural ones cannot make: a key repeated in one
// object (always refused, naming it), and integer literals around 2^64 and
// 2^128 in place of a number (read exactly up to 2^128 - 1; a larger one is
// never accepted as a count; every reader still behaves).
TEST(ReportReadersFuzz, RepeatedKeysAndWideLiterals) {
  static const char* kLiterals[] = {
      "18446744073709551615", "18446744073709551616", "340282366920938463463374607431768211455",
      "340282366920938463463374607431768211456", "1606938044258990275541962092341162602522202993782792835301376"};
  const Seeds& seeds = GetSeeds();
  int repeated = 0, literals = 0, valid = 0, failures = 0;
  std::string first_failure;
  auto fail = [&](int c, const std::string& what) {
    ++failures;
    if (first_failure.empty()) first_failure = "case " + std::to_string(c) + ": " + what;
  };
  for (int c = 0; c < 4000; ++c) {
    Rng rng{0x5EEDull ^ (static_cast<uint64_t>(c) * 0x100000001B3ull)};
    const size_t which = static_cast<size_t>(c) % seeds.texts.size();
    std::string text = seeds.texts[which];  // compact DumpJson: no spaces; seed strings hold no braces
    if (c % 2 == 0) {
      std::vector<size_t> opens;
      for (size_t i = 0; i + 1 < text.size(); ++i) {
        if (text[i] == '{' && text[i + 1] == '"') opens.push_back(i);
      }
      const size_t at = opens[rng.Below(opens.size())];
      const size_t end = text.find("\":", at + 2);
      const std::string key = text.substr(at + 1, end + 2 - (at + 1));  // "key":
      text.insert(at + 1, key + (rng.Below(2) ? "null," : "{},"));
      ++repeated;
      const auto r = LoadReport(text, {"r.json", "before"});
      if (r.ok() || std::string(r.status().message()).find("appears twice in one object") == std::string::npos) {
        fail(c, "repeated key " + key + " not refused: " + r.status().ToString());
      }
      continue;
    }
    std::vector<std::pair<size_t, size_t>> numbers;  // integer tokens: [start, end)
    for (size_t i = 1; i < text.size(); ++i) {
      if (!(text[i] >= '0' && text[i] <= '9') || (text[i - 1] != ':' && text[i - 1] != ',' && text[i - 1] != '[')) {
        continue;
      }
      size_t j = i;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      if (j < text.size() && (text[j] == '.' || text[j] == 'e' || text[j] == 'E')) continue;
      numbers.push_back({i, j});
    }
    const auto [start, end] = numbers[rng.Below(numbers.size())];
    text.replace(start, end - start, kLiterals[rng.Below(5)]);
    ++literals;
    const json m = Parse(text);
    if (m.is_discarded()) {
      fail(c, "a literal made the text unparseable");
      continue;
    }
    bool accepted = false;
    const std::string problem = Exercise(m, seeds.reports[which], /*thorough=*/true, &accepted);
    if (!problem.empty()) fail(c, problem);
    if (const std::string at = HugeOutsidePositions(m, false); accepted && !at.empty()) {
      fail(c, "a count past 2^128 - 1 was accepted: " + at);
    }
    valid += accepted;
  }
  EXPECT_EQ(failures, 0) << first_failure;
  EXPECT_EQ(repeated, 2000);
  // Some literals land where a wide count is valid, many where it is not.
  EXPECT_GT(valid, 100) << valid;
  EXPECT_LT(valid, literals - 100) << valid;
}

}  // namespace
}  // namespace torchscan::reports
