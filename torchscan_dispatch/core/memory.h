// Memory observer: the allocator's own reports of every block allocated and
// freed while a scan runs, each tied to the call that was running. PyTorch's
// allocators report to whatever sits in the thread's PROFILER_STATE debug-info
// slot (c10::reportMemoryUsageToProfiler); torch.profiler uses the same slot,
// so a scan shares it with no one: it refuses to stack on a profiler that is
// already running, and notices when one is started on top of it.
// Internal to the engine; the analysis over the log is memory_view.h.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace torchscan {

// One allocator report in scan order.
struct MemoryEntry {
  int64_t bytes;  // > 0: a block allocated; < 0: a block freed
  int32_t event;  // the innermost call running in the scanning thread (-1: none)
  int32_t match;  // allocation: entry of its free (-1: still alive when the scan stopped);
                  // free: entry of its allocation (-1: a block allocated before the scan)
  c10::DeviceType device;
};

// A recorder's allocator log (one scan of one thread).
struct MemoryLog {
  bool enabled = false;            // the scan asked for memory attribution
  std::string unavailable;         // why attribution could not run (empty: it ran)
  bool shadowed = false;           // another observer (torch.profiler) took the slot for a while
  int64_t other_threads = 0;       // reports from threads the scan does not cover
  int64_t unseen_frees = 0;        // blocks handed out again whose free was never reported
  const void* observer = nullptr;  // the DebugInfoBase reports come through (shadow check)
  std::vector<MemoryEntry> entries;
  absl::flat_hash_map<const void*, int32_t> live;  // block -> its allocation entry

  // `event`: the innermost call running (Recorder::open).
  void Record(const void* ptr, int64_t bytes, c10::DeviceType device, int32_t event);
  size_t size() const { return entries.size(); }
};

class Recorder;

// Puts an observer into this thread's PROFILER_STATE slot for one recorder's
// scan (or joins the TorchScan observer already there, from an enclosing
// scan), and takes it out again. Reports reach every recorder of the thread's
// scan chain that asked for memory.
class MemoryAttribution {
 public:
  MemoryAttribution();
  ~MemoryAttribution();
  // Sets r.memory().enabled, or r.memory().unavailable with the reason.
  // Call with r on top of the thread's scan chain.
  void Start(Recorder& r);
  // Takes the observer out when this scan put it in and it is still on top;
  // otherwise leaves it inert (it reports nothing any more).
  void Stop(Recorder& r);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace torchscan
