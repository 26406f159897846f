// The calls a report is built from, as every view reads them: one ordinary
// log (calls, module scopes, label sets, requests) whatever it was gathered
// from. The session builds one (session/event_set.h: one recorder's log, or
// copies gathered from several thread logs); the views only read it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

struct CallSet {
  CallSet() = default;
  CallSet(const CallSet&) = delete;
  CallSet& operator=(const CallSet&) = delete;

  const BlockLog<Event>& events() const { return *events_; }
  int64_t first_index = 0;  // the scan's index of events()[0] (borrowed sets: calls folded before)

  std::vector<Recorder::Scope> scopes;
  LabelTree label_sets;
  std::vector<std::string> requests;  // ids, by Event::request
  std::vector<int64_t> request_seqs;  // Recorder::Request::seq, by Event::request
  // Keep each module call's own call index (Recorder::aggregate_layers:
  // counted within its request) instead of numbering calls across the set.
  bool keep_call_index = false;
  int64_t in_flight = 0;              // calls left out because they were still running
  const MemoryLog* memory = nullptr;  // the recorder's allocator log (borrowed sets only)
  // Call times as Recorder::call_times() (ScanOptions::timestamps): the
  // recorder's (borrowed sets), or copies when every recorder added took them.
  const std::vector<int64_t>* times = nullptr;
  // Copied sets: (first call, thread number) of each recorder added, in call
  // order, so the trace puts every call on its thread's track.
  std::vector<std::pair<size_t, int64_t>> thread_starts;

 protected:
  BlockLog<Event> owned_;
  std::vector<int64_t> owned_times_;
  bool all_timed_ = true;  // every recorder added took timestamps
  const BlockLog<Event>* events_ = &owned_;
  std::map<std::string, int32_t> request_index_;
  std::map<std::string, int32_t> calls_per_path_;
};

}  // namespace torchscan
