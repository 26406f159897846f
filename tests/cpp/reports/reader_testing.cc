#include "tests/cpp/reports/reader_testing.h"

#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "formulas/count.h"
#include "reports/diff.h"
#include "reports/flop_report.h"
#include "reports/layers.h"
#include "reports/module_report.h"
#include "reports/render.h"
#include "reports/validate.h"

namespace torchscan::reports::testing {

// Valid reports built with the reports/ builders, completed the way
// python_shim/torchscan/crawler.py completes an AnalysisReport.

namespace {

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

}  // namespace

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

}  // namespace torchscan::reports::testing
