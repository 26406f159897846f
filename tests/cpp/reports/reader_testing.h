// What the report reader suites share (tests/cpp/reports/report_*_test.cc,
// reports_fuzz_test.cc): valid seed reports of each kind, a deterministic
// RNG, and the check that every reader behaves on one (malformed) report.
//
// What "behaves" means: no exception escapes a reader, every refusal is an
// InvalidArgument naming a field, a report the validator accepts is
// rendered and diffed without error, and every diff is valid JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace torchscan::reports::testing {

using json = nlohmann::json;

// Valid reports built with the reports/ builders, completed the way
// python_shim/torchscan/crawler.py completes an AnalysisReport.
json Analysis(bool complete);
// Counts past 2^63 and past 2^64, up to 2^128 - 1 (past 2^64 - 1 held as
// CountJson's binary values, as ParseReportJson reads them).
json Huge();

// Text as the readers parse it (ParseReportJson); discarded when refused.
json Parse(const std::string& text);

struct Seeds {
  std::vector<json> reports;
  std::vector<std::string> texts;
  // A valid report of each kind, and a small one of each for the other side
  // of a diff.
  json analysis, flop, small_analysis, small_flop;
};
const Seeds& GetSeeds();

// splitmix64: deterministic everywhere (std distributions are not).
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n ? static_cast<size_t>(Next() % n) : 0; }
};

// "" when every reader behaved; else what went wrong. *valid_out: whether
// the validator accepted `m`. `origin`: the seed `m` was made from (the
// before side of one diff, so that matched layers are compared too); the
// after side's partner is a small seed. `thorough` (one case in eight, to
// keep the run fast under ASan): also the loader on m's text, the diff's
// text read back, and a diff against the other kind.
std::string Exercise(const json& m, const json& origin, bool thorough, bool* valid_out);

}  // namespace torchscan::reports::testing
