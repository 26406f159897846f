// The renderer on malformed reports: what once crashed it, and every refusal
// naming the field (or the kind of document) it cannot read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "reports/diff.h"
#include "reports/render.h"
#include "reports/validate.h"
#include "tests/cpp/reports/reader_testing.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using testing::GetSeeds;

std::string RenderError(const json& r) {
  const auto out = RenderReport(r);
  return out.ok() ? "(rendered)" : std::string(out.status().message());
}

// Once a crash: `metrics: {}` on a layer crashed `render` (rc 139, in MetricText).
TEST(ReportReaders, EmptyLayerMetricsIsAnErrorNotASegfault) {
  json r = GetSeeds().analysis;
  r["layers"][1]["metrics"] = json::object();
  const std::string message = RenderError(r);
  EXPECT_EQ(message.rfind("torchscan.render_report: layers[1].metrics.module_flops: missing", 0), 0) << message;
}

// Missing keys elsewhere gave nlohmann's "type must be number, but is ...".
TEST(ReportReaders, MissingKeysNameTheField) {
  json r = GetSeeds().analysis;
  r["totals"].erase("parameters");
  EXPECT_EQ(RenderError(r), "torchscan.render_report: totals.parameters: missing");

  r = GetSeeds().analysis;
  r["layers"][2]["metrics"]["macs"]["value"] = nullptr;  // complete, yet no value
  EXPECT_EQ(RenderError(r),
            "torchscan.render_report: layers[2].metrics.macs.value: expected a non-negative integer, got null");

  r = GetSeeds().flop;
  r["by_operator"]["aten.relu"] = "4";
  EXPECT_EQ(RenderError(r),
            "torchscan.render_report: by_operator[\"aten.relu\"]: expected a non-negative integer, "
            "got the string \"4\"");

  r = GetSeeds().analysis;
  r["layers"][0]["output"]["shape"][1] = -4;
  EXPECT_EQ(RenderError(r),
            "torchscan.render_report: layers[0].output.shape[1]: expected a non-negative integer "
            "below 2^64, got -4");
}

TEST(ReportReaders, OtherShapesAreNamed) {
  EXPECT_EQ(RenderError(json::array()),
            "torchscan.render_report: (top level): expected a report (a JSON object), "
            "got an array of 0");
  json v2 = GetSeeds().analysis;
  v2["schema_version"] = 2;
  EXPECT_EQ(RenderError(v2),
            "torchscan.render_report: schema_version: unknown version 2; this build reads "
            "schema_version 1 (migrate other versions explicitly)");
  const auto diff = CompareReports(GetSeeds().analysis, GetSeeds().analysis);
  ASSERT_TRUE(diff.ok());
  EXPECT_EQ(RenderError(*diff),
            "torchscan.render_report: (top level): this is a ReportDiff (the output of "
            "compare_reports), not a report");
  json deep = GetSeeds().analysis;
  json nest = 1;
  for (int i = 0; i < kMaxReportDepth + 5; ++i) nest = json::array({nest});
  deep["inputs"]["args"] = nest;
  EXPECT_NE(RenderError(deep).find("nested more than 200 levels deep"), std::string::npos) << RenderError(deep);
  json dup = GetSeeds().analysis;
  dup["layers"].push_back(dup["layers"][1]);
  EXPECT_EQ(RenderError(dup),
            "torchscan.render_report: layers[3]: the same layer call (path \"0\", call_index 0) "
            "as layers[1]; a path and call index identify one call");
  json roofline = {{"schema_version", 1},
                   {"context", {{"kind", "torchscan_roofline"}}},
                   {"layers", json::array()},
                   {"totals", json::object()}};
  EXPECT_EQ(RenderError(roofline),
            "torchscan.render_report: context.kind: a RooflineReport (torchscan.roofline) is "
            "not an AnalysisReport or a FlopReport; torchscan.render_roofline reads it");
  json job = {{"schema_version", 1}, {"kind", "torchscan_job_report"}, {"totals", json::object()}};
  EXPECT_NE(RenderError(job).find("kind: a job report (merge_reports"), std::string::npos) << RenderError(job);
  const auto parse = LoadReport("{\"schema_version\": 1,\n \"layers\": [", {"r.json", "before"});
  ASSERT_FALSE(parse.ok());
  EXPECT_EQ(
      parse.status().message().rfind("before report (r.json): not valid JSON (parse error at line 2, column 13", 0), 0)
      << parse.status();
}

}  // namespace
}  // namespace torchscan::reports
