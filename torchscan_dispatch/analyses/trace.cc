#include "torchscan_dispatch/analyses/trace.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

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

nlohmann::json TraceJson(const CallSet& set, const std::vector<TraceThread>& threads, int64_t stopped_ns,
                         const TrafficResult& traffic, OpCatalog& catalog) {
  static const std::vector<int64_t> kNoTimes;
  const std::vector<int64_t>& times = set.times != nullptr ? *set.times : kNoTimes;
  const BlockLog<Event>& events = set.events();
  const std::vector<Recorder::Scope>& scopes = set.scopes;
  const size_t timed = std::min(events.size(), times.size() / 2);
  // Origin: the earliest clock reading, so the trace starts at 0; one origin
  // for every thread, so their tracks share the time axis.
  int64_t origin = std::numeric_limits<int64_t>::max(), last = 0;
  for (size_t i = 0; i < timed; ++i) {
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
  const int64_t first_thread = threads.empty() ? 1 : threads[0].number;
  auto tid = [first_thread](int64_t thread) { return thread > 0 ? thread : first_thread; };

  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"ph", "M"},
                 {"pid", 1},
                 {"tid", first_thread},
                 {"name", "process_name"},
                 {"args", {{"name", "torchscan scan"}}}});
  const size_t metadata = out.size();  // thread names go here once known to have slices
  std::set<int64_t> used;              // threads with a slice
  // Per request: its flow's slices, as (start, index in `out`).
  std::map<int32_t, std::vector<std::pair<int64_t, size_t>>> chains;
  auto request_args = [&](nlohmann::json& args, int32_t request) {
    if (request >= 0 && static_cast<size_t>(request) < set.requests.size()) args["request"] = set.requests[request];
  };
  for (const auto& s : scopes) {
    // A call still open when the scan stopped ends with the scan.
    const int64_t end = s.end_ns >= 0 ? s.end_ns : std::max(last, s.begin_ns);
    nlohmann::json args = {{"path", s.path}, {"call_index", s.call_index}, {"failed", s.failed}};
    request_args(args, s.request);
    used.insert(tid(s.thread));
    if (s.request >= 0) chains[s.request].emplace_back(s.begin_ns, out.size());
    out.push_back({{"ph", "X"},
                   {"pid", 1},
                   {"tid", tid(s.thread)},
                   {"cat", "module"},
                   {"name", s.path.empty() ? std::string("(root)") : s.path},
                   {"ts", Micros(s.begin_ns, origin)},
                   {"dur", Micros(end, s.begin_ns)},
                   {"args", args}});
  }
  size_t next_start = 0;  // in set.thread_starts
  int64_t thread = first_thread;
  for (size_t i = 0; i < timed; ++i) {
    while (next_start < set.thread_starts.size() && set.thread_starts[next_start].first <= i) {
      thread = set.thread_starts[next_start++].second;
    }
    const Event& e = events[i];
    const int64_t end = times[2 * i + 1] >= 0 ? times[2 * i + 1] : last;
    nlohmann::json args = {{"inputs", Shapes(e.args())}, {"outputs", Shapes(e.outputs())}};
    if (const KernelTraffic* k = kernel[i]) {
      args["flops"] = k->flops_status == MetricStatus::kComplete ? reports::CountJson(k->flops) : nlohmann::json();
      args["bytes_read"] = k->read.recorded_bytes;
      args["bytes_written"] = k->written.recorded_bytes;
      args["kernel"] = KernelClassName(k->kind);
    }
    if (e.raised()) args["raised"] = true;
    if (e.unfinished()) args["unfinished"] = true;
    request_args(args, e.request);
    used.insert(tid(thread));
    // Calls outside any module call are a request's slices too (a server's
    // input preparation); calls inside one are reached through it.
    if (e.request >= 0 && e.parent < 0 && e.scope < 0) chains[e.request].emplace_back(times[2 * i], out.size());
    out.push_back({{"ph", "X"},
                   {"pid", 1},
                   {"tid", tid(thread)},
                   {"cat", "operator"},
                   {"name", catalog.Get(e.op()).packet},
                   {"ts", Micros(times[2 * i], origin)},
                   {"dur", Micros(end, times[2 * i])},
                   {"args", args}});
  }
  // Requests as flows: one per request (id: its index + 1), through its
  // module slices and the top-level calls it made outside them, in the order
  // they started, across threads when a request id is opened on several.
  // Flows, not a track per request: the per-thread nesting stays as it is,
  // and Perfetto's importer keys a legacy async slice's track by its name
  // and id, so 1,500 requests would be 1,500 tracks. Flow v2 (bind_id,
  // flow_in, flow_out on the slice itself): Perfetto binds the flow to
  // exactly that slice; a v1 "s"/"f" event binds to whichever slice is open
  // on the track when it is read, which is ambiguous where a module call and
  // its first operator start at one timestamp.
  for (auto& [request, chain] : chains) {
    if (chain.size() < 2) continue;  // a flow needs two slices
    std::sort(chain.begin(), chain.end());
    for (size_t k = 0; k < chain.size(); ++k) {
      nlohmann::json& slice = out[chain[k].second];
      slice["bind_id"] = request + 1;
      if (k > 0) slice["flow_in"] = true;
      if (k + 1 < chain.size()) slice["flow_out"] = true;
    }
  }
  if (used.empty()) used.insert(first_thread);  // an empty scan still names its thread
  nlohmann::json names = nlohmann::json::array();
  for (int64_t number : used) {
    std::string name = absl::StrCat("thread ", number);
    for (const TraceThread& t : threads) {
      if (t.number == number) name = t.name;
    }
    names.push_back({{"ph", "M"}, {"pid", 1}, {"tid", number}, {"name", "thread_name"}, {"args", {{"name", name}}}});
  }
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(metadata), names.begin(), names.end());
  return {{"traceEvents", out},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"producer", "torchscan"},
            {"meaning",
             "module and operator calls of one scan, one track per thread; operator slices "
             "of the kernels the operator view counts carry their FLOPs (null when not "
             "known) and the bytes their operands and results hold; each request is a "
             "flow (bind_id: its index + 1) through its module slices and the top-level "
             "calls it made outside them"}}}};
}

}  // namespace torchscan
