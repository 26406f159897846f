// The report readers (render, diff, the loader) on malformed input: a
// seeded, deterministic fuzz run (kFuzzCases mutated and truncated reports,
// each fed to every reader: testing::Exercise), and every truncation of a
// report's text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "reports/render.h"
#include "reports/validate.h"
#include "tests/cpp/reports/reader_testing.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using testing::Analysis;
using testing::Exercise;
using testing::GetSeeds;
using testing::Huge;
using testing::Parse;
using testing::Rng;
using testing::Seeds;

// The CI case count (README: "Report readers"). Each case is one mutated or
// truncated report given to ValidateReport, RenderReport, CompareReports on
// both sides, and (every few cases) LoadReport.
constexpr int kFuzzCases = 100000;

// The seeds every case starts from are valid reports of their kind.
TEST(ReportReaders, BuilderOutputIsValid) {
  const Seeds& s = GetSeeds();
  for (size_t i = 0; i < s.reports.size(); ++i) {
    const auto kind = ValidateReport(s.reports[i]);
    ASSERT_TRUE(kind.ok()) << "seed " << i << ": " << kind.status();
    EXPECT_EQ(*kind, i < 2 || i == 5 ? ReportKind::kAnalysis : ReportKind::kFlop) << i;
    EXPECT_TRUE(RenderReport(s.reports[i]).ok()) << i;
    EXPECT_TRUE(LoadReport(s.texts[i]).ok()) << i;
  }
  for (const json& r : {Analysis(true), Analysis(false), Huge(), s.small_analysis}) {
    EXPECT_TRUE(ValidateReport(r).ok()) << ValidateReport(r).status();
  }
}

// ---------------------------------------------------------------- fuzzing

struct Slot {
  json* parent;            // null for the root
  const std::string* key;  // in parent, when it is an object
  size_t index;            // in parent, when it is an array
  json* node;
};

void Collect(json& v, json* parent, const std::string* key, size_t index, std::vector<Slot>& out) {
  out.push_back({parent, key, index, &v});
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) Collect(*it, &v, &it.key(), 0, out);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) Collect(v[i], &v, nullptr, i, out);
  }
}

json Palette(Rng& rng) {
  static const std::vector<json> values = {nullptr,
                                           true,
                                           false,
                                           "",
                                           "abc",
                                           "NaN",
                                           "Infinity",
                                           "-1",
                                           "complete",
                                           "partial",
                                           "unavailable",
                                           "tensor",
                                           0,
                                           1,
                                           -1,
                                           INT64_MIN,
                                           INT64_MAX,
                                           UINT64_MAX,
                                           0.5,
                                           -0.5,
                                           1e300,
                                           -1e300,
                                           3.7e19,
                                           2.0,
                                           json::array(),
                                           json::object(),
                                           json::array({1, 2}),
                                           json::object({{"status", "complete"}}),
                                           json::object({{"kind", "tensor"}}),
                                           json::object({{"kind", "tuple"}, {"items", 3}}),
                                           json::object({{"status", "complete"},
                                                         {"value", -3},
                                                         {"known_value", -3},
                                                         {"unit", "FLOPs"},
                                                         {"scope", "x"},
                                                         {"method", "y"}})};
  return values[rng.Below(values.size())];
}

// One structural mutation of `doc`.
void Mutate(json& doc, Rng& rng, bool allow_deep) {
  thread_local std::vector<Slot> slots;
  slots.clear();
  Collect(doc, nullptr, nullptr, 0, slots);
  Slot s = slots[rng.Below(slots.size())];
  switch (rng.Below(allow_deep ? 9 : 8)) {
    case 0:  // delete a key or element
    case 1:
      if (!s.parent) break;
      if (s.parent->is_object())
        s.parent->erase(std::string(*s.key));
      else
        s.parent->erase(s.index);
      return;
    case 2:  // a value of another type (or a wrong value of the right type)
    case 3:
      *s.node = Palette(rng);
      return;
    case 4:  // duplicate an array's elements
      for (size_t tries = 0; tries < 8 && !s.node->is_array(); ++tries) s = slots[rng.Below(slots.size())];
      if (s.node->is_array()) {
        const json copy = *s.node;
        for (const json& e : copy) s.node->push_back(e);
      }
      return;
    case 5:  // rename a key
      if (s.parent && s.parent->is_object()) {
        const std::string key = *s.key;  // the erase frees *s.key
        json v = std::move(*s.node);
        s.parent->erase(key);
        (*s.parent)[key + (rng.Below(2) ? "_" : "X")] = std::move(v);
      }
      return;
    case 6: {  // numbers: negative, huge, fractional, a string of themselves
      if (!s.node->is_number()) {
        *s.node = Palette(rng);
        return;
      }
      const double d = s.node->get<double>();
      switch (rng.Below(5)) {
        case 0:
          *s.node = -d - 1;
          break;
        case 1:
          *s.node = std::isfinite(d * 1e12) ? d * 1e12 : 1e308;
          break;
        case 2:
          *s.node = d + 0.25;
          break;
        case 3:
          *s.node = s.node->dump();
          break;
        default:
          *s.node = UINT64_MAX;
          break;
      }
      return;
    }
    case 7:  // copy one value over another (a layer over a metric, ...)
      *s.node = *slots[rng.Below(slots.size())].node;
      return;
    case 8: {  // deep nesting, around and past the validator's limit
      static const int kLevels[] = {1, 3, kMaxReportDepth - 8, kMaxReportDepth + 1, 1000};
      const int levels = kLevels[rng.Below(5)];
      json v = std::move(*s.node);
      for (int i = 0; i < levels; ++i) v = rng.Below(2) ? json::array({std::move(v)}) : json({{"x", std::move(v)}});
      *s.node = std::move(v);
      return;
    }
  }
}

// The longest prefix of text[0, cut) that ends between two values, closed:
// a truncated report that still parses.
std::string Repair(const std::string& text, size_t cut) {
  std::vector<char> open, open_at_end;
  bool in_string = false, escape = false;
  size_t end = std::string::npos;
  for (size_t i = 0; i < cut; ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
      end = i + 1, open_at_end = open;
    } else if (c == '}' || c == ']') {
      if (!open.empty()) open.pop_back();
      end = i + 1, open_at_end = open;
    } else if (c == ',') {
      end = i, open_at_end = open;
    }
  }
  if (end == std::string::npos) return "";
  std::string out = text.substr(0, end);
  for (auto it = open_at_end.rbegin(); it != open_at_end.rend(); ++it) out += *it == '{' ? '}' : ']';
  return out;
}

std::string ByteMutation(std::string text, Rng& rng) {
  static const char kBytes[] = "{}[]\",:-.0123456789eE \\\x01\x80\xff\xc3tfn";
  const size_t n = 1 + rng.Below(3);
  for (size_t i = 0; i < n && !text.empty(); ++i) {
    const size_t at = rng.Below(text.size());
    switch (rng.Below(3)) {
      case 0:
        text[at] = kBytes[rng.Below(sizeof(kBytes) - 1)];
        break;
      case 1:
        text.erase(at, 1 + rng.Below(4));
        break;
      default:
        text.insert(at, 1, kBytes[rng.Below(sizeof(kBytes) - 1)]);
        break;
    }
  }
  return text;
}

TEST(ReportReadersFuzz, EveryTruncationIsRefusedByTheLoader) {
  size_t cases = 0;
  // Every cut of two seeds (one of each kind) covers every position class:
  // inside keys, strings, numbers and literals, after each separator.
  for (const size_t seed : {0, 3}) {
    const std::string& text = GetSeeds().texts[seed];
    for (size_t cut = 0; cut < text.size(); ++cut, ++cases) {
      const auto r = LoadReport(std::string_view(text).substr(0, cut), {"t.json", "after"});
      ASSERT_FALSE(r.ok()) << cut;
      ASSERT_EQ(r.status().message().rfind("after report (t.json): not valid JSON (", 0), 0) << r.status();
    }
  }
  EXPECT_GT(cases, 5000u);
}

TEST(ReportReadersFuzz, MutatedAndTruncatedReports) {
  const Seeds& seeds = GetSeeds();
  int valid = 0, refused = 0, failures = 0;
  std::string first_failure;
  for (int c = 0; c < kFuzzCases; ++c) {
    const size_t which = static_cast<size_t>(c) % seeds.reports.size();
    Rng rng{0x7453C0FFEEull ^ (static_cast<uint64_t>(c) * 0x100000001B3ull)};
    json m;
    bool have = true;
    switch (c % 8) {
      case 0: {  // truncated at a random point, closed so it parses
        const std::string& text = seeds.texts[which];
        m = Parse(Repair(text, rng.Below(text.size() + 1)));
        have = !m.is_discarded();
        break;
      }
      case 1: {  // bytes changed, removed or inserted
        const std::string text = ByteMutation(seeds.texts[which], rng);
        m = Parse(text);
        if (m.is_discarded()) {  // Exercise checks the loader on what parses
          const auto loaded = LoadReport(text);
          const std::string msg(loaded.status().message());
          if (loaded.ok() || (msg.find("not valid JSON (") == std::string::npos &&
                              msg.find("appears twice in one object") == std::string::npos)) {
            ++failures;
            if (first_failure.empty()) first_failure = "case " + std::to_string(c) + ": " + loaded.status().ToString();
          }
        }
        have = !m.is_discarded();
        break;
      }
      default: {  // one to three structural mutations
        m = seeds.reports[which];
        const size_t n = 1 + rng.Below(3);
        for (size_t i = 0; i < n; ++i) Mutate(m, rng, /*allow_deep=*/i == 0);
      }
    }
    if (!have) {
      ++refused;
      continue;
    }
    bool accepted = false;
    const std::string problem = Exercise(m, seeds.reports[which], c % 8 == 0, &accepted);
    if (!problem.empty()) {
      ++failures;
      if (first_failure.empty()) {
        first_failure = "case " + std::to_string(c) + ": " + problem + "\n" + m.dump().substr(0, 2000);
      }
    }
    (accepted ? valid : refused)++;
  }
  EXPECT_EQ(failures, 0) << first_failure;
  // Both outcomes are exercised in quantity (a mutation that never breaks
  // anything, or always does, would make this test vacuous).
  EXPECT_GT(valid, kFuzzCases / 50) << valid;
  EXPECT_GT(refused, kFuzzCases / 2) << refused;
  std::printf("fuzz: %d cases, %d valid after mutation, %d refused\n", kFuzzCases, valid, refused);
}

}  // namespace
}  // namespace torchscan::reports
