#include "torchscan_dispatch/event_set.h"

namespace torchscan {

EventSet::EventSet(const Recorder& r)
    : scopes(r.scopes()), label_sets(r.label_sets()), events_(&r.events()) {
  for (const auto& q : r.requests()) requests.push_back(q.id);
}

void EventSet::Add(const Recorder& r, size_t count, int64_t thread, const ReportFilter& filter) {
  const auto& src = r.events();
  if (!filter.threads.empty() && !filter.threads.count(thread)) return;
  in_flight += static_cast<int64_t>(src.size() - count);
  auto request_kept = [&](int32_t q) {
    if (filter.requests.empty()) return true;
    return q >= 0 && filter.requests.count(r.requests()[q].id) > 0;
  };
  // New index of every kept call (-1: left out), and of every scope.
  std::vector<int32_t> call_at(count, -1);
  std::vector<int64_t> kept_before(count + 1, 0);
  const int32_t base = static_cast<int32_t>(owned_.size());
  int32_t next = base;
  for (size_t i = 0; i < count; ++i) {
    kept_before[i] = next;
    if (request_kept(src[i].request)) call_at[i] = next++;
  }
  kept_before[count] = next;
  const auto& src_scopes = r.scopes();
  std::vector<int32_t> scope_at(src_scopes.size(), -1);
  for (size_t s = 0; s < src_scopes.size(); ++s) {
    const Recorder::Scope& from = src_scopes[s];
    if (from.begin_event >= static_cast<int64_t>(count) && count < src.size()) continue;  // opened after the cut
    if (!request_kept(from.request)) continue;
    Recorder::Scope to = from;
    to.parent = from.parent >= 0 ? scope_at[from.parent] : -1;
    to.call_index = calls_per_path_[from.path]++;
    to.begin_event = kept_before[std::min<size_t>(from.begin_event, count)];
    to.end_event = from.end_event < 0 ? -1 : kept_before[std::min<size_t>(from.end_event, count)];
    scope_at[s] = static_cast<int32_t>(scopes.size());
    scopes.push_back(std::move(to));
  }
  for (size_t i = 0; i < count; ++i) {
    if (call_at[i] < 0) continue;
    const Event& from = src[i];
    Event& to = owned_.Emplace(from);
    to.parent = from.parent >= 0 ? call_at[from.parent] : -1;
    to.scope = from.scope >= 0 ? scope_at[from.scope] : -1;
    if (from.labels != 0) {
      const auto& labels = r.label_sets()[from.labels];
      auto [it, inserted] = label_index_.emplace(labels, static_cast<int32_t>(label_sets.size()));
      if (inserted) label_sets.push_back(labels);
      to.labels = it->second;
    }
    if (from.request >= 0) {
      const std::string& id = r.requests()[from.request].id;
      auto [it, inserted] = request_index_.emplace(id, static_cast<int32_t>(requests.size()));
      if (inserted) requests.push_back(id);
      to.request = it->second;
    }
  }
}

}  // namespace torchscan
