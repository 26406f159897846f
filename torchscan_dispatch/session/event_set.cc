#include "torchscan_dispatch/session/event_set.h"

#include <algorithm>

namespace torchscan {

namespace {

// A scope's bounds among the calls a recorder still holds (its own count the
// scan's calls); a scope closed before them starts and ends at 0.
void HeldBounds(Recorder::Scope& s, int64_t folded) {
  s.begin_event = std::max<int64_t>(s.begin_event - folded, 0);
  if (s.end_event >= 0) s.end_event = std::max<int64_t>(s.end_event - folded, 0);
}

}  // namespace

EventSet::EventSet(const Recorder& r) {
  scopes = r.scopes();
  label_sets = r.label_sets();
  memory = &r.memory();
  times = &r.call_times();
  events_ = &r.events();
  for (const auto& q : r.requests()) {
    requests.push_back(q.id);
    request_seqs.push_back(q.seq);
  }
  first_index = r.folded();
  if (r.folder) {
    folded_ = &FolderOf(r).folded();
    flows.push_back({0, r.events().size(), 1, FolderOf(r).fields()});
    for (auto& s : scopes) HeldBounds(s, r.folded());
  }
}

Folded* EventSet::Folds() {
  if (!owned_folded_) {
    owned_folded_ = std::make_unique<Folded>();
    folded_ = owned_folded_.get();
  }
  return owned_folded_.get();
}

void EventSet::Add(const Recorder& r, size_t count, int64_t thread, const ReportFilter& filter) {
  const auto& src = r.events();
  if (!filter.threads.empty() && !filter.threads.count(thread)) return;
  const int64_t held_from = r.folded();  // the scan's index of src[0]
  count = std::min(count, src.size());   // a cut is taken with folds paused (Session::ScanReportJson)
  in_flight += static_cast<int64_t>(src.size() - count);
  // Which of the recorder's requests pass, decided once per request. A
  // request that is still running, or whose calls end past the cut, is left
  // out until a later cut holds all of them: listed now it would read as a
  // finished request that did little or nothing. Its calls inside the cut
  // stay in the totals, with no request.
  const auto& src_requests = r.requests();
  std::vector<bool> settled(src_requests.size());
  for (size_t q = 0; q < settled.size(); ++q) {
    const Recorder::Request& req = src_requests[q];
    settled[q] = !req.open && req.end_event - held_from <= static_cast<int64_t>(count);
  }
  std::vector<bool> kept_request(src_requests.size(), filter.requests.empty());
  if (!filter.requests.empty()) {
    for (size_t q = 0; q < kept_request.size(); ++q) {
      kept_request[q] = settled[q] && filter.requests.count(src_requests[q].id) > 0;
    }
  }
  auto request_kept = [&](int32_t q) { return q >= 0 ? kept_request[q] : filter.requests.empty(); };
  // The request's index in this set, or -1 (not settled).
  auto request_at = [&](int32_t q) {
    return q >= 0 && settled[q] ? RequestIndex(src_requests[q].id, src_requests[q].seq) : -1;
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
    if (from.begin_event - held_from >= static_cast<int64_t>(count) && count < src.size())
      continue;  // opened after the cut
    if (!request_kept(from.request)) continue;
    Recorder::Scope to = from;
    HeldBounds(to, held_from);
    to.thread = thread;
    to.request = request_at(from.request);
    to.parent = from.parent >= 0 ? scope_at[from.parent] : -1;
    to.call_index = keep_call_index ? from.call_index : calls_per_path_[from.path]++;
    to.unsettled = from.request >= 0 && !settled[from.request];
    to.begin_event = kept_before[std::min<size_t>(to.begin_event, count)];
    to.end_event = to.end_event < 0 ? -1 : kept_before[std::min<size_t>(to.end_event, count)];
    scope_at[s] = static_cast<int32_t>(scopes.size());
    scopes.push_back(std::move(to));
  }
  std::vector<int32_t> label_set_at;  // r's label sets in label_sets (-1: not yet)
  thread_starts.emplace_back(static_cast<size_t>(base), thread);
  const std::vector<int64_t>& src_times = r.call_times();
  all_timed_ = all_timed_ && r.timestamps && src_times.size() >= 2 * count;
  for (size_t i = 0; i < count; ++i) {
    if (call_at[i] < 0) continue;
    const Event& from = src[i];
    if (all_timed_) owned_times_.insert(owned_times_.end(), {src_times[2 * i], src_times[2 * i + 1]});
    Event& to = owned_.Emplace(from);
    to.parent = from.parent >= 0 ? call_at[from.parent] : -1;
    to.scope = from.scope >= 0 ? scope_at[from.scope] : -1;
    to.labels = label_sets.Import(r.label_sets(), from.labels, label_set_at);
    to.request = request_at(from.request);
  }
  if (r.folder) {
    // Folded calls cannot be told apart by request: streaming reports refuse request filters (session.cc).
    std::vector<int32_t> folded_at(src_requests.size(), -1);
    for (size_t q = 0; q < folded_at.size(); ++q) folded_at[q] = request_at(static_cast<int32_t>(q));
    Folds()->Add(FolderOf(r).folded(), scope_at, folded_at);
    flows.push_back({static_cast<size_t>(base), static_cast<size_t>(next), thread, FolderOf(r).fields()});
  }
  times = all_timed_ ? &owned_times_ : nullptr;
}

int32_t EventSet::RequestIndex(const std::string& id, int64_t seq) {
  auto [it, inserted] = request_index_.emplace(id, static_cast<int32_t>(requests.size()));
  if (inserted) {
    requests.push_back(id);
    request_seqs.push_back(seq);
  }
  return it->second;
}

std::unique_ptr<EventSet> EventSet::ByRequest() const {
  auto out = std::make_unique<EventSet>();
  out->label_sets = label_sets;
  out->requests = requests;
  out->request_seqs = request_seqs;
  if (folded_ != nullptr) {
    // Rows by request: the folded requests' rows become the scopes' rows.
    Folded* f = out->Folds();
    f->scopes = folded_->requests;
    f->calls = folded_->calls;
  }
  for (const std::string& id : requests) {
    Recorder::Scope scope;
    scope.path = id;
    out->scopes.push_back(std::move(scope));
  }
  const BlockLog<Event>& src = events();
  for (size_t i = 0; i < src.size(); ++i) out->owned_.Emplace(src[i]).scope = src[i].request;
  return out;
}

}  // namespace torchscan
