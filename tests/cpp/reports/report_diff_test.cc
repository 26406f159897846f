// compare_reports on reports it must refuse (naming the side) and on two
// FlopReports, whose deltas are derived by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "reports/diff.h"
#include "reports/flop_report.h"
#include "tests/cpp/reports/reader_testing.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using testing::GetSeeds;

// compare_reports with a missing path / known_value / call_index wrote
// `"known_value":,` (invalid JSON). Now: refused, naming the side.
TEST(ReportReaders, DiffRefusesMissingIdentityAndValuesNamingTheSide) {
  const json good = GetSeeds().analysis;
  json no_path = good, no_known = good, no_index = good;
  no_path["layers"][1].erase("path");
  no_known["layers"][2]["metrics"]["dmas"].erase("known_value");
  no_index["layers"][0].erase("call_index");
  auto message = [](const json& b, const json& a, ReportSource bs = {"", "before"}, ReportSource as = {"", "after"}) {
    const auto d = CompareReports(b, a, bs, as);
    return d.ok() ? "(compared)" : std::string(d.status().message());
  };
  EXPECT_EQ(message(no_path, good), "torchscan.compare_reports: before report: layers[1].path: missing");
  EXPECT_EQ(message(good, no_known),
            "torchscan.compare_reports: after report: layers[2].metrics.dmas.known_value: "
            "missing");
  EXPECT_EQ(message(good, no_index, {"a.json", "before"}, {"b.json", "after"}),
            "torchscan.compare_reports: after report (b.json): layers[0].call_index: missing");
}

TEST(ReportReaders, DiffRefusesReportsOfDifferentKinds) {
  const auto d = CompareReports(GetSeeds().flop, GetSeeds().analysis, {"f.json", "before"}, {"a.json", "after"});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            "torchscan.compare_reports: the before report (f.json) is a FlopReport and the after report (a.json) is an "
            "AnalysisReport; compare two reports of the same kind (an AnalysisReport's operator_flops field is its "
            "FlopReport)");
}

// Two FlopReports gave an empty diff for 64 vs 262,144 FLOPs.
TEST(ReportReaders, DiffOfTwoFlopReports) {
  // (2 x 4) @ (4 x 4): 2 * 2*4*4 = 64 FLOPs; (64 x 64) @ (64 x 32): 2 * 64*64*32 = 262,144.
  FlopTally small, large;
  small.by_operator = {{"aten.mm", 64}};
  small.known = 64;
  large.by_operator = {{"aten.mm", 262144}, {"aten.relu", 2048}};  // relu on the 64 x 32 output: one per value
  large.known = 262144 + 2048;
  const auto d = CompareReports(FlopReportJson(small), FlopReportJson(large));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)["totals"]["operator_flops"]["delta"], 262144 + 2048 - 64);
  EXPECT_EQ((*d)["by_operator"]["aten.mm"]["delta"], 262144 - 64);
  // Absent from a complete report: no counted work there, a known 0.
  EXPECT_EQ((*d)["by_operator"]["aten.relu"]["before"],
            json({{"status", "complete"}, {"value", 0}, {"known_value", 0}}));
  EXPECT_EQ((*d)["by_operator"]["aten.relu"]["delta"], 2048);
  EXPECT_FALSE(d->contains("layers"));

  // A partial side: statuses propagate, no numeric deltas.
  large.complete = false;
  const auto p = CompareReports(FlopReportJson(small), FlopReportJson(large));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)["totals"]["operator_flops"]["status"], "partial");
  EXPECT_TRUE((*p)["totals"]["operator_flops"]["delta"].is_null());
  EXPECT_EQ((*p)["by_operator"]["aten.mm"]["after"],
            json({{"status", "partial"}, {"value", nullptr}, {"known_value", 262144}}));
  EXPECT_TRUE((*p)["by_operator"]["aten.mm"]["delta"].is_null());

  // Identical reports: nothing listed.
  const auto same = CompareReports(FlopReportJson(small), FlopReportJson(small));
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE((*same)["by_operator"].empty());
  EXPECT_EQ((*same)["totals"]["operator_flops"]["delta"], 0);
}

}  // namespace
}  // namespace torchscan::reports
