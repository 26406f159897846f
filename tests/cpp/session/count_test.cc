// Counts past int64_t and caller formulas that
// return nonsense: exact up to 2^128 - 1, refused beyond, never wrapped.
#include <gtest/gtest.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/relu.h>

#include <array>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formulas/count.h"
#include "formulas/matmul.h"
#include "formulas/convolution.h"
#include "reports/metric.h"
#include "tests/cpp/formulas/formula_testing.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using testing::CallBuilder;
using Wide = Count::Wide;

constexpr Wide kTwo64 = Wide{1} << 64;
// 2^128 - 1, the largest count, in decimal (Python: str(2**128 - 1)).
constexpr char kMaxDigits[] = "340282366920938463463374607431768211455";

TEST(Count, ProductsPastInt64AreExact) {
  // 2 * 2^21 * 2^21 * 2^21 = 2^64: one past UINT64_MAX, where int64_t wrapped to 0.
  const Count c = Count(2) * (int64_t{1} << 21) * (int64_t{1} << 21) * (int64_t{1} << 21);
  EXPECT_TRUE(c.exact());
  EXPECT_EQ(c.wide(), kTwo64);
  EXPECT_EQ(c.Digits(), "18446744073709551616");
  EXPECT_FALSE(c.ToUint64().has_value());
  EXPECT_EQ(Count(UINT64_MAX).ToUint64(), UINT64_MAX);
}

TEST(Count, OverflowAt2To128IsDetectedAndKeepsTheLastExactValue) {
  const Count max = Count::Max();
  EXPECT_EQ(max.Digits(), kMaxDigits);
  Count sum = max;
  sum += 1;  // 2^128: not representable
  EXPECT_FALSE(sum.exact());
  EXPECT_EQ(sum.state(), Count::State::kOverflow);
  EXPECT_EQ(sum.wide(), max.wide());  // the sum before: a lower bound, not 0
  sum += 5;                           // stays refused: no later wrap back into range
  EXPECT_FALSE(sum.exact());
  EXPECT_EQ(sum.wide(), max.wide());

  // 2^64 * 2^64 = 2^128: the product overflows too.
  const Count product = Count::FromWide(kTwo64) * Count::FromWide(kTwo64);
  EXPECT_EQ(product.state(), Count::State::kOverflow);
  // 2^127 * 2 overflows; 2^127 + (2^127 - 1) = 2^128 - 1 does not.
  const Wide half = Wide{1} << 127;
  EXPECT_FALSE((Count::FromWide(half) * 2).exact());
  EXPECT_EQ(Count::FromWide(half) + Count::FromWide(half - 1), max);
}

TEST(Count, NegativesAreNotCounts) {
  EXPECT_EQ(Count(int64_t{-100}).state(), Count::State::kNegative);
  EXPECT_EQ((Count(3) - 5).state(), Count::State::kNegative);
  EXPECT_EQ((Count(5) - 3), 2);
  EXPECT_EQ((Count(7) / 0).state(), Count::State::kOverflow);
  // An inexact operand makes the result inexact, whatever the operation.
  EXPECT_FALSE((Count(int64_t{-1}) * 0).exact());
}

TEST(Count, ParseCountReadsExactlyTheRepresentableDigits) {
  EXPECT_EQ(ParseCount("0"), Count(0));
  EXPECT_EQ(ParseCount("18446744073709551615"), Count(UINT64_MAX));
  EXPECT_EQ(ParseCount(kMaxDigits), Count::Max());
  // 2^128 = 340282366920938463463374607431768211456: one too many.
  EXPECT_FALSE(ParseCount("340282366920938463463374607431768211456").has_value());
  for (const char* bad : {"", "-1", "1.0", "1e3", " 1", "12a"}) EXPECT_FALSE(ParseCount(bad).has_value()) << bad;
}

TEST(Formulas, MatrixProductPastInt64IsExact) {
  // (2^21 x 2^21) @ (2^21 x 2^21): 2 * m * n * k = 2^64 (FlopCounterMode: 18446744073709551616).
  const int64_t n = int64_t{1} << 21;
  CallBuilder b("aten::mm");
  b.Tensor({n, n}).Tensor({n, n}).Out({n, n});
  const FormulaResult r = matmul::Mm(b.Call());
  ASSERT_EQ(r.status, MetricStatus::kComplete);
  EXPECT_TRUE(r.value.exact());
  EXPECT_EQ(r.value.wide(), kTwo64);
  // Batched: 2^10 products of that size = 2^74.
  CallBuilder bmm("aten::bmm");
  bmm.Tensor({1024, n, n}).Tensor({1024, n, n}).Out({1024, n, n});
  EXPECT_EQ(matmul::Bmm(bmm.Call()).value.wide(), Wide{1} << 74);
}

TEST(Formulas, ConvolutionPastInt64IsExact) {
  // x (N=2^20, C=2^10, L=2^22), w (2^10, 2^10, K=2^12), out (2^20, 2^10, 2^22):
  // 2 * N * L_out * prod(w) = 2 * 2^20 * 2^22 * (2^10 * 2^10 * 2^12) = 2^75.
  EXPECT_EQ(convolution::ConvFlops({int64_t{1} << 20, 1024, int64_t{1} << 22}, {1024, 1024, int64_t{1} << 12},
                                   {int64_t{1} << 20, 1024, int64_t{1} << 22}, false)
                .wide(),
            Wide{1} << 75);
}

TEST(ReportJson, CountsPast2To64AreWrittenAsExactDigits) {
  nlohmann::json j = {{"big", reports::CountJson(Count::FromWide(kTwo64))},
                      {"max", reports::CountJson(Count::Max())},
                      {"small", reports::CountJson(Count(42))},
                      {"list", {reports::CountJson(Count::FromWide(kTwo64 + 1)), "x"}}};
  EXPECT_EQ(reports::DumpJson(j),
            std::string("{\"big\":18446744073709551616,\"list\":[18446744073709551617,\"x\"],\"max\":") + kMaxDigits +
                ",\"small\":42}");
  // Indented layout is nlohmann's own (the attach report uses indent 1).
  nlohmann::json plain = {{"a", {1, 2}}, {"b", {{"c", nullptr}}}, {"e", nlohmann::json::array()}};
  nlohmann::json wide = plain;
  wide["d"] = reports::CountJson(Count::FromWide(kTwo64));
  nlohmann::json expected = plain;
  expected["d"] = 7;
  std::string want = expected.dump(1);
  want.replace(want.find("\"d\": 7"), 6, "\"d\": 18446744073709551616");
  EXPECT_EQ(reports::DumpJson(wide, 1), want);
  EXPECT_EQ(reports::DumpJson(plain, 1), plain.dump(1));
  // An inexact count is never written as a number.
  EXPECT_TRUE(reports::CountJson(Count::Max() + 1).is_null());
}

TEST(ReportJson, AMetricWhoseSumOverflowedIsPartialWithItsLastExactSum) {
  Count sum = Count::Max();
  sum += 1;
  const nlohmann::json m = reports::MetricJson({MetricStatus::kComplete, sum, "FLOPs", "workload", "test"});
  EXPECT_EQ(m["status"], "partial");
  EXPECT_TRUE(m["value"].is_null());
  EXPECT_EQ(reports::DumpJson(m["known_value"]), kMaxDigits);
}

// Reports through the engine: the text must hold the exact digits (nlohmann
// would read them back as floats, so these tests look at the text).
std::string ScanText(Session& s, const std::function<void()>& workload) {
  {
    ScanGuard guard(s);
    workload();
  }
  return s.FlopReportJson().value();
}

TEST(SessionCounts, MetaMatmulPast2To64IsExactInByOperatorAndTotal) {
  const int64_t n = int64_t{1} << 21;
  const at::Tensor a = at::empty({n, n}, at::TensorOptions().device(at::kMeta));
  Session s;
  const std::string text = ScanText(s, [&] { at::mm(a, a); });
  // 2 * 2^21 * 2^21 * 2^21 = 2^64 (FlopCounterMode: 18,446,744,073,709,551,616).
  EXPECT_NE(text.find("\"aten.mm\":18446744073709551616"), std::string::npos) << text;
  EXPECT_NE(text.find("\"status\":\"complete\",\"unit\":\"FLOPs\",\"value\":18446744073709551616"), std::string::npos)
      << text;
}

// Note [Runs of one call]: a loop's repeated call is added once per run,
// multiplied; the sums must be those of adding it call by call. Each mm of
// two 2^21 x 2^21 meta matrices is 2^64 FLOPs (2^63 MACs).
TEST(SessionCounts, RunsOfOneCallAddWhatTheirCallsAdd) {
  const int64_t n = int64_t{1} << 21;
  const at::Tensor a = at::empty({n, n}, at::TensorOptions().device(at::kMeta));
  const at::Tensor x = at::ones({3});
  Session s;
  const std::string text = ScanText(s, [&] {
    for (int i = 0; i < 3; ++i) at::mm(a, a);  // a run of 3, outside any module
    at::relu(x);                               // another call ends it
    {
      ModuleScope m(s, "m");
      for (int i = 0; i < 2; ++i) at::mm(a, a);  // a run of 2 in m
    }
    at::mm(a, a);  // a run of 1, outside again
  });
  // 6 * 2^64 = 110680464442257309696.
  EXPECT_NE(text.find("\"aten.mm\":110680464442257309696"), std::string::npos) << text;
  const std::vector<LayerRow> rows = s.LayerRows().value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].known[0], Count(2) * Count::FromWide(Wide{1} << 64)) << "operator_flops of m's 2 calls";
  EXPECT_EQ(rows[0].known[2], Count::FromWide(Wide{1} << 64)) << "macs: 2 * 2^63";
  const auto modules = nlohmann::json::parse(s.ModuleReportJson().value());
  EXPECT_EQ(modules["totals"]["macs"]["status"], "complete");
  EXPECT_NE(s.ModuleReportJson().value().find("55340232221128654848"), std::string::npos)  // 6 * 2^63 MACs
      << s.ModuleReportJson().value();
}

TEST(SessionCounts, RunsAddWhatTheirCallsAddInRandomStreams) {
  // Random streams of meta mm calls of three shapes (so runs of one call
  // form and break) in random module scopes, nested up to two deep, in full
  // scans and in streaming ones whose folds (every 1 to 7 calls) cut the
  // runs. Every sum is its calls' 2*m*k*n FLOPs (FlopCounterMode's mm
  // formula) or m*k*n MACs,
  // added here call by call: the total and each module call's row (its own
  // calls: those of a module call inside it are that call's).
  const std::array<std::array<int64_t, 3>, 3> shapes = {{{2, 3, 4}, {5, 6, 7}, {1, 8, 2}}};
  std::vector<std::pair<at::Tensor, at::Tensor>> operands;
  for (const auto& [m, k, n] : shapes) {
    const auto meta = at::TensorOptions().device(at::kMeta);
    operands.emplace_back(at::empty({m, k}, meta), at::empty({k, n}, meta));
  }
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    ScanOptions options;
    options.streaming = trial % 2 == 1;
    options.fold_every = 1 + trial % 7;
    Session s(options);
    int64_t total = 0, total_macs = 0;
    std::vector<int64_t> rows, row_macs;  // by module call, in the order they open
    std::vector<size_t> open;             // rows of the module calls running
    std::function<void(int)> calls = [&](int depth) {
      const int count = static_cast<int>(rng() % 9);
      for (int c = 0; c < count; ++c) {
        if (depth < 2 && rng() % 5 == 0) {
          rows.push_back(0);
          row_macs.push_back(0);
          open.push_back(rows.size() - 1);
          {
            ModuleScope scope(s, "m");
            calls(depth + 1);
          }
          open.pop_back();
          continue;
        }
        const size_t which = rng() % 4 == 0 ? rng() % 3 : 0;  // mostly the first shape: long runs
        at::mm(operands[which].first, operands[which].second);
        const auto& [m, k, n] = shapes[which];
        total += 2 * m * k * n;
        total_macs += m * k * n;  // one multiply-add per product term
        if (!open.empty()) {      // the innermost module call's own
          rows[open.back()] += 2 * m * k * n;
          row_macs[open.back()] += m * k * n;
        }
      }
    };
    const std::string text = ScanText(s, [&] { calls(0); });
    const auto report = nlohmann::json::parse(text);
    ASSERT_EQ(report["total"]["status"], "complete") << text;
    EXPECT_EQ(report["total"]["value"].get<int64_t>(), total) << "trial " << trial;
    const auto modules = nlohmann::json::parse(s.ModuleReportJson().value());
    EXPECT_EQ(modules["totals"]["macs"]["value"].get<int64_t>(), total_macs) << "trial " << trial;
    const std::vector<LayerRow> got = s.LayerRows().value();
    ASSERT_EQ(got.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(got[r].known[0], Count(rows[r])) << "trial " << trial << ", row " << r;
      EXPECT_EQ(got[r].known[2], Count(row_macs[r])) << "macs, trial " << trial << ", row " << r;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(SessionCounts, AddsWithinRangeSaysWhetherCallByCallSumsStayExact) {
  const Count max = Count::Max();
  EXPECT_TRUE(AddsWithinRange(Count(1), Count(2)));
  EXPECT_TRUE(AddsWithinRange(max - 1, Count(1)));
  EXPECT_FALSE(AddsWithinRange(max - 1, Count(2)));
  EXPECT_TRUE(AddsWithinRange(max + 1, Count(5))) << "an inexact sum keeps its value";
  EXPECT_FALSE((Count::FromWide(Wide{1} << 127) * Count(2)).exact()) << "a run's product past 2^128 - 1";
}

TEST(SessionCounts, CallerFormulaValuesPastInt64AreExactAndSumsPast2To128AreRefused) {
  const at::Tensor x = at::ones({3});
  {
    // Two relu calls of 2^127 each: 2^128 in total, one past the largest count.
    Session s;
    ASSERT_TRUE(s.SetOperatorFormula("aten::relu", [](const OpCall&) {
                   return FormulaResult::Complete(Count::FromWide(Wide{1} << 127));
                 }).ok());
    const std::string text = ScanText(s, [&] {
      at::relu(x);
      at::relu(x);
    });
    const auto r = nlohmann::json::parse(text);
    EXPECT_EQ(r["total"]["status"], "partial") << text;
    // known_value keeps the first call's 2^127 = 170141183460469231731687303715884105728.
    EXPECT_NE(text.find("\"known_value\":170141183460469231731687303715884105728"), std::string::npos) << text;
    EXPECT_TRUE(r["by_operator"]["aten.relu"].is_null()) << text;
    bool diagnosed = false;
    for (const auto& d : r["diagnostics"]) diagnosed |= d["code"] == "count_overflow" && d["operator"] == "aten.relu";
    EXPECT_TRUE(diagnosed) << text;
  }
  {
    // 2^64 - 1 (UINT64_MAX) from a caller formula: exact, not -1.
    Session s;
    ASSERT_TRUE(s.SetOperatorFormula("aten::relu", [](const OpCall&) {
                   return FormulaResult::Complete(Count(UINT64_MAX));
                 }).ok());
    const std::string text = ScanText(s, [&] { at::relu(x); });
    EXPECT_NE(text.find("\"aten.relu\":18446744073709551615"), std::string::npos) << text;
    EXPECT_EQ(nlohmann::json::parse(text)["total"]["status"], "complete") << text;
  }
}

TEST(SessionCounts, NegativeCallerFormulaIsRefusedNamingTheOperator) {
  const at::Tensor x = at::ones({3});
  Session s;
  ASSERT_TRUE(
      s.SetOperatorFormula("aten::relu", [](const OpCall&) { return FormulaResult::Complete(int64_t{-100}); }).ok());
  const auto r = nlohmann::json::parse(ScanText(s, [&] { at::relu(x); }));
  // Before: relu = -100 and the total "complete".
  EXPECT_EQ(r["total"]["status"], "partial") << r.dump(1);
  EXPECT_EQ(r["total"]["known_value"], 0) << r.dump(1);
  const nlohmann::json* diag = nullptr;
  for (const auto& d : r["diagnostics"]) {
    if (d["code"] == "invalid_caller_formula") diag = &d;
  }
  ASSERT_NE(diag, nullptr) << r.dump(1);
  EXPECT_EQ((*diag)["operator"], "aten.relu");
  EXPECT_NE((*diag)["message"].get<std::string>().find("negative"), std::string::npos) << r.dump(1);
}

}  // namespace
}  // namespace torchscan
