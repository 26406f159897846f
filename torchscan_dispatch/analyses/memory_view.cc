#include "torchscan_dispatch/analyses/memory_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace torchscan {

namespace {

constexpr const char* kOutside = "(outside operators)";

// Devices whose allocator reports its blocks: the CPU allocator and the CUDA
// caching allocator. A meta tensor allocates nothing, so zero bytes there
// would be a wrong value, not a measurement.
bool Reports(c10::DeviceType d) { return d == c10::DeviceType::CPU || d == c10::DeviceType::CUDA; }

// The first device in the calls whose allocations are not reported.
std::optional<c10::DeviceType> UnreportedDevice(const BlockLog<Event>& events) {
  auto check = [](absl::Span<const ArgMeta> values) -> std::optional<c10::DeviceType> {
    for (const ArgMeta& a : values) {
      if (a.kind == ArgKind::kTensor && a.tensor().defined && !Reports(a.tensor().device)) return a.tensor().device;
      if (a.kind == ArgKind::kTensorList) {
        for (const TensorMeta& t : a.tensors()) {
          if (t.defined && !Reports(t.device)) return t.device;
        }
      }
    }
    return std::nullopt;
  };
  for (size_t i = 0; i < events.size(); ++i) {
    if (auto d = check(events[i].args())) return d;
    if (auto d = check(events[i].outputs())) return d;
  }
  return std::nullopt;
}

// Entries [begin, end) of the log as one call's window: the high-water mark
// of the blocks it allocated, and those still alive when it returned.
MemoryFigures Window(const MemoryLog& log, int64_t begin, int64_t end, MetricStatus status) {
  MemoryFigures f;
  f.status = status;
  if (status == MetricStatus::kUnavailable) return f;
  int64_t live = 0;
  for (int64_t i = begin; i < end; ++i) {
    const MemoryEntry& e = log.entries[i];
    if (e.bytes > 0) {
      live += e.bytes;
      f.peak = std::max(f.peak, live);
      if (e.match < 0 || e.match >= end) f.allocated += e.bytes;
    } else if (e.match >= begin) {
      live += e.bytes;  // a block allocated inside the window, freed inside it
    }
  }
  return f;
}

// True when call `inner` is `outer` or runs inside it (calls are pre-order:
// a parent's index is below its children's).
bool Inside(const BlockLog<Event>& events, int32_t inner, int32_t outer) {
  while (inner > outer) inner = events[inner].parent;
  return inner == outer;
}

reports::Diagnostic Diag(std::string code, std::string message) {
  return {std::move(code), "warning", "peak_memory", std::move(message), std::nullopt, std::nullopt, std::nullopt};
}

}  // namespace

MemoryResult ComputeMemory(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                           const MemoryLog& log, OpCatalog& catalog) {
  MemoryResult m;
  MetricStatus status = MetricStatus::kComplete;
  if (!log.unavailable.empty()) {
    status = MetricStatus::kUnavailable;
    m.diagnostics.push_back(Diag("memory_observer_unavailable", log.unavailable));
  } else if (log.shadowed) {
    status = MetricStatus::kUnavailable;
    m.diagnostics.push_back(
        Diag("memory_observer_shadowed",
             "torch.profiler (or another allocator observer) was started inside the scan and took the allocator "
             "reports while it ran: blocks allocated or freed then were not seen, so no memory figure is known"));
  } else if (log.unseen_frees > 0) {
    status = MetricStatus::kUnavailable;
    m.diagnostics.push_back(
        Diag("memory_free_unseen",
             absl::StrCat(log.unseen_frees,
                          " block(s) allocated during the scan were freed where the allocator reports "
                          "to no observer (another thread): when is unknown, so no memory figure is")));
  } else if (auto device = UnreportedDevice(events)) {
    status = MetricStatus::kUnavailable;
    m.diagnostics.push_back(
        Diag("memory_device_unsupported",
             absl::StrCat("tensors on ", c10::DeviceTypeName(*device, /*lower_case=*/true),
                          " have no allocator reports (a meta tensor allocates nothing): memory is measured on cpu "
                          "and cuda only")));
  } else if (log.other_threads > 0) {
    status = MetricStatus::kPartial;
    m.diagnostics.push_back(
        Diag("memory_other_threads", absl::StrCat(log.other_threads,
                                                  " allocator report(s) came from threads other than the scanned one "
                                                  "(workers that inherited its state); they are not in these figures, "
                                                  "which are lower bounds")));
  }
  const int64_t size = static_cast<int64_t>(log.entries.size());
  m.total = Window(log, 0, size, status);
  m.scopes.reserve(scopes.size());
  for (const Recorder::Scope& s : scopes) {
    const int64_t end = s.end_memory < 0 ? size : std::min(s.end_memory, size);
    m.scopes.push_back(Window(log, std::min(s.begin_memory, end), end, s.failed ? MetricStatus::kUnavailable : status));
  }
  if (status == MetricStatus::kUnavailable) return m;
  for (int64_t i = 0; i < size; ++i) {
    const MemoryEntry& e = log.entries[i];
    if (e.bytes <= 0) continue;
    ++m.blocks;
    m.total_allocated += e.bytes;
    int32_t top = e.event;
    while (top >= 0 && events[top].parent >= 0) top = events[top].parent;
    OperatorMemory& op = m.by_operator[top >= 0 ? catalog.Get(events[top].op()).packet : kOutside];
    ++op.blocks;
    const bool temporary = top >= 0 && e.match >= 0 && Inside(events, log.entries[e.match].event, top);
    (temporary ? op.temporary : op.allocated) += e.bytes;
  }
  return m;
}

nlohmann::json MemoryJson(const MemoryResult& m, const std::string& scope) {
  nlohmann::json by_operator = nlohmann::json::object();
  for (const auto& [name, op] : m.by_operator) {
    by_operator[name] = {{"blocks", op.blocks}, {"allocated_bytes", op.allocated}, {"temporary_bytes", op.temporary}};
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const MemoryFigures& f : m.scopes) {
    layers.push_back({{"peak_memory", reports::MemoryMetricJson(f.status, f.peak, scope)},
                      {"allocated_bytes", reports::MemoryMetricJson(f.status, f.allocated, scope)}});
  }
  nlohmann::json diagnostics = nlohmann::json::array();
  for (const auto& d : m.diagnostics) diagnostics.push_back(reports::DiagnosticJson(d));
  const MetricStatus status = m.total.status;
  return {{"kind", "torchscan_memory_report"},
          {"schema_version", reports::kSchemaVersion},
          {"meaning",
           {{"peak_memory", "the most bytes allocated during the scan that were alive at one time"},
            {"allocated_bytes", "bytes allocated during the scan and still alive when it stopped"},
            {"total_allocated_bytes", "every block allocated during the scan, freed or not"},
            {"by_operator",
             "blocks by the top-level operator running when they were allocated (the one the "
             "program called): allocated_bytes outlived that call, temporary_bytes were freed "
             "before it returned"}}},
          {"totals",
           {{"peak_memory", reports::MemoryMetricJson(status, m.total.peak, scope)},
            {"allocated_bytes", reports::MemoryMetricJson(status, m.total.allocated, scope)},
            {"total_allocated_bytes", reports::MemoryMetricJson(status, m.total_allocated, scope)}}},
          {"blocks", m.blocks},
          {"by_operator", by_operator},
          {"layers", layers},
          {"diagnostics", diagnostics}};
}

}  // namespace torchscan
