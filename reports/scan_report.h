// The scan report (kind "torchscan_scan_report", schema v1): one document
// with every view of a scan. The session computes the parts from the calls
// it recorded; this writer lays them out and writes the text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/layers.h"

namespace torchscan::reports {

struct ScanReportParts {
  std::string scope;              // every MetricResult's "scope"
  std::array<bool, 4> metrics{};  // kLayerMetricNames order: which metrics the scan valued
  nlohmann::json context;         // the scan's context; kind, schema and TorchScan versions are added here
  nlohmann::json communication;
  nlohmann::json operator_flops;  // null: the operator view is off
  nlohmann::json memory;          // null: the scan did not attribute memory (left out)
  nlohmann::json module_report;   // null: the module view is off
  nlohmann::json threads = nlohmann::json::array();
  nlohmann::json requests = nlohmann::json::array();  // RequestJson entries
  nlohmann::json aggregate;                           // null: layer rows per call (left out)
  std::vector<LayerTally> layers;                     // the "layers" array (LayersJson's rows)
};

// One request's entry: its id, calls and the totals of the metrics valued.
nlohmann::json RequestJson(const std::string& id, int64_t calls, const LayerTally& row, const ScanReportParts& parts);

// The report as compact JSON text (DumpJson: bad UTF-8 in caller strings
// replaced, counts past 2^64 - 1 exact). The layers are written as text
// straight into the document: with a row per module call they are most of
// the report, and as a JSON tree most of its memory and time.
std::string ScanReportText(const ScanReportParts& parts);

}  // namespace torchscan::reports
