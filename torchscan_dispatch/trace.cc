#include "torchscan_dispatch/trace.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "reports/metric.h"

namespace torchscan {

namespace {

nlohmann::json Shapes(absl::Span<const ArgMeta> values) {
  nlohmann::json out = nlohmann::json::array();
  for (const ArgMeta& a : values) {
    if (a.kind != ArgKind::kTensor || !a.tensor().defined || a.tensor().nested) continue;
    const auto s = a.tensor().sizes();
    out.push_back(std::vector<int64_t>(s.begin(), s.end()));
  }
  return out;
}

// Trace-event times are microseconds.
double Micros(int64_t ns, int64_t origin) { return static_cast<double>(ns - origin) / 1000.0; }

}  // namespace

nlohmann::json TraceJson(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                         const std::vector<int64_t>& times, int64_t stopped_ns, const TrafficResult& traffic,
                         OpCatalog& catalog) {
  // Origin: the earliest clock reading, so the trace starts at 0.
  int64_t origin = std::numeric_limits<int64_t>::max(), last = 0;
  for (size_t i = 0; i < events.size() && 2 * i < times.size(); ++i) {
    origin = std::min(origin, times[2 * i]);
    last = std::max({last, times[2 * i], times[2 * i + 1]});
  }
  for (const auto& s : scopes) {
    if (s.begin_ns > 0) origin = std::min(origin, s.begin_ns);
    last = std::max(last, s.end_ns);
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  last = std::max(last, stopped_ns);
  std::vector<const KernelTraffic*> kernel(events.size(), nullptr);
  for (const KernelTraffic& k : traffic.kernels) {
    if (k.event >= 0 && static_cast<size_t>(k.event) < kernel.size()) kernel[k.event] = &k;
  }
  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"ph", "M"}, {"pid", 1}, {"tid", 1}, {"name", "process_name"}, {"args", {{"name", "torchscan scan"}}}});
  out.push_back({{"ph", "M"}, {"pid", 1}, {"tid", 1}, {"name", "thread_name"}, {"args", {{"name", "scanned thread"}}}});
  for (const auto& s : scopes) {
    // A call still open when the scan stopped ends with the scan.
    const int64_t end = s.end_ns >= 0 ? s.end_ns : std::max(last, s.begin_ns);
    out.push_back({{"ph", "X"}, {"pid", 1}, {"tid", 1}, {"cat", "module"},
                   {"name", s.path.empty() ? std::string("(root)") : s.path},
                   {"ts", Micros(s.begin_ns, origin)}, {"dur", Micros(end, s.begin_ns)},
                   {"args", {{"path", s.path}, {"call_index", s.call_index}, {"failed", s.failed}}}});
  }
  for (size_t i = 0; i < events.size() && 2 * i + 1 < times.size(); ++i) {
    const Event& e = events[i];
    const int64_t end = times[2 * i + 1] >= 0 ? times[2 * i + 1] : last;
    nlohmann::json args = {{"inputs", Shapes(e.args)}, {"outputs", Shapes(e.outputs)}};
    if (const KernelTraffic* k = kernel[i]) {
      args["flops"] = k->flops_status == MetricStatus::kComplete ? reports::CountJson(k->flops) : nlohmann::json();
      args["bytes_read"] = k->read.recorded_bytes;
      args["bytes_written"] = k->written.recorded_bytes;
      args["kernel"] = KernelClassName(k->kind);
    }
    if (e.raised) args["raised"] = true;
    out.push_back({{"ph", "X"}, {"pid", 1}, {"tid", 1}, {"cat", "operator"}, {"name", catalog.Get(e.op).packet},
                   {"ts", Micros(times[2 * i], origin)}, {"dur", Micros(end, times[2 * i])}, {"args", args}});
  }
  return {{"traceEvents", out},
          {"displayTimeUnit", "ns"},
          {"otherData", {{"producer", "torchscan"},
                         {"meaning", "module and operator calls of one scan; operator slices of the kernels the "
                                     "operator view counts carry their FLOPs (null when not known) and the bytes "
                                     "their operands and results hold"}}}};
}

}  // namespace torchscan
