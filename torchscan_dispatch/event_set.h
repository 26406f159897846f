// The calls a report is built from: one recorder's log as it is, or copies
// gathered from several thread logs (an all-threads scan), optionally only
// some threads or requests. Parents, scopes, labels and requests are
// re-indexed so every report builder sees one ordinary log.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "torchscan_dispatch/scan_state.h"
#include "torchscan_dispatch/streaming.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {

struct EventSet {
  EventSet() = default;
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;

  // Borrows `r`'s calls (no copies); the recorder must outlive the set.
  explicit EventSet(const Recorder& r);

  // Copies calls [0, count) of `r`, recorded by thread `thread`, that pass
  // `filter`. Call while `r` cannot change (its log locked, or stopped).
  void Add(const Recorder& r, size_t count, int64_t thread, const ReportFilter& filter);

  // The same calls with each call's scope replaced by its request (one scope
  // per request, named by its id): per-request values in one tally.
  std::unique_ptr<EventSet> ByRequest() const;

  const BlockLog<Event>& events() const { return *events_; }
  // Streaming scans (streaming.h): the sums of the calls the recorders folded
  // before these, with rows by this set's scopes and requests (nullptr: none
  // folded), and per thread the receptive-field state those calls left.
  const Folded* folded() const { return folded_; }
  struct ThreadFlow {
    size_t begin = 0, end = 0;  // the thread's calls in events()
    int64_t thread = 0;
    FieldFlow fields;
  };
  std::vector<ThreadFlow> flows;
  int64_t first_index = 0;  // the scan's index of events()[0] (borrowed sets: calls folded before)

  std::vector<Recorder::Scope> scopes;
  LabelTree label_sets;
  std::vector<std::string> requests;  // ids, by Event::request
  std::vector<int64_t> request_seqs;  // Recorder::Request::seq, by Event::request
  // Add keeps each module call's own call index (Recorder::aggregate_layers:
  // counted within its request) instead of numbering calls across the set.
  bool keep_call_index = false;
  int64_t in_flight = 0;              // calls left out because they were still running
  const MemoryLog* memory = nullptr;  // the recorder's allocator log (borrowed sets only)
  // Call times as Recorder::call_times() (ScanOptions::timestamps): the
  // recorder's (borrowed sets), or copies when every recorder added took them.
  const std::vector<int64_t>* times = nullptr;
  // Copied sets: (first call, thread number) of each Add, in call order, so
  // the trace puts every call on its thread's track.
  std::vector<std::pair<size_t, int64_t>> thread_starts;

 private:
  int32_t RequestIndex(const std::string& id, int64_t seq);  // in `requests`, added if new
  Folded* Folds();                                           // owned_folded_, created on first use
  BlockLog<Event> owned_;
  std::vector<int64_t> owned_times_;
  bool all_timed_ = true;  // every recorder added took timestamps
  const BlockLog<Event>* events_ = &owned_;
  std::unique_ptr<Folded> owned_folded_;
  const Folded* folded_ = nullptr;
  std::map<std::string, int32_t> request_index_;
  std::map<std::string, int32_t> calls_per_path_;
};

}  // namespace torchscan
