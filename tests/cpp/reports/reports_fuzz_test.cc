// The report readers (render, diff, the loader) on malformed input: the
// known crashes first, then a seeded, deterministic fuzz run
// (kFuzzCases mutated and truncated reports, each fed to every reader).
//
// What "no crash" means here: no exception escapes a reader, every refusal
// is an InvalidArgument naming a field, a report the validator accepts is
// rendered and diffed without error, and every diff is valid JSON.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formulas/count.h"
#include "reports/diff.h"
#include "reports/flop_report.h"
#include "reports/layers.h"
#include "reports/module_report.h"
#include "reports/render.h"
#include "reports/validate.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;

// The CI case count (README: "Report readers"). Each case is one mutated or
// truncated report given to ValidateReport, RenderReport, CompareReports on
// both sides, and (every few cases) LoadReport.
constexpr int kFuzzCases = 100000;

// ---------------------------------------------------------------- seeds
// Valid reports built with the reports/ builders, completed the way
// python_shim/torchscan/crawler.py completes an AnalysisReport.

json Tensor(std::vector<int64_t> shape) {
  return {{"kind", "tensor"}, {"shape", shape}, {"dtype", "float32"}, {"device", "cpu"}, {"requires_grad", false}};
}

Diagnostic Uncounted(const std::string& metric) {
  return {"uncounted_operator", "warning",    metric, "aten.special_erfcx ran 1 time(s) with no formula",
          "aten.special_erfcx", std::nullopt, 1};
}

FlopTally Flops(bool complete) {
  FlopTally t;
  t.torch_version = "2.13.0";
  t.scope = "forward";
  t.complete = complete;
  t.by_operator = {{"aten.addmm", 32}, {"aten.relu", 4}};
  t.known = 36;
  t.by_module = {{"Global", {{"aten.addmm", 32}, {"aten.relu", 4}}}};
  t.ignored = {{"aten.t", {1, "view"}}};
  if (!complete) t.diagnostics.push_back(Uncounted("operator_flops"));
  return t;
}

json Analysis(bool complete) {
  std::vector<LayerTally> rows(3);
  rows[0].path = "";
  rows[1].path = "0";
  rows[1].depth = 1;
  rows[1].parent = 0;
  rows[1].known = {32, 32, 16, 28};
  rows[2].path = "0";  // the same module called again
  rows[2].call_index = 1;
  rows[2].depth = 1;
  rows[2].parent = 0;
  rows[2].known = {4, 4, 0, 8};
  rows[2].failed = !complete;
  if (!complete) rows[0].complete = {false, false, false, false};
  json layers = LayersJson(rows, "forward");
  const char* types[3] = {"Sequential", "Linear", "Linear"};
  for (size_t i = 0; i < layers.size(); ++i) {
    json& l = layers[i];
    l["name"] = l["path"] == "" ? types[i] : l["path"].get<std::string>();
    l["type"] = types[i];
    l["inputs"] = {{"kind", "tuple"}, {"items", {Tensor({1, 4})}}};
    l["output"] = i == 2 && !complete ? json{{"kind", "failed"}} : Tensor({1, 4});
    l["parameters"] = i == 1 ? 20 : 0;
    l["trainable_parameters"] = i == 1 ? 20 : 0;
    l["parameter_bytes"] = i == 1 ? 80 : 0;
    l["buffers"] = 0;
    l["buffer_bytes"] = 0;
    l["metrics"].erase("operator_flops");  // the crawler keeps the module view per layer
  }
  // Receptive field of the first call: a fractional stride and a negative
  // padding are valid positions (written here, not through LayerTally's
  // data-flow fields, which this test does not exercise).
  const double field[3] = {3, 0.5, -1};
  const char* field_names[3] = {"receptive_field", "effective_stride", "effective_padding"};
  for (int k = 0; k < 3; ++k) {
    json& m = layers[1]["metrics"][field_names[k]];
    m["status"] = "complete";
    m["method"] = "data_flow";
    m["value"] = m["known_value"] = k == 0 ? json(3) : json(field[k]);
  }
  if (!complete) {
    // Custom-handler ownership: the root owns its first child's macs.
    layers[1]["metric_owners"] = {{"macs", {{"path", ""}, {"call_index", 0}}}};
    layers[1]["metrics"].erase("macs");
    layers[0]["metric_ownership"] = {{"macs", "subtree"}};
    layers[0]["token_dependencies"] = {
        {"status", "unavailable"}, {"scope", "forward"}, {"method", "none"}, {"assumptions", json::array()}};
  }
  const json flops = FlopReportJson(Flops(complete));
  ModuleTally mt;
  mt.torch_version = "2.13.0";
  mt.scope = "forward";
  mt.complete = {complete, complete, complete};
  mt.known = {36, 16, 36};
  mt.by_operator = {{"aten.linear", {32, 16, 28}}, {"aten.relu", {4, 0, 8}}};
  const json module = ModuleReportJson(mt);
  json totals = {{"parameters", 20},      {"trainable_parameters", 20}, {"frozen_parameters", 0},
                 {"parameter_bytes", 80}, {"buffer_elements", 0},       {"buffer_bytes", 0}};
  for (const char* k : {"module_flops", "macs", "dmas"}) totals[k] = module["totals"][k];
  totals["operator_flops"] = flops["total"];
  json diagnostics = flops["diagnostics"];
  if (!complete) {
    diagnostics.push_back({{"code", "module_forward_error"},
                           {"severity", "error"},
                           {"metric", "module_flops"},
                           {"message", "0 raised inside its forward"},
                           {"path", "0"}});
  }
  const json context = {{"torchscan_version", "0.1.0"},
                        {"torch_version", "2.13.0"},
                        {"python_version", "3.11.7"},
                        {"model_type", "Sequential"},
                        {"execution_mode", "eval_no_grad"},
                        {"analysis_mode", "full"},
                        {"training_before", true},
                        {"devices", {"cpu"}},
                        {"dtypes", {"float32"}}};
  json args = {{"kind", "tuple"}, {"items", json::array({Tensor({1, 4}), 3, "text", nullptr})}};
  json kwargs = {{"kind", "mapping"}, {"items", {{"mask", {{"kind", "object"}, {"type", "Mask"}}}}}};
  json inputs = {{"source", "caller"}, {"args", args}, {"kwargs", kwargs}};
  json r = json::object();
  r["schema_version"] = 1;
  r["context"] = context;
  r["inputs"] = inputs;
  r["layers"] = layers;
  r["totals"] = totals;
  r["operator_flops"] = flops;
  r["diagnostics"] = diagnostics;
  return r;
}

// Counts past 2^63 and past 2^64, up to 2^128 - 1 (past 2^64 - 1 held as
// CountJson's binary values, as ParseReportJson reads them).
json Huge() {
  json r = Analysis(true);
  r["totals"]["module_flops"]["value"] = r["totals"]["module_flops"]["known_value"] = UINT64_MAX;
  r["layers"][1]["metrics"]["dmas"]["value"] = r["layers"][1]["metrics"]["dmas"]["known_value"] =
      CountJson(Count::FromWide(Count::Wide{1} << 65));
  r["operator_flops"]["by_operator"]["aten.addmm"] = CountJson(Count::Max());  // 2^128 - 1
  return r;
}

// Text as the readers parse it (ParseReportJson); discarded when refused.
json Parse(const std::string& text) {
  auto r = ParseReportJson(text);
  return r.ok() ? *std::move(r) : json(json::value_t::discarded);
}

struct Seeds {
  std::vector<json> reports;
  std::vector<std::string> texts;
  // A valid report of each kind, and a small one of each for the other side
  // of a diff.
  json analysis, flop, small_analysis, small_flop;
};

const Seeds& GetSeeds() {
  static const Seeds* seeds = [] {
    auto* s = new Seeds;
    json structure = FlopReportJson(Flops(true));
    structure["context"] = json::object();  // what crawl_module(mode="structure") writes
    structure["total"] = {{"status", "unavailable"}, {"value", nullptr},   {"known_value", nullptr},
                          {"unit", "FLOPs"},         {"scope", "forward"}, {"method", "not_requested"}};
    structure["by_operator"] = structure["by_module"] = structure["ignored_operators"] = json::object();
    // Fewer layers make every case cheaper (the run must stay fast under
    // ASan): the fuzzed analyses keep the two calls of "0" (#0 and #1) and
    // move the root's ownership fields onto the first of them.
    auto two_layers = [](json r) {
      json& layers = r["layers"];
      for (const char* k : {"metric_ownership", "token_dependencies"}) {
        if (layers[0].contains(k)) layers[1][k] = layers[0][k];
      }
      layers.erase(0);
      return r;
    };
    s->reports = {two_layers(Analysis(true)),
                  two_layers(Analysis(false)),
                  FlopReportJson(Flops(true)),
                  FlopReportJson(Flops(false)),
                  structure,
                  two_layers(Huge())};
    for (const json& r : s->reports) s->texts.push_back(DumpJson(r));
    s->analysis = Analysis(true);
    s->flop = s->reports[2];
    s->small_analysis = s->reports[0];
    s->small_analysis["layers"].erase(1);  // "0" #0 only
    s->small_flop = structure;
    return s;
  }();
  return *seeds;
}

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

// ---------------------------------------------------------------- regressions

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

TEST(ReportReaders, CountsTo2To128AreReadExactly) {
  // Through text, as every caller of the loader sees them.
  const auto huge = LoadReport(DumpJson(Huge()));
  ASSERT_TRUE(huge.ok()) << huge.status();
  const auto text = RenderReport(*huge);
  ASSERT_TRUE(text.ok()) << text.status();
  // 2^64 - 1 = 18,446,744,073,709,551,615 -> 18.45 x 10^18 ("E", exa).
  EXPECT_NE(text->find("Module view (TorchScan conventions): 18.45E FLOPs"), std::string::npos) << *text;
  json before = GetSeeds().analysis;
  const auto d = CompareReports(before, *huge);
  ASSERT_TRUE(d.ok()) << d.status();
  // 2^64 - 1 - 36, exact (the seed's module_flops total is 36).
  EXPECT_EQ((*d)["totals"]["module_flops"]["delta"].get<uint64_t>(), UINT64_MAX - 36);
  // 2^65 - 28 exactly (the seed's first call of "0" has 28 dmas):
  // 36893488147419103232 - 28 = 36893488147419103204.
  const std::string out = DumpJson(*d);
  EXPECT_NE(out.find("\"delta\":36893488147419103204,"), std::string::npos) << out;
  // And back: the reverse diff's delta is the negative of it.
  const auto back = CompareReports(*huge, before);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(DumpJson(*back).find("\"delta\":-36893488147419103204,"), std::string::npos) << DumpJson(*back);
}

// Two FlopReports of 2^64 and 2^64 + 2 FLOPs, all of them aten.mm. Through
// doubles both would be 2^64 (delta 0, aten.mm unchanged): the delta is exact.
TEST(ReportReaders, DiffPast2To64IsExact) {
  const std::string two64 = "18446744073709551616", two64_2 = "18446744073709551618";
  auto flop_text = [](const std::string& n) {
    return "{\"schema_version\": 1, \"context\": {}, \"total\": {\"status\": \"complete\", \"value\": " + n +
           ", \"known_value\": " + n +
           ", \"unit\": \"FLOPs\", \"scope\": \"forward\", \"method\": \"m\"}, "
           "\"by_module\": {}, \"by_operator\": {\"aten.mm\": " +
           n +
           "}, \"ignored_operators\": {}, "
           "\"diagnostics\": []}";
  };
  const auto b = LoadReport(flop_text(two64)), a = LoadReport(flop_text(two64_2));
  ASSERT_TRUE(b.ok() && a.ok()) << b.status() << a.status();
  const auto d = CompareReports(*b, *a);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)["totals"]["operator_flops"]["delta"], 2);
  ASSERT_TRUE((*d)["by_operator"].contains("aten.mm")) << DumpJson(*d);
  EXPECT_EQ((*d)["by_operator"]["aten.mm"]["delta"], 2);
  EXPECT_NE(DumpJson(*d).find("\"value\":18446744073709551618"), std::string::npos) << DumpJson(*d);
  // 2^128 - 1 is the largest count; 2^128 and 2^200 are refused wherever a count is read.
  EXPECT_TRUE(LoadReport(flop_text("340282366920938463463374607431768211455")).ok());
  for (const std::string n :
       {"340282366920938463463374607431768211456", "1606938044258990275541962092341162602522202993782792835301376"}) {
    const auto r = LoadReport(flop_text(n), {"big.json", ""});
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().message().rfind("big.json: total.value: a count past 2^128 - 1", 0), 0) << r.status();
  }
  // A count written as a float is exact only below 2^53.
  const auto f = LoadReport(flop_text("1e20"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("total.value: expected an integer count, got the float"), std::string::npos)
      << f.status();
  EXPECT_TRUE(LoadReport(flop_text("4096.0")).ok());
}

// JSON leaves a repeated key's meaning open: the loader refuses it, naming
// the object, wherever it is.
TEST(ReportReaders, DuplicateKeysAreRefused) {
  const std::string text = DumpJson(GetSeeds().flop);
  const size_t at = text.find("\"status\":");
  ASSERT_NE(at, std::string::npos);
  std::string dup = text;
  dup.insert(at, "\"status\":\"partial\",");
  const auto r = LoadReport(dup, {"d.json", "after"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "after report (d.json): total: the key \"status\" appears twice in one object; a "
            "report names each field once (which one was meant is unknowable)");
  const auto top = LoadReport("{\"schema_version\": 1, \"schema_version\": 1}");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.status().message().rfind("(top level): the key \"schema_version\" appears twice", 0), 0)
      << top.status();
  const auto in_array = LoadReport("{\"layers\": [{}, {\"a\": 1, \"b\": {\"x\": 1, \"x\": 2}}]}");
  ASSERT_FALSE(in_array.ok());
  EXPECT_EQ(in_array.status().message().rfind("layers[1].b: the key \"x\" appears twice", 0), 0) << in_array.status();
  // The same key in sibling objects is fine.
  EXPECT_TRUE(ParseReportJson("[{\"x\": 1}, {\"x\": 2}]").ok());
}

// 10^5 levels: refused by the parser at the limit, without recursion.
TEST(ReportReaders, DeepTextIsRefusedWhileParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto r = LoadReport(deep, {"deep.json", ""});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested more than 200 levels deep"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().rfind("deep.json: [0][0]", 0), 0) << r.status();
}

// In memory, builders hold counts past 2^64 - 1 as binary values (CountJson);
// the readers take them as a parser would see the text DumpJson writes.
TEST(ReportReaders, BuilderCountsPast2To64RenderAndDiff) {
  FlopTally wide, small;
  const Count big = Count::FromWide(Count::Wide{1} << 70);  // 2^70 = 1,180,591,620,717,411,303,424
  wide.by_operator = {{"aten.mm", big}};
  wide.known = big;
  small.by_operator = {{"aten.mm", 64}};
  small.known = 64;
  const json r = FlopReportJson(wide);
  EXPECT_TRUE(ValidateReport(r).ok()) << ValidateReport(r).status();
  const auto text = RenderReport(r);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->rfind("Operator FLOPs: 1.18Z (complete)\n", 0), 0) << *text;  // 1.18 x 10^21
  const auto d = CompareReports(FlopReportJson(small), r);
  ASSERT_TRUE(d.ok()) << d.status();
  // 2^70 - 64 = 1,180,591,620,717,411,303,360, exactly.
  EXPECT_NE(DumpJson((*d)["by_operator"]["aten.mm"]).find("\"delta\":1180591620717411303360,"), std::string::npos)
      << DumpJson(*d);
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

// ---------------------------------------------------------------- fuzzing

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

// "" when every reader behaved; else what went wrong. *valid_out: whether
// the validator accepted `m`. `origin`: the seed `m` was made from (the
// before side of one diff, so that matched layers are compared too); the
// after side's partner is a small seed. `thorough` (one case in eight, to
// keep the run fast under ASan): also the loader on m's text, the diff's
// text read back, and a diff against the other kind.
std::string Exercise(const json& m, const json& origin, bool thorough, bool* valid_out) {
  const Seeds& seeds = GetSeeds();
  try {
    // Render validates first: its verdict is the reference for the others.
    const bool analysis = m.is_object() && m.contains("layers");
    const auto text = RenderReport(m, analysis ? 1 : -1, true);
    const bool valid = *valid_out = text.ok();
    if (!valid) {
      const std::string msg(text.status().message());
      if (text.status().code() != absl::StatusCode::kInvalidArgument ||
          msg.rfind("torchscan.render_report: ", 0) != 0 || msg.find(": ", 25) == std::string::npos ||
          msg.find("json.exception") != std::string::npos) {
        return "unexpected refusal: " + text.status().ToString();
      }
    }
    if (thorough) {
      const auto kind = ValidateReport(m);
      if (kind.ok() != valid) return "render disagrees with the validator: " + kind.status().ToString();
      if (valid && (*kind == ReportKind::kAnalysis) != analysis) return "unexpected kind";
    }
    const bool flop = valid && !analysis;
    const json& small = flop ? seeds.small_flop : seeds.small_analysis;
    const json& before = origin.contains("layers") != flop ? origin : small;
    for (int side = 0; side < 2; ++side) {
      const auto d = side == 0 ? CompareReports(m, before) : CompareReports(small, m);
      if (d.ok() != valid) return "diff disagrees with the validator: " + d.status().ToString();
      if (d.ok()) {
        if (thorough) {
          const json back = Parse(DumpJson(*d));
          if (back.is_discarded() || back != *d) return "diff is not valid JSON";
        }
      } else if (std::string(d.status().message()).find(side == 0 ? "before report" : "after report") ==
                 std::string::npos) {
        return "diff refusal does not name the side: " + d.status().ToString();
      }
    }
    if (thorough) {
      if (valid && CompareReports(m, flop ? seeds.small_analysis : seeds.small_flop).ok()) {
        return "diff of two kinds accepted";
      }
      if (LoadReport(DumpJson(m)).ok() != valid) return "the loader disagrees with the validator";
    }
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "unknown exception";
  }
  return "";
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
