// The calls a report is built from: one recorder's log as it is, or copies
// gathered from several thread logs (an all-threads scan), optionally only
// some threads or requests. Parents, scopes, labels and requests are
// re-indexed so every report builder sees one ordinary log (CallSet), with
// the sums streaming scans folded before those calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "torchscan_dispatch/core/call_set.h"
#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/session/streaming.h"
#include "torchscan_dispatch/types.h"

namespace torchscan {

struct EventSet : CallSet {
  EventSet() = default;

  // Borrows `r`'s calls (no copies); the recorder must outlive the set.
  explicit EventSet(const Recorder& r);

  // Copies calls [0, count) of `r`, recorded by thread `thread`, that pass
  // `filter`. Call while `r` cannot change (its log locked, or stopped).
  void Add(const Recorder& r, size_t count, int64_t thread, const ReportFilter& filter);

  // The same calls with each call's scope replaced by its request (one scope
  // per request, named by its id): per-request values in one tally.
  std::unique_ptr<EventSet> ByRequest() const;

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

 private:
  int32_t RequestIndex(const std::string& id, int64_t seq);  // in `requests`, added if new
  Folded* Folds();                                           // owned_folded_, created on first use
  std::unique_ptr<Folded> owned_folded_;
  const Folded* folded_ = nullptr;
};

}  // namespace torchscan
