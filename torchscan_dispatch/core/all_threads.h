// Scans that cover every thread (ScanOptions::threads == Threads::kAll).
// Each thread that runs ATen work while such a scan is active gets its own
// log: threads that already carry the mode key (inherited through PyTorch's
// thread-local-state propagation) join in the fallback; any other thread
// joins in a global RecordFunction callback on its first observed operator,
// which is recorded there (its key set was computed before the callback ran)
// while everything it calls reaches the fallback. Internal to the engine.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// One thread's calls in an all-threads scan. The owning thread records under
// `Lock()` (uncontended: two atomic operations); a snapshot or stop takes the
// same lock to read a consistent log.
struct ThreadLog {
  Recorder recorder;
  int64_t number = 0;   // 1, 2, ... in the order threads joined
  std::string name;     // the thread's name (pthread), may be empty
  bool sealed = false;  // the scan stopped: nothing more is recorded

  void Lock() {
    while (busy_.test_and_set(std::memory_order_acquire)) {
    }
  }
  void Unlock() { busy_.clear(std::memory_order_release); }

 private:
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

// The process-wide state of the active all-threads scan (at most one).
class AllThreadsScan {
 public:
  AllThreadsScan(bool torchscript_scopes, bool join_on_first_call, bool record_owned_children,
                 bool torchscript_requests = false, bool timestamps = false)
      : torchscript_scopes_(torchscript_scopes),
        join_on_first_call_(join_on_first_call),
        record_owned_children_(record_owned_children),
        torchscript_requests_(torchscript_requests),
        timestamps_(timestamps) {}
  // Streaming scans: each thread's recorder gets a Folder from this, given
  // the thread's number (set before Start).
  std::function<std::shared_ptr<Folder>(int64_t thread)> make_folder;
  size_t fold_every = 0;
  // Layer rows aggregated across requests (Recorder::aggregate_layers).
  bool aggregate_layers = false;

  absl::Status Start();  // fails when another all-threads scan is active
  void Stop();           // seals every log; later calls are not recorded
  // timestamps: when Stop() began (SteadyNowNs); calls and scopes still
  // open then end there in a trace. 0 before.
  int64_t stopped_ns() const { return stopped_ns_; }

  // Copies of the logs' handles (joining threads may add more meanwhile).
  std::vector<std::shared_ptr<ThreadLog>> Logs() const;
  // Joins the calling thread (under the scan's mutex); nullptr if the scan
  // with `generation` is no longer active.
  std::shared_ptr<ThreadLog> Join(uint64_t generation);

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ThreadLog>> logs_;
  uint64_t generation_ = 0;
  bool torchscript_scopes_;
  bool join_on_first_call_;
  bool record_owned_children_;
  bool torchscript_requests_;
  bool timestamps_;  // every thread's recorder reads the clock per call (traces)
  int64_t stopped_ns_ = 0;
  uint64_t callback_ = 0;  // RecordFunction handle (0: none)
};

// Generation of the active all-threads scan; 0 when none is active.
std::atomic<uint64_t>& AllThreadsGeneration();

// The calling thread's link to an all-threads scan.
struct ThreadLink {
  uint64_t generation = 0;
  std::shared_ptr<ThreadLog> log;
  bool set_key = false;  // joining switched the mode key on in this thread
};
// nullptr once the thread's thread-local storage is being torn down (e.g.
// atexit handlers of the main thread): callers then do nothing.
ThreadLink* ThisThreadLink();

// The calling thread's log in the active all-threads scan, joining it on
// first use; nullptr when no all-threads scan is active.
std::shared_ptr<ThreadLog> AllThreadsLog();

// After an all-threads scan stopped: switches the mode key off again in a
// thread that the scan switched it on in. True when it did.
bool LeaveFinishedAllThreadsScan();

// Runs `f` on every recorder that records this thread's calls (its own
// scans, innermost first, then its all-threads log, locked).
void ForEachThreadRecorder(absl::FunctionRef<void(Recorder&)> f);

// TorchScript function boundaries reach recorders with torchscript_scopes
// set while at least one such scan is active (reference counted).
void AcquireTorchScriptCallback();
void ReleaseTorchScriptCallback();

}  // namespace torchscan
